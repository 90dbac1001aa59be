# toolsrv/run/scratch.py — the private per-call directories ({TMPDIR}, and $HOME).
#
# Theory of operation.  Each call gets a fresh directory under one base proved ours
# (toolsrv/dirs/trusted.py), owned by the tools' uid, removed once the run's namespace is
# reported empty.  Scratch makes a few ahead, off the call's path, and removes in the
# background; the base is an executable tmpfs where one is at hand (mkdir and rmdir take
# microseconds there), else the temporary directory.
from __future__ import annotations

import asyncio
import os
import threading
import itertools
import collections
from typing import Any

from toolsrv.dirs.serverdir import ServerDir
from toolsrv.dirs.trusted import Dir, open_dir

TMPFS_MAGIC = 0x01021994


def _on_tmpfs(path: str) -> bool:
    """True when path is on a tmpfs (memory: mkdir and rmdir take microseconds)."""
    import ctypes
    buf = ctypes.create_string_buffer(120)   # struct statfs; f_type is its first word
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.statfs(os.fsencode(path), buf) != 0:
        return False
    return ctypes.c_long.from_buffer(buf).value == TMPFS_MAGIC


def default_tmp_base() -> str:
    """Where per-call directories go: a tmpfs when the system has one we may use
    ($XDG_RUNTIME_DIR, else /dev/shm) and that lets programs run from it (profiles grant
    execute in {TMPDIR}), else the temporary directory."""
    for d in (os.environ.get("XDG_RUNTIME_DIR"), "/dev/shm"):
        if d and os.path.isdir(d) and os.access(d, os.W_OK | os.X_OK) and _on_tmpfs(d) \
                and not os.statvfs(d).f_flag & (os.ST_NOEXEC | os.ST_RDONLY):
            return os.path.join(d, f"toolsrv-{os.geteuid()}")
    import tempfile
    return os.path.join(tempfile.gettempdir(), f"toolsrv-{os.geteuid()}")


class Scratch:
    """Private per-call directories (0700, owned by the tool's uid), handed out once, never
    reused.  They are made in this server's own directory of the base (serverdir.py: held
    by a lock while the server lives, swept by a later server once it is gone), and made,
    chowned and removed through that directory's fd (trusted.py).  On a tmpfs (the default
    base when there is one) mkdir and rmdir take microseconds, and are done on the event
    loop: no thread hop per call.  On a disk they cost milliseconds (ext4 here: 0.3 ms
    mkdir, 0.4-1.4 ms rmdir), so directories are made ahead of need and removed in worker
    threads, and the loop never waits for them.  A directory the tool left files in is
    removed by a worker thread either way."""

    def __init__(self, base: str | None, owner: tuple[int, int] | None, ahead: int = 8,
                 inline: bool | None = None) -> None:
        self._base = base
        self.owner, self.ahead = owner, ahead
        self.ready: collections.deque[str] = collections.deque()
        self.filling = False
        self.pending: set[asyncio.Future[None]] = set()
        self._checked = False
        self._names = itertools.count(1)
        self._inline = inline        # None: decided by the base's filesystem (open)
        self.inline = False
        self._check_lock = threading.Lock()
        self.own: ServerDir | None = None
        self.dir: Dir | None = None  # this server's directory in the base

    def open(self) -> None:
        """Once, before the first directory, in whichever thread gets there first: the
        base proved ours, this server's directory in it claimed."""
        if self._checked:
            return
        with self._check_lock:
            if self._checked:
                return
            self.own = ServerDir(open_dir(self.base, 0o711))
            self.dir = self.own.claim()
            self.inline = _on_tmpfs(self.base) if self._inline is None else self._inline
            self._checked = True

    @property
    def base(self) -> str:
        """Where the directories go: the given base, else default_tmp_base(), found on
        first use (nothing of it is needed to start serving)."""
        if not self._base:
            self._base = default_tmp_base()
        return self._base

    def _make(self) -> str:
        self.open()
        assert self.dir is not None
        while True:   # names are ours alone: the directory is 0711 and owned by us
            name = f"run-{next(self._names)}"
            try:
                path = self.dir.mkdir(name, 0o700)
                break
            except FileExistsError:
                continue
        if self.owner:
            try:
                self.dir.chown(name, *self.owner)
            except OSError:
                self.dir.rmdir(name)
                raise
        return path

    def sweep(self) -> int:
        """Remove the directories of servers that are gone (serverdir.py)."""
        self.open()
        assert self.own is not None
        return self.own.sweep()

    def sweep_later(self) -> None:
        self._track(asyncio.get_running_loop().run_in_executor(None, self.sweep))

    def _fill(self) -> None:
        while len(self.ready) < self.ahead:
            self.ready.append(self._make())

    def _track(self, fut: asyncio.Future[Any]) -> None:
        def done(f: asyncio.Future[Any]) -> None:
            self.pending.discard(f)
            if not f.cancelled():
                f.exception()  # retrieved: a failed removal is not worth a warning

        self.pending.add(fut)
        fut.add_done_callback(done)

    def refill(self) -> None:
        if self.inline or self.filling or len(self.ready) > self.ahead // 2:
            return
        self.filling = True
        fut = asyncio.get_running_loop().run_in_executor(None, self._fill)
        fut.add_done_callback(lambda _: setattr(self, "filling", False))
        self._track(fut)

    async def take(self) -> str:
        if self.inline and not self.ready:
            return self._make()
        try:
            path = self.ready.popleft()
        except IndexError:
            made = asyncio.get_running_loop().run_in_executor(None, self._make)
            try:
                path = await asyncio.shield(made)
            except asyncio.CancelledError:  # the caller is gone: the directory is not
                made.add_done_callback(
                    lambda f: None if f.cancelled() or f.exception() else self.release(f.result()))
                raise
        self.refill()
        return path

    def release(self, path: str) -> None:
        d = self.dir
        if d is None:
            return
        name = os.path.basename(path)
        if self.inline:
            try:
                d.rmdir(name)         # the tool left nothing: one system call
                return
            except OSError:
                pass
        self._track(asyncio.get_running_loop().run_in_executor(None, d.remove, name))

    async def close(self) -> None:
        if self.pending:
            await asyncio.wait(self.pending, timeout=10)
        while self.ready:
            self.release(self.ready.popleft())
        if self.pending:
            await asyncio.wait(self.pending, timeout=10)
        if self.own is not None and not self.pending:   # no thread is using the fds
            self.own.close()          # this server's directory, and whatever is left in it
            self.own.base.close()
            self.own = self.dir = None
            self._checked = False
