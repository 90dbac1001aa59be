"""The synthetic tree's node model: files and directories generated on demand.

Nothing here is materialised.  A directory answers `lookup(name)` and
`children()` by asking the state it stands for (the registry, the session
store); a file answers `read`/`write` from a function.  Node objects are
cheap and may be created afresh on every walk: what makes a node *the same
file* is its qid path, which `Qids` derives from a key naming what the node
stands for (("tool", name, "meta"), ("session", id, serial), ...).  A key
keeps its path for the life of the server; a re-created session has a new
serial and therefore new paths.  No path is ever 0 (9pfuse would make it
inode 0, which directory listings hide).  A directory with fixed entry names
(`FixedDir`: a session, an agent, a loaded tool) builds only the entry a walk
names, allocates its entries' paths in listing order, and keeps what it built.
The nodes of a session and an agent are kept by the session or agent they stand
for (fs.py), so the walk an agent repeats on every call builds nothing; a kept
node holds no state of its own (a fid's state is in the fid) and asks the model
whether it is alive, so keeping it changes nothing a client can see.

The contract of `Node` (as lib9p's 9p(3) and srv9p's Server fields): each callback
says what serve/server.py checked before calling it and what it does when a subclass
leaves it alone.  A callback marked "may wait" answers in one of four ways, which the
server's `_reply` tells apart: a value (the reply now); an awaitable, awaited in a task
of its own, so a blocking read never stalls the connection; a `Pending`, whose answer
other code gives (a call's result: no task, the reply goes out the moment it is
given); a `Committed`, a change made that only waits to be saved (the state's group
commit), which the server never cancels, so a flush cannot turn a change that took
effect into `interrupted`.  A Tflush cancels the task or the Pending.  Errors are
raised as P9Error with a string from errors.py; any other exception is answered
`input/output error: internal server error` and logged.  A fid's `aux` is the node's scratch space (fid.py): its
bytes and bytearray values count against the connection's max_held.
"""
from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any, Awaitable, Callable, Iterable

from toolsrv.proto import DMDIR, QTDIR, Dir, Qid

from .. import errors as E

UID = "toolsrv"
BOOT_TIME = int(time.time())


class Pending:
    """An answer that comes later without a task: the code that produces it calls
    `give(value)` or `fail(exc)`; a flush or a hang-up calls `cancel()`, which runs
    `on_cancel` (a flushed read of a call kills the run).  The server registers what
    to do with the outcome through `then`; the first of give, fail and cancel wins."""

    __slots__ = ("on_cancel", "_then", "done")

    def __init__(self, on_cancel: Callable[[], None] | None = None) -> None:
        self.on_cancel = on_cancel
        self._then: Callable[[Any, BaseException | None], None] | None = None
        self.done = False

    def then(self, fn: Callable[[Any, BaseException | None], None]) -> None:
        self._then = fn

    def give(self, value: Any) -> None:
        self._end(value, None)

    def fail(self, exc: BaseException) -> None:
        self._end(None, exc)

    def cancel(self) -> None:
        if not self.done and self.on_cancel is not None:
            self.on_cancel()
        self._end(None, asyncio.CancelledError())

    def _end(self, value: Any, exc: BaseException | None) -> None:
        if self.done:
            return
        self.done = True
        then, self._then, self.on_cancel = self._then, None, None   # no cycle outlives it
        if then is not None:
            then(value, exc)


class Committed:
    """An answer that waits only for a change already made to be saved (sessions.py's
    group commit): its outcome is the real reply (the result, or the save's error, the
    change then undone).  The server does not cancel it: a Tflush of its request waits
    for that reply and follows it (flush(5) allows the reply before the Rflush; lib9p
    sends it), and a hang-up drops the reply but lets the save end."""

    __slots__ = ("aw",)

    def __init__(self, aw: Awaitable[Any]) -> None:
        self.aw = aw

    def __await__(self) -> Any:
        return self.aw.__await__()


