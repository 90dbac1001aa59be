"""A hostile run cannot outlive its end or stop the launcher (issue 20, item 1), with real
processes: a clone(CLONE_PARENT) sibling, setsid and double-fork escapees end with the run;
no process of a run can ptrace another; the launcher keeps answering after all of that; a
wedged launcher is detected, killed and replaced; and per-run limits (a cgroup per run) do
not spill from one run into another."""
from __future__ import annotations

import asyncio
import os
import signal
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from sandbox_support import (LANDLOCK, NO_LANDLOCK, ROOT, Harness, marker,  # noqa: E402
                             sleepers)

from toolsrv.run import launcher  # noqa: E402
from toolsrv.run.runner import RunnerConfig  # noqa: E402

pytestmark = pytest.mark.skipif(LANDLOCK.abi < 1, reason=NO_LANDLOCK)
X86 = os.uname().machine == "x86_64"

# The reproducer's escape (shared/repro/runs-escape): clone(CLONE_PARENT) makes a sibling of
# the tool, which goes on writing in the cwd and sleeping under a findable name.
CLONE_PARENT_ESCAPE = """
import ctypes, os, sys, time
pid = ctypes.CDLL(None).syscall(56, 0x8000 | 17, 0, 0, 0, 0)   # clone(CLONE_PARENT|SIGCHLD)
if pid == 0:
    fd = os.open("/dev/null", os.O_RDWR)
    for i in (0, 1, 2):
        os.dup2(fd, i)
    if os.fork() == 0:
        os.execv("/bin/sleep", ["sleep", "{m}"])
    for i in range(100):
        with open("alive-{m}", "a") as f:
            f.write("%d\\n" % i)
        time.sleep(0.05)
    os._exit(0)
print("sibling", pid)
"""

# setsid and a double fork: the classic ways out of a process group.
SETSID_ESCAPE = "setsid sleep {m} & (sleep {m} &) ; sleep 0.1; echo out"

