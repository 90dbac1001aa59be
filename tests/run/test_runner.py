"""The runner with real processes: I/O contract, environment, uid, fds, errors, concurrency."""
from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tools"))
from sandbox_support import LANDLOCK, NO_LANDLOCK, ROOT, Harness, profile_from  # noqa: E402

from toolsrv.record import replace  # noqa: E402
from toolsrv.run.sandbox import LandlockStatus  # noqa: E402

pytestmark = pytest.mark.skipif(LANDLOCK.abi < 1, reason=NO_LANDLOCK)


@pytest.fixture(scope="module")
def h() -> Iterator[Harness]:
    harness = Harness()
    yield harness
    harness.close()


def test_stdin_in_stdout_out(h: Harness) -> None:
    res = h.run(["/bin/cat"], b'{"path": "x"}')
    assert (res.stdout, res.stderr, res.exit_code, res.error) == (b'{"path": "x"}', b"", 0, None)
    assert res.signal is None and not res.timed_out and not res.truncated
    assert res.timeout_used == 30.0 and res.duration > 0


def test_exit_status_and_stderr(h: Harness) -> None:
    res = h.sh("echo out; echo err >&2; exit 3")
    assert (res.stdout, res.stderr, res.exit_code) == (b"out\n", b"err\n", 3)


def test_killed_by_signal(h: Harness) -> None:
    res = h.sh("kill -KILL $$")
    assert res.exit_code is None and res.signal == 9


def test_environment_is_the_profiles_plus_the_servers(h: Harness, monkeypatch: pytest.MonkeyPatch
                                                      ) -> None:
    monkeypatch.setenv("TOOLSRV_TEST_SECRET", "hunter2")
    monkeypatch.setenv("LANG", "C.UTF-8")
    [who] = h.probe({"op": "whoami"}, env={"OLLIE_SESSION_ID": "s1", "PWD": str(h.cwd)})
    env = who["value"]["env"]
    assert env["OLLIE_SESSION_ID"] == "s1" and env["PWD"] == str(h.cwd)
    assert env["PATH"] == "/usr/local/bin:/usr/bin:/bin" and env["LANG"] == "C.UTF-8"
    assert "TOOLSRV_TEST_SECRET" not in env
    assert env["HOME"] == env["TMPDIR"] and env["TMPDIR"].startswith(h.runner.scratch.base)
    assert who["value"]["cwd"] == str(h.cwd)


@pytest.mark.skipif(not ROOT, reason="the uid switch happens only when the server is root")
def test_runs_as_nobody_without_groups(h: Harness) -> None:
    assert h.runner.tool_uid() == (65534, 65534)
    [who] = h.probe({"op": "whoami"})
    assert who["value"]["uid"] == 65534 and who["value"]["gid"] == 65534
    assert who["value"]["groups"] in ([], [65534])


def test_private_tmpdir_is_fresh_0700_and_removed(h: Harness) -> None:
    res = h.sh('stat -c "%a %u" "$TMPDIR"; ls -A "$TMPDIR" | wc -l; echo "$TMPDIR";'
               'echo data > "$TMPDIR/f"; mkdir "$TMPDIR/d"; echo more > "$TMPDIR/d/g"')
    mode, count, path = res.stdout.decode().split("\n")[:3]
    assert mode.split()[0] == "700" and count.strip() == "0"
    if h.uid:
        assert int(mode.split()[1]) == h.uid[0]
    h.settle()
    assert not os.path.exists(path)
    again = h.sh('echo "$TMPDIR"').stdout.decode().strip()
    assert again != path


def test_only_stdio_fds_are_inherited(h: Harness) -> None:
    [fds] = h.probe({"op": "open_fds"})
    assert fds == {"ok": True, "value": []}


def test_exec_failure_is_an_error_naming_the_program(h: Harness) -> None:
    res = h.run(["no-such-tool-xyz"])
    assert res.exit_code is None and res.error is not None
    assert "exec" in res.error and "no-such-tool-xyz" in res.error


