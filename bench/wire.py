"""Minimal 9P2000 clients for benchmarks, built on proto: one blocking, one asyncio.

`Wire` is a blocking socket with a frame reader: the lowest-overhead Python client, for
sequential round trips (the same client drives every server, so the comparison is fair).
`AsyncWire` is an asyncio Protocol that matches replies to tags, so many requests can be in
flight and many connections can share one loop (the concurrent-agents benchmarks).

Both offer `rdwr(names, data)`: what an agent's `client_9p rdwr` costs, walk, open ORDWR,
write, read, clunk, one round trip each; `pipelined=True` sends walk+open+write+read in one
write and then the clunk (two round trips).
"""
from __future__ import annotations

import asyncio
import socket
from typing import Any, Sequence

from toolsrv.proto import (
    IOHDRSZ, NOFID, NOTAG, ORDWR, Framer, Message, Rerror, Tattach, Tclunk, Topen, Tread,
    Tversion, Twalk, Twrite, encode,
)

MSIZE = 65536 + IOHDRSZ
# What a recv asks for.  CPython allocates the whole size for each recv and then shrinks
# it: 1 MiB took 47 us a call on this VM (mmap and munmap), 64 KiB 6 us.  One frame at the
# largest msize fits.
RECV = MSIZE


class NineError(Exception):
    """The server answered Rerror."""


def _check(m: Message) -> Any:
    if type(m) is Rerror:
        raise NineError(m.ename)
    return m


class Wire:
    """A blocking 9P client over one socket; one request at a time unless pipelined by hand."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.framer = Framer(MSIZE)
        self.pending: list[Message] = []
        self.msize = MSIZE

    @classmethod
    def unix(cls, path: str) -> "Wire":
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.connect(path)
        return cls(s)

    @classmethod
    def tcp(cls, host: str, port: int) -> "Wire":
        s = socket.create_connection((host, port))
        s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return cls(s)

    def recv(self, n: int = 1) -> list[Message]:
        """The next n replies, decoded."""
        while len(self.pending) < n:
            data = self.sock.recv(RECV)
            if not data:
                raise ConnectionError("server hung up")
            self.pending += self.framer.feed(data)
        out, self.pending = self.pending[:n], self.pending[n:]
        return out

    def recv_raw(self, n: int, buf: bytearray) -> bytearray:
        """Read until `buf` holds n whole frames; return what follows them (fast path)."""
        have, pos = 0, 0
        while True:
            while have < n and len(buf) - pos >= 4:
                size = int.from_bytes(buf[pos:pos + 4], "little")
                if len(buf) - pos < size:
                    break
                pos += size
                have += 1
            if have == n:
                return buf[pos:]
            data = self.sock.recv(RECV)
            if not data:
                raise ConnectionError("server hung up")
            buf += data

    def rpc(self, m: Message) -> Any:
        self.sock.sendall(encode(m))
        return _check(self.recv(1)[0])

    def hello(self, uname: str = "bench", aname: str = "", version: str = "9P2000") -> None:
        r = self.rpc(Tversion(NOTAG, MSIZE, version))
        self.msize = r.msize
        self.framer.msize = r.msize
        self.rpc(Tattach(1, 0, NOFID, uname, aname))

    def rdwr(self, fid: int, names: Sequence[str], data: bytes, pipelined: bool = False) -> bytes:
        """client_9p's rdwr on `names` from the root fid 0, using `fid`: what it read."""
        return self.exchange(fid, names, data, pipelined)[3].data

    def exchange(self, fid: int, names: Sequence[str], data: bytes, pipelined: bool = False
                 ) -> list[Message]:
        """rdwr's five messages and their five replies (a raw echo's replies are the
        requests themselves: the same client work against any server)."""
        count = self.msize - IOHDRSZ
        msgs = [Twalk(1, 0, fid, tuple(names)), Topen(2, fid, ORDWR),
                Twrite(3, fid, 0, data), Tread(4, fid, 0, count)]
        if pipelined:
            self.sock.sendall(b"".join(map(encode, msgs)))
            replies = self.recv(4)
        else:
            replies = [self.rpc(m) for m in msgs]
        for r in replies:
            _check(r)
        return replies + [self.rpc(Tclunk(5, fid))]

    def close(self) -> None:
        self.sock.close()


class AsyncWire(asyncio.Protocol):
    """An asyncio 9P client: replies are matched to waiting futures by tag."""

    def __init__(self) -> None:
        self.framer = Framer(MSIZE)
        self.waiting: dict[int, asyncio.Future] = {}
        self.transport: Any = None
        self.msize = MSIZE
        self._tag = 0
        self.lost: asyncio.Future | None = None

    @classmethod
    async def unix(cls, path: str) -> "AsyncWire":
        loop = asyncio.get_running_loop()
        _, proto = await loop.create_unix_connection(cls, path)
        await proto.hello()
        return proto

    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        for m in self.framer.feed(data):
            fut = self.waiting.pop(m.tag, None)
            if fut is not None and not fut.done():
                fut.set_result(m)

    def connection_lost(self, exc: Exception | None) -> None:
        for fut in self.waiting.values():
            if not fut.done():
                fut.set_exception(ConnectionError("server hung up"))
        self.waiting.clear()

    def tag(self) -> int:
        self._tag = self._tag + 1 if self._tag < 0xFFFE else 1
        return self._tag

    def send(self, msgs: Sequence[Message]) -> list[asyncio.Future]:
        """Send msgs in one write; a future per message for its reply."""
        loop = asyncio.get_running_loop()
        futs = []
        for m in msgs:
            fut = loop.create_future()
            self.waiting[m.tag] = fut
            futs.append(fut)
        self.transport.write(b"".join(map(encode, msgs)))
        return futs

    async def rpc(self, m: Message) -> Any:
        return _check(await self.send([m])[0])

    async def hello(self, uname: str = "bench") -> None:
        r = await self.rpc(Tversion(NOTAG, MSIZE, "9P2000"))
        self.msize = self.framer.msize = r.msize
        await self.rpc(Tattach(self.tag(), 0, NOFID, uname, ""))

    async def rdwr(self, fid: int, names: Sequence[str], data: bytes,
                   pipelined: bool = False) -> bytes:
        count = self.msize - IOHDRSZ
        t = self.tag
        msgs = [Twalk(t(), 0, fid, tuple(names)), Topen(t(), fid, ORDWR),
                Twrite(t(), fid, 0, data), Tread(t(), fid, 0, count)]
        try:
            if pipelined:
                replies = await asyncio.gather(*self.send(msgs))
                for r in replies:
                    _check(r)
            else:
                replies = [await self.rpc(m) for m in msgs]
        finally:
            await self.rpc(Tclunk(t(), fid))
        return replies[3].data

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()
