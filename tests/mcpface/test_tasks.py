"""Tasks (issue 48.1): the `io.modelcontextprotocol/tasks` extension of the 2026-07-28
revision, through the official Python SDK's client.

The SDK (mcp 2.3.0) ships no tasks extension of its own: its client has the extension
seams (`ClientExtension`, which declares the extension in every request's capabilities;
a `ResultClaim` for `resultType: "task"`; `session.call_tool(allow_claimed=True)`;
`session.send_request` for `tasks/get` and `tasks/cancel`), and these tests build the
requester's side on them, following the extension's specification (SEP-2663, its
2026-07-28 text): a CreateTaskResult, then tasks/get until the status is terminal.  The
TypeScript SDK of tests/mcpface/ts (1.32.2) has only the 2025-11-25 core tasks, not this
extension, so it is not used here.

Each waits on an event (a process appearing or going, a status changing), bounded:
a long call run as a task gives its handle while it runs and its result when polled; a
cancel kills the run; the task is found again by a new connection of the same
principal, and by no other; a finished task's result survives a restart of the face;
and a client that does not declare the extension, or speaks the handshake era, gets its
calls answered as before.
"""
from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
import uuid
from typing import Any, ClassVar, Literal

import anyio
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

import mcp_types as types  # noqa: E402
from mcp import StdioServerParameters  # noqa: E402
from mcp.client.client import Client  # noqa: E402
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402
from pydantic import TypeAdapter  # noqa: E402

from apphelpers import add_tool  # noqa: E402
from mcphelpers import (CLIENT, FACE, WAIT, HttpFace, env, face_tools, http_face,  # noqa: E402
                        modern_client, text)

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tools"))
from sandbox_support import processes_with  # noqa: E402

EXTENSION = "io.modelcontextprotocol/tasks"
ANY = TypeAdapter(dict[str, Any])


# -- the requester's side, on the SDK's extension seams --
class CreateTaskResult(types.Result):
    result_type: Literal["task"] = "task"
    task_id: str
    status: str
    ttl_ms: int | None = None
    poll_interval_ms: int | None = None
    created_at: str


class TaskIdParams(types.RequestParams):
    task_id: str


class TasksGet(types.Request[TaskIdParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: TaskIdParams
    name_param: ClassVar[str | None] = "taskId"      # the spec: Mcp-Name is the task id


class TasksCancel(types.Request[TaskIdParams, Literal["tasks/cancel"]]):
    method: Literal["tasks/cancel"] = "tasks/cancel"
    params: TaskIdParams
    name_param: ClassVar[str | None] = "taskId"


async def get(session: Any, task_id: str) -> dict[str, Any]:
    return await session.send_request(TasksGet(params=TaskIdParams(task_id=task_id)), ANY)


async def cancel(session: Any, task_id: str) -> dict[str, Any]:
    return await session.send_request(TasksCancel(params=TaskIdParams(task_id=task_id)), ANY)


async def until_done(session: Any, task_id: str) -> dict[str, Any]:
    """tasks/get until the task's status is terminal, as often as it asks (bounded)."""
    with anyio.fail_after(WAIT):
        while True:
            got = await get(session, task_id)
            if got["status"] in ("completed", "failed", "cancelled"):
                return got
            await anyio.sleep(got.get("pollIntervalMs", 1000) / 1000)


async def _resolve(result: CreateTaskResult, ctx: ClaimContext) -> types.CallToolResult:
    done = await until_done(ctx.session, result.task_id)
    if done["status"] != "completed":
        raise RuntimeError(f"task {done['status']}: {done.get('statusMessage')}")
    return types.CallToolResult.model_validate(done["result"])


class Tasks(ClientExtension):
    """The extension declared, and a task handle finished by polling (client.call_tool)."""
    identifier = EXTENSION

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=CreateTaskResult, resolve=_resolve)]


async def start(client: Client, name: str, args: dict[str, Any]) -> CreateTaskResult:
    got = await client.session.call_tool(name, args, allow_claimed=True)
    assert isinstance(got, CreateTaskResult), got
    return got


