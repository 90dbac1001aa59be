"""Resident tools (issue 17): a call to a process that stays up, against MCP's own no-op.

The resident tool is a python3 JSON echo speaking the lines protocol (one line of args in,
{"output": ARGS} out), sandboxed as every run is (Landlock, its own PID namespace, uid,
cgroup), called through the real server with client_9p's pipelined rdwr.  The baseline is
the official MCP SDK's in-process no-op tool over stdio (bench/mcp_bench.py), measured in
the same run, alternating round by round so host noise hits both alike.

Figures and their baselines, all measured in this run:
  latency     a resident echo call, sequential, against an MCP stdio no-op call:
              target <= 0.5x at the median.
  calls/s     32 agents (each its own connection, agent and resident process) calling the
              resident echo, against the MCP server's no-op at 16 concurrent callers (16
              tasks on one session): target >= 2x.
  memory      the resident processes of those 32 agents once idle: RSS and PSS per
              process (PSS shares the interpreter's pages out), and the total with their
              inits; beside it the MCP SDK server's own RSS, informative.

    python bench/bench_resident.py [--quick] [--json FILE]
"""
from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path
from typing import Awaitable, Callable

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from .common import (  # noqa: E402
    PAYLOAD, ToolsrvProcess, find_child, finish, lat, make_tools_dir, one, parser, rate,
    row, rss_kib,
)
from .bench_call import seq_async  # noqa: E402
from .wire import AsyncWire, Wire  # noqa: E402

B = "resident"
SESSION = "bench"
AGENTS = 32
MCP_CALLERS = 16
RES_ECHO = ("#!/usr/bin/env python3\nimport sys\nw, f = sys.stdout.write, sys.stdout.flush\n"
            "for line in sys.stdin:\n"
            "    w('{\"output\": ' + __import__('json').dumps(line[:-1]) + '}\\n'); f()\n")
RES_META = {"description": "echo the JSON args, resident", "args": {"type": "object"},
            "readOnly": True, "resident": True}


def call_path(agent: str) -> tuple[str, ...]:
    return ("session", SESSION, "agent", agent, "tools", "recho", "call")


def setup_agents(srv: ToolsrvProcess, n: int) -> None:
    from toolsrv.cli.client import Client
    with Client.connect(srv.addr) as c:
        c.mkdir(f"session/{SESSION}")
        for i in range(n):
            c.mkdir(f"session/{SESSION}/agent/a{i}")
            c.rdwr(f"session/{SESSION}/agent/a{i}/ctl", b"tool_load recho")


def seq(w: Wire, n: int) -> list[float]:
    names, out, pc = call_path("a0"), [], time.perf_counter
    for _ in range(n):
        t = pc()
        r = w.rdwr(7, names, PAYLOAD, True)
        out.append(pc() - t)
    assert r.startswith(b"{"), r
    return out


async def window(workers: list[Callable[[], Awaitable[object]]], seconds: float) -> float:
    """Every worker in a loop for `seconds`: calls per second."""
    n = 0
    end = time.perf_counter() + seconds

    async def loop(fn: Callable[[], Awaitable[object]]) -> None:
        nonlocal n
        while time.perf_counter() < end:
            await fn()
            n += 1
    t0 = time.perf_counter()
    await asyncio.gather(*(loop(fn) for fn in workers))
    return n / (time.perf_counter() - t0)


