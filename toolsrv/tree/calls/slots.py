"""Run slots shared fairly between sessions, and between the agents of a session (issue 25).

Theory of operation.  `--max-runs` slots serve the whole server, as a semaphore did; on top
of that a session holds at most `per_session` of them and an agent at most `per_agent`
(defaults: half of --max-runs, and half of that), so one agent's or one session's burst
of long read-only calls always leaves slots to the others.  A call takes a slot at once
when one is free and its session and agent are under their caps; otherwise it waits.  When
a slot frees, it goes to the waiting call whose session holds the fewest slots, then whose
agent holds the fewest within its session, then the one that has waited longest: so a
waiting call of another session starts as soon as one run ends, ahead of the hog's next.
Invariants: `used` is the sum of what sessions hold and never exceeds `total`; a grant
counts from the moment it is made (a waiter cancelled after its grant gives it back);
every release re-runs the dispatch.
"""
from __future__ import annotations

import asyncio
import contextlib
import itertools
from collections.abc import AsyncIterator


def default_caps(total: int, per_session: int | None, per_agent: int | None
                 ) -> tuple[int, int]:
    """(per session, per agent): half of the server's slots, half of a session's; each at
    least 1 and at most the level above it."""
    s = max(1, min(total, per_session if per_session else total // 2))
    a = max(1, min(s, per_agent if per_agent else s // 2))
    return s, a


def _drop(counts: dict, key: object) -> None:
    """One fewer held under key; the key goes when none is left."""
    if counts[key] > 1:
        counts[key] -= 1
    else:
        del counts[key]


class _Waiter:
    __slots__ = ("seq", "session", "agent", "fut")

    def __init__(self, seq: int, session: str, agent: str, fut: asyncio.Future) -> None:
        self.seq, self.session, self.agent, self.fut = seq, session, agent, fut


class FairSlots:
    """`async with slots.hold(session, agent):` runs the body in one of `total` slots."""

    def __init__(self, total: int, per_session: int | None = None,
                 per_agent: int | None = None) -> None:
        self.total = max(1, total)
        self.per_session, self.per_agent = default_caps(self.total, per_session, per_agent)
        self.used = 0
        self.sessions: dict[str, int] = {}
        self.agents: dict[tuple[str, str], int] = {}
        self.waiting: list[_Waiter] = []
        self._seq = itertools.count()

    def _fits(self, session: str, agent: str) -> bool:
        return (self.used < self.total and self.sessions.get(session, 0) < self.per_session
                and self.agents.get((session, agent), 0) < self.per_agent)

    def _grant(self, session: str, agent: str) -> None:
        self.used += 1
        self.sessions[session] = self.sessions.get(session, 0) + 1
        self.agents[(session, agent)] = self.agents.get((session, agent), 0) + 1

    def _release(self, session: str, agent: str) -> None:
        self.used -= 1
        _drop(self.sessions, session)
        _drop(self.agents, (session, agent))
        self._dispatch()

    def _dispatch(self) -> None:
        while self.used < self.total and self.waiting:
            best = None
            for w in self.waiting:
                if w.fut.done() or not self._fits(w.session, w.agent):
                    continue
                rank = (self.sessions.get(w.session, 0), self.agents.get((w.session, w.agent), 0),
                        w.seq)
                if best is None or rank < best[0]:
                    best = (rank, w)
            if best is None:
                return
            w = best[1]
            self.waiting.remove(w)
            self._grant(w.session, w.agent)
            w.fut.set_result(None)

    @contextlib.asynccontextmanager
    async def hold(self, session: str, agent: str) -> AsyncIterator[None]:
        """One slot for the body, taken fairly (see the module's comment)."""
        if self._fits(session, agent):
            self._grant(session, agent)
        else:
            fut = asyncio.get_running_loop().create_future()
            w = _Waiter(next(self._seq), session, agent, fut)
            self.waiting.append(w)
            try:
                await fut
            except asyncio.CancelledError:
                if w in self.waiting:
                    self.waiting.remove(w)
                elif fut.done() and not fut.cancelled():
                    self._release(session, agent)    # granted just before the cancel
                raise
        try:
            yield
        finally:
            self._release(session, agent)

    def take(self, session: str, agent: str) -> bool:
        """A slot at once when one is free for (session, agent), else False and nothing
        held: a nested call's first try (nested.py).  give_back returns it."""
        if not self._fits(session, agent):
            return False
        self._grant(session, agent)
        return True

    def give_back(self, session: str, agent: str) -> None:
        """Return a slot `take` gave."""
        self._release(session, agent)

    def held(self, session: str) -> int:
        """The slots `session` holds now."""
        return self.sessions.get(session, 0)
