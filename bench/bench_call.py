"""Tool calls through `call`: toolsrv's own cost, the sandboxed sh echo, concurrent agents.

An agent's call is an rdwr on session/S/agent/A/tools/echo/call pipelined the way
toolsrv.cli.client (and so the client_9p tool) pipelines it: Twalk, Topen ORDWR, Twrite of ~100 B
of JSON args and Tread of the result in one write, then Tclunk: two round trips.  (Client.rdwr
sends its Tclunk without waiting for the reply, so its caller has the result a round trip
sooner; the bench waits, so the server's work on the clunk stays inside the call it belongs
to: in a tight loop of calls the two measure the same.)  The same five messages one round
trip each are measured too, informative.

Figures and their baselines, all measured in this run:
  own cost    rdwr through bench/nullserver.py (the real server with a runner that returns at
              once: 9P + validation + scheduling + bookkeeping, no spawn, no sandbox), against
              an MCP stdio no-op tool call: target < 0.5 ms median, < 1 ms p99.  Informative
              beside it: the raw asyncio echo of the same exchange (the Python floor); the
              same echo burning as much CPU per call as the null server (measured in this
              run), which shows the tail any server that costly gets on this host; and the
              own cost with the client and the server pinned to one CPU (no wake-up of an
              idle virtual CPU between the two: bench/NOTES.md, "Fourth round").
  sandboxed   rdwr of the /bin/sh JSON echo through the real server (Landlock, PID namespace,
              uid switch), against the same tool behind MCP over stdio, unsandboxed: target
              no slower (ratio <= 1).
  overhead    the same rdwr against a direct sandboxed spawn of the tool (toolsrv's Runner.run
              in this process), sequential and with 8 and 32 concurrent agents (each its own
              connection and agent directory): target toolsrv's overhead < 1 ms at the median
              (issue 5, item 10).
  calls/s     32 concurrent agents: >= 1.5x the MCP server's calls/s (32 tasks on one session)
              and >= 85% of the bare-spawn floor (32 concurrent create_subprocess_exec).
Variants alternate window by window so host noise hits them alike.

    python bench/bench_call.py [--quick] [--json FILE]
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Awaitable, Callable

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from toolsrv.cli.client import Client  # noqa: E402

from .baselines import EchoProcess, spawn_echo  # noqa: E402
from .common import (  # noqa: E402
    ECHO_META, HAVE_UVLOOP, NO_UVLOOP, PAYLOAD, PY_ECHO, ToolsrvProcess, cpu_s,
    descendants_cpu_s, find_child, finish, lat, make_tools_dir, one, parser, rate, row,
    rss_kib,
)
from .wire import AsyncWire, Wire  # noqa: E402

B = "call"
SESSION = "bench"


def call_path(agent: str) -> tuple[str, ...]:
    return ("session", SESSION, "agent", agent, "tools", "echo", "call")


def setup_agents(srv: ToolsrvProcess, n: int, load: str = "echo") -> None:
    with Client.connect(srv.addr) as c:
        c.mkdir(f"session/{SESSION}")
        for i in range(n):
            c.mkdir(f"session/{SESSION}/agent/a{i}")
            c.rdwr(f"session/{SESSION}/agent/a{i}/ctl", f"tool_load {load}".encode())


def seq_rdwr(w: Wire, n: int, pipelined: bool = False) -> list[float]:
    names, out, pc = call_path("a0"), [], time.perf_counter
    for _ in range(n):
        t = pc()
        r = w.rdwr(7, names, PAYLOAD, pipelined)
        out.append(pc() - t)
    assert r == PAYLOAD, r
    return out


def timed(fn: Callable[[], object], n: int) -> list[float]:
    out, pc = [], time.perf_counter
    for _ in range(n):
        t = pc()
        fn()
        out.append(pc() - t)
    return out


def seq_exchange(w: Wire, n: int) -> list[float]:
    """rdwr's pipelined exchange against a raw echo: the same client work, no server."""
    names, out, pc = call_path("a0"), [], time.perf_counter
    for _ in range(n):
        t = pc()
        w.exchange(7, names, PAYLOAD, True)
        out.append(pc() - t)
    return out


def on_one_cpu(pids: list[int], fn: Callable[[], list[float]]) -> list[float]:
    """fn() with this thread and the threads `pids` pinned to one CPU, then unpinned;
    nothing (no samples) on a one-CPU machine."""
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2:
        return []
    one = {min(cpus)}
    for pid in [0, *pids]:
        os.sched_setaffinity(pid, one)
    try:
        return fn()
    finally:
        for pid in [0, *pids]:
            os.sched_setaffinity(pid, cpus)


