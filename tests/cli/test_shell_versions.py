"""Through a real 9pfuse mount, a changed file shows a new mtime (issue 46 item 3): what
`ls -l`, `make` and `find -newer` go by.  9pfuse caches attributes for a moment, so the new
mtime is waited for.  Tests skip, saying why, where 9pfuse or FUSE is missing.
"""
from __future__ import annotations

import json
import os
import threading
import time

import pytest

from shellhelpers import TOOLSRV, mounted_or_skip, serving, sh, wait_until


@pytest.fixture(scope="module")
def server():
    with serving(tools={"echo": (None, {"cmd": "cat", "description": "Echo the args.",
                                        "prompt": "Use echo."})}) as (env, _, p):
        yield dict(env, TOOLSRV=" ".join(TOOLSRV))
    assert p.returncode == 0


@pytest.fixture(scope="module")
def mnt(server):
    with mounted_or_skip(server) as m:
        yield m


def test_a_changed_file_shows_a_new_mtime_through_the_mount(server, mnt):
    a = f"{mnt}/session/mt/agent/a"
    sh(f"mkdir {mnt}/session/mt {a} && echo tool_load echo > {a}/ctl", server, check=True)
    files = ["revision", "revwait", "tools/index", "tools/errors", "tools/echo/meta",
             "tools/echo/schema", "tools/echo/prompt", "status",
             "session/mt/agent/a/schemas", "session/mt/agent/a/search"]
    before = {f: int(os.stat(f"{mnt}/{f}").st_mtime) for f in files}
    ev = threading.Event()
    while int(time.time()) <= max(before.values()):      # the clock, not a sleep
        ev.wait(0.05)
    with open(f"{mnt}/revision") as fh:
        rev = fh.read().strip()
    meta = os.path.join(server["HOME"], ".config", "ollie", "tools", "echo.meta")
    with open(meta, "w") as fh:
        json.dump({"cmd": "cat", "description": "Echo, changed.", "prompt": "Use it.",
                   "args": {"type": "object", "properties": {"n": {"type": "integer"}}}}, fh)
    with open(os.path.join(os.path.dirname(meta), "broken.meta"), "w") as fh:
        fh.write("{not json")
    sh(f"exec 3<> {mnt}/revwait && echo {rev} >&3 && head -n 1 <&3 && "
       f"echo '{{\"n\": 1}}' > {a}/tools/echo/call && cat {a}/tools/echo/out && "
       f"echo 'echo the args' > {a}/search", server, check=True)

    def moved() -> list[str]:
        return [f for f in files if int(os.stat(f"{mnt}/{f}").st_mtime) <= before[f]]
    assert wait_until(lambda: not moved()), f"mtime did not move: {moved()}"
    sh(f"rm -r {mnt}/session/mt", server, check=True)
