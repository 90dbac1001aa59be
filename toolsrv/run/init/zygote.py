# toolsrv/run/init/zygote.py — the pre-started, small launcher of tool processes.
#
# Theory of operation.  The server starts this once as a fresh `python -I -S` process (about
# 10 MiB) and talks to it over a SOCK_SEQPACKET socketpair: one JSON object per packet, fds
# as SCM_RIGHTS.  The server never forks; this process forks inits, and nothing else: each
# init is pid 1 of a PID namespace of its own, takes on one run's confinement and spawns its
# tools (toolsrv/run/init/cold.py), one at a time, each time once its namespace is proved empty.
# While idle it forks the inits the server asked for ({"op": "spares", "n"}; SPARE_INITS at
# the start: a namespace's first process is the slow step, the kernel mounts its procfs)
# and hands each one over as {"op": "spare"} with the init's socket and a pidfd on it; the
# server gives runs straight to its inits and keeps them between runs, so this process is
# not on a call's path.  A spawn request reaches it only when the server has no init idle:
# it forks one for that request and answers {"op": "init", "id"} with the same two fds (or
# {"op": "error"}).
#
# Invariants.  Its only children are inits (and, without PID namespaces, orphans it adopted
# as a subreaper).  It keeps no fd of an init once handed over, so the init's end of the
# socket is the server's alone.  It never blocks on a child: SIGCHLD is blocked and read from
# a signalfd, and every waitpid is WNOHANG; reaping an init removes its cgroup
# (toolsrv/run/kernel/cgroups.py), which is empty by then.  It signals only inits it has not reaped
# (never a reused pid), and only at shutdown: runs are killed by the server, through pidfds.
#
# Containment of the launcher itself.  As root, or inside a user namespace of its own
# otherwise, it is pid 1 of a PID namespace under a bootstrap process that waits for it: the
# server dies, the bootstrap and the launcher die (PR_SET_PDEATHSIG), the kernel kills every
# init and so every run.  The server pings it while it waits on it; one that stops answering
# is killed and restarted (toolsrv/run/launcher.py).
from __future__ import annotations

import _thread
import ctypes
import errno
import gc
import json
import mmap
import os
import resource
import select
import signal
import socket
import sys

from toolsrv.run.init import cold as runinit
from toolsrv.run.init.wire import MAX_PACKET, recv_into
from toolsrv.run.kernel.cgroups import RunGroups
from toolsrv.run.kernel.idmap import make_userns
from toolsrv.run.kernel.libc import check, setns, unshare
from toolsrv.run.kernel.seccomp import Filter

CLONE_NEWNET, CLONE_NEWPID, CLONE_NEWUSER = 0x40000000, 0x20000000, 0x10000000
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
MAX_FDS = 8  # stdin, stdout, stderr, up to five extra fds
SPARE_INITS = 4  # inits forked ahead, while idle, at the start
MAX_WANTED = 64  # spares the server may ask for at once
RLIMITS = {n: getattr(resource, f"RLIMIT_{n.upper()}")
           for n in ("cpu", "as", "fsize", "nofile", "core", "nproc", "data", "stack", "memlock")}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


def _call(name: str, *args: int) -> None:
    fn = _libc.syscall if name.isdigit() else getattr(_libc, name)
    full = (int(name), *args) if name.isdigit() else args
    check(fn(*(ctypes.c_long(a) for a in full)))




