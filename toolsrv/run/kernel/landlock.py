# toolsrv/run/kernel/landlock.py — the project's own ctypes binding of Linux Landlock.
#
# Theory of operation.  Landlock is three syscalls and three structs:
#   landlock_create_ruleset(attr, size, flags) -> fd   (flags=VERSION: returns the ABI)
#   landlock_add_rule(fd, type, attr, 0)               (a path or a TCP port rule)
#   landlock_restrict_self(fd, 0)                      (after prctl(NO_NEW_PRIVS))
# An init builds each run's ruleset (rules.py's RuleCache, over a PathCache of this module),
# then restrict_self() in the thread that will spawn the tool, or in a warm init's forked
# child (confine.py; Landlock binds the calling thread only).
#
# A ruleset cannot be reused across runs (each has its own {TMPDIR}, and rules can be added
# to a ruleset but never removed), so the cost is in building it: PathCache keeps O_PATH fds
# of the profile's fixed paths, and a _Watch (inotify on every directory their lookups pass
# through, plus the mount table) tells when none of them can have changed, so that a build
# is just one landlock_add_rule per fixed path from a ready list (0.12 ms for the default
# profile's 40 present paths, against 0.3 ms with a stat per path).
#
# Invariants this module keeps (each one a defect found in a published binding):
#   - return values are checked, never errno alone (errno is stale after any earlier failure);
#   - a rule on a non-directory carries only file rights (else the kernel says EINVAL);
#   - the ruleset attr is 8, 16 or 24 bytes according to the ABI (fs; +net at 4; +scoped at 6);
#   - every mask is intersected with what the running ABI knows, so callers can ask for the
#     full set and learn from abi_masks() what is really enforced.
# No dependency beyond the standard library: the zygote imports this with `python -S -I`.
from __future__ import annotations

import ctypes
import errno
import os
import select
import stat

SYS_CREATE_RULESET, SYS_ADD_RULE, SYS_RESTRICT_SELF = 444, 445, 446  # same on x86_64, arm64
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH, RULE_NET_PORT = 1, 2
PR_SET_NO_NEW_PRIVS = 38

# Filesystem access rights (ABI 1 unless noted).
EXECUTE = 1 << 0
WRITE_FILE = 1 << 1
READ_FILE = 1 << 2
READ_DIR = 1 << 3
REMOVE_DIR = 1 << 4
REMOVE_FILE = 1 << 5
MAKE_CHAR = 1 << 6
MAKE_DIR = 1 << 7
MAKE_REG = 1 << 8
MAKE_SOCK = 1 << 9
MAKE_FIFO = 1 << 10
MAKE_BLOCK = 1 << 11
MAKE_SYM = 1 << 12
REFER = 1 << 13  # ABI 2
TRUNCATE = 1 << 14  # ABI 3
IOCTL_DEV = 1 << 15  # ABI 5
# Network (ABI 4) and IPC scopes (ABI 6).
BIND_TCP = 1 << 0
CONNECT_TCP = 1 << 1
SCOPE_ABSTRACT_UNIX = 1 << 0
SCOPE_SIGNAL = 1 << 1

FILE_RIGHTS = EXECUTE | WRITE_FILE | READ_FILE | TRUNCATE | IOCTL_DEV
READ = READ_FILE | READ_DIR
WRITE = (WRITE_FILE | REMOVE_DIR | REMOVE_FILE | MAKE_CHAR | MAKE_DIR | MAKE_REG | MAKE_SOCK
         | MAKE_FIFO | MAKE_BLOCK | MAKE_SYM | REFER | TRUNCATE | IOCTL_DEV)
ACCESS = {"ro": READ, "rox": READ | EXECUTE, "rw": READ | WRITE, "rwx": READ | WRITE | EXECUTE}


class LandlockError(OSError):
    """A Landlock syscall failed; errno and the step are in the message."""


