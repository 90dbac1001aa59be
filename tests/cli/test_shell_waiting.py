"""Who waits on a running call, through a real 9pfuse mount and plan9port's `9p` (issue 46
items 2 and 4): `grep -r` over the mount finishes while calls run, `echo … > call; cat out`
still prints the whole result, and Ctrl-C on `9p rdwr` ends its call.

The tool waits for a file `go` in its session's directory, which the test makes: no
timing.  A process stuck in a FUSE request cannot be killed, so every test makes `go` in
its `finally`, which lets such a reader end.  Tests skip, saying why, where 9pfuse, FUSE
or `9p` is missing.
"""
from __future__ import annotations

import os
import shutil
import signal
import subprocess

import pytest

from shellhelpers import REPO, TOOLSRV, mounted_or_skip, serving, sh, wait_until

GATED = """\
#!/bin/sh
input=$(cat)
echo "waiting" >&2
while [ ! -e go ]; do sleep 0.05; done
echo "gotten-by-gated $input"
"""


@pytest.fixture(scope="module")
def server():
    with serving(tools={"gated": (GATED, {"readOnly": True})}) as (env, _, p):
        yield dict(env, TOOLSRV=" ".join(TOOLSRV))
    assert p.returncode == 0


@pytest.fixture(scope="module")
def mnt(server):
    with mounted_or_skip(server) as m:
        yield m


def _agent(mnt: str, env: dict, s: str) -> tuple[str, str]:
    """A session s with agent a and gated loaded: (the agent's path, the `go` file)."""
    a = f"{mnt}/session/{s}/agent/a"
    sh(f"mkdir {mnt}/session/{s} {a} && echo tool_load gated > {a}/ctl", env, check=True)
    with open(f"{mnt}/session/{s}/cwd") as f:
        return a, os.path.join(f.read().strip(), "go")


def _status(a: str) -> str:
    with open(f"{a}/tools/gated/status") as f:
        return f.read()


def _waiting_in_fuse(group: int, prog: str) -> int:
    """How many processes `prog` of the process group wait in a FUSE request."""
    n = 0
    for pid in os.listdir("/proc"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
            with open(f"/proc/{pid}/comm") as f:
                comm = f.read().strip()
            with open(f"/proc/{pid}/wchan") as f:
                wchan = f.read()
        except OSError:
            continue
        if comm == prog and int(fields[2]) == group and (
                "fuse" in wchan or "request_wait_answer" in wchan):
            n += 1
    return n


def test_grep_r_over_the_mount_finishes_while_calls_run(server, mnt):
    """Issue 46 item 2.  Two calls run, one made by another client (`toolsrv call`) and one
    by `echo … > call` through the mount whose `cat out` waits: grep -r reads every file
    and finishes; then `cat out` prints the whole result."""
    a, go = _agent(mnt, server, "grep1")
    b, go_b = _agent(mnt, server, "grep2")
    other = subprocess.Popen(
        TOOLSRV + ["call", "grep1", "a", "gated", '{"n": 1}'], env=server,
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    shell = subprocess.Popen(["bash", "-c", f"echo '{{\"n\": 2}}' > {b}/tools/gated/call && "
                              f"cat {b}/tools/gated/out"], env=server, cwd=REPO,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:
        assert wait_until(lambda: _status(a).startswith("running"), 60), _status(a)
        assert wait_until(lambda: _waiting_in_fuse(shell.pid, "cat"), 60), "cat never waited"
        r = sh(f"grep -r gotten-by-gated {mnt}; echo grep exit $?", server, timeout=60)
        assert "grep exit 1" in r.stdout, (r.stdout, r.stderr)    # read it all, found none
        assert _status(a).startswith("running") and _status(b).startswith("running")
        r = sh(f"find {mnt} -type f -exec cat {{}} + > /dev/null; echo find done", server,
               timeout=60)
        assert "find done" in r.stdout
    finally:
        for g in (go, go_b):
            open(g, "w").close()
    out, err = shell.communicate(timeout=60)
    assert out == 'gotten-by-gated {"n": 2}\n', err
    assert other.communicate(timeout=60)[0] == 'gotten-by-gated {"n": 1}\n'
    r = sh(f"rm -r {mnt}/session/grep1 {mnt}/session/grep2", server, check=True)


def test_echo_then_cat_out_and_err_print_the_whole_result(server, mnt):
    """The shell's way: the call's writer closes `call` at once; the first `cat out`
    waits for the end; a `cat out` or `cat err` beside it finds nothing yet, a `cat err`
    after it the whole stderr."""
    a, go = _agent(mnt, server, "cat1")
    shell = subprocess.Popen(["bash", "-c", f"echo '{{\"n\": 3}}' > {a}/tools/gated/call && "
                              f"cat {a}/tools/gated/out && cat {a}/tools/gated/err"],
                             env=server, cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        assert wait_until(lambda: _waiting_in_fuse(shell.pid, "cat"), 60), "cat never waited"
        r = sh(f"cat {a}/tools/gated/out {a}/tools/gated/err; echo cat exit $?", server,
               timeout=60)
        assert r.stdout == "cat exit 0\n"          # not handed the call: at once, empty
    finally:
        open(go, "w").close()
    out, err = shell.communicate(timeout=60)
    assert out == 'gotten-by-gated {"n": 3}\nwaiting\n', err
    r = sh(f"cat {a}/tools/gated/out {a}/tools/gated/err", server, check=True)
    assert r.stdout == 'gotten-by-gated {"n": 3}\nwaiting\n'
    sh(f"rm -r {mnt}/session/cat1", server, check=True)


def test_ctrl_c_on_9p_rdwr_ends_its_call(server, mnt):
    """Issue 46 item 4: `9p rdwr` waits on `call`; its Ctrl-C hangs up, which kills the
    run (toolsrv(4)); `9p write`, which hangs up without reading, leaves it running."""
    nine = shutil.which("9p") or os.path.join(os.environ.get("PLAN9", "/usr/local/plan9"),
                                              "bin", "9p")
    if not os.access(nine, os.X_OK):
        pytest.skip("plan9port's 9p not found (on PATH, or in $PLAN9/bin)")
    a, go = _agent(mnt, server, "ninep")
    path = "toolsrv/" + a[len(mnt) + 1:] + "/tools/gated/call"
    try:
        p = subprocess.Popen([nine, "rdwr", path], env=server, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        p.stdin.write('{"n": 4}\n')
        p.stdin.flush()
        assert wait_until(lambda: _status(a).startswith("running"), 60), _status(a)
        p.send_signal(signal.SIGINT)
        p.communicate(timeout=60)
        assert wait_until(lambda: _status(a).startswith("killed"), 60), _status(a)
        r = subprocess.run([nine, "write", path], input='{"n": 5}\n', env=server,
                           capture_output=True, text=True, timeout=60)
        assert r.returncode == 0, r.stderr
        assert _status(a).startswith("running")
    finally:
        open(go, "w").close()
    assert wait_until(lambda: _status(a).startswith("ok"), 60), _status(a)
    sh(f"rm -r {mnt}/session/ninep", server, check=True)
