"""Bulk read: a 10 MiB tool output read back through `out` with msize 65536.

A tool writes 10 MiB to stdout (sandboxed, through the real server); then `out` of that
agent's tool is opened and read to the end, one Tread of 65536 bytes at a time, by a blocking
raw-socket client.  Target: at least 200 MiB/s.  Baseline: the raw asyncio "blob" server
answering each request with a 64 KiB Rread (same client, same request sizes): the floor of a
Python server for this pattern.

    python bench/bench_bulk.py [--quick] [--json FILE]
"""
from __future__ import annotations

import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from toolsrv.proto import IOHDRSZ, OREAD, Tclunk, Topen, Tread, Twalk  # noqa: E402

from toolsrv.cli.client import Client  # noqa: E402

from .baselines import EchoProcess  # noqa: E402
from .common import ToolsrvProcess, finish, make_tools_dir, parser, rate, row  # noqa: E402
from .wire import Wire  # noqa: E402

B = "bulk"
SIZE = 10 << 20
BIG_SH = f"#!/bin/sh\nexec head -c {SIZE} /dev/zero\n"
OUT = ("session", "s", "agent", "a", "tools", "big", "out")


def read_all(w: Wire, fid: int, names: tuple[str, ...] | None) -> int:
    """Open (when names are given) and read fid to the end: bytes read."""
    count = w.msize - IOHDRSZ
    if names is not None:
        w.rpc(Twalk(1, 0, fid, names))
        w.rpc(Topen(1, fid, OREAD))
    off = 0
    while True:
        r = w.rpc(Tread(2, fid, off, count))
        if not r.data:
            break
        off += len(r.data)
    if names is not None:
        w.rpc(Tclunk(3, fid))
    return off


def blob_read(w: Wire, total: int) -> int:
    off = 0
    while off < total:
        off += len(w.rpc(Tread(2, 1, off, 65536)).data)
    return off


def main(argv: list[str] | None = None) -> list[dict]:
    opts = parser(__doc__).parse_args(argv)
    passes = 4 if opts.quick else 12
    tools = make_tools_dir({"big": (BIG_SH, {"description": "10 MiB of output",
                                             "args": {"type": "object"}})})
    srv = ToolsrvProcess(tools).start()
    blob = EchoProcess(blob=True)
    try:
        with Client.connect(srv.addr) as c:
            c.mkdir("session/s")
            c.mkdir("session/s/agent/a")
            c.rdwr("session/s/agent/a/ctl", b"tool_load big")
            c.rdwr("session/s/agent/a/tools/big/call", b"{}")
            status = c.read("session/s/agent/a/tools/big/status").decode().strip()
        if not status.startswith("ok"):
            raise RuntimeError(f"the 10 MiB tool did not succeed: {status}")
        w, b = Wire.unix(srv.path), Wire.unix(blob.path)
        w.hello()
        read_all(w, 5, OUT)
        blob_read(b, SIZE)
        rates: dict[str, list[float]] = {"t": [], "b": []}
        for _ in range(passes):
            t = time.perf_counter()
            n = read_all(w, 5, OUT)
            rates["t"].append(n / (time.perf_counter() - t) / (1 << 20))
            assert n == SIZE, n
            t = time.perf_counter()
            n = blob_read(b, SIZE)
            rates["b"].append(n / (time.perf_counter() - t) / (1 << 20))
        w.close()
        b.close()
    finally:
        srv.stop()
        blob.stop()
    t, bl = rate(rates["t"]), rate(rates["b"])
    rows = [row(B, "read 10 MiB of `out`, msize 65536", "MiB/s", t, "raw asyncio 64 KiB replies",
                bl, ">= 200 MiB/s", t["median"] >= 200)]
    finish(rows, opts)
    return rows


if __name__ == "__main__":
    main()
