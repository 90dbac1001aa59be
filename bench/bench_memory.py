"""Memory: RSS with 1,000 sessions x 4 agents x 10 loaded tools, and after 100,000 calls.

  many sessions   the server's RSS after creating 1,000 sessions, 4 agents in each and
                  `tool_load` of 10 tools in every agent: target < 200 MiB.  Baseline: the
                  same server idle, before any of it.  The setup time is in the note (each
                  mkdir and tool_load saves the state file).
  after calls     RSS after 100,000 rdwr calls of the echo tool by 32 concurrent agents,
                  against the RSS after a 2,000-call warm-up: target within 10%.  These calls
                  go through bench/nullserver.py (toolsrv's own bookkeeping: fids, calls, logs,
                  status, without processes) so that 100,000 fit in a benchmark run; a shorter
                  pass with real sandboxed runs follows, informative.

    python bench/bench_memory.py [--quick] [--json FILE]
"""
from __future__ import annotations

import asyncio
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from .common import (  # noqa: E402
    ECHO_META, ECHO_SH, PAYLOAD, ToolsrvProcess, finish, make_tools_dir, one, parser, row,
)
from .wire import AsyncWire  # noqa: E402

B = "memory"
MiB = 1024.0
TOOLS = [f"t{i}" for i in range(9)] + ["echo"]


async def setup(path: str, sessions: int, agents: int, conns: int = 8,
                load: list[str] = TOOLS) -> None:
    """Create sessions, agents and loads over several connections (pipelined per agent)."""
    from toolsrv.proto import DMDIR, OREAD, ORDWR, Tclunk, Tcreate, Topen, Twalk, Twrite

    ws = [await AsyncWire.unix(path) for _ in range(conns)]

    async def one_session(w: AsyncWire, fid: int, i: int) -> None:
        t = w.tag
        await w.rpc(Twalk(t(), 0, fid, ("session",)))
        await w.rpc(Tcreate(t(), fid, f"s{i}", DMDIR | 0o755, OREAD))
        await w.rpc(Tclunk(t(), fid))
        for a in range(agents):
            await w.rpc(Twalk(t(), 0, fid, ("session", f"s{i}", "agent")))
            await w.rpc(Tcreate(t(), fid, f"a{a}", DMDIR | 0o755, OREAD))
            await w.rpc(Tclunk(t(), fid))
            await w.rpc(Twalk(t(), 0, fid, ("session", f"s{i}", "agent", f"a{a}", "ctl")))
            await w.rpc(Topen(t(), fid, ORDWR))
            await w.rpc(Twrite(t(), fid, 0, ("tool_load " + " ".join(load)).encode()))
            await w.rpc(Tclunk(t(), fid))

    async def worker(k: int) -> None:
        for i in range(k, sessions, conns):
            await one_session(ws[k], 100 + k, i)
    await asyncio.gather(*(worker(k) for k in range(conns)))
    for w in ws:
        w.close()


async def calls(path: str, n: int, agents: int = 32) -> float:
    """n rdwr calls of echo spread over `agents` agents of session s0; calls per second."""
    ws = [await AsyncWire.unix(path) for _ in range(agents)]
    left = n

    async def worker(i: int) -> None:
        nonlocal left
        names = ("session", "s0", "agent", f"a{i}", "tools", "echo", "call")
        while left > 0:
            left -= 1
            out = await ws[i].rdwr(7, names, PAYLOAD)
            assert out == PAYLOAD, out
    t = time.perf_counter()
    await asyncio.gather(*(worker(i) for i in range(agents)))
    dt = time.perf_counter() - t
    for w in ws:
        w.close()
    return n / dt


def many_sessions(tools: str, sessions: int) -> dict:
    srv = ToolsrvProcess(tools).start()
    try:
        idle = srv.rss_kib()
        t = time.perf_counter()
        asyncio.run(setup(srv.path, sessions, 4))
        took = time.perf_counter() - t
        full = srv.rss_kib()
    finally:
        srv.stop()
    return {"idle": idle / MiB, "full": full / MiB, "setup_s": took}


def after_calls(tools: str, n: int, null: bool) -> dict:
    """RSS after a warm-up, then after each fifth of n calls."""
    srv = ToolsrvProcess(tools, null_runner=null).start()
    try:
        asyncio.run(setup(srv.path, 1, 32, conns=4))
        asyncio.run(calls(srv.path, 2000))
        start = srv.rss_kib()
        rates, marks = [], []
        for _ in range(5):
            rates.append(asyncio.run(calls(srv.path, n // 5)))
            marks.append(srv.rss_kib() / MiB)
    finally:
        srv.stop()
    return {"start": start / MiB, "end": marks[-1], "marks": marks,
            "rate": sorted(rates)[2]}


def main(argv: list[str] | None = None) -> list[dict]:
    opts = parser(__doc__).parse_args(argv)
    q = opts.quick
    tools = make_tools_dir({t: (ECHO_SH, ECHO_META) for t in TOOLS if t != "echo"})
    sessions = 100 if q else 1000
    m = many_sessions(tools, sessions)
    n = 10000 if q else 100000
    c = after_calls(tools, n, null=True)
    r = after_calls(tools, 500 if q else 5000, null=False)
    marks = ", ".join(f"{x:.1f}" for x in c["marks"])
    rows = [
        row(B, f"RSS, {sessions} sessions x 4 agents x 10 tools", "MiB", one(m["full"]),
            "same server, idle", one(m["idle"]), "< 200 MiB", m["full"] < 200,
            f"made in {m['setup_s']:.1f} s, the state file saved on every change "
            f"({sessions * 9 / m['setup_s']:.0f} mkdir/tool_load per s)"),
        row(B, f"RSS after {n:,} calls (null runner)", "MiB", one(c["end"]),
            "RSS after 2,000-call warm-up", one(c["start"]), "within 10%",
            c["end"] <= 1.10 * c["start"],
            f"RSS (MiB) after each fifth: {marks}; {c['rate']:.0f} calls/s with 32 agents; "
            "each agent's log keeps its newest 32 KiB"),
        row(B, f"RSS after {n:,} calls vs after {n // 5:,}", "MiB", one(c["end"]),
            f"RSS after {n // 5:,} calls", one(c["marks"][0]), "informative: no leak", None,
            "flat once every agent's log is full: what grows is bounded"),
        row(B, f"RSS after {500 if q else 5000:,} sandboxed calls", "MiB", one(r["end"]),
            "RSS after 2,000-call warm-up", one(r["start"]), "informative", None,
            f"{r['rate']:.0f} calls/s with 32 agents"),
    ]
    finish(rows, opts)
    return rows


if __name__ == "__main__":
    main()