class _RulesetAttr(ctypes.Structure):
    _fields_ = [("handled_access_fs", ctypes.c_uint64), ("handled_access_net", ctypes.c_uint64),
                ("scoped", ctypes.c_uint64)]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
_prctl = _libc.prctl
_prctl.restype = ctypes.c_int
# landlock_add_rule with a fixed prototype: ints convert without per-call wrapping.
_add_rule = ctypes.CFUNCTYPE(ctypes.c_long, ctypes.c_long, ctypes.c_int, ctypes.c_int,
                             ctypes.c_void_p, ctypes.c_uint32, use_errno=True)(("syscall", _libc))


def _check(ret: int, what: str) -> int:
    if ret < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"{what}: {os.strerror(err)}")
    return ret


def abi_version() -> tuple[int, str | None]:
    """Return (ABI, None) or (0, reason) when the kernel has no usable Landlock."""
    ret = _syscall(ctypes.c_long(SYS_CREATE_RULESET), None, ctypes.c_size_t(0),
                   ctypes.c_uint32(CREATE_RULESET_VERSION))
    if ret >= 0:
        return int(ret), None
    err = ctypes.get_errno()
    reasons = {38: "kernel has no landlock syscalls (ENOSYS)",
               95: "landlock disabled at boot (EOPNOTSUPP: add landlock to lsm=)"}
    return 0, reasons.get(err, f"landlock_create_ruleset: {os.strerror(err)}")


def abi_masks(abi: int) -> tuple[int, int, int]:
    """(fs, net, scoped) rights the given ABI can handle; zeros when abi is 0."""
    if abi <= 0:
        return 0, 0, 0
    fs = (1 << 13) - 1
    if abi >= 2:
        fs |= REFER
    if abi >= 3:
        fs |= TRUNCATE
    if abi >= 5:
        fs |= IOCTL_DEV
    net = BIND_TCP | CONNECT_TCP if abi >= 4 else 0
    scoped = SCOPE_ABSTRACT_UNIX | SCOPE_SIGNAL if abi >= 6 else 0
    return fs, net, scoped


class _Entry:
    __slots__ = ("dev", "ino", "fd", "is_dir", "attrs")

    def __init__(self, fd: int) -> None:
        st = os.fstat(fd)
        self.dev, self.ino, self.fd = st.st_dev, st.st_ino, fd
        self.is_dir = stat.S_ISDIR(st.st_mode)
        self.attrs: dict[int, _PathBeneathAttr] = {}

    def attr(self, access: int) -> int:
        """Address of a ready path_beneath attr for this access (0: nothing to grant)."""
        if not self.is_dir:
            access &= FILE_RIGHTS
        if not access:
            return 0
        a = self.attrs.get(access)
        if a is None:
            a = self.attrs[access] = _PathBeneathAttr(access, self.fd)
        return ctypes.addressof(a)


