# toolsrv/run/pumps.py — a run's pipes, pumped from the event loop in bounded steps.
#
# Theory of operation.  Collector reads one pipe in CHUNK-sized reads into a list of chunks,
# up to a cap; past the cap it keeps cap bytes, calls on_overflow (which kills the run) and
# discards the rest until EOF, so the server holds at most cap + CHUNK per stream.  Feeder
# writes stdin without blocking the loop and gives up quietly when the tool closes it.
# read_chunk is the one non-blocking read of a pipe (here and a resident's, tree/resident/
# process.py); last_line the last line of what a stream held, the reason a run failed.
from __future__ import annotations

import asyncio
import os
from typing import Callable

CHUNK = 65536  # pipe read/write size: bounds what one callback holds


def read_chunk(fd: int) -> bytes | None:
    """One read of a non-blocking pipe: up to CHUNK bytes, b"" at its end (or when it
    fails: the process is gone), None when nothing is there yet."""
    try:
        return os.read(fd, CHUNK)
    except BlockingIOError:
        return None
    except OSError:
        return b""


def last_line(data: bytes, skip: Callable[[str], bool] | None = None) -> str:
    """The last line of `data` that is not blank (nor one `skip` says to pass over),
    stripped; "" when there is none."""
    for line in reversed(data.decode("utf-8", "replace").splitlines()):
        if line.strip() and (skip is None or not skip(line)):
            return line.strip()
    return ""


class Collector:
    """Reads one pipe in bounded chunks; on overflow keeps cap bytes, calls on_overflow (which
    kills the run) and discards the rest until EOF."""

    def __init__(self, fd: int, cap: int, on_overflow: object) -> None:
        self.fd, self.cap, self.on_overflow = fd, cap, on_overflow
        self.chunks: list[bytes] = []
        self.size = 0
        self.overflow = False
        loop = asyncio.get_running_loop()
        self.done: asyncio.Future[None] = loop.create_future()
        os.set_blocking(fd, False)
        loop.add_reader(fd, self._readable)

    def _readable(self) -> None:
        data = read_chunk(self.fd)
        if data is None:
            return
        if not data:
            self.stop()
            return
        if self.overflow:
            return  # discard until the kill lands, so the tool dies by it, not by SIGPIPE
        room = self.cap - self.size
        if len(data) > room:
            self.chunks.append(data[:room])
            self.size = self.cap
            self.overflow = True
            self.on_overflow()  # type: ignore[operator]
            return
        self.chunks.append(data)
        self.size += len(data)

    def stop(self) -> None:
        if self.fd >= 0:
            asyncio.get_running_loop().remove_reader(self.fd)
            os.close(self.fd)
            self.fd = -1
        if not self.done.done():
            self.done.set_result(None)

    def value(self) -> bytes:
        return b"".join(self.chunks)


class Feeder:
    """Writes stdin without blocking the loop; gives up quietly when the tool closes it."""

    def __init__(self, fd: int, data: bytes) -> None:
        self.fd, self.data = fd, memoryview(data)
        os.set_blocking(fd, False)
        self._write()
        if self.fd >= 0:
            asyncio.get_running_loop().add_writer(fd, self._write)

    def _write(self) -> None:
        try:
            while self.data:
                self.data = self.data[os.write(self.fd, self.data[:CHUNK]):]
        except BlockingIOError:
            return
        except OSError:
            pass
        self.stop()

    def stop(self) -> None:
        if self.fd >= 0:
            asyncio.get_running_loop().remove_writer(self.fd)
            os.close(self.fd)
            self.fd = -1
