# toolsrv/zygote.py — the pre-started, small launcher of tool processes.
#
# Theory of operation.  The server starts this once as a fresh `python -I -S` process (about
# 10 MiB) and talks to it over a SOCK_SEQPACKET socketpair: one JSON object per packet, a
# spawn request carrying the run's three pipe ends as SCM_RIGHTS.  Neither the server nor the
# zygote ever fork().  The thread that reads a spawn request builds the Landlock ruleset,
# starts the next loop thread, then takes on the tool's confinement itself (per-thread state
# on Linux) and calls posix_spawn (vfork + exec), so the child inherits exactly that:
#   unshare(CLONE_FS) + chdir      the tool's cwd (the zygote's own stays put)
#   setns(empty netns)             no-network profiles: no interface at all, UDP included
#   setns/unshare(CLONE_NEWPID)    a PID namespace per run whose pid 1 is a stub (see
#                                  _clone_stub); the tool is pid 2 with normal signal rules
#   setgroups/setresgid/setresuid  raw syscalls: glibc's wrappers would change every thread
#   no_new_privs + Landlock        landlock_restrict_self binds the calling thread only
# then prlimit(RLIMIT_CPU) on the child, registers the run, passes the baton to the next loop
# thread and ends.  Other rlimits are server-wide: set on the zygote at start, inherited.
# Every fd here is O_CLOEXEC, so a tool gets 0, 1 and 2 only.  The main thread never runs
# the loop: it stays root and unconfined, and handles SIGTERM.  SIGCHLD is blocked in every
# thread and read by the loop from a signalfd; one reaping pass reports all the runs it
# ended in one packet.
#
# Namespaces are made ahead while idle (a namespace's first process is the slowest step: an
# internal procfs mount) and reused when a run leaves its namespace empty, whether it was a
# spare or made for that run: under load the zygote is never idle, so the namespaces a burst
# of runs made serve the next burst (up to MAX_SPARE are kept; beyond SPARE_NAMESPACES they
# end after IDLE_TRIM_MS without a request).
#
# Containment.  As root, or inside a user namespace of its own otherwise, the zygote is pid 1
# of a PID namespace under a bootstrap process that waits for it: the server dies, the
# bootstrap and the zygote die (PR_SET_PDEATHSIG), the kernel kills every tool.  Killing a
# run's stub ends its namespace, `setsid` escapees included; a run is reported ended once
# tool and stub are both reaped, which the kernel allows only when the namespace is empty.
# Without namespaces the zygote is a subreaper and kills the run's group and adopted orphans.
# Invariant: it signals only pids it has not reaped, so never a reused pid.
from __future__ import annotations

import _thread
import array
import collections
import ctypes
import errno
import json
import mmap
import os
import resource
import select
import signal
import socket
import sys
from collections.abc import Callable

from toolsrv import landlock

CLONE_VM, CLONE_FS, CLONE_FILES = 0x100, 0x200, 0x400
CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWUSER = 0x40000000, 0x20000000, 0x10000000
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
MAX_PACKET = 1 << 20
MAX_FDS = 8  # stdin, stdout, stderr and up to five extra fds for the tool
SPARE_NAMESPACES = 4  # PID namespaces made ahead, while idle
MAX_SPARE = 64  # namespaces kept for reuse: a burst of exits refills a burst of spawns
IDLE_TRIM_MS = 1000  # idle this long: spares beyond SPARE_NAMESPACES are ended
RLIMITS = {n: getattr(resource, f"RLIMIT_{n.upper()}")
           for n in ("cpu", "as", "fsize", "nofile", "core", "nproc", "data", "stack", "memlock")}
# setgroups, setresuid, setresgid: raw syscall numbers, so only the calling thread changes.
_SYSNO = {"x86_64": (116, 117, 119), "aarch64": (159, 147, 149)}.get(os.uname().machine)
_RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM,
                  signal.SIGCHLD, signal.SIGHUP, signal.SIGQUIT)

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _call(name: str, *args: int) -> None:
    fn = _libc.syscall if name.isdigit() else getattr(_libc, name)
    full = (int(name), *args) if name.isdigit() else args
    _check(fn(*(ctypes.c_long(a) for a in full)))


def _check(ret: int) -> None:
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


# The calls of every spawn, with fixed prototypes: no per-call argument wrapping.
_unshare = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, use_errno=True)(("unshare", _libc))
_setns = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_int, ctypes.c_int,
                          use_errno=True)(("setns", _libc))
