"""Progress and the timeout bound through real MCP clients (issue 29, items 5 and 12):

- a tool's own `progress DONE/TOTAL MESSAGE` stderr line reaches the client as
  notifications/progress (progress, total, message), with the bytes of `out` so far in the
  message: the official Python SDK's client over stdio, and the TypeScript SDK's client
  (tests/mcpface/ts/progress.mjs, with resetTimeoutOnProgress) over HTTP where node is;
- a `.meta` `timeoutArg` is listed bounded by the server's --timeout (inputSchema), and a
  call over it is an isError result naming the limit and what to do; the bundled shell's
  `timeout` so too.
Each wait is on the event (the notification), bounded; the tool waits to be cancelled.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess

import anyio
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

from apphelpers import AppThread, add_tool, tools_dir  # noqa: E402
from mcphelpers import HttpFace, stdio_face, text  # noqa: E402
from serverhelpers import stop_clean  # noqa: E402

WAITS = {"type": "object", "properties": {
    "t": {"type": "number", "exclusiveMinimum": 0, "maximum": 600, "description": "Seconds."}},
    "additionalProperties": False}


@pytest.fixture(scope="module")
def tools():
    d = tools_dir()
    add_tool(d, "halfway", "#!/bin/sh\nprintf 'some-out\\n'\n"
             "echo 'progress 2/4 halfway there' >&2\nexec sleep 120\n")
    add_tool(d, "waits", "#!/bin/sh\ncat\n", {"args": WAITS, "timeoutArg": "t"})
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def server(tools):
    app = AppThread([tools], timeout=25).start()
    yield app
    stop_clean(app)


def test_a_tools_progress_reaches_the_python_sdk_client(server):
    seen: list[tuple[float, float | None, str | None]] = []
    reported = anyio.Event()

    async def progress(p, total, message):
        seen.append((p, total, message))
        if total is not None and "9 bytes of output" in (message or ""):
            reported.set()

    async def go():
        async with stdio_face("-a", server.addr) as s:
            async with anyio.create_task_group() as tg:
                tg.start_soon(lambda: s.call_tool("halfway", {}, progress_callback=progress))
                with anyio.fail_after(60):
                    await reported.wait()
                tg.cancel_scope.cancel()              # the run is killed
    anyio.run(go)
    p, total, message = seen[-1]
    assert (p, total) == (2, 4), seen
    assert message.startswith("halfway: running for ") and message.endswith(
        ", 9 bytes of output: halfway there"), message


def test_the_timeout_arg_is_listed_bounded_and_refused_over_it(server):
    async def go():
        async with stdio_face("-a", server.addr) as s:
            listed = {t.name: t for t in (await s.list_tools()).tools}
            return (listed["waits"].input_schema, await s.call_tool("waits", {"t": 24}),
                    await s.call_tool("waits", {"t": 100}))
    schema, ok, over = anyio.run(go)
    t = schema["properties"]["t"]
    assert t["exclusiveMaximum"] == 25 and "maximum" not in t, t
    assert "Less than 25: the call's time limit in seconds." in t["description"]
    assert ok.is_error is False and json.loads(text(ok)) == {"t": 24}
    assert over.is_error is True
    said = text(over)
    assert ("invalid args: t: 100 is not below 25, the call's time limit in seconds: give a "
            "smaller t") in said, said
    assert "(the limit: toolsrv serve --timeout, or general.timeout in sandbox profile " \
           "default)" in said, said                    # the log line names where it is set


def test_a_tools_progress_reaches_the_typescript_sdk_client(server):
    prefix = _install()
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0")
    try:
        p = subprocess.run(["node", os.path.join(prefix, "progress.mjs"), f.url, f.token],
                           capture_output=True, text=True, timeout=300,
                           stdin=subprocess.DEVNULL)
    finally:
        f.stop()
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    last = out["progress"][-1]
    assert last["progress"] == 2 and last["total"] == 4, out
    assert last["message"].endswith(", 9 bytes of output: halfway there"), last
    assert "abort" in out["ended"].lower(), out["ended"]       # it was the client's abort


def _install() -> str:
    """The TypeScript SDK as test_ts_sdk.py installs it, and the progress client beside."""
    import test_ts_sdk as ts
    prefix = ts.install()
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "ts", "progress.mjs"),
                os.path.join(prefix, "progress.mjs"))
    return prefix


def test_the_bundled_shells_timeout_is_listed_below_the_servers(tmp_path):
    from toolsrv.dirs.bundled import TOOLS
    app = AppThread([TOOLS], timeout=25).start()
    try:
        async def go():
            async with stdio_face("-a", app.addr, cwd=str(tmp_path)) as s:
                listed = {t.name: t for t in (await s.list_tools()).tools}
                return listed["shell"].input_schema, await s.call_tool(
                    "shell", {"command": "make", "timeout": 600})
        schema, over = anyio.run(go)
    finally:
        stop_clean(app)
    t = schema["properties"]["timeout"]
    assert t["exclusiveMaximum"] == 25 and "maximum" not in t and t["default"] == 20, t
    assert over.is_error is True and "timeout: 600 is not below 25" in text(over), text(over)