async def seq_async(fn: Callable[[], Awaitable[object]], n: int) -> list[float]:
    out, pc = [], time.perf_counter
    for _ in range(n):
        t = pc()
        await fn()
        out.append(pc() - t)
    return out


async def window(workers: list[Callable[[], Awaitable[object]]], seconds: float
                 ) -> tuple[float, list[float]]:
    """Run every worker in a loop for `seconds`: (calls per second, per-call latencies)."""
    lats: list[float] = []
    end = time.perf_counter() + seconds
    pc = time.perf_counter

    async def loop(fn: Callable[[], Awaitable[object]]) -> None:
        while pc() < end:
            t = pc()
            await fn()
            lats.append(pc() - t)
    t0 = pc()
    await asyncio.gather(*(loop(fn) for fn in workers))
    return len(lats) / (pc() - t0), lats


class Direct:
    """Sandboxed spawns of the tool through toolsrv's Runner, in this process."""

    async def start(self, tools: str) -> "Direct":
        from toolsrv.run.runner import Runner, RunRequest
        from toolsrv.run.sandbox import load_profile
        self.runner = Runner()
        await self.runner.start()
        self.cwd = tempfile.mkdtemp(prefix="bench-cwd.", dir="/tmp")
        uid = self.runner.tool_uid()
        if uid:
            os.chown(self.cwd, *uid)
        env = {"OLLIE_TOOLS_PATH": tools, "OLLIE_BYPASS_SOCKET": "", "PWD": self.cwd,
               "OLLIE_SESSION_ID": SESSION, "OLLIE_AGENT": "direct", "TOOLSRV_ADDR": ""}
        self.req = RunRequest(argv=[f"{tools}/echo"], stdin=PAYLOAD, cwd=self.cwd, env=env,
                              profile=load_profile("default"), tool_dir=tools)
        return self

    async def call(self) -> None:
        r = await self.runner.run(self.req)
        if r.exit_code != 0 or r.stdout != PAYLOAD:
            raise RuntimeError(f"direct run failed: {r}")

    async def close(self) -> None:
        await self.runner.close()
        os.rmdir(self.cwd)


async def concurrent(srv: ToolsrvProcess, direct: Direct, tools: str, mcp: object,
                     k: int, windows: int, seconds: float) -> dict[str, dict]:
    conns = [await AsyncWire.unix(srv.path) for _ in range(k)]
    variants: dict[str, list[Callable[[], Awaitable[object]]]] = {
        "toolsrv": [lambda c=c, i=i: c.rdwr(7, call_path(f"a{i}"), PAYLOAD, True)
                    for i, c in enumerate(conns)],
        "direct": [direct.call] * k,
        "spawn": [lambda: spawn_echo(f"{tools}/echo", PAYLOAD)] * k,
    }
    if mcp is not None:
        from .mcp_bench import echo_call
        variants["mcp"] = [lambda: echo_call(mcp)] * k  # type: ignore[arg-type]
    rates: dict[str, list[float]] = {v: [] for v in variants}
    lats: dict[str, list[float]] = {v: [] for v in variants}
    for name, ws in variants.items():                    # warm-up
        await window(ws, 0.3)
    cpu = {"server": 0.0, "launcher": 0.0}
    for _ in range(windows):
        for name, ws in variants.items():
            if name == "toolsrv":
                c0, z0 = cpu_s(srv.pid), descendants_cpu_s(srv.pid)
            r, ls = await window(ws, seconds)
            if name == "toolsrv":
                cpu["server"] += cpu_s(srv.pid) - c0
                cpu["launcher"] += descendants_cpu_s(srv.pid) - z0
            rates[name].append(r)
            lats[name] += ls
    for c in conns:
        c.close()
    out = {v: {"rate": rate(rates[v]), "lat": lat(lats[v]), "n": len(lats[v])}
           for v in variants}
    out["cpu"] = {k: v / max(1, out["toolsrv"]["n"]) * 1e3 for k, v in cpu.items()}
    return out


