"""A synchronous 9P2000 client, safe to share between threads on one connection.

Requests are multiplexed by tag: a caller sends its T-message under a lock
and waits on its own slot; one reader thread decodes replies and wakes the
slot whose tag matches.  Fids and tags come from free lists under a lock.
`Rerror` raises `ClientError(ename)`.  The path-level helpers (read, write,
rdwr, ls, stat, mkdir, rm) mirror plan9port's `9p` command; `rdwr` writes
and then reads back on the same fid, the way agents call tools.
"""
from __future__ import annotations

import os
import socket
import threading
from typing import Any

from toolsrv.proto import (
    DMDIR, IOHDRSZ, MAXWELEM, NOFID, NOTAG, OREAD, ORDWR, OTRUNC, OWRITE, Dir, Framer, Malformed,
    Rerror, Tattach, Tauth, Tclunk, Tcreate, Topen, Tread, Tremove, Tstat, Tversion, Twalk,
    Twrite, Twstat, decode_dirs, encode, replace,
)

from ..errors import words
from ..serve import dial


class ClientError(Exception):
    """The server answered Rerror; str(e) is its error string as a person reads it (a
    tool's words as the tool wrote them: errors.words), `ename` the string as sent."""

    def __init__(self, ename: str) -> None:
        super().__init__(words(ename))
        self.ename = ename


