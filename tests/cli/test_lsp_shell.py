"""The lsp_* tools from a shell (issue 31), on a `toolsrv serve` of its own that serves the
bundled tools with no configuration: `toolsrv call`, and `echo … > call; cat out` through
a real 9pfuse mount (skipped, saying why, where 9pfuse or FUSE is missing)."""
from __future__ import annotations

import json
import os
import shlex
import shutil
import tempfile

import pytest

from lsphelpers import PROJECT, PYLSP, write_project
from shellhelpers import TOOLSRV, mounted_or_skip, serving, sh

pytestmark = pytest.mark.skipif(PYLSP is None, reason="python-lsp-server is not installed "
                                "(the lsp extra of setup.cfg: pip install 'toolsrv[lsp]')")


@pytest.fixture(scope="module")
def server():
    proj = tempfile.mkdtemp(prefix="proj.", dir="/tmp")
    os.chmod(proj, 0o777)
    write_project(proj, PROJECT)
    with serving() as (env, banner, p):
        yield env, proj
    shutil.rmtree(proj, ignore_errors=True)


@pytest.fixture(scope="module")
def mnt(server):
    with mounted_or_skip(server[0]) as m:
        yield m


def call(env: dict, proj: str, tool: str, args: dict):
    cmd = " ".join(shlex.quote(x) for x in TOOLSRV + [
        "call", "--cwd", proj, "sh1", "a", tool, json.dumps(args)])
    return sh(cmd, env, timeout=300)


def test_toolsrv_call_of_the_bundled_lsp_tools(server):
    env, proj = server
    r = call(env, proj, "lsp_definition", {"symbol": "Shape.area"})
    assert r.returncode == 0, r.stderr
    assert r.stdout == "pkg/shapes.py:7:9: def area(self):\n"
    r = call(env, proj, "lsp_references", {"path": "pkg/a.py", "line": 5, "column": 24})
    assert r.stdout.splitlines()[0] == "pkg/a.py:5:24: return Shape(1, 2).area()"
    r = call(env, proj, "lsp_calls", {"symbol": "Shape.area"})
    assert r.returncode != 0 and "callHierarchyProvider" in r.stderr


def test_echo_into_call_and_cat_out_through_9pfuse(server, mnt):
    env, proj = server
    a = f"{mnt}/session/fuse1/agent/a"
    r = sh(f"mkdir {mnt}/session/fuse1 {a} && echo {shlex.quote(proj)} > "
           f"{mnt}/session/fuse1/cwd && echo tool_load lsp_definition lsp_hover > {a}/ctl && "
           f"echo '{{\"symbol\": \"Shape.area\"}}' > {a}/tools/lsp_definition/call && "
           f"cat {a}/tools/lsp_definition/out", env, timeout=300, check=True)
    assert r.stdout == "pkg/shapes.py:7:9: def area(self):\n"
    r = sh(f"exec 3<> {a}/tools/lsp_hover/call && echo '{{\"symbol\": \"Shape.area\"}}' >&3 "
           f"&& cat <&3", env, timeout=300, check=True)
    assert "Width times height." in r.stdout
