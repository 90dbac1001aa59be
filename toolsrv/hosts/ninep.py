"""An asyncio 9P2000 client: the MCP face's one connection to the tree, and an import's
connection to another host's toolsrv (imports.py).

Theory of operation.  `NineP` is an asyncio Protocol over one Unix or TCP socket.  Every
request gets a tag from a free list and a future; the protocol's data_received feeds
proto's Framer and resolves the future of each reply's tag.  Sending never awaits
(transport.write), so a request can be sent, and flushed, from any point, including the
cancellation of the task that waits for it: that is what makes MCP cancellation a 9P
Tflush.  `rpc` awaits one reply; when the awaiting task is cancelled it writes
Tflush(oldtag) at once, without awaiting, and the old tag stays reserved until the
Rflush comes (flush(5): a tag is not reused before its flush is answered); a reply to the
flushed request that arrives first is dropped.  `rdwr` sends walk, open, write and the
first read in one write, as the CLI's client does, and clunks without waiting.  `call`
sends an import's remote call (the call file's walk, open, write and read, and its `err`
file's walk, open and read, which the server answers when that call ends) in one write:
one round trip for the result and the stderr.  Its clunks are lazy: they go out with the
next request, or LAZY_CLUNK seconds later, so a call wakes the remote once.

Invariants: a tag is in `_waiting` from its send until its reply (or its flush's reply);
a hang-up fails every waiting future with ConnectionError and every later request at
once; Rerror raises NinePError(ename), the server's Plan 9 string as it was sent.

Bounded by what we asked, never by what the server says: the msize is the smaller of
ours and its Rversion's, and one below MIN_MSIZE is refused (`agreed_msize`); the framer
refuses a frame past that msize from its first four bytes, so nothing is buffered past
it; an Rread longer than its Tread's count, or an Rwrite counting more than was sent,
breaks the connection (the server is not speaking 9P); an empty Rread is the end of the
file.
"""
from __future__ import annotations

import asyncio
import os
from typing import Any

from toolsrv.proto import (
    DMDIR, DMTMP, IOHDRSZ, MAXWELEM, NOFID, NOTAG, OREAD, ORDWR, OTRUNC, OWRITE, Framer, Malformed,
    ProtocolError, Rerror, Rread, Rwrite, Tattach, Tauth, Tclunk, Tcreate, Tflush, Topen, Tread,
    Tremove, Tversion, Twalk, Twrite, encode, replace,
)

from ..errors import printable, words
from ..serve import dial

MSIZE = 65536 + IOHDRSZ
MIN_MSIZE = 256 + IOHDRSZ   # a server offering less is refused (reads of a few bytes each)
LAZY_CLUNK = 0.1    # seconds a lazy clunk may wait for a request to go out with


class NinePError(Exception):
    """The server answered Rerror; str(e) is its error string as a person reads it (a
    tool's words as the tool wrote them: errors.words), `ename` the string as sent, its
    control characters written out (errors.printable: a remote's words are listed and
    relayed, and must not drive a terminal)."""

    def __init__(self, ename: str) -> None:
        ename = printable(ename)
        super().__init__(words(ename))
        self.ename = ename


