"""The MCP TypeScript SDK's client (`@modelcontextprotocol/sdk` from npm) against
`toolsrv mcp --http` (issue 29's "done when"): list_changed over HTTP (the SDK trusts the
advertised capability), progress with `resetTimeoutOnProgress`, annotations, structured
content (validated by the SDK against the listed outputSchema), prompts, and the log as a
resource with updates.  The client is tests/mcpface/ts/client.mjs.

Set-up installs the SDK with npm into a cache directory (~/.cache/toolsrv-tests, or
$TOOLSRV_TEST_CACHE), as test_inspector.py installs the Inspector; without node and npm
the test is skipped, saying so."""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

from mcphelpers import HttpFace  # noqa: E402
from npmhelpers import npm_prefix  # noqa: E402
from test_features import STATS, tools  # noqa: E402,F401  (the same tools)

VERSION = "1.32.2"
PACKAGE = f"@modelcontextprotocol/sdk@{VERSION}"
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ts", "client.mjs")
NEEDS = "the TypeScript SDK test needs node 18+"


def install() -> str:
    """The cache directory the SDK is installed in (test_progress.py's client uses it too)."""
    return npm_prefix(f"ts-sdk-{VERSION}", [PACKAGE], os.path.join(
        "node_modules", "@modelcontextprotocol", "sdk", "package.json"), NEEDS)


@pytest.fixture(scope="module")
def sdk() -> str:
    """The directory the SDK is installed in (a node_modules beside the client)."""
    prefix = install()
    shutil.copy(SCRIPT, os.path.join(prefix, "client.mjs"))   # resolves its node_modules
    return prefix


def test_the_typescript_sdk_client_over_http(sdk, server, tools):  # noqa: F811
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0")
    try:
        p = subprocess.run(["node", os.path.join(sdk, "client.mjs"), f.url, f.token, tools],
                           capture_output=True, text=True, timeout=300,
                           stdin=subprocess.DEVNULL)
        assert p.returncode == 0, p.stderr[-3000:]
        out = json.loads(p.stdout.strip().splitlines()[-1])
    finally:
        f.stop()
        for n in ("ts_newcomer.meta",):
            if os.path.exists(os.path.join(tools, n)):
                os.unlink(os.path.join(tools, n))
    caps = out["capabilities"]
    assert caps["tools"]["listChanged"] is True and caps["prompts"]["listChanged"] is True
    assert caps["resources"]["subscribe"] is True
    assert "ts_newcomer" in out["changedTo"]                 # its handler was called
    assert out["pure"]["title"] == "Pure echo"
    assert out["pure"]["annotations"] == {"title": "Pure echo", "readOnlyHint": True,
                                          "openWorldHint": False}
    assert out["wipe"]["destructiveHint"] is True and out["wipe"]["idempotentHint"] is True
    assert out["statsSchema"] == STATS
    assert out["stats"] == {"isError": False, "structuredContent": {"n": 3}}
    assert out["prompts"] == ["pure"] and out["prompt"] == "Use pure to echo things back."
    assert out["resources"] == ["toolsrv://agent/log", "toolsrv://agent/tools.py"]
    assert out["updated"] == "toolsrv://agent/log" and "call pure" in out["log"]
    assert out["slow"]["text"].strip() == "done" and len(out["slow"]["progress"]) >= 2
    assert "timed out" in out["slowWithoutReset"].lower(), out["slowWithoutReset"]
