"""Watching the search directories: inotify through ctypes, and batching of what it sees.

Theory of operation.  `DirWatcher` keeps one inotify watch per existing search directory
(its entries changing) and one on the directory's parent, or, for a directory that does
not exist yet, on its nearest existing ancestor, so the directory appearing, vanishing or
being renamed is seen too.  Each event becomes a *hint* passed to a callback: a file path
inside a search directory ("re-read this entry") or a search directory itself ("re-scan
all of it": it appeared, vanished, or the kernel's queue overflowed).  Whenever the
directory structure may have changed the watches are re-armed; `verify()`, called
periodically, re-arms when a directory's identity (device, inode) changed behind our back
(an ancestor renamed, a symlink re-pointed).  Directories that cannot be watched at all
(no inotify here, or the watch limit reached) are listed in `unwatched`; the registry
polls those instead.

`Batcher` turns a burst of hints into one batch: it applies them once no hint arrived for
`quiet` seconds, or `cap` seconds after the first, holding on (up to `hold`) while a file
was modified but not yet closed, so a half-written file is seldom parsed.

`Follower` puts these together for the registry: watches feeding a Batcher feeding the
registry's pass, plus a periodic tick (re-check host probes, `verify()`, poll what is
unwatched) — or, without inotify, a tick that re-scans everything by stat.  Nothing here
parses `.meta` files or knows about tools.
"""

from __future__ import annotations

import asyncio
import ctypes
import errno
import logging
import os
import stat
import struct
from collections.abc import Callable, Iterable, Sequence

log = logging.getLogger(__name__)

IN_MODIFY, IN_ATTRIB, IN_CLOSE_WRITE = 0x2, 0x4, 0x8
IN_MOVED_FROM, IN_MOVED_TO, IN_CREATE, IN_DELETE = 0x40, 0x80, 0x100, 0x200
IN_DELETE_SELF, IN_MOVE_SELF, IN_UNMOUNT = 0x400, 0x800, 0x2000
IN_Q_OVERFLOW, IN_IGNORED, IN_ONLYDIR = 0x4000, 0x8000, 0x01000000
IN_NONBLOCK, IN_CLOEXEC = os.O_NONBLOCK, getattr(os, "O_CLOEXEC", 0o2000000)
WATCH_MASK = (IN_MODIFY | IN_ATTRIB | IN_CLOSE_WRITE | IN_MOVED_FROM | IN_MOVED_TO
              | IN_CREATE | IN_DELETE | IN_DELETE_SELF | IN_MOVE_SELF | IN_ONLYDIR)
_GONE_SELF = IN_DELETE_SELF | IN_MOVE_SELF | IN_IGNORED | IN_UNMOUNT
_EVENT = struct.Struct("iIII")  # struct inotify_event: wd, mask, cookie, len; then name

Hint = Callable[[str, str], None]  # (path, "change" | "writing" | "closed")


class _Inotify:
    """The three inotify system calls through ctypes, on a non-blocking descriptor."""

    def __init__(self) -> None:
        libc = ctypes.CDLL(None, use_errno=True)
        self._add = libc.inotify_add_watch
        self._add.argtypes = (ctypes.c_int, ctypes.c_char_p, ctypes.c_uint32)
        self._rm = libc.inotify_rm_watch
        self._rm.argtypes = (ctypes.c_int, ctypes.c_int)
        fd = libc.inotify_init1(IN_NONBLOCK | IN_CLOEXEC)
        if fd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e))
        self.fd: int = fd

    def add(self, path: str) -> int:
        wd: int = self._add(self.fd, os.fsencode(path), WATCH_MASK)
        if wd < 0:
            e = ctypes.get_errno()
            raise OSError(e, os.strerror(e), path)
        return wd

    def rm(self, wd: int) -> None:
        self._rm(self.fd, wd)  # fails harmlessly for a watch the kernel already dropped

    def read(self) -> list[tuple[int, int, str]]:
        """All queued events as (wd, mask, name); empty when none are queued."""
        out: list[tuple[int, int, str]] = []
        while True:
            try:
                buf = os.read(self.fd, 65536)
            except BlockingIOError:
                return out
            off = 0
            while off + _EVENT.size <= len(buf):
                wd, mask, _cookie, n = _EVENT.unpack_from(buf, off)
                raw = buf[off + _EVENT.size: off + _EVENT.size + n].split(b"\0", 1)[0]
                out.append((wd, mask, os.fsdecode(raw)))
                off += _EVENT.size + n

    def close(self) -> None:
        os.close(self.fd)