# -- set-up --
@pytest.fixture(scope="module")
def tools():
    d = face_tools()
    add_tool(d, "slow", "#!/bin/sh\nargs=$(cat)\n"
             "sleep \"$(printf %s \"$args\" | sed 's/[^0-9.]//g')\"\nprintf 'done %s' \"$args\"\n",
             {"args": {"type": "object", "properties": {"s": {"type": "string"}}}})
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def face(server):
    home = tempfile.mkdtemp(prefix="mcp-tasks.")
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", state_home=home)
    yield f
    f.stop()
    shutil.rmtree(home, ignore_errors=True)


def marker(seconds: int) -> str:
    return f"{seconds}.{uuid.uuid4().int % 10**9:09d}"


async def appears(mark: str) -> None:
    with anyio.fail_after(WAIT):
        while not processes_with(mark):
            await anyio.sleep(0.02)


# -- tests --
def test_a_long_call_as_a_task_handle_poll_result(face):
    mark = marker(2)

    async def go():
        async with modern_client(face.url, face.token, extensions=[Tasks()]) as c:
            async with c:
                handle = await start(c, "slow", {"s": mark})
                await appears(mark)             # the handle came while the call runs
                running = processes_with(mark) != []
                working = await get(c.session, handle.task_id)
                done = await until_done(c.session, handle.task_id)
                plain = await c.call_tool("echo", {"via": "claim"})   # resolved by polling
                return handle, running, working, done, plain
    handle, running, working, done, plain = anyio.run(go)
    assert handle.status == "working" and handle.result_type == "task"
    assert handle.ttl_ms == 3_600_000 and handle.poll_interval_ms == 1000
    assert running
    assert working["status"] in ("working", "completed")
    if working["status"] == "working":      # the call's status line, from the tree
        assert working["statusMessage"].startswith(("running", "queued")), working
    assert done["status"] == "completed" and done["resultType"] == "complete"
    assert done["result"]["isError"] is False
    assert done["result"]["content"][0]["text"] == f'done {json.dumps({"s": mark})}'
    assert json.loads(text(plain)) == {"via": "claim"}
    assert processes_with(mark) == []


def test_a_cancel_kills_the_run(face):
    mark = marker(600)

    async def go():
        async with modern_client(face.url, face.token, extensions=[Tasks()]) as c:
            async with c:
                handle = await start(c, "marked", {"s": mark})
                await appears(mark)
                ack = await cancel(c.session, handle.task_id)
                with anyio.fail_after(WAIT):
                    while processes_with(mark):
                        await anyio.sleep(0.02)
                return ack, await get(c.session, handle.task_id)
    ack, after = anyio.run(go)
    assert ack["resultType"] == "complete"
    assert processes_with(mark) == []
    assert after["status"] == "cancelled" and "result" not in after


def test_the_task_outlives_its_connection_and_survives_a_restart(server):
    home = tempfile.mkdtemp(prefix="mcp-tasks.")
    first = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", state_home=home)
    mark = marker(1)

    async def made(f: HttpFace) -> str:
        async with modern_client(f.url, f.token, extensions=[Tasks()]) as c:
            async with c:
                return (await start(c, "slow", {"s": mark})).task_id

    async def finish(f: HttpFace, token: str, task_id: str) -> dict[str, Any]:
        async with modern_client(f.url, token, extensions=[Tasks()]) as c:
            async with c:
                return await until_done(c.session, task_id)
    try:
        task_id = anyio.run(made, first)           # that connection is gone now
        done = anyio.run(finish, first, first.token, task_id)
        token = first.token
        first.stop()            # its home is the test's: kept
        again = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", state_home=home)
        try:
            kept = anyio.run(finish, again, token, task_id)
        finally:
            again.stop()
        files = os.listdir(os.path.join(home, "toolsrv", "mcp-tasks"))
        mode = os.stat(os.path.join(home, "toolsrv", "mcp-tasks", files[0])).st_mode & 0o777
    finally:
        shutil.rmtree(home, ignore_errors=True)
    assert done["status"] == "completed" and "done" in done["result"]["content"][0]["text"]
    assert kept == done
    assert files == [f"{task_id}.json"] and mode == 0o600


