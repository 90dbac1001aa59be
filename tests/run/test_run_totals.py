"""Bounds on all runs together and nothing left after a stop (issue 34), with real server
processes started outside the checkout: the server's base cgroup carries a total memory
and pids limit (--max-run-memory, --max-run-pids), idle warm interpreters are bounded by
memory as well as time (--max-warm-memory), /status shows both, and a clean SIGTERM stop
removes the server's toolsrv-<pid>-N groups.  Skipped, saying why, where no run cgroups
can be made (not root and no delegated subtree)."""
from __future__ import annotations

import json
import os
import shutil
import signal
import sys
import tempfile
import threading

import pytest

from toolsrv.cli.client import Client, ClientError

from apphelpers import add_tool
from serverhelpers import ServeProcess

CG = "/sys/fs/cgroup"


def _groups_of(pid: int) -> list[str]:
    out = []
    for dp, ds, _ in os.walk(CG):
        for d in ds:
            if d.startswith(f"toolsrv-{pid}-"):
                out.append(os.path.join(dp, d))
    return sorted(out)


class Server(ServeProcess):
    def __init__(self, *args: str) -> None:
        self.home = tempfile.mkdtemp(prefix="home.", dir="/tmp")
        os.chmod(self.home, 0o755)
        self.tools = os.path.join(self.home, "tools")
        os.mkdir(self.tools)
        os.chmod(self.tools, 0o755)
        add_tool(self.tools, "echo", "#!/bin/sh\nexec cat\n")
        add_tool(self.tools, "pyecho", "#!/usr/bin/env python3\nimport sys\n"
                 "print(sys.stdin.read())\n")
        add_tool(self.tools, "hog", "#!/usr/bin/env python3\nimport json, sys\n"
                 "a = json.load(sys.stdin)\nb = bytearray(a['mib'] << 20)\n"
                 "for i in range(0, len(b), 4096):\n    b[i] = 1\nprint('held', a['mib'])\n")
        super().__init__(self.home, ["--no-state", "--tools", self.tools, *args], "log")

    def status(self) -> str:
        with Client.connect(self.addr) as c:
            return c.read("status").decode()

    def stop(self) -> int:
        if self.p.poll() is None:
            self.p.send_signal(signal.SIGTERM)
        try:
            return self.p.wait(60)
        finally:
            shutil.rmtree(self.home, ignore_errors=True)


def _cgroups_or_skip(srv: Server) -> str:
    with Client.connect(srv.addr) as c:
        c.mkdir("session/s")
        c.mkdir("session/s/agent/a")
        c.rdwr("session/s/agent/a/ctl", b"tool_load echo")
        c.rdwr("session/s/agent/a/tools/echo/call", b"{}")     # the launcher is up
    st = srv.status()
    if "run cgroups: none" in st:
        srv.stop()
        pytest.skip("no run cgroups here: " + st.split("run cgroups: none", 1)[1].split("\n")[0])
    return st


def _limit(base_dirs: list[str], v1: str, v2: str) -> int | None:
    for b in base_dirs:
        for name in (v2, v1):
            p = os.path.join(b, name)
            if os.path.exists(p):
                text = open(p).read().strip()
                return None if text == "max" else int(text)
    return None


def test_a_clean_stop_removes_the_servers_cgroups():
    """Three stops, each after cold and warm calls: no toolsrv-<pid>-N group is left."""
    for _ in range(3):
        srv = Server()
        try:
            _cgroups_or_skip(srv)
            with Client.connect(srv.addr) as c:
                c.rdwr("session/s/agent/a/ctl", b"tool_load pyecho")
                for i in range(5):
                    c.rdwr("session/s/agent/a/tools/echo/call", json.dumps({"i": i}).encode())
                c.rdwr("session/s/agent/a/tools/pyecho/call", b"{}")
            assert _groups_of(srv.p.pid), "no groups while running"
        finally:
            pid, rc = srv.p.pid, srv.stop()
        assert rc == 0
        assert _groups_of(pid) == []


