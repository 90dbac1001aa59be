# toolsrv/runinit.py — pid 1 of a run's PID namespace: confine, spawn the tool, reap, report.
#
# Theory of operation.  The launcher (toolsrv/zygote.py) forks one init per run into a new
# PID namespace, ahead of need while it is idle, or on demand.  The init is the run's only
# process the launcher is parent of: the tool is the init's child, so every process of the
# run descends from the init, whatever it does — fork, setsid, a double fork, or
# clone(CLONE_PARENT), which makes a sibling of its caller and so another child of the
# init (the init itself may not use CLONE_PARENT, and nothing else outside the namespace
# has a child inside it).  Orphans are reparented to the init, which reaps them.
#
# A spare init waits on its socket (the other end is the server's) for one run: the spawn
# request (JSON) and its fds — the tool's stdin, stdout, stderr and extra fds, then the
# Landlock ruleset, which the server built.  It then
# takes on the run's confinement itself, in this order:
#   cgroup (joined when forked)   pids.max and memory bound the run as a whole
#   setns(empty netns)            no-network profiles: no interface at all, UDP included
#   a mount namespace             a root server: the grants its tools' uid cannot reach,
#                                 idmapped (toolsrv/idmap.py)
#   setgroups/setresgid/setresuid the uid tools run as (a root server); drops capabilities
#   chdir(cwd)
#   Landlock restrict_self        sets no_new_privs first
#   seccomp filter                no ptrace, process_vm_*, pidfd_getfd, kcmp in the run
#   PR_SET_DUMPABLE 0             the init itself cannot be traced or read
# spawns the tool (posix_spawn: setsid, the fds dup2'd to 0, 1, 2, 3..., signals reset),
# sets the tool's CPU rlimit, and reaps every child until the tool has ended.  Then it kills
# every other process of the namespace (kill(-1) from pid 1: atomic against fork) and reaps
# until it has no child left — and so no process, as every one descends from it.  Only then
# does it write the tool's wait status (b"S<status>"), or the step that failed (b"E<json>"),
# on its socket, and exit.  So a run is reported ended only once nothing of it is left,
# while the namespace's teardown (the init's exit) stays off the caller's path; and no
# namespace is ever used twice.
# Without PID namespaces the init is a subreaper instead, and kills every process left
# below it after the tool has ended.
from __future__ import annotations

import ctypes
import errno
import gc
import json
import mmap
import os
import resource
import signal
import socket
import sys
from typing import NoReturn

from toolsrv import cgroups, idmap, landlock
from toolsrv.seccomp import Filter

CLONE_NEWNET = 0x40000000
PR_SET_PDEATHSIG, PR_SET_DUMPABLE, PR_SET_CHILD_SUBREAPER = 1, 4, 36
MAX_PACKET = 1 << 20
MAX_FDS = 9  # stdin, stdout, stderr, up to five extra fds, the Landlock ruleset
_RESET_SIGNALS = (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGINT, signal.SIGTERM,
                  signal.SIGCHLD, signal.SIGHUP, signal.SIGQUIT)


class Context:
    """What every init inherits from the launcher: fixed at the launcher's start."""

    __slots__ = ("pidns", "netns", "filter", "userns", "host_netns")

    def __init__(self, pidns: bool, netns: int, seccomp: Filter, userns: int = -1,
                 host_netns: int = -1) -> None:
        self.pidns, self.netns, self.filter, self.userns = pidns, netns, seccomp, userns
        self.host_netns = host_netns  # the launcher's own network namespace


_libc = ctypes.CDLL(None, use_errno=True)


def main(sock: socket.socket, ctx: Context, group: list[str],
         run: tuple[bytes, list[int]] | None, keep: tuple[int, ...]) -> NoReturn:
    """The init's whole life, in the freshly forked child; never returns."""
    gc.disable()  # a short life: no collection touching (and copying) the launcher's pages
    try:
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, signal.SIG_DFL)
        _close_all_but({sock.fileno(), ctx.netns, ctx.userns, ctx.host_netns, *keep})
        _prctl(PR_SET_PDEATHSIG, signal.SIGKILL)
        joined: OSError | None = None
        try:
            cgroups.join(group)
        except OSError as e:
            joined = e
        netns = False
        if run is None:  # a spare: most runs have no network, so enter that now, while idle
            netns = ctx.netns >= 0 and ctx.host_netns >= 0 and _setns(ctx.netns)
            run = _receive(sock)
            if run is None:
                os._exit(0)  # the server is gone, or let us go
        if joined is not None:
            raise OSError(joined.errno, f"cgroup: {joined.strerror}")
        report = b"S%d" % _run(ctx, json.loads(run[0]), run[1], netns)
    except BaseException as e:  # noqa: BLE001 - every failure is the run's error
        why = e.strerror if isinstance(e, OSError) and e.strerror else repr(e)
        report = b"E" + json.dumps(str(why)).encode()
    try:
        sock.send(report)
    finally:
        os._exit(0)


def _close_all_but(keep: set[int]) -> None:
    """Close every inherited fd (the launcher's: its socket, other inits', cached paths)."""
    low = 3
    for fd in sorted(k for k in keep if k >= 3):
        if fd > low:
            os.closerange(low, fd)
        low = fd + 1
    os.closerange(low, 1 << 20)