class NineP(asyncio.Protocol):
    """One 9P connection; make it with `await NineP.connect(addr)`."""

    def __init__(self) -> None:
        self.transport: Any = None
        self.framer = Framer(MSIZE)
        self.msize = MSIZE
        self._waiting: dict[int, asyncio.Future[Any]] = {}
        self._free_tags = list(range(1, 8192))[::-1]
        self._free_fids: list[int] = []
        self._next_fid = 1
        self.dead: BaseException | None = None
        self._later: list[bytes] = []       # clunks not yet written (clunk_nowait)
        self._soon = False                  # a write of _later is due this loop turn
        self._timer: Any = None             # ... or once LAZY_CLUNK has passed
        self.lost = asyncio.get_running_loop().create_future()   # set when it hangs up
        self.max_read: int | None = None    # bytes one file's read may bring; None: any
        self._asked: dict[int, int] = {}    # tag -> the count of its Tread or Twrite

    # -- the connection --
    @classmethod
    async def connect(cls, addr: str | dial.Addr, secret: bytes | None = None,
                      uname: str | None = None, tls: Any = None) -> "NineP":
        """Dial, negotiate the version, authenticate (TCP with a secret) and attach; a tls!
        address with `tls` (a serve.tls.ClientTLS; default: $TOOLSRV_TLS_*).
        Raises OSError when nothing answers, NinePError when the server refuses."""
        a = addr if isinstance(addr, dial.Addr) else dial.parse(addr)
        loop = asyncio.get_running_loop()
        if a.kind == "unix":
            _, proto = await loop.create_unix_connection(cls, a.path)
        elif a.kind == "tls":
            from ..serve import tls as tlsmod
            ctx = (tls or tlsmod.ClientTLS.from_env()).context()
            try:
                _, proto = await loop.create_connection(
                    cls, a.host, a.port, ssl=ctx, server_hostname=a.host,
                    ssl_handshake_timeout=tlsmod.HANDSHAKE_TIMEOUT)
            except (ConnectionRefusedError, FileNotFoundError):
                raise
            except OSError as e:        # ssl.SSLError is one; so is a handshake timeout
                raise tlsmod.handshake_error(e, str(a)) from None
        else:
            _, proto = await loop.create_connection(cls, a.host, a.port)
        if a.is_tcp:
            if secret is None and os.environ.get("TOOLSRV_SECRET_FILE"):
                from ..serve.auth import load_secret
                secret = load_secret(os.environ["TOOLSRV_SECRET_FILE"])
        try:
            await proto._start(uname or dial.user_name(), secret)
        except BaseException as e:
            proto.close()
            if a.kind == "tls" and type(e) is ConnectionError:   # hung up before Rversion
                from ..serve.tls import no_answer
                raise no_answer(str(a)) from None
            raise
        return proto

    async def _start(self, uname: str, secret: bytes | None) -> None:
        r = await self._request(lambda tag: Tversion(NOTAG, MSIZE, "9P2000"), NOTAG)
        if getattr(r, "version", None) != "9P2000":
            raise NinePError(f"server speaks {getattr(r, 'version', r)!r}, not 9P2000")
        self.msize = self.framer.msize = agreed_msize(r.msize)
        afid = await self._authenticate(uname, secret) if secret else NOFID
        await self.rpc(Tattach(0, 0, afid, uname, ""))
        if afid != NOFID:
            self.clunk_nowait(afid)

    async def _authenticate(self, uname: str, secret: bytes) -> int:
        """Prove the shared secret on an afid, and have the server prove it too
        (serve/auth.py); returns the afid.  Raises AuthError (a ValueError) when the
        server names another address than the one dialed, or does not prove the secret."""
        from ..serve.auth import ClientProof, address_id, binding
        t = self.transport
        proof = ClientProof(secret, uname, "", address_id(t.get_extra_info("peername")),
                            binding(t.get_extra_info("ssl_object")))
        afid = self.newfid()
        await self.rpc(Tauth(0, afid, uname, ""))
        challenge = (await self.rpc(Tread(0, afid, 0, 256))).data
        await self.rpc(Twrite(0, afid, 0, proof.answer(challenge)))
        proof.check((await self.rpc(Tread(0, afid, 0, 256))).data)
        return afid

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        try:
            msgs = self.framer.feed(data)
        except ProtocolError as e:
            self._hangup(ConnectionError(f"broken reply from the server: {e}"))
            self.transport.close()
            return
        for m in msgs:
            asked = self._asked.pop(m.tag, None)
            wrong = past(m, asked) if asked is not None else ""
            if wrong:
                self._hangup(ConnectionError(f"broken reply from the server: {wrong}"))
                self.transport.close()
                return
            f = self._waiting.pop(m.tag, None)
            if m.tag != NOTAG:
                self._free_tags.append(m.tag)
            if f is not None and not f.done():
                f.set_result(m)

    def connection_lost(self, exc: Exception | None) -> None:
        self._hangup(ConnectionError(f"toolsrv hung up{f': {exc}' if exc else ''}"))

    def _hangup(self, e: BaseException) -> None:
        if self.dead is None:
            self.dead = e
        for f in self._waiting.values():
            if not f.done():
                f.set_exception(e)
                f.exception()    # retrieved: a clunk or flush nobody awaits logs nothing
        self._waiting.clear()
        if not self.lost.done():
            self.lost.set_result(None)

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    @property
    def alive(self) -> bool:
        return self.dead is None

    # -- requests --
    def _send(self, make: Any, tag: int | None = None) -> tuple[int, asyncio.Future[Any]]:
        """Write make(tag) now; the future of its reply."""
        return self._send_many([make], tag)[0]

    def _send_many(self, makers: list[Any], tag: int | None = None
                   ) -> list[tuple[int, asyncio.Future[Any]]]:
        """Write every maker(tag) in one write (pipelined); each one's tag and future."""
        if self.dead is not None:
            raise ConnectionError(str(self.dead))
        if len(self._free_tags) < len(makers):
            raise ConnectionError("too many requests in flight")
        loop, out, data = asyncio.get_running_loop(), [], self._later
        self._later = []
        for make in makers:
            t = self._free_tags.pop() if tag is None else tag
            f: asyncio.Future[Any] = loop.create_future()
            self._waiting[t] = f
            out.append((t, f))
            m = make(t)
            if type(m) is Tread:
                self._asked[t] = m.count
            elif type(m) is Twrite:
                self._asked[t] = len(m.data)
            data.append(encode(m))
        self.transport.write(b"".join(data))
        return out

    async def _request(self, make: Any, tag: int | None = None) -> Any:
        tag, f = self._send(make, tag)
        return await self._wait(tag, f)

    async def _wait(self, tag: int, f: asyncio.Future[Any]) -> Any:
        try:
            r = await asyncio.shield(f)
        except asyncio.CancelledError:
            self.flush(tag, f)
            raise
        if isinstance(r, Rerror):
            raise NinePError(r.ename)
        if isinstance(r, Malformed):
            raise NinePError(f"unreadable reply: {r.why}")
        return r

    def flush(self, tag: int, f: asyncio.Future[Any]) -> None:
        """Tflush the request of `tag` unless it was answered; never awaits.  The tag is
        held (a placeholder waits on it) until the Rflush, which frees both tags."""
        if f.done() or self.dead is not None or tag == NOTAG:
            return
        held = self._waiting[tag] = asyncio.get_running_loop().create_future()  # drops
        try:                                                                   # the reply
            _, flushed = self._send(lambda t: Tflush(t, tag))
        except ConnectionError:
            return

        def release(_: Any) -> None:     # no reply to the flushed request came before it
            if self._waiting.get(tag) is held:
                del self._waiting[tag]
                self._free_tags.append(tag)
        flushed.add_done_callback(release)

    async def rpc(self, msg: Any) -> Any:
        """Send msg (its tag replaced) and return the reply; Rerror raises NinePError."""
        return await self._request(lambda tag: replace(msg, tag=tag))

    # -- fids --
    def newfid(self) -> int:
        if self._free_fids:
            return self._free_fids.pop()
        self._next_fid += 1
        return self._next_fid

    def clunk_nowait(self, fid: int, lazy: bool = False) -> None:
        """Clunk without waiting: the server forgets the fid whatever it answers.  The
        Tclunk is written with the next request, or once this turn of the loop ends,
        whichever comes first: a call's answer goes back to the MCP client before the
        clunk costs a write (and a wake-up of the server).  A `lazy` clunk waits for the
        next request up to LAZY_CLUNK seconds (an import's calls: one write per call)."""
        if self.dead is not None or not self._free_tags:
            return
        tag = self._free_tags.pop()
        loop = asyncio.get_running_loop()
        f: asyncio.Future[Any] = loop.create_future()
        self._waiting[tag] = f
        f.add_done_callback(lambda _: self._free_fids.append(fid))
        self._later.append(encode(Tclunk(tag, fid)))
        if not lazy and not self._soon:
            self._soon = True
            loop.call_soon(self._write_later)
        elif lazy and self._timer is None:
            self._timer = loop.call_later(LAZY_CLUNK, self._write_later)

    def _write_later(self) -> None:
        self._soon = False
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        data, self._later = self._later, []
        if data and self.dead is None:
            self.transport.write(b"".join(data))

    async def walk(self, path: str) -> int:
        names = tuple(p for p in path.split("/") if p not in ("", "."))
        if len(names) > MAXWELEM:
            raise NinePError(f"{path}: too deep for one walk")
        fid = self.newfid()
        try:
            r = await self.rpc(Twalk(0, 0, fid, names))
        except BaseException:
            self._free_fids.append(fid)
            raise
        if len(r.wqid) != len(names):
            self.clunk_nowait(fid)
            raise NinePError(f"{path}: file not found")
        return fid

    async def _read_all(self, fid: int, offset: int = 0, most: int | None = None) -> bytes:
        out, most = [], self.max_read if most is None else most
        while True:
            r = await self.rpc(Tread(0, fid, offset, self.msize - IOHDRSZ))
            out.append(r.data)
            offset += len(r.data)
            if most is not None and offset > most:
                raise NinePError(f"file too large: more than {most} bytes")
            if len(r.data) < self.msize - IOHDRSZ or not r.data:   # short: the end
                return b"".join(out)

    async def _write_all(self, fid: int, data: bytes) -> None:
        chunk, n = self.msize - IOHDRSZ, 0
        while n < len(data) or not data:
            r = await self.rpc(Twrite(0, fid, n, data[n:n + chunk]))
            n += r.count
            if r.count == 0:
                return

    # -- the verbs the face uses --
    async def read(self, path: str, most: int | None = None) -> bytes:
        """A whole file: walk, open and the first read in one write (one round trip for
        a file shorter than a read), then reads to the end; more than `most` bytes (default
        max_read) is an error."""
        names = tuple(p for p in path.split("/") if p not in ("", "."))
        if len(names) > MAXWELEM:
            raise NinePError(f"{path}: too deep for one walk")
        chunk, fid = self.msize - IOHDRSZ, self.newfid()
        sent = self._send_many([lambda t: Twalk(t, 0, fid, names),
                                lambda t: Topen(t, fid, OREAD),
                                lambda t: Tread(t, fid, 0, chunk)])
        replies: list[Any] = []
        try:
            await self._replies(sent, replies)
            failed = pipeline_failure(path, names, replies)
            if failed is not None:
                raise failed
            first = replies[-1]
            if len(first.data) < chunk:
                return bytes(first.data)
            return bytes(first.data) + await self._read_all(fid, len(first.data), most)
        finally:
            self._release(fid, replies, names)

    def _release(self, fid: int, replies: list[Any], names: tuple[str, ...],
                 lazy: bool = False) -> None:
        """After a pipelined walk: clunk the fid, unless the walk's reply says the server
        made none (a failed or partial walk); with no reply yet (cancelled), clunk."""
        if replies and (isinstance(replies[0], Exception)
                        or len(replies[0].wqid) != len(names)):
            self._free_fids.append(fid)
        else:
            self.clunk_nowait(fid, lazy)

    async def _replies(self, sent: list[tuple[int, asyncio.Future[Any]]],
                       out: list[Any]) -> list[Any]:
        """Every reply of a pipelined send, in order, into `out` as they come (an Rerror
        as a NinePError); when cancelled, the requests not yet answered are flushed, and
        `out` holds the replies had so far."""
        for i, (tag, f) in enumerate(sent):
            try:
                out.append(await self._wait(tag, f))
            except NinePError as e:
                out.append(e)
            except asyncio.CancelledError:
                for t2, f2 in sent[i + 1:]:
                    self.flush(t2, f2)
                raise
        return out

    async def write(self, path: str, data: bytes) -> None:
        fid = await self.walk(path)
        try:
            await self.rpc(Topen(0, fid, OWRITE | OTRUNC))
            await self._write_all(fid, data)
        finally:
            self.clunk_nowait(fid)

    async def rdwr(self, path: str, data: bytes) -> bytes:
        """Write data and read the answer on the same fid: one round trip when it fits
        one Twrite (walk, open, write and read pipelined).  Cancelled while waiting, the
        outstanding requests are flushed, which for a `call` file kills the run."""
        names = tuple(p for p in path.split("/") if p not in ("", "."))
        chunk = self.msize - IOHDRSZ
        if len(names) > MAXWELEM or len(data) > chunk:
            return await self._rdwr_stepwise(path, data)
        fid = self.newfid()
        sent = self._send_many([lambda t: Twalk(t, 0, fid, names),
                                lambda t: Topen(t, fid, ORDWR),
                                lambda t: Twrite(t, fid, 0, data),
                                lambda t: Tread(t, fid, 0, chunk)])
        replies: list[Any] = []
        try:
            await self._replies(sent, replies)
            failed = pipeline_failure(path, names, replies)
            if failed is not None:
                raise failed
            wrote, first = replies[2:]
            if wrote.count < len(data):
                await self._write_all_from(fid, data, wrote.count)
                return await self._read_all(fid)
            if len(first.data) < chunk:
                return bytes(first.data)
            return bytes(first.data) + await self._read_all(fid, len(first.data))
        finally:
            self._release(fid, replies, names)

    def call(self, path: str, data: bytes, also: str) -> "asyncio.Task[tuple[Any, bytes]]":
        """Write data to the call file `path` and read its answer, and read the file `also`
        (the call's `err`, which waits for that call's end), all in one write: walk, open,
        write and read of `path`, then walk, open and read of `also`.  The write is made
        before this returns (in the caller's turn of the loop: before the server it serves
        answers its own client); the task it returns brings the answer (bytes, or the
        NinePError the call's write or read got) and `also`'s bytes (b"" when it could not
        be read).  Args longer than one Twrite go stepwise (rdwr, then a read of `also`).
        Cancelled, the outstanding requests are flushed: the call's read kills the run."""
        loop = asyncio.get_running_loop()
        names = tuple(p for p in path.split("/") if p not in ("", "."))
        names2 = tuple(p for p in also.split("/") if p not in ("", "."))
        chunk = self.msize - IOHDRSZ
        if max(len(names), len(names2)) > MAXWELEM or len(data) > chunk:
            return loop.create_task(self._call_stepwise(path, data, also))
        fid, fid2 = self.newfid(), self.newfid()
        sent = self._send_many([lambda t: Twalk(t, 0, fid, names),
                                lambda t: Topen(t, fid, ORDWR),
                                lambda t: Twrite(t, fid, 0, data),
                                lambda t: Tread(t, fid, 0, chunk),
                                lambda t: Twalk(t, 0, fid2, names2),
                                lambda t: Topen(t, fid2, OREAD),
                                lambda t: Tread(t, fid2, 0, chunk)])
        started = []

        async def replies() -> tuple[Any, bytes]:
            started.append(True)
            got: list[Any] = []
            try:
                await self._replies(sent, got)
                return await self._answer(fid, path, names, data, got[:4]), \
                    await self._also(fid2, names2, got[4:])
            finally:
                self._release(fid, got[:4], names, lazy=True)
                self._release(fid2, got[4:], names2, lazy=True)

        def never_ran(_: Any) -> None:      # cancelled before its first step
            if not started:
                for tag, f in sent:
                    self.flush(tag, f)
                self.clunk_nowait(fid)
                self.clunk_nowait(fid2)
        task = loop.create_task(replies())
        task.add_done_callback(never_ran)
        return task

    async def _call_stepwise(self, path: str, data: bytes, also: str) -> tuple[Any, bytes]:
        try:
            answer: Any = await self.rdwr(path, data)
        except NinePError as e:
            answer = e
        try:
            return answer, await self.read(also)
        except NinePError:
            return answer, b""

    async def _answer(self, fid: int, path: str, names: tuple[str, ...], data: bytes,
                      replies: list[Any]) -> Any:
        """The call's answer from its pipelined walk, open, write and read."""
        failed = pipeline_failure(path, names, replies)
        if failed is not None:
            return failed
        wrote, first = replies[2:]
        chunk = self.msize - IOHDRSZ
        try:
            if wrote.count < len(data):
                await self._write_all_from(fid, data, wrote.count)
                return await self._read_all(fid)
            if len(first.data) < chunk:
                return bytes(first.data)
            return bytes(first.data) + await self._read_all(fid, len(first.data))
        except NinePError as e:
            return e

    async def _also(self, fid: int, names: tuple[str, ...], replies: list[Any]) -> bytes:
        if pipeline_failure("", names, replies) is not None:
            return b""
        first = replies[-1]
        if len(first.data) < self.msize - IOHDRSZ:
            return bytes(first.data)
        try:
            return bytes(first.data) + await self._read_all(fid, len(first.data))
        except NinePError:
            return b""

    async def _write_all_from(self, fid: int, data: bytes, n: int) -> None:
        while n < len(data):
            r = await self.rpc(Twrite(0, fid, n, data[n:n + self.msize - IOHDRSZ]))
            if r.count == 0:
                return
            n += r.count

    async def _rdwr_stepwise(self, path: str, data: bytes) -> bytes:
        fid = await self.walk(path)
        try:
            await self.rpc(Topen(0, fid, ORDWR))
            await self._write_all(fid, data)
            return await self._read_all(fid)
        finally:
            self.clunk_nowait(fid)

    async def mkdir(self, path: str, temporary: bool = False) -> bool:
        """Make a session or agent directory; False when it exists already.  A
        temporary session (DMTMP) is never saved to the server's state."""
        parent, _, name = path.rstrip("/").rpartition("/")
        fid = await self.walk(parent)
        try:
            await self.rpc(Tcreate(0, fid, name, DMDIR | (DMTMP if temporary else 0) | 0o755,
                                   OREAD))
        except NinePError as e:
            if "exists" in str(e):
                return False
            raise
        finally:
            self.clunk_nowait(fid)
        return True

    async def remove(self, path: str) -> None:
        fid = await self.walk(path)
        try:
            await self.rpc(Tremove(0, fid))
        finally:
            self._free_fids.append(fid)        # Tremove clunks, whatever it answers


