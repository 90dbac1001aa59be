"""What every benchmark shares: statistics, result rows, tools, and server processes.

A benchmark measures a figure and its baseline in the same process run, round-robin where it
can, so that the host's noise hits both alike, and reports each as a `row`:

    {"bench": "rtt", "figure": "...", "unit": "ms", "value": {"median": .., "p99": ..},
     "baseline": {"name": "...", "median": .., "p99": ..}, "ratio": {"median": .., "p99": ..},
     "target": "...", "met": true | false | None, "note": "..."}

For latencies (unit ms) "p99" is the 99th percentile.  For rates (unit /s, MiB/s) "median" is
the median over measuring windows and "p99" the slow tail: the 1st-percentile window (with
few windows, the slowest).  A ratio is value / baseline for both columns.

`ToolsrvProcess` runs `toolsrv serve` (or the null-runner variant, bench/nullserver.py) as a
separate process on a Unix socket in a private temporary directory, so the benchmark's own
client never shares the server's interpreter.
"""
from __future__ import annotations

import argparse
import atexit
import importlib.util
import json
import os
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterable

REPO = Path(__file__).resolve().parents[1]
PY = sys.executable
HAVE_UVLOOP = importlib.util.find_spec("uvloop") is not None
NO_UVLOOP = "uvloop is not installed (pip install '.[fast]'): no uvloop figures"

# The /bin/sh JSON echo of issue 7: args on stdin, the same JSON on stdout.
ECHO_SH = "#!/bin/sh\nexec cat\n"
ECHO_META = {"description": "echo the JSON args", "args": {"type": "object"}, "readOnly": True}
PY_ECHO = ("#!/usr/bin/env python3\nimport json, sys\n"
           "sys.stdout.write(json.dumps(json.load(sys.stdin)))\n")
PAYLOAD = json.dumps({"path": "/tmp/some/where/file.txt", "pattern": "needle",
                      "limit": 100, "flags": ["i", "n"], "x": "y" * 12}).encode()  # ~100 B


# ------------------------------------------------------------------ statistics

def pctl(sorted_xs: list[float], q: float) -> float:
    """The q-quantile (0..1) of an already sorted list, nearest rank."""
    if not sorted_xs:
        return float("nan")
    return sorted_xs[min(len(sorted_xs) - 1, max(0, int(round(q * (len(sorted_xs) - 1)))))]


def lat(samples_s: Iterable[float]) -> dict[str, float]:
    """Latency samples in seconds -> {"median", "p99"} in ms, plus n."""
    xs = sorted(samples_s)
    return {"median": statistics.median(xs) * 1e3, "p99": pctl(xs, 0.99) * 1e3, "n": len(xs)}


def rate(per_window: Iterable[float]) -> dict[str, float]:
    """Rates of several windows -> {"median", "p99": the 1st-percentile (slow) window}."""
    xs = sorted(per_window)
    return {"median": statistics.median(xs), "p99": pctl(xs, 0.01), "n": len(xs)}


def one(x: float) -> dict[str, float]:
    """A single measurement reported in both columns."""
    return {"median": x, "p99": x, "n": 1}


def row(bench: str, figure: str, unit: str, value: dict | None, baseline_name: str | None = None,
        baseline: dict | None = None, target: str = "", met: bool | None = None,
        note: str = "") -> dict[str, Any]:
    r: dict[str, Any] = {"bench": bench, "figure": figure, "unit": unit, "value": value,
                         "baseline": None, "ratio": None, "target": target, "met": met,
                         "note": note}
    if baseline is not None and value is not None:
        r["baseline"] = {"name": baseline_name, **baseline}
        r["ratio"] = {k: (value[k] / baseline[k] if baseline[k] else float("nan"))
                      for k in ("median", "p99")}
    elif baseline_name:
        r["baseline"] = {"name": baseline_name}
    return r


