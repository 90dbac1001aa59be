"""Containment with real processes: timeouts, whole-tree kills, output caps, rlimits,
cancellation, shutdown, and tools dying with the server.  Outcomes only, never durations."""
from __future__ import annotations

import asyncio
import resource
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from sandbox_support import LANDLOCK, NO_LANDLOCK, ROOT, Harness, marker, sleepers  # noqa: E402

from toolsrv.run.runner import RunnerConfig  # noqa: E402

pytestmark = pytest.mark.skipif(LANDLOCK.abi < 1, reason=NO_LANDLOCK)
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module", params=["cold", "warm"])
def h(request: pytest.FixtureRequest) -> Iterator[Harness]:
    harness = Harness(warm=request.param == "warm")  # a warm start is confined the same
    yield harness
    harness.close()


def wait_until(predicate, limit: float = 10.0) -> bool:  # type: ignore[no-untyped-def]
    """Poll for an outcome (a generous bound, not a timing assertion)."""
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(0.02)
    return predicate()


def test_timeout_kills_the_whole_tree_setsid_included(h: Harness) -> None:
    m = marker()
    res = h.sh(f"sleep {m} & setsid sleep {m} & (sleep {m} &); sh -c 'sleep {m}' & sleep {m}",
               timeout=0.5)
    assert res.timed_out and res.signal == signal.SIGKILL and res.exit_code is None
    assert res.error is None
    assert sleepers(m) == []


def test_background_processes_end_with_the_tool(h: Harness) -> None:
    m = marker()
    res = h.sh(f"setsid sleep {m} & sleep {m} & echo started")
    assert res.exit_code == 0 and res.stdout == b"started\n" and not res.timed_out
    assert sleepers(m) == []


def test_output_cap_kills_and_keeps_server_memory_flat(h: Harness) -> None:
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    res = h.sh("head -c 1073741824 /dev/zero")
    grown_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before) / 1024
    assert res.truncated == "stdout" and len(res.stdout) == 10 * 2**20
    assert res.signal == signal.SIGKILL and not res.timed_out and not res.cancelled
    assert grown_mib < 64, f"server grew {grown_mib:.0f} MiB"


def test_stderr_cap() -> None:
    small = Harness(RunnerConfig(stderr_cap=1000))
    try:
        res = small.sh("echo fine; yes error >&2")
        assert res.truncated == "stderr" and len(res.stderr) == 1000 and res.stdout == b"fine\n"
    finally:
        small.close()


def test_rlimits_hold() -> None:
    cfg = RunnerConfig(rlimits={"as": 512 << 20, "fsize": 1 << 20, "nofile": 64, "core": 0,
                                "nproc": 64, "cpu": 1})
    lim = Harness(cfg)
    try:
        # inherited at spawn: in force from the tool's first instruction
        res = lim.sh("ulimit -v; ulimit -f; ulimit -n; ulimit -c; ulimit -p 2>/dev/null;"
                     "cat /proc/self/limits 2>/dev/null | grep -i processes || true")
        assert res.stdout.decode().split()[:4] == ["524288", "2048", "64", "0"]
        res = lim.sh("head -c 3000000 /dev/zero > big; stat -c %s big")
        assert res.stdout.strip() == b"1048576"
        [big] = lim.probe({"op": "alloc", "bytes": 1 << 30})
        assert big == {"ok": False, "errno": "ENOMEM"}
        # cpu is set on the tool right after it starts (see doc/sandbox.md): it holds
        spin = lim.run(["/usr/bin/python3", "-c", "while True: pass"], timeout=20)
        assert spin.signal in (signal.SIGKILL, signal.SIGXCPU) and not spin.timed_out
        files = lim.run(["/usr/bin/python3", "-c", textwrap.dedent("""
            import os
            fds = []
            try:
                while True:
                    fds.append(os.open("/dev/null", os.O_RDONLY))
            except OSError as e:
                print(len(fds) + 3, e.strerror)""")])
        assert files.stdout.decode().split()[0] == "64"
    finally:
        lim.close()


