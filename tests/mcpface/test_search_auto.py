"""`toolsrv mcp --search auto` (issue 51.3): every tool is listed while their definitions
fit the budget (--search-budget BYTES), search_tools and call_tool past it, with the
tools of --pin listed beside them and callable by name; search_tools' description says
what the catalog holds (its largest groups, with counts); a registry that grows past the
budget while the face runs is listed the other way after list_changed.  Through the
SDK's client, over stdio and over streamable HTTP (the 2026-era Client)."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile

import anyio
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

from mcphelpers import (FACE, HttpFace, Notes, add_tool, env, face_tools,  # noqa: E402
                        modern_client, stdio_face, text)

GROUPED = {"file_read2": "Read a text file.", "file_write2": "Write a text file.",
           "file_list2": "List a directory.", "lsp_hover2": "Hover text of a symbol.",
           "lsp_rename2": "Rename a symbol."}
META = ["search_tools", "call_tool"]


@pytest.fixture(scope="module")
def tools(tools):
    """The face's tools, and two groups: file_* (3) and lsp_* (2)."""
    for name, desc in GROUPED.items():
        add_tool(tools, name, "#!/bin/sh\ncat\n", {"description": desc, "readOnly": True})
    return tools


def names(listed) -> list[str]:
    return [t.name for t in listed.tools]


def test_under_the_budget_every_tool_is_listed(server):
    async def go():
        async with stdio_face("-a", server.addr, "--search", "auto") as s:
            listed = await s.list_tools()
            # the search tools are served all the same (a client that listed before a
            # switch keeps working), though not listed
            via = await s.call_tool("call_tool", {"name": "echo", "arguments": {"v": 1}})
            return listed, via, s.instructions
    listed, via, instructions = anyio.run(go)
    got = names(listed)
    assert {"echo", "fail", "marked", "content", *GROUPED} <= set(got)
    assert not set(META) & set(got)
    assert got == sorted(got)
    assert via.is_error is False and json.loads(text(via)) == {"v": 1}
    assert "70,000 bytes" in instructions and "search_tools" in instructions


def test_past_the_budget_the_search_tools_and_the_pinned_ones(server):
    log = tempfile.NamedTemporaryFile("w+", prefix="mcp-auto.", delete=False)

    async def go():
        async with stdio_face("-a", server.addr, "--search", "auto", "--search-budget",
                              "500", "--pin", "echo,nosuch", "--pin", "fail",
                              errlog=log) as s:
            listed = await s.list_tools()
            direct = await s.call_tool("echo", {"y": 2})        # pinned: called by name
            bad = await s.call_tool("fail", {"n": "x"})
            via = await s.call_tool("call_tool", {"name": "content", "arguments": {}})
            return listed, direct, bad, via
    try:
        listed, direct, bad, via = anyio.run(go)
        stderr = open(log.name).read()
    finally:
        log.close()
        os.unlink(log.name)
    assert names(listed) == [*META, "echo", "fail"]
    assert direct.is_error is False and json.loads(text(direct)) == {"y": 2}
    assert bad.is_error is True and "invalid args: n:" in text(bad)
    assert via.is_error is False and text(via) == "onetwo"
    desc = listed.tools[0].description
    # the catalog: every tool of the registry, its largest groups first, with counts
    assert f"The catalog holds {4 + len(GROUPED)} tools: file_* (3), lsp_* (2); " \
           "and 4 others: content, echo, fail, marked." in desc
    assert "--search auto: 9 tools, past the budget of 500 bytes" in stderr
    assert "--pin nosuch: no such tool in the registry" in stderr


def test_always_keeps_listing_the_two_and_pins_beside_them(server):
    async def go():
        async with stdio_face("-a", server.addr, "--search", "always",
                              "--pin", "marked") as s:
            return await s.list_tools()
    listed = anyio.run(go)
    assert names(listed) == [*META, "marked"]
    assert "The catalog holds 9 tools: file_* (3), lsp_* (2)" in listed.tools[0].description


