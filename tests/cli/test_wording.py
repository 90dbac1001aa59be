"""Small wording fixes a newcomer met once each (issue 46, 15): each error names what was
wrong and what to do, and fits an Rerror whole; `toolsrv --version`; the man pages."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest

from apphelpers import AppThread, add_tool, tools_dir
from toolsrv import __version__
from toolsrv.cli.client import Client, ClientError
from toolsrv.dirs import bundled
from toolsrv.errors import ERRMAX

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def toolsrv(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolsrv", *argv], capture_output=True,
                          text=True, timeout=60, cwd="/")


def test_version():
    p = toolsrv("--version")
    assert p.returncode == 0 and p.stdout == f"toolsrv {__version__}\n", p


@pytest.fixture(scope="module")
def app():
    d = tools_dir()
    add_tool(d, "needs", None, {"cmd": "/bin/cat", "args": {
        "type": "object", "properties": {"path": {"type": "string"}}}})
    add_tool(d, "boom", "#!/usr/bin/env python3\nraise ValueError('no such widget: w1')\n")
    a = AppThread([d, bundled.TOOLS]).start()
    with Client.connect(a.addr) as c:
        c.mkdir("session/w")
        c.mkdir("session/w/agent/a")
        c.rdwr("session/w/agent/a/ctl", b"tool_load needs boom file_read")
    yield a
    a.cleanup()
    shutil.rmtree(d, ignore_errors=True)


def refusal(app: AppThread, do) -> ClientError:
    with Client.connect(app.addr) as c:
        with pytest.raises(ClientError) as e:
            do(c)
    assert len(e.value.ename.encode()) < ERRMAX and "..." not in e.value.ename, e.value.ename
    return e.value


def test_a_bad_name_gives_the_rule(app):
    e = refusal(app, lambda c: c.mkdir("session/a b"))
    assert e.ename == ("illegal file name: use letters, digits, '.', '_', '-' (1 to 128; "
                       "not . or ..), not 'a b'")


def test_a_session_that_exists_says_toolsrv_rm(app):
    e = refusal(app, lambda c: c.mkdir("session/w"))
    assert e.ename == ("file already exists: session/w: toolsrv rm it (and all in it) first, "
                       "or choose another name")
    e = refusal(app, lambda c: c.mkdir("session/w/agent/a"))
    assert e.ename.startswith("file already exists: session/w/agent/a: toolsrv rm it")


def test_a_tool_that_does_not_exist_is_not_called_unloaded(app):
    e = refusal(app, lambda c: c.read("session/w/agent/a/tools/nosuch/status"))
    assert e.ename == ("nosuch: no such tool (tools/index lists them; tools/errors, the "
                       ".meta files not served) (file not found)")
    e = refusal(app, lambda c: c.read("session/w/agent/a/tools/file_write/status"))
    assert e.ename.startswith('file_write is not loaded for this agent: write "tool_load')


def test_json_null_is_shown_as_json(app):
    e = refusal(app, lambda c: c.rdwr("session/w/agent/a/tools/needs/call",
                                      b'{"path": null}'))
    assert str(e).startswith("invalid args: path: null is not of type 'string'"), str(e)


def test_a_python_exception_points_to_err(app):
    e = refusal(app, lambda c: c.rdwr("session/w/agent/a/tools/boom/call", b"{}"))
    assert e.ename.startswith("exit 1 (input/output error), traceback in err: ")
    assert str(e).endswith("ValueError: no such widget: w1"), str(e)
    with Client.connect(app.addr) as c:
        assert c.read("session/w/agent/a/tools/boom/err").startswith(b"Traceback ")


def test_a_sandbox_refusal_fits_an_rerror_whole(app):
    e = refusal(app, lambda c: c.rdwr("session/w/agent/a/tools/file_read/call",
                                      json.dumps({"path": "/etc/hostname"}).encode()))
    assert str(e) == ("exit 1 (input/output error): file_read: permission denied: "
                      "/etc/hostname (outside the grants: toolsrv sandbox check)"), e.ename


def test_the_banner_says_the_bundled_tools_are_left_out(monkeypatch):
    from toolsrv.cli.banner import banner
    d = tools_dir()
    add_tool(d, "mine", "#!/bin/sh\necho mine\n")
    monkeypatch.setenv("OLLIE_TOOLS_PATH", d)
    a = AppThread(None).start()
    try:
        text = banner(a.app)
    finally:
        a.cleanup()
        shutil.rmtree(d, ignore_errors=True)
    assert (f"toolsrv: $OLLIE_TOOLS_PATH is set, without the bundled tools (file_read, "
            f"shell, ...): add {bundled.TOOLS} to it to serve them") in text.splitlines()


@pytest.mark.parametrize("page", ["toolsrv.1", "toolsrv.4"])
def test_the_man_pages_have_no_stray_backticks(page):
    with open(os.path.join(REPO, "toolsrv", "man", page), encoding="utf-8") as f:
        text = f.read()
    assert "`" not in text
    if page == "toolsrv.1":
        assert "OLLIE_BYPASS_SOCKET" in text and "\\-\\-version" in text


def test_the_banner_says_what_no_cgroup_per_run_costs_and_the_remedy():
    from types import SimpleNamespace
    from toolsrv.cli.banner import banner
    reg = SimpleNamespace(errors_text=lambda: "", tools={}, dirs=[bundled.TOOLS])
    runner = SimpleNamespace(summary=lambda: "per-run cgroup: none (cgroup v2: Permission "
                             "denied)", launcher=SimpleNamespace(cgroups="none"))
    app = SimpleNamespace(registry=reg, addrs=["unix!/tmp/x/toolsrv"], runner=runner)
    lines = banner(app).splitlines()
    assert lines[lines.index("toolsrv: sandbox: per-run cgroup: none (cgroup v2: Permission "
                             "denied)") + 1] == (
        "toolsrv: without a cgroup per run, one run's fork bomb or memory hog is bounded only "
        "per process and per uid (RLIMIT_NPROC, shared by every run), not per run; serve as "
        "root, or in a delegated cgroup (systemd-run --user --scope -p Delegate=yes toolsrv "
        "serve): doc/sandbox.md")
    runner.launcher.cgroups = "v2"
    assert not any("without a cgroup" in ln for ln in banner(app).splitlines())