def test_another_principal_cannot_see_a_task(server, tmp_path):
    jwt = pytest.importorskip("jwt", reason="PyJWT is not installed")
    from cryptography.hazmat.primitives.asymmetric import rsa
    from jwt.algorithms import RSAAlgorithm
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(RSAAlgorithm.to_jwk(key.public_key()))
    jwk.update(kid="k1", use="sig")
    (tmp_path / "jwks.json").write_text(json.dumps({"keys": [jwk]}))
    issuer = "https://issuer.example.test"
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", "--oauth-issuer", issuer,
                 "--oauth-jwks", str(tmp_path / "jwks.json"), state_home=str(tmp_path))

    def mint(sub: str) -> str:
        now = int(time.time())
        return jwt.encode({"iss": issuer, "aud": f.url, "sub": sub, "iat": now,
                           "exp": now + 300, "scope": "tools:list tools:call"}, key,
                          algorithm="RS256", headers={"kid": "k1"})

    async def go():
        async with modern_client(f.url, mint("alice"), extensions=[Tasks()]) as c:
            async with c:
                task_id = (await start(c, "slow", {"s": marker(1)})).task_id
        async with modern_client(f.url, mint("bob"), extensions=[Tasks()]) as c:
            async with c:
                with pytest.raises(MCPError) as bob:
                    await get(c.session, task_id)
                with pytest.raises(MCPError) as bob_cancel:
                    await cancel(c.session, task_id)
        async with modern_client(f.url, mint("alice"), extensions=[Tasks()]) as c:
            async with c:
                return bob.value, bob_cancel.value, await until_done(c.session, task_id)
    try:
        bob, bob_cancel, alice = anyio.run(go)
    finally:
        f.stop()
    assert bob.code == -32602 and "task not found" in bob.message
    assert bob_cancel.code == -32602
    assert alice["status"] == "completed"


def test_over_stdio(server):
    params = StdioServerParameters(command=FACE[0], args=[*FACE[1:], "-a", server.addr],
                                   env=env(XDG_STATE_HOME=tempfile.mkdtemp(prefix="mcp-t.")),
                                   cwd=tempfile.gettempdir())

    async def go():
        async with Client(params, client_info=CLIENT, extensions=[Tasks()]) as c:
            handle = await start(c, "echo", {"over": "stdio"})
            return handle, await until_done(c.session, handle.task_id)
    handle, done = anyio.run(go)
    shutil.rmtree(params.env["XDG_STATE_HOME"], ignore_errors=True)
    assert handle.status == "working"
    assert done["status"] == "completed"
    assert json.loads(done["result"]["content"][0]["text"]) == {"over": "stdio"}


def test_without_the_extension_calls_are_as_before(face):
    async def go():
        async with modern_client(face.url, face.token) as c:      # no extension declared
            async with c:
                plain = await c.call_tool("echo", {"plain": 1})
                with pytest.raises(MCPError) as undeclared:
                    await get(c.session, "whatever")
        async with http_face(face.url, face.token) as s:          # the handshake era
            old = await s.call_tool("echo", {"old": 1})
            with pytest.raises(MCPError) as legacy:
                await s.send_request(TasksGet(params=TaskIdParams(task_id="x")), ANY)
        async with modern_client(face.url, face.token, extensions=[Tasks()]) as c:
            async with c:
                with pytest.raises(MCPError) as unknown:
                    await c.session.call_tool("no_such_tool", {}, allow_claimed=True)
        return plain, undeclared.value, old, legacy.value, unknown.value
    plain, undeclared, old, legacy, unknown = anyio.run(go)
    assert json.loads(text(plain)) == {"plain": 1}
    assert undeclared.code == -32021 and undeclared.data == {
        "requiredCapabilities": {"extensions": {EXTENSION: {}}}}
    assert json.loads(text(old)) == {"old": 1}
    assert legacy.code == -32601
    assert unknown.code == -32602 and "unknown tool: no_such_tool" in unknown.message


