"""The HTTP face's connections: who may hold them, and for how long, before the token.

Rule.  A peer without the token can never hold what the owner needs.  A connection that
has not yet had a request pass the gate (http.py Gate: Origin, Host, token) is *waiting*,
and waiting connections have a small budget of their own, per peer and in all, apart from
the connections whose request passed; each must bring a whole request head within
HEAD_DEADLINE seconds of its accept.  A request the gate refuses ends its connection.

Peers.  A loopback client is its uid, as the kernel says through sock_diag for the
client's end of the connection: every local user reaches 127.0.0.1, from any 127/8
address, so per address they would be one peer, and another user could spend the owner's
budget.  A remote client is its address (IPv6: its /64).  When the kernel cannot say
(no sock_diag), every loopback client is one peer, `loopback`.

Bounds (doc/mcp.md, SECURITY.md).
  waiting, per peer   WAITING_PER_PEER: one more is answered 503 and closed at accept;
  waiting, in all     WAITING_MAX: one more closes the oldest waiting connection of the
                      peer holding the most (503), so a newcomer always gets its chance;
  head deadline       HEAD_DEADLINE seconds from accept to a whole request head, else 408
                      and closed (uvicorn's h11 caps the head at MAX_HEAD bytes: 400);
  passed              PASSED_PER_PEER, and at most `passed_max` in all (PASSED_MAX, less
                      when the open-file limit is low: passed_room): the request that would
                      pass one more is answered 503 and its connection closed.
  ended               a connection refused here gets its answer, then our end of the stream
                      is closed and what it sends is dropped; it is closed when its peer
                      closes, or LINGER seconds later (a socket closed with bytes unread
                      is reset, and the reset may reach the client before the answer);
                      LINGER_MAX at most linger, past that one is closed at once.
Every connection is one fd, and asyncio holds some it has not shown us yet: each turn of
the loop that finds the socket readable accepts up to ACCEPT_BATCH (the backlog asyncio is
given; the kernel's queue is BACKLOG, set again after uvicorn's start), and a connection
takes up to four turns from accept through connection_made and a refusal to its fd's
close, so at most IN_FLIGHT are unseen or closing.  With WAITING_MAX + passed_max +
LINGER_MAX + IN_FLIGHT + FD_RESERVE under the open-file limit (raised to its hard limit
at start), accept never runs out of fds.  (A batch of BACKLOG, asyncio's default here,
let a flood hold three batches, 384 fds, in flight: CI saw 272 against a bound of 216.)

Implementation.  Guarded wraps uvicorn's h11 protocol (composition: it sees the accept
and the close, and passes bytes through); Conns keeps the books, keyed by the client's
(host, port), the ASGI scope's `client`, through which the gate reports a pass.
"""
from __future__ import annotations

import asyncio
import ipaddress
import json
import resource
import socket
import struct
from typing import Any

HEAD_DEADLINE = 5.0        # seconds from accept to a whole request head, tokenless or not
WAITING_PER_PEER = 8       # connections of one peer with no request passed yet
WAITING_MAX = 64           # ... of every peer together
PASSED_PER_PEER = 128      # connections of one peer whose request passed the gate
PASSED_MAX = 256           # ... of every peer together (less when fds are few)
MAX_HEAD = 16 * 1024       # bytes of a request head (h11_max_incomplete_event_size)
LINGER = 1.0               # seconds a refused connection has to read its answer
LINGER_MAX = 64            # refused connections lingering at once
HELD_MAX = WAITING_MAX + LINGER_MAX     # connections held besides passed ones
BACKLOG = 128              # the kernel's listen queue
ACCEPT_BATCH = 16          # the most asyncio accepts in one turn of the loop
IN_FLIGHT = 4 * ACCEPT_BATCH    # accepted and not yet seen, or refused and not yet closed
FD_RESERVE = 128           # fds kept for the face's own use (its 9P connection, a
                           # standalone server's runs, logs)
PASSED_MIN = 16            # below this many passed connections the face does not start


class TooFewFds(ValueError):
    """The open-file limit leaves too few fds for --http; str(e) says what to do."""


