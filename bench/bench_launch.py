"""Launch cost of a tool run: plain spawn vs the sandboxed runner, small and at 1 GiB.

Measured in one process, round-robin (plain/sandboxed, then plain/preexec), so the host's
noise hits the variants compared alike:
  plain      asyncio.create_subprocess_exec(/bin/true) with stdin/stdout/stderr pipes and
             communicate(): what an unsandboxed server would do
  preexec    the same with a no-op preexec_fn (forces a real fork() of the server): reference
  sandboxed  Runner.run() of /bin/true under the shipped default profile: Landlock, uid
             switch (as root), PID namespace, empty network namespace, rlimits, private
             per-call temporary directory
Then this process allocates and touches 1 GiB and measures all three again.  Targets (issue
4 §3): sandboxed <= plain + 1.5 ms, and no growth at 1 GiB.

Throughput (issue 7): the /bin/sh JSON echo (`exec cat`) through Runner.run(), 32 at once,
against 32 bare create_subprocess_exec of the same tool (the spawn floor), windows
alternating; with the CPU per call of this process (the server's side) and of the launcher
and tool processes (read from /proc: the zygote's own time and its reaped children's), and
the floor's.  The machine is CPU-bound there, so CPU per call is what decides calls/s.

    python -m bench.bench_launch [-n 300] [--quick] [--no-big] [--no-rate] [--json FILE]
"""
from __future__ import annotations

import asyncio
import os
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.baselines import spawn_echo  # noqa: E402
from bench.bench_call import window  # noqa: E402
from bench.common import (PAYLOAD, children, finish, lat, make_tools_dir, one,  # noqa: E402
                          parser, rate, row)
from toolsrv.run.runner import Runner, RunRequest  # noqa: E402
from toolsrv.run.sandbox import load_profile  # noqa: E402

B = "launch"
PIPE = asyncio.subprocess.PIPE
BUDGET_MS = 1.5


async def plain(preexec: bool = False) -> None:
    kw: dict[str, Any] = {"preexec_fn": (lambda: None)} if preexec else {}
    proc = await asyncio.create_subprocess_exec("/bin/true", stdin=PIPE, stdout=PIPE,
                                                stderr=PIPE, **kw)
    await proc.communicate(b"{}")


async def measure(variants: dict[str, Callable[[], Awaitable[Any]]], n: int
                  ) -> dict[str, dict[str, float]]:
    """n rounds; each round runs every variant once, in turn."""
    for fn in variants.values():
        for _ in range(10):
            await fn()
    samples: dict[str, list[float]] = {k: [] for k in variants}
    for _ in range(n):
        for name, fn in variants.items():
            t = time.perf_counter()
            await fn()
            samples[name].append(time.perf_counter() - t)
    return {k: lat(v) for k, v in samples.items()}


async def concurrent(runner: Runner, req: RunRequest, k: int, rounds: int) -> dict[str, float]:
    """k runs at once, `rounds` times: milliseconds per run within a batch."""
    per_run = []
    for _ in range(rounds):
        t = time.perf_counter()
        results = await asyncio.gather(*(runner.run(req) for _ in range(k)))
        per_run.append((time.perf_counter() - t) / k)
        assert all(r.exit_code == 0 for r in results), results[0]
    return lat(per_run)


def _stat_s(pid: int) -> tuple[float, float]:
    """(own user+system, reaped children's user+system) CPU seconds of a process."""
    with open(f"/proc/{pid}/stat") as f:
        fields = [int(x) for x in f.read().rsplit(")", 1)[1].split()[11:15]]
    tck = os.sysconf("SC_CLK_TCK")
    return (fields[0] + fields[1]) / tck, (fields[2] + fields[3]) / tck


