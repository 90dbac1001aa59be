"""The asyncio adapter: bytes from a socket into the codec, replies back out.

Each connection is a `NinePProtocol`: data_received feeds a Framer (which
bounds a partial frame by msize) and queues every decoded message for its
Conn.  Replies produced while the queue is being handled are joined into few
transport writes.  When a request of the batch went asynchronous (a Tread waiting
for a call's result), the write waits one turn of the event loop: the tasks the
batch started run first, and whatever they answer at once (a tool that finished
without waiting) goes out in the same write.  Memory per connection stays bounded whatever the client
does:
- a partial frame holds at most msize bytes, and one that stalls longer than
  `frame_timeout` closes the connection;
- a client that never reads its replies: once the socket's write buffer is
  above its high-water mark we stop handling its queued requests and stop
  reading its socket, so what it holds is one read (256 KiB) of requests,
  the buffer, and at most `max_inflight` blocked replies.

What closes a connection: a frame whose framing is broken (the codec's ProtocolError),
a partial frame stalled longer than `frame_timeout`, a failed answer to Tauth's challenge
once its Rerror is written (auth.py), a refused client once its first
request is answered (or REFUSED_LINGER seconds without one), and the peer's hang-up.  A
frame that is sound but whose content is bad (a `Malformed`) is answered with Rerror and
the connection goes on.

`Gate` admits connections: a total limit, a limit per peer (uid for Unix
sockets, host for TCP) and the server's peer check (SO_PEERCRED).  A refused
client is not just dropped: its first request is answered with an Rerror
saying why (`resource busy: too many connections ...`, `permission denied:
...`), then the connection closes.

`listen()` opens the listeners: a Unix socket (directory 0700, socket 0600,
a stale socket file replaced, a live one refused) and optionally TCP, plain or
inside TLS (tls.py), which must be loopback unless explicitly allowed.
"""
from __future__ import annotations

import asyncio
import collections
import itertools
import logging
import os
import socket
import struct
from typing import Any, Callable

from toolsrv.proto import Framer, ProtocolError, Rerror, encode

from .dial import Addr, ensure_private_dir
from ..errors import EINTERNAL, P9Error, busy
from ..record import Record
from .server import Conn, ServerConfig

log = logging.getLogger("toolsrv.transport")
_ids = itertools.count(1)

FLUSH_AT = 64 * 1024      # join replies into writes of about this size
REFUSED_LINGER = 5.0      # seconds a refused client has to send its first request


class Peer(Record):
    """Who is on the other end: uid and pid (Unix sockets) or host (TCP), and over TLS
    the subject of the client's certificate, when it showed one (mutual TLS)."""
    FIELDS = ("kind", "uid", "pid", "host", "subject")

    def __init__(self, kind: str, uid: int | None = None, pid: int | None = None,
                 host: str | None = None, subject: str | None = None) -> None:
        self.kind = kind
        self.uid = uid
        self.pid = pid
        self.host = host
        self.subject = subject

    @property
    def key(self) -> str:
        return f"uid {self.uid}" if self.kind == "unix" else f"host {self.host}"

    def __str__(self) -> str:
        if self.kind == "unix":
            return f"unix peer uid {self.uid} pid {self.pid}"
        if self.kind == "tls":
            return f"tls peer {self.host}" + (f" cert {self.subject}" if self.subject else "")
        return f"tcp peer {self.host}"


def identify(transport: Any) -> Peer:
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family == socket.AF_UNIX:
        try:
            creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                    struct.calcsize("3i"))
            pid, uid, _gid = struct.unpack("3i", creds)
            return Peer("unix", uid=uid, pid=pid)
        except OSError:
            return Peer("unix")
    peer = transport.get_extra_info("peername")
    host = str(peer[0]) if peer else "?"
    if transport.get_extra_info("ssl_object") is not None:
        from .tls import subject
        return Peer("tls", host=host, subject=subject(transport.get_extra_info("peercert")))
    return Peer("tcp", host=host)


class Gate(Record):
    """Admission control shared by every listener of one server."""
    FIELDS = ("max_conns", "max_conns_per_peer", "peer_check", "counts", "total")

    def __init__(self, max_conns: int = 512, max_conns_per_peer: int = 256,
                 peer_check: Callable[[Peer], str | None] | None = None,
                 counts: dict[str, int] | None = None, total: int = 0) -> None:
        self.max_conns = max_conns
        self.max_conns_per_peer = max_conns_per_peer
        self.peer_check = peer_check
        self.counts: dict[str, int] = {} if counts is None else counts
        self.total = total
        self.on_refuse: Callable[[Peer, str], None] | None = None   # the audit trail's
        self.bytes_in = 0           # every connection's, for the metrics (serve/metrics.py)
        self.bytes_out = 0

    def admit(self, peer: Peer) -> str | None:
        """None and count the connection in, or the Rerror string refusing it."""
        if self.peer_check:
            why = self.peer_check(peer)
            if why:
                return why
        if self.total >= self.max_conns:
            return busy("too many connections", self.max_conns)
        n = self.counts.get(peer.key, 0)
        if n >= self.max_conns_per_peer:
            return busy(f"too many connections from {peer.key}", self.max_conns_per_peer)
        self.counts[peer.key] = n + 1
        self.total += 1
        return None

    def release(self, peer: Peer) -> None:
        self.total -= 1
        n = self.counts.get(peer.key, 1) - 1
        if n:
            self.counts[peer.key] = n
        else:
            self.counts.pop(peer.key, None)


