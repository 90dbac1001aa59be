"""`toolsrv mcp` over stdio, with the official SDK's client, against a real toolsrv.

Each test starts `toolsrv mcp -a ADDR` as a process (the SDK's stdio_client) beside a
whole toolsrv on a thread (apphelpers.AppThread): list, call, error results for bad args
and for a failing tool, MCP errors for an unknown tool and for args that are not an
object (the server serving on after each), cancellation killing the run's process,
list_changed after a .meta change, and the session a connection makes and removes.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import uuid

import anyio
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

from mcp.shared.exceptions import MCPError  # noqa: E402

from apphelpers import AppThread, add_tool, tools_dir  # noqa: E402
from mcphelpers import (FACE, Notes, env, face_tools, raw_initialize, raw_reply,  # noqa: E402
                        raw_rpc, stdio_face, text)
from serverhelpers import stop_clean, wait_for  # noqa: E402
from toolsrv.cli.client import Client  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tools"))
from sandbox_support import processes_with  # noqa: E402


def sessions(addr: str) -> list[str]:
    with Client.connect(addr) as c:
        return sorted(e.name for e in c.ls("session"))


def test_list_has_the_tools_with_their_schemas(server):
    async def go():
        async with stdio_face("-a", server.addr) as s:
            tools = {t.name: t for t in (await s.list_tools()).tools}
            return tools, s.instructions, s.server_capabilities
    tools, instructions, caps = anyio.run(go)
    assert {"echo", "fail", "marked", "content"} <= set(tools)
    assert tools["fail"].input_schema == {"type": "object", "properties": {
        "n": {"type": "integer"}}, "required": ["n"]}
    assert tools["echo"].description == "echo the args"
    assert tools["echo"].annotations.read_only_hint is True
    assert tools["fail"].annotations.read_only_hint is False          # facts, not guesses:
    assert tools["fail"].annotations.destructive_hint is None          # its .meta says none
    assert tools["fail"].annotations.open_world_hint is False          # default: no network
    assert "Landlock" in instructions and "toolsrv" in instructions
    assert caps.tools.list_changed is True


def test_call_returns_the_output_as_text(server):
    async def go():
        async with stdio_face("-a", server.addr) as s:
            return await s.call_tool("echo", {"path": "a b", "n": [1, 2]})
    r = anyio.run(go)
    assert r.is_error is False
    assert json.loads(text(r)) == {"path": "a b", "n": [1, 2]}


def test_a_content_object_passes_through(server):
    async def go():
        async with stdio_face("-a", server.addr) as s:
            return await s.call_tool("content", {})
    r = anyio.run(go)
    assert [c.text for c in r.content] == ["one", "two"] and r.is_error is False


def test_bad_args_are_an_error_result_with_the_reason(server):
    async def go():
        async with stdio_face("-a", server.addr) as s:
            bad = await s.call_tool("fail", {"n": "x"})
            missing = await s.call_tool("fail", {})
            again = await s.call_tool("echo", {"still": "serving"})
            return bad, missing, again
    bad, missing, again = anyio.run(go)
    assert bad.is_error is True
    assert "invalid args: n: 'x' is not of type 'integer'" in text(bad)
    assert "\nlog: " in text(bad) and "call fail" in text(bad)      # the log line, in full
    assert missing.is_error is True and "'n' is a required property" in text(missing)
    assert again.is_error is False and json.loads(text(again)) == {"still": "serving"}


def test_a_failing_tool_is_an_error_result_with_the_log_line(server):
    async def go():
        async with stdio_face("-a", server.addr) as s:
            return await s.call_tool("fail", {"n": 1})
    r = anyio.run(go)
    assert r.is_error is True
    first, _, logline = text(r).partition("\nlog: ")
    assert first.startswith("exit 3 (input/output error): oops-from-fail")
    assert "call fail -> exit 3" in logline and "oops-from-fail" in logline


def test_unknown_tool_is_an_mcp_error_and_the_server_serves_on(server):
    async def go():
        async with stdio_face("-a", server.addr) as s:
            with pytest.raises(MCPError) as e:
                await s.call_tool("no_such_tool", {})
            ok = await s.call_tool("echo", {"after": 1})
            return e.value, ok
    err, ok = anyio.run(go)
    assert err.code == -32602
    assert "unknown tool: no_such_tool" in err.message
    assert ok.is_error is False


def test_args_not_an_object_is_an_mcp_error_and_the_server_serves_on(server):
    """Raw JSON-RPC: the SDK's client cannot send such arguments."""
    p = subprocess.Popen([*FACE, "-a", server.addr], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env(),
                         cwd=tempfile.gettempdir())
    try:
        raw_initialize(p)
        for i, (bad, what) in enumerate((([1, 2], "an array"), ("text", "a string"),
                                         (7, "a number")), start=2):
            raw_rpc(p, {"jsonrpc": "2.0", "id": i, "method": "tools/call",
                        "params": {"name": "echo", "arguments": bad}})
            r = raw_reply(p, i)
            assert r["error"]["code"] == -32602, r
            assert r["error"]["message"] == (f"invalid arguments for 'echo': they must be an "
                                             f"object of the tool's parameters, not {what}")
        raw_rpc(p, {"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"ok": True}}})
        r = raw_reply(p, 9)
        assert r["result"]["isError"] is False
        assert json.loads(r["result"]["content"][0]["text"]) == {"ok": True}
    finally:
        p.stdin.close()
        p.wait(30)
        p.stdout.close()


def test_cancel_kills_the_run(server):
    marker = f"600.{uuid.uuid4().int % 10**9:09d}"

    async def go():
        async with stdio_face("-a", server.addr) as s:
            async with anyio.create_task_group() as tg:
                tg.start_soon(s.call_tool, "marked", {"s": marker})
                with anyio.fail_after(30):
                    while not processes_with(marker):
                        await anyio.sleep(0.02)
                tg.cancel_scope.cancel()       # the SDK sends notifications/cancelled
            with anyio.fail_after(30):
                while processes_with(marker):
                    await anyio.sleep(0.02)
            name = [n for n in sessions(server.addr) if n.startswith("pytest-client-")]
            with Client.connect(server.addr) as c:
                status = c.read(f"session/{name[0]}/agent/pytest-client/tools/marked/"
                                "status").decode()
            ok = await s.call_tool("echo", {"after": "cancel"})
            return status, ok
    status, ok = anyio.run(go)
    assert status.startswith("killed"), status
    assert processes_with(marker) == []
    assert ok.is_error is False


def test_a_connection_has_its_session_made_here_and_removed_at_the_end(server):
    here = tempfile.mkdtemp(prefix="mcp-cwd.", dir="/tmp")
    os.chmod(here, 0o755)

    async def go():
        async with stdio_face("-a", server.addr, cwd=here) as s:
            await s.call_tool("echo", {})
            name = f"pytest-client-{os.getpid()}"    # the client's name and pid
            assert name in sessions(server.addr)
            with Client.connect(server.addr) as c:
                cwd = c.read(f"session/{name}/cwd").decode().strip()
                agents = [e.name for e in c.ls(f"session/{name}/agent")]
            return name, cwd, agents
    try:
        name, cwd, agents = anyio.run(go)
        assert cwd == here and agents == ["pytest-client"]
        assert wait_for(lambda: name not in sessions(server.addr))
    finally:
        shutil.rmtree(here, ignore_errors=True)


def test_session_and_agent_given_are_kept(server):
    async def go():
        async with stdio_face("-a", server.addr, "--session", "kept", "--agent", "me") as s:
            return await s.call_tool("echo", {"k": 1})
    try:
        assert anyio.run(go).is_error is False
        with Client.connect(server.addr) as c:
            assert [e.name for e in c.ls("session/kept/agent")] == ["me"]
            assert c.read("session/kept/agent/me/ctl") == b"echo\n"
    finally:
        with Client.connect(server.addr) as c:
            c.rm("session/kept")


def test_tools_option_narrows_the_listing_and_the_calls(server):
    async def go():
        async with stdio_face("-a", server.addr, "--tools", "echo,content") as s:
            names = sorted(t.name for t in (await s.list_tools()).tools)
            with pytest.raises(MCPError) as e:
                await s.call_tool("fail", {"n": 1})
            return names, e.value
    names, err = anyio.run(go)
    assert names == ["content", "echo"]
    assert "unknown tool: fail" in err.message


def test_list_changed_after_a_meta_change():
    d = tools_dir()
    add_tool(d, "echo", "#!/bin/sh\ncat\n")
    app = AppThread([d]).start()
    notes = Notes()

    async def go():
        async with stdio_face("-a", app.addr, handler=notes) as s:
            before = [t.name for t in (await s.list_tools()).tools]
            add_tool(d, "newcomer", "#!/bin/sh\necho hi\n", {"description": "new here"})
            await notes.wait()
            after = {t.name: t for t in (await s.list_tools()).tools}
            return before, after
    try:
        before, after = anyio.run(go)
        assert before == ["echo"]
        assert after["newcomer"].description == "new here"
        assert len(notes.got) >= 1
    finally:
        stop_clean(app)
        shutil.rmtree(d, ignore_errors=True)


def test_content_that_is_not_mcp_content_comes_back_as_text():
    d = tools_dir()
    out = '{"content": [{"type": "nonsense", "x": 1}]}'
    add_tool(d, "odd", f"#!/bin/sh\nprintf '%s' '{out}'\n")
    app = AppThread([d]).start()

    async def go():
        async with stdio_face("-a", app.addr) as s:
            return await s.call_tool("odd", {})
    try:
        r = anyio.run(go)
        assert r.is_error is False and text(r) == out
    finally:
        stop_clean(app)
        shutil.rmtree(d, ignore_errors=True)


def test_a_timeout_is_an_error_result_and_the_run_is_gone():
    d = face_tools()
    app = AppThread([d], timeout=1.0).start()
    marker = f"600.{uuid.uuid4().int % 10**9:09d}"

    async def go():
        async with stdio_face("-a", app.addr) as s:
            return await s.call_tool("marked", {"s": marker})
    try:
        r = anyio.run(go)
        assert r.is_error is True
        first, _, logline = text(r).partition("\nlog: ")
        assert first.startswith("timeout after 1"), first
        assert "call marked -> timeout" in logline
        assert wait_for(lambda: processes_with(marker) == [])
    finally:
        stop_clean(app)
        shutil.rmtree(d, ignore_errors=True)
