"""Nested calls: a call written through the connection a running call was given (issue 45).

Rule 1, parentage.  A run whose profile has `general.toolsrv: true` gets a connection
scoped to its agent (serve/peers.py Internal.connect, tree/scope.py AgentScope); the guard
of that connection names the run's Call, and a call written through it is that call's
child (apply.py Calls.begin).  A child is a real call: its own tool's profile confines it,
never its parent's; it is a run of its own in `status`; the agent's log names its parent
(`call file_write (child of client_9p) -> ok`).

Rule 2, the turn.  An agent's calls of tools that are not `readOnly` take turns (the
agent's lock, scheduler.py).  A child never waits for a turn an ancestor holds: it takes
its turn among the children of its nearest ancestor holding one (Call.turn, made when that
ancestor's turn began), so siblings still go one at a time while their parent, which holds
the agent's turn, waits for them.

Rule 3, run slots.  A child takes a run slot at once when one is free for it (the server's,
its session's and its agent's shares, slots.py FairSlots.take).  Otherwise it runs in its
parent's slot, one child at a time (Call.lend): a parent waiting for its child holds the
slot the child needs, so with every slot held by parents, their children still run; a
child never waits for the pool, so parents and children cannot wait on each other.

Rule 4, time.  A child runs under the smaller of its own time limit and what is left of its
parent's (`limit`).

Rule 5, the end.  A parent that ends, whichever way (done, cancelled, killed, its time
limit), stops its children still queued or running, and they theirs.

Rule 6, bounds.  A chain of calls is at most MAX_DEPTH deep; a child whose tool and args
are those of an ancestor would repeat itself until that bound, and is a cycle.  Either
fails the write of the call at once, naming the bound (`check`).
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import time
from collections.abc import AsyncIterator
from typing import Any

from ...errors import P9Error, fit
from .slots import FairSlots

MAX_DEPTH = 8   # calls in one chain below the one an agent made from outside


def chain(call: Any) -> list[Any]:
    """call and its ancestors, the outermost first."""
    out = []
    while call is not None:
        out.append(call)
        call = call.parent
    return out[::-1]


def check(parent: Any, tool: str, args: Any) -> None:
    """Refuse a child of `parent` past MAX_DEPTH or repeating an ancestor (a P9Error)."""
    calls = chain(parent)
    names = " > ".join(c.tool for c in calls[-3:])
    if len(calls) >= MAX_DEPTH + 1:
        raise P9Error(fit("nested call refused: ", f"{tool} would be {len(calls)} calls "
                          f"below the agent's, past the bound of {MAX_DEPTH} nested calls "
                          f"(after {names})"))
    for c in calls:
        if c.tool == tool and _same(c.args, args):
            raise P9Error(fit("nested call refused: ", f"a cycle: {tool} with the same args "
                              f"as its ancestor (after {names}); it would repeat until the "
                              f"bound of {MAX_DEPTH} nested calls"))


def _same(a: Any, b: Any) -> bool:
    try:
        return json.dumps(a, sort_keys=True) == json.dumps(b, sort_keys=True)
    except (TypeError, ValueError):
        return False


def turn(call: Any) -> asyncio.Lock:
    """The lock whose turn call waits for (rule 2)."""
    p = call.parent
    while p is not None:
        if p.turn is not None:
            return p.turn
        p = p.parent
    lock: asyncio.Lock = call.agent.extra.setdefault("lock", asyncio.Lock())
    return lock


@contextlib.asynccontextmanager
async def slot(slots: FairSlots, call: Any) -> AsyncIterator[None]:
    """A run slot for call's run (rule 3)."""
    s, a = call.agent.session.name, call.agent.name
    if call.parent is None:
        async with slots.hold(s, a):
            yield
    elif slots.take(s, a):
        try:
            yield
        finally:
            slots.give_back(s, a)
    else:
        if call.parent.lend is None:
            call.parent.lend = asyncio.Lock()
        async with call.parent.lend:
            yield


def limit(call: Any, own: float) -> tuple[float, str | None]:
    """(seconds, None) of call's own limit `own`, or, when what is left of its parent's is
    less (rule 4), that and where it comes from."""
    p = call.parent
    if p is None or p.deadline is None:
        return own, None
    left = p.deadline - time.monotonic()
    if left >= own:
        return own, None
    return max(left, 0.01), f"what was left of the time limit of its parent {p.tool}"


def started(parent: Any, child: Any) -> None:
    """child is parent's, until it ends (Scheduler._end drops it)."""
    child.parent = parent
    parent.children.append(child)


def ended(call: Any, stop: Any) -> None:
    """call has ended: its children still live are stopped (rule 5), and it leaves its
    parent's children."""
    for c in list(call.children):
        if not c.done.is_set():
            stop(c)
    if call.parent is not None and call in call.parent.children:
        call.parent.children.remove(call)
