"""9P round trips and small-read throughput: toolsrv vs a raw asyncio echo, MCP, diod.

Figures (toolsrv as a separate process, driven by one blocking raw-socket client):
  rtt        Tread of a small synthetic file (`revision`, open fid, offset 0), one at a time,
             against the raw asyncio echo of the same frame: target <= 1.5x the echo.
  inflight   Treads with 16 in flight on one connection, reads/s: target >= 30,000/s, and
             >= 20x the MCP server's no-op tool calls/s (16 concurrent, stdio, same run).
  uvloop     the rtt and inflight figures again with the server on uvloop (optional extra).
  diod       walk+clunk and Tread round trips over loopback TCP, toolsrv vs diod (C,
             9P2000.L), where diod is installed.
Rounds alternate between the servers so host noise hits them alike.

    python bench/bench_rtt.py [--quick] [--json FILE]
"""
from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from toolsrv.proto import OREAD, Tclunk, Topen, Tread, Twalk, encode  # noqa: E402

from .baselines import Diod, EchoProcess, free_port  # noqa: E402
from .common import (  # noqa: E402
    HAVE_UVLOOP, NO_UVLOOP, ToolsrvProcess, finish, lat, make_tools_dir, parser, rate, row,
)
from .wire import RECV, Wire  # noqa: E402

INFLIGHT = 16
B = "rtt"


def open_revision(w: Wire, fid: int = 1) -> None:
    w.rpc(Twalk(1, 0, fid, ("revision",)))
    w.rpc(Topen(1, fid, OREAD))


def rtt_loop(w: Wire, frame: bytes, n: int, out: list[float]) -> None:
    """n sequential round trips of one pre-encoded request."""
    send, recv_raw, pc = w.sock.sendall, w.recv_raw, time.perf_counter
    buf = bytearray()
    for _ in range(n):
        t = pc()
        send(frame)
        buf = recv_raw(1, buf)
        out.append(pc() - t)


def inflight_window(w: Wire, frames: list[bytes], seconds: float) -> float:
    """Keep len(frames) requests (tags 0..k-1) in flight for `seconds`; replies per second."""
    sock = w.sock
    sock.sendall(b"".join(frames))
    outstanding, done = len(frames), 0
    buf = bytearray()
    t0 = time.perf_counter()
    end = t0 + seconds
    stopping = False
    while outstanding:
        data = sock.recv(RECV)
        if not data:
            raise ConnectionError("server hung up")
        buf += data
        pos, again = 0, []
        while len(buf) - pos >= 7:
            size = int.from_bytes(buf[pos:pos + 4], "little")
            if len(buf) - pos < size:
                break
            if buf[pos + 4] == 107:
                raise RuntimeError("Rerror in the in-flight loop")
            again.append(frames[buf[pos + 5]])
            pos += size
        del buf[:pos]
        done += len(again)
        outstanding -= len(again)
        if not stopping and time.perf_counter() >= end:
            stopping = True
            elapsed = time.perf_counter() - t0
            counted = done
        if not stopping:
            sock.sendall(b"".join(again))
            outstanding += len(again)
    return counted / elapsed


def read_frames(fid: int) -> list[bytes]:
    return [encode(Tread(tag, fid, 0, 8192)) for tag in range(INFLIGHT)]


def measure_pair(targets: dict[str, Wire], rounds: int, per_round: int, windows: int,
                 window_s: float) -> dict[str, dict]:
    """Round-robin rtt and in-flight measurements of several open `revision` fids."""
    frame = encode(Tread(0, 1, 0, 8192))
    frames = read_frames(1)
    samples: dict[str, list[float]] = {k: [] for k in targets}
    rates: dict[str, list[float]] = {k: [] for k in targets}
    for w in targets.values():              # warm-up
        rtt_loop(w, frame, 200, [])
        inflight_window(w, frames, 0.05)
    for _ in range(rounds):
        for k, w in targets.items():
            rtt_loop(w, frame, per_round, samples[k])
    for _ in range(windows):
        for k, w in targets.items():
            rates[k].append(inflight_window(w, frames, window_s))
    return {k: {"rtt": lat(samples[k]), "inflight": rate(rates[k])} for k in targets}


async def mcp_noop_rate(concurrency: int, seconds: float, windows: int) -> dict | None:
    try:
        from .mcp_bench import mcp_session, noop_call
    except ImportError:
        return None
    rates = []
    async with mcp_session() as s:
        for _ in range(50):
            await noop_call(s)
        for _ in range(windows):
            done = 0
            end = time.perf_counter() + seconds

            async def worker() -> None:
                nonlocal done
                while time.perf_counter() < end:
                    await noop_call(s)
                    done += 1
            t0 = time.perf_counter()
            await asyncio.gather(*(worker() for _ in range(concurrency)))
            rates.append(done / (time.perf_counter() - t0))
    return rate(rates)


