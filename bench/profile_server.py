"""Profile a running toolsrv with py-spy while a benchmark load drives it; print the top.

Not a benchmark (it is not run by `python -m bench`): the tool behind the profile tables of
bench/NOTES.md.  Starts the server (the null runner by default, so the profile is
toolsrv's own work; --real for sandboxed runs), loads 1 or 10 tools into 32 agents, attaches
py-spy (`pip install py-spy`, not a dependency) and drives one of:

  seq     sequential rdwr calls of the echo tool, one connection (client_9p's pattern)
  conc    32 agents calling at once, one connection each
  tread   Treads of `revision`, 16 in flight on one connection

    python bench/profile_server.py [seq|conc|tread] [--seconds 10] [--tools 10] [--real]

Prints the functions with the most samples on top of the stack (self) and anywhere on it
(total), as a share of the samples taken while the server was not idle.
"""
from __future__ import annotations

import argparse
import asyncio
import collections
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from .bench_memory import TOOLS, calls, setup  # noqa: E402
from .bench_rtt import inflight_window, open_revision, read_frames  # noqa: E402
from .common import ECHO_META, ECHO_SH, PAYLOAD, ToolsrvProcess, make_tools_dir  # noqa: E402
from .wire import Wire  # noqa: E402


def drive(kind: str, srv: ToolsrvProcess, until: float) -> int:
    n = 0
    if kind == "seq":
        w = Wire.unix(srv.path)
        w.hello()
        names = ("session", "s0", "agent", "a0", "tools", "echo", "call")
        while time.perf_counter() < until:
            w.rdwr(7, names, PAYLOAD)
            n += 1
    elif kind == "conc":
        while time.perf_counter() < until:
            asyncio.run(calls(srv.path, 640))
            n += 640
    else:
        w = Wire.unix(srv.path)
        w.hello()
        open_revision(w)
        frames = read_frames(1)
        while time.perf_counter() < until:
            n += int(inflight_window(w, frames, 0.5) * 0.5)
    return n


def top(raw: str, k: int) -> str:
    own: collections.Counter = collections.Counter()
    anywhere: collections.Counter = collections.Counter()
    total = 0
    for line in Path(raw).read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        if not stack:
            continue
        n = int(count)
        total += n
        frames = [re.sub(r" \((.*/)?([^/]*\.py|<[^>]*>):\d+\)", r" (\2)", f)
                  for f in stack.split(";")]
        own[frames[-1]] += n
        for f in set(frames):
            anywhere[f] += n
    out = [f"{total} samples", "self:"]
    out += [f"  {100 * c / total:5.1f}%  {f}" for f, c in own.most_common(k)]
    out.append("total:")
    out += [f"  {100 * c / total:5.1f}%  {f}" for f, c in anywhere.most_common(k + 10)
            if 100 * c / total < 99.5]
    return "\n".join(out)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("kind", nargs="?", default="seq", choices=["seq", "conc", "tread"])
    ap.add_argument("--seconds", type=float, default=10)
    ap.add_argument("--tools", type=int, default=1, help="tools loaded per agent (1 or 10)")
    ap.add_argument("--real", action="store_true", help="sandboxed runs, not the null runner")
    ap.add_argument("--top", type=int, default=25)
    opts = ap.parse_args()
    spy = shutil.which("py-spy") or str(Path(sys.executable).parent / "py-spy")
    if not Path(spy).exists():
        sys.exit("py-spy is not installed: pip install py-spy")
    extra = {t: (ECHO_SH, ECHO_META) for t in TOOLS[:opts.tools - 1]}
    srv = ToolsrvProcess(make_tools_dir(extra), null_runner=not opts.real).start()
    raw = tempfile.mktemp(suffix=".txt")
    try:
        asyncio.run(setup(srv.path, 1, 32, conns=4, load=TOOLS[-opts.tools:]))
        drive(opts.kind, srv, time.perf_counter() + 1)
        p = subprocess.Popen([spy, "record", "-r", "500", "-f", "raw", "-o", raw,
                              "-p", str(srv.pid), "-d", str(int(opts.seconds))],
                             stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
        n = drive(opts.kind, srv, time.perf_counter() + opts.seconds - 1)
        p.wait()
    finally:
        srv.stop()
    print(f"{opts.kind}: {n} operations driven; tools loaded per agent: {opts.tools}")
    print(top(raw, opts.top))


if __name__ == "__main__":
    main()
