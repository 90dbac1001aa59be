"""`toolsrv import-mcp -- VENV/bin/python server.py` works first time (issue 46, 6): a real
MCP SDK server (MCPServer, FastMCP's successor) in a venv of its own, its script in another
directory, imported with the profile import-mcp writes and called through 9P in the real
sandbox; and a server that cannot start under that profile is said to fail, with why,
before anything is written.  As root the tools run as nobody (idmapped grants); as an
ordinary user, as that user."""
from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import textwrap

import pytest
import yaml

from apphelpers import AppThread, tools_dir
from toolsrv.cli.client import Client

MCP = importlib.util.find_spec("mcp")
needs_sdk = pytest.mark.skipif(MCP is None, reason="the mcp SDK is not installed (the "
                               "mcp extra of setup.cfg installs it)")

SERVER = """
from mcp.server.mcpserver import MCPServer
{before}
mcp = MCPServer("fm")


@mcp.tool()
def add(a: int, b: int) -> int:
    \"\"\"Add two numbers.\"\"\"
    return a + b


if __name__ == "__main__":
    mcp.run()
"""


@pytest.fixture(scope="module")
def place():
    """A 0755 directory with venv/ (that sees the SDK), srv/ (the scripts) and home/."""
    top = tempfile.mkdtemp(prefix="fm.", dir="/tmp")
    os.chmod(top, 0o755)
    venv = os.path.join(top, "venv")
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", "--without-pip",
                    venv], check=True, timeout=120)
    py = os.path.join(venv, "bin", "python")
    if subprocess.run([py, "-c", "import mcp"], capture_output=True).returncode:
        # the SDK is in this test's venv, not the system's: a .pth shows it to the new one
        site = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()"
                               "['purelib'])"], capture_output=True, text=True,
                              check=True).stdout.strip()
        with open(os.path.join(site, "sdk.pth"), "w") as f:
            f.write(os.path.dirname(os.path.dirname(MCP.origin)) + "\n")
    for d in ("srv", "home", "data"):
        os.mkdir(os.path.join(top, d))
        os.chmod(os.path.join(top, d), 0o755)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def script(top: str, name: str, before: str = "") -> str:
    path = os.path.join(top, "srv", name)
    with open(path, "w") as f:
        f.write(textwrap.dedent(SERVER.format(before=before)))
    os.chmod(path, 0o644)
    return path


def import_mcp(top: str, *argv: str, cwd: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolsrv", "import-mcp", *argv],
                          capture_output=True, text=True, timeout=180, cwd=cwd,
                          env=dict(os.environ, HOME=os.path.join(top, "home")))


@needs_sdk
def test_a_python_server_py_in_its_own_venv_imports_and_answers(place):
    script(place, "fm_server.py")
    py = os.path.join(place, "venv", "bin", "python")
    d = tools_dir()
    try:        # the script as the user types it: relative to where they stand
        p = import_mcp(place, "--prefix", "fm.", "--dir", d, "--", py, "fm_server.py",
                       cwd=os.path.join(place, "srv"))
        assert p.returncode == 0, p.stderr
        meta = json.load(open(os.path.join(d, "fm.add.meta")))
        assert meta["cmd"] == f"exec {py} {place}/srv/fm_server.py"
        prof = os.path.join(place, "home", ".config", "ollie", "sandbox", "mcp.fm.yaml")
        rox = yaml.safe_load(open(prof))["filesystem"]["rox"]
        real = sys.base_prefix     # the interpreter's own installation, venv or not
        for need in (os.path.join(place, "venv"), os.path.join(place, "srv")):
            assert need in rox, (need, rox)
        assert any(real == r or real.startswith(r + "/") for r in rox), (real, rox)
        old = os.environ.get("HOME")
        os.environ["HOME"] = os.path.join(place, "home")   # where the server finds it
        app = AppThread([d], timeout=30).start()
        try:
            with Client.connect(app.addr) as c:
                c.mkdir("session/fm")
                c.mkdir("session/fm/agent/a")
                c.rdwr("session/fm/agent/a/ctl", b"tool_load fm.add")
                out = c.rdwr("session/fm/agent/a/tools/fm.add/call", b'{"a": 2, "b": 3}')
            assert json.loads(out) in (5, {"result": 5}) or out.strip() == b"5", out
        finally:
            app.cleanup()
            if old is None:
                os.environ.pop("HOME", None)
            else:
                os.environ["HOME"] = old
    finally:
        shutil.rmtree(d, ignore_errors=True)


@needs_sdk
def test_a_server_that_cannot_start_confined_is_said_and_nothing_is_written(place):
    conf = os.path.join(place, "data", "conf.txt")
    with open(conf, "w") as f:
        f.write("x")
    os.chmod(conf, 0o644)
    srv = script(place, "needs_conf.py", f"open({conf!r}).read()   # outside every grant")
    d = os.path.join(tools_dir(), "none")
    try:
        p = import_mcp(place, "--profile", "mcp.needsconf", "--dir", d, "--",
                       os.path.join(place, "venv", "bin", "python"), srv)
        assert p.returncode == 1, p.stdout
        err = p.stderr
        assert "the server does not start under the sandbox profile mcp.needsconf written " \
            "for it: " in err, err
        assert "Permission denied" in err and conf in err, err
        assert "add what it also reads to rox" in err and "nothing written" in err, err
        assert not os.path.exists(d)
        assert not os.path.exists(os.path.join(place, "home", ".config", "ollie", "sandbox",
                                               "mcp.needsconf.yaml"))
    finally:
        shutil.rmtree(os.path.dirname(d), ignore_errors=True)