class PathCache:
    """O_PATH fds (and ready rule structs) of paths that recur in every ruleset, a profile's
    fixed paths, so a build costs at most a stat and one landlock_add_rule per path instead of
    open, fstat, add_rule and close.  An entry is used only while the path still names the
    same inode (st_dev, st_ino): a replaced file (say, /etc/resolv.conf) gets a fresh fd.

    Checking that with a stat per path per build was most of a build's cost, so a full check
    also adds every directory in which those paths' lookups find a name to a _Watch (inotify,
    and the mount table), and keeps the rules it added as a ready list for that list of
    paths.  While the watch has seen nothing, no name on the way can have changed, so a build
    of the same paths is just their landlock_add_rule calls.  Any event drops every ready
    list: the next builds check in full again, and re-arm."""

    READY = 8  # ready lists kept (one per distinct list of fixed paths: profile, ABI)

    def __init__(self, limit: int = 128, watch: bool = True) -> None:
        self.limit = limit
        self.entries: dict[str, _Entry] = {}
        self.watch = _Watch() if watch else None
        self.fast_builds = 0  # builds served from a ready list (for tests and benchmarks)
        self._ready: list[tuple[list[tuple[str, int]], int, list[int], list[str]]] = []
        self._fired = 0  # watches in a row that fired before serving a single build
        self._served = False
        self._slow = 0

    def add_rules(self, ruleset_fd: int, paths: list[tuple[str, int]], fs_mask: int
                  ) -> list[str]:
        """Add a rule per existing path; return the paths that do not exist."""
        if self._ready:
            if self.watch is not None and self.watch.unchanged():
                for key, mask, kept, skipped in self._ready:
                    if mask == fs_mask and key == paths:
                        for addr in kept:
                            if _add_rule(SYS_ADD_RULE, ruleset_fd, RULE_PATH_BENEATH, addr,
                                         0) < 0:
                                _check(-1, "landlock_add_rule (a cached path)")
                        self.fast_builds += 1
                        self._served = True
                        return list(skipped)
            else:
                self._forget()
        # Watch before the check: a change after this point is seen by the check or the
        # watch.  Names that keep changing (a watched directory tools write to) would make
        # every build pay for a watch it cannot use: after 3 such, retry every 64th build.
        self._slow += 1
        armed = self.watch is not None and len(self._ready) < self.READY and \
            (self._fired < 3 or self._slow % 64 == 0) and self.watch.add([p for p, _ in paths])
        skipped, addrs = self._check(ruleset_fd, paths, fs_mask)
        if armed and addrs is not None:
            self._ready.append((list(paths), fs_mask, addrs, list(skipped)))
        return skipped

    def _forget(self) -> None:
        """The watch fired (or an entry went): no ready list can be trusted."""
        self._fired = 0 if self._served else self._fired + 1
        self._served = False
        self._ready = []
        if self.watch is not None:
            self.watch.close()

    def _check(self, ruleset_fd: int, paths: list[tuple[str, int]], fs_mask: int
               ) -> tuple[list[str], list[int] | None]:
        """The full build: stat each path, refresh replaced entries, add the rules.  Returns
        (skipped paths, the rule addresses in order, or None when an fd was not kept)."""
        skipped: list[str] = []
        addrs: list[int] | None = []
        for path, access in paths:
            try:
                st = os.stat(path)
            except (FileNotFoundError, NotADirectoryError):
                self.drop(path)
                skipped.append(path)
                continue
            e = self.entries.get(path)
            if e is None or e.ino != st.st_ino or e.dev != st.st_dev:
                self.drop(path)
                try:
                    e = _Entry(os.open(path, os.O_PATH | os.O_CLOEXEC))
                except (FileNotFoundError, NotADirectoryError):
                    skipped.append(path)
                    continue
                if len(self.entries) < self.limit:
                    self.entries[path] = e
            try:
                addr = e.attr(access & fs_mask)
                if addr and _add_rule(SYS_ADD_RULE, ruleset_fd, RULE_PATH_BENEATH, addr, 0) < 0:
                    _check(-1, f"landlock_add_rule {path}")
                if addrs is not None and addr:
                    addrs.append(addr)
            finally:
                if self.entries.get(path) is not e:
                    os.close(e.fd)  # the cache is full: this one was for this build only
                    addrs = None
        return skipped, addrs

    def drop(self, path: str) -> None:
        old = self.entries.pop(path, None)
        if old is not None:
            if self._ready:
                self._forget()  # a ready list may hold this entry's rule struct
            os.close(old.fd)


# inotify (the flags and the events that change which inode a name resolves to)
_IN_NONBLOCK_CLOEXEC = 0o4000 | 0o2000000
_IN_NAMES = 0x40 | 0x80 | 0x100 | 0x200 | 0x400 | 0x800  # moved from/to, create, delete, self
_IN_ONLYDIR_NOFOLLOW = 0x01000000 | 0x02000000
# Filesystems whose every change goes through this kernel's VFS, so inotify sees it (not NFS,
# FUSE, procfs, sysfs...): ext2-4, xfs, btrfs, tmpfs/devtmpfs, ramfs, overlayfs, f2fs, zfs,
# bcachefs, squashfs, erofs, iso9660.
_LOCAL_FS = frozenset((0xEF53, 0x58465342, 0x9123683E, 0x01021994, 0x858458F6, 0x794C7630,
                       0xF2F52010, 0x2FC12FC1, 0xCA451A4E, 0x73717368, 0xE0F5E1E2, 0x9660))