async def concurrent_py(srv: ToolsrvProcess, k: int, windows: int,
                        seconds: float) -> dict[str, dict]:
    """k agents calling the python3 echo, windows alternating with the sh echo's."""
    conns = [await AsyncWire.unix(srv.path) for _ in range(k)]
    py = [lambda c=c, i=i: c.rdwr(7, call_path(f"a{i}")[:-2] + ("pyecho", "call"), PAYLOAD,
                                  True) for i, c in enumerate(conns)]
    sh = [lambda c=c, i=i: c.rdwr(7, call_path(f"a{i}"), PAYLOAD, True)
          for i, c in enumerate(conns)]
    await window(py, 2.0)  # the warm pool grows to the concurrency (each a python start)
    rates: dict[str, list[float]] = {"py": [], "sh": []}
    for _ in range(windows):
        for name, ws in (("py", py), ("sh", sh)):
            rates[name].append((await window(ws, seconds))[0])
    for c in conns:
        c.close()
    return {v: rate(r) for v, r in rates.items()}


def warm_inits(pid: int) -> list[int]:
    """The warm interpreters below a server (their command line names the boot program)."""
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/cmdline", "rb") as f:
                    if b"toolsrv.run.init.warm" in f.read():
                        out.append(int(name))
            except OSError:
                pass
    return [p for p in out if _below(p, pid)]


