# toolsrv/landlock.py — the project's own ctypes binding of Linux Landlock.
#
# Theory of operation.  Landlock is three syscalls and three structs:
#   landlock_create_ruleset(attr, size, flags) -> fd   (flags=VERSION: returns the ABI)
#   landlock_add_rule(fd, type, attr, 0)               (a path or a TCP port rule)
#   landlock_restrict_self(fd, 0)                      (after prctl(NO_NEW_PRIVS))
# The launcher (toolsrv.zygote) calls build_ruleset() before it forks a tool, and the
# forked child calls only restrict_self() before execve, so the child does two syscalls.
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
import os
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
    fixed paths, so a build costs a stat and one landlock_add_rule per path instead of open,
    fstat, add_rule and close.  An entry is used only while the path still names the same
    inode (st_dev, st_ino): a replaced file (say, /etc/resolv.conf) gets a fresh fd."""

    def __init__(self, limit: int = 128) -> None:
        self.limit = limit
        self.entries: dict[str, _Entry] = {}

    def add_rules(self, ruleset_fd: int, paths: list[tuple[str, int]], fs_mask: int
                  ) -> list[str]:
        """Add a rule per existing path; return the paths that do not exist."""
        skipped = []
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
            finally:
                if self.entries.get(path) is not e:
                    os.close(e.fd)  # the cache is full: this one was for this build only
        return skipped

    def drop(self, path: str) -> None:
        old = self.entries.pop(path, None)
        if old is not None:
            os.close(old.fd)


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
    try:
        e = _Entry(os.open(path, os.O_PATH | os.O_CLOEXEC))
    except (FileNotFoundError, NotADirectoryError):
        return False
    try:
        addr = e.attr(access)
        if addr and _add_rule(SYS_ADD_RULE, ruleset_fd, RULE_PATH_BENEATH, addr, 0) < 0:
            _check(-1, f"landlock_add_rule {path}")
        return True
    finally:
        os.close(e.fd)


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