_inotify_init1 = _libc.inotify_init1
_inotify_add_watch = _libc.inotify_add_watch
_inotify_add_watch.argtypes = [ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32]
_statfs = _libc.statfs
_statfs.argtypes = [ctypes.c_char_p, ctypes.c_void_p]


class _Watch:
    """Whether any name on the way to some paths may have changed since they were added: one
    inotify instance watching every directory in which their lookups (symlinks followed)
    find a name, and the mount table (/proc/self/mountinfo polls POLLPRI on a change)."""

    def __init__(self) -> None:
        self.fds: list[int] = []
        self.poller: select.poll | None = None
        self.dirs: set[str] = set()
        self._statfs = ctypes.create_string_buffer(256)  # struct statfs; f_type comes first

    def add(self, paths: list[str]) -> bool:
        """Watch these paths too; False when that cannot be done (then close() and nothing
        may be trusted).

        Race-free by construction: a directory is watched after the one it is found in
        (parents first), so a directory replaced after its watch was added shows as an
        event of its parent's; and the walk is repeated after each round of new watches
        until it finds nothing unwatched, so a symlink retargeted meanwhile is followed."""
        if not self.fds and not self._open():
            return False
        for _ in range(4):
            dirs: set[str] = set()
            for path in paths:
                _lookup_dirs(path, dirs)
            new = dirs - self.dirs
            if not new:
                return True
            for d in sorted(new, key=lambda d: 0 if d == "/" else d.count("/")):
                raw = os.fsencode(d)
                if _statfs(raw, self._statfs) != 0 or \
                        ctypes.c_long.from_buffer(self._statfs).value & 0xFFFFFFFF \
                        not in _LOCAL_FS or \
                        _inotify_add_watch(self.fds[0], raw, _IN_NAMES | _IN_ONLYDIR_NOFOLLOW) < 0:
                    self.close()
                    return False
                self.dirs.add(d)
        self.close()  # names kept changing while we watched them
        return False

    def _open(self) -> bool:
        ino = _inotify_init1(_IN_NONBLOCK_CLOEXEC)
        if ino < 0:
            return False
        self.fds.append(ino)
        try:
            self.fds.append(os.open("/proc/self/mountinfo", os.O_RDONLY | os.O_CLOEXEC))
        except OSError:
            self.close()
            return False
        self.poller = select.poll()
        self.poller.register(ino, select.POLLIN)
        self.poller.register(self.fds[1], select.POLLPRI)
        return True

    def unchanged(self) -> bool:
        return self.poller is not None and not self.poller.poll(0)

    def close(self) -> None:
        self.poller = None
        self.dirs = set()
        for fd in self.fds:
            os.close(fd)
        self.fds = []


def _lookup_dirs(path: str, out: set[str]) -> None:
    """Add to out each directory in which resolving path looks a name up, following symlinks
    as the kernel does, as things are now; a missing name ends the walk (its directory is in
    out, so its creation will be seen)."""
    todo = [c for c in path.split("/") if c]
    cur, hops = "/", 0
    while todo:
        name = todo.pop(0)
        if name == ".":
            continue
        out.add(cur)
        if name == "..":
            cur = os.path.dirname(cur)  # cur has no symlink in it: the lexical parent is right
            continue
        nxt = os.path.join(cur, name)
        try:
            st = os.lstat(nxt)
            if stat.S_ISLNK(st.st_mode):
                hops += 1
                target = os.readlink(nxt)
                if hops > 40:
                    return
                todo[:0] = [c for c in target.split("/") if c]
                if target.startswith("/"):
                    cur = "/"
                continue
        except OSError:
            return
        cur = nxt


