"""`python -m bench` (or `make bench`): run every benchmark, print one table, write JSON.

Each benchmark is a plain script (bench/bench_*.py) that measures its figures and their
baselines in the same run and can be run alone; this runner starts each one as its own
process (so no benchmark inherits another's memory or threads), collects its rows through
`--json`, and prints them as one table: figure, median and p99, baseline, ratios, target, met.
bench_launch.py and bench_registry.py (the runner's and the registry's own benchmarks) are
run when present and their figures join the table.

    python -m bench [--quick] [--only NAME,...] [--skip NAME,...] [--json FILE]
    python -m bench --markdown bench/results.json      (an earlier run's table, as Markdown)

The JSON (default bench/results.json) holds the rows, the host and the versions measured.
"""
from __future__ import annotations

import argparse
import compileall
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from .common import PY, REPO, markdown_rows, print_rows, row

HERE = Path(__file__).resolve().parent
# Ours first (cheap and noise-sensitive ones early), then the other issues' benchmarks.
OURS = ["core", "codec", "rtt", "call", "bulk", "startup", "memory", "resident", "mcp", "search",
        "lsp", "hosts", "nested", "codemode"]
THEIRS = ["launch", "registry"]


def _versions() -> dict[str, str]:
    out = {"python": sys.version.split()[0], "kernel": platform.release(),
           "cpus": str(os.cpu_count())}
    for mod in ("mcp", "uvloop"):
        try:
            from importlib.metadata import version
            out[mod] = version(mod)
        except Exception:
            out[mod] = "not installed"
    out["diod"] = "installed" if any(os.path.exists(p) for p in ("/usr/sbin/diod",
                                                                 "/usr/bin/diod")) else "absent"
    return out


def _run(name: str, quick: bool) -> tuple[list[dict], str | None]:
    """Run bench/bench_<name>.py; (rows, error)."""
    script = HERE / f"bench_{name}.py"
    with tempfile.NamedTemporaryFile(suffix=".json", delete=False) as f:
        out = f.name
    argv = [PY, str(script), "--json", out] + _extra_args(name, script, quick)
    print(f"\n=== bench_{name}: {' '.join(argv[1:])}", flush=True)
    t = time.perf_counter()
    p = subprocess.run(argv, cwd=str(REPO), env={**os.environ, "PYTHONPATH": str(REPO)})
    took = time.perf_counter() - t
    try:
        data = json.loads(Path(out).read_text() or "{}")
    except (OSError, ValueError):
        data = {}
    finally:
        try:
            os.unlink(out)
        except OSError:
            pass
    rows = adapt(name, data)
    if p.returncode != 0 or not rows:
        return rows, f"bench_{name} exited {p.returncode} after {took:.0f} s with {len(rows)} rows"
    print(f"=== bench_{name}: {took:.0f} s", flush=True)
    return rows, None


def _extra_args(name: str, script: Path, quick: bool) -> list[str]:
    if name in OURS:
        return ["--quick"] if quick else []
    helptext = subprocess.run([PY, str(script), "--help"], cwd=str(REPO), capture_output=True,
                              text=True, env={**os.environ, "PYTHONPATH": str(REPO)}).stdout
    args = []
    if quick and "--quick" in helptext:
        args.append("--quick")
    if name == "launch":
        args += ["-n", "60", "--no-big"] if quick else ["-n", "200"]
    return args


def adapt(name: str, data: dict) -> list[dict]:
    """Rows from a benchmark's JSON: ours carry "rows"; others are translated."""
    if isinstance(data.get("rows"), list):
        return data["rows"]
    if name == "launch" and "small" in data:
        return _launch_rows(data)
    return _generic_rows(name, data)


def _launch_rows(d: dict) -> list[dict]:
    def lat(s: dict) -> dict:
        return {"median": s["median_ms"], "p99": s["p99_ms"], "n": s.get("n")}
    out = []
    for phase, label in (("small", ""), ("big", ", server holding 1 GiB")):
        if phase not in d:
            continue
        v = d[phase]
        out.append(row("launch", f"sandboxed launch /bin/true{label}", "ms", lat(v["sandboxed"]),
                       "plain asyncio spawn", lat(v["plain"]), "informative", None,
                       f"+{v['sandboxed']['median_ms'] - v['plain']['median_ms']:.2f} ms "
                       "for Landlock, PID namespace, uid, rlimits, tmp dir"))
    c = d.get("concurrent")
    if c:
        per = c["per_run_ms"]
        out.append(row("launch", f"sandboxed launches, {c['batch']} at once, per run", "ms",
                       {"median": per, "p99": per, "n": 1}, None, None, "informative"))
    return out


def _generic_rows(name: str, data: Any, path: str = "") -> list[dict]:
    """Any dict holding median_ms (and p99_ms) becomes an informative row."""
    out: list[dict] = []
    if isinstance(data, dict):
        if "median_ms" in data:
            v = {"median": data["median_ms"], "p99": data.get("p99_ms", data["median_ms"]),
                 "n": data.get("n")}
            return [row(name, path.strip(".") or name, "ms", v, None, None, "informative")]
        for k, v in data.items():
            out += _generic_rows(name, v, f"{path}.{k}")
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench", description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="fewer samples: a smoke run")
    ap.add_argument("--only", help="comma-separated benchmarks (" + ",".join(OURS + THEIRS) + ")")
    ap.add_argument("--skip", default="", help="comma-separated benchmarks to leave out")
    ap.add_argument("--json", default=str(HERE / "results.json"), help="where to write JSON")
    ap.add_argument("--markdown", metavar="JSON",
                    help="run nothing: print the table of an earlier run's JSON as Markdown")
    opts = ap.parse_args(argv)
    if opts.markdown:
        data = json.loads(Path(opts.markdown).read_text())
        print(markdown_rows(data["rows"]))
        for r in data["rows"]:
            if r.get("note"):
                print(f"\n- {r['figure'].strip()}: {r['note']}", end="")
        print()
        return 0
    names = opts.only.split(",") if opts.only else OURS + THEIRS
    names = [n for n in names if n not in opts.skip.split(",")]
    for d in ("toolsrv", "bench"):     # as installed: no launch compiles its source
        compileall.compile_dir(str(REPO / d), quiet=1)
    started = time.strftime("%Y-%m-%d %H:%M:%S")
    load0 = os.getloadavg()
    rows: list[dict] = []
    problems: list[str] = []
    for name in names:
        if not (HERE / f"bench_{name}.py").exists():
            problems.append(f"bench_{name}.py is not there (yet): skipped")
            continue
        got, err = _run(name, opts.quick)
        rows += got
        if err:
            problems.append(err)
    print("\n=== toolsrv benchmarks, one run:", started, "| load average before/after:",
          " ".join(f"{x:.2f}" for x in load0), "/", " ".join(f"{x:.2f}" for x in os.getloadavg()))
    print_rows(rows)
    met = [r for r in rows if r.get("met") is True]
    missed = [r for r in rows if r.get("met") is False]
    print(f"\ntargets met: {len(met)}, missed: {len(missed)}"
          + "".join(f"\n  missed: {r['figure']} ({r['target']})" for r in missed))
    for p in problems:
        print(f"problem: {p}")
    result = {"started": started, "quick": opts.quick, "host": _versions(),
              "loadavg_before": load0, "loadavg_after": os.getloadavg(), "rows": rows,
              "problems": problems}
    Path(opts.json).write_text(json.dumps(result, indent=1) + "\n")
    print(f"JSON: {opts.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
