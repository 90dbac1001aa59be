"""`toolsrv import-mcp` works as written, with no hand-written profile (issue 27, 4): it
writes the profile the server needs (the default's grants plus the server's own install,
rox) and names it in each .meta's `sandbox`; `--no-profile` keeps the old way.  Against the
real `mcp-server-time` from PyPI, called through 9P in the real sandbox.  And an error too
long for an Rerror is shortened in its middle, never through a path."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile

import pytest
import yaml

from apphelpers import AppThread, tools_dir
from toolsrv.cli.client import Client
from toolsrv.errors import ERRMAX, P9Error
from toolsrv.errors import fit

TIME = shutil.which("mcp-server-time", path=os.path.dirname(sys.executable))
needs_time = pytest.mark.skipif(TIME is None, reason="mcp-server-time is not installed "
                                "(the test extra of setup.cfg installs it)")


def import_mcp(home: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolsrv", "import-mcp", *argv],
                          capture_output=True, text=True, timeout=120,
                          env=dict(os.environ, HOME=home))


@pytest.fixture
def home():
    h = tempfile.mkdtemp(prefix="home.", dir="/tmp")
    os.chmod(h, 0o755)
    yield h
    shutil.rmtree(h, ignore_errors=True)


@needs_time
def test_import_writes_its_profile_and_the_tools_run_under_it(home):
    d = tools_dir()
    try:
        p = import_mcp(home, "--prefix", "time.", "--dir", d, "--", TIME,
                       "--local-timezone", "UTC")
        assert p.returncode == 0, p.stderr
        prof = os.path.join(home, ".config", "ollie", "sandbox", "mcp.time.yaml")
        assert f"wrote {prof} (sandbox profile mcp.time" in p.stdout, p.stdout
        data = yaml.safe_load(open(prof))
        venv = os.path.dirname(os.path.dirname(TIME))
        assert venv in data["filesystem"]["rox"] and "/usr" in data["filesystem"]["rox"]
        assert "{CWD}" in data["filesystem"]["rwx"]           # the default's grants, kept
        for n in ("time.get_current_time", "time.convert_time"):
            assert json.load(open(os.path.join(d, n + ".meta")))["sandbox"] == "mcp.time"
        # the same again is no change; another server's profile there is not replaced
        assert import_mcp(home, "--prefix", "time.", "--dir", d, "--force", "--", TIME,
                          "--local-timezone", "UTC").returncode == 0
        old = os.environ.get("HOME")
        os.environ["HOME"] = home          # where the server finds the user's profiles
        app = AppThread([d], timeout=20).start()
        try:
            with Client.connect(app.addr) as c:
                c.mkdir("session/t")
                c.mkdir("session/t/agent/a")
                c.rdwr("session/t/agent/a/ctl", b"tool_load time.get_current_time")
                out = c.rdwr("session/t/agent/a/tools/time.get_current_time/call",
                             b'{"timezone": "Europe/Paris"}')
            assert json.loads(out)["timezone"] == "Europe/Paris"
        finally:
            app.cleanup()
            if old is None:
                os.environ.pop("HOME", None)
            else:
                os.environ["HOME"] = old
    finally:
        shutil.rmtree(d, ignore_errors=True)


@needs_time
def test_no_profile_keeps_the_old_way_and_a_foreign_profile_is_not_replaced(home):
    d = tools_dir()
    try:
        p = import_mcp(home, "--no-profile", "--dir", d, "--", TIME)
        assert p.returncode == 0, p.stderr
        assert "the sandbox profile must grant (rox) for this server to run:" in p.stdout
        assert not os.path.exists(os.path.join(home, ".config", "ollie", "sandbox"))
        assert "sandbox" not in json.load(open(os.path.join(d, "get_current_time.meta")))
        sb = os.path.join(home, ".config", "ollie", "sandbox")
        os.makedirs(sb)
        with open(os.path.join(sb, "mcp.time.yaml"), "w") as f:
            f.write("filesystem: {}\n")
        e = os.path.join(d, "elsewhere")
        p = import_mcp(home, "--dir", e, "--profile", "mcp.time", "--", TIME)
        assert p.returncode == 1 and "mcp.time.yaml: file already exists" in p.stderr
        assert "nothing written" in p.stderr and not os.path.exists(e)
        assert open(os.path.join(sb, "mcp.time.yaml")).read() == "filesystem: {}\n"
        # one import-mcp wrote for another command line is said to be so
        os.remove(os.path.join(sb, "mcp.time.yaml"))
        assert import_mcp(home, "--dir", e, "--", TIME).returncode == 0
        p = import_mcp(home, "--dir", e + "2", "--", TIME, "--local-timezone", "UTC")
        assert p.returncode == 1 and "mcp.time.yaml: already written by import-mcp for " \
            f"another command ({TIME}); give --profile NAME" in p.stderr, p.stderr
    finally:
        shutil.rmtree(d, ignore_errors=True)


def test_a_long_error_is_shortened_in_the_middle_and_keeps_its_path_whole():
    path = "/home/someone/work/a-project/.venv/bin/mcp-server-time"
    why = ("could not start: the sandbox does not grant it rox, so the kernel refused the "
           f"exec of the server's program, exec: {path}: permission denied")
    e = P9Error(fit("resident: ", why, " (input/output error)"))
    assert len(e.ename.encode()) < ERRMAX
    assert path in e.ename and e.ename.startswith("resident: could not start: ")
    assert e.ename.endswith(" (input/output error)") and "..." in e.ename
    assert e.full == f"resident: {why} (input/output error)"
    long = P9Error("x " * 40 + path + " y" * 40)
    assert path in long.ename and len(long.ename.encode()) < ERRMAX