def fmt_num(x: float | None) -> str:
    if x is None or x != x:
        return "-"
    if abs(x) >= 1000:
        return f"{x:,.0f}"
    if abs(x) >= 100:
        return f"{x:.0f}"
    if abs(x) >= 10:
        return f"{x:.1f}"
    return f"{x:.3f}" if abs(x) < 1 else f"{x:.2f}"


def print_rows(rows: list[dict], out: Any = None) -> None:
    """The one table: figure, value, baseline, ratio (median and p99), target, met."""
    out = out or sys.stdout
    head = ("figure", "unit", "median", "p99", "baseline", "b.median", "b.p99",
            "x med", "x p99", "target", "met")
    lines = [head]
    for r in rows:
        v, b, q = r.get("value") or {}, r.get("baseline") or {}, r.get("ratio") or {}
        met = {True: "yes", False: "NO", None: ""}[r.get("met")]
        lines.append((r["figure"], r["unit"], fmt_num(v.get("median")), fmt_num(v.get("p99")),
                      b.get("name") or "", fmt_num(b.get("median")), fmt_num(b.get("p99")),
                      fmt_num(q.get("median")), fmt_num(q.get("p99")), r.get("target", ""), met))
    widths = [max(len(str(line[i])) for line in lines) for i in range(len(head))]
    right = {2, 3, 5, 6, 7, 8}
    for n, line in enumerate(lines):
        cells = [str(c).rjust(w) if i in right else str(c).ljust(w)
                 for i, (c, w) in enumerate(zip(line, widths))]
        print("  ".join(cells).rstrip(), file=out)
        if n == 0:
            print("  ".join("-" * w for w in widths), file=out)
    for r in rows:
        if r.get("note"):
            print(f"  note [{r['figure']}]: {r['note']}", file=out)


def markdown_rows(rows: list[dict]) -> str:
    """The same table as print_rows, as Markdown (for doc/performance.md)."""
    out = ["| figure | unit | median | p99 | baseline | b. median | b. p99 | × median | × p99 "
           "| target | met |", "|---|---|--:|--:|---|--:|--:|--:|--:|---|---|"]
    for r in rows:
        v, b, q = r.get("value") or {}, r.get("baseline") or {}, r.get("ratio") or {}
        met = {True: "yes", False: "**no**", None: ""}[r.get("met")]
        cells = [r["figure"].strip(), r["unit"], fmt_num(v.get("median")), fmt_num(v.get("p99")),
                 b.get("name") or "", fmt_num(b.get("median")), fmt_num(b.get("p99")),
                 fmt_num(q.get("median")), fmt_num(q.get("p99")), r.get("target", ""), met]
        out.append("| " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(out)


def parser(doc: str) -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=doc.strip().splitlines()[0])
    ap.add_argument("--json", metavar="FILE", help="also write the rows as JSON")
    ap.add_argument("--quick", action="store_true", help="fewer samples (a smoke run)")
    ap.add_argument("--uvloop", action="store_true",
                    help="run the toolsrv server with uvloop (TOOLSRV_UVLOOP=1)")
    return ap


def finish(rows: list[dict], opts: argparse.Namespace, extra: dict | None = None) -> None:
    print_rows(rows)
    if opts.json:
        Path(opts.json).write_text(json.dumps({"rows": rows, **(extra or {})}, indent=1) + "\n")


# ------------------------------------------------------------------ tools and processes

class FakeTransport:
    """An asyncio transport that keeps what is written to it, for feeding a server's
    protocol in this process (bench_core; the tests' transcripts use it too)."""

    def __init__(self) -> None:
        self.writes: list[bytes] = []

    def write(self, data: bytes) -> None:
        self.writes.append(bytes(data))

    def is_closing(self) -> bool:
        return False

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return default

    def pause_reading(self) -> None:
        pass

    def resume_reading(self) -> None:
        pass

    def close(self) -> None:
        pass

    def replies(self) -> list[Any]:
        """Everything written, decoded."""
        from toolsrv.proto.framing import Framer
        return Framer(1 << 20).feed(b"".join(self.writes))


