"""The MCP Inspector's CLI (`@modelcontextprotocol/inspector --cli`, from npm) against
`toolsrv mcp` over stdio: tools/list and tools/call, an independent client.

Set-up installs the Inspector with npm into a cache directory (~/.cache/toolsrv-tests,
or $TOOLSRV_TEST_CACHE) when it is not there yet.  Version 0.15.0: the newer ones need
node 22 or later.  Without node and npm the test is skipped, saying so."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

from npmhelpers import npm_prefix  # noqa: E402


VERSION = "0.15.0"
PACKAGE = f"@modelcontextprotocol/inspector@{VERSION}"


@pytest.fixture(scope="module")
def inspector() -> str:
    binary = os.path.join("node_modules", ".bin", "mcp-inspector")
    return os.path.join(npm_prefix(f"inspector-{VERSION}", [PACKAGE], binary,
                                   "the MCP Inspector CLI test needs node 18+"), binary)


def inspect(binary: str, addr: str, *method: str) -> dict:
    p = subprocess.run([binary, "--cli", "-e", f"TOOLSRV_ADDR={addr}", sys.executable, "-m",
                        "toolsrv", "mcp", *method], capture_output=True, text=True,
                       timeout=180, cwd=tempfile.gettempdir(), stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout)


def test_inspector_lists_the_tools(inspector, server):
    out = inspect(inspector, server.addr, "--method", "tools/list")
    tools = {t["name"]: t for t in out["tools"]}
    assert {"echo", "fail", "marked", "content"} <= set(tools)
    assert tools["fail"]["inputSchema"]["required"] == ["n"]
    assert tools["echo"]["annotations"]["readOnlyHint"] is True
    assert tools["echo"]["annotations"]["openWorldHint"] is False    # default: no network


def test_inspector_calls_a_tool(inspector, server):
    out = inspect(inspector, server.addr, "--method", "tools/call", "--tool-name", "echo",
                  "--tool-arg", "a=1", "b=two")
    assert out["isError"] is False
    assert json.loads(out["content"][0]["text"]) == {"a": "1", "b": "two"}


def test_inspector_sees_an_error_result(inspector, server):
    out = inspect(inspector, server.addr, "--method", "tools/call", "--tool-name", "fail",
                  "--tool-arg", "n=1")
    assert out["isError"] is True
    assert out["content"][0]["text"].startswith("exit 3 (input/output error): oops-from-fail")
