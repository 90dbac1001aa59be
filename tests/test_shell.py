"""The shell user's path (issue 21) through a real 9pfuse mount: `cat` of a cancelled
call ends at once.

The server is a `toolsrv serve` of its own; the mount is plan9port's 9pfuse, made with
`toolsrv mount` and always unmounted.  Tests through the mount skip, saying why, where
9pfuse or FUSE is missing (shellhelpers.fuse_missing).
"""
from __future__ import annotations

import time

import pytest

from shellhelpers import TOOLSRV, fuse_missing, mounted, serving, sh

SLEEPER = "#!/bin/sh\nexec sleep \"$(sed 's/[^0-9.]//g')\"\n"


@pytest.fixture(scope="module")
def server():
    with serving(tools={"sleeper": (SLEEPER, {})}) as (env, _, p):
        yield dict(env, TOOLSRV=" ".join(TOOLSRV))
    assert p.returncode == 0


@pytest.fixture(scope="module")
def mnt(server):
    why = fuse_missing()
    if why:
        pytest.skip(why)
    with mounted(server) as m:
        yield m


# ------------------------------------------------------------------ through the mount

@pytest.mark.parametrize("how", ["cancel", "tool_unload"])
def test_cat_of_a_cancelled_call_ends_at_once_with_an_error(server, mnt, how):
    """Issue 21 item 2: after `echo cancel TOOL > ctl`, `cat <&3` on the call's
    descriptor looped for ever (the read answered `interrupted`, EINTR, which cat
    retries).  Now it ends at once with EIO."""
    s = f"c_{how}"
    script = f"""
cd {mnt}
mkdir session/{s} session/{s}/agent/a
echo tool_load sleeper > session/{s}/agent/a/ctl
exec 3<>session/{s}/agent/a/tools/sleeper/call
printf '{{"t": "67.25"}}' >&3
(sleep 1; echo {how} sleeper > session/{s}/agent/a/ctl) &
cat <&3
echo "cat exit $?"
exec 3<&-
wait
rm -r session/{s}
"""
    t0 = time.monotonic()
    r = sh(script, server, timeout=30)
    took = time.monotonic() - t0
    assert "cat exit 1" in r.stdout, (r.stdout, r.stderr)
    assert "cat: -: Input/output error" in r.stderr
    assert took < 15, took
    assert r.stderr.count("Input/output error") == 1     # one read, one answer
