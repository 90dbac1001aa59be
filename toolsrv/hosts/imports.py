"""Imports: another host's toolsrv, its tools served here as NAME.TOOL, its calls run there.

Theory of operation.  An `Import` is one remote, dialled with its own credentials
(`Spec`: a dial string, and for it a CA, a client certificate and key, a shared-secret
file).  Its task connects, reads the remote's revision, tools/index and each tool's
meta, schema and prompt (remote.py makes RemoteTools of them) and hands the set to the
registry (`serve_remote`), which bumps this server's revision when it moved; then it
waits on the remote's `revwait` and loads again whenever the remote's revision moves.
When the connection fails or the remote stops answering, its tools leave the registry,
`tools/errors` says `NAME  unreachable at ADDR: why`, calls fail at once with that
reason, and the task dials again after a back-off (BACKOFF_MIN doubling to BACKOFF_MAX).

A call (calls.py hands a RemoteTool's call to `run_call`) runs on the remote under a
session and agent of its own for each local agent: the session is FRONT-SESSION (FRONT
is this server's id, hosts.py: its host name and a random part kept in the state, so
two fronts never collide), the agent the local agent's name.  They are made once per
connection, the tool loaded once (nothing is asked of the remote for that afterwards), then
the args go to its `call` file and the result, or the Rerror, comes back with the call's
`err` in the same round trip (ninep.call); only a failed call asks for `status` and `out`.
Killing the local call (flush, cancel, unload, removal, shutdown) cancels the forward,
which Tflushes it there: the remote kills its run (`kill` is a KillEvent, whose set()
cancels the forward itself: no task per call waits for it).

Bounded: every wait on the remote (DIAL_TIMEOUT, LOAD_TIMEOUT; a call, whose timeout is
the remote's, by CALL_BOUND), every read (MAX_READ bytes a file, remote.MAX_TEXT a tool's
meta, schema or prompt), the msize (ninep.agreed_msize), the number of tools
(remote.MAX_TOOLS) and what they keep in all (remote.Budget: past it, the rest of the
index is left out, said in tools/errors).  The remote only
ever sends metadata and answers: nothing it sends names a local file or a local command,
and its words reach a listing with their control characters written out (errors.printable:
resolve.one_line for tools/index, search and errors, NinePError for its error strings).
"""
from __future__ import annotations

import asyncio
import json
import logging
import time
from typing import Any

from .. import errors as E
from ..record import Record
from ..registry.names import NAME_MAX, valid_name
from ..serve import dial
from ..tree.calls.states import State
from ..errors import P9Error, fit, printable
from .ninep import NineP, NinePError
from .remote import MAX_TEXT, MAX_TOOLS, BadRemoteTool, Budget, make

log = logging.getLogger("toolsrv.hosts")

DIAL_TIMEOUT = 20.0      # seconds to connect, handshake and attach
LOAD_TIMEOUT = 60.0      # seconds to read the index and every tool's files
REVWAIT_BOUND = 600.0    # a revwait read unanswered this long: ask again
MAX_READ = 16 << 20      # bytes of one remote file (a call's result, out, err)
CALL_BOUND = 3600.0      # seconds a remote call may go unanswered (its own timeout is there)
HEARTBEAT = 15.0         # while calls are forwarded, the remote is asked its revision this
HEARTBEAT_WAIT = 20.0    # often, and given this long to answer, or it is taken for gone
BACKOFF_MIN, BACKOFF_MAX = 0.5, 30.0


