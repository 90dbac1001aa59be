"""The face's stdio wire, read and written by the event loop instead of worker threads.

Theory of operation.  The SDK's `stdio_server()` reads stdin and writes stdout through
anyio's worker threads: about a dozen thread hand-offs per call, most of what the face
cost beyond a 9P rdwr and the SDK's own handling (doc/performance.md, The MCP face).  It
also takes explicit streams, so `wire()` gives it two of ours: the wire moved to private
descriptors (close-on-exec), fd 0 pointed at /dev/null and fd 1 at stderr while it
serves, as the SDK does, so nothing a handler or a child writes can tear a frame; then
stdin read by asyncio's pipe transport a line at a time, and stdout written through its
write transport, waiting for the pipe to drain only past a high-water mark.  A stdin or
stdout the loop cannot watch (a regular file, /dev/null) gets None: the caller falls back to the
SDK's own transport.  On exit the descriptors are put back.  A `tap` (fast.py) sees each
line first and keeps the steady-state tools/call it answers itself.
"""
from __future__ import annotations

import asyncio
import contextlib
import os
import select
import sys
from typing import Any, AsyncIterator, Callable

LINE_MAX = 256 << 20      # one JSON-RPC message; the 9P side caps what a call may carry


class LinesIn:
    """`async for line in it`: stdin's lines, as text (what stdio_server iterates)."""

    def __init__(self, reader: asyncio.StreamReader) -> None:
        self.reader = reader
        self.tap: Callable[[str], bool] | None = None    # fast.py: True keeps a line


    def __aiter__(self) -> "LinesIn":
        return self

    async def __anext__(self) -> str:
        while True:
            try:
                line = await self.reader.readuntil(b"\n")
            except asyncio.IncompleteReadError as e:
                if not e.partial:
                    raise StopAsyncIteration from None
                line = e.partial
            except asyncio.LimitOverrunError:
                raise StopAsyncIteration from None  # a peer past any sane frame: hang up
            text = line.decode("utf-8", "replace")
            if self.tap is None or not self.tap(text):
                return text


class LinesOut:
    """`await write(text)`, `await flush()`: stdout through the loop's write transport."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer

    async def write(self, text: str) -> None:
        self.writer.write(text.encode("utf-8"))

    async def flush(self) -> None:
        await self.writer.drain()       # returns at once below the transport's high water


def _watchable(fd: int) -> bool:
    """Whether epoll takes fd, as the loop will ask it: a pipe, a socket, a terminal; not a
    regular file, nor /dev/null (EPERM both, which the loop would only log, leaving the
    face waiting for a line that never comes), nor a closed fd."""
    with select.epoll() as ep:
        try:
            ep.register(fd, select.EPOLLIN)
        except OSError:
            return False
    return True


@contextlib.asynccontextmanager
async def wire() -> AsyncIterator[tuple[LinesIn, LinesOut] | None]:
    """(stdin, stdout) for stdio_server(stdin=, stdout=), or None to use the SDK's own."""
    if not (_watchable(0) and _watchable(1)):
        yield None
        return
    loop = asyncio.get_running_loop()
    wire_in, wire_out = os.dup(0), os.dup(1)          # non-inheritable: no child has them
    null = os.open(os.devnull, os.O_RDONLY)
    saved = os.dup(0), os.dup(1)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    transports: list[Any] = []
    try:
        reader = asyncio.StreamReader(limit=LINE_MAX, loop=loop)
        t, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader),
                                            os.fdopen(wire_in, "rb", 0))
        transports.append(t)
        w, proto = await loop.connect_write_pipe(asyncio.streams.FlowControlMixin,
                                                 os.fdopen(wire_out, "wb", 0))
        transports.append(w)
        yield LinesIn(reader), LinesOut(asyncio.StreamWriter(w, proto, None, loop))
    finally:
        for t in transports:
            t.close()
        os.dup2(saved[0], 0)
        os.dup2(saved[1], 1)
        for fd in saved:
            os.close(fd)
        sys.stdout.flush() if sys.stdout else None
