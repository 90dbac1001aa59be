"""A language server that is not Python (issue 31): bash-language-server from npm, set
up by the test (npm install into a cache directory, as tests/mcpface/test_inspector.py
does), behind lsp_* .meta files of its own and a profile that grants its install.
Without node and npm the test is skipped, saying so."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile

import pytest
import yaml

from apphelpers import AppThread, add_tool, tools_dir
from lsphelpers import write_project
from toolsrv.cli.client import Client

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VERSION = "5.8.1"
PACKAGE = f"bash-language-server@{VERSION}"
LIB = 'greet() {\n  echo "hello $1"\n}\n'
MAIN = "#!/bin/bash\nsource ./lib.sh\ngreet world\ngreet again\n"


@pytest.fixture(scope="module")
def bashls() -> str:
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.skip("node is absent (no node or npm on PATH): the non-Python language "
                    "server test needs node 16+ and npm (apt install nodejs npm)")
    cache = os.environ.get("TOOLSRV_TEST_CACHE") or os.path.expanduser("~/.cache/toolsrv-tests")
    prefix = os.path.join(cache, f"bash-language-server-{VERSION}")
    binary = os.path.join(prefix, "node_modules", ".bin", "bash-language-server")
    if not os.path.exists(binary):
        os.makedirs(prefix, exist_ok=True)
        p = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error",
                            "--prefix", prefix, PACKAGE], capture_output=True, text=True,
                           timeout=900, stdin=subprocess.DEVNULL)
        if p.returncode or not os.path.exists(binary):
            pytest.skip(f"npm could not install {PACKAGE} (offline?): "
                        f"{(p.stderr or p.stdout).strip()[-300:]}")
    return prefix


@pytest.fixture(scope="module")
def srv(bashls):
    d = tools_dir()
    for op in ("definition", "references", "symbols"):
        meta = json.load(open(os.path.join(REPO, "data", "tools", f"lsp_{op}.meta")))
        meta.update(cmd=f"exec {bashls}/node_modules/.bin/bash-language-server start",
                    sandbox="lspnode", resident={"protocol": "lsp", "tool": op,
                                                 "language": "shellscript",
                                                 "extensions": [".sh"]})
        add_tool(d, f"sh_{op}", None, meta)
    home = tempfile.mkdtemp(prefix="home.", dir="/tmp")
    prof = yaml.safe_load(open(os.path.join(REPO, "sandbox", "lsp.yaml")))
    prof["filesystem"]["rox"].append(os.path.realpath(bashls))
    os.makedirs(f"{home}/.config/ollie/sandbox")
    with open(f"{home}/.config/ollie/sandbox/lspnode.yaml", "w") as f:
        yaml.safe_dump(prof, f)
    old = os.environ.get("HOME")
    os.environ["HOME"] = home
    app = AppThread([d], timeout=120).start()
    yield app
    app.cleanup()
    os.environ["HOME"] = old or "/root"
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(d, ignore_errors=True)


def test_bash_language_server_answers_confined(srv):
    c = Client.connect(srv.addr)
    c.mkdir("session/sh")
    c.mkdir("session/sh/agent/a")
    c.rdwr("session/sh/agent/a/ctl", b"tool_load sh_definition sh_references sh_symbols")
    cwd = c.read("session/sh/cwd").decode().strip()
    write_project(cwd, {"lib.sh": LIB, "main.sh": MAIN})

    def call(tool: str, **args) -> str:
        return c.rdwr(f"session/sh/agent/a/tools/{tool}/call", json.dumps(args).encode()
                      ).decode()
    assert call("sh_definition", path="main.sh", line=3, column=2) == "lib.sh:1:1: greet() {\n"
    assert call("sh_references", path="lib.sh", line=1, column=1) == (
        "lib.sh:1:1: greet() {\nmain.sh:3:1: greet world\nmain.sh:4:1: greet again\n")
    assert call("sh_symbols", path="lib.sh") == "lib.sh:1:1: function greet [1-3]\n"
    assert call("sh_definition", symbol="greet") == "lib.sh:1:1: greet() {\n"
    c.close()