def pss_kib(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            return next(int(ln.split()[1]) for ln in f if ln.startswith("Pss:"))
    except (OSError, StopIteration):
        return 0


def ppid(pid: int) -> int:
    with open(f"/proc/{pid}/stat") as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def residents(tools: str) -> list[int]:
    want = f"{tools}/recho".encode()
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if want in f.read():
                        out.append(int(name))
            except OSError:
                pass
    return out


async def run(opts: object, tools: str) -> list[dict]:
    q = getattr(opts, "quick")
    n_seq = 300 if q else 2000
    rounds = 5
    rows: list[dict] = []
    srv = ToolsrvProcess(tools).start()
    mcp_cm = None
    try:
        setup_agents(srv, AGENTS)
        try:
            from .mcp_bench import mcp_session, noop_call
            mcp_cm = mcp_session(f"{tools}/echo")
            mcp = await mcp_cm.__aenter__()
        except ImportError:
            mcp = None
        w = Wire.unix(srv.path)
        w.hello()
        seq(w, 200)                              # starts a0's process, warms both up
        if mcp is not None:
            await seq_async(lambda: noop_call(mcp), 200)
        s: dict[str, list[float]] = {"res": [], "noop": []}
        for _ in range(rounds):
            s["res"] += seq(w, n_seq // rounds)
            if mcp is not None:
                s["noop"] += await seq_async(lambda: noop_call(mcp), n_seq // rounds)
        w.close()
        L = {k: lat(v) if v else None for k, v in s.items()}
        note = "" if mcp else "mcp is not installed (pip install '.[bench]'): no baseline"
        rows.append(row(B, "resident JSON echo call (rdwr)", "ms", L["res"],
                        "MCP SDK stdio no-op call", L["noop"], "<= 0.5x",
                        L["res"]["median"] <= 0.5 * L["noop"]["median"] if mcp else None,
                        note or "python3 lines-protocol echo, sandboxed, through 9P"))
        conns = [await AsyncWire.unix(srv.path) for _ in range(AGENTS)]
        res_workers = [lambda c=c, i=i: c.rdwr(7, call_path(f"a{i}"), PAYLOAD, True)
                       for i, c in enumerate(conns)]
        await window(res_workers, 1.0)         # every agent's process started
        variants = {"res": res_workers}
        if mcp is not None:
            variants["noop"] = [lambda: noop_call(mcp)] * MCP_CALLERS
            await window(variants["noop"], 0.3)
        rates: dict[str, list[float]] = {k: [] for k in variants}
        for _ in range(2 if q else 5):
            for k, ws in variants.items():
                rates[k].append(await window(ws, 1.0 if q else 2.0))
        for c in conns:
            c.close()
        R = {k: rate(v) for k, v in rates.items()}
        rows.append(row(B, f"resident JSON echo calls/s, {AGENTS} agents", "/s", R["res"],
                        f"MCP no-op calls/s, {MCP_CALLERS} callers", R.get("noop"), ">= 2x",
                        R["res"]["median"] >= 2 * R["noop"]["median"] if mcp else None, note))
        time.sleep(0.5)                           # idle now
        pids = residents(tools)
        rss = [rss_kib(p) for p in pids]
        pss = [pss_kib(p) for p in pids]
        inits = [ppid(p) for p in pids]
        init_pss = [pss_kib(p) for p in inits]
        mcp_pid = find_child("bench.mcp_bench") if mcp is not None else None
        n = max(1, len(pids))
        rows.append(row(B, f"memory of one idle resident process (RSS, of {len(pids)})",
                        "MiB", one(sum(rss) / n / 1024), "MCP SDK server process (RSS)",
                        one(rss_kib(mcp_pid) / 1024) if mcp_pid else None, "informative",
                        None, "python3 echo: the interpreter and json"))
        rows.append(row(B, f"memory of {len(pids)} idle resident processes (PSS)", "MiB",
                        one(sum(pss) / 1024), f"their {len(inits)} inits (PSS)",
                        one(sum(init_pss) / 1024), "informative", None,
                        f"PSS per process {sum(pss) / n / 1024:.2f} MiB, per init "
                        f"{sum(init_pss) / n / 1024:.2f} MiB; RSS per process "
                        f"{sum(rss) / n / 1024:.2f} MiB"))
    finally:
        if mcp_cm is not None:
            await mcp_cm.__aexit__(None, None, None)
        srv.stop()
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    opts = parser(__doc__).parse_args(argv)
    tools = make_tools_dir({"recho": (RES_ECHO, RES_META)})
    rows = asyncio.run(run(opts, tools))
    finish(rows, opts)
    return rows


if __name__ == "__main__":
    main()
