"""The launcher's own mechanisms, with real processes: a run's PID namespace is reused only
once its init has proved it empty (no child left), runs at once never share one, the idle
inits a burst leaves are let go down to SPARE_INITS, each pid 1 of its own namespace, and
runs of different profiles interleaved (idle and forked inits, rulesets from the path
cache's ready lists) each get exactly their own confinement."""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from sandbox_support import LANDLOCK, NO_LANDLOCK, Harness, default_dict, profile_from  # noqa: E402

from toolsrv.run import launcher  # noqa: E402

from toolsrv.run.init import zygote  # noqa: E402

pytestmark = pytest.mark.skipif(LANDLOCK.abi < 1, reason=NO_LANDLOCK)

# Prints its own pid, its namespace and every other pid below it that exists in its PID
# namespace (pid 1, the init, excepted): a process left by an earlier run would show.
NEIGHBOURS = """#!/usr/bin/python3 -I
import json, os
me, seen = os.getpid(), []
for pid in range(2, me):
    try:
        os.kill(pid, 0)
        seen.append(pid)
    except PermissionError:
        seen.append(pid)
    except ProcessLookupError:
        pass
print(json.dumps({"me": me, "ppid": os.getppid(), "seen": seen,
                  "ns": os.readlink("/proc/self/ns/pid") if os.path.exists("/proc/self") else ""}))
"""


@pytest.fixture(scope="module")
def h() -> Iterator[Harness]:
    harness = Harness()
    tool = harness.tools / "neighbours"
    tool.write_text(NEIGHBOURS)
    tool.chmod(0o755)
    yield harness
    harness.close()


def zygote_children(h: Harness) -> list[int]:
    boot = h.runner.launcher.zygote_pid
    with open(f"/proc/{boot}/task/{boot}/children") as f:
        [zy] = [int(p) for p in f.read().split()]
    with open(f"/proc/{zy}/task/{zy}/children") as f:
        return [int(p) for p in f.read().split()]


def burst(h: Harness, n: int) -> list[dict]:
    async def many() -> list:
        return await asyncio.gather(*(h.runner.run(h.request([str(h.tools / "neighbours")]))
                                      for _ in range(n)))
    out = []
    for res in h.run_async(many()):
        assert res.exit_code == 0, res
        out.append(json.loads(res.stdout))
    return out


def test_namespaces_are_reused_only_empty(h: Harness) -> None:
    if not h.runner.launcher.pidns:
        pytest.skip("no PID namespaces here")
    n = 40  # more than the spares made ahead: most inits are forked on the critical path
    first = burst(h, n)
    second = burst(h, n)
    for run in first + second:
        # the tool is the init's child, and sees no process of any other run, earlier or
        # at the same time: at most the init's thread that spawned it (a thread is a task of
        # the namespace too: tid me-1, allocated just before the tool), still ending
        assert run["ppid"] == 1 and set(run["seen"]) <= {run["me"] - 1}, run
    # A reused namespace goes on numbering where its last run stopped: the tool is not pid 2.
    reused = sum(run["me"] > 2 for run in second)
    assert reused >= n // 2, [run["me"] for run in second]


def namespace_of(pid: int) -> str:
    return os.readlink(f"/proc/{pid}/ns/pid")


def test_idle_inits_beyond_the_spares_go_each_in_a_namespace_of_its_own(h: Harness) -> None:
    if not h.runner.launcher.pidns:
        pytest.skip("no PID namespaces here")
    burst(h, 10)
    h.settle()
    end = time.monotonic() + 10 + launcher.IDLE_TRIM
    while len(zygote_children(h)) != zygote.SPARE_INITS and time.monotonic() < end:
        h.run_async(asyncio.sleep(0.05))  # the trim is a timer of the server's loop
    spares = zygote_children(h)
    assert len(spares) == zygote.SPARE_INITS
    spaces = {namespace_of(pid) for pid in spares}
    assert len(spaces) == len(spares) and namespace_of(os.getpid()) not in spaces
    for pid in spares:  # each is pid 1 there, with no child yet
        with open(f"/proc/{pid}/status") as f:
            nspid = [line.split()[-1] for line in f if line.startswith("NSpid:")]
        assert nspid == ["1"]
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            assert f.read().split() == []


def test_interleaved_profiles_each_get_their_own_confinement(h: Harness) -> None:
    data = default_dict()
    data["filesystem"]["ro"].append(str(h.outside))
    data["network"] = {"enabled": True}
    lax = profile_from(data, "lax")
    probes = [{"op": "read", "path": str(h.secret)}, {"op": "udp", "port": 9},
              {"op": "whoami"}]

    async def many() -> list:
        return await asyncio.gather(*(
            h.runner.run(h.request([str(h.tools / "probe.py")], json.dumps(probes).encode(),
                                   lax if i % 2 else None)) for i in range(16)))

    for _ in range(2):  # the second round: spare inits, ready-list rulesets
        for i, res in enumerate(h.run_async(many())):
            assert res.exit_code == 0, res
            read, udp, who = json.loads(res.stdout)
            if i % 2:
                assert read == {"ok": True, "value": "secret\n"} and udp["ok"], (i, res)
            else:
                assert not read["ok"] and not udp["ok"], (i, res)
            if h.uid:
                assert who["value"]["uid"] == h.uid[0], who


def test_a_request_an_init_cannot_carry_out_is_that_runs_error(h: Harness) -> None:
    """A step of the launch that fails in the init (here its chdir) is that run's error,
    naming the step; the launcher and its next spares go on serving."""
    req = h.request(["/bin/true"], cwd=str(h.base / "no-such-dir"))

    async def go() -> tuple:
        return await asyncio.wait_for(h.runner.run(req), 10)

    res = h.run_async(go())
    assert res.error and "cwd: " in res.error and "No such file" in res.error, res
    assert h.run(["/bin/echo", "still serving"]).stdout == b"still serving\n"
