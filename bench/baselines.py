"""Baselines measured in the same run as toolsrv: the raw echo floor, the spawn floor, diod.

- `echo`: a raw asyncio request/response echo on a Unix socket (asyncio.Protocol, the
  standard loop unless --uvloop): whatever a request's bytes are, the same bytes come back.
  Driven by the same client and the same 9P frames as toolsrv, it is the floor for any
  Python server: toolsrv's figure over this one is the price of 9P decoding, dispatch and
  encoding.  Run as its own process: `python -m bench.baselines echo PATH`.  `blob` answers
  each request frame with a 64 KiB Rread instead: the floor for bulk reads.  `--burn-us N`
  makes the echo spend N us of CPU per whole request frame before it answers: a server
  exactly as costly as the one measured, with none of its code, so a tail that comes with
  the cost itself (the host's wake-ups, not the server's code) shows up in it too.
- `spawn_echo`: a plain `asyncio.create_subprocess_exec` of the tool, JSON on stdin, stdout
  read back: the spawn floor, no sandbox, no server.
- `Diod`: Debian's diod (C, 9P2000.L) exporting a directory on loopback TCP, where installed.
  Twalk, Tread, Twrite and Tclunk are byte-identical in 9P2000 and 9P2000.L, so one client
  drives both; attach and open differ and are done by hand here.
"""
from __future__ import annotations

import asyncio
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import time
from typing import Any

from toolsrv.proto import NOFID, NOTAG

from .common import PY, REPO, rss_kib

PIPE = asyncio.subprocess.PIPE


# ------------------------------------------------------------------ raw echo server

class _Echo(asyncio.Protocol):
    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


class _Blob(asyncio.Protocol):
    """Answers every whole request frame with one 64 KiB Rread: the bulk-read floor."""

    REPLY = struct.pack("<IBHI", 11 + 65536, 117, 0, 65536) + b"x" * 65536

    def connection_made(self, transport: Any) -> None:
        self.transport, self.buf = transport, bytearray()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        pos, n = _whole_frames(self.buf)
        del self.buf[:pos]
        if n:
            self.transport.write(self.REPLY * n)


def _whole_frames(buf: bytearray) -> tuple[int, int]:
    """(bytes, count) of the whole 9P frames at the start of buf."""
    pos, n = 0, 0
    while len(buf) - pos >= 4 and len(buf) - pos >= int.from_bytes(buf[pos:pos + 4], "little"):
        pos += int.from_bytes(buf[pos:pos + 4], "little")
        n += 1
    return pos, n


class _Burn(asyncio.Protocol):
    """Echoes whole request frames after burning `per_frame` seconds of CPU for each."""

    per_frame = 0.0

    def connection_made(self, transport: Any) -> None:
        self.transport, self.buf = transport, bytearray()

    def data_received(self, data: bytes) -> None:
        self.buf += data
        pos, n = _whole_frames(self.buf)
        if n:
            clock = time.thread_time           # CPU time: a preempted echo burns no less
            end = clock() + n * self.per_frame
            while clock() < end:
                pass
            self.transport.write(bytes(self.buf[:pos]))
            del self.buf[:pos]


async def _serve_echo(path: str, blob: bool = False, burn_us: float = 0.0) -> None:
    loop = asyncio.get_running_loop()
    proto: Any = _Blob if blob else _Echo
    if burn_us:
        proto = type("_BurnN", (_Burn,), {"per_frame": burn_us / 1e6})
    srv = await loop.create_unix_server(proto, path)
    async with srv:
        await srv.serve_forever()


class EchoProcess:
    """The raw asyncio echo server in its own process."""

    def __init__(self, uvloop: bool = False, blob: bool = False, burn_us: float = 0.0) -> None:
        self.tmp = tempfile.mkdtemp(prefix="bench-echo.", dir="/tmp")
        self.path = f"{self.tmp}/echo"
        argv = [PY, "-m", "bench.baselines", "blob" if blob else "echo", self.path]
        argv += ["--uvloop"] if uvloop else []
        argv += ["--burn-us", f"{burn_us:.1f}"] if burn_us else []
        self.proc = subprocess.Popen(argv, cwd=str(REPO), stdin=subprocess.DEVNULL)
        deadline = time.monotonic() + 20
        while not os.path.exists(self.path):
            if time.monotonic() > deadline or self.proc.poll() is not None:
                raise RuntimeError("echo server did not start")
            time.sleep(0.005)

    def rss_kib(self) -> int:
        return rss_kib(self.proc.pid)

    def stop(self) -> None:
        self.proc.terminate()
        self.proc.wait(10)
        shutil.rmtree(self.tmp, ignore_errors=True)


