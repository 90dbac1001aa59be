"""Two trees side by side in one run: the same warm Python and sh calls through a real server
of each, windows alternating, so a change's cost is measured against the tree before it.

    python bench/bench_ab.py OLD_TREE [NEW_TREE] [--n CALLS] [--windows W]

OLD_TREE and NEW_TREE are checkouts (or `git archive` copies) of toolsrv; NEW_TREE defaults
to this one.  Each server runs `python -P -m toolsrv serve` with PYTHONPATH=<tree> (-P: not
the current directory first), this interpreter and its packages.  Figures, per tree, each call an rdwr of ~100 B of JSON:
  py echo     a `#!/usr/bin/env python3` JSON echo beside its .meta (warm)
  file_read   the bundled file_read (160 lines of Python) on a one-line file, as the tree
              ships it (warm before issue 33, resident since)
  py job.py   `cmd: python3 job.py`, a 600-line script in the session's cwd (warm)
  sh echo     the /bin/sh JSON echo (cold: the call overhead)
The ratio is NEW / OLD, median and p99 (issue 25: the server no longer reads or compiles
a script itself).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from toolsrv.cli.client import Client  # noqa: E402

from .common import ECHO_META, PAYLOAD, PY_ECHO, REPO, ToolsrvProcess, lat, make_tools_dir  # noqa: E402
from .wire import Wire  # noqa: E402

JOB_LINES = 600


def job_source() -> str:
    body = "".join(f"def f{i}(x):\n    return {{'n': {i}, 'x': x}} if x else None\n\n"
                   for i in range(JOB_LINES // 3))
    return ("import json, sys\n" + body
            + "sys.stdout.write(json.dumps(json.load(sys.stdin)))\n")


FILE_READ = (REPO / "data" / "tools" / "file_read").read_text()
FR_META = json.loads((REPO / "data" / "tools" / "file_read.meta").read_text())
FR_ARGS = json.dumps({"path": "small.txt"}).encode()
TOOLS = ("pyecho", "fr", "job", "echo")


def tools() -> str:
    return make_tools_dir({
        "pyecho": (PY_ECHO, ECHO_META), "fr": (FILE_READ, FR_META),
        "job": (None, {**ECHO_META, "tier": "warm", "cmd": "python3 job.py"})})


def serve(tree: str, tools_dir: str) -> ToolsrvProcess:
    srv = ToolsrvProcess(tools_dir)
    srv.env["PYTHONPATH"] = tree
    srv.argv.insert(1, "-P")    # not the current directory first: the tree's toolsrv
    return srv.start(60)


def setup(srv: ToolsrvProcess, cwd: str) -> Wire:
    with Client.connect(srv.addr) as c:
        c.mkdir("session/ab")
        c.write("session/ab/cwd", cwd.encode())
        c.mkdir("session/ab/agent/a")
        for t in TOOLS:
            c.rdwr("session/ab/agent/a/ctl", f"tool_load {t}".encode())
    w = Wire.unix(srv.path)
    w.hello()
    return w


def calls(w: Wire, tool: str, n: int) -> list[float]:
    names = ("session", "ab", "agent", "a", "tools", tool, "call")
    out, pc = [], time.perf_counter
    for _ in range(n):
        t = pc()
        r = w.rdwr(7, names, FR_ARGS if tool == "fr" else PAYLOAD, True)
        out.append(pc() - t)
        if tool == "fr":
            assert r == b"     1\tone line\n", r[:200]
        else:
            assert json.loads(r) == json.loads(PAYLOAD), r[:200]
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("old")
    ap.add_argument("new", nargs="?", default=str(REPO))
    ap.add_argument("--n", type=int, default=20, help="calls per window")
    ap.add_argument("--windows", type=int, default=10)
    opts = ap.parse_args()
    d = tools()
    cwd = tempfile.mkdtemp(prefix="ab-cwd.", dir="/tmp")
    os.chmod(cwd, 0o755)
    Path(cwd, "job.py").write_text(job_source())
    os.chmod(Path(cwd, "job.py"), 0o644)
    Path(cwd, "small.txt").write_text("one line\n")
    trees = {"old": opts.old, "new": opts.new}
    srvs = {k: serve(v, d) for k, v in trees.items()}
    try:
        wires = {k: setup(s, cwd) for k, s in srvs.items()}
        samples: dict[tuple[str, str], list[float]] = {}
        for k, w in wires.items():                              # warm-up: the warm inits
            for t in TOOLS:
                calls(w, t, 5)
        for i in range(opts.windows):
            order = list(wires.items()) if i % 2 == 0 else list(wires.items())[::-1]
            for k, w in order:
                for t in TOOLS:
                    samples.setdefault((k, t), []).extend(calls(w, t, opts.n))
        print(f"{'figure':<28}{'old median':>12}{'new median':>12}{'ratio':>8}"
              f"{'old p99':>10}{'new p99':>10}{'ratio':>8}   (ms)")
        for t, label in (("pyecho", "py echo (warm)"), ("fr", "bundled file_read (shipped)"),
                         ("job", "py job.py, 600 lines (warm)"),
                         ("echo", "sh echo (call overhead)")):
            a, b = lat(samples[("old", t)]), lat(samples[("new", t)])
            print(f"{label:<28}{a['median']:>12.2f}{b['median']:>12.2f}"
                  f"{b['median'] / a['median']:>8.2f}{a['p99']:>10.2f}{b['p99']:>10.2f}"
                  f"{b['p99'] / a['p99']:>8.2f}")
    finally:
        for s in srvs.values():
            s.stop()


if __name__ == "__main__":
    main()