# A child of the tool tries to reach into its parent: ptrace, process_vm_readv, pidfd_getfd.
PTRACE_ATTEMPTS = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.ptrace.restype = ctypes.c_long
libc.ptrace.argtypes = [ctypes.c_long, ctypes.c_long, ctypes.c_void_p, ctypes.c_void_p]
parent = os.getpid()
r, w = os.pipe()
if os.fork() == 0:
    out = {}
    rc = libc.ptrace(16, parent, None, None)                  # PTRACE_ATTACH
    out["ptrace"] = os.strerror(ctypes.get_errno()) if rc < 0 else "attached"
    if rc == 0:
        libc.ptrace(17, parent, None, None)                   # PTRACE_DETACH
    buf = ctypes.create_string_buffer(8)
    class IOV(ctypes.Structure):
        _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]
    local, remote = IOV(ctypes.addressof(buf), 8), IOV(id(out), 8)
    n = libc.process_vm_readv(parent, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
    out["process_vm_readv"] = os.strerror(ctypes.get_errno()) if n < 0 else "read"
    os.write(w, json.dumps(out).encode())
    os._exit(0)
os.close(w)
data = os.read(r, 4096)
os.wait()
print(data.decode())
"""


@pytest.fixture(scope="module", params=["cold", "warm"])
def h(request: pytest.FixtureRequest) -> Iterator[Harness]:
    harness = Harness(warm=request.param == "warm")  # a warm start is confined the same
    yield harness
    harness.close()


def py(h: Harness, code: str, **kw: object):  # type: ignore[no-untyped-def]
    """Run `code` as a Python tool (a script: warm in the warm harness)."""
    script = h.tools / f"py-{marker()}.py"
    script.write_text("#!/usr/bin/python3\n" + textwrap.dedent(code))
    script.chmod(0o755)
    res = h.run([str(script)], **kw)
    assert res.warm == h.warm or res.error, res
    return res


def growth(path: Path, seconds: float) -> tuple[int, int]:
    before = path.stat().st_size if path.exists() else 0
    time.sleep(seconds)
    return before, path.stat().st_size if path.exists() else 0


@pytest.mark.skipif(not X86, reason="the raw clone(2) call of the reproducer is x86_64's")
def test_a_clone_parent_sibling_ends_with_the_run(h: Harness) -> None:
    m = marker()
    res = py(h, CLONE_PARENT_ESCAPE.format(m=m))
    assert res.exit_code == 0 and res.stdout.startswith(b"sibling "), res
    before, after = growth(h.cwd / f"alive-{m}", 0.5)
    assert before == after, "the sibling went on writing after the run had ended"
    assert sleepers(m) == []


@pytest.mark.skipif(not X86, reason="the raw clone(2) call of the reproducer is x86_64's")
def test_the_launcher_answers_every_session_after_an_escape(h: Harness) -> None:
    """The old launcher blocked for good about a second after such an escape (the spare
    trim's waitpid on a stub waiting for the escaped zombie): every later call failed."""
    py(h, CLONE_PARENT_ESCAPE.format(m=marker()))
    time.sleep(1.5)  # past the old launcher's idle trim

    async def three() -> list:
        return await asyncio.wait_for(asyncio.gather(*(
            h.runner.run(h.request(["/bin/echo", "hi"])) for _ in range(3))), 15)

    for res in h.run_async(three()):
        assert res.exit_code == 0 and res.stdout == b"hi\n", res


def test_setsid_and_double_fork_escapees_end_with_the_run(h: Harness) -> None:
    m = marker()
    res = h.sh(SETSID_ESCAPE.format(m=m))
    assert res.exit_code == 0 and res.stdout == b"out\n", res
    assert sleepers(m) == []


def test_no_process_of_a_run_can_trace_another(h: Harness) -> None:
    import json
    res = py(h, PTRACE_ATTEMPTS)
    assert res.exit_code == 0, res
    out = json.loads(res.stdout)
    assert out == {"ptrace": "Operation not permitted",
                   "process_vm_readv": "Operation not permitted"}, out


def test_the_tool_is_the_inits_child_not_the_launchers(h: Harness) -> None:
    if not h.runner.launcher.pidns:
        pytest.skip("no PID namespaces here")
    res = h.sh("echo $PPID")
    assert res.stdout == b"1\n", res


def zygote_pid(h: Harness) -> int:
    boot = h.runner.launcher.zygote_pid
    with open(f"/proc/{boot}/task/{boot}/children") as f:
        [zy] = [int(p) for p in f.read().split()]
    return zy


def test_a_wedged_launcher_is_killed_and_replaced(monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs given to spare inits do not need the launcher; a run that waits on it (no spare
    left) fails with a clear reason when it stops answering, and the next call gets a new
    launcher."""
    from toolsrv.run.init import zygote
    monkeypatch.setattr(launcher, "PING_EVERY", 0.1)
    monkeypatch.setattr(launcher, "WEDGED_AFTER", 0.5)
    w = Harness()
    try:
        end = time.monotonic() + 10
        while len(w.runner.launcher._spares) < zygote.SPARE_INITS and time.monotonic() < end:
            w.run_async(asyncio.sleep(0.02))
        first = w.runner.launcher.zygote_pid
        os.kill(zygote_pid(w), signal.SIGSTOP)   # wedged: alive, answering nothing

        async def more_than_the_spares() -> list:
            return await asyncio.wait_for(asyncio.gather(*(
                w.runner.run(w.request(["/bin/echo", "hi"]))
                for _ in range(zygote.SPARE_INITS + 1))), 20)

        results = w.run_async(more_than_the_spares())
        assert [r.stdout for r in results[:-1]] == [b"hi\n"] * zygote.SPARE_INITS, results
        assert results[-1].error and "launcher stopped answering" in results[-1].error, results
        assert w.runner.launcher.restarts == 1
        again = w.run(["/bin/echo", "back"])
        assert again.stdout == b"back\n" and w.runner.launcher.zygote_pid != first, again
    finally:
        w.close()


def with_run_cgroups(config: RunnerConfig) -> Harness:
    """A harness whose runs each get a cgroup; the test is skipped where there are none."""
    lim = Harness(config)
    if not lim.runner.launcher.cgroups.startswith("cgroup"):
        lim.close()
        pytest.skip(f"no run cgroups here: {lim.runner.launcher.cgroups}")
    return lim


@pytest.mark.skipif(not ROOT, reason="RLIMIT_NPROC is counted per uid: needs the nobody switch")
def test_a_fork_bomb_in_one_run_does_not_starve_another() -> None:
    """Today's default rlimits count processes per uid, shared by every run: with a run
    cgroup, the bomb hits its own pids.max and another run's forks still succeed."""
    lim = with_run_cgroups(RunnerConfig(rlimits={"nproc": 150}, run_limits={"pids": 100}))
    try:
        m = marker()
        flag = lim.cwd / f"bombed-{m}"
        bomb = textwrap.dedent(f"""
            import os, time
            n = 0
            try:
                while n < 400:
                    if os.fork() == 0:
                        os.execv("/bin/sleep", ["sleep", "{m}"])
                    n += 1
            except OSError:
                pass
            open("{flag}", "w").write(str(n))
            time.sleep(30)""")
        other = textwrap.dedent("""
            import os
            pids = []
            try:
                for _ in range(80):
                    pid = os.fork()
                    if pid == 0:
                        os._exit(0) if False else os.execv("/bin/sleep", ["sleep", "5"])
                    pids.append(pid)
            except OSError as e:
                print(len(pids), e.strerror)
            else:
                print(len(pids), "ok")
            for pid in pids:
                os.kill(pid, 9)""")

        async def both() -> tuple:
            a = asyncio.ensure_future(lim.runner.run(lim.request(
                ["/usr/bin/python3", "-I", "-c", bomb], timeout=20)))
            for _ in range(500):
                await asyncio.sleep(0.02)
                if flag.exists():
                    break
            b = await lim.runner.run(lim.request(["/usr/bin/python3", "-I", "-c", other]))
            a.cancel()
            try:
                await a
            except asyncio.CancelledError:
                pass
            return flag.read_text(), b

        forked, b = lim.run_async(both())
        assert int(forked) < 100, forked                 # the bomb met its own bound
        assert b.stdout == b"80 ok\n", b                 # and the other run did not
        lim.settle()
        assert sleepers(m) == []
    finally:
        lim.close()


def test_a_run_over_its_memory_bound_is_killed() -> None:
    lim = with_run_cgroups(RunnerConfig(run_limits={"pids": 100, "memory": 64 << 20}))
    try:
        # 200 MiB in 8 MiB steps, each written: far under RLIMIT_AS, over the run's 64 MiB
        res = py(lim, """
            held = []
            for i in range(25):
                held.append(b"x" * (8 << 20))
            print("survived")""")
        assert res.signal == signal.SIGKILL and b"survived" not in res.stdout, res
        ok = lim.run(["/bin/echo", "next"])
        assert ok.stdout == b"next\n", ok
    finally:
        lim.close()


@pytest.mark.slow
@pytest.mark.skipif(not X86, reason="the raw clone(2) call of the reproducer is x86_64's")
def test_escapes_200_times(h: Harness) -> None:
    for i in range(200):
        m = marker()
        res = py(h, CLONE_PARENT_ESCAPE.format(m=m))
        assert res.exit_code == 0, (i, res)
        res = h.sh(SETSID_ESCAPE.format(m=m))
        assert res.exit_code == 0, (i, res)
        assert sleepers(m) == [], i
    h.settle()
