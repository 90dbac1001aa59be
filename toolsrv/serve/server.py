"""The 9P2000 server core, cut like plan9port's lib9p srv.c.

Theory of operation.  `Conn.receive(msg)` is the one entry point for a decoded
T-message.  It runs every precondition check in one place (version negotiated,
duplicate tag, unknown fid, fid in use, walk from an open fid, open mode against the
file's permissions, directory-read offsets, write counts), then a small handler per
message type calls the node (tree/node.py's contract says what was checked for each).

Errors.  A handler that raises P9Error answers Rerror with that string; any other
exception answers a short Rerror and is logged: the connection keeps serving.  A frame
whose content is illegal (a name not UTF-8 or holding NUL, a wstat's Dir that does not
fill its stat[n]) arrives as a proto.Malformed, answered like any failed request
(`illegal file name`, `bad directory in wstat`); only broken framing closes the
connection (transport.py).

Answers that wait.  A handler returns the reply, or a `Later` when its node's answer
comes later (`_reply`): an awaitable runs as a task keyed by its tag, a `Pending` (a
call's result) is answered the moment it is given, with no task; so one blocking read
never stalls the connection.

Respond and flush.  Every request ends through `_respond`: it frees the tag, writes the
reply, then any Rflush waiting on it.  Tflush cancels the flushed task, which answers
`interrupted`; its Rflush follows.  A `Committed` (a change made that only waits for
its save: Tcreate and Tremove of a session or agent, the Twrite of ctl, cwd, sandbox)
is never cancelled: its real reply goes out, then the Rflush (flush(5), as lib9p).

Scope and lifecycle.  A connection may carry a guard (ServerConfig.guard) that scopes
what it may walk to, write, create and remove, and so what its directory reads list
(a tool's client9p connection is scoped to its agent).  A successful Tversion and a
hang-up abort every request (replies dropped; a Committed's save still ends) and clunk
every fid; a failed Tversion changes nothing.
"""
from __future__ import annotations

import asyncio
import inspect
import logging
from typing import Any, Callable

from toolsrv.proto import (
    DMDIR, IOHDRSZ, MAXWELEM, NOFID, NOTOUCH16, NOTOUCH32, NOTOUCH64, OCEXEC, OEXEC, ORCLOSE,
    ORDWR, OREAD, OTRUNC, OWRITE, Malformed, Qid, Rattach, Rauth, Rclunk, Rcreate, Rerror,
    Rflush, Ropen, Rread, Rremove, Rstat, Rversion, Rwalk, Rwrite, Rwstat, Tattach, Tauth,
    Tclunk, Tcreate, Tflush, Topen, Tread, Tremove, Tstat, Tversion, Twalk, Twrite, Twstat,
    encode_dir,
)

from .. import errors as E
from ..errors import P9Error
from .fid import Fid
from .req import Later, Req
from ..registry.names import valid_name
from ..record import Record
from ..tree.node import Committed, Node, Pending

log = logging.getLogger("toolsrv.server")

DEFAULT_MSIZE = 65536 + IOHDRSZ
_PENDING = object()  # a handler's "the reply comes later" (Tflush)


_names_seen: dict[str, bool] = {}


def _valid_name(name: str) -> bool:
    """valid_name, remembered: a walk checks the same few names over and over."""
    ok = _names_seen.get(name)
    if ok is None:
        ok = valid_name(name)
        if len(_names_seen) < 4096:
            _names_seen[name] = ok
    return ok


def _walkable(guard: Callable[[Node, str], None], node: Node) -> bool:
    """Whether a scoped connection may walk to node (and so see it listed)."""
    try:
        guard(node, "walk")
    except P9Error:
        return False
    return True


def _reply(answer: Any, post: Callable[[Any], Any]) -> Any:
    """A node's answer made a reply: post(answer) for a value; for one that comes later
    (a Pending, an awaitable: a coroutine, a Committed) a Later, which `Conn.receive` awaits."""
    if type(answer) is Pending or inspect.isawaitable(answer):
        return Later(answer, post)
    return post(answer)


def _text(m: Any) -> str:
    """A message's line in the -D trace."""
    from toolsrv.proto.fmt import format_msg    # here: only -D needs it, not start-up
    return format_msg(m, maxdata=64)