class NinePProtocol(asyncio.Protocol):
    def __init__(self, fs: Any, config: ServerConfig, registry_of_conns: set,
                 gate: Gate | None = None, frame_timeout: float = 60.0) -> None:
        self.fs, self.config, self.conns = fs, config, registry_of_conns
        self.gate = gate
        self.frame_timeout = frame_timeout
        self.transport: asyncio.Transport | None = None
        self.batch: list[bytes] | None = None
        self.batch_bytes = 0
        self.conn: Conn | None = None
        self.peer: Peer | None = None
        self.refused: str | None = None
        self.queue: collections.deque = collections.deque()
        self.writing_paused = False
        self.reading_paused = False
        self.draining = False
        self.flush_soon = False       # a flush of the open batch is scheduled
        self.timer: asyncio.TimerHandle | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        name = f"c{next(_ids)}"
        self.peer = identify(transport)
        why = self.gate.admit(self.peer) if self.gate else None
        if why:
            log.warning("%s: refused %s: %s", name, self.peer, why)
            if self.gate and self.gate.on_refuse is not None:
                self.gate.on_refuse(self.peer, why)
            self.refused, self.name = why, name
            self.refused_buf = bytearray()
            self._arm(REFUSED_LINGER)
            return
        self.framer = Framer(self.config.msize)
        self.conn = Conn(self.fs, self._send, self.config, name, self._set_msize, self)
        self.conns.add(self)
        log.debug("%s: connected: %s", name, self.peer)

    def conn_name(self) -> str:
        return self.conn.name if self.conn is not None else "?"

    def _set_msize(self, msize: int) -> None:
        self.framer.msize = msize

    def _send(self, msg: Any) -> None:
        try:
            data = encode(msg)
        except (ValueError, TypeError):   # a bug of ours: the client still gets an answer
            log.exception("%s: reply cannot be encoded: %.200r", self.conn_name(), msg)
            data = encode(Rerror(msg.tag, EINTERNAL))
        if self.gate is not None:
            self.gate.bytes_out += len(data)
        if self.batch is not None:
            self.batch.append(data)
            self.batch_bytes += len(data)
            if self.batch_bytes >= FLUSH_AT:
                self._flush_batch()
        elif self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _flush_batch(self) -> None:
        """Write what the batch holds; may call pause_writing synchronously."""
        out, self.batch, self.batch_bytes = self.batch or [], [], 0
        if out and self.transport is not None and not self.transport.is_closing():
            self.transport.write(b"".join(out) if len(out) > 1 else out[0])

    def data_received(self, data: bytes) -> None:
        if self.refused is not None:
            return self._answer_refused(data)
        if self.conn is None:
            return
        if self.gate is not None:
            self.gate.bytes_in += len(data)
        try:
            msgs = self.framer.feed(data)
        except ProtocolError as e:
            log.warning("%s: malformed message, closing: %s", self.conn.name, e)
            self.close()
            return
        self.queue.extend(msgs)
        self._drain()
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        if self.framer.pending:       # stalled: no byte of it for frame_timeout
            self._arm(self.frame_timeout)

    def _drain(self) -> None:
        """Handle queued requests until the queue is empty or the client lags."""
        if self.draining or self.conn is None:
            return
        self.draining = True
        if self.batch is None:
            self.batch, self.batch_bytes = [], 0
        conn, went_async = self.conn, self.conn.tasks
        try:
            while self.queue and not self.writing_paused and not conn.closed:
                conn.receive(self.queue.popleft())
        finally:
            self.draining = False
            if conn.tasks != went_async and not self.writing_paused:
                if not self.flush_soon:     # after the tasks this batch started
                    self.flush_soon = True
                    asyncio.get_running_loop().call_soon(self._flush_later)
            else:
                self._flush_batch()
                self.batch = None
        if self.queue:
            self._pause_reading()
        elif not self.writing_paused:
            self._resume_reading()

    def _flush_later(self) -> None:
        self.flush_soon = False
        if not self.draining:
            self._flush_batch()
            self.batch = None

    def _pause_reading(self) -> None:
        if not self.reading_paused and self.transport is not None \
                and not self.transport.is_closing():
            self.reading_paused = True
            self.transport.pause_reading()

    def _resume_reading(self) -> None:
        if self.reading_paused and self.transport is not None \
                and not self.transport.is_closing():
            self.reading_paused = False
            self.transport.resume_reading()

    def pause_writing(self) -> None:
        self.writing_paused = True
        self._pause_reading()

    def resume_writing(self) -> None:
        self.writing_paused = False
        asyncio.get_running_loop().call_soon(self._drain)

    def _arm(self, delay: float) -> None:
        self.timer = asyncio.get_running_loop().call_later(delay, self._timeout)

    def _timeout(self) -> None:
        self.timer = None
        if self.refused is None and (self.reading_paused or not self.framer.pending):
            return          # we stopped reading, not the client: not its stall
        who = self.conn.name if self.conn else getattr(self, "name", "?")
        log.warning("%s: %s, closing", who, "refused" if self.refused else
                    f"partial frame stalled for {self.frame_timeout:g}s")
        self.close()

    def _answer_refused(self, data: bytes) -> None:
        """Answer the refused client's first request with why, then hang up."""
        buf = self.refused_buf
        buf += data
        if len(buf) < 7:
            return
        tag = struct.unpack_from("<H", buf, 5)[0]
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(encode(Rerror(tag, P9Error(self.refused or "").ename)))
        buf.clear()
        self.close()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def channel(self) -> tuple[str, bytes]:
        """For Tauth (auth.py): the address the peer reached us at, and the TLS binding."""
        from .auth import address_id, binding
        assert self.transport is not None
        return (address_id(self.transport.get_extra_info("sockname")),
                binding(self.transport.get_extra_info("ssl_object")))

    def end(self) -> None:
        """Hang up once the replies so far are written (a failed authentication): nothing
        queued behind is handled, nothing more is read."""
        self.queue.clear()
        self._pause_reading()
        asyncio.get_running_loop().call_soon(self.close)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.timer is not None:
            self.timer.cancel()
            self.timer = None
        self.queue.clear()
        if self.refused is not None:
            return
        self.conns.discard(self)
        if self.gate is not None and self.peer is not None:
            self.gate.release(self.peer)
        if self.conn is not None:
            self.conn.hangup()
            log.debug("%s: hung up", self.conn.name)