def diod_rows(tools: str, quick: bool) -> list[dict]:
    d = Diod()
    if not d.available:
        return [row(B, "walk+clunk round trip, TCP", "ms", None, "diod (C, 9P2000.L)",
                    note="diod is not installed (apt-get install diod): baseline skipped")]
    port = free_port()
    srv = ToolsrvProcess(tools, tcp_port=port).start()
    d.start()
    try:
        ts = Wire.tcp("127.0.0.1", port)
        ts.hello()
        dw = Wire.tcp("127.0.0.1", d.port)
        d.hello(dw.sock, ts.msize)
        open_revision(ts)
        dw.rpc(Twalk(1, 0, 1, ("revision",)))
        d.lopen(dw.sock, 1)
        walk, clunk = encode(Twalk(1, 0, 2, ("revision",))), encode(Tclunk(2, 2))
        read = encode(Tread(3, 1, 0, 8192))
        res: dict[str, dict[str, list[float]]] = {k: {"wc": [], "rd": []} for k in ("t", "d")}
        n = 100 if quick else 500
        for rnd in range(4 if quick else 12):
            for k, w in (("t", ts), ("d", dw)):
                buf = bytearray()
                for _ in range(n):
                    t = time.perf_counter()
                    w.sock.sendall(walk)
                    buf = w.recv_raw(1, buf)
                    w.sock.sendall(clunk)
                    buf = w.recv_raw(1, buf)
                    if rnd:
                        res[k]["wc"].append(time.perf_counter() - t)
                rtt_loop(w, read, n, res[k]["rd"] if rnd else [])
        ts.close()
        dw.close()
    finally:
        srv.stop()
        d.stop()
    return [
        row(B, "walk+clunk (2 RPCs), TCP", "ms", lat(res["t"]["wc"]), "diod (C, 9P2000.L)",
            lat(res["d"]["wc"]), "informative: a C server"),
        row(B, "Tread small file, TCP", "ms", lat(res["t"]["rd"]), "diod (C, 9P2000.L)",
            lat(res["d"]["rd"]), "informative: a C server"),
    ]


def main(argv: list[str] | None = None) -> list[dict]:
    opts = parser(__doc__).parse_args(argv)
    q = opts.quick
    tools = make_tools_dir()
    rows: list[dict] = []
    procs: dict = {"toolsrv": ToolsrvProcess(tools).start(), "echo": EchoProcess()}
    if HAVE_UVLOOP:
        procs["toolsrv_uv"] = ToolsrvProcess(tools, uvloop=True).start()
        procs["echo_uv"] = EchoProcess(uvloop=True)
    try:
        wires = {k: Wire.unix(p.path) for k, p in procs.items()}
        for k in wires:
            if k.startswith("toolsrv"):
                wires[k].hello()
                open_revision(wires[k])
        m = measure_pair(wires, 6 if q else 20, 300 if q else 500, 4 if q else 12,
                         0.1 if q else 0.25)
    finally:
        for p in procs.values():
            p.stop()
    t, e = m["toolsrv"], m["echo"]
    rows.append(row(B, "9P Tread round trip (seq.)", "ms", t["rtt"], "raw asyncio echo",
                    e["rtt"], "<= 1.5x", t["rtt"]["median"] <= 1.5 * e["rtt"]["median"]))
    rows.append(row(B, f"Tread, {INFLIGHT} in flight", "/s", t["inflight"], "raw asyncio echo",
                    e["inflight"], ">= 30,000/s", t["inflight"]["median"] >= 30000))
    mcp = asyncio.run(mcp_noop_rate(INFLIGHT, 0.5 if q else 1.0, 3 if q else 5))
    if mcp is None:
        rows.append(row(B, f"Tread, {INFLIGHT} in flight", "/s", t["inflight"],
                        "MCP no-op calls", note="mcp is not installed (pip install '.[bench]')"))
    else:
        rows.append(row(B, f"Tread {INFLIGHT} in flight vs MCP", "/s", t["inflight"],
                        f"MCP stdio no-op x{INFLIGHT}", mcp, ">= 20x",
                        t["inflight"]["median"] >= 20 * mcp["median"]))
    if HAVE_UVLOOP:
        tu, eu = m["toolsrv_uv"], m["echo_uv"]
        rows.append(row(B, "Tread round trip, uvloop", "ms", tu["rtt"], "raw uvloop echo",
                        eu["rtt"], "informative"))
        rows.append(row(B, "Tread round trip, uvloop", "ms", tu["rtt"], "toolsrv, std loop",
                        t["rtt"], "informative"))
        rows.append(row(B, f"Tread {INFLIGHT} in flight, uvloop", "/s", tu["inflight"],
                        "toolsrv, std loop", t["inflight"], "informative"))
    else:
        rows.append(row(B, "Tread round trip, uvloop", "ms", None, note=NO_UVLOOP))
    rows += diod_rows(tools, q)
    finish(rows, opts)
    return rows


if __name__ == "__main__":
    main()