def test_over_http_the_modern_client_sees_the_same(server):
    face = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", "--search", "auto",
                    "--search-budget", "500", "--pin", "content")
    try:
        async def go():
            async with modern_client(face.url, face.token) as c:
                async with c:
                    listed = await c.list_tools()
                    res = await c.call_tool("content", {})
                    return listed, res
        listed, res = anyio.run(go)
    finally:
        face.stop()
    assert [t.name for t in listed.tools] == [*META, "content"]
    assert "file_* (3)" in listed.tools[0].description
    assert res.is_error is False and text(res) == "onetwo"


def test_a_registry_growing_past_the_budget_switches_the_listing():
    """Tools added to the tools directory while the face runs: list_changed, and the
    next tools/list has the search tools (and the pin) instead of every tool."""
    from apphelpers import AppThread
    from serverhelpers import stop_clean
    d = face_tools()
    app = AppThread([d]).start()
    notes = Notes()

    async def go():
        async with stdio_face("-a", app.addr, "--search", "auto", "--search-budget",
                              "4000", "--pin", "echo", handler=notes) as s:
            before = await s.list_tools()
            for i in range(4):      # 4 x about 1,500 bytes: past 4,000 with the rest
                add_tool(d, f"big_{i}", "#!/bin/sh\ncat\n",
                         {"description": f"big tool {i} " + "words " * 230})
            while True:             # each revision is told; the last one holds all four
                await notes.wait()
                notes.event = anyio.Event()
                after = await s.list_tools()
                if "big_3" in after.tools[0].description or \
                        "big_* (4)" in after.tools[0].description:
                    return before, after
    try:
        before, after = anyio.run(go)
    finally:
        stop_clean(app)
        shutil.rmtree(d, ignore_errors=True)
    assert set(names(before)) == {"echo", "fail", "marked", "content"}
    assert names(after) == [*META, "echo"]
    assert "The catalog holds 8 tools: big_* (4); and 4 others" in after.tools[0].description


def run_mcp(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([*FACE, *args], env=env(), capture_output=True, text=True,
                          timeout=60, cwd=tempfile.gettempdir())


def test_the_options_are_checked_and_carried_by_config():
    p = run_mcp("--search-budget", "1000")
    assert p.returncode == 2 and "--search-budget is the budget of --search auto" in p.stderr
    p = run_mcp("--search", "auto", "--search-budget", "-3")
    assert p.returncode == 2 and "give the bytes, a whole number" in p.stderr
    p = run_mcp("--search", "sometimes")
    assert p.returncode == 2 and "invalid choice" in p.stderr
    p = run_mcp("--config", "--search", "auto", "--search-budget", "9000", "--pin", "a,b")
    assert p.returncode == 0, p.stderr
    args = json.loads(p.stdout)["mcpServers"]["toolsrv"]["args"]
    assert args[3:] == ["--search", "auto", "--search-budget", "9000", "--pin", "a,b"]
    p = run_mcp("--config", "--search")             # as before: always, said as --search
    assert json.loads(p.stdout)["mcpServers"]["toolsrv"]["args"][3:] == ["--search"]


def test_the_listing_is_decided_off_the_event_loop():
    """A listing reads every tool (the catalog's summary: 0.2 s at 10,000), so the face
    decides it in the mode's worker thread: here the decision waits for the loop to run
    a callback, which it could not if the decision held the loop."""
    import asyncio
    import threading

    from toolsrv.mcp.search.mode import AUTO, Mode
    from toolsrv.mcp.tools import Tool

    tools = {f"t{i}": Tool(f"t{i}", "x" * 100, {"type": "object"}, True, "")
             for i in range(20)}
    ran, threads = threading.Event(), set()

    def may(name: str) -> bool:
        threads.add(threading.get_ident())
        return ran.wait(10 if name == "t0" else 0)  # False had the loop been held

    async def go():
        mode = Mode(AUTO, budget=500)
        asyncio.get_running_loop().call_soon(ran.set)
        return await mode.listed(tools, may), threading.get_ident()
    listed, loop_thread = asyncio.run(go())
    assert [t.name for t in listed] == META        # past 500 bytes: the two
    assert threads and loop_thread not in threads