@pytest.mark.skipif(not ROOT, reason="RLIMIT_NPROC is counted per uid: needs the nobody switch")
def test_fork_bomb_is_bounded() -> None:
    """Bounded by the run's cgroup (pids.max) where there is one, else by RLIMIT_NPROC."""
    lim = Harness(RunnerConfig(rlimits={"nproc": 64}, run_limits={"pids": 64}))
    try:
        m = marker()
        res = lim.run(["/usr/bin/python3", "-c", textwrap.dedent(f"""
            import os
            n = 0
            try:
                while n < 500:
                    if os.fork() == 0:
                        os.execv("/bin/sleep", ["sleep", "{m}"])
                    n += 1
            except OSError as e:
                print(n, e.strerror)""")], timeout=20)
        forked, reason = res.stdout.decode().split(" ", 1)
        assert int(forked) < 64 and "Resource temporarily unavailable" in reason
        assert sleepers(m) == []
    finally:
        lim.close()


def test_cancelling_the_caller_kills_the_tree_at_once(h: Harness) -> None:
    m = marker()
    flag = h.cwd / f"ready-{m}"

    async def scenario() -> bool:
        task = asyncio.ensure_future(h.runner.run(h.request(
            ["/bin/sh", "-c", f"setsid sleep {m} & touch {flag}; sleep {m}"])))
        for _ in range(1000):
            if flag.exists():
                break
            await asyncio.sleep(0.01)
        task.cancel()
        try:
            await task
        except asyncio.CancelledError:
            return True
        return False

    assert h.run_async(scenario())
    assert wait_until(lambda: sleepers(m) == [])
    h.settle()


def test_close_kills_running_runs() -> None:
    own = Harness()
    m = marker()

    async def scenario() -> object:
        task = asyncio.ensure_future(own.runner.run(own.request(["/bin/sleep", m])))
        while not sleepers(m):
            await asyncio.sleep(0.01)
        await own.runner.close()
        return await task

    try:
        res = own.run_async(scenario())
        assert res.cancelled and res.signal == signal.SIGKILL  # type: ignore[attr-defined]
        assert sleepers(m) == []
    finally:
        own.close()


def test_tools_die_with_the_server(h: Harness) -> None:
    m = marker()
    server = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import asyncio, sys
        sys.path.insert(0, {str(REPO)!r})
        from toolsrv.run.runner import Runner, RunRequest
        from toolsrv.run.sandbox import load_profile
        async def main():
            r = Runner()
            await r.start()
            await r.run(RunRequest(["/bin/sh", "-c", "setsid sleep {m} & sleep {m}"], b"",
                                   {str(h.cwd)!r}, {{}}, load_profile("default")))
        asyncio.run(main())""")])
    try:
        assert wait_until(lambda: len(sleepers(m)) >= 2), "the tools never started"
        server.kill()
        server.wait()
        assert wait_until(lambda: sleepers(m) == []), sleepers(m)
    finally:
        server.kill()


def test_without_namespaces_groups_and_adopted_orphans_are_killed() -> None:
    """The fallback where no PID namespace can be made: the zygote is a subreaper."""
    flat = Harness(RunnerConfig(namespaces=False))
    try:
        assert "pid namespace per run: no" in flat.runner.summary()
        m = marker()
        res = flat.sh(f"sleep {m} & setsid sleep {m} & (sleep {m} &); sleep {m}", timeout=0.5)
        assert res.timed_out and res.signal == signal.SIGKILL
        assert wait_until(lambda: sleepers(m) == [])
        m = marker()
        res = flat.sh(f"setsid sleep {m} & echo started")
        assert res.exit_code == 0 and res.stdout == b"started\n"
        assert wait_until(lambda: sleepers(m) == [])
        [tcp] = flat.probe({"op": "bind_tcp", "port": 0})
        assert tcp == {"ok": False, "errno": "EACCES"}  # Landlock still says no network
    finally:
        flat.close()