def make_tools_dir(extra: dict[str, tuple[str | None, dict]] | None = None) -> str:
    """A tools directory with the sh `echo` tool (readable by the sandbox's uid)."""
    d = tempfile.mkdtemp(prefix="bench-tools.", dir="/tmp")
    os.chmod(d, 0o755)
    atexit.register(shutil.rmtree, d, True)
    tools = {"echo": (ECHO_SH, ECHO_META), **(extra or {})}
    for name, (script, meta) in tools.items():
        Path(d, name + ".meta").write_text(json.dumps(meta))
        if script is not None:
            p = Path(d, name)
            p.write_text(script)
            p.chmod(0o755)
    return d


def rss_kib(pid: int) -> int:
    """Resident set size of one process, KiB."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


def cpu_s(pid: int) -> float:
    """User + system CPU seconds a process has used so far."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def descendants_cpu_s(pid: int) -> float:
    """CPU seconds of every live descendant of pid, each with its reaped children's."""
    total = 0.0
    for child in children(pid):
        try:
            with open(f"/proc/{child}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
        total += descendants_cpu_s(child)
    return total


def find_child(word: str) -> int | None:
    """A child process of ours whose command line contains `word`."""
    for pid in children(os.getpid()):
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                if word.encode() in f.read():
                    return pid
        except OSError:
            pass
    return None


def children(pid: int) -> list[int]:
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


class ToolsrvProcess:
    """`toolsrv serve` in its own process, on a Unix socket (and TCP when asked)."""

    def __init__(self, tools: str, *, null_runner: bool = False, uvloop: bool = False,
                 tcp_port: int | None = None, extra: list[str] | None = None) -> None:
        self.tmp = tempfile.mkdtemp(prefix="bench-srv.", dir="/tmp")
        self.path = f"{self.tmp}/ns/toolsrv"
        self.addr = f"unix!{self.path}"
        mod = ["-m", "bench.nullserver"] if null_runner else ["-m", "toolsrv"]
        self.argv = [PY, *mod, "serve", "-a", self.addr, "--tools", tools,
                     "--state", f"{self.tmp}/state", "--max-runs", "64", *(extra or [])]
        if tcp_port:
            self.argv += ["-a", f"tcp!127.0.0.1!{tcp_port}"]
        self.env = {**os.environ, "PYTHONPATH": str(REPO)}
        if uvloop:
            self.env["TOOLSRV_UVLOOP"] = "1"
        self.proc: subprocess.Popen | None = None
        self.launch_s = 0.0

    def start(self, timeout: float = 30.0) -> "ToolsrvProcess":
        """Launch and wait until the socket answers; launch_s is the time that took."""
        self.log = open(f"{self.tmp}/server.log", "wb")
        t0 = time.perf_counter()
        self.proc = subprocess.Popen(self.argv, stdin=subprocess.DEVNULL,
                                     stdout=self.log, stderr=self.log, env=self.env,
                                     cwd=str(REPO))
        deadline = t0 + timeout
        while time.perf_counter() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"toolsrv exited: {self.read_log()[-2000:]}")
            if os.path.exists(self.path):
                s = socket.socket(socket.AF_UNIX)
                try:
                    s.connect(self.path)
                    self.launch_s = time.perf_counter() - t0
                    return self
                except OSError:
                    pass
                finally:
                    s.close()
            time.sleep(0.002)
        raise RuntimeError("toolsrv did not start in time")

    def read_log(self) -> str:
        return Path(f"{self.tmp}/server.log").read_text(errors="replace")

    @property
    def pid(self) -> int:
        assert self.proc is not None
        return self.proc.pid

    def rss_kib(self) -> int:
        return rss_kib(self.pid)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)

    def __enter__(self) -> "ToolsrvProcess":
        return self.start()

    def __exit__(self, *exc: Any) -> None:
        self.stop()
