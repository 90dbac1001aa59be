"""The 2026-07-28 era of MCP (no initialize: `server/discover`, a request envelope, and
`subscriptions/listen` for change notifications), as the SDK's `Client` speaks it when
the server offers it (mode "auto"), over stdio and over streamable HTTP: list, call, an
error result, an unknown tool, and tools_list_changed on a listen stream."""
from __future__ import annotations

import json
import os
import tempfile

import anyio
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

from mcp import StdioServerParameters  # noqa: E402
from mcp.client.client import Client  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402
from mcp_types.version import MODERN_PROTOCOL_VERSIONS  # noqa: E402

from mcphelpers import (CLIENT, FACE, WAIT, HttpFace, add_tool, env, modern_client, text)  # noqa: E402
from serverhelpers import wait_for  # noqa: E402
from toolsrv.cli.client import Client as NineClient  # noqa: E402


def sessions(addr: str) -> list[str]:
    with NineClient.connect(addr) as c:
        return [e.name for e in c.ls("session")]


async def exercise(client: Client, tools: str, newcomer: str) -> dict:
    out: dict = {}
    async with client:
        out["version"] = client.session.protocol_version
        out["names"] = {t.name for t in (await client.list_tools()).tools}
        out["ok"] = await client.call_tool("echo", {"modern": True})
        out["bad"] = await client.call_tool("fail", {"n": "x"})
        with pytest.raises(MCPError) as e:
            await client.call_tool("no_such_tool", {})
        out["unknown"] = e.value
        with anyio.fail_after(WAIT):
            async with client.listen(tools_list_changed=True) as sub:
                add_tool(tools, newcomer, "#!/bin/sh\necho hi\n")
                async for _ in sub:
                    break
        out["after"] = {t.name for t in (await client.list_tools()).tools}
    return out


def check(out: dict, newcomer: str) -> None:
    assert out["version"] in MODERN_PROTOCOL_VERSIONS
    assert {"echo", "fail"} <= out["names"]
    assert out["ok"].is_error is False and json.loads(text(out["ok"])) == {"modern": True}
    assert out["bad"].is_error is True and "invalid args: n:" in text(out["bad"])
    assert "unknown tool: no_such_tool" in out["unknown"].message
    assert newcomer in out["after"]


def test_modern_client_over_stdio(server, tools):
    params = StdioServerParameters(command=FACE[0], args=[*FACE[1:], "-a", server.addr],
                                   env=env(), cwd=tempfile.gettempdir())
    try:
        check(anyio.run(exercise, Client(params, client_info=CLIENT), tools, "modern_stdio"),
              "modern_stdio")
        # a 2026-era seat is the client's, kept until toolsrv mcp exits: then removed
        assert wait_for(lambda: not [n for n in sessions(server.addr)
                                     if n.startswith("pytest-client-")])
    finally:
        for f in ("modern_stdio", "modern_stdio.meta"):
            if os.path.exists(os.path.join(tools, f)):
                os.unlink(os.path.join(tools, f))


def test_modern_client_over_http(server, tools):
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0")

    async def go():
        async with modern_client(f.url, f.token) as c:
            return await exercise(c, tools, "modern_http")
    try:
        check(anyio.run(go), "modern_http")
    finally:
        f.stop()
        for n in ("modern_http", "modern_http.meta"):
            if os.path.exists(os.path.join(tools, n)):
                os.unlink(os.path.join(tools, n))