def passed_room() -> int:
    """How many passed connections fit the open-file limit (its soft limit raised to the
    hard one first), at most PASSED_MAX; TooFewFds when under PASSED_MIN."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = hard if hard != resource.RLIM_INFINITY else 1 << 16
    if soft != resource.RLIM_INFINITY and soft < want:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):
            pass
    if soft == resource.RLIM_INFINITY:
        return PASSED_MAX
    held = HELD_MAX + IN_FLIGHT + FD_RESERVE
    room = min(PASSED_MAX, soft - held)
    if room < PASSED_MIN:
        need = held + PASSED_MIN
        raise TooFewFds(f"the open-file limit ({soft}) leaves too few fds for --http "
                        f"connections: raise it to {need} at least (ulimit -n {need})")
    return room


def rpc_error(why: str) -> bytes:
    """The JSON-RPC error body every refusal of the face carries."""
    return json.dumps({"jsonrpc": "2.0", "id": None,
                       "error": {"code": -32001, "message": why}}).encode()


# sock_diag (linux/inet_diag.h): one exact lookup of a TCP socket by its four-tuple
_NETLINK_SOCK_DIAG, _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST = 4, 20, 1
_UID_AT = 16 + 64          # nlmsghdr, then inet_diag_msg's idiag_uid


def loopback_uid(peer: tuple[str, int], local: tuple[str, int]) -> int | None:
    """The uid owning the client's end of a loopback TCP connection, or None."""
    fam = socket.AF_INET6 if ":" in peer[0] else socket.AF_INET
    try:
        ends = [socket.inet_pton(fam, a).ljust(16, b"\0") for a in (peer[0], local[0])]
        sockid = (struct.pack("!HH", peer[1], local[1]) + ends[0] + ends[1]
                  + struct.pack("=III", 0, 0xFFFFFFFF, 0xFFFFFFFF))
        req = struct.pack("=BBBBI", fam, socket.IPPROTO_TCP, 0, 0, 0xFFFFFFFF) + sockid
        msg = struct.pack("=IHHII", 16 + len(req), _SOCK_DIAG_BY_FAMILY, _NLM_F_REQUEST,
                          1, 0) + req
        with socket.socket(socket.AF_NETLINK, socket.SOCK_RAW, _NETLINK_SOCK_DIAG) as nl:
            nl.settimeout(1)
            nl.send(msg)
            data = nl.recv(4096)
    except OSError:
        return None
    if len(data) < _UID_AT + 4 or struct.unpack_from("=H", data, 4)[0] != \
            _SOCK_DIAG_BY_FAMILY:
        return None
    return int(struct.unpack_from("=I", data, _UID_AT)[0])


