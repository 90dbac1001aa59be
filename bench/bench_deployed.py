"""A python3 echo call against a sh echo call, by a server started where users start it.

Issue 26: warm starts were off wherever the server did not run from the checkout, and
every bench (bench/common.py's ToolsrvProcess: cwd and PYTHONPATH the checkout) hid it.
This starts `--toolsrv` (an installed one, or the checkout's .venv/bin/toolsrv) with its
working directory `--cwd` (default: a fresh directory under /tmp) and nothing on
PYTHONPATH, serving a tools directory of two echo tools, the sh one (`exec cat`) and the
python3 one, and times rdwr calls of each through the toolsrv client of the Python that
runs this script, alternating window by window so host noise hits both alike; then prints
the medians, their ratio (target: python3 <= 1.5x sh) and the server's /status.  With
--agents K, also K agents calling at once, each on its own connection, the python3 echo's
calls/s against the sh echo's (issue 33: >= 0.7x at 32), windows alternating in the same
server (no pause in between: an idle warm pool is trimmed after 2 s).

    python bench/bench_deployed.py --toolsrv VENV/bin/toolsrv [--cwd DIR] [-n CALLS] [--no-warm]
                                   [--agents K]
"""
from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

from toolsrv.cli.client import Client

if __package__ in (None, ""):  # run as a script: bench.* (the agents' loop) from the checkout
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

META = {"description": "echo the JSON args", "args": {"type": "object"}}
TOOLS = {"echo": "#!/bin/sh\nexec cat\n",
         "pyecho": "#!/usr/bin/env python3\nimport json, sys\n"
                   "sys.stdout.write(json.dumps(json.load(sys.stdin)))\n"}
PAYLOAD = json.dumps({"path": "/tmp/some/where/file.txt", "pattern": "needle"}).encode()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--toolsrv", required=True, help="the toolsrv executable to serve with")
    ap.add_argument("--cwd", help="the server's working directory (default: a fresh one)")
    ap.add_argument("-n", type=int, default=200, help="calls of each tool")
    ap.add_argument("--no-warm", action="store_true", help="serve --no-warm: the cold figure")
    ap.add_argument("--agents", type=int, default=0,
                    help="also K agents calling at once: calls/s of each echo")
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="bench-deployed.", dir="/tmp")
    os.chmod(tmp, 0o755)
    tools = os.path.join(tmp, "tools")
    os.mkdir(tools, 0o755)
    for name, script in TOOLS.items():
        with open(os.path.join(tools, name + ".meta"), "w") as f:
            json.dump(META, f)
        with open(os.path.join(tools, name), "w") as f:
            f.write(script)
        os.chmod(os.path.join(tools, name), 0o755)
    cwd = a.cwd or os.path.join(tmp, "cwd")
    os.makedirs(cwd, 0o755, exist_ok=True)
    sock = os.path.join(tmp, "ns", "toolsrv")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "OLLIE_TOOLS_PATH")}
    log = open(os.path.join(tmp, "server.log"), "w")
    p = subprocess.Popen([a.toolsrv, "serve", "-a", f"unix!{sock}", "--tools", tools,
                          "--no-state", "--max-runs", "64", *(["--no-warm"] if a.no_warm else [])], cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                         stdout=log, stderr=log)
    try:
        end = time.monotonic() + 60
        while not os.path.exists(sock):
            if p.poll() is not None or time.monotonic() > end:
                sys.exit(f"toolsrv did not start:\n{open(log.name).read()}")
            time.sleep(0.05)
        run(f"unix!{sock}", a.n, a.toolsrv, cwd)
        if a.agents:
            asyncio.run(agents(sock, a.agents))
        with Client.connect(f"unix!{sock}") as c:
            print(c.read("status").decode(), end="")
        with open(log.name) as f:
            text = f.read()
        print("tracebacks in the server's log:", text.count("Traceback"))
        for line in text.splitlines():
            if "warm" in line and ("fail" in line or "cold" in line):
                print("log:", line)
    finally:
        p.terminate()
        p.wait(30)
        shutil.rmtree(tmp, ignore_errors=True)


def run(addr: str, n: int, toolsrv: str, cwd: str) -> None:
    times: dict[str, list[float]] = {"echo": [], "pyecho": []}
    with Client.connect(addr) as c:
        c.mkdir("session/b")
        c.mkdir("session/b/agent/a")
        c.rdwr("session/b/agent/a/ctl", b"tool_load echo pyecho")
        for name in times:      # the first call of a kind (a warm init made) on its own
            c.rdwr(f"session/b/agent/a/tools/{name}/call", PAYLOAD)
        window = 10
        for w in range(0, n, window):
            order = ("echo", "pyecho") if (w // window) % 2 == 0 else ("pyecho", "echo")
            for name in order:
                for _ in range(min(window, n - w)):
                    t0 = time.perf_counter()
                    out = c.rdwr(f"session/b/agent/a/tools/{name}/call", PAYLOAD)
                    times[name].append(time.perf_counter() - t0)
                    assert json.loads(out) == json.loads(PAYLOAD), out
    sh, py = (statistics.median(times[k]) * 1e3 for k in ("echo", "pyecho"))
    print(f"server {toolsrv} from {cwd}; load average {os.getloadavg()[0]:.1f}")
    print(f"sh echo      median {sh:6.2f} ms  ({n} calls)")
    print(f"python3 echo median {py:6.2f} ms  ({n} calls)")
    print(f"ratio python3/sh    {py / sh:6.2f}  (target <= 1.5)")


async def agents(sock: str, k: int, seconds: float = 2.0, windows: int = 4) -> None:
    """k agents at once, each its own connection: calls/s of the python3 echo, then the
    sh echo, window after window with no pause (the warm pool grows to k first)."""
    from bench.bench_call import window  # noqa: PLC0415 - the same loop bench_call times
    from bench.wire import AsyncWire  # noqa: PLC0415
    with Client.connect(f"unix!{sock}") as c:
        c.mkdir("session/k")
        for i in range(k):
            c.mkdir(f"session/k/agent/a{i}")
            c.rdwr(f"session/k/agent/a{i}/ctl", b"tool_load echo pyecho")
    conns = [await AsyncWire.unix(sock) for _ in range(k)]
    calls = {name: [lambda c=c, i=i, name=name: c.rdwr(
        7, ("session", "k", "agent", f"a{i}", "tools", name, "call"), PAYLOAD, True)
        for i, c in enumerate(conns)] for name in ("pyecho", "echo")}
    await window(calls["pyecho"], 3.0)  # the warm pool grows to k (each a python start)
    rates: dict[str, list[float]] = {"pyecho": [], "echo": []}
    for _ in range(windows):
        for name in ("pyecho", "echo"):
            rates[name].append((await window(calls[name], seconds))[0])
    for c in conns:
        c.close()
    sh, py = (statistics.median(rates[n]) for n in ("echo", "pyecho"))
    print(f"sh echo      {sh:6.0f} calls/s, {k} agents")
    print(f"python3 echo {py:6.0f} calls/s, {k} agents")
    print(f"ratio python3/sh    {py / sh:6.2f}  (target >= 0.7 at 32 agents)")


if __name__ == "__main__":
    main()
