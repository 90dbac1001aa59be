"""Tool calls: scheduling, the run itself, and what a call leaves behind.

A call.  A `Call` is made when a `call` fid's JSON is complete and valid.  It runs in a
task of its own, independent of the fid and the connection that wrote it (9pfuse clunks
at once; `9p write` hangs up at once), and ends in the tool's latest `out`, `err` and
`status`.  Its state is one of states.py's.

Scheduling.  Calls of `readOnly` tools run as soon as a run slot is free for them; other
calls of one agent also take the agent's lock, so they run one at a time in the order
they were written (asyncio.Lock is FIFO).  Slots are shared fairly (slots.py): a
session, and an agent within it, holds at most its share, and a freed slot goes to the
waiting call whose session holds the fewest.  A call written through the connection of
a running call is its child (nested.py): it takes its turn and its slot under its
parent's, never waiting for what an ancestor holds, and ends with it.  A call waiting
for a slot or the lock is `queued`.

Killing.  A flush of the reading fid, `cancel`, `tool_unload`, the removal of the agent
or session, and shutdown cancel the task, and the runner kills the run's whole PID
namespace (SIGKILL to its init; without PID namespaces, a subreaper kills its orphans:
doc/sandbox.md) before the task ends.  A call ended that way is over,
not interrupted: its readers get `cancelled (input/output error)`, EIO through 9pfuse,
which no program retries; `interrupted` (EINTR) is only ever the answer to the flushed
request itself (server.py).
"""
from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from typing import Any, Callable

from ... import errors as E
from ...errors import P9Error, busy, defuse, fit
from ...record import Plain
from ...registry import warmstart
from ...run.live import Live, parse as parse_progress
from ...run.pumps import last_line
from ...run.runner import RunRequest
from ...run.sandbox import load_profile
from ...run.secrets import SecretError, Values, read as read_secrets
from ..resident.manager import COLD, Residents
from ..state.sessions import Agent
from . import nested
from .states import State
from .slots import FairSlots

log = logging.getLogger("toolsrv.calls")

MiB = 1 << 20


class Call(Plain):
    FIELDS = ("tool", "agent", "args", "elevated", "state", "result", "reason", "started",
              "duration", "done", "kill", "task", "stdin", "detail")

    def __init__(self, tool: str, agent: Agent, args: dict, elevated: bool,
                 state: str = State.QUEUED, result: Any = None, reason: str | None = None,
                 started: float | None = None, duration: float = 0.0,
                 done: asyncio.Event | None = None, kill: asyncio.Event | None = None,
                 task: asyncio.Task | None = None, stdin: bytes | None = None,
                 detail: str | None = None) -> None:
        self.tool = tool
        self.agent = agent
        self.args = args
        self.elevated = elevated
        self.state = state      # queued running ok exit timeout killed invalid refused
                                # (resident tools: error failed)
        self.result = result    # the runner's RunResult
        self.reason = reason    # the Rerror a reader gets, None on success
        self.started = time.monotonic() if started is None else started
        self.duration = duration
        self.done = asyncio.Event() if done is None else done
        self.kill = asyncio.Event() if kill is None else kill   # set: end the run, keep output
        self.task = task
        self.stdin = stdin      # the args as the tool reads them; None: made from args
        self.detail = detail    # the whole reason, for the log, when the Rerror cuts it
        self.waiters: list[Callable[[], None]] = []   # called once the call has ended
        self.handed = False     # its first reader of out or err waits for it (tree/agent.py),
        self.heir: Any = None   # on this connection (None: any)
        self.live: Live | None = None   # its output so far while it runs (run/live.py)
        self.meta: dict[str, str] = {}  # its context: principal, traceparent (take_meta)
        self.principal: dict | None = None  # who wrote it (tree/agent.py), for its audit
        self.parent: Call | None = None     # the running call that wrote it (nested.py)
        self.children: list[Call] = []      # its own nested calls not yet ended
        self.turn: asyncio.Lock | None = None   # its children's turns, while it holds one
        self.lend: asyncio.Lock | None = None   # its slot, lent to one child at a time
        self.deadline: float | None = None  # when its time limit ends its run
        self.span: Any = None               # its trace span, when traced (serve/traces.py),
        self.arrived = self.started         # begun as it arrived
        self.trace: str | None = None       # that span's traceparent, for its run and remotes
        self.secrets: Values | None = None  # its tool's secrets while it runs (run/secrets.py)
        self.broker: str | None = None      # the approval broker its writer's connection
                                            # named (tree/policy/consent.py), else None

    @property
    def stdout(self) -> bytes:
        return self.result.stdout if self.result is not None else b""

    @property
    def stderr(self) -> bytes:
        return self.result.stderr if self.result is not None else b""

    def status_line(self) -> str:
        if self.state in (State.QUEUED, State.RUNNING):
            live = self.live.status_words() if self.live is not None else ""
            return f"{self.state} {time.monotonic() - self.started:.3f}s{live}\n"
        words = [self.state]
        r = self.result
        if self.state == State.EXIT and r is not None:
            words.append(str(r.exit_code))
        if self.state in (State.INVALID, State.REFUSED, State.FAILED) and self.reason:
            words = [f"{self.state}: {self.reason}"]
        words.append(f"{self.duration:.3f}s")
        if r is not None and r.truncated:
            words.append(f"truncated {r.truncated}")
        if r is not None and r.signal and self.state == State.KILLED:
            words.append(f"signal {r.signal}")
        return " ".join(words) + "\n"