class Changes:
    """qid.vers and mtime of generated files whose content moves (revision, revwait, status,
    tools/index, tools/errors, tools/<t>/{meta,schema,prompt}, ctl, cwd, sandbox, log,
    schemas, search, out, err, the tool's status), as lib9p's rwrite bumps them: each file gives a cheap key of
    its content (the content itself when small); when the key differs from the one seen
    last, the file's version takes the next number of one server-wide counter and its
    mtime is now.  A file is first seen with version 0 and mtime the server's start.  One
    per tree (`changes`), kept by its root.  The
    table forgets everything past LIMIT files; a version is never reused after that, since
    the counter only grows."""

    LIMIT = 1 << 16

    def __init__(self) -> None:
        self._seen: dict[int, tuple[Any, int, int]] = {}
        self._count = itertools.count(1)

    def moved(self, qpath: int, key: Any) -> tuple[int, int]:
        """(version, mtime) of the file with this qid path, whose content has `key`."""
        hit = self._seen.get(qpath)
        if hit is not None and hit[0] == key:
            return hit[1], hit[2]
        if len(self._seen) >= self.LIMIT:
            self._seen.clear()
        vers, mtime = (0, BOOT_TIME) if hit is None else (next(self._count), int(time.time()))
        self._seen[qpath] = (key, vers, mtime)
        return vers, mtime


def changes(node: "Node") -> Any:
    """The `moved` of the tree `node` is in (its root keeps one Changes: qid paths are a
    tree's own, and two servers in one process have the same ones)."""
    root = node
    while root.parent is not root:
        root = root.parent
    ch = root.__dict__.get("changes_")
    if ch is None:
        ch = root.__dict__["changes_"] = Changes()
    return ch.moved


class Qids:
    """Stable qid paths derived from keys; paths start at 1 and never repeat."""

    def __init__(self) -> None:
        self._paths: dict[tuple, int] = {}
        self._next = itertools.count(1)

    def path(self, key: tuple) -> int:
        p = self._paths.get(key)
        if p is None:
            p = self._paths[key] = next(self._next)
        return p

    def forget(self, prefix: tuple) -> None:
        """Drop keys that start with `prefix` (a removed session or agent)."""
        n = len(prefix)
        for k in [k for k in self._paths if k[:n] == prefix]:
            del self._paths[k]


