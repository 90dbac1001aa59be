"""Load: C connections, each making N tool calls of the echo tool with distinct args.

Every connection is one agent (its own session) and makes its calls one after another,
the way client_9p does (walk, open ORDWR, write, read, clunk: one round trip each); the C
connections run at once on one asyncio loop in this process, against `toolsrv serve` in its
own process (bench.common.ToolsrvProcess), which runs real sandboxed tool processes.

Checked, not just timed:
  - every result is exactly the args its own call wrote (no crossed or lost results);
  - the server's open fds after the run equal those before it (after one warm-up call);
  - the server's resident memory: before, after the run, and after a second run of the same
    size: a leak proportional to calls shows as growth from the first to the second run.
Reported: calls per second over the whole run, and those figures.

    python -m bench.load_calls [--conns 64] [--calls 1000] [--runs 2] [--json FILE]

The long run of issue 8 is the default (64 x 1000, twice: 128,000 tool processes); the
default test suite runs a short one (tests/serve/test_load.py), `make test-slow` the long one.
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import ToolsrvProcess, make_tools_dir, rss_kib  # noqa: E402
from bench.wire import AsyncWire  # noqa: E402


def open_fds(pid: int) -> int:
    return len(os.listdir(f"/proc/{pid}/fd"))


async def agent_loop(path: str, conn: int, calls: int, round_: int) -> int:
    """One connection: its own session and agent, `calls` echo calls; returns mismatches."""
    w = await AsyncWire.unix(path)
    try:
        t = w.tag
        from toolsrv.proto import DMDIR, OREAD, Tclunk, Tcreate, Twalk
        s = f"load{round_}-{conn}"
        for parent, name in ((("session",), s), (("session", s, "agent"), "a")):
            await w.rpc(Twalk(t(), 0, 1, parent))
            await w.rpc(Tcreate(t(), 1, name, DMDIR | 0o755, OREAD))
            await w.rpc(Tclunk(t(), 1))
        base = ("session", s, "agent", "a")
        await w.rdwr(1, base + ("ctl",), b"tool_load echo\n")
        bad = 0
        for k in range(calls):
            args = json.dumps({"conn": conn, "call": k, "round": round_,
                               "pad": f"{conn:03d}-{k:05d}" * (k % 7)}).encode()
            got = await w.rdwr(2, base + ("tools", "echo", "call"), args)
            bad += got != args
        from toolsrv.proto import Tremove
        await w.rpc(Twalk(t(), 0, 3, ("session", s)))
        await w.rpc(Tremove(t(), 3))
        return bad
    finally:
        w.close()


async def one_run(path: str, conns: int, calls: int, round_: int) -> tuple[float, int]:
    t0 = time.perf_counter()
    bad = await asyncio.gather(*(agent_loop(path, i, calls, round_) for i in range(conns)))
    return time.perf_counter() - t0, sum(bad)


def settle(pid: int, want_fds: int, timeout: float = 30.0) -> int:
    """Wait (bounded) for the server's fds to come back to want_fds (down from the runs'
    pipes, and up again as the launcher hands back its spare inits); returns the count."""
    end = time.monotonic() + timeout
    n = open_fds(pid)
    while n != want_fds and time.monotonic() < end:
        time.sleep(0.05)
        n = open_fds(pid)
    return n


def run_load(conns: int = 64, calls: int = 1000, runs: int = 2,
             max_runs: int = 16) -> dict[str, Any]:
    """Run the load against a fresh server; returns the figures (see the module doc)."""
    tools = make_tools_dir()
    srv = ToolsrvProcess(tools, extra=["--max-runs", str(max_runs)]).start()
    try:
        asyncio.run(one_run(srv.path, 1, 1, -1))               # warm-up: zygote, caches
        fds0 = settle(srv.pid, 0, timeout=3)  # past the idle inits' trim (2 s)
        rss = [rss_kib(srv.pid)]
        out: dict[str, Any] = {"conns": conns, "calls_per_conn": calls, "runs": [],
                               "fds_before": fds0, "rss_kib": rss}
        for r in range(runs):
            secs, bad = asyncio.run(one_run(srv.path, conns, calls, r))
            fds = settle(srv.pid, fds0)
            rss.append(rss_kib(srv.pid))
            out["runs"].append({"seconds": round(secs, 2), "calls": conns * calls,
                                "calls_per_s": round(conns * calls / secs, 1),
                                "wrong_results": bad, "fds_after": fds})
        out["fds_after"] = out["runs"][-1]["fds_after"]
        out["server_children_after"] = len(_children(srv.pid))
        return out
    finally:
        srv.stop()
        import shutil
        shutil.rmtree(tools, ignore_errors=True)


def _children(pid: int) -> list[int]:
    from bench.common import children
    return children(pid)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--conns", type=int, default=64)
    ap.add_argument("--calls", type=int, default=1000)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--max-runs", type=int, default=16, help="the server's --max-runs")
    ap.add_argument("--json", help="also write the figures to this file")
    o = ap.parse_args(argv)
    res = run_load(o.conns, o.calls, o.runs, o.max_runs)
    for i, r in enumerate(res["runs"]):
        print(f"run {i + 1}: {r['calls']} calls in {r['seconds']} s = {r['calls_per_s']} "
              f"calls/s, wrong results {r['wrong_results']}, server fds {r['fds_after']}")
    print(f"server fds before {res['fds_before']}, after {res['fds_after']}; "
          f"rss KiB {' -> '.join(map(str, res['rss_kib']))}; "
          f"children after {res['server_children_after']} (the launcher)")
    if o.json:
        Path(o.json).write_text(json.dumps(res, indent=1))
    ok = all(r["wrong_results"] == 0 for r in res["runs"]) and \
        res["fds_after"] <= res["fds_before"]
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