class AddressInUse(Exception):
    pass


def check_free(addr: Addr) -> None:
    """Raise AddressInUse when something answers at an address already, naming the fix
    (and, at a unix! one, its pid): the server checks before it takes its state directory,
    so a clash is said first (the state's lock would be refused with advice that then fails
    here)."""
    if addr.kind != "unix":
        try:
            if addr.port:
                socket.create_connection((addr.host, addr.port), timeout=2).close()
                raise AddressInUse(f"{addr}: address already in use: a server listens "
                                   "there; stop it, or serve this one at another address "
                                   "(-a tcp!HOST!PORT)")
        except OSError:
            pass                # nothing there, or not reachable: listen() says
        return
    if not os.path.lexists(addr.path):
        return
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(addr.path)
        pid = struct.unpack("3i", s.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED,
                                               struct.calcsize("3i")))[0]
    except OSError:
        return                  # stale, or not ours to reach: listen() says
    finally:
        s.close()
    raise AddressInUse(_in_use(addr.path, pid))


def _in_use(path: str, pid: int | None = None) -> str:
    who = f"pid {pid} (a toolsrv serve?) listens there" if pid else "a server listens there"
    return (f"unix!{path}: address already in use: {who}; stop it, or serve this one at "
            "another address (-a unix!DIR/toolsrv, or another $NAMESPACE)")


def _claim_unix_path(path: str) -> None:
    """Remove a stale socket file; refuse if a server answers on it."""
    if not os.path.lexists(path):
        return
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        s.connect(path)
    except (ConnectionRefusedError, FileNotFoundError):
        os.unlink(path)
        return
    except OSError as e:
        raise AddressInUse(f"{path}: {e}") from None
    finally:
        s.close()
    raise AddressInUse(_in_use(path))


async def listen(addr: Addr, factory: Callable[[], asyncio.Protocol], *,
                 allow_nonloopback: bool = False, ssl: Any = None) -> asyncio.Server:
    """Open one listener for a dial address; a tls! one needs the server's TLS context."""
    loop = asyncio.get_running_loop()
    if addr.kind == "unix":
        ensure_private_dir(os.path.dirname(addr.path) or ".")
        _claim_unix_path(addr.path)
        old = os.umask(0o177)
        try:
            srv = await loop.create_unix_server(factory, addr.path)
        finally:
            os.umask(old)
        os.chmod(addr.path, 0o600)
        return srv
    if not addr.is_loopback() and not allow_nonloopback:
        raise ValueError(f"{addr} is not a loopback address: pass --listen-any to allow it")
    if addr.kind == "tls":
        if ssl is None:
            raise ValueError(f"{addr}: a TLS listener needs --tls-cert FILE and --tls-key FILE")
        from .tls import HANDSHAKE_TIMEOUT
        return await loop.create_server(factory, addr.host, addr.port, reuse_address=True,
                                        ssl=ssl, ssl_handshake_timeout=HANDSHAKE_TIMEOUT)
    return await loop.create_server(factory, addr.host, addr.port, reuse_address=True)