class Node:
    """A file of the tree.  Subclasses override what they serve; the callbacks' docs are
    the contract (the module's doc).  "Checked" lists what the server made sure of."""

    is_dir = False
    perm = 0o444
    _qid: Qid | None = None      # kept once made, for nodes whose version never changes

    def __init__(self, name: str, qpath: int, parent: "Node | None" = None) -> None:
        self.name = name
        self.qpath = qpath
        self.parent = parent if parent is not None else self

    # -- identity and metadata --
    def version(self) -> int:
        """qid.vers: moves when the content does (`changes`).  Default 0, and then the
        qid is made once and kept."""
        return 0

    def qid(self) -> Qid:
        """Type from is_dir, version(), the stable qpath.  Rarely overridden."""
        q = self._qid
        if q is None:
            q = Qid(QTDIR if self.is_dir else 0, self.version() & 0xFFFFFFFF, self.qpath)
            if type(self).version is Node.version:
                self._qid = q
        return q

    def length(self) -> int:
        """stat's length of a file (a directory's is 0).  Default 0."""
        return 0

    def mode(self) -> int:
        return (DMDIR if self.is_dir else 0) | self.perm

    def stat(self) -> Dir:
        """Tstat, Twstat (checked: the fid is known, the node alive) and directory reads.
        Default: built from qid, mode, mtime, length and name, owned by UID."""
        return Dir(0, 0, self.qid(), self.mode(), BOOT_TIME, self.mtime(),
                   0 if self.is_dir else self.length(), self.name, UID, UID, UID)

    def mtime(self) -> int:
        """Default: the server's start."""
        return BOOT_TIME

    def alive(self) -> bool:
        """False once what the node stands for is gone (a removed session): then Twalk from
        it, Topen, Tcreate, Twrite, Tremove, Tstat, Twstat and a directory's read at 0 fail
        `file not found` (a file's Tread and Tclunk still reach it).  Default: the parent's."""
        return self.parent is self or self.parent.alive()

    def writable(self) -> bool:
        """Whether Topen for writing or with OTRUNC (and a wstat to length 0) is allowed.
        Default: any write bit in perm."""
        return bool(self.perm & 0o222)

    # -- directories --
    def lookup(self, name: str) -> "Node | None":
        """The entry `name`, or None (Twalk; Tcreate, to refuse a name in use).  Checked:
        this is a live directory the fid, not open, reached; `name` is a valid name, not
        "..".  The guard is asked about the result afterwards.  A directory may have a
        `missing(name)` giving the error of a walk's first name not found (default
        `file not found`).  Default: the child of that name, by a scan of children()."""
        for c in self.children():
            if c.name == name:
                return c
        return None

    def children(self) -> Iterable["Node"]:
        """The entries, in listing order (a Tread of the open directory at offset 0, and
        the default lookup).  Checked: the node is alive.  The server keeps the encoded
        listing per fid, filters it by the guard and enforces the offsets.  Default: none."""
        return ()

    def create(self, name: str, perm: int, mode: int, fid: Any) -> "Node | Awaitable[Node]":
        """Tcreate: make `name` here and return it; may wait (a Committed).  Checked: the
        fid is known and not open, this is a live directory, `mode` suits a file of that
        kind (DMDIR in perm), `name` is valid and not in use, the guard allows "create".
        The server then opens the new node with `mode`, which must not wait, and moves
        the fid to it.  Default: `permission denied: create prohibited`."""
        raise E.P9Error(E.ECREATE)

    # -- files --
    def open(self, fid: Any, mode: int) -> Awaitable[None] | None:
        """Topen; may wait.  Checked: the fid is known and not open, the node alive; the
        mode is legal for it (a directory only OREAD, a file no OEXEC or ORCLOSE; writing
        or OTRUNC needs writable() and the guard's "write", reading a read bit in perm);
        truncate(fid) was called for OTRUNC.  fid.omode is set after.  Default: nothing."""
        return None

    def read(self, fid: Any, offset: int, count: int) -> bytes | Awaitable[bytes] | Pending:
        """Tread of a file: bytes (the server cuts them to count); may wait.  Checked: the
        fid is open for reading; count is at most the iounit.  Neither the offset nor
        alive() is checked.  Default: `permission denied`.  (A directory's reads are the
        server's, from children().)"""
        raise E.P9Error(E.EPERM)

    def write(self, fid: Any, offset: int, data: bytes) -> int | Awaitable[int] | Pending:
        """Twrite: the count of bytes taken; may wait.  Checked: the fid is open for
        writing, the node alive, data fits the iounit.  Default: `permission denied`."""
        raise E.P9Error(E.EPERM)

    def truncate(self, fid: Any) -> None:
        """Length set to 0: Topen with OTRUNC (after open's checks, before open) or a
        Twstat of length 0 (the guard allowing "write").  Default: writable files accept
        it and nothing changes; others fail `permission denied: wstat prohibited`."""
        if not self.writable():
            raise E.P9Error(E.EWSTAT)

    def clunk(self, fid: Any) -> None:
        """The fid is gone: Tclunk, Tremove (before remove), a new Tversion or a hang-up.
        Nothing is checked and it cannot fail: an exception is logged.  Default: nothing."""
        return None

    def remove(self) -> Awaitable[None] | None:
        """Tremove, after the fid was clunked; may wait (a Committed).  Checked: the fid
        was known, the guard allows "remove", the node is alive.  Default: `permission
        denied: remove prohibited`."""
        raise E.P9Error(E.EREMOVE)


class Dir_(Node):
    """A directory whose entries come from a function."""

    is_dir = True
    perm = 0o555

    def __init__(self, name: str, qpath: int, parent: Node | None,
                 entries: Callable[["Dir_"], Iterable[Node]] | None = None) -> None:
        super().__init__(name, qpath, parent)
        self._entries = entries

    def children(self) -> Iterable[Node]:
        return self._entries(self) if self._entries else ()


