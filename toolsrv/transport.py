"""The asyncio adapter: bytes from a socket into the codec, replies back out.

Each connection is a `NinePProtocol`: data_received feeds a Framer (which
bounds a partial frame by msize) and hands every decoded message to its
Conn.  Replies produced while one batch of input is being handled are joined
into a single transport write.  When the client stops reading its replies
and the socket's buffer fills, we stop reading its requests, so a client
that never reads holds no more than its own buffer.  A malformed frame
closes that connection only.

`serve()` opens the listeners: a Unix socket (directory 0700, socket 0600,
a stale socket file replaced, a live one refused) and optionally TCP, which
must be loopback unless explicitly allowed.
"""
from __future__ import annotations

import asyncio
import itertools
import logging
import os
import socket
from typing import Any, Callable

from proto import Framer, ProtocolError, encode

from .dial import Addr, ensure_private_dir
from .server import Conn, ServerConfig

log = logging.getLogger("toolsrv.transport")
_ids = itertools.count(1)


class NinePProtocol(asyncio.Protocol):
    def __init__(self, fs: Any, config: ServerConfig, registry_of_conns: set,
                 peer_check: Callable[[Any], str | None] | None = None) -> None:
        self.fs, self.config, self.conns = fs, config, registry_of_conns
        self.peer_check = peer_check
        self.transport: asyncio.Transport | None = None
        self.batch: list[bytes] | None = None
        self.conn: Conn | None = None

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        name = f"c{next(_ids)}"
        if self.peer_check:
            why = self.peer_check(transport)
            if why:
                log.warning("%s: refused: %s", name, why)
                transport.close()
                return
        self.framer = Framer(self.config.msize)
        self.conn = Conn(self.fs, self._send, self.config, name, self._set_msize)
        self.conns.add(self)
        log.debug("%s: connected", name)

    def _set_msize(self, msize: int) -> None:
        self.framer.msize = msize

    def _send(self, msg: Any) -> None:
        data = encode(msg)
        if self.batch is not None:
            self.batch.append(data)
        elif self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def data_received(self, data: bytes) -> None:
        if self.conn is None:
            return
        try:
            msgs = self.framer.feed(data)
        except ProtocolError as e:
            log.warning("%s: malformed message, closing: %s", self.conn.name, e)
            self.close()
            return
        self.batch = []
        try:
            for m in msgs:
                self.conn.receive(m)
        finally:
            out, self.batch = self.batch, None
            if out and self.transport is not None and not self.transport.is_closing():
                self.transport.write(b"".join(out) if len(out) > 1 else out[0])

    def pause_writing(self) -> None:
        if self.transport is not None:
            self.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def close(self) -> None:
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.conns.discard(self)
        if self.conn is not None:
            self.conn.hangup()
            log.debug("%s: hung up", self.conn.name)


class AddressInUse(Exception):
    pass


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
    raise AddressInUse(f"a server is already running on unix!{path}")


async def listen(addr: Addr, factory: Callable[[], asyncio.Protocol], *,
                 allow_nonloopback: bool = False) -> asyncio.AbstractServer:
    """Open one listener for a dial address."""
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
    return await loop.create_server(factory, addr.host, addr.port, reuse_address=True)