class Zygote:
    """The launcher's state: control socket, the inits it forked, namespace handles."""

    def __init__(self, sock: socket.socket, in_pidns: bool, namespaces: bool = True,
                 groups: dict | None = None, idmap: list[int] | None = None,
                 userns: bool = False) -> None:
        self.sock = sock
        self.rbuf = mmap.mmap(-1, MAX_PACKET, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        self.inits: dict[int, list[str]] = {}  # every init not yet reaped -> its cgroup
        self.wanted = SPARE_INITS  # spares the server asked for and has not had yet
        self.spare_ok = True
        self.own_pidns = os.open("/proc/self/ns/pid", os.O_RDONLY | os.O_CLOEXEC)
        self.pidns = in_pidns and self._can_unshare_pid()
        netns = self._make_empty_netns() if namespaces else -1
        self.groups = RunGroups.from_options(groups or {})
        self.idmap_why = "not needed"
        self.userns = userns  # our PID namespace came through a user namespace of our own
        # A root server's tools' uid: an init switches to it, so try that once now (cheap:
        # one fork of this small process), as the server says at start what it could not get.
        self.uid_switch = runinit.probe_uid(*idmap) if idmap else None
        userns_fd = -1
        if idmap:  # a root server's tools' uid: the user namespace of its idmapped mounts
            try:
                userns_fd = make_userns(*idmap)
                self.idmap_why = f"uid 0 <-> {idmap[0]}"
            except OSError as e:
                self.idmap_why = f"unavailable ({e.strerror or e})"
        self.ctx = runinit.Context(self.pidns, netns, Filter(), userns_fd)
        if not in_pidns:
            _call("prctl", PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)

    def _can_unshare_pid(self) -> bool:
        try:
            check(unshare(CLONE_NEWPID))
        except OSError:
            return False
        check(setns(self.own_pidns, CLONE_NEWPID))
        return True

    @staticmethod
    def _make_empty_netns() -> int:
        """One network namespace with nothing in it (loopback down), shared by no-network
        runs.  Made by a throw-away thread, so the launcher itself never leaves its own."""
        out: list[int] = []
        done = _thread.allocate_lock()
        done.acquire()

        def make() -> None:
            try:
                _call("unshare", CLONE_NEWNET)
                out.append(os.open("/proc/thread-self/ns/net", os.O_RDONLY | os.O_CLOEXEC))
            except OSError:
                out.append(-1)
            finally:
                done.release()

        _thread.start_new_thread(make, ())
        done.acquire()
        return out[0]

    def send(self, msg: dict, fds: list[int] | None = None) -> None:
        try:
            socket.send_fds(self.sock, [json.dumps(msg).encode()], fds or [])
        except OSError:
            pass  # the server is gone; EOF on the socket ends the loop

    def hello(self) -> dict:
        groups = self.groups.kind if self.groups.bases else f"none ({self.groups.why})"
        return {"op": "hello", "pidns": self.pidns, "netns": self.ctx.netns >= 0,
                "cgroups": groups, "seccomp": self.ctx.filter.available,
                "idmap": self.idmap_why, "uid_switch": self.uid_switch,
                "userns": self.userns}

    def serve(self) -> None:
        # SIGCHLD is blocked (posix_spawn clears the mask for the tool) and read from a
        # signalfd by the loop: no Python handler, no waitpid that could block.
        _sigmask(signal.SIG_BLOCK, _SIGCHLD_SET, None)
        self.sig_r = _check_fd(_signalfd(-1, _SIGCHLD_SET, os.O_NONBLOCK | os.O_CLOEXEC))
        self.send(self.hello())
        poller = select.poll()
        poller.register(self.sock.fileno(), select.POLLIN)
        poller.register(self.sig_r, select.POLLIN)
        while True:
            events = poller.poll(0 if self._want_spare() else None)
            if not events:
                self._add_spare()  # idle: prepare an init for the next run
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

    def _want_spare(self) -> bool:
        return self.spare_ok and self.wanted > 0

    def _add_spare(self) -> None:
        try:
            self._give(self._fork_init(None), {"op": "spare"})
            self.wanted -= 1
        except OSError:
            self.spare_ok = False  # e.g. out of processes: fork per run, as asked

    def _give(self, init: tuple[int, socket.socket], msg: dict) -> None:
        """Hand an init to the server: its socket and a pidfd on it; keep neither."""
        pid, sock = init
        try:
            pidfd = os.pidfd_open(pid)
        except OSError:
            sock.close()
            os.kill(pid, signal.SIGKILL)  # reaped like any init
            raise
        try:
            self.send(msg, [sock.fileno(), pidfd])
        finally:
            sock.close()
            os.close(pidfd)

    def _fork_init(self, run: tuple[bytes, list[int]] | None) -> tuple[int, socket.socket]:
        """Fork an init into a fresh PID namespace (and a cgroup of its own).  With `run`
        (a request and its fds) it starts on it at once; without, it waits as a spare."""
        group = self.groups.make()
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            if self.pidns:
                check(unshare(CLONE_NEWPID))  # our next child is pid 1 of a new namespace
            pid = os.fork()
            if pid == 0:  # the init: runinit.main never returns
                try:
                    runinit.main(theirs, self.ctx, group, run, tuple(run[1]) if run else ())
                finally:
                    os._exit(1)
        except BaseException:
            ours.close()
            self.groups.remove(group)
            raise
        finally:
            if self.pidns:  # back to our own namespace for children (the parent only)
                setns(self.own_pidns, CLONE_NEWPID)
            theirs.close()
        self.inits[pid] = group
        return pid, ours

    def handle_packet(self) -> bool:
        try:
            size, fds = recv_into(self.sock, self.rbuf, MAX_FDS)
        except (BlockingIOError, InterruptedError):
            return True
        except OSError:
            return False  # the server is gone
        if not size:
            for fd in fds:
                os.close(fd)
            return False
        try:
            msg = json.loads(self.rbuf[:size])
            if msg["op"] == "spawn":
                self.spawn(msg, bytes(self.rbuf[:size]), fds)
                fds = []
            elif msg["op"] == "spares":  # the server is running low: more, while idle
                self.wanted = max(0, min(MAX_WANTED, int(msg["n"])))
            elif msg["op"] == "ping":
                self.send({"op": "pong", "n": msg.get("n")})
        except (ValueError, LookupError, TypeError):
            pass  # not a request of ours
        for fd in fds:
            os.close(fd)
        return True

    def spawn(self, msg: dict, data: bytes, fds: list[int]) -> None:
        """No spare was left: fork an init for this request, and hand it to the server.
        A request that cannot be handed over is that run's error."""
        try:
            if len(fds) < 3:
                raise OSError(errno.EINVAL, "spawn needs three pipe fds")
            if type(msg.get("id")) is not int:  # it is written into the reply as is
                raise TypeError("spawn needs an integer id")
            self._give(self._fork_init((data, fds)), {"op": "init", "id": msg["id"]})
        except (OSError, TypeError) as e:
            reason = e.strerror if isinstance(e, OSError) and e.strerror else repr(e)
            self.send({"op": "error", "id": msg.get("id"), "error": str(reason)})
        finally:
            for fd in fds:
                os.close(fd)

    def reap(self) -> None:
        """Reap every child that has ended (inits, and without PID namespaces orphans)."""
        while True:
            try:
                pid, _status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            group = self.inits.pop(pid, None)
            if group is not None:
                self.groups.release(group)
            if not self.pidns:
                self.kill_orphans()

    def kill_orphans(self) -> None:
        """Without PID namespaces: kill every orphan we adopted (our children that are not
        inits), from /proc/<pid>/task/<tid>/children."""
        me = os.getpid()
        try:
            with open(f"/proc/{me}/task/{me}/children", "rb") as f:
                orphans = [int(p) for p in f.read().split() if int(p) not in self.inits]
        except OSError:
            orphans = []
        for pid in orphans:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass

    def shutdown(self, *_: object) -> None:
        for pid in self.inits:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        os._exit(0)


_SIGSET_SIZE = 128  # glibc's sigset_t
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


def _enter_pid_namespace(sock_fd: int) -> str:
    """Become pid 1 of a new PID namespace (fork once; the parent waits and mirrors us):
    "pid", or "user" when it took a user namespace of our own that maps our uid alone
    (without CAP_SYS_ADMIN), or "" when neither could be made."""
    route = "pid"
    try:
        _call("unshare", CLONE_NEWPID)
    except OSError:
        route = "user"
        uid, gid = os.getuid(), os.getgid()
        try:  # unprivileged: a user namespace mapping only ourselves grants the right
            _call("unshare", CLONE_NEWUSER | CLONE_NEWPID)
            for path, text in (("/proc/self/setgroups", "deny"),
                               ("/proc/self/uid_map", f"{uid} {uid} 1"),
                               ("/proc/self/gid_map", f"{gid} {gid} 1")):
                with open(path, "w") as f:
                    f.write(text)
        except OSError:
            return ""
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
    return route


def main(argv: list[str]) -> None:
    """Entry point: argv = [control socket fd, server pid, options as JSON]; options are
    {"rlimits": {name: [soft, hard]}, "namespaces": bool (false: none, subreapers only),
    "groups": RunGroups.options() (where per-run cgroups go, and their limits)}."""
    sock_fd, parent, opts = int(argv[0]), int(argv[1]), json.loads(argv[2])
    limits, namespaces = opts["rlimits"], opts["namespaces"]
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    for name, value in limits.items():
        if name != "nproc":  # per uid, so shared by every run: only without run cgroups
            resource.setrlimit(RLIMITS[name], tuple(value))
    _call("prctl", PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
    if os.getppid() != parent:
        os._exit(0)
    route = _enter_pid_namespace(sock_fd) if namespaces else ""
    sock = socket.socket(fileno=sock_fd)
    sock.set_inheritable(False)
    zygote = Zygote(sock, bool(route), namespaces, opts.get("groups"), opts.get("idmap"),
                    route == "user")
    gc.freeze()  # what exists now is shared with every init, untouched by their collections
    if "nproc" in limits and not zygote.groups.bases:
        resource.setrlimit(RLIMITS["nproc"], tuple(limits["nproc"]))
    signal.signal(signal.SIGTERM, zygote.shutdown)
    zygote.serve()


if __name__ == "__main__":
    main(sys.argv[1:])
