# toolsrv/run/kernel/idmap.py — a root server's grants, mapped so that the uid tools run as reaches them.
#
# Theory of operation.  A root server runs tools as an unprivileged uid (nobody), which owns
# nothing: root's 0700 home, a 0700 checkout or a root-owned /workspace are out of its
# reach even where the profile grants them, so the tool format's quick start (a tool in
# ~/.config/ollie/tools) and a root project cwd fail.  Running the tool as root with its
# capabilities dropped would not do: Landlock does not govern connect(2) on pathname
# sockets, and a root-owned 0660 /run/docker.sock would be one connect away.
#
# So the grants are shown to the tool as its own, and nothing else is.  Per run, the
# server plans (plan(), from the run's granted paths and the tool's uid, with a short-lived
# cache of verdicts):
#   mapped   a granted path the uid cannot use as granted (its mode bits for that uid lack
#            r, w or x), or a root-owned one below a cover (its files are root's private
#            ones too: a 0700 tool): it is bind-mounted through an idmapped mount whose map
#            is root <-> the tool's uid (and gid), so root's files there show as the tool's
#            and what the tool creates is root's on disk, as if root had written it;
#   covers   the topmost directory above a granted path that the uid cannot traverse (/root
#            above /root/work), when it is not itself granted: a small tmpfs is mounted over
#            it, holding only mount points for the grants below it, so the tool can walk to
#            them and sees nothing else of the directory;
#   carried  every granted path below a cover, mapped or not, bind-mounted into the cover.
# The run's init (toolsrv/run/init/cold.py), still root, applies the plan in a mount namespace of
# its own (apply()): unshare(CLONE_NEWNS), make / recursively private (nothing propagates
# back), open_tree(OPEN_TREE_CLONE) every grant to mount while the tree is untouched,
# mount_setattr each (MOUNT_ATTR_IDMAP for mapped ones; always nosuid and nodev; read-only
# for ro and rox grants, so the tool cannot chmod what it may only read), mount the covers,
# then move_mount the clones in place, shallowest first.  Landlock rules name inodes, and a
# bind mount shows the same inodes, so the run's ruleset (built by the server before) holds
# unchanged.  What the tool may do stays exactly what the profile grants; the uid only stops
# being in the way.  Set-id bits stay off (toolsrv/run/kernel/seccomp.py): on a mapped path they would
# make set-uid-root programs.
from __future__ import annotations

import ctypes
import errno
import os
import stat
import time
from collections.abc import Set
from typing import Any

CLONE_NEWNS, CLONE_NEWUSER = 0x00020000, 0x10000000
MS_REC, MS_PRIVATE, MS_NOSUID, MS_NODEV, MS_NOEXEC = 0x4000, 0x40000, 0x2, 0x4, 0x8
AT_FDCWD, AT_EMPTY_PATH = -100, 0x1000
OPEN_TREE_CLONE, OPEN_TREE_CLOEXEC = 1, 0o2000000
MOVE_MOUNT_F_EMPTY_PATH = 0x4
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV = 0x1, 0x2, 0x4
MOUNT_ATTR_IDMAP = 0x00100000
_SYS = {"x86_64": (428, 429, 442), "aarch64": (428, 429, 442)}  # open_tree, move_mount,
#                                                                   mount_setattr
NEED = {"ro": (4, 5), "rox": (5, 5), "rw": (6, 7), "rwx": (7, 7)}  # (file, dir) mode bits
CACHE_SECONDS = 5.0  # a verdict on a fixed path is reused this long (see plan())

_libc = ctypes.CDLL(None, use_errno=True)
_libc.syscall.restype = ctypes.c_long


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


class IdmapError(OSError):
    """A grant could not be mapped; the message names the path and the way out."""


def _may(st: os.stat_result, uid: int, gid: int, want: int) -> bool:
    if st.st_uid == uid:
        bits = st.st_mode >> 6
    elif st.st_gid == gid:
        bits = st.st_mode >> 3
    else:
        bits = st.st_mode
    return bits & want == want