_syscall3 = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_long,
                             ctypes.c_long, use_errno=True)(("syscall", _libc))


class Zygote:
    """The launcher's state: control socket, live runs, namespace handles."""

    def __init__(self, sock: socket.socket, in_pidns: bool, namespaces: bool = True) -> None:
        self.sock = sock
        self.rbuf = mmap.mmap(-1, MAX_PACKET)  # pages become resident only once written
        self.runs: dict[int, _Run] = {}  # run id -> run
        self.by_pid: dict[int, _Run] = {}  # tool or stub pid -> run
        self.spare: collections.deque[_Ns] = collections.deque()
        self.spare_ok = True
        self.after_handoff: list[Callable[[], None]] = []
        self.fixed: dict[int, list[tuple[str, int]]] = {}  # fixed path lists, by reference
        self.pidns = in_pidns and self._in_thread(_call, "unshare", CLONE_NEWPID) is None
        self.empty_netns = self._make_empty_netns() if namespaces else -1
        nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
        nproc = resource.getrlimit(resource.RLIMIT_NPROC)[0]  # each spare's stub is a process
        self.max_spare = max(2 * SPARE_NAMESPACES, min(  # a spare holds one fd
            MAX_SPARE, (nofile - 48) // 2, MAX_SPARE if nproc < 0 else nproc // 8))
        self.path_cache = landlock.PathCache(max(0, min(128, nofile - 48)))
        if not in_pidns:
            _call("prctl", PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    @staticmethod
    def _in_thread(fn, *args):  # type: ignore[no-untyped-def]
        """Run fn in a throw-away thread; return its result or the exception it raised."""
        out: list[object] = []
        done = _thread.allocate_lock()
        done.acquire()

        def body() -> None:
            try:
                out.append(fn(*args))
            except BaseException as e:  # noqa: BLE001 - handed back to the caller
                out.append(e)
            finally:
                done.release()

        _thread.start_new_thread(body, ())
        done.acquire()
        return out[0]

    def _make_empty_netns(self) -> int:
        """One network namespace with nothing in it (loopback down), shared by no-network
        runs.  Made by a throw-away thread, so the zygote itself never leaves its own."""
        def make() -> int:
            _call("unshare", CLONE_NEWNET)
            return os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC)

        fd = self._in_thread(make)
        return fd if isinstance(fd, int) else -1

    def send(self, msg: dict) -> None:
        self._send(json.dumps(msg).encode())

    def _send(self, data: bytes) -> None:
        try:
            self.sock.send(data)
        except OSError:
            pass  # the server is gone; EOF on the socket ends the loop

    def serve(self) -> None:
        # SIGCHLD is blocked in every thread (threads inherit the mask; posix_spawn clears it
        # for the tool) and read from a signalfd by the loop: no Python handler, so the main
        # thread does not wake for each exit.
        _sigmask(signal.SIG_BLOCK, _SIGCHLD_SET, None)
        self.sig_r = _check_fd(_signalfd(-1, _SIGCHLD_SET, os.O_NONBLOCK | os.O_CLOEXEC))
        self.send({"op": "hello", "pidns": self.pidns, "netns": self.empty_netns >= 0})
        self.poller = select.poll()
        self.poller.register(self.sock.fileno(), select.POLLIN)
        self.poller.register(self.sig_r, select.POLLIN)
        _thread.start_new_thread(self.loop, (None,))
        forever = _thread.allocate_lock()
        forever.acquire()
        while True:  # the main thread stays root and untouched; it only runs signal handlers
            forever.acquire()

    def loop(self, baton: _thread.LockType | None) -> None:
        """The request loop.  A spawn uses up the thread that runs it (it takes on the tool's
        confinement), so it first starts the next loop thread, which waits on the baton until
        the new run is registered: no thread start or join on the launch's critical path."""
        if baton is not None:
            baton.acquire()
            while self.after_handoff:
                self.after_handoff.pop()()
        try:
            while True:
                want = self._want_spare()
                events = self.poller.poll(
                    0 if want else IDLE_TRIM_MS if len(self.spare) > SPARE_NAMESPACES else None)
                if not events:
                    if want:
                        self._add_spare()  # idle: prepare a namespace for the next run
                    else:
                        self._trim_spares()
                for fd, _ in events:
                    if fd == self.sig_r:
                        try:
                            while os.read(self.sig_r, 4096):  # signalfd_siginfo records
                                pass
                        except BlockingIOError:
                            pass
                        self.reap()
                    elif not self.handle_packet():
                        self.shutdown()
        except _HandedOff:
            return

    def _want_spare(self) -> bool:
        return self.pidns and self.spare_ok and len(self.spare) < SPARE_NAMESPACES

    def _add_spare(self) -> None:
        """A fresh PID namespace and its stub, made ahead of need (see the header)."""
        def make() -> _Ns:
            _call("unshare", CLONE_NEWPID)
            stub, stack = _clone_stub()  # the namespace can be opened once it has a pid 1
            fd = _open_pidns()
            if fd < 0:
                os.kill(stub, signal.SIGKILL)  # still root here: this thread never switches
                os.waitpid(stub, 0)
                raise OSError(errno.ENOENT, "no pid_for_children")
            return _Ns(stub, stack, fd, _host_pid(stub))

        made = self._in_thread(make)
        if isinstance(made, BaseException):
            self.spare_ok = False  # e.g. no pid_for_children: make namespaces per run
            return
        self.spare.append(made)

    def _trim_spares(self) -> None:
        """Idle after a burst: end the spares beyond SPARE_NAMESPACES.  Each stub is reaped
        here, before its stack (our memory) can be freed."""
        while len(self.spare) > SPARE_NAMESPACES:
            self._discard(self.spare.pop())

    def _recycle(self, run: _Run) -> bool:
        """After the tool has ended: keep its namespace for another run when nothing is left
        in it.  Every survivor would be a child of the stub (orphans go to a namespace's
        pid 1), so an empty children list proves the namespace empty."""
        ns = run.ns
        if ns is None or ns.fd < 0 or run.killed or len(self.spare) >= self.max_spare:
            return False
        if not ns.host:
            ns.host = _host_pid(ns.stub)  # made for a run: resolved on its first recycling
            if not ns.host:
                return False
        try:
            fd = os.open(f"/proc/{ns.host}/task/{ns.host}/children", os.O_RDONLY | os.O_CLOEXEC)
            try:
                if os.read(fd, 64):
                    return False
            finally:
                os.close(fd)
        except OSError:
            return False
        self.by_pid.pop(ns.stub, None)
        run.ns = None
        self.spare.append(ns)
        return True

    def handle_packet(self) -> bool:
        try:  # not socket.recv_fds: in 3.11 it drops the flags, and so MSG_CMSG_CLOEXEC.
            # Into one buffer: recvmsg(MAX_PACKET) would map 1 MiB and shrink it every time.
            size, ancillary, _flags, _addr = self.sock.recvmsg_into(
                [self.rbuf], socket.CMSG_SPACE(MAX_FDS * 4), socket.MSG_CMSG_CLOEXEC)
        except (BlockingIOError, InterruptedError):
            return True
        fds = array.array("i")
        for level, kind, blob in ancillary:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(blob[:len(blob) - len(blob) % 4])
        if not size:
            return False
        try:
            msg = json.loads(self.rbuf[:size])
            if msg["op"] == "spawn":
                self.spawn(msg, fds)  # closes fds; returns only if nothing was spawned
                return True
            if msg["op"] == "kill":
                self.kill(msg["id"])
            elif msg["op"] == "paths":
                self.fixed[msg["ref"]] = [(p, a) for p, a in msg["paths"]]
        except (ValueError, LookupError, TypeError):
            pass  # not a request of ours
        for fd in fds:
            os.close(fd)
        return True

    def spawn(self, msg: dict, fds: array.array) -> None:
        """Build the ruleset, then hand the loop to a new thread and confine this one.

        Raises _HandedOff after a spawn attempt (this thread is spent); returns normally only
        when the request failed before anything was spawned."""
        ruleset = -1
        try:
            if len(fds) < 3:
                raise OSError(errno.EINVAL, "spawn needs three pipe fds")
            if type(msg.get("id")) is not int:  # it is written into the exits reply as is
                raise TypeError("spawn needs an integer id")
            ll = msg.get("landlock")
            if ll is not None:
                paths = [(p, a) for p, a in ll["paths"]]
                cached = ll.get("cached", 0)
                if "fixed" in ll:  # the fixed paths, sent once before by reference
                    paths = self.fixed[ll["fixed"]] + paths
                ruleset, _skipped = landlock.build_ruleset(
                    ll["abi"], paths, handle_net=ll["net"], bind_tcp=ll["bind_tcp"],
                    connect_tcp=ll["connect_tcp"], scoped=ll["scoped"],
                    cache=self.path_cache, cached=cached)
        except (OSError, LookupError, TypeError, ValueError) as e:
            for fd in fds:
                os.close(fd)
            self._refuse(msg, e)  # a bad request is that run's error, never the zygote's end
            return
        spare = self.spare.popleft() if self.spare else None
        baton = _thread.allocate_lock()
        baton.acquire()
        _thread.start_new_thread(self.loop, (baton,))
        try:
            try:
                run = _Run(msg["id"], *self.confine_and_spawn(msg, fds, ruleset, spare))
            finally:
                for fd in (*fds, ruleset):
                    if fd >= 0:
                        os.close(fd)
            self.runs[run.id] = run
            self.by_pid[run.tool] = run
            if run.ns:
                self.by_pid[run.ns.stub] = run
        except BaseException as e:  # noqa: BLE001 - reported as that run's error
            ns = getattr(e, "ns", None)
            if ns is not None:  # this thread is no longer root: the next one kills the stub
                self.after_handoff.append(lambda: self._discard(ns))
            self._refuse(msg, e)
        finally:
            baton.release()
        raise _HandedOff

    def _refuse(self, msg: dict, e: BaseException) -> None:
        reason = e.strerror if isinstance(e, OSError) and e.strerror else repr(e)
        self.send({"op": "error", "id": msg.get("id"), "error": str(reason)})

    @staticmethod
    def _discard(ns: _Ns) -> None:
        ns.close()
        os.kill(ns.stub, signal.SIGKILL)
        os.waitpid(ns.stub, 0)

    def confine_and_spawn(self, msg: dict, fds: array.array, ruleset: int,
                          spare: _Ns | None) -> tuple[int, _Ns | None]:
        """In the thread being used up: take on the tool's confinement and spawn it.

        Returns (tool pid, the run's PID namespace or None)."""
        step, ns = "fs", spare
        try:
            _check(_unshare(CLONE_FS))
            if msg["netns"] and self.empty_netns >= 0:
                step = "netns"
                _check(_setns(self.empty_netns, CLONE_NEWNET))
            if spare is not None:
                step = "pidns"
                _check(_setns(spare.fd, CLONE_NEWPID))
            elif self.pidns:
                step = "pidns"
                _check(_unshare(CLONE_NEWPID))
                ns = _Ns(*_clone_stub(), -1, 0)
                ns.fd = _open_pidns()  # so the namespace can be recycled like a spare
            if msg.get("uid") is not None:
                step = "uid"
                if _SYSNO is None:
                    raise OSError(errno.ENOSYS, f"uid switch unsupported on {os.uname().machine}")
                gid, uid = msg["gid"], msg["uid"]
                _check(_syscall3(_SYSNO[0], 0, 0, 0))
                _check(_syscall3(_SYSNO[2], gid, gid, gid))
                _check(_syscall3(_SYSNO[1], uid, uid, uid))
            step = "cwd: " + msg["cwd"]
            os.chdir(msg["cwd"])
            if ruleset >= 0:
                step = "landlock"
                landlock.restrict_self(ruleset)  # sets no_new_privs first
            elif msg.get("nnp"):
                step = "no_new_privs"
                _call("prctl", landlock.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
            step = "exec: " + msg["argv"][0]
            pid = os.posix_spawn(
                _find(msg["argv"][0], msg["env"]), msg["argv"], msg["env"], setsid=True,
                file_actions=[(os.POSIX_SPAWN_DUP2, fd, i) for i, fd in enumerate(fds)],
                setsigdef=_RESET_SIGNALS, setsigmask=())
            if "cpu" in msg["rlimits"]:
                step = "rlimit cpu"
                try:
                    resource.prlimit(pid, RLIMITS["cpu"], tuple(msg["rlimits"]["cpu"]))
                except ProcessLookupError:
                    pass
            return pid, ns
        except BaseException as e:  # noqa: BLE001 - reported; the stub must not leak
            why = e.strerror if isinstance(e, OSError) and e.strerror else repr(e)
            failure = OSError(getattr(e, "errno", None) or errno.EINVAL, f"{step}: {why}")
            failure.ns = ns  # type: ignore[attr-defined]  # its stub is killed by the main thread
            raise failure from None

    def kill(self, run_id: int) -> None:
        run = self.runs.get(run_id)
        if run is None:
            return
        run.killed = True
        targets = [(os.kill, run.ns.stub)] if run.ns else []
        if run.status is None:
            targets += [(os.kill, run.tool), (os.killpg, run.tool)]
        _kill_all(targets)

    def reap(self) -> None:
        """Reap every child that has ended; report the runs that are over in one packet."""
        ended: list[str] = []
        try:
            self._reap(ended)
        finally:
            if ended:
                self._send(b'{"op":"exits","runs":[%s]}' % ",".join(ended).encode())

    def _reap(self, ended: list[str]) -> None:
        while True:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            run = self.by_pid.pop(pid, None)
            if run is None:  # an orphan we adopted, or a spare stub someone killed
                for dead in [s for s in self.spare if s.stub == pid]:
                    self.spare.remove(dead)
                    dead.close()
                continue
            if pid == run.tool:
                run.status = status
                if run.ns and not self._recycle(run):
                    _kill_all([(os.kill, run.ns.stub)])  # end the namespace; report when gone
                    continue
                if not self.pidns:
                    self.kill_orphans(pid)
            else:
                if run.ns:
                    run.ns.close()
                    run.ns = None
                if run.status is None:
                    continue  # killed from outside: the tool's own reaping reports
            del self.runs[run.id]
            ended.append(f"[{run.id},{run.status}]")

    def kill_orphans(self, pgid: int) -> None:
        """Without PID namespaces: kill the run's group and every orphan we adopted (our
        children that are not runs), from /proc/self/task/<tid>/children."""
        me = os.getpid()
        try:
            with open(f"/proc/{me}/task/{me}/children", "rb") as f:
                orphans = [int(p) for p in f.read().split() if int(p) not in self.by_pid]
        except OSError:
            orphans = []
        _kill_all([(os.killpg, pgid)] + [(os.kill, pid) for pid in orphans])

    def shutdown(self, *_: object) -> None:
        for run_id in list(self.runs):
            self.kill(run_id)
        os._exit(0)


class _HandedOff(Exception):
    """The current loop thread spawned a tool and is spent: it must end."""


class _Ns:
    """A PID namespace: its stub (pid, stack), an fd to enter it (-1: none), the stub's pid as
    /proc knows it (0: unknown, so the namespace cannot be recycled)."""

    __slots__ = ("stub", "stack", "fd", "host")

    def __init__(self, stub: int, stack: object, fd: int, host: int) -> None:
        self.stub, self.stack, self.fd, self.host = stub, stack, fd, host

    def close(self) -> None:
        if self.fd >= 0:
            os.close(self.fd)
            self.fd = -1


class _Run:
    """One launched run: the tool, its namespace, whether it was killed, the exit status."""

    __slots__ = ("id", "tool", "ns", "killed", "status")

    def __init__(self, run_id: int, tool: int, ns: _Ns | None) -> None:
        self.id, self.tool, self.ns = run_id, tool, ns
        self.killed = False
        self.status: int | None = None


_clone = _libc.clone
_clone.restype = ctypes.c_int
_clone.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int, ctypes.c_void_p]
# The stub runs syscall(SYS_pause): unlike libc's pause() it touches no thread-local state
# (the stub shares the spawning thread's TLS pointer).  arm64 has no pause syscall.
_SYS_PAUSE = {"x86_64": 34}.get(os.uname().machine)
_PAUSE = ctypes.cast(_libc.syscall if _SYS_PAUSE else _libc.pause, ctypes.c_void_p)
STUB_STACK = 16384
_SIGSET_SIZE = 128  # glibc's sigset_t
_ALL_SIGNALS = ctypes.create_string_buffer(b"\xff" * _SIGSET_SIZE, _SIGSET_SIZE)
_sigmask = _libc.pthread_sigmask
_sigmask.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p]
_SIGCHLD_SET = ctypes.create_string_buffer(  # sigset_t: unsigned longs, signal n is bit n-1
    (1 << (signal.SIGCHLD - 1)).to_bytes(8, sys.byteorder) + bytes(_SIGSET_SIZE - 8),
    _SIGSET_SIZE)
_signalfd = _libc.signalfd
_signalfd.argtypes = [ctypes.c_int, ctypes.c_void_p, ctypes.c_int]


def _check_fd(fd: int) -> int:
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return fd


def _clone_stub() -> tuple[int, object]:
    """Create pid 1 of the calling thread's new PID namespace: a process sharing our memory
    (CLONE_VM: no copy, so it costs what a thread costs) and our fd table (CLONE_FILES: it
    holds no fd of its own) that only runs pause() with every signal blocked, until SIGKILL.
    It stays root and outside Landlock, so the tool can neither signal nor trace it."""
    stack = ctypes.create_string_buffer(STUB_STACK)
    top = (ctypes.addressof(stack) + STUB_STACK - 64) & ~15
    old = ctypes.create_string_buffer(_SIGSET_SIZE)  # raw sigsets: signal.pthread_sigmask
    _sigmask(signal.SIG_BLOCK, _ALL_SIGNALS, old)    # converts 64 numbers to enums each way
    try:
        pid = _clone(_PAUSE, top, CLONE_VM | CLONE_FILES | signal.SIGCHLD, _SYS_PAUSE)
    finally:
        _sigmask(signal.SIG_SETMASK, old, None)
    if pid < 0:
        err = ctypes.get_errno()
        raise OSError(err, f"clone: {os.strerror(err)}")
    return pid, stack


def _open_pidns() -> int:
    """An fd on the calling thread's pid_for_children namespace; -1 if it cannot be opened."""
    try:
        return os.open("/proc/thread-self/ns/pid_for_children", os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return -1


def _host_pid(pid: int) -> int:
    """pid as /proc (mounted in the server's namespace) knows it, via a pidfd; 0 if unknown."""
    try:
        fd = os.pidfd_open(pid)
        try:
            info = os.open(f"/proc/self/fdinfo/{fd}", os.O_RDONLY | os.O_CLOEXEC)
            try:
                text = os.read(info, 4096)
            finally:
                os.close(info)
        finally:
            os.close(fd)
        at = text.index(b"\nPid:") + 5
        return int(text[at:text.index(b"\n", at)])
    except (OSError, ValueError):
        return 0


def _kill_all(targets: list[tuple[Callable[[int, int], None], int]]) -> None:
    for fn, pid in targets:
        try:
            fn(pid, signal.SIGKILL)
        except OSError:
            pass


def _find(name: str, env: dict[str, str]) -> str:
    """The program path, searched in the tool's PATH (not ours) when name has no slash."""
    if "/" in name:
        return name
    for d in env.get("PATH", "/usr/local/bin:/usr/bin:/bin").split(":"):
        candidate = os.path.join(d or ".", name)
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))