def invalid_call(tool: str, agent: Agent, reason: str) -> Call:
    c = Call(tool, agent, {}, False, state="invalid", reason=reason)
    c.done.set()
    return c


def _progress(line: str) -> bool:
    return parse_progress(line) is not None     # a progress report is no reason


def limit_source(profile: Any) -> str:
    """Where a run's time limit comes from, told so the timeout names what to change."""
    if getattr(profile, "timeout", None):
        return f"general.timeout in sandbox profile {profile.name}"
    name = getattr(profile, "name", None) or "default"
    return f"toolsrv serve --timeout, or general.timeout in sandbox profile {name}"


def outcome(call: Call, limit: str = "") -> None:
    """Set state and reason from the runner's result (`limit`: where the time limit comes
    from, for a timeout's reason)."""
    r = call.result
    if call.kill.is_set() and (r.error or r.cancelled or r.exit_code != 0):
        call.state, call.reason = State.KILLED, E.ECANCELLED   # we stopped it
    elif r.error:
        call.state, call.reason = State.REFUSED, r.error
    elif r.truncated:
        call.state = State.KILLED
        n, f = _size(r), "out" if r.truncated == "stdout" else "err"
        call.reason = (f"output too long: {r.truncated} cut at {n}, the cap (toolsrv serve "
                       f"--max-output); {f} holds its first {n}")
    elif r.timed_out:
        call.state = State.TIMEOUT
        call.reason = fit(f"timeout after {r.timeout_used:g}s ",
                          f"(limit: {limit or limit_source(None)}); out and err keep its output",
                          "")
        call.detail = call.reason.full
    elif r.cancelled:
        call.state, call.reason = State.KILLED, E.ECANCELLED
    elif r.exit_code == 0:
        call.state, call.reason = State.OK, None
    elif r.exit_code is not None:
        # toolsrv's words decide the errno (EIO): the tool's own, after them, are defused,
        # or a tool's "no such file" would reach the shell as ENOENT (errors.defuse)
        call.state = State.EXIT
        why = last_line(r.stderr, _progress) or last_line(r.stdout, _progress)
        head = f"exit {r.exit_code:d} (input/output error)"
        if b"Traceback (most recent call last):" in r.stderr:   # a Python tool's exception
            head += ", traceback in err"
        call.reason = f"{head}: {defuse(why)}" if why else head
        call.detail = f"{head}: {why}" if why else head
    else:
        call.state = State.KILLED
        call.reason = f"killed by signal {r.signal or 0:d} (input/output error)"


def _secrets(tool: Any) -> Values | None:
    """The values of the tool's secrets, read now (run/secrets.py), or None when it names
    none; a P9Error naming the secret and where it looked when one cannot be used."""
    names = getattr(tool, "secrets", ())
    if not names:
        return None
    try:
        return read_secrets(names)
    except SecretError as e:
        raise P9Error(str(e), e.full) from None


