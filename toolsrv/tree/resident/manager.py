"""Resident tools: one process per agent and tool kept between calls (issue 17).

A tool whose .meta says `"resident"` is not run per call.  `Residents` keeps, per agent, an
`Entry` per process key (lines: the tool's name; mcp: the resolved command, so the .meta
files of one agent that name the same MCP server share one process; python: pyrun.key,
the tools directory, declared sandbox and interpreter, so an agent's bundled Python tools
share one interpreter, which ends with the last of them unloaded) and gives each call
of that tool to the entry's process, starting it first when there is none:
  - start: `Runner.open_resident`, confined as a cold run is, in the session's cwd and
    sandbox; a change of either, or an edit of the profile's file (the Profile compared
    whole, so its grants are what counts), restarts the process at the next call;
  - a call: `process.lines_call`, or `tools/call` through `mcp.Client`
    (initialized once per process); calls of one entry run one at a time, in order (the
    entry's lock is FIFO);
  - an outcome: {"output"} is `ok`; {"error"} (or an MCP error) is `error`, its text the
    Rerror; a failure (garbage, EOF, exit, a reply over the cap, the timeout) fails the call
    with a reason naming it and kills the process: the next call starts a fresh one;
  - back-off: a process that fails before it ever answered counts as a failed start; after
    two in a row, starts wait 1, 2, 4 ... 60 s, and calls meanwhile fail at once, saying so;
  - ending: cancel, a flush of the waiting read (the call's kill), tool_unload, removal of
    the agent or session and shutdown kill the process (an MCP server is first told
    `notifications/cancelled` and killed after GRACE); `idle` seconds without a call
    sends SIGTERM, then SIGKILL after GRACE.
`status_line` is the second line of the tool's `status`: `resident up 42s, 17 calls`,
`resident stopped: idle`.

Language servers (protocol lsp, issue 31) are the session's, not an agent's: one process
per session and command (`shared`), used by every agent of the session that calls an
lsp_* tool naming that command; it ends when the last of those agents unloads its lsp
tools or is removed, when idle, and restarts on a change of the session's cwd or sandbox.
The process is the bridge (tree/resident/lspbridge.py) with the server as its child; a call is
resident.lspedit.run over the entry's lspproto.Client (initialized once per process).

Secrets (issue 50, run/secrets.py): a process gets its tool's secrets in its environment
when it starts, as a cold run does, and keeps them.  So a tool's secret names are part of
its entry's key (tools that name others never share its process: a python interpreter
of tools of one directory is one per set of names), and their values' digest is part of
what it was started with: a call that reads other values (a rotated secret) restarts it
first, as a changed cwd does.  Whatever it gives back (output, error, failure, stderr)
and what the entry says of it (log, status) is redacted with the values it has.
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from ... import errors as E
from ...errors import defuse
from ...record import Plain
from . import lspedit, lspproto, mcp as mcpproto, process as resident, pyrun
from ...run.runner import RunRequest, RunResult
from ...run.secrets import Values
from ...errors import fit
from ..calls.states import State

log = logging.getLogger("toolsrv.resident")

GRACE = 2.0        # seconds between SIGTERM (or notifications/cancelled) and SIGKILL
BACKOFF = 1.0      # the first wait between starts once a tool keeps dying at start
BACKOFF_MAX = 60.0
RAN, COLD = "ran", "cold"   # what Residents.run leaves to its caller


class Entry(Plain):
    """One resident process slot of an agent: the process (if up) and its history.  Its
    fields are what it is made with; the rest is its state, kept out of its repr."""
    FIELDS = ("key", "protocol", "idle", "agent", "name")

    def __init__(self, key: tuple, protocol: str, idle: float, agent: Any = None,
                 name: str = "") -> None:
        self.key = key
        self.agent = agent              # whose log hears of starts and ends
        self.name = name                # the tool that first started it
        self.protocol = protocol
        self.idle = idle
        self.proc: resident.Process | None = None
        self.client: mcpproto.Client | lspproto.Client | None = None
        self.where: tuple = ()          # (cwd, Profile, command) it was started with
        self.fails = 0                  # failed starts in a row
        self.next_try = 0.0             # monotonic time before which no start is tried
        self.stopped = ""               # why the last process ended
        self.timer: asyncio.TimerHandle | None = None
        self.lock = asyncio.Lock()
        self.users: dict[Any, set[str]] = {}   # lsp: the agents that share it, their tools;
        #                                        python: the agent's tools that called it
        self.said: set[tuple[str, str]] = set()   # python: (tool, why) a call ran cold
        self.secrets: Values | None = None      # the values its process was started with

    def status_line(self) -> str:
        p = self.proc
        if p is not None and p.alive:
            n = p.calls
            return f"resident up {time.monotonic() - p.started:.0f}s, {n} call" \
                   f"{'' if n == 1 else 's'}"
        if not self.stopped:
            return ""
        line = f"resident stopped: {self.stopped}"
        wait = self.next_try - time.monotonic()
        if wait > 0:
            line += f"; {self.fails} failed starts, next start in {wait:.0f}s"
        return line


def entry_key(tool: Any) -> tuple:
    r = tool.resident
    if r["protocol"] in ("mcp", "lsp"):
        return _named((r["protocol"], tuple(tool.command.argv)), tool)
    if r["protocol"] == "python":       # one interpreter for an agent's tools alike
        return _named(pyrun.tool_key(tool), tool)
    return (r["protocol"], tool.name)      # lines


def _named(key: tuple, tool: Any) -> tuple:
    """The key of a tool that names secrets: its process is not shared with tools that
    name others (the module's header)."""
    names = getattr(tool, "secrets", ())
    return key + (("secrets", *names),) if names else key


class Residents:
    """Every resident process of the server, by agent; see the module's header."""

    def __init__(self, runner: Any) -> None:
        self.runner = runner
        self.live: set[Entry] = set()    # entries with a process up
        self.dying: set[resident.Process] = set()   # killed after a grace period
        self.shared: dict[tuple, Entry] = {}    # lsp: (session, key) -> the session's entry

    def entries(self, agent: Any) -> dict[tuple, Entry]:
        return agent.extra.setdefault("resident", {})

    def entry(self, agent: Any, tool: Any, key: tuple | None = None) -> Entry:
        key = key or entry_key(tool)
        if key[0] == "lsp":
            e = self.shared.get((agent.session, key))
            if e is None:
                r = tool.resident
                e = self.shared[(agent.session, key)] = Entry(key, "lsp", r["idle"], agent,
                                                              tool.name)
            e.users.setdefault(agent, set()).add(tool.name)
            return e
        d = self.entries(agent)
        e = d.get(key)
        if e is None:
            r = tool.resident
            e = d[key] = Entry(key, r["protocol"], r["idle"], agent, tool.name)
        if e.protocol == "python":
            e.users.setdefault(agent, set()).add(tool.name)
        return e

    def status_line(self, agent: Any, tool: Any) -> str:
        if tool is None or not getattr(tool, "resident", None):
            return ""
        key = entry_key(tool)
        e = self.shared.get((agent.session, key)) if key[0] == "lsp" else \
            self.entries(agent).get(key)
        return e.status_line() if e is not None else ""

    def status_text(self) -> str:
        """The server's /status line of resident processes: how many are up, by protocol."""
        up: dict[str, int] = {}
        for e in self.live:
            if e.proc is not None and e.proc.alive:
                up[e.protocol] = up.get(e.protocol, 0) + 1
        kinds = ", ".join(f"{n} {p}" for p, n in sorted(up.items()))
        return f"residents: {sum(up.values())} up" + (f" ({kinds})" if kinds else "") + "\n"

    # -- a call --
    async def run(self, call: Any, tool: Any, req: RunRequest) -> str | None:
        """Run `call` on its resident process.  None: its result, state and reason are set;
        RAN: its result is set as a cold run's would be, for the caller's outcome(); COLD:
        a resident process cannot run it as a cold run would, so the caller runs it cold."""
        job: tuple[str, list[str], str] | tuple[()]    # pyrun.job's, or none
        if tool.resident["protocol"] != "python":
            e, job = self.entry(call.agent, tool), ()
        else:               # the call's script, once: it also says which interpreter
            try:
                job, why = pyrun.job(tool, req.argv, req.cwd), ""
            except pyrun.Cold as err:
                job, why = (), str(err)
            e = self.entry(call.agent, tool, _named(pyrun.key(tool, job[2] if job else None),
                                                    tool))
            if req.elevated or req.extra_fds:
                return self._cold(e, tool.name, "an elevated call runs outside the sandbox"
                                  if req.elevated else "a call given its own toolsrv connection")
            if why:
                return self._cold(e, tool.name, why)
        if e.protocol == "python" and e.lock.locked():
            # a readOnly call is running there (other calls of an agent run one at a time):
            # a cold run of this one would run beside it, so this one does
            return self._cold(e, tool.name, "its interpreter is busy with another call")
        async with e.lock:
            if call.kill.is_set():
                _cancelled(call)
                return None
            if e.timer is not None:
                e.timer.cancel()
                e.timer = None
            try:
                return await self._call(call, e, tool, req, job)
            except asyncio.CancelledError:     # shutdown, or a stop of a waiting call
                self._end(e, "cancelled")
                raise
            finally:
                if e.proc is not None and e.proc.alive:
                    loop = asyncio.get_running_loop()
                    e.timer = loop.call_later(e.idle, self._idle, e)

    async def _call(self, call: Any, e: Entry, tool: Any, req: RunRequest, job: tuple
                    ) -> str | None:
        """The call on the entry's process (`job`: a python call's script, argv, interp)."""
        timeout = req.timeout or req.profile.timeout or self.runner.config.timeout
        if req.elevated:
            _fail(call, State.REFUSED, "elevation: not for resident tools (not implemented)")
            return None
        # the profile itself, not its name: an edit that revokes a grant ends the process
        # before its next call (load_profile reads a profile again once it changed)
        stamp = call.secrets.stamp() if call.secrets else None
        where: tuple = (req.cwd, req.profile, e.key if job else tuple(req.argv), stamp)
        if e.protocol == "lsp":          # a profile the tool names (lsp) replaces the
            where += (call.agent.session.sandbox,)    # session's; its change restarts too
        if e.proc is not None and (not e.proc.alive or e.where != where):
            why = e.proc.exit_reason() if not e.proc.alive else _changed(e.where, where)
            self._end(e, why)
        if e.proc is None:
            try:
                if not await self._start(call, e, tool, req, where, timeout):
                    return None
            except pyrun.Cold as why:
                return self._cold(e, tool.name, str(why))
        proc = e.proc
        assert proc is not None
        if e.protocol == "python":
            line = pyrun.call_line(job[0], job[1], req.stdin)
            return self._ran(call, e, await resident.python_call(proc, line, timeout,
                                                                 call.kill), timeout)
        if e.protocol == "mcp":
            rep = await self._mcp_call(e, tool, call, timeout)
        elif e.protocol == "lsp":
            rep = await lspedit.run(proc, e.client, tool.resident["tool"], tool.resident,
                                    call.args, timeout, call.kill)
        else:
            rep = await resident.lines_call(proc, compact(call.args), timeout, call.kill)
        self._outcome(call, e, rep)
        return None

    def _cold(self, e: Entry, name: str, why: str) -> str:
        """A call of tool `name`, a python resident, that runs cold instead: the log says
        why, once for each tool and reason."""
        if (name, why) not in e.said:
            e.said.add((name, why))
            if e.agent is not None:
                e.agent.note(f"resident {name} -> runs cold: {why}")
        return COLD

    def _ran(self, call: Any, e: Entry, rep: resident.Reply, timeout: float) -> str | None:
        """The python protocol's outcome: the run the process reports, as a cold run's."""
        _redact(rep, call.secrets)
        if rep.cancelled or (rep.failure is not None and not rep.timed_out):
            self._outcome(call, e, rep)
            return None
        if rep.timed_out:
            call.result = RunResult(stderr=rep.stderr, timed_out=True, timeout_used=timeout)
            self._end(e, f"timeout after {timeout:g}s")
            return RAN
        e.fails = 0
        call.result = RunResult(stdout=(rep.output or "").encode("utf-8", resident.SE),
                                stderr=rep.stderr, exit_code=rep.exit,
                                truncated=rep.truncated, timeout_used=timeout)
        return RAN

    async def _start(self, call: Any, e: Entry, tool: Any, req: RunRequest, where: tuple,
                     timeout: float) -> bool:
        wait = e.next_try - time.monotonic()
        if wait > 0:
            why = (f"resident: {e.fails} failed starts, next start in {wait:.0f}s "
                   f"(resource busy): {e.stopped}")
            _fail(call, State.REFUSED, why)
            return False
        argv = lspproto.bridge_argv(req.argv) if e.protocol == "lsp" else req.argv
        start = RunRequest(argv=argv, stdin=b"", cwd=req.cwd, env=req.env,
                           profile=req.profile, tool_dir=req.tool_dir, context=req.context)
        cfg = self.runner.config
        host = pyrun.host_argv(cfg.stdout_cap, cfg.stderr_cap, tool) \
            if e.protocol == "python" else None
        handle, refusal = await self.runner.open_resident(start, host)
        if handle is None:
            self._failed_start(e, refusal or "could not start")
            _fail(call, State.REFUSED,
                  refusal or "resident: could not start (input/output error)")
            return False
        line_cap = pyrun.line_cap(cfg.stdout_cap, cfg.stderr_cap) if e.protocol == "python" \
            else cfg.stdout_cap
        e.proc = resident.Process(self.runner.launcher, handle, line_cap, cfg.stderr_cap)
        e.where, e.stopped, e.secrets = where, "", call.secrets
        self.live.add(e)
        self._note(e, "started: this agent's one interpreter for its one-shot Python tools "
                   "(their calls run in it, not as warm starts)" if e.protocol == "python"
                   else "started")
        if e.protocol == "mcp":
            e.client = mcpproto.Client(e.proc)
            _, rep = await resident.answer(e.proc, timeout, call.kill, self._init(e.client))
            if rep.failure or rep.cancelled:
                rep.failure = rep.failure and f"mcp initialize: {rep.failure}"
                self._outcome(call, e, rep)
                return False
        if e.protocol == "lsp":
            lsp = e.client = lspproto.Client(e.proc, req.cwd, tool.resident.get("settings"))
            _, rep = await resident.answer(e.proc, timeout, call.kill, self._lsp_init(
                lsp, tool.resident.get("init")))
            if rep.failure or rep.cancelled:
                rep.failure = rep.failure and f"lsp initialize: {rep.failure}"
                self._outcome(call, e, rep)
                if e.proc is not None:     # cancelled half-initialized: it cannot serve
                    self._end(e, "cancelled during initialize")
                return False
        return True

    def _lsp_init(self, client: lspproto.Client, options: Any) -> Any:
        async def init() -> None:
            try:
                await client.initialize(options)
            except (lspproto.LSPError, lspproto.ResponseError) as err:
                raise resident.Ended(str(err)) from None
        return init

    async def _init_wrap(self, client: mcpproto.Client) -> None:
        try:
            await client.initialize()
        except mcpproto.MCPError as err:
            raise resident.Ended(str(err)) from None

    def _init(self, client: mcpproto.Client) -> Any:
        return lambda: self._init_wrap(client)

    async def _mcp_call(self, e: Entry, tool: Any, call: Any, timeout: float) -> resident.Reply:
        client, proc = e.client, e.proc
        assert isinstance(client, mcpproto.Client) and proc is not None
        name = tool.resident["tool"]

        async def one() -> tuple[str | None, str | None]:
            try:
                return await client.call(name, call.args,
                                         call.trace or call.meta.get("traceparent"))
            except mcpproto.MCPError as err:
                raise resident.Ended(str(err)) from None
        value, rep = await resident.answer(proc, timeout, call.kill, one)
        if value is not None:
            rep.output, rep.error = value
            proc.calls += 1
        return rep

    def _outcome(self, call: Any, e: Entry, rep: resident.Reply) -> None:
        _redact(rep, call.secrets)
        call.result = RunResult(stdout=(rep.output or "").encode(), stderr=rep.stderr,
                                exit_code=0 if rep.failure is None else None,
                                timed_out=rep.timed_out, cancelled=rep.cancelled,
                                truncated=rep.truncated if rep.truncated == "stdout" else None,
                                timeout_used=0.0)
        if rep.cancelled:
            _cancelled(call)
            if e.protocol != "lsp":      # lsp: the request was withdrawn ($/cancelRequest)
                self._end(e, "cancelled", mcp_grace=e.protocol == "mcp")
        elif rep.timed_out:
            call.state, call.reason = State.TIMEOUT, rep.failure or E.ETIMEOUT
            self._end(e, rep.failure or E.ETIMEOUT)
        elif rep.failure is not None:
            if rep.truncated == "stdout":
                call.state = State.KILLED
            else:
                call.state = State.FAILED
            _fail(call, call.state, fit("resident: ", defuse(rep.failure),
                                        " (input/output error)"), rep.failure)
            started = e.proc is not None and e.proc.calls == 0
            self._end(e, rep.failure)
            if started:
                self._failed_start(e, rep.failure)
        elif rep.error is not None:
            e.fails = 0
            call.state = State.ERROR
            why = fit("", defuse(rep.error), " (input/output error)")
            call.reason, call.detail = str(why), rep.error
        else:
            e.fails = 0
            call.state, call.reason = State.OK, None

    def _failed_start(self, e: Entry, why: str) -> None:
        e.fails += 1
        e.stopped = why = _said(e, why)
        if e.fails >= 2:
            wait = min(BACKOFF_MAX, BACKOFF * 2 ** (e.fails - 2))
            e.next_try = time.monotonic() + wait
            self._note(e, f"{e.fails} failed starts: no start for {wait:g}s: {why}")

    # -- ending --
    def _end(self, e: Entry, why: str, mcp_grace: bool = False) -> None:
        """The entry's process goes (killed now, or after GRACE for a cancelled MCP call)."""
        proc, e.proc, client, e.client = e.proc, None, e.client, None
        if isinstance(client, lspproto.Client):
            client.close()
        if e.timer is not None:
            e.timer.cancel()
            e.timer = None
        self.live.discard(e)
        e.stopped = why = _said(e, why)
        if proc is None:
            return
        self._note(e, f"stopped: {why}")
        if mcp_grace and isinstance(client, mcpproto.Client) and proc.alive:
            client.cancelled()
            self.dying.add(proc)
            asyncio.get_running_loop().call_later(GRACE, self._kill_dying, proc)
        else:
            proc.kill()

    def _note(self, e: Entry, what: str) -> None:
        if e.agent is not None:
            e.agent.note(f"resident {e.name} -> {_said(e, what)}")

    def _kill_dying(self, proc: resident.Process) -> None:
        self.dying.discard(proc)
        proc.kill()

    def _idle(self, e: Entry) -> None:
        e.timer = None
        if e.lock.locked() or e.proc is None:
            return
        proc, e.proc, client, e.client = e.proc, None, e.client, None
        if isinstance(client, lspproto.Client):
            client.close()
        self.live.discard(e)
        e.stopped = "idle"
        self._note(e, "stopped: idle")
        proc.terminate(GRACE)

    def drop(self, agent: Any, tools: list[Any], why: str) -> None:
        """End the processes of these tools of the agent (cancel, tool_unload)."""
        d = self.entries(agent)
        for t in tools:
            if t is not None and getattr(t, "resident", None) and entry_key(t)[0] == "lsp":
                if why != "cancelled":         # a cancel ends the call, not the server
                    self._leave(agent, self.shared.get((agent.session, entry_key(t))), why,
                                t.name)
            elif t is not None and getattr(t, "resident", None):
                e = d.get(entry_key(t))
                if e is not None and e.protocol == "python" and why != "cancelled":
                    names = e.users.get(agent, set())
                    names.discard(t.name)
                    if names:              # the agent's other tools still use it
                        continue
                if e is not None and e.proc is not None:   # a call in flight to an MCP
                    self._end(e, why, mcp_grace=e.lock.locked())   # server: told first

    def drop_agent(self, agent: Any) -> None:
        """The agent (or its session) is removed: every process of it goes."""
        for e in list(self.entries(agent).values()):
            if e.proc is not None:
                self._end(e, "agent removed")
        for (s, _), e in list(self.shared.items()):
            if s is agent.session:
                self._leave(agent, e, "agent removed")

    def _leave(self, agent: Any, e: Entry | None, why: str, name: str | None = None) -> None:
        """An agent stops using a session's language server (unloads the last lsp tool of
        it that it called, or goes): the last one out ends it."""
        if e is None or agent not in e.users:
            return
        e.users[agent].discard(name) if name is not None else e.users[agent].clear()
        if not e.users[agent]:
            del e.users[agent]
        if not e.users:
            self.shared.pop((agent.session, e.key), None)
            if e.proc is not None:
                self._end(e, why)

    async def close(self) -> None:
        """Shutdown: kill every process and wait (bounded) until each has ended."""
        procs = [e.proc for e in self.live if e.proc is not None] + list(self.dying)
        for e in list(self.live):
            self._end(e, "shutdown")
        for p in procs:
            p.kill()
        waits = [p.handle.exited for p in procs if p.alive]
        if waits:
            await asyncio.wait(waits, timeout=5)


_compact = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def compact(args: Any) -> bytes:
    """The args as the lines protocol sends them: one line of compact JSON (UTF-8; a lone
    surrogate, which UTF-8 cannot carry, stays escaped)."""
    try:
        return _compact(args).encode()
    except UnicodeEncodeError:
        return json.dumps(args, separators=(",", ":")).encode()


def _changed(was: tuple, now: tuple) -> str:
    """Why a resident process is restarted: what differs between its (cwd, profile,
    command, secrets' digest) and the call's."""
    if was[2:3] != now[2:3]:
        return "command changed"
    if was[3:4] != now[3:4]:
        return "its secrets changed"
    if was[1:2] == now[1:2] or was[1].name != now[1].name:
        return "sandbox or cwd changed"
    return f"sandbox profile {now[1].name} edited"


def _redact(rep: resident.Reply, values: Values | None) -> None:
    """A reply with the call's secrets' values as `[secret NAME]` (run/secrets.py)."""
    if values:
        rep.output = values.redact_text(rep.output)
        rep.error = values.redact_text(rep.error)
        rep.failure = values.redact_text(rep.failure)
        rep.stderr = values.redact_bytes(rep.stderr)


def _said(e: Entry, text: str) -> str:
    """What the entry says of its process (log, status), its values redacted."""
    return (e.secrets.redact_text(text) or "") if e.secrets else text


def _fail(call: Any, state: str, reason: str, detail: str | None = None) -> None:
    call.state, call.reason = state, str(reason)
    call.detail = detail if detail is not None else getattr(reason, "full", None)
    if call.result is None:
        call.result = RunResult()


def _cancelled(call: Any) -> None:
    call.state, call.reason = State.KILLED, E.ECANCELLED
    if call.result is None:
        call.result = RunResult(cancelled=True)
