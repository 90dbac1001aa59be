"""A tool's secret through `toolsrv mcp` (issue 50.1): the MCP result of a run that prints
its secret, and of one that fails with it, says `[secret NAME]`, never the value.  The
face is a real process (the SDK's stdio client) beside a whole toolsrv on a thread
holding the value in its HOME."""
from __future__ import annotations

import os
import tempfile

import anyio
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

from apphelpers import AppThread, add_tool, tools_dir  # noqa: E402
from mcphelpers import stdio_face, text  # noqa: E402
from serverhelpers import stop_clean  # noqa: E402

VALUE = "mcp-" + os.urandom(10).hex()


@pytest.fixture
def server():
    home = tempfile.mkdtemp(prefix="mcphome.", dir="/tmp")
    d = os.path.join(home, ".config", "ollie", "secrets")
    os.makedirs(d, mode=0o700)
    with open(os.path.join(d, "MCP_TOKEN"), "w") as f:
        f.write(VALUE + "\n")
    os.chmod(os.path.join(d, "MCP_TOKEN"), 0o600)
    old = os.environ.get("HOME")
    os.environ["HOME"] = home
    t = tools_dir()
    add_tool(t, "shows", '#!/bin/sh\necho "token $MCP_TOKEN"\n', {"secrets": ["MCP_TOKEN"]})
    add_tool(t, "fails", '#!/bin/sh\necho "no good: $MCP_TOKEN" >&2\nexit 2\n',
             {"secrets": ["MCP_TOKEN"]})
    app = AppThread([t]).start()
    yield app
    stop_clean(app)
    os.environ["HOME"] = old or "/root"


def test_an_mcp_result_shows_the_mark_not_the_value(server):
    async def go():
        async with stdio_face("-a", server.addr) as s:
            ok = await s.call_tool("shows", {})
            bad = await s.call_tool("fails", {})
            return ok, bad
    ok, bad = anyio.run(go)
    assert ok.is_error is False and text(ok) == "token [secret MCP_TOKEN]\n"
    assert bad.is_error is True and "no good: [secret MCP_TOKEN]" in text(bad)
    assert VALUE not in repr(ok) + repr(bad)