def test_the_record_is_kept_for_its_time_to_live(server, monkeypatch):
    monkeypatch.setenv("TOOLSRV_MCP_TASK_TTL", "5")     # seconds; the default is an hour
    home = tempfile.mkdtemp(prefix="mcp-tasks.")
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", state_home=home)

    async def go():
        async with modern_client(f.url, f.token, extensions=[Tasks()]) as c:
            async with c:
                caps = c.server_capabilities.extensions
                handle = await start(c, "echo", {"brief": 1})
                with anyio.fail_after(WAIT):    # faster than it asks: its TTL is short
                    while (done := await get(c.session, handle.task_id))["status"] \
                            == "working":
                        await anyio.sleep(0.05)
                with anyio.fail_after(WAIT):
                    while True:
                        try:
                            await get(c.session, handle.task_id)
                        except MCPError as e:
                            return caps, handle, done, e
                        await anyio.sleep(0.1)
    try:
        caps, handle, done, gone = anyio.run(go)
        left = os.listdir(os.path.join(home, "toolsrv", "mcp-tasks"))
    finally:
        f.stop()
        shutil.rmtree(home, ignore_errors=True)
    assert caps == {EXTENSION: {}}                  # advertised in server/discover
    assert handle.ttl_ms == 5000 and done["status"] == "completed"
    assert gone.code == -32602 and "task not found" in gone.message
    assert left == []                               # the expired record is deleted


def test_the_records_kept_are_bounded_the_expired_going_first(tmp_path, monkeypatch):
    """At most MAX_RECORDS records in a state home: past it the expired are swept at once,
    and a new task is refused naming the bound while none has expired."""
    from toolsrv.mcp.tasks import store
    monkeypatch.setattr(store, "MAX_RECORDS", 3)
    s = store.Store(str(tmp_path))
    recs = [s.new("alice", "echo") for _ in range(3)]
    with pytest.raises(store.TooMany, match=r"too many tasks kept \(3 in .*\): wait for"):
        s.new("alice", "echo")
    s.end(recs[0], "completed", result={})
    recs[0]["ttlMs"] = 1
    recs[0]["createdAt"] = "2000-01-01T00:00:00Z"
    s.save(recs[0])
    assert s.new("bob", "echo")["owner"] == "bob"         # the expired one made room
    assert s.find(recs[0]["taskId"], "alice") is None
    assert len(list((tmp_path / "mcp-tasks").glob("*.json"))) == 3


def test_the_records_are_written_off_the_event_loop(tmp_path):
    """The store's disk work (a sweep reads up to MAX_RECORDS results; every record is
    fsynced) runs in the tasks' worker thread: here the write waits for the loop to run
    a callback, which it could not if the write held the loop; the record on disk is
    the ended one, whole."""
    import asyncio
    import threading

    from toolsrv.mcp.tasks.serve import Tasks
    from toolsrv.mcp.tasks.store import Store

    ran, threads = threading.Event(), []

    class Slow(Store):
        def save(self, rec):
            threads.append(threading.get_ident())
            assert ran.wait(10), "the loop was held while the record was written"
            super().save(rec)

    async def go():
        t = Tasks(face=None, shape=None, home=str(tmp_path), principal_key="k")
        t.store = Slow(str(tmp_path))
        asyncio.get_running_loop().call_soon(ran.set)
        rec = await t._io(t.store.new, "alice", "echo")
        ran.clear()
        asyncio.get_running_loop().call_soon(ran.set)
        await t._end(rec, "completed", None, result={"content": []})
        return rec, threading.get_ident(), await t._io(t.store.find, rec["taskId"], "alice")
    rec, loop_thread, found = asyncio.run(go())
    assert len(threads) == 2 and loop_thread not in threads
    assert found["status"] == "completed" and found["result"] == {"content": []}
    assert rec["status"] == "completed"
