"""Where a server keeps its state, and the lock that gives it one server at a time.

The default state directory follows the address the server listens on, so two
servers never share sessions by accident and a restart on the same address
finds its own again:

    plan9port's default address (unix!/tmp/ns.$USER.$DISPLAY/toolsrv,
    NAMESPACE unset)                  -> $XDG_STATE_HOME/toolsrv/
    any other first address           -> $XDG_STATE_HOME/toolsrv/<address>/

where <address> is the dial string with every run of characters other than
letters, digits, `.` and `-` made one `_`, then `-` and 8 hex digits of its
SHA-256 (two addresses never meet in one name).  --state DIR names one
directly; --no-state keeps none.  The addresses come in as dial strings (the
caller has them from serve/dial.py: dirs/ sits below serve/ and imports nothing of it).

Whatever directory is used is locked for the server's life: `lock` in it is
held with flock(2) and holds the holder's pid and addresses.  The kernel drops
the lock when its process dies, however it dies, so a lock file left behind
by a dead server blocks nothing: only a live holder makes a second server
refuse, with a message naming that holder.  The descriptor is close-on-exec
(the launcher and the tools never hold it).
"""
from __future__ import annotations

import errno
import fcntl
import hashlib
import os
import re

LOCK = "lock"


def state_home() -> str:
    return os.path.join(os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state"),
                        "toolsrv")


def default_state_dir(addr: str, plan9port_default: str) -> str:
    """The state directory of a server whose first address is the dial string `addr`;
    `plan9port_default` is plan9port's default address (dial.plan9port_default()), whose
    server keeps its state in state_home() itself."""
    if addr == plan9port_default:
        return state_home()
    name = re.sub(r"[^A-Za-z0-9.-]+", "_", addr).strip("_")[:80]
    return os.path.join(state_home(), f"{name}-{hashlib.sha256(addr.encode()).hexdigest()[:8]}")


class StateInUse(Exception):
    """Another live server holds the state directory."""


class StateLock:
    """The flock on <state_dir>/lock, held from acquire() to release()."""

    def __init__(self, state_dir: str) -> None:
        self.state_dir = state_dir
        self.path = os.path.join(state_dir, LOCK)
        self.fd: int | None = None

    def acquire(self, addrs: list[str]) -> None:
        """Take the lock and write our pid and addresses in it, or raise StateInUse naming
        the holder (OSError when the directory cannot be made or the file opened)."""
        os.makedirs(self.state_dir, mode=0o700, exist_ok=True)
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            holder = _read(fd)
            os.close(fd)
            if e.errno not in (errno.EWOULDBLOCK, errno.EAGAIN):
                raise
            raise StateInUse(self._in_use(holder)) from None
        self.fd = fd
        self.update(addrs)

    def update(self, addrs: list[str]) -> None:
        """Rewrite the holder's line (the addresses once listening: a tcp port 0 resolved)."""
        if self.fd is None:
            return
        line = f"{os.getpid()} {' '.join(addrs)}\n".encode()
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, line, 0)

    def release(self) -> None:
        if self.fd is not None:
            try:
                os.ftruncate(self.fd, 0)    # no stale pid for a reader to be misled by
            except OSError:
                pass
            os.close(self.fd)               # closing drops the flock
            self.fd = None

    def _in_use(self, holder: str) -> str:
        pid, _, addrs = holder.strip().partition(" ")
        who = (f"toolsrv pid {pid} serving {addrs or 'an unknown address'}" if pid.isdigit()
               else "another toolsrv (it has not written its pid yet)")
        return (f"state directory {self.state_dir} is in use by {who}; give this server its "
                "own with --state DIR, or keep no state with --no-state")


def _read(fd: int) -> str:
    try:
        return os.pread(fd, 4096, 0).decode("utf-8", "replace")
    except OSError:
        return ""
