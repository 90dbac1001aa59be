"""The MCP features the face serves beyond list and call (issue 29, items 5-8 and 10),
through the official SDK's client over stdio, each backed by a file of the tree:

- annotations from facts: readOnlyHint (readOnly), destructiveHint/idempotentHint and
  title (the .meta's destructive, idempotent, title), openWorldHint (the network of the
  sandbox profile the tool's calls run under);
- outputSchema listed, a fitting JSON object as structuredContent, a misfit an isError;
- a tool's prompt as an MCP prompt; the agent's log as a resource, with
  notifications/resources/updated after a call when subscribed;
- notifications/progress while a long call runs;
- the client's first root as the session's cwd, moved by roots/list_changed.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile

import anyio
import mcp_types as types
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

from mcp.shared.exceptions import MCPError  # noqa: E402

from apphelpers import add_tool  # noqa: E402
from mcphelpers import REPO, WAIT, env, stdio_face, text  # noqa: E402

STATS = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


@pytest.fixture(scope="module")
def tools(tools):                   # conftest.py's, and these
    d = tools
    add_tool(d, "pure", "#!/bin/sh\ncat\n", {
        "readOnly": True, "title": "Pure echo", "prompt": "Use pure to echo things back."})
    add_tool(d, "wipe", "#!/bin/sh\necho wiped\n", {"destructive": True, "idempotent": True})
    add_tool(d, "netty", "#!/bin/sh\necho net\n", {"sandbox": "netprof"})
    add_tool(d, "stats", "#!/bin/sh\necho '{\"n\": 3}'\n", {"outputSchema": STATS})
    add_tool(d, "badstats", "#!/bin/sh\necho '{\"n\": \"three\"}'\n", {"outputSchema": STATS})
    add_tool(d, "slow", "#!/bin/sh\nsleep 9; echo done\n")
    add_tool(d, "where", "#!/bin/sh\npwd\n")
    return d


@pytest.fixture(scope="module")
def home():
    """A HOME for the face with a profile `netprof` that has the network."""
    h = tempfile.mkdtemp(prefix="mcp-home.")
    prof = os.path.join(h, ".config", "ollie", "sandbox")
    os.makedirs(prof)
    with open(os.path.join(REPO, "sandbox", "default.yaml")) as f:
        y = f.read()
    assert "network:\n  enabled: false" in y
    with open(os.path.join(prof, "netprof.yaml"), "w") as f:
        f.write(y.replace("network:\n  enabled: false", "network:\n  enabled: true"))
    yield h
    shutil.rmtree(h, ignore_errors=True)


@pytest.fixture(scope="module")
def server(tools, home):
    """conftest.py's server, started where it finds netprof too (a .meta naming a profile
    the server cannot find is not served: it is listed in tools/errors)."""
    from apphelpers import AppThread
    from serverhelpers import stop_clean
    old = os.environ.get("HOME")
    os.environ["HOME"] = home
    try:
        app = AppThread([tools]).start()
    finally:
        if old is None:
            os.environ.pop("HOME", None)
        else:
            os.environ["HOME"] = old
    yield app
    stop_clean(app)


def test_annotations_are_derived_from_facts(server, home):
    async def go():
        async with stdio_face("-a", server.addr, environ=env(HOME=home)) as s:
            return {t.name: t for t in (await s.list_tools()).tools}
    tools = anyio.run(go)
    pure, wipe, echo = tools["pure"], tools["wipe"], tools["echo"]
    assert pure.title == "Pure echo" and pure.annotations.title == "Pure echo"
    assert pure.annotations.read_only_hint is True
    assert pure.annotations.open_world_hint is False          # default: no network
    assert wipe.annotations.read_only_hint is False
    assert wipe.annotations.destructive_hint is True and wipe.annotations.idempotent_hint is True
    assert echo.title == "echo" and echo.annotations.destructive_hint is None  # not said
    assert tools["netty"].annotations.open_world_hint is True  # its profile has the network


def test_structured_output_fits_its_schema_or_is_an_error(server):
    async def go():
        async with stdio_face("-a", server.addr) as s:
            listed = {t.name: t for t in (await s.list_tools()).tools}
            return listed, await s.call_tool("stats", {}), await s.call_tool("badstats", {})
    listed, ok, bad = anyio.run(go)
    assert listed["stats"].output_schema == STATS and listed["echo"].output_schema is None
    assert ok.is_error is False and ok.structured_content == {"n": 3}
    assert json.loads(text(ok)) == {"n": 3}                   # and the text, as it was
    assert bad.is_error is True and bad.structured_content is None
    assert "output does not fit badstats's outputSchema: n: 'three' is not of type " \
           "'integer'" in text(bad)


def test_prompts_are_the_tools_prompts(server):
    async def go():
        async with stdio_face("-a", server.addr) as s:
            listed = (await s.list_prompts()).prompts
            got = await s.get_prompt("pure")
            with pytest.raises(MCPError) as e:
                await s.get_prompt("echo")                    # a tool without a prompt
            return s.server_capabilities, listed, got, e.value
    caps, listed, got, unknown = anyio.run(go)
    assert caps.prompts is not None and caps.prompts.list_changed is True
    assert [p.name for p in listed] == ["pure"]
    assert got.messages[0].role == "user"
    assert got.messages[0].content.text == "Use pure to echo things back."
    assert unknown.code == -32602 and "unknown prompt: echo" in unknown.message


def test_the_agent_log_is_a_resource_with_updates(server):
    updated = anyio.Event()

    async def handler(m):
        if isinstance(m, types.ResourceUpdatedNotification):
            updated.set()

    async def go():
        async with stdio_face("-a", server.addr, handler=handler) as s:
            listed = (await s.list_resources()).resources
            await s.subscribe_resource("toolsrv://agent/log")
            await s.call_tool("pure", {"logged": 1})
            with anyio.fail_after(WAIT):
                await updated.wait()
            r = await s.read_resource("toolsrv://agent/log")
            return s.server_capabilities, listed, r
    caps, listed, r = anyio.run(go)
    assert caps.resources is not None and caps.resources.subscribe is True
    assert [str(x.uri) for x in listed] == ["toolsrv://agent/log", "toolsrv://agent/tools.py"]
    log = r.contents[0].text
    assert 'call pure {"logged": 1}' in log and "-> ok" in log, log


def test_progress_while_a_call_runs(server):
    seen: list[tuple[float, str | None]] = []

    async def progress(p, total, message):
        seen.append((p, message))

    async def go():
        async with stdio_face("-a", server.addr) as s:
            return await s.call_tool("slow", {}, progress_callback=progress)
    r = anyio.run(go)
    assert r.is_error is False and "done" in text(r)
    assert len(seen) >= 2, seen                               # every 4 s of a 9 s call
    assert [p for p, _ in seen] == sorted(p for p, _ in seen) and seen[0][0] > 0
    assert "slow: running for" in (seen[0][1] or "")


def test_the_first_root_is_the_sessions_cwd_and_moves_with_it(server):
    one = tempfile.mkdtemp(prefix="root-one.")
    two = tempfile.mkdtemp(prefix="root-two.")
    for d in (one, two):
        os.chmod(d, 0o777)                                    # tools run as nobody
    roots = [one]

    async def list_roots(ctx):
        return types.ListRootsResult(roots=[types.Root(uri=f"file://{roots[0]}")])

    async def go():
        async with stdio_face("-a", server.addr, list_roots_callback=list_roots) as s:
            first = text(await s.call_tool("where", {})).strip()
            roots[0] = two
            await s.send_roots_list_changed()
            with anyio.fail_after(WAIT):
                while True:
                    now = text(await s.call_tool("where", {})).strip()
                    if now != first:
                        return first, now
                    await anyio.sleep(0.1)
    try:
        first, now = anyio.run(go)
        assert first == os.path.realpath(one) and now == os.path.realpath(two)
    finally:
        shutil.rmtree(one, ignore_errors=True)
        shutil.rmtree(two, ignore_errors=True)