class Spec(Record):
    """What to import: NAME=ADDR[,ca=FILE][,cert=FILE][,key=FILE][,secret=FILE]."""
    FIELDS = ("name", "addr", "ca", "cert", "key", "secret")

    def __init__(self, name: str, addr: str, ca: str | None = None, cert: str | None = None,
                 key: str | None = None, secret: str | None = None) -> None:
        self.name, self.addr = name, addr
        self.ca, self.cert, self.key, self.secret = ca, cert, key, secret

    @classmethod
    def parse(cls, text: str) -> "Spec":
        """A --import value; raises ValueError saying what is wrong."""
        name, eq, rest = text.partition("=")
        if not eq:
            raise ValueError(f"--import {text!r}: want NAME=ADDR[,ca=FILE,cert=FILE,"
                             "key=FILE,secret=FILE]")
        addr, *opts = rest.split(",")
        kw: dict[str, str] = {}
        for o in opts:
            k, eq, v = o.partition("=")
            if k not in ("ca", "cert", "key", "secret") or not eq or not v:
                raise ValueError(f"--import {name}: bad option {o!r} (ca=, cert=, key=, "
                                 "secret=FILE)")
            kw[k] = v
        return cls.checked(name, addr, **kw)

    @classmethod
    def checked(cls, name: str, addr: str, **kw: str | None) -> "Spec":
        if not valid_name(name) or "." in name or len(name) > NAME_MAX // 2:
            raise ValueError(f"bad import name {name[:40]!r}: letters, digits, '_' and '-', "
                             f"at most {NAME_MAX // 2}")
        a = dial.parse(addr)                      # ValueError naming what is wrong
        if (kw.get("cert") is None) != (kw.get("key") is None):
            raise ValueError(f"--import {name}: cert= and key= go together")
        return cls(name, str(a), **kw)


class RemoteResult(Record):
    """What the remote's call left: as a RunResult reads to scheduler.py and agent.py."""
    FIELDS = ("stdout", "stderr", "exit_code", "truncated", "signal", "error", "timed_out",
              "cancelled")

    def __init__(self, stdout: bytes = b"", stderr: bytes = b"", exit_code: int | None = None,
                 truncated: str | None = None, signal: int | None = None,
                 error: str | None = None, timed_out: bool = False,
                 cancelled: bool = False) -> None:
        self.stdout, self.stderr, self.exit_code = stdout, stderr, exit_code
        self.truncated, self.signal, self.error = truncated, signal, error
        self.timed_out, self.cancelled = timed_out, cancelled


class KillEvent(asyncio.Event):
    """A forwarded call's `kill` (calls.py sets it to end the call): setting it also runs
    `on_set`, which cancels the forward at once, so no task waits on the event (a task and
    asyncio.wait per call cost more than the rest of the forwarding)."""

    def __init__(self, on_set: Any) -> None:
        super().__init__()
        self.on_set = on_set

    def set(self) -> None:
        super().set()
        self.on_set()


def remote_session(front: str, session: str) -> str:
    """The remote session of a local one: FRONT-SESSION, or FRONT-HASH when too long."""
    name = f"{front}-{session}"
    if len(name) <= NAME_MAX:
        return name
    import hashlib      # here: start-up imports nothing it does not need
    return f"{front}-{hashlib.sha256(session.encode()).hexdigest()[:32]}"


