"""The launcher's own mechanisms, with real processes: PID namespaces made under load are
reused only when empty, the spares a burst leaves are ended once the launcher is idle, and
runs of different profiles interleaved (reused namespaces, rulesets from the path cache's
ready lists, one spawning thread each) each get exactly their own confinement."""
from __future__ import annotations

import asyncio
import json
import os
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent / "tools"))
from sandbox_support import LANDLOCK, NO_LANDLOCK, Harness, default_dict, profile_from  # noqa: E402

from toolsrv import zygote  # noqa: E402

pytestmark = pytest.mark.skipif(LANDLOCK.abi < 1, reason=NO_LANDLOCK)

# Prints its own pid and every other pid below it that exists in its PID namespace (pid 1,
# the stub, excepted): a process left by an earlier run of a reused namespace would show.
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
print(json.dumps({"me": me, "seen": seen}))
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


def test_namespaces_made_under_load_are_reused_only_empty(h: Harness) -> None:
    if not h.runner.launcher.pidns:
        pytest.skip("no PID namespaces here")
    n = 40  # more than the spares made ahead: most namespaces are made on the critical path
    first = burst(h, n)
    second = burst(h, n)
    for run in first + second:
        assert run["seen"] == [], run  # nothing but the stub and the tool itself
    # A reused namespace goes on numbering where its last run stopped: the tool is not pid 2.
    reused = sum(run["me"] > 2 for run in second)
    assert reused >= n // 2, [run["me"] for run in second]


def test_spares_beyond_the_ahead_count_end_when_idle(h: Harness) -> None:
    if not h.runner.launcher.pidns:
        pytest.skip("no PID namespaces here")
    burst(h, 40)
    h.settle()
    end = time.monotonic() + 10 + zygote.IDLE_TRIM_MS / 1000
    while len(zygote_children(h)) > zygote.SPARE_NAMESPACES and time.monotonic() < end:
        time.sleep(0.05)
    assert len(zygote_children(h)) <= zygote.SPARE_NAMESPACES
    assert os.path.exists(f"/proc/{h.runner.launcher.zygote_pid}")


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

    for _ in range(2):  # the second round: reused namespaces, ready-list rulesets
        for i, res in enumerate(h.run_async(many())):
            assert res.exit_code == 0, res
            read, udp, who = json.loads(res.stdout)
            if i % 2:
                assert read == {"ok": True, "value": "secret\n"} and udp["ok"], (i, res)
            else:
                assert not read["ok"] and not udp["ok"], (i, res)
            if h.uid:
                assert who["value"]["uid"] == h.uid[0], who


def test_a_request_naming_unknown_fixed_paths_is_that_runs_error(h: Harness) -> None:
    from toolsrv.sandbox import placeholder_values
    req = h.request(["/bin/true"])
    policy = req.profile.resolve(placeholder_values(req.cwd, "/tmp", req.tool_dir))
    msg = h.runner._spawn_message(req, policy, "/tmp", 5.0)
    msg["landlock"] = {**msg["landlock"], "cached": 0, "fixed": 10**6}  # never sent

    async def go() -> tuple:
        handle = h.runner.launcher.spawn(msg)
        handle.close_fds()
        return await asyncio.wait_for(handle.exited, 10)

    status, error = h.run_async(go())
    assert status is None and error, (status, error)
    assert h.run(["/bin/echo", "still serving"]).stdout == b"still serving\n"
