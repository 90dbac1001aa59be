# toolsrv/run/launcher.py — the server's side of the zygote (toolsrv/run/init/zygote.py) and its inits.
#
# Theory of operation.  Launcher starts the zygote with subprocess.Popen (vfork + exec of
# `python -I -S`: flat cost whatever the server's size, and no preexec_fn), keeps one end of a
# SOCK_SEQPACKET socketpair, and watches it from the event loop with add_reader; a pidfd on the
# zygote tells when it is gone so it can be reaped.  The zygote forks inits ahead (each pid 1
# of a PID namespace of its own, toolsrv/run/init/cold.py) and hands each to us as a spare: the
# init's socket and a pidfd on it ({"op": "spare"} with SCM_RIGHTS).
#
# spawn() is synchronous.  It creates the three pipes and gives the request (its Landlock
# rules: a profile's fixed paths named by a reference sent to each init once) and the child
# ends to an idle init in one packet, straight: the init builds the ruleset with a PathCache
# of its own (it is reused, so its cache is warm), off the server's CPU.  The zygote is not
# on a call's path
# (when few inits are left idle it is asked for more, which it forks while idle).  An init
# that has reported waits for another run: it is kept idle (up to MAX_IDLE; beyond
# SPARE_INITS only until IDLE_TRIM passes without a spawn), so under load no init is forked
# per call.  With none idle, the request goes to the zygote, which forks an init for it and
# answers {"op": "init", "id"} with the init's socket and pidfd.  It returns a LaunchHandle whose one future the init's
# report resolves:
#   exited -> (wait status, None) when the run has ended and nothing of it is left, or
#             (None, reason) when it could not be launched (or the zygote died)
# The init writes b"S<wait status>" once the tool has ended and it has killed and reaped the
# rest, or b"E<json reason>" when a step of the launch failed.  A kill is SIGKILL through the
# pidfd (no pid reuse possible): the kernel ends the namespace with its init, and the pidfd
# turns readable once the init is a zombie, which for a namespace's init means once every
# process in it is gone; that is when a killed run's future is resolved.  The future carries
# values, never exceptions, so a cancelled caller leaves nothing unretrieved.
#
# If the zygote dies, every pending handle ends with "launcher died" (the tools die with it:
# see zygote.py) and the next ensure() starts a new zygote.  While runs wait on the zygote it
# is pinged every PING_EVERY seconds; one that has not answered a ping for WEDGED_AFTER
# seconds is wedged: it is killed (its runs die with it), every pending handle ends with
# "launcher stopped answering", and the next ensure() starts a new one.
#
# An init made warm (toolsrv/run/init/warm.py) serves calls of its kind only: once it has
# reported it waits in the WarmPool (warmpool.py), which also lets it go.
from __future__ import annotations

import asyncio
import collections
import itertools
import json
import logging
import mmap
import os
import select
import signal
import socket
import subprocess
import sys

from toolsrv.run.kernel.cgroups import RunGroups
from toolsrv.run.init.wire import MAX_PACKET, recv_into
from toolsrv.run.handle import LaunchHandle, Spare
from toolsrv.run.warmplan import WarmKind
from toolsrv.run.warmpool import WarmPool

log = logging.getLogger("toolsrv.warm")

PING_EVERY = 2.0  # seconds between pings while runs wait on the zygote
WEDGED_AFTER = 10.0  # seconds without a pong: the launcher is wedged
MAX_FDS = 4  # an init's socket and pidfd; the zygote's own reply fds
MAX_FIXED = 32  # fixed path lists named before the names start again
SPARE_INITS = 4  # idle inits wanted: fewer, and the zygote is asked for more
MAX_IDLE = 64  # idle inits kept at most
IDLE_TRIM = 2.0  # seconds without a spawn: idle inits beyond SPARE_INITS are let go
CLOSE_GROUPS = 10.0  # seconds close() waits for the run groups to empty and go
# the checkout that holds the toolsrv package: toolsrv/run/launcher.py, three levels down
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.realpath(__file__))))
_BOOT = "import sys; sys.path.insert(0, sys.argv[4]); from toolsrv.run.init.zygote import main; " \
        "main(sys.argv[1:4])"


class LauncherDied(Exception):
    """The zygote is gone (or could not start)."""