def _enter_pid_namespace(sock_fd: int) -> bool:
    """Become pid 1 of a new PID namespace (fork once; the parent waits and mirrors us)."""
    try:
        _call("unshare", CLONE_NEWPID)
    except OSError:
        uid, gid = os.getuid(), os.getgid()
        try:  # unprivileged: a user namespace mapping only ourselves grants the right
            _call("unshare", CLONE_NEWUSER | CLONE_NEWPID)
            for path, text in (("/proc/self/setgroups", "deny"),
                               ("/proc/self/uid_map", f"{uid} {uid} 1"),
                               ("/proc/self/gid_map", f"{gid} {gid} 1")):
                with open(path, "w") as f:
                    f.write(text)
        except OSError:
            return False
    life_r, life_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid:
        os.close(life_r)
        os.close(sock_fd)  # so the server sees EOF when the zygote goes
        _, status = os.waitpid(pid, 0)
        os._exit(os.waitstatus_to_exitcode(status) & 0xFF)
    os.close(life_w)
    _call("prctl", PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if select.select([life_r], [], [], 0)[0]:
        os._exit(0)  # the bootstrap died before PDEATHSIG was armed
    os.close(life_r)
    return True


def main(argv: list[str]) -> None:
    """Entry point: argv = [control socket fd, server pid, options as JSON]; options are
    {"rlimits": {name: [soft, hard]}, "namespaces": bool (false: process groups only)}."""
    sock_fd, parent, opts = int(argv[0]), int(argv[1]), json.loads(argv[2])
    limits, namespaces = opts["rlimits"], opts["namespaces"]
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    for name, value in limits.items():
        resource.setrlimit(RLIMITS[name], tuple(value))
    _call("prctl", PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(0)
    in_pidns = namespaces and _enter_pid_namespace(sock_fd)
    sock = socket.socket(fileno=sock_fd)
    sock.set_inheritable(False)
    zygote = Zygote(sock, in_pidns, namespaces)
    signal.signal(signal.SIGTERM, zygote.shutdown)
    zygote.serve()


if __name__ == "__main__":
    main(sys.argv[1:])
