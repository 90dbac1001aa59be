"""The calls of the agents: a ctl write applied, a call begun, an agent's schemas.

Calls is what the agent's files (tree/agent.py) ask: apply() checks every command of one
ctl write and then applies them all (tool_load, tool_unload, cancel) or raises, and
answers once the store has saved the change (sessions.SessionStore.change; a change that
cannot be saved is undone); begin() validates a call's JSON args against the tool's
schema and hands the Call to the scheduler (scheduler.py), or raises the Rerror for the
writer; latest() is each tool's latest call, which out, err and status read.  Every
outcome is a line in the agent's log.  It is given what it needs (the registry, the
store, the runner and the scheduler's limits), not the App.
"""
from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import json
from typing import Any, Awaitable

from . import ctl, nested, timebound, toolspy
from .scheduler import Call, Scheduler, invalid_call
from ...errors import P9Error, fit
from .jsonargs import take_elevated, take_meta, validate
from ...registry.schemaref import StepsSpent, uses_regex
from ..state.sessions import Agent, SessionStore

MAX_ARGS = 1 << 20  # bytes of JSON args one call may write (default of --max-args)
LOOP_STEPS = 2000   # keywords a check of args may apply on the loop (some ms); then a thread


class Calls:
    """The calls of the agents: their ctl commands, their calls begun, the scheduler."""

    def __init__(self, registry: Any, store: SessionStore, runner: Any, *, max_runs: int,
                 max_queued: int = 1024, addr: str = "", connect: Any = None,
                 per_session: int | None = None, per_agent: int | None = None,
                 max_args: int = MAX_ARGS, timeout: float | None = None) -> None:
        self.registry = registry
        self.store = store
        self.sched = Scheduler(runner, registry, max_runs=max_runs, max_queued=max_queued,
                               addr=addr, connect=connect, per_session=per_session,
                               per_agent=per_agent)
        self.max_args = max_args
        self.timeout = timeout      # serve --timeout (timebound.py)
        self.policy: Any = None     # tree/policy/gate.PolicyGate: who may load and call
        self.store.on_remove_agent.append(lambda a: self.sched.stop_agent(a))
        self.store.on_remove_agent.append(self.sched.residents.drop_agent)

    def schemas(self, a: Agent) -> list[dict]:
        out = []
        for n in a.loaded:
            t = self.registry.get(n)
            if t is not None:
                lim = timebound.limit(t, a.session.sandbox, self.timeout)
                out.append({"name": n, "description": t.description, "prompt": t.prompt,
                            "parameters": timebound.schema(t, lim), "tier": t.tier,
                            "readOnly": t.read_only})
        return out

    def module(self, a: Agent) -> str:
        """The agent's tools.py (toolspy.py): its loaded tools as Python functions."""
        def declares(n: str) -> bool:
            return bool((getattr(self.registry.get(n), "hints", None) or {}).get(
                "outputSchema"))
        return toolspy.module(f"session/{a.session.name}/agent/{a.name}", self.schemas(a),
                              {n for n in a.loaded if declares(n)})

    def latest(self, a: Agent) -> dict[str, Call]:
        return a.extra.setdefault("latest", {})

    # -- ctl --
    def apply(self, a: Agent, text: str, who: str | None = None) -> Any:
        """Check every command of one write, then apply them all, or raise; None once
        saved, or an awaitable of that (sessions.SessionStore.change): a write that cannot
        be saved is undone and fails with the reason.  Unloaded tools' runs end once the
        unload is saved.  `who`: the writer's principal, whose policy a load must pass."""
        try:
            cmds = ctl.parse(text)
            loaded = set(a.loaded)               # as it will be when each line runs
            for verb, names in cmds:
                for n in names:
                    if verb == "tool_load" and self.registry.get(n) is None:
                        more = self.registry.why_missing(n)
                        raise P9Error(fit("tool_load: ", f"no such tool: {n}"
                                          + (f": {more}" if more else ""), ""))
                    if verb == "tool_load" and self.policy is not None and who is not None:
                        self.policy.check_load(who, n)
                    if verb != "tool_load" and n not in loaded:
                        raise P9Error(fit(f"{verb}: ", f"no such tool loaded: {n}", ""))
                loaded = (loaded | set(names) if verb == "tool_load" else
                          loaded - set(names) if verb == "tool_unload" else loaded)
        except P9Error as e:
            a.note(f"ctl {text.strip()!r} -> error: {e.full}")
            raise
        old = list(a.loaded)
        unloaded: list[str] = []
        for verb, names in cmds:
            if verb == "tool_load":
                a.loaded += [n for n in dict.fromkeys(names) if n not in a.loaded]
            elif verb == "tool_unload":
                unloaded += names
                a.loaded[:] = [n for n in a.loaded if n not in names]
            else:
                self.sched.stop_agent(a, set(names))
                self._end_residents(a, names, "cancelled")
            a.note(f"ctl {verb} {' '.join(names)} -> ok")
        if not any(v != "cancel" for v, _ in cmds):
            return None                               # nothing to save
        new = list(a.loaded)

        def undo() -> None:                           # not saved: as it was, runs untouched
            if a.loaded == new:
                a.loaded[:] = old
            a.note(f"ctl {text.strip()!r} -> undone: state not saved")

        def done() -> None:                           # saved: the unloaded tools' runs end
            if unloaded:
                self.sched.stop_agent(a, set(unloaded))
                self._end_residents(a, unloaded, "unloaded")
        return self.store.change(a.session, undo, done)

    def _end_residents(self, a: Agent, names: list[str], why: str) -> None:
        self.sched.residents.drop(a, [self.registry.get(n) for n in names], why)

    # -- call --
    def begin(self, a: Agent, tool_name: str, args: Any, parent: Call | None = None,
              who: str | None = None, broker: str | None = None) -> Call | Awaitable[Call]:
        """Validate args and start the call, or raise the Rerror for the writer.  A check
        that can run a regex, or that takes more than LOOP_STEPS keywords, is made (again)
        in a thread with its whole budget (schemaref: regex, steps), and then this is an
        awaitable of the Call.  `parent`: the running call whose connection wrote it,
        whose child it is (nested.py).  `who`: the principal it is made for, whose
        policy it must pass first (tree/policy/gate.py); a call the policy or its tool's
        .meta (`confirm`) asks to be confirmed waits for the approval broker's answer
        (tree/policy/consent.py): `broker`, the one the writer's connection named, else
        the server's.  An elevated call is asked about once, by the runner, at that
        same broker."""
        tool = self.registry.get(tool_name)
        if tool is None or tool_name not in a.loaded:
            raise P9Error(f"no such tool: {tool_name}")
        if parent is not None and (parent.done.is_set() or parent.agent is not a):
            parent = None           # its run is over (or another agent's): a call of its own
        ask = None
        if self.policy is not None and who is not None:
            try:
                ask = self.policy.check_call(who, tool_name, parent is not None)
            except P9Error as e:
                self._refused(a, tool_name, args, e)
                raise
        if ask is None and (getattr(tool, "hints", None) or {}).get("confirm") is True:
            ask = "confirm"                 # its .meta's (tree/policy/consent.py)
        elevated = isinstance(args, dict) and args.get("elevated") is True \
            and getattr(tool, "remote", None) is None   # the runner asks: one question
        if ask and not elevated:
            return self._confirmed(ask, a, tool_name, args, parent, who, broker)
        return self._begin(a, tool_name, tool, args, parent, who, broker)

    async def _confirmed(self, where: str, a: Agent, tool_name: str, args: Any,
                         parent: Call | None, who: str | None, broker: str | None) -> Call:
        """The call once the approval broker confirmed it (policy.yaml's `confirm`, or
        its .meta's)."""
        try:
            if self.policy is None:
                raise P9Error(fit(f"permission denied: confirm: {tool_name} needs a "
                                  "person's yes: ", "this server asks no broker", ""))
            await self.policy.confirm(where, who, {
                "session": a.session.name, "agent": a.name, "tool": tool_name,
                "args": args, "cwd": a.session.cwd}, broker)
            tool = self.registry.get(tool_name)
            if tool is None or tool_name not in a.loaded:
                raise P9Error(f"no such tool now: {tool_name} (it changed or was unloaded "
                              "while the call waited for its confirmation)")
        except P9Error as e:
            self._refused(a, tool_name, args, e)
            raise
        got = self._begin(a, tool_name, tool, args, parent, who, broker)
        return await got if inspect.isawaitable(got) else got

    def _begin(self, a: Agent, tool_name: str, tool: Any, args: Any, parent: Call | None,
               who: str | None, broker: str | None = None) -> Call | Awaitable[Call]:
        try:
            if not isinstance(args, dict):
                raise P9Error(fit("invalid args: ", "must be a JSON object"))
            elevated = take_elevated(args)
            meta = take_meta(args)
            if parent is not None:
                nested.check(parent, tool_name, args)
            slow = getattr(tool, "runs_regex", None)   # a registry Tool's, worked out once
            if slow is None:
                slow = uses_regex(tool.schema)
            if slow:
                return self._begin_checked(a, tool_name, tool, args, elevated, parent, meta,
                                           who, broker)
            try:
                validate(tool, args, LOOP_STEPS)
            except StepsSpent:
                return self._begin_checked(a, tool_name, tool, args, elevated, parent, meta,
                                           who, broker)
            timebound.check(tool, args, timebound.limit(tool, a.session.sandbox, self.timeout))
        except P9Error as e:
            self._refused(a, tool_name, args, e)
            raise
        return self._start(a, tool_name, tool, args, elevated, parent, meta, who, broker)

    async def _begin_checked(self, a: Agent, tool_name: str, tool: Any, args: dict,
                             elevated: bool, parent: Call | None,
                             meta: dict[str, str] | None = None,
                             who: str | None = None, broker: str | None = None) -> Call:
        try:
            await asyncio.get_running_loop().run_in_executor(_checks(), validate, tool, args)
            if self.registry.get(tool_name) is not tool or tool_name not in a.loaded:
                raise P9Error(f"no such tool now: {tool_name} (it changed or was unloaded "
                              "while its args were checked)")
            timebound.check(tool, args, timebound.limit(tool, a.session.sandbox, self.timeout))
        except P9Error as e:
            self._refused(a, tool_name, args, e)
            raise
        return self._start(a, tool_name, tool, args, elevated, parent, meta, who, broker)

    def _refused(self, a: Agent, tool_name: str, args: Any, e: P9Error) -> None:
        self.latest(a)[tool_name] = invalid_call(tool_name, a, e.ename)
        a.note(f"call {tool_name} {_short(args)} -> {e.full}")

    def _start(self, a: Agent, tool_name: str, tool: Any, args: dict, elevated: bool,
               parent: Call | None = None, meta: dict[str, str] | None = None,
               who: str | None = None, broker: str | None = None) -> Call:
        text = _to_json(args)       # the log line's, and the tool's stdin
        c = Call(tool_name, a, args, elevated)
        c.broker = broker           # the runner asks it when the call is elevated
        c.meta = meta or {}         # jsonargs.take_meta: its principal and traceparent
        try:
            c.stdin = text.encode()
        except UnicodeEncodeError:       # a lone surrogate ("\ud800"): stdin escapes it
            c.stdin = json.dumps(args).encode()
        if parent is not None and not parent.done.is_set():
            nested.started(parent, c)
        if self.policy is not None and who is not None:
            try:                    # its principal's runs (policy.yaml's limits.runs)
                self.policy.take_run(who, c)
            except P9Error as e:
                nested.ended(c, lambda _: None)
                self._refused(a, tool_name, args, e)
                raise
        try:
            self.sched.start(c, tool, a.session.sandbox)
        except P9Error:
            for fn in c.waiters:    # never started: what it took is given back
                fn()
            raise
        self.latest(a)[tool_name] = c
        child = f" (child of {c.parent.tool})" if c.parent is not None else ""
        context = "".join(f" {'for' if k == 'principal' else 'trace'} {v}"
                          for k, v in sorted(c.meta.items()))
        a.note(f"call {tool_name}{child} {_clip(text)}{' elevated' if elevated else ''}"
               f"{context} -> started")
        return c

    async def close(self) -> None:
        await self.sched.close()


_to_json = json.JSONEncoder(ensure_ascii=False).encode   # json.dumps would make one a call
_pool: list[concurrent.futures.ThreadPoolExecutor] = []


def _checks() -> concurrent.futures.ThreadPoolExecutor:
    """The threads that check args that can run a regex or take many steps (made on first
    use; four: a few slow checks at once, while the loop's own default executor stays
    free)."""
    if not _pool:
        _pool.append(concurrent.futures.ThreadPoolExecutor(4, thread_name_prefix="argcheck"))
    return _pool[0]




def _short(args: Any) -> str:
    return _clip(_to_json(args))


def _clip(s: str) -> str:
    return s if len(s) <= 200 else s[:197] + "..."