def is_loopback(host: str) -> bool:
    """`localhost`, or an address of the loopback (the listener's host, an OAuth key URL's)."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def peer_of(transport: Any) -> str:
    """The peer a connection counts against: `uid N` on loopback, else its address."""
    peer, local = transport.get_extra_info("peername"), transport.get_extra_info("sockname")
    try:
        ip = ipaddress.ip_address(peer[0])
        ends = (str(peer[0]), int(peer[1])), (str(local[0]), int(local[1]))
    except (TypeError, ValueError, IndexError):
        return "unknown"
    mapped = getattr(ip, "ipv4_mapped", None)
    if (mapped or ip).is_loopback:
        uid = loopback_uid(*ends)
        return "loopback" if uid is None else f"uid {uid}"
    if ip.version == 6 and mapped is None:
        return f"host {ipaddress.ip_network(f'{ip}/64', strict=False)}"
    return f"host {mapped or ip}"


class Conn:
    """One accepted connection: its peer, and until its request passes, its deadline."""
    __slots__ = ("peer", "transport", "timer", "passed", "ended")

    def __init__(self, peer: str, transport: Any) -> None:
        self.peer, self.transport = peer, transport
        self.timer: asyncio.TimerHandle | None = None
        self.passed = False
        self.ended = False          # answered here: what it sends is dropped


class Conns:
    """The books of the face's connections (the module's comment says the rules)."""

    def __init__(self, passed_max: int = PASSED_MAX) -> None:
        self.passed_max = passed_max
        self.by_client: dict[tuple[str, int], Conn] = {}
        self.waiting: dict[str, dict[Conn, None]] = {}   # per peer, oldest first
        self.n_waiting = 0
        self.passed: dict[str, int] = {}
        self.n_passed = 0
        self.lingering: set[Any] = set()       # transports ended, not closed yet

    def admit(self, transport: Any) -> Conn | None:
        """Count a new connection in and start its deadline; None when it is refused (it
        has been answered 503 and closed)."""
        peer = peer_of(transport)
        if len(self.waiting.get(peer, ())) >= WAITING_PER_PEER:
            self.end(transport, 503, "Service Unavailable",
                    f"too many connections from {peer} without a request passed yet "
                    f"({WAITING_PER_PEER} at most, each given {HEAD_DEADLINE:g} s): send "
                    "a whole request, with the bearer token, as soon as you connect")
            return None
        if self.n_waiting >= WAITING_MAX:
            self._make_room()
        conn = Conn(peer, transport)
        self.waiting.setdefault(peer, {})[conn] = None
        self.n_waiting += 1
        client = transport.get_extra_info("peername")
        if client:
            self.by_client[(str(client[0]), int(client[1]))] = conn
        conn.timer = asyncio.get_running_loop().call_later(HEAD_DEADLINE, self._late, conn)
        return conn

    def _make_room(self) -> None:
        """Close the oldest waiting connection of the peer holding the most."""
        peer = max(self.waiting, key=lambda p: len(self.waiting[p]))
        oldest = next(iter(self.waiting[peer]))
        self._unwait(oldest)
        oldest.ended = True
        self.end(oldest.transport, 503, "Service Unavailable",
                f"closed to make room: {WAITING_MAX} connections were waiting for their "
                f"first request, the most of them from {peer}")

    def _late(self, conn: Conn) -> None:
        if not conn.passed and not conn.transport.is_closing():
            self._unwait(conn)
            conn.ended = True
            self.end(conn.transport, 408, "Request Timeout",
                    f"no whole request within {HEAD_DEADLINE:g} s of connecting")

    def end(self, transport: Any, status: int, reason: str, why: str) -> None:
        """Answer a connection that has no request in hand, and end it (the module's
        comment: ended)."""
        body = rpc_error(why)
        transport.write(b"HTTP/1.1 %d %s\r\ncontent-type: application/json\r\n"
                        b"content-length: %d\r\nconnection: close\r\n\r\n%s"
                        % (status, reason.encode(), len(body), body))
        if len(self.lingering) >= LINGER_MAX or not transport.can_write_eof():
            transport.close()
            return
        transport.write_eof()
        self.lingering.add(transport)
        asyncio.get_running_loop().call_later(LINGER, transport.close)

    def lost(self, transport: Any) -> None:
        """A connection refused at accept closed."""
        self.lingering.discard(transport)

    def _unwait(self, conn: Conn) -> None:
        mine = self.waiting.get(conn.peer, {})
        if conn in mine:
            del mine[conn]
            self.n_waiting -= 1
            if not mine:
                del self.waiting[conn.peer]
        if conn.timer is not None:
            conn.timer.cancel()
            conn.timer = None

    def passes(self, client: Any) -> str | None:
        """A request of this client passed the gate: its connection counts as passed from
        now on.  None, or why it may not (too many passed connections)."""
        conn = self.by_client.get((str(client[0]), int(client[1]))) if client else None
        if conn is None or conn.passed:
            return None
        n = self.passed.get(conn.peer, 0)
        if n >= PASSED_PER_PEER:
            return (f"too many connections open from {conn.peer} ({PASSED_PER_PEER} at "
                    "most): close some, or reuse them (keep-alive)")
        if self.n_passed >= self.passed_max:
            return (f"too many connections open ({self.passed_max} at most): close some, "
                    "or reuse them (keep-alive)")
        self._unwait(conn)
        conn.passed = True
        self.passed[conn.peer] = n + 1
        self.n_passed += 1
        return None

    def gone(self, conn: Conn) -> None:
        """The connection closed."""
        self.lost(conn.transport)
        self._unwait(conn)
        client = conn.transport.get_extra_info("peername")
        if client:
            self.by_client.pop((str(client[0]), int(client[1])), None)
        if conn.passed:
            n = self.passed[conn.peer] - 1
            if n:
                self.passed[conn.peer] = n
            else:
                del self.passed[conn.peer]
            self.n_passed -= 1


class Guarded(asyncio.Protocol):
    """uvicorn's h11 protocol behind Conns: a connection refused at accept never reaches
    it; every other one is counted until it closes."""
    conns: Conns
    inner_class: Any

    def __init__(self, **kw: Any) -> None:
        self.inner = self.inner_class(**kw)
        self.conn: Conn | None = None
        self.transport: Any = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.conn = self.conns.admit(transport)
        if self.conn is not None:
            self.inner.connection_made(transport)

    def data_received(self, data: bytes) -> None:
        if self.conn is not None and not self.conn.ended:
            self.inner.data_received(data)

    def eof_received(self) -> bool | None:
        if self.conn is not None and not self.conn.ended:
            return self.inner.eof_received()
        return None                    # ended: its peer closed too, so it is closed now

    def connection_lost(self, exc: Exception | None) -> None:
        if self.conn is None:
            self.conns.lost(self.transport)
            return
        self.conns.gone(self.conn)
        self.inner.connection_lost(exc)

    def pause_writing(self) -> None:
        if self.conn is not None:
            self.inner.pause_writing()

    def resume_writing(self) -> None:
        if self.conn is not None:
            self.inner.resume_writing()


def guarded(conns: Conns) -> type[asyncio.Protocol]:
    """The protocol class uvicorn is given (Config(http=...)), keeping these books."""
    from uvicorn.protocols.http.h11_impl import H11Protocol
    return type("Guarded", (Guarded,), {"conns": conns, "inner_class": H11Protocol})