class Planner:
    """Plans the mounts of a root server's runs for one tool uid (see the header)."""

    def __init__(self, uid: int, gid: int) -> None:
        self.uid, self.gid = uid, gid
        self._verdicts: dict[tuple[str, str], tuple[float, tuple | None]] = {}
        self._plans: dict[tuple, tuple[float, dict | None]] = {}  # by the whole grant list

    def plan(self, paths: list[tuple[str, str]], fresh: Set[str] = frozenset()) -> dict | None:
        """The mounts a run needs ({"grants": [[path, writable, isdir, mapped]...],
        "covers": [dir...]}), or None when the uid reaches every grant already.

        paths: (path, access) with access in ro, rox, rw, rwx.  Paths in `fresh` are
        checked now; the others' verdicts may be up to CACHE_SECONDS old.  A stale verdict
        is never a hole: a grant mapped that no longer needed it gives the tool what the
        profile grants anyway, and one not mapped that now needs it fails closed."""
        now = time.monotonic()
        key = tuple(paths)
        whole = self._plans.get(key)
        if whole is not None and not fresh and now - whole[0] <= CACHE_SECONDS:
            return whole[1]  # the same grants planned a moment ago: the same plan
        plan = self._plan(paths, fresh, now)
        if not fresh:
            if len(self._plans) >= 256:
                self._plans.clear()
            self._plans[key] = (now, plan)
        return plan

    def _plan(self, paths: list[tuple[str, str]], fresh: Set[str], now: float
              ) -> dict | None:
        found: list[tuple[str, str, bool, bool, str | None]] = []
        for path, access in paths:
            key = (path, access)
            hit = self._verdicts.get(key)
            if hit is None or path in fresh or now - hit[0] > CACHE_SECONDS:
                hit = (now, self._judge(path, access))
                if path not in fresh:
                    self._verdicts[key] = hit
            if hit[1] is not None:
                found.append(hit[1])
        if not found:
            return None
        granted = {real for real, *_ in found}
        covers = sorted({c for *_, c in found if c is not None and c not in granted})
        grants: list[list[Any]] = [[real, access in ("rw", "rwx"), isdir, mapped]
                                   for real, access, isdir, mapped, cover in found
                                   if mapped or any(_under(real, c) for c in covers)]
        if not grants:
            return None
        grants.sort(key=lambda g: (g[0].count("/"), g[0]))
        return {"grants": grants, "covers": covers}

    def _judge(self, path: str, access: str) -> tuple | None:
        """(real path, access, isdir, mapped, blocking ancestor) or None when the uid
        reaches the path as granted; a missing path is None (Landlock skips it too)."""
        try:
            real = os.path.realpath(path)
            st = os.stat(real)
        except OSError:
            return None
        isdir = stat.S_ISDIR(st.st_mode)
        cover = None
        parts = real.strip("/").split("/")[:-1]
        for i in range(len(parts) + 1):
            up = "/" + "/".join(parts[:i])
            try:
                if not _may(os.stat(up), self.uid, self.gid, 1):
                    cover = up
                    break
            except OSError:
                return None
        # Mapped: what the uid cannot use as granted; and, in a private place (below a
        # cover), what is root's: its files there (a 0700 tool) are root's too.
        mapped = not _may(st, self.uid, self.gid, NEED[access][isdir]) or (
            cover is not None and st.st_uid == 0)
        if not mapped and cover is None:
            return None
        return real, access, isdir, mapped, cover


def _under(path: str, top: str) -> bool:
    return path == top or path.startswith(top.rstrip("/") + "/")


def seclude(plan: dict | None, hidden: list[str], keep: list[str]) -> dict:
    """An elevated run's mounts (issue 44.2): `plan` (a root server's mapped grants, or
    None), with every directory of `hidden` that exists (the work and scratch bases, where
    every session's cwd and every run's TMPDIR lie) covered by an empty tmpfs, but for the
    `keep` paths below one (the run's own cwd and TMPDIR), carried in; and "proc": a /proc
    of the run's own (fresh_proc)."""
    keep = [os.path.realpath(k) for k in keep]
    covers = set(plan["covers"]) if plan else set()
    hide = {os.path.realpath(h) for h in hidden if os.path.isdir(h)}
    hide = {h for h in hide if not any(_under(h, k) for k in keep)}   # kept ones whole
    covers |= hide
    covers = {c for c in covers if not any(c != o and _under(c, o) for o in covers)}
    grants = [g for g in (plan["grants"] if plan else [])
              if not any(_under(g[0], h) for h in hide) or any(_under(g[0], k) for k in keep)]
    have = {g[0] for g in grants}
    for k in keep:
        if k not in have and any(_under(k, c) for c in covers):
            grants.append([k, True, True, False])
    grants.sort(key=lambda g: (g[0].count("/"), g[0]))
    return {"grants": grants, "covers": sorted(covers), "proc": True}