class Client:
    def __init__(self, sock: socket.socket, msize: int = 65536 + IOHDRSZ,
                 uname: str | None = None, aname: str = "",
                 secret: bytes | None = None) -> None:
        self.sock = sock
        self._wlock = threading.Lock()
        self._lock = threading.Lock()
        self._slots: dict[int, list[Any]] = {}
        self._free_tags = list(range(1, 4096))[::-1]
        self._next_fid = 1
        self._free_fids: list[int] = []
        self._dead: Exception | None = None
        self.framer = Framer(msize)
        with self._wlock:
            sock.sendall(encode(Tversion(NOTAG, msize, "9P2000")))
        r = self._read_one()
        if isinstance(r, Rerror):          # refused: too many connections, wrong uid, ...
            raise ClientError(r.ename)
        if getattr(r, "version", None) != "9P2000":
            raise ClientError(f"server speaks {getattr(r, 'version', r)!r}, not 9P2000")
        self.msize = self.framer.msize = r.msize
        self._reader = threading.Thread(target=self._read_loop, daemon=True)
        self._reader.start()
        self.root = 0
        uname = uname or dial.user_name()
        afid = self._authenticate(secret, uname, aname) if secret else NOFID
        self.rpc(Tattach(0, self.root, afid, uname, aname))
        if afid != NOFID:
            self.clunk(afid)

    def _authenticate(self, secret: bytes, uname: str, aname: str) -> int:
        """Prove the shared secret on an afid, and have the server prove it too
        (toolsrv/serve/auth.py); returns the afid.  Raises AuthError when the server
        names another address than the one dialed, or does not prove the secret."""
        from ..serve.auth import ClientProof, address_id, binding
        proof = ClientProof(secret, uname, aname, address_id(self.sock.getpeername()),
                            binding(getattr(self.sock, "ssl_object", None)))
        afid = self.newfid()
        self.rpc(Tauth(0, afid, uname, aname))
        challenge = self.rpc(Tread(0, afid, 0, 256)).data
        self.rpc(Twrite(0, afid, 0, proof.answer(challenge)))
        proof.check(self.rpc(Tread(0, afid, 0, 256)).data)
        return afid

    @classmethod
    def connect(cls, addr: str | dial.Addr | None = None, timeout: float | None = None,
                tls: Any = None, **kw: Any) -> "Client":
        """Dial addr (unix!, tcp! or tls!; tls: a serve.tls.ClientTLS, else the
        $TOOLSRV_TLS_* environment) and attach.  A TCP secret comes from
        $TOOLSRV_SECRET_FILE unless given."""
        a = dial.default_addr() if addr is None else (
            addr if isinstance(addr, dial.Addr) else dial.parse(addr))
        if a.kind == "unix":
            s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            target: Any = a.path
        else:
            s = socket.socket(socket.AF_INET6 if ":" in a.host else socket.AF_INET)
            target = (a.host, a.port)
        s.settimeout(timeout)
        try:
            s.connect(target)
        except OSError:
            s.close()
            raise
        s.settimeout(None)
        sock: Any = s
        if a.kind == "tls":
            from ..serve.tls import ClientTLS, TLSSocket
            try:
                sock = TLSSocket(s, (tls or ClientTLS.from_env()).context(), a.host, str(a),
                                 timeout)
            except BaseException:
                s.close()
                raise
        if a.is_tcp and "secret" not in kw and os.environ.get("TOOLSRV_SECRET_FILE"):
            from ..serve.auth import load_secret
            kw["secret"] = load_secret(os.environ["TOOLSRV_SECRET_FILE"])
        try:
            return cls(sock, **kw)
        except BaseException as e:
            try:
                sock.shutdown(socket.SHUT_RDWR)   # wakes the reader thread, if it started
            except OSError:
                pass
            sock.close()
            if isinstance(e, ConnectionError) and a.kind == "tcp" and \
                    str(e) == "server hung up":
                raise ConnectionError(f"{a}: the server hung up before answering Tversion "
                                      f"(if it serves TLS, dial tls!{a.host}!{a.port})") from None
            raise

    # -- wire --
    def _read_one(self) -> Any:
        while True:
            msgs = self.framer.feed(b"")
            if msgs:
                raise RuntimeError("unexpected pipelined reply")
            data = self.sock.recv(65536)
            if not data:
                raise ConnectionError("server hung up")
            msgs = self.framer.feed(data)
            if msgs:
                return msgs[0]

    def _read_loop(self) -> None:
        try:
            while True:
                data = self.sock.recv(self.msize)   # not more: recv allocates all it may get
                if not data:
                    raise ConnectionError("server hung up")
                for m in self.framer.feed(data):
                    with self._lock:
                        slot = self._slots.get(m.tag)
                        if slot is not None and slot[0] is None:   # a clunk nobody waits for
                            del self._slots[m.tag]
                            self._free_tags.append(m.tag)
                            self._free_fids.append(slot[1])
                            continue
                    if slot is not None:
                        slot[1] = m
                        slot[0].set()
        except Exception as e:
            self._dead = e
            with self._lock:
                for slot in self._slots.values():
                    if slot[0] is not None:
                        slot[0].set()

    def send(self, msg_for_tag: Any) -> tuple[int, list[Any]]:
        """Send a message built by `msg_for_tag(tag)`; returns (tag, slot)."""
        with self._lock:
            if self._dead:
                raise ConnectionError(f"connection lost: {self._dead}")
            tag = self._free_tags.pop()
            slot: list[Any] = [threading.Event(), None]
            self._slots[tag] = slot
        with self._wlock:
            self.sock.sendall(encode(msg_for_tag(tag)))
        return tag, slot

    def send_many(self, makers: list[Any]) -> list[tuple[int, list[Any]]]:
        """Send several messages (each built by maker(tag)) in one write: pipelining.

        The server answers one connection's requests in order; the result is each
        message's (tag, slot) for `wait` or `wait_all`."""
        with self._lock:
            if self._dead:
                raise ConnectionError(f"connection lost: {self._dead}")
            pairs = []
            for _ in makers:
                tag = self._free_tags.pop()
                slot: list[Any] = [threading.Event(), None]
                self._slots[tag] = slot
                pairs.append((tag, slot))
        data = b"".join(encode(make(tag)) for make, (tag, _) in zip(makers, pairs))
        with self._wlock:
            self.sock.sendall(data)
        return pairs

    def wait_all(self, pairs: list[tuple[int, list[Any]]]) -> list[Any]:
        """Every reply of a send_many, in order; an Rerror comes back as a ClientError."""
        out: list[Any] = []
        for tag, slot in pairs:
            try:
                out.append(self.wait(tag, slot))
            except ClientError as e:
                out.append(e)
        return out

    def wait(self, tag: int, slot: list[Any]) -> Any:
        slot[0].wait()
        with self._lock:
            self._slots.pop(tag, None)
            self._free_tags.append(tag)
        r = slot[1]
        if r is None:
            raise ConnectionError(f"connection lost: {self._dead}")
        if isinstance(r, Rerror):
            raise ClientError(r.ename)
        if isinstance(r, Malformed):
            raise ClientError(f"unreadable reply: {r.why}")
        return r

    def rpc(self, msg: Any) -> Any:
        """Send `msg` (its tag is replaced) and wait for the reply."""
        return self.wait(*self.send(lambda tag: replace(msg, tag=tag)))

    # -- fids --
    def newfid(self) -> int:
        with self._lock:
            if self._free_fids:
                return self._free_fids.pop()
            self._next_fid += 1
            return self._next_fid

    def clunk(self, fid: int) -> None:
        try:
            self.rpc(Tclunk(0, fid))
        finally:
            with self._lock:
                self._free_fids.append(fid)

    def clunk_nowait(self, fid: int) -> None:
        """Clunk without waiting for the reply: the reader frees the tag and the fid (for
        reuse) when Rclunk comes.  A clunk cannot fail in a way the caller could act on:
        the server forgets the fid whatever it answers."""
        with self._lock:
            if self._dead:
                return                 # the connection, and with it the fid, is gone
            tag = self._free_tags.pop()
            self._slots[tag] = [None, fid]
        with self._wlock:
            self.sock.sendall(encode(Tclunk(tag, fid)))

    def walk(self, path: str) -> int:
        names = [p for p in path.split("/") if p not in ("", ".")]
        fid = self.newfid()
        first, done = True, 0
        try:
            while first or names:
                chunk, names = names[:16], names[16:]
                r = self.rpc(Twalk(0, self.root if first else fid, fid, tuple(chunk)))
                first = False
                if len(r.wqid) != len(chunk):
                    raise self._short_walk(path, done + len(r.wqid))
                done += len(chunk)
        except BaseException:
            if not first:
                try:
                    self.clunk(fid)
                except Exception:
                    pass
            else:
                with self._lock:
                    self._free_fids.append(fid)
            raise
        return fid

    def open(self, path: str, mode: int = OREAD) -> int:
        fid = self.walk(path)
        try:
            self.rpc(Topen(0, fid, mode))
        except BaseException:
            self.clunk(fid)
            raise
        return fid

    def read_fid(self, fid: int, offset: int = 0) -> bytes:
        out: list[bytes] = []
        while True:
            r = self.rpc(Tread(0, fid, offset, self.msize - IOHDRSZ))
            if not r.data:
                return b"".join(out)
            out.append(r.data)
            offset += len(r.data)

    def write_fid(self, fid: int, data: bytes, offset: int = 0) -> int:
        chunk = self.msize - IOHDRSZ
        n = 0
        while True:
            r = self.rpc(Twrite(0, fid, offset + n, data[n:n + chunk]))
            n += r.count
            if n >= len(data) or r.count == 0:
                return n

    # -- the 9p(1) verbs --
    def read(self, path: str) -> bytes:
        fid = self.open(path, OREAD)
        try:
            return self.read_fid(fid)
        finally:
            self.clunk(fid)

    def write(self, path: str, data: bytes, trunc: bool = True) -> int:
        fid = self.open(path, OWRITE | (OTRUNC if trunc else 0))
        try:
            return self.write_fid(fid, data)
        finally:
            self.clunk(fid)

    def rdwr(self, path: str, data: bytes) -> bytes:
        """Write data, then read the answer back on the same fid, until end of file.

        Twalk, Topen, Twrite and the first Tread go out in one write and are answered in
        one round trip instead of four; then the clunk, not waited for (the reader frees the
        fid when Rclunk comes), so a call is one round trip.  A first read shorter than asked is
        the whole answer (toolsrv's files are snapshots: a read comes back short only at
        the end, toolsrv(4)); a full one is followed by reads to end of file.  This
        relies on toolsrv handling one connection's requests in order and on its writes
        finishing on the Twrite (toolsrv(4): every action fails or succeeds there), so the
        Tread sees the write's effect.  A path deeper than 16 names or data longer than one
        Twrite takes the one-request-at-a-time way."""
        names = tuple(p for p in path.split("/") if p not in ("", "."))
        chunk = self.msize - IOHDRSZ
        if len(names) > MAXWELEM or len(data) > chunk:
            return self._rdwr_stepwise(path, data)
        fid = self.newfid()
        walk, opened, wrote, read = self.wait_all(self.send_many([
            lambda t: Twalk(t, self.root, fid, names), lambda t: Topen(t, fid, ORDWR),
            lambda t: Twrite(t, fid, 0, data), lambda t: Tread(t, fid, 0, chunk)]))
        if isinstance(walk, Exception) or len(walk.wqid) != len(names):
            with self._lock:
                self._free_fids.append(fid)    # the server made no fid
            if isinstance(walk, Exception):
                raise walk
            raise self._short_walk(path, len(walk.wqid))
        try:
            for r in (opened, wrote, read):
                if isinstance(r, Exception):
                    raise r
            if wrote.count < len(data):        # a short write: finish it, read afresh
                self.write_fid(fid, data[wrote.count:], wrote.count)
                return self.read_fid(fid)
            if len(read.data) < chunk:   # a short read is the whole answer (toolsrv(4))
                return read.data
            return read.data + self.read_fid(fid, len(read.data))
        finally:
            self.clunk_nowait(fid)

    def _short_walk(self, path: str, k: int) -> ClientError:
        """The error of a walk that stopped after k names: the server's own words for the
        name it could not walk to (a walk of one name that fails is an Rerror: "file_read
        is not loaded for this agent: ..."), asked on this error path alone."""
        names = [p for p in path.split("/") if p not in ("", ".")]
        name = names[k] if k < len(names) else path
        why = "file not found"
        try:
            fid = self.walk("/".join(names[:k])) if k else None
        except (ClientError, ConnectionError):
            fid = None
        if fid is not None or not k:
            one = self.newfid()
            try:
                self.rpc(Twalk(0, self.root if fid is None else fid, one, (name,)))
                self.clunk(one)          # walked after all: it appeared meanwhile
            except ClientError as e:
                why = e.ename
                with self._lock:
                    self._free_fids.append(one)
            except ConnectionError:
                pass
            finally:
                if fid is not None:
                    self.clunk(fid)
        return ClientError(why if name in words(why) else f"{name}: {why}")

    def _rdwr_stepwise(self, path: str, data: bytes) -> bytes:
        fid = self.open(path, ORDWR)
        try:
            self.write_fid(fid, data)
            return self.read_fid(fid)
        finally:
            self.clunk(fid)

    def stat(self, path: str) -> Dir:
        fid = self.walk(path)
        try:
            return self.rpc(Tstat(0, fid)).stat
        finally:
            self.clunk(fid)

    def wstat(self, path: str, d: Dir) -> None:
        fid = self.walk(path)
        try:
            self.rpc(Twstat(0, fid, d))
        finally:
            self.clunk(fid)

    def ls(self, path: str) -> list[Dir]:
        fid = self.open(path, OREAD)
        try:
            return decode_dirs(self.read_fid(fid))
        finally:
            self.clunk(fid)

    def mkdir(self, path: str, perm: int = 0o755) -> None:
        parent, _, name = path.rstrip("/").rpartition("/")
        fid = self.walk(parent)
        try:
            self.rpc(Tcreate(0, fid, name, DMDIR | perm, OREAD))
        finally:
            self.clunk(fid)

    def rm(self, path: str) -> None:
        fid = self.walk(path)
        try:
            self.rpc(Tremove(0, fid))
        finally:
            with self._lock:
                self._free_fids.append(fid)

    def close(self) -> None:
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()

    def __enter__(self) -> "Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