class Launcher:
    """Client of one zygote process and of the inits it forks; restarts it after it dies."""

    def __init__(self, rlimits: dict[str, int] | None = None, namespaces: bool = True,
                 python: str | None = None, limits: dict | None = None,
                 idmap: tuple[int, int] | None = None) -> None:
        self.python = python or sys.executable
        self.options = {"rlimits": {k: [v, v] for k, v in (rlimits or {}).items()},
                        "namespaces": namespaces, "idmap": list(idmap) if idmap else None}
        self.limits = {"pids": None, "memory": None, **(limits or {})}
        self.pidns = False
        self.netns = False
        self.cgroups = "none"
        self.seccomp = False
        self.idmap = "not needed"
        self.uid_switch: str | None = None  # why an init cannot switch to the tools' uid
        self.userns = False  # the PID namespaces come through a user namespace of its own
        self.restarts = 0  # launchers killed for not answering
        self.zygote_pid: int | None = None
        self._refs: dict[tuple, int] = {}  # fixed path lists named so far
        self._epoch = 0  # bumped when the names start again (an init may know old ones)
        self._groups: RunGroups | None = None
        self._stale: list[RunGroups] = []  # groups of launchers that died, still emptying
        self._pinged = 0.0  # when the oldest unanswered ping went out (0: none)
        self._pings = itertools.count(1)
        self._timer: asyncio.TimerHandle | None = None
        self._sock: socket.socket | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._spares: collections.deque[Spare] = collections.deque()  # idle inits
        self.warm = WarmPool(self.limits, MAX_IDLE)  # idle warm inits, by kind
        self._asked = 0  # spares asked of the zygote and not yet had
        self._last_spawn = 0.0
        self._trim: asyncio.TimerHandle | None = None
        self._handles: dict[int, LaunchHandle] = {}  # runs not yet ended
        self._waiting: dict[int, LaunchHandle] = {}  # runs the zygote is forking an init for
        self._ids = itertools.count(1)
        self._lock = asyncio.Lock()
        self._gone: asyncio.Future[None] | None = None
        self._rbuf = mmap.mmap(-1, MAX_PACKET)  # replies land here (pages used on write)

    @property
    def alive(self) -> bool:
        return self._sock is not None

    async def ensure(self) -> None:
        """Start the zygote unless it runs."""
        if self._sock is not None:
            return
        async with self._lock:
            if self._sock is None:
                await self._start()

    async def _start(self) -> None:
        loop = asyncio.get_running_loop()
        if self._groups is not None:  # a restart: the old launcher's groups may still be
            self._stale.append(self._groups)  # emptying; a new base for the new one
        self._stale = [g for g in self._stale if not g.close()]
        self._groups = RunGroups.setup(self.limits.get("pids"), self.limits.get("memory"),
                                       self.limits.get("total_pids"),
                                       self.limits.get("total_memory"))
        options = {**self.options, "groups": self._groups.options()}
        parent, child = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            proc = subprocess.Popen(
                [self.python, "-I", "-S", "-c", _BOOT, str(child.fileno()), str(os.getpid()),
                 json.dumps(options), _ROOT], pass_fds=(child.fileno(),),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL, start_new_session=True)
        finally:
            child.close()
        parent.setblocking(False)
        try:
            hello = json.loads(await asyncio.wait_for(loop.sock_recv(parent, MAX_PACKET), 20))
        except (TimeoutError, ValueError, OSError) as e:
            proc.kill()
            proc.wait()
            parent.close()
            raise LauncherDied(f"launcher did not start: {e!r}") from None
        self.pidns, self.netns = hello["pidns"], hello["netns"]
        self.cgroups, self.seccomp = hello.get("cgroups", "none"), hello.get("seccomp", False)
        self.idmap = hello.get("idmap", "not needed")
        self.uid_switch, self.userns = hello.get("uid_switch"), hello.get("userns", False)
        self.zygote_pid = proc.pid
        self._sock, self._proc = parent, proc
        self._asked = SPARE_INITS  # the zygote makes these at its start
        self._pinged = 0.0
        self._gone = loop.create_future()
        pidfd = os.pidfd_open(proc.pid)
        loop.add_reader(pidfd, self._on_exit, pidfd, proc, self._gone)
        loop.add_reader(parent.fileno(), self._on_readable)

    def spawn(self, msg: dict, extra_fds: tuple[int, ...] = (),
              warm: tuple[WarmKind, dict, bytes | None] | None = None) -> LaunchHandle:
        """Launch one run; the handle's future reports its end.

        msg: argv, env, cwd, uid/gid, rlimits, netns, nnp, and "landlock": the rules to build
        the ruleset from (or None).  `extra_fds` reach the tool as fds 3, 4, ...; the caller
        keeps and closes them.  `warm` = (kind, the request that makes an init warm, the
        script's source and bytecode or None): the
        run goes to a warm init of that kind (msg has "warm": the script), or to an idle
        cold init made warm for it; with neither idle it runs cold (handle.warm is None)."""
        if self._sock is None:
            raise LauncherDied("launcher not running")
        stdin_r, stdin_w = os.pipe2(os.O_CLOEXEC)
        stdout_r, stdout_w = os.pipe2(os.O_CLOEXEC)
        stderr_r, stderr_w = os.pipe2(os.O_CLOEXEC)
        mine = [stdin_r, stdout_w, stderr_w]
        handle = LaunchHandle(next(self._ids), (stdin_w, stdout_r, stderr_r))
        try:
            if warm is None or not self._hand_warm(handle, {**msg, "id": handle.id},
                                                   mine + list(extra_fds), *warm):
                cold = {k: v for k, v in msg.items() if k != "warm"}
                self._hand_over(handle, {**cold, "id": handle.id}, mine + list(extra_fds))
        except BaseException:
            handle.close_fds()
            raise
        finally:
            for fd in mine:
                os.close(fd)
        self._handles[handle.id] = handle
        handle.exited.add_done_callback(lambda _: self._handles.pop(handle.id, None))
        return handle

    def _warm_request(self, msg: dict, known: set[tuple[int, int]], blob: bytes | None
                      ) -> tuple[bytes, tuple[int, int] | None]:
        """The request as a warm init gets it (toolsrv/run/init/warm.py): what the init
        reads — the profile's part of the Landlock rules, fixed paths by reference — then a
        newline and the call's own request, then the script's source and bytecode, which
        only the call's child reads."""
        data, sent = self._request({"landlock": msg.get("landlock")}, known, head=True)
        rules = msg.get("landlock")
        call = {**msg, "landlock": {"paths": rules["paths"][rules.get("cached", 0):]}
                if rules else None}
        out = data + b"\n" + json.dumps(call).encode()
        return (out + b"\n" + blob if blob else out), sent

    def _request(self, msg: dict, known: set[tuple[int, int]], head: bool = False
                 ) -> tuple[bytes, tuple[int, int] | None]:
        """The request as an init gets it: the Landlock rules with the profile's fixed
        paths (the first `cached`, the same in every call of a profile) named by a
        reference the init was sent once, unless it was not (then they come along too).
        Returns (the request encoded, the reference sent along, or None)."""
        rules = msg.get("landlock")
        if rules and head:  # the rules of the profile only (a warm init's head)
            rules = {k: v for k, v in rules.items() if k != "paths"}
            rules["paths"] = msg["landlock"]["paths"][:rules.get("cached", 0)]
            msg = {"landlock": rules}
        if not rules or not rules.get("cached"):
            return json.dumps(msg).encode(), None
        n = rules["cached"]
        key = tuple(tuple(p) for p in rules["paths"][:n])
        ref = self._refs.setdefault(key, len(self._refs))
        if len(self._refs) > MAX_FIXED:  # many profiles: forget, start naming again
            self._refs = {key: 0}
            ref = 0
            self._epoch += 1
        out = {**rules, "paths": rules["paths"][n:], "fixed": [self._epoch, ref]}
        if (self._epoch, ref) not in known:
            out["fixed_paths"] = rules["paths"][:n]
        sent = (self._epoch, ref) if "fixed_paths" in out else None
        return json.dumps({**msg, "landlock": out}).encode(), sent

    def _hand_over(self, handle: LaunchHandle, msg: dict, fds: list[int]) -> None:
        self._last_spawn = asyncio.get_running_loop().time()
        while self._spares:  # straight to an idle init
            init = self._spares.pop()  # the most recently used: its pages are warm
            data, sent = self._request(msg, init.known)
            try:
                socket.send_fds(init.sock, [data], fds)
            except OSError:  # that init is gone (killed, or its launcher died): the next
                init.close()
                continue
            if sent is not None:
                init.known.add(sent)
            self._low_water()
            handle.attach(init, self._idle)
            return
        self._low_water()
        data, sent = self._request(msg, set())
        self._send(data, fds)  # none idle: the zygote forks one for this request
        handle.knows = sent
        self._waiting[handle.id] = handle
        self._watch_soon()

    def _hand_warm(self, handle: LaunchHandle, msg: dict, fds: list[int], kind: WarmKind,
                   become: dict, blob: bytes | None = None) -> bool:
        """Give the run to an idle warm init of its kind, or make an idle cold one warm
        (the request to exec the interpreter, then the run, queued on its socket); False
        when neither is idle."""
        self._last_spawn = now = asyncio.get_running_loop().time()
        while (init := self.warm.take(kind, now)) is not None:
            data, sent = self._warm_request(msg, init.known, blob)
            try:
                socket.send_fds(init.sock, [data], fds)
            except OSError as e:  # it died while idle: the next one, or a new one
                self.warm.lost += 1
                log.warning("a warm interpreter (%s, pid %s) was found dead while idle "
                            "(%s): killed or crashed; the call goes to another",
                            kind.python, init.pid() or "gone", e.strerror or e)
                init.close()
                continue
            if sent is not None:
                init.known.add(sent)
            handle.warm = kind
            handle.attach(init, self._idle)
            return True
        while self._spares:
            init = self._spares.pop()
            init.known = set()  # a warm init starts with an empty rule cache
            data, sent = self._warm_request(msg, init.known, blob)
            try:
                init.sock.send(json.dumps(become).encode())
                socket.send_fds(init.sock, [data], fds)
            except OSError:
                init.close()
                continue
            if sent is not None:
                init.known.add(sent)
            init.kind = kind
            self._low_water()
            handle.warm, handle.warming = kind, True
            handle.attach(init, self._idle)
            self.warm.made()
            return True
        return False

    def totals_text(self) -> str:
        """/status's line on all runs together: the base group's limits and use."""
        g = self._groups
        if g is None or not g.bases:
            return f"run cgroups: none ({g.why if g is not None else 'launcher not started'})"
        use, tot = g.usage(), g.totals
        mem = (f"memory {tot['memory'] / 2**20:.1f} MiB" if tot["memory"] is not None
               else "memory unbounded")
        pids = f"pids {tot['pids']}" if tot["pids"] is not None else "pids unbounded"
        used = ", ".join(f"{use['memory'] / 2**20:.1f} MiB" if k == "memory" else
                         f"{use['pids']} pids" for k in ("memory", "pids") if k in use)
        return f"run cgroups: {g.kind}; all runs together: {mem}, {pids}" + (
            f" ({used} in use)" if used else "") + (
            f"; not bounded: {g.totals_why}" if g.totals_why else "")

    def _low_water(self) -> None:
        """Ask the zygote for spares, while idle, when few inits are left idle."""
        if len(self._spares) + self._asked < SPARE_INITS and self._sock is not None:
            self._asked = SPARE_INITS - len(self._spares)
            self._tell({"op": "spares", "n": self._asked})

    def _idle(self, init: Spare) -> None:
        """An init that has reported: its namespace is empty, it waits for another run."""
        if init.kind is not None:
            loop = asyncio.get_running_loop()
            if self._sock is None:
                init.close()
            elif self.warm.put(init, loop.time()) and self._trim is None:
                self._trim = loop.call_later(IDLE_TRIM, self._trim_idle)
            return
        if self._sock is None or len(self._spares) >= MAX_IDLE:
            init.close()
            return
        self._spares.append(init)
        if len(self._spares) > SPARE_INITS and self._trim is None:
            self._trim = asyncio.get_running_loop().call_later(IDLE_TRIM, self._trim_idle)

    def _trim_idle(self) -> None:
        """After a burst: let idle inits beyond SPARE_INITS go (EOF ends an init)."""
        self._trim = None
        loop = asyncio.get_running_loop()
        if loop.time() - self._last_spawn < IDLE_TRIM:
            self._trim = loop.call_later(IDLE_TRIM, self._trim_idle)
            return
        while len(self._spares) > SPARE_INITS:
            self._spares.popleft().close()  # the least recently used
        self.warm.trim()

    def kill(self, handle: LaunchHandle) -> None:
        """SIGKILL the run's whole namespace (through its init's pidfd)."""
        handle.killed = True
        handle._kill()

    def _tell(self, msg: dict) -> None:
        try:
            self._send(json.dumps(msg).encode(), [])
        except (OSError, LauncherDied):
            pass

    def _send(self, data: bytes, fds: list[int]) -> None:
        if self._sock is None:
            raise LauncherDied("launcher not running")
        while True:
            try:
                socket.send_fds(self._sock, [data], fds)
                return
            except BlockingIOError:  # the zygote is behind: wait for room, briefly
                if not select.select([], [self._sock], [], 5)[1]:
                    raise LauncherDied("launcher not accepting requests") from None
            except OSError as e:
                if e.errno == 90:  # EMSGSIZE
                    raise OSError(f"request too large ({len(data)} bytes)") from None
                self._died()
                raise LauncherDied(f"launcher died: {e}") from None

    def _watch_soon(self) -> None:
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(PING_EVERY, self._watch)

    def _watch(self) -> None:
        """While runs wait on the zygote: ping; one silent for WEDGED_AFTER is killed."""
        self._timer = None
        if self._sock is None or not self._waiting:
            self._pinged = 0.0
            return
        now = asyncio.get_running_loop().time()
        if self._pinged and now - self._pinged > WEDGED_AFTER:
            self.restarts += 1
            self._died("launcher stopped answering; it was killed and will be restarted")
            return
        if not self._pinged:
            self._pinged = now
            self._tell({"op": "ping", "n": next(self._pings)})
        self._watch_soon()

    def _on_readable(self) -> None:
        while self._sock is not None:
            try:
                size, fds = recv_into(self._sock, self._rbuf, MAX_FDS)
            except BlockingIOError:
                return
            except OSError:
                size, fds = 0, []
            if not size:
                for fd in fds:
                    os.close(fd)
                self._died()
                return
            self._dispatch(json.loads(self._rbuf[:size]), fds)

    def _dispatch(self, msg: dict, fds: list[int]) -> None:
        op = msg["op"]
        init = Spare(socket.socket(fileno=fds[0]), fds[1]) if len(fds) == 2 else None
        for fd in fds[2:] if init else fds:
            os.close(fd)
        if op == "spare" and init is not None:
            self._asked = max(0, self._asked - 1)
            self._spares.append(init)
            return
        if op == "pong":
            self._pinged = 0.0
            return
        handle = self._waiting.pop(msg.get("id", -1), None)
        if op == "init" and init is not None:  # forked for a request
            if handle is None:
                init.close()  # the run is gone: the init ends at EOF
            else:
                if handle.knows is not None:
                    init.known.add(handle.knows)
                handle.attach(init, self._idle)
        elif op == "error" and handle is not None:  # the request could not be handed over
            handle._set((None, msg["error"]))

    def _died(self, why: str = "launcher died") -> None:
        if self._sock is None:
            return
        asyncio.get_running_loop().remove_reader(self._sock.fileno())
        self._sock.close()
        self._sock = None
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._trim is not None:
            self._trim.cancel()
            self._trim = None
        while self._spares:
            self._spares.popleft().close()
        self.warm.close()
        handles, self._handles, self._waiting = self._handles, {}, {}
        for h in handles.values():
            h._set((None, why))
        if self._proc is not None and self._proc.poll() is None:
            try:  # a zygote that broke the protocol or stopped answering must not linger:
                os.killpg(self._proc.pid, signal.SIGKILL)  # the bootstrap and the launcher
            except OSError:
                self._proc.kill()

    def _on_exit(self, pidfd: int, proc: subprocess.Popen[bytes],
                 gone: asyncio.Future[None]) -> None:
        loop = asyncio.get_running_loop()
        loop.remove_reader(pidfd)
        os.close(pidfd)
        proc.wait()
        if proc is self._proc:
            self._died()
        if not gone.done():
            gone.set_result(None)

    async def close(self) -> None:
        """Kill all runs, wait for their ends (bounded), stop the zygote."""
        if self._sock is not None:
            handles = list(self._handles.values())
            for h in handles:
                self.kill(h)
            if handles:
                await asyncio.wait([h.exited for h in handles], timeout=5)
            gone = self._gone
            self._died()
            if gone is not None:
                await asyncio.wait({gone}, timeout=5)
        # The groups empty as the killed runs' last processes are reaped, just after: try
        # again until they are gone (bounded; what is left, the next start sweeps).
        busy = [*self._stale, *([self._groups] if self._groups else [])]
        self._groups, self._stale = None, []
        end = asyncio.get_running_loop().time() + CLOSE_GROUPS
        while busy:
            busy = [g for g in busy if not g.close()]
            if not busy or asyncio.get_running_loop().time() > end:
                break
            await asyncio.sleep(0.02)
        if busy:
            log.warning("cgroups still busy at stop, left for the next start to sweep: %s",
                        " ".join(b for g in busy for b, _ in g.bases))
