"""tools/list as clients rely on it (issue 29, bugs 2 and 3, item 9): a `"type":
["object"]` args schema listed as written (as `"type": "object"`, everything else kept),
pages of PAGE tools with an opaque cursor that the SDK's client follows to the whole
list, and an invalid cursor answered -32602."""
from __future__ import annotations


import anyio
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

from mcp.shared.exceptions import MCPError  # noqa: E402
import mcp_types as types  # noqa: E402

from apphelpers import add_tool  # noqa: E402
from mcphelpers import stdio_face, text  # noqa: E402
from toolsrv.mcp.server import PAGE  # noqa: E402

MANY = PAGE * 2 + 37


@pytest.fixture(scope="module")
def tools(tools):                   # conftest.py's, and these
    d = tools
    add_tool(d, "listy", "#!/bin/sh\ncat\n", {"args": {
        "type": ["object"], "properties": {"q": {"type": "string"}}, "required": ["q"],
        "additionalProperties": False}})
    for n in range(MANY):
        add_tool(d, f"bulk{n:04d}", None, {"description": f"bulk tool {n}", "cmd": "cat"})
    return d


def test_a_type_list_schema_is_listed_as_written_and_callable(server):
    async def go():
        async with stdio_face("-a", server.addr) as s:
            seen = {}
            cursor = None
            while True:
                page = await s.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
                seen.update({t.name: t for t in page.tools})
                cursor = page.next_cursor
                if cursor is None:
                    break
            ok = await s.call_tool("listy", {"q": "found"})
            bad = await s.call_tool("listy", {})
            return seen["listy"].input_schema, ok, bad
    schema, ok, bad = anyio.run(go)
    assert schema == {"type": "object", "properties": {"q": {"type": "string"}},
                      "required": ["q"], "additionalProperties": False}
    assert ok.is_error is False and '"q": "found"' in text(ok)
    assert bad.is_error is True and "'q' is a required property" in text(bad)


def test_tools_list_pages_and_the_client_gets_the_whole_list(server):
    async def go():
        async with stdio_face("-a", server.addr) as s:
            pages, cursor = [], None
            while True:
                page = await s.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
                pages.append([t.name for t in page.tools])
                cursor = page.next_cursor
                if cursor is None:
                    return pages
    pages = anyio.run(go)
    assert [len(p) for p in pages[:-1]] == [PAGE] * (len(pages) - 1) and len(pages) == 3
    names = [n for p in pages for n in p]
    assert len(names) == len(set(names))                 # no tool twice
    assert {f"bulk{n:04d}" for n in range(MANY)} | {"echo", "fail", "listy"} <= set(names)


@pytest.mark.parametrize("cursor", ["not-a-cursor", "dG9vbHNydi1vZmZzZXQtOTk5OTk5",
                                    "dG9vbHNydi1vZmZzZXQtLTE=", ""])
def test_an_invalid_cursor_is_invalid_params(server, cursor):
    async def go():
        async with stdio_face("-a", server.addr) as s:
            with pytest.raises(MCPError) as e:
                await s.list_tools(params=types.PaginatedRequestParams(cursor=cursor))
            after = await s.list_tools()             # and the connection serves on
            return e.value, after
    err, after = anyio.run(go)
    assert err.code == -32602 and "invalid cursor" in err.message
    assert len(after.tools) == PAGE and after.next_cursor
