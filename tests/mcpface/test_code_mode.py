"""Code mode through the MCP face (issue 45.4): the agent's tools.py is a resource, and the
bundled `script` tool is served like any tool, in --search mode too (search_tools finds it,
call_tool runs it), its `import tools` reaching every tool the face serves."""
from __future__ import annotations

import json
import os
import shutil

import anyio
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

from mcphelpers import stdio_face, text  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUNDLED = os.path.join(REPO, "data", "tools")
TOOLS_PY = "toolsrv://agent/tools.py"
PROGRAM = """import tools
print("echoed", tools.echo(x=1).strip())
try:
    tools.fail(n=2)
except tools.ToolError as e:
    print("failed:", e.reason.splitlines()[0])
"""


@pytest.fixture(scope="module")
def server(tools):
    from apphelpers import AppThread
    from serverhelpers import stop_clean
    app = AppThread([BUNDLED, tools]).start()
    yield app
    stop_clean(app)


def test_tools_py_is_a_resource_that_compiles(server):
    async def go():
        async with stdio_face("-a", server.addr) as s:
            listed = {str(r.uri): r for r in (await s.list_resources()).resources}
            got = await s.read_resource(TOOLS_PY)
            return listed, got
    listed, got = anyio.run(go)
    assert TOOLS_PY in listed and listed[TOOLS_PY].mime_type == "text/x-python"
    src = got.contents[0].text
    compile(src, "tools.py", "exec")
    assert "def echo(" in src and "def file_read(" in src and "def script(" in src


def test_script_through_search_mode(server):
    async def go():
        async with stdio_face("-a", server.addr, "--search") as s:
            found = await s.call_tool("search_tools", {"need": "run a python program that "
                                                       "calls many tools in one go"})
            ran = await s.call_tool("call_tool", {"name": "script",
                                                  "arguments": {"code": PROGRAM}})
            broken = await s.call_tool("call_tool", {"name": "script", "arguments": {
                "code": "raise ValueError('no good')"}})
            return found, ran, broken
    found, ran, broken = anyio.run(go)
    if not found.is_error:          # a tree without tools/search says so in an error
        assert "script" in text(found)
    assert ran.is_error is False, text(ran)
    assert text(ran).splitlines()[0] == "echoed " + json.dumps({"x": 1})
    assert "failed: " in text(ran) and "exit 3" in text(ran)
    assert broken.is_error is True and "ValueError: no good" in text(broken)


def test_script_is_listed_like_any_tool(server):
    async def go():
        async with stdio_face("-a", server.addr) as s:
            names = [t.name for t in (await s.list_tools()).tools]
            ran = await s.call_tool("script", {"code": "import tools\n"
                                               "print(tools.echo(y=2))"})
            return names, ran
    names, ran = anyio.run(go)
    assert "script" in names
    assert ran.is_error is False and json.loads(text(ran)) == {"y": 2}