def _launcher_cpu(zygote: int) -> tuple[float, float]:
    """(the zygote's own CPU, its inits' and their tools' CPU) in seconds: inits live on
    between runs, so their own time and their reaped children's are read from each."""
    own, reaped = _stat_s(zygote)
    inits = reaped
    for pid in children(zygote):
        try:
            a, b = _stat_s(pid)
        except OSError:
            continue
        inits += a + b
    return own, inits


async def throughput(runner: Runner, cwd: str, k: int, windows: int, seconds: float
                     ) -> list[dict]:
    """k sandboxed sh echo runs at once vs k bare spawns, windows alternating."""
    tools = make_tools_dir()
    tool = f"{tools}/echo"
    req = RunRequest(argv=[tool], stdin=PAYLOAD, cwd=cwd, env={},
                     profile=load_profile("default"), tool_dir=tools)

    async def sandboxed() -> None:
        res = await runner.run(req)
        assert res.exit_code == 0 and res.stdout == PAYLOAD, res

    zygote = children(runner.launcher.zygote_pid or 0)[0]
    variants = {"sandboxed": [sandboxed] * k, "floor": [lambda: spawn_echo(tool, PAYLOAD)] * k}
    for ws in variants.values():
        await window(ws, 0.5)
    rates: dict[str, list[float]] = {v: [] for v in variants}
    cpu = {v: [0.0, 0.0, 0.0] for v in variants}  # this process, launcher, tools
    calls = {v: 0 for v in variants}
    for _ in range(windows):
        for name, ws in variants.items():
            t0, z0 = os.times(), _launcher_cpu(zygote)
            r, lats = await window(ws, seconds)
            t1, z1 = os.times(), _launcher_cpu(zygote)
            rates[name].append(r)
            calls[name] += len(lats)
            cpu[name][0] += t1.user + t1.system - t0.user - t0.system
            if name == "sandboxed":
                cpu[name][1] += z1[0] - z0[0]
                cpu[name][2] += z1[1] - z0[1]
            else:
                cpu[name][2] += (t1.children_user + t1.children_system
                                 - t0.children_user - t0.children_system)
    per = {v: [x / max(1, calls[v]) * 1e3 for x in cpu[v]] for v in variants}
    sand, floor = per["sandboxed"], per["floor"]
    return [
        row(B, f"sh echo calls/s, {k} at once", "/s", rate(rates["sandboxed"]),
            f"bare spawn x{k} (floor)", rate(rates["floor"]), "informative", None,
            "Runner.run in this process, no 9P; the whole server's target (>= 0.85x) is "
            "bench_call's"),
        row(B, f"launcher CPU per call, {k} at once", "ms", one(sand[1]), None, None,
            "informative", None, "the zygote process itself (user+system); the inits are "
            "counted with the tools (an init that ends between the reads is not)"),
        row(B, f"launcher + tool CPU per call, {k} at once", "ms", one(sand[1] + sand[2]),
            "tool processes of the bare spawn", one(floor[2]), "informative"),
        row(B, f"server-side CPU per call, {k} at once", "ms", one(sand[0]),
            "bare spawn's parent", one(floor[0]), "informative", None,
            "this process: Runner.run, the launcher client, pumping the pipes"),
    ]


def phase_rows(label: str, m: dict[str, dict[str, float]], r: dict[str, dict[str, float]]
               ) -> list[dict]:
    plain_, sand = m["plain"], m["sandboxed"]
    over = sand["median"] - plain_["median"]
    return [
        row(B, f"sandboxed /bin/true{label}", "ms", sand, "plain create_subprocess_exec",
            plain_, f"<= plain + {BUDGET_MS} ms", over <= BUDGET_MS,
            f"+{over:.2f} ms over plain"),
        row(B, f"preexec_fn /bin/true{label}", "ms", r["preexec"],
            "plain create_subprocess_exec", r["plain"], "informative"),
    ]