class Import:
    """One imported host: its connection, its tools in the registry, its calls."""

    def __init__(self, spec: Spec, registry: Any, front: str) -> None:
        self.spec, self.registry, self.front = spec, registry, front
        self.nine: NineP | None = None
        self.forwarding = 0       # calls forwarded now (the heartbeat asks only then)
        self.silent = False       # the heartbeat hung up on this connection
        self.why = "not connected yet"
        self.task: asyncio.Task | None = None
        self.made: set[tuple[str, str]] = set()
        self.sessions: set[str] = set()   # remote sessions made (or found) on this connection
        self.loaded: set[tuple[str, str, str]] = set()
        self.ntools = 0
        self.served: dict[str, Any] = {}  # the tools last served: held while unreachable
        self.came_up = False              # the last connection got as far as serving tools
        self.cleanups: set[asyncio.Task] = set()   # removals of remote agents under way

    @property
    def source(self) -> str:
        return f"import {self.spec.name}"

    def start(self) -> None:
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def close(self) -> None:
        if self.task is not None:
            self.task.cancel()
            await asyncio.wait({self.task}, timeout=10)
        if self.nine is not None:
            self.nine.close()
        self.registry.serve_remote(self.source, {}, [])

    def status_line(self) -> str:
        s = self.spec
        state = f"up {self.ntools} tools" if self.nine is not None else f"down: {self.why}"
        return f"{s.name} {s.addr} {state}\n"

    # -- the connection --
    async def _dial(self) -> NineP:
        s = self.spec
        tls = None
        if s.addr.startswith("tls!"):
            from ..serve.tls import ClientTLS
            tls = ClientTLS.from_env(ca=s.ca, cert=s.cert, key=s.key)
        secret = None
        if s.secret:
            from ..serve.auth import load_secret
            secret = load_secret(s.secret)
        nine = await NineP.connect(s.addr, secret=secret, uname=f"toolsrv-{self.front}",
                                   tls=tls)
        nine.max_read = MAX_READ
        return nine

    async def _run(self) -> None:
        backoff = BACKOFF_MIN
        while True:
            nine = None
            try:
                nine = await asyncio.wait_for(self._dial(), DIAL_TIMEOUT)
                log.info("%s: connected to %s", self.spec.name, self.spec.addr)
                self.made, self.loaded, self.sessions = set(), set(), set()
                self.silent = False
                await self._follow(nine)
            except asyncio.CancelledError:
                raise
            except asyncio.TimeoutError:
                self._down("no answer in time")
            except (OSError, NinePError, ValueError, EOFError) as e:
                self._down(str(e) or type(e).__name__)
            except Exception as e:            # a bug of ours: logged, and dialled again
                log.exception("%s: import failed", self.spec.name)
                self._down(f"{type(e).__name__}: {e}")
            finally:
                if nine is not None:
                    nine.close()
            backoff = BACKOFF_MIN if self.came_up else min(backoff * 2, BACKOFF_MAX)
            self.came_up = False
            await asyncio.sleep(backoff)

    def _down(self, why: str) -> None:
        was_up = self.nine is not None
        self.nine, self.ntools = None, 0
        self.why = printable(" ".join(why.split()))[:200]
        if was_up:
            log.warning("%s: lost %s: %s", self.spec.name, self.spec.addr, self.why)
        self.registry.serve_remote(self.source, {}, [
            (self.spec.name, f"unreachable at {self.spec.addr}: {self.why}")], self.served)

    async def _follow(self, nine: NineP) -> None:
        rev = await asyncio.wait_for(self._revision(nine, "revision", b""), LOAD_TIMEOUT)
        await asyncio.wait_for(self._load(nine), LOAD_TIMEOUT)
        self.nine, self.came_up = nine, True
        beat = asyncio.get_running_loop().create_task(self._heartbeat(nine))
        try:
            await self._revisions(nine, rev)
        finally:
            beat.cancel()

    async def _heartbeat(self, nine: NineP) -> None:
        """While calls are forwarded, ask the remote its revision every HEARTBEAT: one
        that stopped answering (stopped, cut off by the network) is hung up on after
        HEARTBEAT_WAIT, so its calls fail then ("did not answer...") instead of waiting
        out CALL_BOUND, and the import dials again."""
        while nine.alive:
            await asyncio.sleep(HEARTBEAT)
            if not self.forwarding:
                continue
            try:
                await asyncio.wait_for(nine.read("revision"), HEARTBEAT_WAIT)
            except asyncio.TimeoutError:
                log.warning("%s: %s did not answer for %gs during a call: hung up",
                            self.spec.name, self.spec.addr, HEARTBEAT_WAIT)
                self.silent = True
                nine.close()
                return
            except (OSError, NinePError, EOFError):
                return

    async def _revisions(self, nine: NineP, rev: int) -> None:
        while True:
            try:
                got = await asyncio.wait_for(self._revision(nine, "revwait", b"%d\n" % rev),
                                             REVWAIT_BOUND)
            except asyncio.TimeoutError:      # a remote with a longer revwait: ask again,
                got = await asyncio.wait_for(self._revision(nine, "revision", b""),
                                             LOAD_TIMEOUT)   # and fail if it is gone
            if got != rev:
                rev = got
                await asyncio.wait_for(self._load(nine), LOAD_TIMEOUT)

    @staticmethod
    async def _revision(nine: NineP, path: str, data: bytes) -> int:
        text = await (nine.rdwr(path, data) if data else nine.read(path))
        try:
            return int(text.strip()[:20])
        except ValueError:
            raise NinePError(f"{path}: not a revision") from None

    async def _load(self, nine: NineP) -> None:
        index = (await nine.read("tools/index")).decode("utf-8", "replace")
        names = [line.split("\t", 1)[0] for line in index.splitlines() if line.strip()]
        tools, errors, budget = {}, [], Budget()
        if len(names) > MAX_TOOLS:
            errors.append((self.spec.name, f"serves {len(names)} tools: only the first "
                                           f"{MAX_TOOLS} are imported"))
            names = names[:MAX_TOOLS]
        for i, n in enumerate(names):
            try:
                if not valid_name(n):
                    raise BadRemoteTool(f"bad tool name {n[:40]!r}")
                texts = await asyncio.gather(*(nine.read(f"tools/{n}/{f}", MAX_TEXT)
                                               for f in ("meta", "schema", "prompt")))
                t = make(self.spec.name, n, self, self.spec.addr, *texts)
            except (BadRemoteTool, NinePError) as e:
                errors.append((f"{self.spec.name}.{n[:64]}", f"at {self.spec.addr}: {e}"))
                continue
            if not budget.take(t):
                errors.append((self.spec.name, budget.left_out(n, len(names) - i - 1)))
                break
            tools[t.name] = t
        self.ntools, self.served = len(tools), tools
        self.registry.serve_remote(self.source, tools, errors)

    # -- the remote's sessions --
    def forget(self, agent: Any, whole: bool) -> None:
        """The local agent is gone (its runs are killed already): remove its agent there,
        or, with the local session (`whole`), the remote session; in the background."""
        if whole:
            return self.forget_session(agent.session.name)
        rs = remote_session(self.front, agent.session.name)
        if self.nine is None or (rs, agent.name) not in self.made:
            return
        self.made.discard((rs, agent.name))
        self.loaded = {x for x in self.loaded if x[:2] != (rs, agent.name)}
        self._cleanup(self.nine, [f"session/{rs}/agent/{agent.name}"])

    def forget_session(self, session: str) -> None:
        """The local session is gone: remove the remote session made for it, if one is left
        (its agents' removal took it when it had any); in the background, bounded."""
        rs = remote_session(self.front, session)
        if self.nine is None or rs not in self.sessions:
            return
        self.sessions.discard(rs)
        self.made = {x for x in self.made if x[0] != rs}
        self.loaded = {x for x in self.loaded if x[0] != rs}
        self._cleanup(self.nine, [f"session/{rs}"])

    def _cleanup(self, nine: NineP, paths: list[str]) -> None:
        task = asyncio.get_running_loop().create_task(self._remove(nine, paths))
        self.cleanups.add(task)
        task.add_done_callback(self.cleanups.discard)

    async def _remove(self, nine: NineP, paths: list[str]) -> None:
        for p in paths:
            try:
                await asyncio.wait_for(nine.remove(p), LOAD_TIMEOUT)
            except (NinePError, OSError, asyncio.TimeoutError) as e:
                log.info("%s: %s not removed there: %s", self.spec.name, p, e)

    # -- calls --
    def unreachable(self) -> str:
        return f"{self.spec.name}: unreachable at {self.spec.addr}: {self.why}"

    async def run_call(self, call: Any, tool: Any) -> None:
        """Run `call` of `tool` on the remote; sets the call's result, state and reason."""
        nine = self.nine
        if nine is None or not nine.alive:
            raise P9Error(f"input/output error: {self.unreachable()}")
        a = call.agent
        rs, ra = remote_session(self.front, a.session.name), a.name
        base = f"session/{rs}/agent/{ra}"
        try:
            if (rs, ra, tool.remote_name) not in self.loaded:     # once: no task after
                await asyncio.wait_for(self._ready(nine, base, rs, ra, tool.remote_name),
                                       LOAD_TIMEOUT)
        except NinePError as e:
            raise P9Error(f"input/output error: {self.spec.name}: {e}") from None
        except (OSError, asyncio.TimeoutError) as e:
            raise P9Error(f"input/output error: {self.spec.name}: {e or 'no answer'}") from None
        call.state, call.started = State.RUNNING, time.monotonic()
        a.note(f"call {call.tool} -> on {self.spec.addr} as {base}/tools/{tool.remote_name}")
        path = f"{base}/tools/{tool.remote_name}"
        await self._forward(nine, call, path)

    async def _session(self, nine: NineP, rs: str) -> None:
        if rs not in self.sessions:
            await nine.mkdir(f"session/{rs}")       # False: there already (a reconnection)
            self.sessions.add(rs)

    async def session_cwd(self, session: str, path: str | None = None) -> str:
        """The cwd of the local session's calls here, on the remote (sessioncwd.py): its
        remote session's `cwd`, set to `path` first when given.  Raises P9Error."""
        nine = self.nine
        if nine is None or not nine.alive:
            raise P9Error(f"input/output error: {self.unreachable()}")
        rs = remote_session(self.front, session)

        async def ask() -> bytes:
            await self._session(nine, rs)
            if path is not None:
                await nine.write(f"session/{rs}/cwd", path.encode() + b"\n")
            return await nine.read(f"session/{rs}/cwd")
        try:
            text = await asyncio.wait_for(ask(), LOAD_TIMEOUT)
        except NinePError as e:         # the remote refused the path: the writer's to mend
            if path is None:
                raise P9Error(f"input/output error: {self.spec.name}: {e}") from None
            raise P9Error(fit(f"{self.spec.name}: ", e.ename)) from None
        except (OSError, asyncio.TimeoutError) as e:
            raise P9Error(f"input/output error: {self.spec.name}: {e or 'no answer'}") from None
        return text.decode("utf-8", "replace").strip()

    async def _ready(self, nine: NineP, base: str, rs: str, ra: str, tool: str) -> None:
        if (rs, ra) not in self.made:
            await self._session(nine, rs)
            await nine.mkdir(f"{base}")
            self.made.add((rs, ra))
        if (rs, ra, tool) not in self.loaded:
            await nine.write(f"{base}/ctl", f"tool_load {tool}\n".encode())
            self.loaded.add((rs, ra, tool))

    async def _forward(self, nine: NineP, call: Any, path: str) -> None:
        body = call.stdin or b"{}"
        traceparent = call.trace or call.meta.get("traceparent")
        if traceparent:       # the remote's span a child of this one: one trace across hosts
            body = json.dumps({**call.args, "_meta": {"traceparent": traceparent}}).encode()
        forward = nine.call(f"{path}/call", body, f"{path}/err")   # sent now
        self.forwarding += 1
        why: list[str] = []

        def stop(reason: str) -> None:
            if not forward.done() and not why:
                why.append(reason)
                forward.cancel()              # a Tflush: the remote kills its run
        timer = asyncio.get_running_loop().call_later(CALL_BOUND, stop, "timeout")
        was, call.kill = call.kill, KillEvent(lambda: stop("killed"))
        if was.is_set():
            call.kill.set()
        try:
            out, err = await forward  # a cancel of this task cancels forward too: flushed
        except asyncio.CancelledError:
            if not why:
                raise
        except (OSError, EOFError) as e:
            call.result = RemoteResult()
            call.state = State.FAILED
            gone = f"did not answer for {HEARTBEAT_WAIT:g}s (stopped, or cut off): hung up" \
                if self.silent else f"{e or 'hung up'}"
            call.reason = f"input/output error: {self.spec.name} at {self.spec.addr}: " \
                          f"{gone} during the call"
            return
        finally:
            timer.cancel()
            self.forwarding -= 1
        if why:
            call.result = RemoteResult()
            if why[0] == "killed":
                call.state, call.reason = State.KILLED, E.ECANCELLED
            else:
                call.state = State.TIMEOUT
                call.reason = f"timeout after {CALL_BOUND:g}s: {self.spec.name} did not answer"
            return
        if not isinstance(out, NinePError):      # ok: the remote's status would say "ok"
            call.result, call.state, call.reason = RemoteResult(out, err, 0), State.OK, None
            return
        # the remote's string as sent (its errno words already defused: errors.defuse)
        reason = " ".join(getattr(out, "ename", str(out)).split())[:240]
        await self._failed(nine, call, path, err, reason)

    async def _failed(self, nine: NineP, call: Any, path: str, err: bytes,
                      reason: str) -> None:
        """A call that failed there: its `status` says how it ended, `out` what it printed."""
        async def fetch(f: str) -> bytes:
            try:
                return await asyncio.wait_for(nine.read(f"{path}/{f}"), LOAD_TIMEOUT)
            except (NinePError, OSError, asyncio.TimeoutError):
                return b""
        status, out = await asyncio.gather(fetch("status"), fetch("out"))
        words = status.decode("utf-8", "replace").split()
        state = words[0].rstrip(":") if words else ""
        code = None
        if state == State.EXIT and len(words) > 1 and words[1].isdigit():
            code = int(words[1])
        call.result = RemoteResult(out, err, 0 if state == State.OK else code)
        call.state = state if state in State.ENDS and state != State.OK else State.FAILED
        call.reason = reason
