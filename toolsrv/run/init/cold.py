# toolsrv/run/init/cold.py — pid 1 of a PID namespace: runs one tool at a time as its own child.
#
# Theory of operation.  The launcher (toolsrv/run/init/zygote.py) forks inits, each into a PID
# namespace of its own (and a cgroup of its own), and hands each to the server: the init's
# socket and a pidfd on it.  An init is the only process of its namespace the launcher is
# parent of; every tool it runs is its child, so every process of a run descends from it,
# whatever it does: fork, setsid, a double fork, or clone(CLONE_PARENT), which makes a
# sibling of its caller and so another child of the init (an init may not use
# CLONE_PARENT itself, and nothing outside the namespace has a child inside it).  Orphans
# are reparented to the init, which reaps them.
#
# A run arrives on the socket: the spawn request (JSON) and its fds — the tool's stdin,
# stdout, stderr and extra fds.  The main thread builds the run's Landlock ruleset from the
# request's rules (a profile's fixed paths come once, then by reference; a PathCache kept
# across runs makes a build one landlock_add_rule per fixed path).  The init's main thread
# stays root and unconfined (the tool can neither signal nor trace it);
# a throw-away thread takes on the run's confinement, state Linux keeps per thread, and
# spawns the tool, which inherits exactly that:
#   unshare(CLONE_FS) + chdir     the tool's cwd
#   setns(empty netns)            no-network profiles: no interface at all, UDP included
#   a mount namespace             a root server: the grants its tools' uid cannot reach,
#                                 idmapped (toolsrv/run/kernel/idmap.py); an elevated
#                                 run: the work and scratch bases hidden but for its own
#                                 cwd and TMPDIR, and a /proc of its own
#   setgroups/setresgid/setresuid raw syscalls: glibc's wrappers would change every thread
#   Landlock restrict_self        sets no_new_privs first
#   seccomp filter                no ptrace, process_vm_*, pidfd_getfd, kcmp; no set-id bits
#   posix_spawn                   setsid, the fds dup2'd to 0, 1, 2, 3..., signals reset
# and sets its CPU rlimit.  The main thread reaps every child until the tool has ended.  Then it kills every other process of the namespace (kill(-1) from pid 1: atomic
# against fork) and reaps until it has no child left — and so no process, as every one
# descends from it.  Only then does it write the tool's wait status (b"S<status>"), or the
# step that failed (b"E<json>"), on its socket, and wait for the next run: a namespace is
# reused only once it is proved empty.  A kill is SIGKILL to the init (the server holds a
# pidfd): the kernel ends the namespace with it.  Without PID namespaces the init is a
# subreaper instead, and kills every process left below it after the tool has ended.
from __future__ import annotations

import _thread
import ctypes
import errno
import json
import mmap
import os
import resource
import signal
import socket
import sys
from typing import NoReturn

from toolsrv.run.kernel import cgroups, idmap
from toolsrv.run.kernel.confine import confine_rest
from toolsrv.run.kernel.libc import check, setns, unshare
from toolsrv.run.init.wire import DEFAULT_PATH, MAX_PACKET, recv_into
from toolsrv.run.init.reap import reap_until
from toolsrv.run.kernel.rules import RuleCache
from toolsrv.run.kernel.seccomp import Filter

CLONE_FS, CLONE_NEWNET = 0x200, 0x40000000
PR_SET_PDEATHSIG, PR_SET_CHILD_SUBREAPER = 1, 36
MAX_FDS = 8  # stdin, stdout, stderr, up to five extra fds
_RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM,
                  signal.SIGCHLD, signal.SIGHUP, signal.SIGQUIT)
# setgroups, setresuid, setresgid: raw syscall numbers, so only the calling thread changes.
_SYSNO = {"x86_64": (116, 117, 119), "aarch64": (159, 147, 149)}.get(os.uname().machine)

_libc = ctypes.CDLL(None, use_errno=True)
_syscall3 = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_long, ctypes.c_long, ctypes.c_long,
                             ctypes.c_long, use_errno=True)(("syscall", _libc))


class Context:
    """What every init inherits from the launcher: fixed at the launcher's start."""

    __slots__ = ("pidns", "netns", "filter", "userns")

    def __init__(self, pidns: bool, netns: int, seccomp: Filter, userns: int = -1) -> None:
        self.pidns, self.netns, self.filter, self.userns = pidns, netns, seccomp, userns


