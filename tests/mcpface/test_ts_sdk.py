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

from apphelpers import AppThread  # noqa: E402
from mcphelpers import HttpFace  # noqa: E402
from serverhelpers import stop_clean  # noqa: E402
from test_features import STATS, tools  # noqa: E402,F401  (the same tools)

VERSION = "1.32.2"
PACKAGE = f"@modelcontextprotocol/sdk@{VERSION}"
SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "ts", "client.mjs")


@pytest.fixture(scope="module")
def sdk() -> str:
    """The directory the SDK is installed in (a node_modules beside the client)."""
    node, npm = shutil.which("node"), shutil.which("npm")
    if not node or not npm:
        pytest.skip("node is absent (no node or npm on PATH): the TypeScript SDK test needs "
                    "node 18+ and npm (apt install nodejs npm)")
    cache = os.environ.get("TOOLSRV_TEST_CACHE") or os.path.expanduser("~/.cache/toolsrv-tests")
    prefix = os.path.join(cache, f"ts-sdk-{VERSION}")
    if not os.path.exists(os.path.join(prefix, "node_modules", "@modelcontextprotocol", "sdk",
                                       "package.json")):
        os.makedirs(prefix, exist_ok=True)
        p = subprocess.run([npm, "install", "--no-audit", "--no-fund", "--loglevel=error",
                            "--prefix", prefix, PACKAGE], capture_output=True, text=True,
                           timeout=900, stdin=subprocess.DEVNULL)
        if p.returncode:
            pytest.skip(f"npm could not install {PACKAGE} (offline?): "
                        f"{(p.stderr or p.stdout).strip()[-300:]}")
    shutil.copy(SCRIPT, os.path.join(prefix, "client.mjs"))   # resolves its node_modules
    return prefix


@pytest.fixture(scope="module")
def server(tools):  # noqa: F811
    app = AppThread([tools]).start()
    yield app
    stop_clean(app)


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
    assert out["resources"] == ["toolsrv://agent/log"]
    assert out["updated"] == "toolsrv://agent/log" and "call pure" in out["log"]
    assert out["slow"]["text"].strip() == "done" and len(out["slow"]["progress"]) >= 2
    assert "timed out" in out["slowWithoutReset"].lower(), out["slowWithoutReset"]