def test_program_found_on_the_tools_path(h: Harness) -> None:
    assert h.run(["true"]).exit_code == 0
    res = h.run(["probe.py"], b"[]", env={"PATH": f"{h.tools}:/usr/bin:/bin"})
    assert res.exit_code == 0 and res.stdout == b"[]\n"


@pytest.mark.skipif(not ROOT, reason="needs a cwd the tool uid cannot enter")
def test_unreachable_cwd_is_an_error(h: Harness) -> None:
    gone = h.base / "no-such-dir"
    res = h.run(["/bin/true"], cwd=str(gone))
    assert res.error and "cwd" in res.error and str(gone) in res.error


def test_a_private_cwd_is_reached_where_root_can_map_it(h: Harness) -> None:
    """A root server maps a 0700 cwd for its tools (toolsrv/run/kernel/idmap.py); an ordinary user's
    tools run as that user, who owns it."""
    private = h.mkdir("private")
    private.chmod(0o700)
    res = h.run(["/bin/sh", "-c", "echo in > here.txt && cat here.txt"], cwd=str(private))
    assert res.exit_code == 0 and res.stdout == b"in\n", res
    assert os.stat(private / "here.txt").st_uid == os.geteuid()


def test_large_stdin_and_stdout_round_trip(h: Harness) -> None:
    data = os.urandom(3 << 20)
    res = h.run(["/bin/cat"], data)
    assert res.exit_code == 0 and res.stdout == data


def test_tool_that_ignores_stdin_does_not_hang(h: Harness) -> None:
    res = h.sh("echo done", stdin=b"x" * (4 << 20))
    assert res.exit_code == 0 and res.stdout == b"done\n"


def test_32_concurrent_runs(h: Harness) -> None:
    async def many() -> list:
        return await asyncio.gather(*(
            h.runner.run(h.request(["/bin/sh", "-c", 'cat; echo " $TMPDIR"'],
                                   json.dumps({"n": i}).encode())) for i in range(32)))

    results = h.run_async(many())
    tmpdirs = set()
    for i, res in enumerate(results):
        assert res.exit_code == 0, res
        body, tmp = res.stdout.decode().rsplit(" ", 1)
        assert json.loads(body) == {"n": i}
        tmpdirs.add(tmp)
    assert len(tmpdirs) == 32


def test_timeout_from_profile_and_request(h: Harness) -> None:
    slow = replace(h.default, timeout=7.0)
    res = h.run(["/bin/true"], profile=slow)
    assert res.timeout_used == 7.0
    res = h.run(["/bin/true"], profile=slow, timeout=3.0)
    assert res.timeout_used == 3.0


def test_restarts_after_the_launcher_dies(h: Harness) -> None:
    pid = h.runner.launcher.zygote_pid
    assert pid is not None
    os.kill(pid, 9)

    async def wait_gone() -> None:
        for _ in range(500):
            if not h.runner.launcher.alive:
                return
            await asyncio.sleep(0.01)

    h.run_async(wait_gone())
    assert h.run(["/bin/echo", "back"]).stdout == b"back\n"
    assert h.runner.launcher.zygote_pid != pid


def test_refuses_without_landlock_unless_best_effort(h: Harness) -> None:
    """The kernel's answer is replaced by 'no Landlock'; the policy decision is real."""
    real = h.runner.status
    h.runner.status = LandlockStatus(0, "landlock_create_ruleset: Function not implemented")
    try:
        res = h.run(["/bin/cat", str(h.secret)])
        assert res.error == ("sandbox: landlock unavailable (not implemented): "
                             "landlock_create_ruleset: Function not implemented")
        assert res.exit_code is None and res.stdout == b""
        lax = replace(h.default, best_effort=True)
        res = h.run(["/bin/cat", str(h.secret)], profile=lax)
        assert res.error is None and res.stdout == b"secret\n"  # degraded: no Landlock at all
        res = h.run(["/bin/grep", "NoNewPrivs", "/proc/self/status"], profile=lax)
        assert res.stdout.split() == [b"NoNewPrivs:", b"1"]  # still no setuid gains
    finally:
        h.runner.status = real


