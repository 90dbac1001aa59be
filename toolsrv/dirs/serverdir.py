"""A directory of one server's own in a base servers share, and the sweep of dead ones'.

Theory of operation.  The servers of one uid share a few bases (the work base's
`nostate/`, where servers without state keep their sessions' directories; the scratch
base, where every call's TMPDIR is made).  Each server, for its life, claims
`<pid>.<random>/` in the base, beside a lock file `<pid>.<random>.lock` that it holds with
flock(LOCK_EX) from before the directory is made until after it is removed.  The kernel
drops a flock when its holder dies, however it dies and in whatever PID namespace it ran
(a pid is no proof: it is reused, and means nothing across namespaces).  So a lock file
another process can lock belongs to a server that is gone, and its directory is provably
stale: `sweep()` removes the directory, then the lock file, holding the lock meanwhile.
Nothing else is touched: a name without its lock file is not one a server makes, so it is
not ours to judge.  A sweeper that locks a lock file in the moment between its creation
and its creator's flock removes it; the creator then finds the name no longer names the
file it locked, and takes another name.  The lock's fd is close-on-exec: no child
process (the launcher, a tool) holds it on.  Everything goes through the base's fd
(trusted.Dir).
"""
from __future__ import annotations

import fcntl
import os

from .trusted import Dir, remove_at

LOCK = ".lock"


class ServerDir:
    """This server's directory in `base`: claim() it, close() it; sweep() the dead's."""

    def __init__(self, base: Dir, mode: int = 0o711) -> None:
        self.base, self.mode = base, mode
        self.name: str | None = None
        self.dir: Dir | None = None
        self._lock = -1

    def claim(self) -> Dir:
        """Lock a fresh name and make its directory (once; later calls answer the same)."""
        if self.dir is not None:
            return self.dir
        for _ in range(100):
            name = f"{os.getpid()}.{os.urandom(4).hex()}"
            try:
                fd = os.open(name + LOCK, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
                             | os.O_CLOEXEC, 0o600, dir_fd=self.base.fd)
            except FileExistsError:
                continue
            fcntl.flock(fd, fcntl.LOCK_EX)     # waits out a sweeper that got there first
            if self._still_named(fd, name):
                break
            os.close(fd)
        else:
            raise FileExistsError(f"{self.base.path}: no free name for this server")
        self.name, self._lock = name, fd
        self.dir = self.base.subdir(name, self.mode)
        return self.dir

    def _still_named(self, fd: int, name: str) -> bool:
        try:
            st = os.stat(name + LOCK, dir_fd=self.base.fd, follow_symlinks=False)
        except FileNotFoundError:
            return False
        return os.path.samestat(st, os.fstat(fd))

    def sweep(self) -> int:
        """Remove the directories of servers that are gone (their lock is free); how many."""
        swept = 0
        for entry in self.base.listdir():
            name = entry[:-len(LOCK)]
            if not entry.endswith(LOCK) or not name or name == self.name:
                continue
            try:
                fd = os.open(entry, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC,
                             dir_fd=self.base.fd)
            except OSError:
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                if self._still_named(fd, name):
                    remove_at(self.base.fd, name)
                    os.unlink(entry, dir_fd=self.base.fd)
                    swept += 1
            except OSError:           # BlockingIOError: a live server holds it
                pass
            finally:
                os.close(fd)
        return swept

    def close(self) -> None:
        """Remove this server's directory and everything in it, then its lock file."""
        if self.dir is None:
            return
        self.dir.close()
        remove_at(self.base.fd, self.name or "")
        try:
            os.unlink(f"{self.name}{LOCK}", dir_fd=self.base.fd)
        except OSError:
            pass
        os.close(self._lock)
        self.dir, self._lock = None, -1