def agreed_msize(theirs: int) -> int:
    """A connection's msize: the smaller of ours and the server's Rversion's.  Raises
    NinePError when the server's is below MIN_MSIZE."""
    if theirs < MIN_MSIZE:
        raise NinePError(f"the server's msize {theirs} is too small: toolsrv needs at "
                         f"least {MIN_MSIZE} (invalid argument)")
    return min(theirs, MSIZE)


def past(m: Any, asked: int) -> str:
    """What is wrong with reply `m` to a Tread or Twrite of `asked` bytes: "" if nothing."""
    if type(m) is Rread and len(m.data) > asked:
        return f"Rread of {len(m.data)} bytes for a Tread of {asked}"
    if type(m) is Rwrite and m.count > asked:
        return f"Rwrite of {m.count} bytes for a Twrite of {asked}"
    return ""


def nothing_answers(e: BaseException) -> bool:
    """True when a dial failed because no server is there (no socket file, or nobody
    listening on it): the case where `toolsrv mcp` serves in process instead."""
    return isinstance(e, (FileNotFoundError, ConnectionRefusedError)) or (
        isinstance(e, OSError) and e.errno in (2, 111))


def pipeline_failure(path: str, names: tuple[str, ...], replies: list[Any]) -> Exception | None:
    """What failed a pipelined walk-open-...: the walk's error, a walk short of the file
    (the rest failed for want of the fid), or the first later error; None if none did."""
    walk = replies[0]
    if isinstance(walk, Exception):
        return walk
    if len(walk.wqid) != len(names):
        return NinePError(f"{path}: file not found")
    return next((r for r in replies if isinstance(r, Exception)), None)