def inotify_available() -> bool:
    """True if this platform's C library has inotify and an instance can be made."""
    try:
        _Inotify().close()
        return True
    except (OSError, AttributeError):
        return False


class DirWatcher:
    """inotify watches for a list of search directories, reporting hints to `hint`."""

    def __init__(self, dirs: Sequence[str], hint: Hint) -> None:
        self.dirs = list(dirs)
        self.unwatched: list[str] = []
        self._hint = hint
        self._ino = _Inotify()
        self._roles: dict[int, list[tuple[str, str | None]]] = {}
        self._ident: dict[str, tuple[int, int] | None] = {}
        self._loop: asyncio.AbstractEventLoop | None = None
        self.arm()

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        """Deliver events on `loop` (its reader callback calls `hint`)."""
        self._loop = loop
        loop.add_reader(self._ino.fd, self._readable)

    def close(self) -> None:
        """Stop watching and release the inotify descriptor."""
        if self._loop is not None:
            self._loop.remove_reader(self._ino.fd)
            self._loop = None
        self._ino.close()

    def arm(self) -> None:
        """(Re)create the watches to match what exists now."""
        want: dict[str, list[tuple[str, str | None]]] = {}
        for d in self.dirs:
            self._ident[d] = _identity(d)
            if self._ident[d] is not None:
                want.setdefault(d, []).append((d, None))
            # The nearest existing proper ancestor, watched for the component below it.
            child, anc = d, os.path.dirname(d)
            while anc != child and not os.path.isdir(anc):
                child, anc = anc, os.path.dirname(anc)
            if anc != child:
                want.setdefault(anc, []).append((d, os.path.basename(child)))
        roles: dict[int, list[tuple[str, str | None]]] = {}
        failed: set[str] = set()
        for path, rs in want.items():
            try:
                roles.setdefault(self._ino.add(path), []).extend(rs)
            except OSError as e:
                failed.update(d for d, _ in rs)
                if e.errno not in (errno.ENOENT, errno.ENOTDIR):
                    log.warning("cannot watch %s: %s; polling it", path, e.strerror)
        for wd in self._roles.keys() - roles.keys():
            self._ino.rm(wd)
        self._roles = roles
        self.unwatched = [d for d in self.dirs if d in failed]

    def verify(self) -> None:
        """Re-arm and re-scan any directory whose identity changed since it was armed."""
        moved = [d for d in self.dirs if _identity(d) != self._ident.get(d)]
        if moved:
            self.arm()
            for d in moved:
                self._hint(d, "change")

    def _readable(self) -> None:
        rearm: set[str] = set()
        for wd, mask, name in self._ino.read():
            if mask & IN_Q_OVERFLOW:
                rearm.update(self.dirs)
                continue
            for d, component in self._roles.get(wd, ()):
                if component is None and mask & _GONE_SELF:
                    rearm.add(d)
                elif component is None and name:
                    self._hint(os.path.join(d, name), _state(mask))
                elif component is None or name == component:  # dir's own mode, or moved
                    rearm.add(d)
            if mask & IN_IGNORED:
                self._roles.pop(wd, None)
        if rearm:
            self.arm()
            for d in rearm:
                self._hint(d, "change")