def _receive(sock: socket.socket) -> tuple[bytes, list[int]] | None:
    buf = mmap.mmap(-1, MAX_PACKET, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    size, ancillary, _, _ = sock.recvmsg_into([buf], socket.CMSG_SPACE(MAX_FDS * 4),
                                              socket.MSG_CMSG_CLOEXEC)
    fds: list[int] = []
    for level, kind, blob in ancillary:
        if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
            n = len(blob) // 4
            fds += list(memoryview(blob)[:n * 4].cast("i"))
    if not size:
        return None
    return buf[:size], fds


def _prctl(option: int, value: int) -> None:
    if _libc.prctl(option, value, 0, 0, 0):
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))


def _setns(fd: int) -> bool:
    if _libc.setns(fd, CLONE_NEWNET):
        err = ctypes.get_errno()
        raise OSError(err, f"netns: {os.strerror(err)}")
    return True


def _run(ctx: Context, msg: dict, fds: list[int], in_empty_netns: bool = False) -> int:
    """Confine this process, spawn the tool, reap until it has ended; its wait status."""
    ruleset = fds.pop() if msg.get("ruleset") else -1
    step = "netns"
    try:
        if msg["netns"] and ctx.netns >= 0 and not in_empty_netns:
            _setns(ctx.netns)
        elif not msg["netns"] and in_empty_netns:
            _setns(ctx.host_netns)  # a run with the network, on a spare made for none
        if msg.get("mounts"):
            step = "mounts"
            if ctx.userns < 0:
                raise OSError(errno.EPERM, f"tools run as uid {msg['uid']} cannot reach "
                              f"{msg['mounts']['grants'][0][0]}, and no idmapped mount can "
                              "be made here: serve with --run-as its owner, or grant a path "
                              "that uid can reach")
            idmap.apply(msg["mounts"], ctx.userns, msg["uid"])
        if msg.get("uid") is not None:
            step = "uid"
            os.setgroups([])
            os.setresgid(msg["gid"], msg["gid"], msg["gid"])
            os.setresuid(msg["uid"], msg["uid"], msg["uid"])
        step = "cwd: " + msg["cwd"]
        os.chdir(msg["cwd"])
        if ruleset >= 0:
            step = "landlock"
            landlock.restrict_self(ruleset)  # sets no_new_privs first
        elif msg.get("nnp"):
            step = "no_new_privs"
            _prctl(landlock.PR_SET_NO_NEW_PRIVS, 1)
        if msg.get("nnp") and ctx.filter.available:
            step = "seccomp"
            ctx.filter.install()
        step = "dumpable"
        _prctl(PR_SET_DUMPABLE, 0)
        if not ctx.pidns:
            _prctl(PR_SET_CHILD_SUBREAPER, 1)
        step = "exec: " + msg["argv"][0]
        tool = os.posix_spawn(
            _find(msg["argv"][0], msg["env"]), msg["argv"], msg["env"], setsid=True,
            file_actions=[(os.POSIX_SPAWN_DUP2, fd, i) for i, fd in enumerate(fds)],
            setsigdef=_RESET_SIGNALS, setsigmask=())
    except OSError as e:
        why = e.strerror or str(e)
        if e.errno == errno.EACCES and msg.get("uid") is not None:
            why += (f" (tools run as uid {msg['uid']}: grant the path in the sandbox profile, "
                    "or serve with --run-as a user who can reach it)")
        raise OSError(e.errno or errno.EINVAL, f"{step}: {why}") from None
    finally:
        for fd in (*fds, ruleset):
            if fd >= 0:
                os.close(fd)
    cpu = msg.get("rlimits", {}).get("cpu")
    if cpu:
        try:
            resource.prlimit(tool, resource.RLIMIT_CPU, tuple(cpu))
        except ProcessLookupError:
            pass
    return _reap_until(tool, ctx.pidns)


def _reap_until(tool: int, pidns: bool) -> int:
    """Reap every child (orphans come to us) until the tool has ended, then end the rest;
    the tool's wait status, once nothing of the run is left but us."""
    while True:
        try:
            pid, status = os.waitpid(-1, 0)
        except ChildProcessError:
            return 0
        if pid == tool:
            break
    if not pidns:
        _kill_below()
        return status
    while True:
        try:
            if os.waitpid(-1, os.WNOHANG)[0] == 0:  # a child is still running:
                os.kill(-1, signal.SIGKILL)  # from a namespace's pid 1: every other process
                while True:
                    os.waitpid(-1, 0)
        except ProcessLookupError:
            pass
        except ChildProcessError:  # no child left, so no process: each has us as ancestor
            return status


def _kill_below() -> None:
    """Without a PID namespace: kill what is left below us (orphans come to a subreaper),
    round after round, until nothing is."""
    me = os.getpid()
    while True:
        try:
            with open(f"/proc/{me}/task/{me}/children", "rb") as f:
                left = [int(p) for p in f.read().split()]
        except OSError:
            left = []
        if not left:
            return
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        for _ in left:
            try:
                os.waitpid(-1, 0)
            except ChildProcessError:
                break


def _find(name: str, env: dict[str, str]) -> str:
    """The program path, searched in the tool's PATH (not ours) when name has no slash."""
    if "/" in name:
        return name
    for d in env.get("PATH", "/usr/local/bin:/usr/bin:/bin").split(":"):
        candidate = os.path.join(d or ".", name)
        if os.path.isfile(candidate):
            return candidate
    raise FileNotFoundError(errno.ENOENT, os.strerror(errno.ENOENT))


if __name__ == "__main__":  # pragma: no cover - imported by the launcher only
    sys.exit("toolsrv.runinit is part of the launcher")