# The Rerror of a Malformed request, by its type (any other string: EBADSTRING).
_MALFORMED = {Twalk.TYPE: E.EBADNAME, Tcreate.TYPE: E.EBADNAME, Twstat.TYPE: E.EBADDIR}


class ServerConfig(Record):
    FIELDS = ("msize", "max_fids", "max_inflight", "max_held", "trace", "auth", "guard")

    def __init__(self, msize: int = DEFAULT_MSIZE, max_fids: int = 4096, max_inflight: int = 256,
                 max_held: int = 64 << 20, trace: Callable[[str], None] | None = None,
                 auth: Any = None, guard: Callable[[Node, str], None] | None = None) -> None:
        self.msize = msize                  # largest msize the server agrees to
        self.max_fids = max_fids            # per connection
        self.max_inflight = max_inflight    # outstanding requests per connection
        self.max_held = max_held    # bytes a connection's fids hold: unfinished writes, snapshots
        self.trace = trace          # -D: one line per message
        self.auth = auth            # an auth.Authenticator: Tattach needs a proven afid
        self.guard = guard          # scopes a connection: raises P9Error
                                    # for ("walk"|"write"|"create"|"remove"); a directory
                                    # read lists only what "walk" allows


class Conn:
    """One client connection's 9P state: fids, in-flight tags, msize."""

    def __init__(self, fs: Any, send: Callable[[Any], None], config: ServerConfig,
                 name: str = "c", on_msize: Callable[[int], None] | None = None,
                 link: Any = None) -> None:
        self.fs = fs                  # has .attach(uname, aname, conn) -> Node
        self.send = send              # writes one reply message
        self.config = config
        self.name = name
        self.on_msize = on_msize
        self.link = link              # the transport's side, for Tauth: .channel(), .end()
        self.afids: set[int] = set()  # the auth fids held (auth.py: at most MAX_AFIDS)
        self.msize = 0                # 0: Tversion not yet accepted
        self.fids: dict[int, Fid] = {}
        self.inflight: dict[int, Req] = {}
        self.flushes: dict[int, list[int]] = {}
        self.saving: set[asyncio.Task] = set()   # tasks of Committed answers: never cancelled
        self.unames: set[str] = set()
        self.held = 0                 # sum of Fid.held: bytes fids keep in their aux
        self.closed = False
        self.tasks = 0                # requests that went asynchronous, ever
        self._handlers = {
            Tauth: self._auth, Tattach: self._attach, Tflush: self._flush,
            Twalk: self._walk, Topen: self._open, Tcreate: self._create,
            Tread: self._read, Twrite: self._write, Tclunk: self._clunk,
            Tremove: self._remove, Tstat: self._stat, Twstat: self._wstat,
            Malformed: self._malformed,
        }

    # -- the one entry point --
    def receive(self, m: Any) -> None:
        """Handle one decoded message; the reply is sent now or by a task later."""
        trace = self.config.trace
        if trace:
            trace(f"{self.name} <- {_text(m)}")
        if type(m) is Tversion:
            return self._version(m)
        tag = m.tag
        if not self.msize and not (type(m) is Malformed and m.type == Tversion.TYPE):
            return self._respond(tag, Rerror(tag, E.ENOVERSION), admitted=False)
        if tag in self.inflight:
            return self._respond(tag, Rerror(tag, E.EDUPTAG), admitted=False)
        handler = self._handlers.get(type(m))
        if handler is None:
            return self._respond(tag, Rerror(tag, E.EBADTYPE), admitted=False)
        if len(self.inflight) >= self.config.max_inflight and type(m) is not Tflush:
            return self._respond(tag, Rerror(tag, E.busy(
                "too many requests in flight", self.config.max_inflight)), admitted=False)
        req = self.inflight[tag] = Req(tag, m)
        try:
            r = handler(m)
        except P9Error as e:
            r = Rerror(tag, e.ename)
        except Exception:
            log.exception("%s: %s failed", self.name, type(m).__name__)
            r = Rerror(tag, E.EINTERNAL)
        if r is _PENDING:
            return None
        if type(r) is not Later:
            return self._respond(tag, r)
        self.tasks += 1             # (_reply): a Pending is answered through `then`, with
        aw = r.aw                   # no task; any other awaitable in a task of its own,
        if type(aw) is Pending:     # which a Committed's flush never cancels
            req.work = aw
            return aw.then(lambda value, exc: self._given(tag, r, value, exc))
        task = req.work = asyncio.get_running_loop().create_task(self._finish(tag, r))
        task.add_done_callback(lambda t: self._cancelled_early(tag, t, aw))
        if type(aw) is Committed:
            self.saving.add(task)
        return None

    async def _finish(self, tag: int, later: Later) -> None:
        me = asyncio.current_task()
        try:
            value = await later.aw
            if not self._owns(tag, me):
                return                    # aborted meanwhile (a Committed's save went on)
            r = later.post(value)
        except (asyncio.CancelledError, Exception) as e:
            r = self._failed(tag, e)
        finally:
            if me is not None:
                self.saving.discard(me)
        if self._owns(tag, me):
            self._respond(tag, r)

    def _given(self, tag: int, later: Later, value: Any, exc: BaseException | None) -> None:
        """A Pending's outcome: the reply, unless the request was aborted meanwhile."""
        if not self._owns(tag, later.aw):
            return
        if exc is not None:
            r = self._failed(tag, exc)
        else:
            try:
                r = later.post(value)
            except Exception as e:
                r = self._failed(tag, e)
        self._respond(tag, r)

    def _failed(self, tag: int, e: BaseException) -> Rerror:
        """The reply to a request that ended in `e` after waiting (a task's or a Pending's)."""
        if isinstance(e, asyncio.CancelledError):
            return Rerror(tag, E.EINTR)
        if isinstance(e, P9Error):
            return Rerror(tag, e.ename)
        log.error("%s: request tag %d failed", self.name, tag, exc_info=e)
        return Rerror(tag, E.EINTERNAL)

    def _cancelled_early(self, tag: int, task: asyncio.Task, aw: Any) -> None:
        """A task flushed before it ever ran still owes its reply."""
        if task.cancelled():
            if type(aw) is Committed:
                aw = aw.aw
            if inspect.iscoroutine(aw):
                aw.close()
            if self._owns(tag, task):
                self._respond(tag, Rerror(tag, E.EINTR))

    def _owns(self, tag: int, work: Any) -> bool:
        """Whether the request in flight under `tag` is still the one `work` answers (not
        aborted, nor its tag reused since)."""
        req = self.inflight.get(tag)
        return req is not None and req.work is work

    def _respond(self, tag: int, r: Any, admitted: bool = True) -> None:
        """The one way a request ends: free the tag, reply, then its Rflushes.  A request
        refused before it was admitted (no Tversion yet, a duplicate tag, an unknown type,
        too many in flight; a Tversion, which is never in flight) holds no tag to free:
        a duplicate's tag is still the first request's."""
        if admitted:
            self.inflight.pop(tag, None)
        self.send_reply(r)
        for ftag in self.flushes.pop(tag, ()) if admitted else ():
            self.inflight.pop(ftag, None)
            self.send_reply(Rflush(ftag))

    def send_reply(self, r: Any) -> None:
        if self.closed:
            return
        if self.config.trace:
            self.config.trace(f"{self.name} -> {_text(r)}")
        self.send(r)

    # -- lifecycle --
    def _abort_all(self) -> None:
        """Cancel every request (dropping its reply) and clunk every fid."""
        tasks = [q.work for q in self.inflight.values()
                 if isinstance(q.work, (asyncio.Task, Pending))]
        self.inflight.clear()
        self.flushes.clear()
        for t in tasks:
            if t not in self.saving:      # a change that took effect is saved all the same
                t.cancel()
        fids, self.fids = self.fids, {}
        for fid in fids.values():
            self._clunk_node(fid)

    def hangup(self) -> None:
        """The client went away: cancel its requests and clunk its fids."""
        if not self.closed:
            self.closed = True
            self._abort_all()

    def _clunk_node(self, fid: Fid) -> None:
        self.held -= fid.held
        fid.held = 0
        if self.afids:
            self.afids.discard(fid.num)
        try:
            fid.node.clunk(fid)
        except Exception:
            log.exception("%s: clunk of fid %d failed", self.name, fid.num)

    # -- helpers --
    def _fid(self, num: int) -> Fid:
        fid = self.fids.get(num)
        if fid is None:
            raise P9Error(E.EUNKFID)
        return fid

    def _live(self, fid: Fid) -> Node:
        if not fid.node.alive():
            raise P9Error(E.ENOTFOUND)
        return fid.node

    def _newfid(self, num: int) -> None:
        if num in self.fids or num == NOFID:
            raise P9Error(E.EFIDINUSE)
        if len(self.fids) >= self.config.max_fids:
            raise P9Error(E.busy("too many fids", self.config.max_fids))

    def iounit(self) -> int:
        return self.msize - IOHDRSZ

    # -- handlers, one per message type --
    def _version(self, m: Tversion) -> None:
        """A successful Tversion starts a new session: every request aborted, every fid
        clunked (version(5)).  One that fails (msize too small; a version we do not speak,
        answered "unknown") leaves the connection as it was."""
        if m.msize < 256:
            return self._respond(m.tag, Rerror(m.tag, E.EMSIZE), admitted=False)
        msize = min(m.msize, self.config.msize)
        if not m.version.startswith("9P2000"):
            return self._respond(m.tag, Rversion(m.tag, msize, "unknown"), admitted=False)
        self._abort_all()
        self.msize = msize
        if self.on_msize:
            self.on_msize(msize)
        return self._respond(m.tag, Rversion(m.tag, msize, "9P2000"), admitted=False)

    def _malformed(self, m: Malformed) -> Any:
        """A sound frame with bad content (proto.Malformed): this request fails, the
        connection goes on.  lib9p answers a bad wstat Dir "bad directory in wstat"."""
        if m.type & 1:                      # an R-message: not a request
            raise P9Error(E.EBADTYPE)
        raise P9Error(_MALFORMED.get(m.type, E.EBADSTRING))

    def _auth(self, m: Tauth) -> Any:
        if self.config.auth is None:
            raise P9Error(E.ENOAUTH)
        self._newfid(m.afid)
        node = self.config.auth.node(m.uname, m.aname, self.link, len(self.afids))
        self.fids[m.afid] = Fid(m.afid, node, uname=m.uname, omode=ORDWR)
        self.afids.add(m.afid)
        return Rauth(m.tag, node.qid())

    def _attach(self, m: Tattach) -> Rattach:
        self._newfid(m.fid)
        try:
            if self.config.auth is not None:
                self.config.auth.check(self.fids.get(m.afid), m.uname, m.aname)
            elif m.afid != NOFID:
                raise P9Error(E.ENOAUTH)
        except P9Error as e:   # who was turned away, and why: the log, the audit trail
            why = f"attach refused: uname {m.uname!r} aname {m.aname!r}: {e.ename}"
            log.warning("%s: %s", self.name, why)
            if self.config.auth is not None:
                self.config.auth.refused(self.link, why)
            raise
        node = self.fs.attach(m.uname, m.aname, self)
        self.unames.add(m.uname)
        self.fids[m.fid] = Fid(m.fid, node, uname=m.uname, conn=self)
        return Rattach(m.tag, node.qid())

    def _flush(self, m: Tflush) -> Any:
        old = self.inflight.get(m.oldtag)
        if m.oldtag == m.tag or old is None:
            return Rflush(m.tag)
        root = old.flushing if old.flushing is not None else m.oldtag
        self.flushes.setdefault(root, []).append(m.tag)
        self.inflight[m.tag].flushing = root
        target = self.inflight.get(root)
        work = target.work if target is not None else None
        if isinstance(work, (asyncio.Task, Pending)) and work not in self.saving:
            work.cancel()                 # a Committed is answered for real, then Rflush
        return _PENDING

    def _walk(self, m: Twalk) -> Rwalk:
        fid = self._fid(m.fid)
        if fid.is_open:
            raise P9Error(E.EWALKOPEN)
        if m.newfid != m.fid:
            self._newfid(m.newfid)
        node = self._live(fid)
        qids: list[Qid] = []
        err = E.ENOTFOUND
        for name in m.wname:
            if not node.is_dir:
                err = E.ENOTDIR
                break
            nxt = node.parent if name == ".." else (
                node.lookup(name) if _valid_name(name) else None)
            if nxt is None:
                missing = getattr(node, "missing", None)   # a directory's own words for it
                if missing is not None and not qids and name != "..":
                    err = missing(name)
                break
            if self.config.guard is not None:
                self.config.guard(nxt, "walk")     # a scoped connection: an error, not partial
            node = nxt
            qids.append(node.qid())
        if len(qids) < len(m.wname):
            if not qids:
                raise P9Error(err)
            return Rwalk(m.tag, tuple(qids))
        if m.newfid == m.fid:
            fid.node = node
        else:
            self.fids[m.newfid] = Fid(m.newfid, node, uname=fid.uname, conn=fid.conn)
        return Rwalk(m.tag, tuple(qids))

    def _check_mode(self, is_dir: bool, mode: int) -> None:
        """The modes a file of this kind opens in at all (Topen; Tcreate, before it makes
        anything)."""
        if mode & ~(3 | OTRUNC | OCEXEC | ORCLOSE):
            raise P9Error(E.EBADMODE)
        acc = mode & 3
        if is_dir:
            if acc != OREAD or mode & (OTRUNC | ORCLOSE):
                raise P9Error(E.EISDIR)
        elif acc == OEXEC or (mode & ORCLOSE):
            raise P9Error(E.EPERM)

    def _check_open(self, node: Node, mode: int) -> None:
        self._check_mode(node.is_dir, mode)
        if node.is_dir:
            return
        acc = mode & 3
        if acc in (OWRITE, ORDWR) or mode & OTRUNC:
            if not node.writable():
                raise P9Error(E.EPERM)
        if acc in (OREAD, ORDWR) and not node.perm & 0o444:
            raise P9Error(E.EPERM)

    def _open(self, m: Topen) -> Any:
        fid = self._fid(m.fid)
        if fid.is_open:
            raise P9Error(E.EOPEN)
        node = self._live(fid)
        self._check_open(node, m.mode)
        if self.config.guard is not None and ((m.mode & 3) in (OWRITE, ORDWR) or m.mode & OTRUNC):
            self.config.guard(node, "write")
        if m.mode & OTRUNC:
            node.truncate(fid)
        return _reply(node.open(fid, m.mode), lambda _: self._opened(fid, m))

    def _opened(self, fid: Fid, m: Topen) -> Ropen:
        fid.omode = m.mode
        return Ropen(m.tag, fid.node.qid(), self.iounit())

    def _create(self, m: Tcreate) -> Any:
        fid = self._fid(m.fid)
        if fid.is_open:
            raise P9Error(E.EOPEN)
        node = self._live(fid)
        if not node.is_dir:
            raise P9Error(E.ENOTDIR)
        self._check_mode(bool(m.perm & DMDIR), m.mode)   # a failed create makes nothing
        if not valid_name(m.name):
            raise P9Error(f"illegal file name: use letters, digits, '.', '_', '-' (1 to 128; "
                          f"not . or ..), not {m.name!r}")
        if node.lookup(m.name) is not None:
            raise P9Error(f"file already exists: {_path(node, m.name)}: toolsrv rm it (and all "
                          "in it) first, or choose another name")
        if self.config.guard is not None:
            self.config.guard(node, "create")
        new = node.create(m.name, m.perm, m.mode, fid)   # or made, answered once saved
        return _reply(new, lambda n: self._created(m, fid, n))

    def _created(self, m: Tcreate, fid: Fid, new: Node) -> Rcreate:
        r = new.open(fid, m.mode)
        if inspect.iscoroutine(r):
            r.close()  # created nodes open synchronously
        fid.node = new
        fid.omode = m.mode
        return Rcreate(m.tag, new.qid(), self.iounit())

    def _read(self, m: Tread) -> Any:
        fid = self._fid(m.fid)
        if not fid.can_read():
            raise P9Error(E.ENOTOPEN)
        count = min(m.count, self.msize - IOHDRSZ)
        node = fid.node
        if node.is_dir:
            return Rread(m.tag, self._dirread(fid, m.offset, count))
        try:
            r = node.read(fid, m.offset, count)
        except BaseException:
            self._account(fid)
            raise
        if type(r) is bytes:                # the common, fast case (_within accounts)
            return self._within(fid, Rread(m.tag, r[:count]))
        self._account(fid)                  # what it holds while it waits
        return _reply(r, lambda data: self._within(fid, Rread(m.tag, data[:count])))

    def _dirread(self, fid: Fid, offset: int, count: int) -> bytes:
        if offset == 0:
            children = self._live(fid).children()
            guard = self.config.guard
            if guard is not None:           # a scoped connection lists what it may walk to
                children = [c for c in children if _walkable(guard, c)]
            fid.dir_entries = [encode_dir(c.stat()) for c in children]
            fid.dir_index = 0
        elif fid.dir_entries is None or offset != fid.dir_offset:
            raise P9Error(E.EOFFSET)
        entries, i, out, n = fid.dir_entries, fid.dir_index, [], 0
        while i < len(entries) and n + len(entries[i]) <= count:
            out.append(entries[i])
            n += len(entries[i])
            i += 1
        if not out and i < len(entries) and count:   # count 0: an empty Rread, as lib9p
            raise P9Error(E.EDIRCOUNT)
        fid.dir_index, fid.dir_offset = i, offset + n
        return b"".join(out)

    def _write(self, m: Twrite) -> Any:
        fid = self._fid(m.fid)
        if not fid.can_write():
            raise P9Error(E.ENOTOPEN)
        if len(m.data) > self.iounit():     # the frame fits msize, the data must fit iounit
            raise P9Error(E.EWCOUNT)
        node = self._live(fid)
        try:
            r = node.write(fid, m.offset, m.data)
        except BaseException:
            self._account(fid)
            raise
        if type(r) is int:                  # the common, fast case (_within accounts)
            return self._within(fid, Rwrite(m.tag, r))
        self._account(fid)                  # what it holds while it waits
        return _reply(r, lambda n: self._within(fid, Rwrite(m.tag, n)))

    def _account(self, fid: Fid) -> None:
        """Count the bytes fid's node keeps for it (partial writes, read snapshots)."""
        if self.fids.get(fid.num) is not fid:
            return                    # clunked while its request ran: nothing is held
        aux = fid.aux
        if not aux:
            n = 0
        else:
            n = sum(len(v) for v in aux.values() if isinstance(v, (bytes, bytearray)))
        self.held += n - fid.held
        fid.held = n

    def _within(self, fid: Fid, reply: Any) -> Any:
        """The reply, unless the connection's fids now hold more than max_held: then
        drop what this fid holds and fail (the client should clunk fids it is done with)."""
        self._account(fid)
        if self.held <= self.config.max_held:
            return reply
        for k in [k for k, v in fid.aux.items() if isinstance(v, (bytes, bytearray))]:
            del fid.aux[k]
        self._account(fid)
        limit = self.config.max_held
        raise P9Error(E.busy("fids of this connection hold over " + (
            f"{limit >> 20} MiB" if limit >= 1 << 20 else f"{limit} bytes"), then="clunk some"))

    def _clunk(self, m: Tclunk) -> Rclunk:
        fid = self.fids.pop(m.fid, None)
        if fid is None:
            raise P9Error(E.EUNKFID)
        self._clunk_node(fid)
        return Rclunk(m.tag)

    def _remove(self, m: Tremove) -> Rremove:
        fid = self.fids.pop(m.fid, None)
        if fid is None:
            raise P9Error(E.EUNKFID)
        self._clunk_node(fid)
        if self.config.guard is not None:
            self.config.guard(fid.node, "remove")
        return _reply(self._live(fid).remove(), lambda _: Rremove(m.tag))   # or once saved

    def _stat(self, m: Tstat) -> Rstat:
        return Rstat(m.tag, self._live(self._fid(m.fid)).stat())

    def _wstat(self, m: Twstat) -> Rwstat:
        """Accept what shells send: nothing, times only, or truncate to 0."""
        fid = self._fid(m.fid)
        node = self._live(fid)
        d, cur = m.stat, node.stat()
        fixed = (d.type == NOTOUCH16 and d.dev == NOTOUCH32 and d.qid == Qid.NOTOUCH
                 and d.mode in (NOTOUCH32, cur.mode) and d.name in ("", cur.name)
                 and d.uid in ("", cur.uid) and d.gid in ("", cur.gid)
                 and d.muid in ("", cur.muid))
        if not fixed or d.length not in (NOTOUCH64, 0, cur.length):
            raise P9Error(E.EWSTAT)
        if d.length == 0 and not node.is_dir and (cur.length or node.writable()):
            if self.config.guard is not None:   # (an empty read-only file: nothing changes)
                self.config.guard(node, "write")
            node.truncate(fid)
        return Rwstat(m.tag)


__all__ = ["Conn", "ServerConfig", "DEFAULT_MSIZE", "MAXWELEM"]


def _path(node: Node, name: str) -> str:      # `name` in `node`, from the root: session/demo
    return name if node.parent is node else _path(node.parent, f"{node.name}/{name}")