def _state(mask: int) -> str:
    if mask & IN_MODIFY:
        return "writing"
    return "closed" if mask & (IN_CLOSE_WRITE | IN_DELETE | IN_MOVED_FROM) else "change"


def _identity(path: str) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except OSError:
        return None
    return (st.st_dev, st.st_ino) if stat.S_ISDIR(st.st_mode) else None


class Batcher:
    """Collects hints and hands them to `apply` as one set once they stop arriving."""

    def __init__(self, apply: Callable[[set[str]], object], quiet: float = 0.01,
                 cap: float = 0.1, hold: float = 1.0) -> None:
        self._apply = apply
        self.quiet, self.cap, self.hold = quiet, cap, hold
        self._pending: set[str] = set()
        self._writing: set[str] = set()
        self._first = self._last = 0.0
        self._task: asyncio.Task[None] | None = None

    def add(self, path: str, state: str = "change") -> None:
        """Note a hint; must be called on the running event loop."""
        loop = asyncio.get_running_loop()
        self._last = loop.time()
        self._pending.add(path)
        if state == "writing":
            self._writing.add(path)
        elif state == "closed":
            self._writing.discard(path)
        if self._task is None:
            self._first = self._last
            self._task = loop.create_task(self._run())

    async def _run(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(self.quiet)
            now = loop.time()
            if self._writing:
                if now - self._first >= self.hold:
                    break
            elif now - self._last >= self.quiet or now - self._first >= self.cap:
                break
        self._task = None
        hints, self._pending = self._pending, set()
        self._writing.clear()
        try:
            self._apply(hints)
        except Exception:  # a bug in one reload must not stop later ones
            log.exception("applying %d changes failed", len(hints))

    def close(self) -> None:
        """Drop pending hints and stop the timer."""
        if self._task is not None:
            self._task.cancel()
            self._task = None
        self._pending.clear()


class Follower:
    """Keeps a registry in step with the disk.  `update(hints, recheck)` is the registry's
    pass: hints None re-scans every directory by stat, else only the paths given;
    `recheck` also re-asks the host probes.  With inotify, watch events are batched into
    passes, and each tick (every `interval` s) re-checks, re-arms moved directories and
    polls unwatchable ones; without it (mode "poll", or no inotify) each tick re-scans all."""

    def __init__(self, dirs: Sequence[str], update: Callable[[Iterable[str] | None, bool], object],
                 mode: str = "auto", interval: float = 2.0) -> None:
        self.dirs, self.mode, self.interval = list(dirs), mode, interval
        self._update = update
        self._batcher = Batcher(lambda hints: update(hints, True))
        self._watcher: DirWatcher | None = None
        self._ticker: asyncio.Task[None] | None = None

    @property
    def watching(self) -> bool:
        """True while inotify watches (not polling) deliver changes."""
        return self._watcher is not None

    def start(self) -> None:
        """Arm the watches and start ticking; call on the running loop, before the scan."""
        loop = asyncio.get_running_loop()
        if self.mode == "inotify" or (self.mode == "auto" and inotify_available()):
            try:
                self._watcher = DirWatcher(self.dirs, self._batcher.add)
                self._watcher.start(loop)
            except (OSError, AttributeError) as e:
                log.warning("inotify unavailable (%s): polling every %gs", e, self.interval)
                self._watcher = None
        self._ticker = loop.create_task(self._tick())

    async def _tick(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            try:
                if self._watcher is None:
                    self._update(None, True)
                else:
                    self._watcher.verify()
                    self._update(self._watcher.unwatched, True)
            except Exception:
                log.exception("periodic registry re-check failed")

    async def close(self) -> None:
        """Stop ticking and watching."""
        if self._ticker is not None:
            self._ticker.cancel()
            try:
                await self._ticker
            except asyncio.CancelledError:
                pass
            self._ticker = None
        self._batcher.close()
        if self._watcher is not None:
            self._watcher.close()
            self._watcher = None