# ------------------------------------------------------------------ spawn floor

async def spawn_echo(tool: str, data: bytes) -> bytes:
    """One plain, unsandboxed spawn of the tool: args on stdin, its stdout back."""
    proc = await asyncio.create_subprocess_exec(tool, stdin=PIPE, stdout=PIPE, stderr=PIPE)
    out, _ = await proc.communicate(data)
    if proc.returncode != 0:
        raise RuntimeError(f"{tool} exited {proc.returncode}")
    return out


# ------------------------------------------------------------------ diod

def free_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def _s(text: str) -> bytes:
    b = text.encode()
    return struct.pack("<H", len(b)) + b


def frame(t: int, tag: int, body: bytes) -> bytes:
    return struct.pack("<IBH", 7 + len(body), t, tag) + body


class Diod:
    """diod exporting a temporary directory (with one small file) on loopback TCP."""

    def __init__(self) -> None:
        self.binary = shutil.which("diod") or ("/usr/sbin/diod" if os.path.exists(
            "/usr/sbin/diod") else None)
        self.proc: subprocess.Popen | None = None

    @property
    def available(self) -> bool:
        return self.binary is not None

    def start(self) -> "Diod":
        self.dir = tempfile.mkdtemp(prefix="bench-diod.", dir="/tmp")
        with open(f"{self.dir}/revision", "w") as f:
            f.write("1\n")
        self.port = free_port()
        self.proc = subprocess.Popen(
            [self.binary, "-f", "-n", "-e", self.dir, "-l", f"127.0.0.1:{self.port}",
             "-L", f"{self.dir}.log"], stdin=subprocess.DEVNULL)  # type: ignore[list-item]
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                socket.create_connection(("127.0.0.1", self.port)).close()
                return self
            except OSError:
                time.sleep(0.01)
        raise RuntimeError("diod did not start")

    def hello(self, sock: socket.socket, msize: int) -> None:
        """Tversion 9P2000.L and a .L Tattach of fid 0 to the export."""
        sock.sendall(frame(100, NOTAG, struct.pack("<I", msize) + _s("9P2000.L")))
        _recv_frame(sock)
        body = struct.pack("<II", 0, NOFID) + _s("root") + _s(self.dir) + struct.pack("<I", 0)
        sock.sendall(frame(104, 1, body))
        r = _recv_frame(sock)
        if r[4] != 105:
            raise RuntimeError(f"diod attach failed: type {r[4]}")

    def lopen(self, sock: socket.socket, fid: int) -> None:
        """Tlopen (type 12) O_RDONLY: 9P2000.L's Topen."""
        sock.sendall(frame(12, 1, struct.pack("<II", fid, 0)))
        r = _recv_frame(sock)
        if r[4] != 13:
            raise RuntimeError(f"diod lopen failed: type {r[4]}")

    def stop(self) -> None:
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(10)
        shutil.rmtree(self.dir, ignore_errors=True)
        try:
            os.unlink(f"{self.dir}.log")
        except OSError:
            pass


def _recv_frame(sock: socket.socket) -> bytes:
    buf = b""
    while len(buf) < 4 or len(buf) < int.from_bytes(buf[:4], "little"):
        data = sock.recv(65536)
        if not data:
            raise ConnectionError("server hung up")
        buf += data
    return buf


if __name__ == "__main__":
    if len(sys.argv) >= 3 and sys.argv[1] in ("echo", "blob"):
        if "--uvloop" in sys.argv:
            import uvloop
            asyncio.set_event_loop_policy(uvloop.EventLoopPolicy())
        burn = float(sys.argv[sys.argv.index("--burn-us") + 1]) if "--burn-us" in sys.argv else 0
        asyncio.run(_serve_echo(sys.argv[2], sys.argv[1] == "blob", burn))
    else:
        sys.exit("usage: python -m bench.baselines echo|blob PATH [--uvloop] [--burn-us N]")