def test_the_base_group_bounds_all_runs_together_and_status_says_so():
    srv = Server("--max-run-memory", "300M", "--max-run-pids", "500")
    try:
        st = _cgroups_or_skip(srv)
        bases = [g for g in _groups_of(srv.p.pid)]
        assert bases
        assert _limit(bases, "memory.limit_in_bytes", "memory.max") == 300 << 20
        assert _limit(bases, "pids.max", "pids.max") == 500
        assert "all runs together: memory 300.0 MiB" in st and "pids 500" in st, st
        # one run may not have more than all of them together
        with Client.connect(srv.addr) as c:
            c.rdwr("session/s/agent/a/ctl", b"tool_load hog")
            got = c.rdwr("session/s/agent/a/tools/hog/call", b'{"mib": 100}')
            assert got.strip() == b"held 100"
            with pytest.raises(ClientError):
                c.rdwr("session/s/agent/a/tools/hog/call", b'{"mib": 600}')
    finally:
        assert srv.stop() == 0


def test_the_default_total_is_half_the_memory_and_documented():
    srv = Server()
    try:
        st = _cgroups_or_skip(srv)
        bases = _groups_of(srv.p.pid)
        from toolsrv.run.kernel.cgroups import default_total_memory
        want = default_total_memory()
        assert _limit(bases, "memory.limit_in_bytes", "memory.max") == want
        assert f"memory {want / 2**20:.1f} MiB" in st
    finally:
        assert srv.stop() == 0
    doc = open(os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(
        os.path.abspath(__file__)))), "doc", "reliability.md")).read()
    assert "--max-run-memory" in doc and "half" in doc


def test_idle_warm_interpreters_are_bounded_by_memory():
    """A small budget: after a burst of warm runs, the idle warm interpreters' RSS stays
    within it (the least recently used let go at once, not after the idle time); /status
    shows the bound.  (An in-process runner: the tools' harness of tests/run.)"""
    import asyncio
    from pathlib import Path
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
    from sandbox_support import LANDLOCK, NO_LANDLOCK, Harness
    from toolsrv.run.runner import DEFAULT_RUN_LIMITS, RunnerConfig
    if LANDLOCK.abi < 1:
        pytest.skip(NO_LANDLOCK)
    h = Harness(RunnerConfig(run_limits={**DEFAULT_RUN_LIMITS, "warm_memory": 1 << 40}),
                warm=True)
    try:
        tool = h.tools / "w.py"
        tool.write_text("#!/usr/bin/python3\nimport time\ntime.sleep(0.5)\nprint('ok')\n")
        tool.chmod(0o755)
        la = h.runner.launcher
        first = h.run([str(tool)])
        if not first.warm:
            pytest.skip("no warm starts here: " + h.runner.status_text())
        # what one idle warm interpreter holds (PSS, its standby child included), measured:
        # the budget holds one and a half of it, so a second one idle is one too many
        one = max(i.rss for pool in la.warm.idle.values() for i in pool)
        assert one > 0, h.runner.status_text()
        budget = la.limits["warm_memory"] = one * 3 // 2
        async def burst():
            return await asyncio.gather(*[h.runner.run(h.request([str(tool)]))
                                          for _ in range(6)])
        for _ in range(10):     # until two warm interpreters were made: then one is too many
            results = h.run_async(burst())          # (on a busy host a burst can overlap
            assert [r.stdout for r in results] == [b"ok\n"] * 6, results   # one warm-up)
            if not any(r.warm for r in results):
                pytest.skip("no warm starts here: " + h.runner.status_text())
            if la.warm.started >= 2:
                break
        idle = [i for pool in la.warm.idle.values() for i in pool]
        assert sum(i.rss for i in idle) <= budget
        assert la.warm.shed >= 1 and la.warm.started > len(idle), h.runner.status_text()
        st = h.runner.status_text()
        assert f"against at most {budget / 2**20:.1f} MiB and 60 s idle" in st, st
        assert "let go for memory" in st, st
    finally:
        h.close()