def make_userns(uid: int, gid: int) -> int:
    """An fd on a user namespace whose map is root <-> uid, gid (for MOUNT_ATTR_IDMAP).
    A child enters a new user namespace and waits; we write its maps, keep a handle on
    its namespace and end it."""
    ready_r, ready_w = os.pipe2(os.O_CLOEXEC)
    go_r, go_w = os.pipe2(os.O_CLOEXEC)
    pid = os.fork()
    if pid == 0:
        try:
            os.close(ready_r)
            os.close(go_w)
            ok = _libc.unshare(CLONE_NEWUSER) == 0
            os.write(ready_w, b"1" if ok else b"0")
            os.read(go_r, 1)
        finally:
            os._exit(0)
    os.close(ready_w)
    os.close(go_r)
    try:
        if os.read(ready_r, 1) != b"1":
            raise OSError(errno.EPERM, "idmap: cannot make a user namespace")
        where = f"/proc/{_proc_pid(pid)}"  # the launcher is in a PID namespace of its own
        for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"),
                           ("gid_map", f"0 {gid} 1")):
            with open(f"{where}/{name}", "w") as f:
                f.write(text)
        return os.open(f"{where}/ns/user", os.O_RDONLY | os.O_CLOEXEC)
    finally:
        os.close(ready_r)
        os.close(go_w)  # the child reads EOF and ends
        os.waitpid(pid, 0)


def _proc_pid(pid: int) -> int:
    """pid as /proc (mounted for an outer PID namespace) knows it: a pidfd's fdinfo."""
    fd = os.pidfd_open(pid)
    try:
        with open(f"/proc/self/fdinfo/{fd}") as f:
            for line in f:
                if line.startswith("Pid:"):
                    return int(line.split()[1])
    finally:
        os.close(fd)
    raise OSError(errno.ESRCH, f"no /proc entry for pid {pid}")


def _sys(nr: int, *args: object) -> int:
    ret = _libc.syscall(ctypes.c_long(nr), *args)
    if ret < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err))
    return ret


def apply(plan: dict, userns: int, uid: int | None) -> None:
    """In the run's init, still root: a private mount namespace with the plan mounted."""
    open_tree, move_mount, mount_setattr = _SYS.get(os.uname().machine, (428, 429, 442))
    if _libc.unshare(CLONE_NEWNS) or _libc.mount(None, b"/", None, MS_REC | MS_PRIVATE, None):
        err = ctypes.get_errno()
        raise OSError(err, f"mount namespace: {os.strerror(err)}")
    clones: list[tuple[str, bool, int]] = []
    try:
        for path, writable, isdir, mapped in plan["grants"]:
            fd = _sys(open_tree, ctypes.c_int(AT_FDCWD), os.fsencode(path),
                      ctypes.c_uint(OPEN_TREE_CLONE | OPEN_TREE_CLOEXEC))
            clones.append((path, isdir, fd))
            attr = _MountAttr(MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
                              | (0 if writable else MOUNT_ATTR_RDONLY)
                              | (MOUNT_ATTR_IDMAP if mapped else 0), 0, 0,
                              userns if mapped else 0)
            try:
                _sys(mount_setattr, ctypes.c_int(fd), b"", ctypes.c_uint(AT_EMPTY_PATH),
                     ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)))
            except OSError as e:
                if not mapped:
                    raise
                raise IdmapError(e.errno, f"idmap: {path}: its filesystem cannot be "
                                 f"idmapped ({e.strerror}), and tools run as uid {uid} cannot "
                                 f"reach it: serve with --run-as its owner, or make it "
                                 f"readable (and writable, for rw) by uid {uid}") from None
        for cover in plan["covers"]:
            if _libc.mount(b"tmpfs", os.fsencode(cover), b"tmpfs", MS_NOSUID | MS_NODEV,
                           b"mode=0755,size=64k"):
                err = ctypes.get_errno()
                raise OSError(err, f"cover {cover}: {os.strerror(err)}")
        for path, isdir, fd in clones:
            _mount_point(path, isdir)
            _sys(move_mount, ctypes.c_int(fd), b"", ctypes.c_int(AT_FDCWD), os.fsencode(path),
                 ctypes.c_uint(MOVE_MOUNT_F_EMPTY_PATH))
    finally:
        for _, _, fd in clones:
            os.close(fd)


def fresh_proc(pidns: bool) -> None:
    """In the run's mount namespace: a /proc of its own PID namespace (its processes
    only), or, without one, an empty tmpfs over /proc."""
    ok = _libc.mount(b"proc", b"/proc", b"proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, None) \
        if pidns else _libc.mount(b"tmpfs", b"/proc", b"tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC,
                                  b"mode=0555,size=4k")
    if ok:
        err = ctypes.get_errno()
        raise OSError(err, f"/proc of the run's own: {os.strerror(err)}")


def _mount_point(path: str, isdir: bool) -> None:
    """Make the mount point in a cover (a fresh tmpfs) where it is missing."""
    if os.path.lexists(path):
        return
    os.makedirs(os.path.dirname(path), mode=0o755, exist_ok=True)
    if isdir:
        os.mkdir(path, 0o755)
    else:
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