async def run(opts: Any) -> tuple[list[dict], dict]:
    n = opts.n or (60 if opts.quick else 300)
    base = Path(tempfile.mkdtemp(prefix="bench-launch-"))
    os.chmod(base, 0o755)
    cwd = base / "cwd"
    cwd.mkdir()
    runner = Runner()
    await runner.start()
    if runner.tool_uid():
        os.chown(cwd, *runner.tool_uid())  # type: ignore[misc]
    req = RunRequest(argv=["/bin/true"], stdin=b"{}", cwd=str(cwd), env={},
                     profile=load_profile("default"))
    # Two interleavings: a preexec_fn fork leaves the server's pages copy-on-write, which
    # costs whatever runs next, so preexec is kept out of the headline pair.
    pair: dict[str, Callable[[], Awaitable[Any]]] = {
        "plain": plain, "sandboxed": lambda: runner.run(req)}
    private = base / "private"  # a root server's 0700 project: its run idmaps the cwd
    if runner.tool_uid():
        private.mkdir(mode=0o700)
        mapped = RunRequest(argv=["/bin/true"], stdin=b"{}", cwd=str(private), env={},
                            profile=load_profile("default"))
        pair["mapped"] = lambda: runner.run(mapped)
    ref: dict[str, Callable[[], Awaitable[Any]]] = {
        "plain": plain, "preexec": lambda: plain(preexec=True)}
    extra: dict[str, Any] = {"summary": runner.summary(), "python": sys.version.split()[0],
                             "loadavg": os.getloadavg()}
    try:
        small = await measure(pair, n)
        rows = phase_rows("", small, await measure(ref, n // 3))
        if "mapped" in small:
            over = small["mapped"]["median"] - small["plain"]["median"]
            rows.append(row(B, "sandboxed /bin/true, 0700 root cwd (idmapped)", "ms",
                            small["mapped"], "plain create_subprocess_exec", small["plain"],
                            "informative", None, f"+{over:.2f} ms over plain: a mount "
                            "namespace, the cwd idmapped, its 0700 parent covered"))
        conc = await concurrent(runner, req, opts.concurrency, 5 if opts.quick else 20)
        rows.append(row(B, f"sandboxed, {opts.concurrency} at once, per run", "ms", conc,
                        "plain create_subprocess_exec, sequential", small["plain"],
                        "informative"))
        if not opts.no_rate:
            rows += await throughput(runner, str(cwd), opts.concurrency,
                                     2 if opts.quick else 5, 1.0 if opts.quick else 2.5)
        pair.pop("mapped", None)
        if not opts.no_big:
            ballast = bytearray(1 << 30)
            for i in range(0, len(ballast), 4096):
                ballast[i] = 1
            big = await measure(pair, max(50, n * 2 // 3))
            rows += phase_rows(", server at 1 GiB", big, await measure(ref, max(20, n // 6)))
            del ballast
            grow = big["sandboxed"]["median"] - small["sandboxed"]["median"]
            rows.append(row(B, "sandboxed /bin/true, server at 1 GiB", "ms", big["sandboxed"],
                            "sandboxed, small server", small["sandboxed"], "flat (<= +0.5 ms)",
                            grow <= 0.5, f"{grow:+.2f} ms"))
    finally:
        await runner.close()
        cwd.rmdir()
        if private.exists():
            private.rmdir()
        base.rmdir()
    return rows, extra


def main(argv: list[str] | None = None) -> list[dict]:
    ap = parser(__doc__)
    ap.add_argument("-n", type=int, default=0, help="rounds (default 300, --quick 60)")
    ap.add_argument("--no-big", action="store_true", help="skip the 1 GiB phase")
    ap.add_argument("--no-rate", action="store_true", help="skip the throughput phase")
    ap.add_argument("--concurrency", type=int, default=32)
    opts = ap.parse_args(argv)
    rows, extra = asyncio.run(run(opts))
    print(extra["summary"])
    print(f"load average {extra['loadavg'][0]:.2f} on {os.cpu_count()} cpus, "
          f"python {extra['python']}")
    finish(rows, opts, extra)
    return rows


if __name__ == "__main__":
    main()
