# toolsrv/run/kernel/seccomp.py — the seccomp filter every confined run takes on: no ptrace in a run,
# no set-id bits on files, no user namespaces.
#
# Theory of operation.  A run's processes share a uid and a Landlock domain, and this host
# (like most containers) has no Yama, so without more a tool's child could ptrace the tool
# (or any sibling), rewrite it and make it do what the tool would not.  The cheapest fence
# that survives execve is a seccomp filter: the run's init installs it after no_new_privs
# and before it spawns the tool, and every process of the run inherits it for good.  It
# answers EPERM to the calls that reach into another process's memory or fds — ptrace,
# process_vm_readv/writev, pidfd_getfd, kcmp.  (/proc/<pid>/mem is not a call: profiles
# grant no /proc, so Landlock refuses it.)
# It also answers EPERM to a chmod, open/creat or mknod whose mode has S_ISUID or S_ISGID:
# on a path mapped for a root server (toolsrv/run/kernel/idmap.py) the tool owns root's files, and a
# set-uid bit it set there would be a set-uid-root program on disk for everyone else.
# User namespaces are refused: clone or unshare with CLONE_NEWUSER answers EPERM (a user
# namespace is a large kernel attack surface, and no tool needs one), and clone3, whose
# flags sit in a struct a filter cannot read, answers ENOSYS, so the C library falls back
# to clone (glibc's fork, posix_spawn and pthread_create do), where the flag is seen.
# A system call of another architecture (i386 or x32 on an x86_64 host) is refused too:
# its numbers differ, and a filter that checked only ours could be walked around.  Such
# programs die with SIGSYS at their first call; toolsrv tools are native.
from __future__ import annotations

import ctypes
import errno
import os
import struct

PR_SET_SECCOMP, SECCOMP_MODE_FILTER = 22, 2
_LD_W_ABS, _JEQ_K, _JGE_K, _JSET_K, _RET_K = 0x20, 0x15, 0x35, 0x45, 0x06
RET_ALLOW, RET_ERRNO, RET_KILL_PROCESS = 0x7FFF0000, 0x00050000, 0x80000000
X32_BIT = 0x40000000
SETID_BITS = 0o6000
CLONE_NEWUSER = 0x10000000

# The machine's audit arch, the numbers of the calls refused, of the calls refused when
# their mode argument (by index) has a set-id bit, of those refused when their flags
# argument has CLONE_NEWUSER, and of those answered ENOSYS.
_ARCHES = {
    "x86_64": (0xC000003E,
               {"ptrace": 101, "process_vm_readv": 310, "process_vm_writev": 311, "kcmp": 312,
                "pidfd_getfd": 438},
               {"chmod": (90, 1), "fchmod": (91, 1), "fchmodat": (268, 2),
                "fchmodat2": (452, 2), "open": (2, 2), "creat": (85, 1), "openat": (257, 3),
                "mknod": (133, 1), "mknodat": (259, 2)},
               {"clone": (56, 0), "unshare": (272, 0)}, {"clone3": 435}),
    "aarch64": (0xC00000B7,
                {"ptrace": 117, "process_vm_readv": 270, "process_vm_writev": 271,
                 "kcmp": 272, "pidfd_getfd": 438},
                {"fchmod": (52, 1), "fchmodat": (53, 2), "fchmodat2": (452, 2),
                 "openat": (56, 3), "mknodat": (33, 2)},
                {"clone": (220, 0), "unshare": (97, 0)}, {"clone3": 435}),
}
REFUSED = ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd")


def _insn(code: int, jt: int, jf: int, k: int) -> bytes:
    return struct.pack("HBBI", code, jt, jf, k)


def program(machine: str | None = None) -> bytes | None:
    """The filter as struct sock_filter[] bytes; None on an architecture we do not know.

    Layout (BPF jumps go forward only): arch check; load nr; x32 check; one jeq per
    refused call (to DENY); one jeq per ENOSYS call (to NOSYS); one jeq per checked call
    (to its block); ALLOW; per checked call a block "load its argument; jset MASK ->
    DENY; ALLOW" (MASK: SETID_BITS for a mode, CLONE_NEWUSER for clone flags); DENY;
    NOSYS."""
    arch = _ARCHES.get(machine or os.uname().machine)
    if arch is None:
        return None
    audit, numbers, moded, cloning, nosys = arch
    refused = [numbers[n] for n in REFUSED]
    checked = [(nr, arg, SETID_BITS) for nr, arg in moded.values()] + \
        [(nr, arg, CLONE_NEWUSER) for nr, arg in cloning.values()]
    absent = list(nosys.values())
    head = [(_LD_W_ABS, 0, 0, 4),                         # seccomp_data.arch
            (_JEQ_K, 1, 0, audit),
            (_RET_K, 0, 0, RET_KILL_PROCESS),             # a foreign architecture
            (_LD_W_ABS, 0, 0, 0)]                         # seccomp_data.nr
    n_jumps = (audit == 0xC000003E) + len(refused) + len(absent) + len(checked)
    allow_at = len(head) + n_jumps                        # then the blocks, DENY, NOSYS
    deny_at = allow_at + 1 + 3 * len(checked)
    nosys_at = deny_at + 1
    out = list(head)

    def to(target: int) -> int:
        return target - len(out) - 1                      # a jump counts from the next insn

    if audit == 0xC000003E:                               # x32 calls: nr | 0x40000000
        out.append((_JGE_K, to(deny_at), 0, X32_BIT))
    for nr in refused:
        out.append((_JEQ_K, to(deny_at), 0, nr))
    for nr in absent:
        out.append((_JEQ_K, to(nosys_at), 0, nr))
    for i, (nr, _arg, _mask) in enumerate(checked):
        out.append((_JEQ_K, to(allow_at + 1 + 3 * i), 0, nr))
    out.append((_RET_K, 0, 0, RET_ALLOW))
    for _nr, arg, mask in checked:                        # low word of args[arg] (LE)
        out.append((_LD_W_ABS, 0, 0, 16 + 8 * arg))
        out.append((_JSET_K, to(deny_at), 0, mask))
        out.append((_RET_K, 0, 0, RET_ALLOW))
    out.append((_RET_K, 0, 0, RET_ERRNO | errno.EPERM))
    out.append((_RET_K, 0, 0, RET_ERRNO | errno.ENOSYS))
    assert len(out) == nosys_at + 1
    assert all(0 <= jt <= 255 for _, jt, _, _ in out)
    return b"".join(_insn(*i) for i in out)


class _Fprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


_libc = ctypes.CDLL(None, use_errno=True)
_prctl = _libc.prctl
_prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_void_p, ctypes.c_ulong,
                   ctypes.c_ulong]


class Filter:
    """A filter made once (in the launcher, before any fork) and installed per run."""

    def __init__(self, code: bytes | None = None) -> None:
        code = program() if code is None else code
        self.available = code is not None
        self._buf = ctypes.create_string_buffer(code or b"", len(code or b""))
        self._prog = _Fprog(len(code or b"") // 8, ctypes.addressof(self._buf))

    def install(self) -> None:
        """Take the filter on (no_new_privs must be set already); raises OSError."""
        if not self.available:
            raise OSError(errno.ENOSYS, f"seccomp: no filter for {os.uname().machine}")
        if _prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.addressof(self._prog), 0, 0):
            err = ctypes.get_errno()
            raise OSError(err, f"seccomp: {os.strerror(err)}")