def test_older_abi_enforces_what_it_has(h: Harness) -> None:
    """Rulesets built for ABI 3 on this kernel: filesystem rules hold, TCP rules are absent,
    so a profile that needs them is refused, unless best_effort."""
    real = h.runner.status
    h.runner.status = LandlockStatus(3)
    tcp = profile_from({"filesystem": {"rox": ["/usr", "/lib", "/lib64", "/bin", "{TOOLS}"],
                                       "ro": ["/etc/ld.so.cache", "/etc/python3.11"]},
                        "network": {"enabled": True, "connect_tcp": [1]}})
    try:
        res = h.run(["/bin/true"], profile=tcp)
        assert res.error and "abi 4" in res.error
        [read] = h.probe({"op": "read", "path": str(h.secret)},
                         profile=replace(tcp, best_effort=True))
        assert read == {"ok": False, "errno": "EACCES"}
    finally:
        h.runner.status = real


@pytest.mark.parametrize("inline", [True, False], ids=["tmpfs-inline", "disk-threads"])
def test_scratch_directories_both_ways(tmp_path: Path, inline: bool) -> None:
    """On a tmpfs the per-call directories are made and removed on the loop; on a disk in
    worker threads.  Either way: fresh, 0700, never handed out twice, in this server's own
    directory of the base, removed with what a tool left in them; a crashed server's
    directory (its lock free) is swept, and nothing is left once closed."""
    from toolsrv.run.scratch import Scratch, default_tmp_base

    base = str(tmp_path / "scratch")
    os.makedirs(base, 0o711)
    os.mkdir(os.path.join(base, "999999999.dead"))        # a dead server's directory,
    open(os.path.join(base, "999999999.dead.lock"), "w").close()   # its lock free

    async def go() -> None:
        sc = Scratch(base, None, ahead=4, inline=inline)
        sc.refill()
        paths = [await sc.take() for _ in range(10)]
        assert sc.inline is inline and sc.dir is not None
        assert len(set(paths)) == 10 and all(p.startswith(sc.dir.path + "/run-") for p in paths)
        assert os.path.dirname(sc.dir.path) == base
        assert all(os.stat(p).st_mode & 0o777 == 0o700 for p in paths)
        assert sc.sweep() == 1 and sorted(os.listdir(base)) == sorted(
            [os.path.basename(sc.dir.path), os.path.basename(sc.dir.path) + ".lock"])
        with open(os.path.join(paths[0], "left"), "w") as f:   # a tool left a file
            f.write("x")
        for p in paths:
            sc.release(p)
        await sc.close()
        assert not any(os.path.exists(p) for p in paths)
        assert os.listdir(base) == []

    asyncio.run(go())
    assert default_tmp_base().endswith(f"/toolsrv-{os.geteuid()}")


def test_default_tmp_base_is_an_executable_tmpfs_or_the_tempdir(monkeypatch, tmp_path):
    import tempfile
    from toolsrv.run import scratch as runner
    monkeypatch.setenv("XDG_RUNTIME_DIR", str(tmp_path))
    parent = os.path.dirname(runner.default_tmp_base())
    if runner._on_tmpfs(str(tmp_path)):          # /tmp is a tmpfs here: $XDG_RUNTIME_DIR wins
        assert parent == str(tmp_path)
    elif parent == "/dev/shm":
        assert runner._on_tmpfs(parent) and not os.statvfs(parent).f_flag & os.ST_NOEXEC
    else:
        assert parent == tempfile.gettempdir()
    monkeypatch.setenv("XDG_RUNTIME_DIR", "relative/not/used")
    assert os.path.dirname(runner.default_tmp_base()) in ("/dev/shm", tempfile.gettempdir())
