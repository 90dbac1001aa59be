"""rmdir and rm -r of sessions and agents through a real 9pfuse mount (issue 46 item 5).

9pfuse sends the same walk and Tremove for rmdir(2) as for unlink(2): `rmdir` of an agent
or session directory ends it, however full (toolsrv(4), "rmdir"), and `rm -r` keeps
working.  Tests skip, saying why, where 9pfuse or FUSE is missing.
"""
from __future__ import annotations

import os

import pytest

from shellhelpers import TOOLSRV, mounted_or_skip, serving, sh


@pytest.fixture(scope="module")
def server():
    with serving(tools={"echo": (None, {"cmd": "cat", "readOnly": True})}) as (env, _, p):
        yield dict(env, TOOLSRV=" ".join(TOOLSRV))
    assert p.returncode == 0


@pytest.fixture(scope="module")
def mnt(server):
    with mounted_or_skip(server) as m:
        yield m


def test_rmdir_ends_a_full_agent_or_session_and_rm_r_still_works(server, mnt):
    s = f"{mnt}/session/rd"
    sh(f"""set -e
mkdir {s} {s}/agent/a {s}/agent/b {s}/agent/c
for x in a b c; do echo tool_load echo > {s}/agent/$x/ctl; done
echo '{{"n": 1}}' > {s}/agent/a/tools/echo/call
cat {s}/agent/a/tools/echo/out
""", server, check=True)
    r = sh(f"rmdir {s}/agent/a/tools/echo; echo rmdir exit $?; ls {s}/agent/a/tools", server)
    assert r.stdout == "rmdir exit 0\necho\n", r.stderr        # inside: changes nothing
    r = sh(f"rmdir {s}/agent/a; echo rmdir exit $?; ls {s}/agent", server)
    assert r.stdout == "rmdir exit 0\nb\nc\n", r.stderr        # the agent, ended
    r = sh(f"rm -r {s}/agent/b; echo rm exit $?; ls {s}/agent", server)
    assert r.stdout == "rm exit 0\nc\n", r.stderr
    r = sh(f"rmdir {s}; echo rmdir exit $?; ls {mnt}/session", server)
    assert r.stdout.startswith("rmdir exit 0\n") and "rd" not in r.stdout.split(), r.stderr
    assert not os.path.exists(s)