class FixedDir(Dir_):
    """A directory whose entries have fixed names (NAMES, in listing order).

    A walk builds only the entry it names, and the directory keeps it for the next
    walk.  Subclasses give each name's qid path (`paths()`, all of them at once, so
    paths are allocated in listing order whichever entry is walked first) and build an
    entry from its name and path (`make`)."""

    NAMES: tuple[str, ...] = ()
    _built: dict[str, Node] | None = None

    def paths(self) -> list[int]:
        raise NotImplementedError

    def make(self, name: str, qpath: int) -> Node:
        raise NotImplementedError

    def children(self) -> list[Node]:
        return [self._entry(n) for n in self.NAMES]

    def lookup(self, name: str) -> Node | None:
        built = self._built
        if built is not None:
            node = built.get(name)
            if node is not None:
                return node
        return self._entry(name) if name in self.NAMES else None

    def _entry(self, name: str) -> Node:
        built = self._built
        if built is None:
            built = self._built = {}
        node = built.get(name)
        if node is None:
            node = built[name] = self.make(name, self.paths()[self.NAMES.index(name)])
        return node


class TextFile(Node):
    """A read-only file whose bytes come from a function.

    A fid reads a snapshot taken when it reads offset 0, so a multi-read
    `cat` never sees two versions glued together; stat reports the length of
    what a read would return now.
    """

    def __init__(self, name: str, qpath: int, parent: Node | None,
                 content: Callable[[], bytes], perm: int = 0o444,
                 version: Callable[[], int] | None = None, append: bool = False,
                 quiet_remove: bool = False, changes: Callable[[], Any] | None = None) -> None:
        super().__init__(name, qpath, parent)
        self.content = content
        self.perm = perm
        self._version = version
        self._changes = changes       # a key of the content: its moves bump vers and mtime
        self.append = append          # grows at the end: a read past the snapshot refreshes it
        self.quiet_remove = quiet_remove

    def version(self) -> int:          # a version of its own (revision's) wins
        if self._version is not None:
            return self._version()
        if self._changes is not None:
            return changes(self)(self.qpath, self._changes())[0]
        return 0

    def mtime(self) -> int:
        if self._changes is not None:
            return changes(self)(self.qpath, self._changes())[1]
        return BOOT_TIME

    def length(self) -> int:
        return len(self.content())

    def read(self, fid: Any, offset: int, count: int) -> bytes:
        if self.append and offset and offset >= len(fid.aux.get("snapshot", b"")):
            fid.aux.pop("snapshot", None)       # tail -f: look again for new lines
            return self.content()[offset:offset + count]
        return snapshot_read(fid, self.content, offset, count)

    def remove(self) -> None:
        if not self.quiet_remove:
            raise E.P9Error(E.EREMOVE)


def answer_read(fid: Any, content: Callable[[], bytes], offset: int, count: int) -> bytes:
    """Reads of a file that answers its own writes (ctl, call): a per-fid snapshot of the
    answer, sliced by offset like any other file's, whose first byte is at the origin.

    The snapshot is taken by the first read after a write (`answered`) and by a read at
    offset 0.  Its origin is 0, or the offset where the fid's writes ended when that first
    read comes exactly there: a descriptor's read after its write comes at the kernel's
    file offset, past the bytes written (9pfuse, which uses direct I/O, plan9port's
    `9p rdwr`, v9fs), while toolsrv's own client reads at 0.  A read below the origin
    finds nothing (the bytes written are not served back)."""
    aux = fid.aux
    snap = aux.get("answer")
    if snap is None or offset == 0:
        snap = aux["answer"] = content()
        aux["origin"] = offset if offset and offset == aux.get("wrote") else 0
    pos = offset - aux["origin"]
    return snap[pos:pos + count] if pos >= 0 else b""


def answered(fid: Any, end: int) -> None:
    """A Twrite ending at offset `end` was taken: the next read takes a new answer."""
    fid.aux["wrote"] = end
    fid.aux.pop("answer", None)


def snapshot_read(fid: Any, content: Callable[[], bytes], offset: int, count: int) -> bytes:
    """Slice a per-fid snapshot of content(), refreshed on a read at offset 0."""
    snap = fid.aux.get("snapshot") if offset else None
    if snap is None:
        snap = content()
        fid.aux["snapshot"] = snap
    return snap[offset:offset + count]