def _below(p: int, top: int) -> bool:
    for _ in range(64):
        try:
            with open(f"/proc/{p}/stat") as f:
                p = int(f.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
        if p == top:
            return True
        if p <= 1:
            return False
    return False


async def run(opts: object, tools: str) -> list[dict]:
    q = getattr(opts, "quick")
    n_seq = 200 if q else 1000
    rows: list[dict] = []
    null = ToolsrvProcess(tools, null_runner=True).start()
    null_uv = ToolsrvProcess(tools, null_runner=True, uvloop=True).start() if HAVE_UVLOOP \
        else None
    real = ToolsrvProcess(tools).start()
    direct = await Direct().start(tools)
    mcp_cm = None
    echo = burn = None
    try:
        setup_agents(null, 1)
        if null_uv is not None:
            setup_agents(null_uv, 1)
        setup_agents(real, 32, "echo pyecho file_read file_read_warm file_grep")
        wn, wr = Wire.unix(null.path), Wire.unix(real.path)
        wu = Wire.unix(null_uv.path) if null_uv is not None else None
        for w in (wn, wr, wu):
            if w is not None:
                w.hello()
        if wu is not None:
            seq_rdwr(wu, 200, True)
        try:
            from .mcp_bench import (echo_call, file_grep_call, file_read_call, mcp_session,
                                    noop_call)
            mcp_cm = mcp_session(f"{tools}/echo")
            mcp = await mcp_cm.__aenter__()
        except ImportError:
            mcp = None
        seq_rdwr(wn, 200)
        n_warm = 300 if q else 1000
        c0 = cpu_s(null.pid)
        seq_rdwr(wn, n_warm, True)
        srv_cpu = (cpu_s(null.pid) - c0) / n_warm
        echo = EchoProcess()
        we = Wire.unix(echo.path)
        c0 = cpu_s(echo.proc.pid)
        seq_exchange(we, n_warm)
        echo_cpu = (cpu_s(echo.proc.pid) - c0) / n_warm
        burn_us = max(0.0, srv_cpu - echo_cpu) / 5 * 1e6     # per frame, 5 frames a call
        burn = EchoProcess(burn_us=burn_us)
        wb = Wire.unix(burn.path)
        seq_exchange(wb, 200)
        seq_rdwr(wr, 20, True)
        await seq_async(direct.call, 20)
        py_first = timed(lambda: wr.rdwr(7, call_path("a1")[:-2] + ("pyecho", "call"), PAYLOAD,
                                         True), 1)  # the interpreter's start, once
        for _ in range(10):
            wr.rdwr(7, call_path("a1")[:-2] + ("pyecho", "call"), PAYLOAD, True)
        sample = f"{tools}/sample.txt"
        fr_path = call_path("a2")[:-2] + ("file_read", "call")
        fw_path = call_path("a2")[:-2] + ("file_read_warm", "call")
        fr_args = ('{"path": "%s", "limit": 50}' % sample).encode()
        fg_path = call_path("a2")[:-2] + ("file_grep", "call")
        fg = {"pattern": "line 1[0-9] of", "path": f"{tools}/tree"}
        fg_args = json.dumps(fg).encode()
        for _ in range(5):   # the resident interpreters' start, and a warm init's, once
            wr.rdwr(7, fr_path, fr_args, True)
            wr.rdwr(7, fw_path, fr_args, True)
            wr.rdwr(7, fg_path, fg_args, True)
        s: dict[str, list[float]] = {k: [] for k in ("own", "own_step", "mcp_noop", "real",
                                                      "direct", "mcp_sh", "cli", "cli_step",
                                                      "own_uv", "py", "echo", "burn",
                                                      "own_pin", "fr", "mcp_fr", "fw", "fg",
                                                      "mcp_fg")}
        py_path = call_path("a1")[:-2] + ("pyecho", "call")
        cli = Client.connect(null.addr)
        cpath = "/".join(call_path("a0"))
        cpu = {"own": 0.0, "mcp_noop": 0.0}
        mcp_pid = find_child("bench.mcp_bench") if mcp is not None else None
        rounds = 5
        for _ in range(rounds):
            c0 = cpu_s(null.pid)
            s["own"] += seq_rdwr(wn, n_seq // rounds, True)
            cpu["own"] += cpu_s(null.pid) - c0
            s["echo"] += seq_exchange(we, n_seq // rounds)
            s["burn"] += seq_exchange(wb, n_seq // rounds)
            s["own_pin"] += on_one_cpu([null.pid], lambda: seq_rdwr(wn, n_seq // rounds, True))
            s["own_step"] += seq_rdwr(wn, n_seq // rounds)
            if wu is not None:
                s["own_uv"] += seq_rdwr(wu, n_seq // rounds, True)
            s["cli"] += timed(lambda: cli.rdwr(cpath, PAYLOAD), n_seq // 4 // rounds)
            s["cli_step"] += timed(lambda: cli._rdwr_stepwise(cpath, PAYLOAD),
                                   n_seq // 4 // rounds)
            s["real"] += seq_rdwr(wr, n_seq // 4 // rounds, True)
            s["direct"] += await seq_async(direct.call, n_seq // 4 // rounds)
            s["py"] += timed(lambda: wr.rdwr(7, py_path, PAYLOAD, True),
                             n_seq // 4 // rounds)
            s["fr"] += timed(lambda: wr.rdwr(7, fr_path, fr_args, True), n_seq // 4 // rounds)
            s["fw"] += timed(lambda: wr.rdwr(7, fw_path, fr_args, True), n_seq // 4 // rounds)
            s["fg"] += timed(lambda: wr.rdwr(7, fg_path, fg_args, True), n_seq // 4 // rounds)
            if mcp is not None and mcp_pid:
                c0 = cpu_s(mcp_pid)
                s["mcp_noop"] += await seq_async(lambda: noop_call(mcp), n_seq // rounds)
                cpu["mcp_noop"] += cpu_s(mcp_pid) - c0
                s["mcp_sh"] += await seq_async(lambda: echo_call(mcp), n_seq // 4 // rounds)
                s["mcp_fr"] += await seq_async(lambda: file_read_call(mcp, sample),
                                               n_seq // 4 // rounds)
                s["mcp_fg"] += await seq_async(lambda: file_grep_call(mcp, fg),
                                               n_seq // 4 // rounds)
        for w in (wn, wr, we, wb):
            w.close()
        if wu is not None:
            wu.close()
        cli.close()
        L = {k: lat(v) if v else None for k, v in s.items()}
        own_ok = L["own"]["median"] < 0.5 and L["own"]["p99"] < 1.0
        mcp_note = "" if mcp else "mcp is not installed (pip install '.[bench]'): no baseline"
        rows.append(row(B, "own cost per call (client_9p rdwr, null runner)", "ms", L["own"],
                        "MCP stdio no-op call", L["mcp_noop"], "< 0.5 ms med, < 1 ms p99",
                        own_ok, mcp_note))
        per = n_seq // rounds * rounds
        rows.append(row(B, "server CPU per call (null runner)", "ms", one(cpu["own"] / per * 1e3),
                        "MCP server CPU per no-op call",
                        one(cpu["mcp_noop"] / per * 1e3) if mcp_pid else None, "informative",
                        None, "user+system time of the server process over the sequential calls"))
        rows.append(row(B, "own cost per call (client_9p rdwr, null runner)", "ms", L["own"],
                        "raw asyncio echo of the same 5 frames", L["echo"], "informative", None,
                        "the floor for a Python server: the same client, the same two round "
                        "trips"))
        rows.append(row(B, "own cost per call (client_9p rdwr, null runner)", "ms", L["own"],
                        "echo burning the same CPU per call", L["burn"], "p99 <= 1.1x",
                        L["own"]["p99"] <= 1.1 * L["burn"]["p99"],
                        f"the raw echo spends {burn_us * 5e-3:.3f} ms of CPU per call before it "
                        "answers (the null server's CPU per call, measured in this run, less the "
                        "plain echo's): the tail any server that costly gets on this host"))
        if L["own_pin"] is not None:
            rows.append(row(B, "own cost per call, client and server on one CPU", "ms",
                            L["own_pin"], "client and server free to move", L["own"],
                            "informative", None,
                            "the client thread and the server's loop thread pinned to one CPU: "
                            "no wake-up of an idle virtual CPU (doc/performance.md)"))
        rows.append(row(B, "own cost, one RPC at a time", "ms", L["own_step"],
                        "client_9p rdwr (pipelined)", L["own"], "informative", None,
                        "walk, open, write, read, clunk: five round trips instead of two"))
        rows.append(row(B, "own cost per call, server on uvloop", "ms", L["own_uv"],
                        "server on the standard loop", L["own"], "informative", None,
                        "" if wu is not None else NO_UVLOOP))
        rows.append(row(B, "toolsrv.client Client.rdwr (pipelined)", "ms", L["cli"],
                        "Client rdwr, one RPC at a time", L["cli_step"], "informative", None,
                        "the threaded client of the CLI and client_9p: 1 round trip and a clunk "
                        "not waited for, instead of 6 (a short first read is the whole answer)"))
        if mcp is not None:
            rows.append(row(B, "sandboxed sh echo call (rdwr)", "ms", L["real"],
                            "MCP stdio echo_sh, unsandboxed", L["mcp_sh"], "<= 1.0x",
                            L["real"]["median"] <= L["mcp_sh"]["median"]))
        over = L["real"]["median"] - L["direct"]["median"]
        rows.append(row(B, "sh echo call vs direct spawn, seq.", "ms", L["real"],
                        "direct sandboxed spawn", L["direct"], "overhead < 1 ms med",
                        over < 1.0, f"overhead {over:+.3f} ms at the median"))
        rows.append(row(B, "python3 JSON echo call (rdwr), warm", "ms", L["py"],
                        "sh echo call (rdwr)", L["real"], "<= 1.5x",
                        L["py"]["median"] <= 1.5 * L["real"]["median"],
                        "a #!/usr/bin/env python3 tool forked from a warm interpreter"))
        rows.append(row(B, "first python3 call of a kind (warm interpreter's start)", "ms",
                        one(py_first[0] * 1e3), "python3 JSON echo call, warm", L["py"],
                        "informative", None, "an idle init turned warm: exec of the "
                        "interpreter, the warmed imports, the boot; once per warm init"))
        if mcp is not None:
            rows.append(row(B, "bundled file_read call (rdwr), resident", "ms", L["fr"],
                            "MCP SDK server's in-process file_read, stdio", L["mcp_fr"],
                            "<= 1.0x", L["fr"]["median"] <= 1.0 * L["mcp_fr"]["median"],
                            "the same 50 lines of the same file; the MCP one runs "
                            "unsandboxed; resident protocol python (doc/tools.md)"))
        if mcp is not None:
            rows.append(row(B, "bundled file_grep call, 20-file tree (rdwr), resident", "ms",
                            L["fg"], "MCP SDK server's in-process file_grep, stdio",
                            L["mcp_fg"], "<= 1.0x",
                            L["fg"]["median"] <= 1.0 * L["mcp_fg"]["median"],
                            "the same search (pure-Python engine, 20 files of 200 lines, 20 "
                            "matches); the MCP one runs unsandboxed"))
        rows.append(row(B, "bundled file_read call (rdwr), resident vs warm", "ms", L["fr"],
                        "the same tool run warm (its .meta without resident)", L["fw"],
                        "informative", None, "a fork of a warm interpreter per call, against "
                        "the script run in the agent's resident interpreter"))
        warm_rss = [rss_kib(p) for p in warm_inits(real.pid)]
        rows.append(row(B, "warm interpreter RSS (largest)", "MiB",
                        one(max(warm_rss) / 1024) if warm_rss else None, None, None,
                        "<= 15 MiB", bool(warm_rss) and max(warm_rss) <= 15 * 1024,
                        f"{len(warm_rss)} warm interpreters idle after the sequential calls"))
        cp = await concurrent_py(real, 32, 2 if q else 4, 1.0 if q else 2.5)
        rows.append(row(B, "python3 echo calls/s, 32 agents, warm", "/s", cp["py"],
                        "sh echo calls/s, 32 agents", cp["sh"], ">= 0.85x",
                        cp["py"]["median"] >= 0.85 * cp["sh"]["median"]))
        for k in (8, 32):
            c = await concurrent(real, direct, tools, mcp, k, 2 if q else 4, 1.0 if q else 2.5)
            over = c["toolsrv"]["lat"]["median"] - c["direct"]["lat"]["median"]
            rows.append(row(B, f"sh echo call, {k} agents (latency)", "ms", c["toolsrv"]["lat"],
                            f"direct sandboxed spawn x{k}", c["direct"]["lat"],
                            "overhead < 1 ms med", over < 1.0,
                            f"overhead {over:+.3f} ms at the median"))
            rows.append(row(B, f"sh echo calls/s, {k} agents", "/s", c["toolsrv"]["rate"],
                            f"bare spawn x{k} (floor)", c["spawn"]["rate"],
                            ">= 0.85x" if k == 32 else "informative",
                            c["toolsrv"]["rate"]["median"] >= 0.85 * c["spawn"]["rate"]["median"]
                            if k == 32 else None))
            rows.append(row(B, f"sh echo calls/s, {k} agents", "/s", c["toolsrv"]["rate"],
                            f"direct sandboxed spawn x{k}", c["direct"]["rate"], "informative"))
            rows.append(row(B, f"server CPU per sh echo call, {k} agents", "ms",
                            one(c["cpu"]["server"]), "launcher + tool processes, per call",
                            one(c["cpu"]["launcher"]), "informative", None,
                            "user+system time per call: the server process (9P, bookkeeping, "
                            "pumping the run's pipes); the launcher's processes and the tools"))
            if mcp is not None:
                rows.append(row(B, f"sh echo calls/s, {k} agents", "/s", c["toolsrv"]["rate"],
                                f"MCP stdio echo_sh x{k}", c["mcp"]["rate"],
                                ">= 1.5x" if k == 32 else "informative",
                                c["toolsrv"]["rate"]["median"] >= 1.5 * c["mcp"]["rate"]["median"]
                                if k == 32 else None))
    finally:
        if mcp_cm is not None:
            await mcp_cm.__aexit__(None, None, None)
        await direct.close()
        for p in (echo, burn):
            if p is not None:
                p.stop()
        null.stop()
        if null_uv is not None:
            null_uv.stop()
        real.stop()
    return rows


def main(argv: list[str] | None = None) -> list[dict]:
    opts = parser(__doc__).parse_args(argv)
    fr = Path(__file__).resolve().parents[1] / "data" / "tools" / "file_read"
    tools = make_tools_dir({"pyecho": (PY_ECHO, ECHO_META),
                            "file_read": (fr.read_text(), json.loads(
                                Path(str(fr) + ".meta").read_text())),
                            "file_read_warm": (fr.read_text(), {
                                k: v for k, v in json.loads(
                                    Path(str(fr) + ".meta").read_text()).items()
                                if k != "resident"})})
    Path(tools, "sample.txt").write_text("".join(f"line {i} of a sample text file\n"
                                                 for i in range(200)))
    os.chmod(Path(tools, "sample.txt"), 0o644)
    grep = fr.parent / "file_grep"       # its .meta (a cmd, resident through file_grep.py)
    for mod in ("file_grep.py", "file_grep_paths.py"):      # and the module it imports
        Path(tools, mod).write_text(Path(fr.parent, mod).read_text())
        os.chmod(Path(tools, mod), 0o755 if mod == "file_grep.py" else 0o644)
    Path(tools, "file_grep.meta").write_text(Path(str(grep) + ".meta").read_text())
    tree = Path(tools, "tree")
    tree.mkdir()
    os.chmod(tree, 0o755)
    for i in range(20):
        Path(tree, f"f{i:02d}.txt").write_text("".join(
            f"line {j} of file {i}\n" if j != 10 + i % 10 else f"line {j} of a match\n"
            for j in range(200)))
        os.chmod(Path(tree, f"f{i:02d}.txt"), 0o644)
    rows = asyncio.run(run(opts, tools))
    finish(rows, opts)
    return rows


if __name__ == "__main__":
    main()