def main(sock: socket.socket, ctx: Context, group: list[str],
         run: tuple[bytes, list[int]] | None, keep: tuple[int, ...]) -> NoReturn:
    """The init's whole life, in the freshly forked child; never returns."""
    try:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        _close_all_but({sock.fileno(), ctx.netns, ctx.userns, *keep})
        check(_libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0))
        if not ctx.pidns:
            check(_libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0))
        joined: OSError | None = None
        try:
            cgroups.join(group)
        except OSError as e:
            joined = e
        buf = mmap.mmap(-1, MAX_PACKET, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
        while True:
            if run is None:
                run = _receive(sock, buf)
                if run is None:
                    break  # the server is gone, or let us go
            if joined is not None:
                for fd in run[1]:
                    os.close(fd)
                report = b"E" + json.dumps(f"cgroup: {joined.strerror}").encode()
            else:
                msg = json.loads(run[0])
                if msg.get("op") == "warm":  # from now on a warm init (never returns)
                    _warm_up(sock, ctx, msg, run[1])
                report = _serve(ctx, msg, run[1])
            run = None
            sock.send(report)
    finally:
        os._exit(0)


_RULES = RuleCache()


def _serve(ctx: Context, msg: dict, fds: list[int]) -> bytes:
    """One run: build its ruleset, confine a thread, spawn the tool from it, reap; the
    report to send."""
    try:
        ruleset = _RULES.build(msg["landlock"]) if msg.get("landlock") else -1
    except (OSError, LookupError, TypeError, ValueError) as e:
        for fd in fds:
            os.close(fd)
        why = e.strerror if isinstance(e, OSError) and e.strerror else repr(e)
        return b"E" + json.dumps(f"landlock: {why}").encode()
    out: list[object] = []
    done = _thread.allocate_lock()
    done.acquire()

    def confine_and_spawn() -> None:
        try:
            out.append(_confine_and_spawn(ctx, msg, fds, ruleset))
        except BaseException as e:  # noqa: BLE001 - handed back to the main thread
            out.append(e)
        finally:
            done.release()

    try:
        _thread.start_new_thread(confine_and_spawn, ())
        done.acquire()
    finally:
        for fd in (*fds, ruleset):
            if fd >= 0:
                os.close(fd)
    tool = out[0] if out else RuntimeError("the spawning thread did not start")
    if isinstance(tool, BaseException):
        why = tool.strerror if isinstance(tool, OSError) and tool.strerror else repr(tool)
        return b"E" + json.dumps(str(why)).encode()
    return b"S%d" % reap_until(tool, ctx.pidns)  # type: ignore[arg-type]


def _confine_and_spawn(ctx: Context, msg: dict, fds: list[int], ruleset: int) -> int:
    """In the thread being used up: take on the run's confinement and spawn the tool."""
    step = "fs"
    uid = msg.get("uid")
    try:
        check(unshare(CLONE_FS))
        if msg["netns"] and ctx.netns >= 0:
            step = "netns"
            check(setns(ctx.netns, CLONE_NEWNET))
        if msg.get("mounts"):
            step = "mounts"
            mapped = [g[0] for g in msg["mounts"]["grants"] if g[3]]
            if mapped and ctx.userns < 0:
                raise OSError(errno.EPERM, f"tools run as uid {uid} cannot reach "
                              f"{mapped[0]}, and no idmapped mount can "
                              "be made here: serve with --run-as its owner, or grant a path "
                              "that uid can reach")
            idmap.apply(msg["mounts"], ctx.userns, uid)
            if msg["mounts"].get("proc"):    # an elevated run: hidden bases, its own /proc
                idmap.fresh_proc(ctx.pidns)
        if uid is not None:
            step = "uid"
            switch_uid(uid, msg["gid"])
        confine_rest(msg["cwd"], ruleset, bool(msg.get("nnp")), ctx.filter)
        step = "exec: " + msg["argv"][0]
        pid = os.posix_spawn(
            _find(msg["argv"][0], msg["env"]), msg["argv"], msg["env"], setsid=True,
            file_actions=[(os.POSIX_SPAWN_DUP2, fd, i) for i, fd in enumerate(fds)],
            setsigdef=_RESET_SIGNALS, setsigmask=())
    except OSError as e:
        step = getattr(e, "step", step)
        why = e.strerror or str(e)
        if e.errno == errno.EACCES and uid is not None:
            why += (f" (tools run as uid {uid}: grant the path in the sandbox profile, "
                    "or serve with --run-as a user who can reach it)")
        raise OSError(e.errno or errno.EINVAL, f"{step}: {why}") from None
    cpu = msg.get("rlimits", {}).get("cpu")
    if cpu:  # from this thread, the tool's uid now: the init itself may lack the right
        try:
            resource.prlimit(pid, resource.RLIMIT_CPU, tuple(cpu))
        except OSError:
            pass  # it has ended already
    return pid


def switch_uid(uid: int, gid: int) -> None:
    """This thread to uid and gid, with no supplementary groups (raw syscalls: glibc's
    wrappers would change every thread); the OSError names the call that failed."""
    if _SYSNO is None:
        raise OSError(errno.ENOSYS, f"uid switch unsupported on {os.uname().machine}")
    for name, nr, arg in (("setgroups", _SYSNO[0], 0), ("setresgid", _SYSNO[2], gid),
                          ("setresuid", _SYSNO[1], uid)):
        if _syscall3(nr, arg, arg, arg):  # setgroups(0, NULL): no groups
            err = ctypes.get_errno()
            raise OSError(err, f"{name}: {os.strerror(err)}")


def probe_uid(uid: int, gid: int) -> str | None:
    """Whether an init may switch to uid and gid, tried in a throw-away child as a run's
    thread does (switch_uid): None, or what failed ("setgroups: Operation not permitted")."""
    r, w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        try:
            os.close(r)
            switch_uid(uid, gid)
        except OSError as e:
            os.write(w, str(e.strerror or e).encode())
        finally:
            os._exit(0)
    os.close(w)
    try:
        why = os.read(r, 512).decode(errors="replace")
    finally:
        os.close(r)
        os.waitpid(pid, 0)
    return why or None


def _warm_up(sock: socket.socket, ctx: Context, msg: dict, fds: list[int]) -> NoReturn:
    """Become a warm init (toolsrv/run/init/warm.py): take on what every run of its kind
    shares, as posix_spawn and the spawning thread would give it to a tool (signals reset,
    the netns, a root server's idmapped grants, the tools' uid, which drops every
    capability), and exec the interpreter.
    A step that fails is reported as b"F<reason>"; the init then ends."""
    for fd in fds:
        os.close(fd)
    step = "memfd"
    try:
        from toolsrv.run.init import warm as warminit
        code = os.memfd_create("toolsrv-warm", 0)
        os.write(code, warminit.bundle())
        os.lseek(code, 0, os.SEEK_SET)
        for sig in _RESET_SIGNALS:
            signal.signal(sig, signal.SIG_DFL)
        signal.pthread_sigmask(signal.SIG_SETMASK, ())
        if msg["netns"] and ctx.netns >= 0:
            step = "netns"
            check(setns(ctx.netns, CLONE_NEWNET))
        if msg.get("mounts"):  # the grants of its kind, idmapped, in its own mount ns
            step = "mounts"
            idmap.apply(msg["mounts"], ctx.userns, msg["uid"])
        for fd in (ctx.netns, ctx.userns):
            if fd >= 0:
                os.close(fd)
        if msg.get("uid") is not None:
            step = "uid"
            os.setgroups([])
            os.setresgid(msg["gid"], msg["gid"], msg["gid"])
            os.setresuid(msg["uid"], msg["uid"], msg["uid"])
        os.set_inheritable(sock.fileno(), True)
        os.set_inheritable(code, True)
        step = "exec: " + msg["python"]
        os.execve(msg["python"], [msg["argv0"], "-c", warminit.BOOT, str(sock.fileno()),
                                  str(code), ",".join(warminit.WARMED)], msg["env"])
    except (OSError, ImportError) as e:
        why = e.strerror if isinstance(e, OSError) and e.strerror else str(e)
        try:
            sock.send(b"F" + json.dumps(f"{step}: {why}").encode())
        finally:
            os._exit(1)


def _close_all_but(keep: set[int]) -> None:
    """Close every inherited fd (the launcher's: its socket, other inits', cached paths)."""
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)


def _receive(sock: socket.socket, buf: mmap.mmap) -> tuple[bytes, list[int]] | None:
    try:
        size, fds = recv_into(sock, buf, MAX_FDS)
    except OSError:
        return None
    if not size:
        for fd in fds:
            os.close(fd)
        return None
    return buf[:size], fds


def _find(name: str, env: dict[str, str]) -> str:
    """The program path, searched in the tool's PATH (not ours) when name has no slash."""
    if "/" in name:
        return name
    for d in env.get("PATH", DEFAULT_PATH).split(":"):
        candidate = os.path.join(d or ".", name)
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))


if __name__ == "__main__":  # pragma: no cover - imported by the launcher only
    sys.exit("toolsrv.run.init.cold is part of the launcher")