def scrub(call: Call, values: Values, config: Any = None) -> None:
    """Each secret's value as `[secret NAME]` in what the call's run gave back: its out
    and err (in a stream the output cap cut, a value's beginning at its end too), and its
    reason; then the call lets go of the values.  Done once, where the result is
    assembled, before a reader is woken."""
    r = call.result
    if r is not None:
        out_cap = getattr(config, "stdout_cap", None)
        err_cap = getattr(config, "stderr_cap", None)
        r.stdout = values.redact_bytes(r.stdout, r.truncated is not None and out_cap
                                       is not None and len(r.stdout) >= out_cap)
        r.stderr = values.redact_bytes(r.stderr, r.truncated is not None and err_cap
                                       is not None and len(r.stderr) >= err_cap)
        r.error = values.redact_text(r.error)
    for field in ("reason", "detail"):
        text = getattr(call, field)
        clean = values.redact_text(text)
        if clean != text:
            setattr(call, field, clean)
    call.secrets = None


def _size(r: Any) -> str:
    n = len(r.stdout if r.truncated == "stdout" else r.stderr)
    return f"{n / MiB:g} MiB" if n >= MiB else f"{n} bytes"


class Scheduler:
    """Runs calls through the runner within the server-wide and per-agent limits."""

    def __init__(self, runner: Any, registry: Any, max_runs: int = 16,
                 max_queued: int = 1024, addr: str = "", connect: Any = None,
                 per_session: int | None = None, per_agent: int | None = None) -> None:
        self.runner = runner
        self.registry = registry
        self.connect = connect     # async (session, agent, call) -> socket connected to
                                   # this server, scoped to the agent, or None
        self.slots = FairSlots(max_runs, per_session, per_agent)   # slots.py
        self.max_queued = max_queued
        self.addr = addr
        self.bypass = os.environ.get("OLLIE_BYPASS_SOCKET", "")   # passed on to every tool
        self.live: set[Call] = set()
        self.residents = Residents(runner)   # resident tools' processes (resident.py)
        self.audit: Any = None     # the audit trail (tree/state/audit.py): each call's
                                   # record, written before its readers are woken
        self.metrics: Any = None   # serve/metrics.py: calls by tool and outcome, seconds
        self.traces: Any = None    # serve/traces.py: a span from its arrival to its end

    def start(self, call: Call, tool: Any, profile_name: str) -> None:
        queued = sum(1 for c in self.live if c.state == State.QUEUED)
        if queued >= self.max_queued:
            raise P9Error(busy("too many queued calls", self.max_queued))
        if self.audit is not None:
            self.audit.check()     # a trail that cannot take the record: refused, not run
        self.live.add(call)
        if self.traces is not None:
            self.traces.call_started(call)
        call.task = asyncio.get_running_loop().create_task(self._run(call, tool, profile_name))
        call.task.add_done_callback(lambda _: self._end(call))   # even if cancelled unstarted

    async def _run(self, call: Call, tool: Any, profile_name: str) -> None:
        a = call.agent
        try:
            if tool.read_only:
                await self._slot_run(call, tool, profile_name)
            else:
                async with nested.turn(call):     # the agent's lock, or a parent's turn
                    call.turn = asyncio.Lock()
                    await self._slot_run(call, tool, profile_name)
        except asyncio.CancelledError:
            if call.result is None:
                call.state, call.reason = State.KILLED, E.ECANCELLED
        except P9Error as e:      # refused before the run: a bad profile, say
            call.state, call.reason, call.detail = State.REFUSED, e.ename, e.full
        except Exception as e:
            log.exception("call of %s failed", call.tool)
            why = fit("input/output error: ", str(e), "")
            call.state, call.reason, call.detail = State.REFUSED, why, why.full
        finally:
            self._end(call)

    def _end(self, call: Call) -> None:
        """Once per call: it leaves the live set and wakes its readers."""
        if call.done.is_set():
            return
        if call.state in (State.QUEUED, State.RUNNING) and call.result is None:
            call.state, call.reason = State.KILLED, E.ECANCELLED   # never started
        call.duration = time.monotonic() - call.started
        if self.audit is not None:     # its record before its reply, or it is refused
            self.audit.call_ended(call, self.registry.get(call.tool))
        if self.metrics is not None:
            self.metrics.call_ended(call)
        if self.traces is not None:
            self.traces.call_ended(call)
        self.live.discard(call)
        nested.ended(call, self.stop)
        call.done.set()
        waiters, call.waiters = call.waiters, []
        for fn in waiters:       # readers of the result: answered now, not a loop turn later
            try:
                fn()
            except Exception:
                log.exception("a reader of the call of %s failed", call.tool)
        line = call.status_line().strip()
        if call.detail and call.state == State.REFUSED:      # the whole reason, not the cut
            line = line.replace(call.reason or "", call.detail, 1)
        elif call.reason and call.state != State.INVALID:
            line += f": {call.detail or call.reason}"
        child = f" (child of {call.parent.tool})" if call.parent is not None else ""
        call.agent.note(f"call {call.tool}{child} -> {line}")

    async def _slot_run(self, call: Call, tool: Any, profile_name: str) -> None:
        async with nested.slot(self.slots, call):
            remote = getattr(tool, "remote", None)
            if remote is not None:      # another host's tool (toolsrv/hosts): run there
                await remote.run_call(call, tool)   # sets the outcome; nothing runs here
                return
            values = _secrets(tool)     # refused here, before the run, when one is missing
            # a tool may declare the profile it needs (client_9p: "client9p")
            declared = (getattr(tool, "extra", None) or {}).get("sandbox")
            try:
                profile = load_profile(declared if isinstance(declared, str) else profile_name)
            except Exception as e:
                raise P9Error(fit("sandbox: ", str(e))) from None
            s = call.agent.session
            env = {"OLLIE_TOOLS_PATH": ":".join(getattr(self.registry, "dirs", [])),
                   "OLLIE_BYPASS_SOCKET": self.bypass,
                   "PWD": s.cwd, "OLLIE_SESSION_ID": s.name, "OLLIE_AGENT": call.agent.name,
                   "TOOLSRV_ADDR": self.addr}
            traceparent = call.trace or call.meta.get("traceparent")
            if traceparent:                     # W3C Trace Context's variable name
                env["TRACEPARENT"] = traceparent
            if values is not None:              # this run's alone: never state, log, tree
                env.update(values.env)
                call.secrets = values
                call.live = Live()
                call.live.redact = values.redact_text
            conn = None
            if getattr(profile, "toolsrv", False) and self.connect is not None:
                conn = await self.connect(s.name, call.agent.name, call)
                env["TOOLSRV_FD"] = "3"
            own = getattr(profile, "timeout", None) or getattr(
                getattr(self.runner, "config", None), "timeout", None) or 30.0
            seconds, cut = nested.limit(call, own)
            try:
                req = RunRequest(argv=list(tool.command.argv),
                                 stdin=call.stdin if call.stdin is not None else
                                 json.dumps(call.args).encode(), cwd=s.cwd, env=env,
                                 profile=profile, tool_dir=tool.dir, elevated=call.elevated,
                                 context={"session": s.name, "agent": call.agent.name,
                                          "tool": call.tool, "args": call.args, "cwd": s.cwd,
                                          "broker": call.broker},
                                 kill=call.kill, timeout=seconds if cut else None,
                                 extra_fds=(conn.fileno(),) if conn is not None else (),
                                 warm=None if (getattr(tool, "extra", None) or {}).get(
                                     "warm") is False else warmstart.plan)
                call.state = State.RUNNING
                call.started = time.monotonic()
                call.deadline = call.started + seconds
                call.live = req.context["live"] = call.live or Live()
                how: str | None = COLD
                if getattr(tool, "resident", None):
                    how = await self.residents.run(call, tool, req)
                    if how is None:            # it set the outcome
                        return
                if how == COLD:
                    call.result = await self.runner.run(req)
            finally:
                if conn is not None:
                    conn.close()
                if values is not None:          # before anyone can read what it gave back
                    scrub(call, values, getattr(self.runner, "config", None))
            outcome(call, cut or limit_source(profile))

    def stop(self, call: Call) -> None:
        """End one call: a running one is killed and keeps what it printed; a queued
        one never starts."""
        if call.state == State.RUNNING:
            call.kill.set()
        elif call.task is not None:
            call.task.cancel()
        for c in list(call.children):      # and its nested calls (nested.py, rule 5)
            self.stop(c)

    def stop_agent(self, agent: Agent, tools: set[str] | None = None) -> int:
        """Stop the agent's queued and running calls (of `tools`, or all); how many."""
        n = 0
        for c in list(self.live):
            if c.agent is agent and (tools is None or c.tool in tools):
                self.stop(c)
                n += 1
        return n

    async def close(self) -> None:
        tasks = [c.task for c in self.live if c.task]
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.wait(tasks, timeout=10)
        await self.residents.close()