def build_ruleset(abi: int, paths: list[tuple[str, int]], *, handle_net: bool,
                  bind_tcp: list[int], connect_tcp: list[int], scoped: int,
                  cache: PathCache | None = None, cached: int = 0) -> tuple[int, list[str]]:
    """Create a ruleset fd (O_CLOEXEC) and return (fd, skipped paths).

    paths: (absolute path, access mask); rights the ABI lacks are dropped, and a path that
    does not exist is skipped.  handle_net: deny TCP bind/connect except the listed ports.
    scoped: SCOPE_* bits (IPC scopes) to enforce, dropped where the ABI lacks them.
    The first `cached` paths go through `cache` (they recur in every call).
    The caller owns the fd and closes it after the child has been spawned."""
    fs_mask, net_mask, scope_mask = abi_masks(abi)
    attr = _RulesetAttr(fs_mask, net_mask if handle_net else 0, scope_mask & scoped)
    size = 24 if abi >= 6 else 16 if abi >= 4 else 8
    fd = _check(_syscall(ctypes.c_long(SYS_CREATE_RULESET), ctypes.byref(attr),
                         ctypes.c_size_t(size), ctypes.c_uint32(0)), "landlock_create_ruleset")
    try:
        skipped = cache.add_rules(fd, paths[:cached], fs_mask) if cache and cached else []
        if cache is None:
            cached = 0
        for path, access in paths[cached:]:
            if not _add_path(fd, path, access & fs_mask):
                skipped.append(path)
        if handle_net and net_mask:
            for port in bind_tcp:
                _add_port(fd, BIND_TCP, port)
            for port in connect_tcp:
                _add_port(fd, CONNECT_TCP, port)
    except BaseException:
        os.close(fd)
        raise
    return fd, skipped


def _add_path(ruleset_fd: int, path: str, access: int) -> bool:
    """One rule for a path not in the cache (a per-call one: {CWD}, {TMPDIR}...).  No fstat:
    the rule is tried as given, and only if the kernel refuses it (EINVAL: dir rights on a
    non-directory) again with the file rights alone."""
    try:
        fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        if access:
            attr = _PathBeneathAttr(access, fd)
            addr = ctypes.addressof(attr)
            if _add_rule(SYS_ADD_RULE, ruleset_fd, RULE_PATH_BENEATH, addr, 0) < 0:
                if ctypes.get_errno() != errno.EINVAL or not access & ~FILE_RIGHTS:
                    _check(-1, f"landlock_add_rule {path}")
                attr.allowed_access = access & FILE_RIGHTS
                if attr.allowed_access and \
                        _add_rule(SYS_ADD_RULE, ruleset_fd, RULE_PATH_BENEATH, addr, 0) < 0:
                    _check(-1, f"landlock_add_rule {path}")
        return True
    finally:
        os.close(fd)


def _add_port(ruleset_fd: int, access: int, port: int) -> None:
    attr = _NetPortAttr(access, port)
    if _add_rule(SYS_ADD_RULE, ruleset_fd, RULE_NET_PORT, ctypes.addressof(attr), 0) < 0:
        _check(-1, f"landlock_add_rule port {port}")


def restrict_self(ruleset_fd: int) -> None:
    """Set no_new_privs and enforce the ruleset on the calling thread (the forked child)."""
    _check(_prctl(ctypes.c_int(PR_SET_NO_NEW_PRIVS), ctypes.c_ulong(1), ctypes.c_ulong(0),
                  ctypes.c_ulong(0), ctypes.c_ulong(0)), "prctl(NO_NEW_PRIVS)")
    _check(_syscall(ctypes.c_long(SYS_RESTRICT_SELF), ctypes.c_int(ruleset_fd),
                    ctypes.c_uint32(0)), "landlock_restrict_self")
