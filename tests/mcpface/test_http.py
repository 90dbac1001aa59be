"""`toolsrv mcp --http`: streamable HTTP with the SDK's client, the bearer token, and the
loopback-only default.

The face runs as a process (`--http 127.0.0.1:0`, the port it prints) in front of a whole
toolsrv on a thread: list, call, error results, an unknown tool, cancellation killing
the run, list_changed on the session's GET stream; a request without the token (or with
a wrong one) is refused 401 and the server goes on serving; a non-loopback address needs
--listen-any and a token file.
"""
from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import anyio
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

from mcp.shared.exceptions import MCPError  # noqa: E402

from apphelpers import add_tool  # noqa: E402
from mcphelpers import FACE, HttpFace, Notes, env, http_face, text, token_file  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tools"))
from sandbox_support import processes_with  # noqa: E402


@pytest.fixture(scope="module")
def face(server):
    tmp = tempfile.mkdtemp(prefix="mcp-http.")
    path, tok = token_file(tmp)
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", "--token-file", path)
    f.token = tok
    yield f
    f.stop()
    shutil.rmtree(tmp, ignore_errors=True)


def test_http_list_call_and_errors(face):
    async def go():
        async with http_face(face.url, face.token) as s:
            caps = s.server_capabilities
            names = {t.name for t in (await s.list_tools()).tools}
            ok = await s.call_tool("echo", {"over": "http"})
            bad = await s.call_tool("fail", {"n": "x"})
            failed = await s.call_tool("fail", {"n": 2})
            with pytest.raises(MCPError) as e:
                await s.call_tool("no_such_tool", {})
            after = await s.call_tool("echo", {"still": 1})
            return caps, names, ok, bad, failed, e.value, after
    caps, names, ok, bad, failed, unknown, after = anyio.run(go)
    assert caps.tools.list_changed is True       # as on stdio: it does send list_changed
    assert {"echo", "fail", "marked", "content"} <= names
    assert ok.is_error is False and json.loads(text(ok)) == {"over": "http"}
    assert bad.is_error is True and "invalid args: n:" in text(bad) and "\nlog: " in text(bad)
    assert failed.is_error is True and text(failed).startswith("exit 3 (input/output error)")
    assert "oops-from-fail" in text(failed)
    assert unknown.code == -32602 and "unknown tool: no_such_tool" in unknown.message
    assert after.is_error is False


def test_http_cancel_kills_the_run(face):
    marker = f"600.{uuid.uuid4().int % 10**9:09d}"

    async def go():
        async with http_face(face.url, face.token) as s:
            async with anyio.create_task_group() as tg:
                tg.start_soon(s.call_tool, "marked", {"s": marker})
                with anyio.fail_after(30):
                    while not processes_with(marker):
                        await anyio.sleep(0.02)
                tg.cancel_scope.cancel()
            with anyio.fail_after(30):
                while processes_with(marker):
                    await anyio.sleep(0.02)
            return await s.call_tool("echo", {"after": "cancel"})
    assert anyio.run(go).is_error is False
    assert processes_with(marker) == []


def test_http_list_changed(face, tools):
    notes = Notes()

    async def go():
        async with http_face(face.url, face.token, handler=notes) as s:
            await s.list_tools()
            add_tool(tools, "http_newcomer", "#!/bin/sh\necho hi\n")
            await notes.wait()
            return {t.name for t in (await s.list_tools()).tools}
    try:
        assert "http_newcomer" in anyio.run(go)
    finally:
        for f in ("http_newcomer", "http_newcomer.meta"):
            os.unlink(os.path.join(tools, f))


def test_http_without_the_token_is_refused_and_the_server_serves_on(face):
    import httpx2
    init = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "raw", "version": "0"}}}
    hdrs = {"Accept": "application/json, text/event-stream"}
    for extra in ({}, {"Authorization": "Bearer not-the-token"},
                  {"Authorization": f"Basic {face.token}"}):
        r = httpx2.post(face.url, json=init, headers={**hdrs, **extra}, timeout=30)
        assert r.status_code == 401, r.text
        assert r.headers["www-authenticate"].startswith("Bearer")
        body = r.json()
        assert body["error"]["code"] == -32001
        assert "unauthorized" in body["error"]["message"]
    assert "Authorization: Bearer" in httpx2.post(face.url, json=init, headers=hdrs,
                                                  timeout=30).json()["error"]["message"]

    async def go():
        with pytest.raises(Exception):
            async with http_face(face.url, None) as s:      # the SDK's client, no token
                await s.list_tools()
        async with http_face(face.url, face.token) as s:
            return await s.call_tool("echo", {"served": "on"})
    assert anyio.run(go).is_error is False
    assert face.p.poll() is None
    # the face says a refusal on stderr, naming the peer (its uid on loopback) and why
    import re
    assert re.search(r"toolsrv mcp: refused a request from uid \d+: \d{3} ",
                     face.stderr()), face.stderr()[-2000:]


def test_refusals_are_said_at_once_then_a_line_a_minute_with_counts(capsys):
    """A flood of refused requests costs the face's log a line a minute: the first is said
    whole (control bytes of a client's header shown as ?), the rest counted into the next
    line, and what is held is said when the face stops."""
    from toolsrv.mcp.http import SAY_EVERY, Refusals
    now = [1000.0]
    r = Refusals(clock=lambda: now[0])
    r.note(401, "unauthorized: wrong bearer token", "uid 1001")
    for _ in range(500):
        r.note(401, "unauthorized: wrong bearer token", "uid 1001")
    r.note(403, "forbidden: Origin http://evil\x1b[2J is not this server's own", "uid 7")
    assert capsys.readouterr().err.splitlines() == [
        "toolsrv mcp: refused a request from uid 1001: 401 unauthorized: wrong bearer token"]
    now[0] += SAY_EVERY
    r.note(403, "forbidden: Origin http://evil\x1b[2J is not this server's own", "uid 7")
    r.note(421, "misdirected", "uid 7")
    assert capsys.readouterr().err.splitlines() == [
        "toolsrv mcp: refused a request from uid 7: 403 forbidden: Origin http://evil?[2J "
        "is not this server's own; 501 more refused since the last line (401: 500, 403: 1)"]
    r.flush()
    assert capsys.readouterr().err.splitlines() == [
        "toolsrv mcp: 1 more refused since the last line (421: 1)"]
    r.flush()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("argv, why", [
    (["--http", "0.0.0.0:0"], "0.0.0.0 is not a loopback address: a non-loopback listener "
     "needs --listen-any"),
    (["--http", "0.0.0.0:0", "--listen-any", "--no-token"], "--no-token goes with a "
     "loopback --http alone"),
    (["--http", "127.0.0.1:0", "--no-token", "--token-file", "/x"], "--no-token goes with"),
    (["--http", "127.0.0.1:0", "--idle-timeout", "0"], "--idle-timeout and --max-sessions "
     "must be more than 0"),
    (["--http", "nowhere"], "--http nowhere: want HOST:PORT"),
    (["--listen-any"], "--listen-any, --token-file and --no-token go with --http"),
    (["--no-token"], "--listen-any, --token-file and --no-token go with --http"),
])
def test_http_is_loopback_only_unless_told(argv, why):
    p = subprocess.run([*FACE, "-a", "unix!/nonexistent/toolsrv", *argv], env=env(),
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 2
    assert why in p.stderr


def test_a_port_in_use_is_a_clear_error(face):
    port = face.url.rsplit(":", 1)[1].split("/")[0]
    p = subprocess.run([*FACE, "-a", "unix!/nonexistent/toolsrv", "--http", f"127.0.0.1:{port}"],
                       env=env(), capture_output=True, text=True, timeout=60,
                       stdin=subprocess.DEVNULL)
    assert p.returncode == 1
    assert f"toolsrv mcp: cannot listen on 127.0.0.1:{port}" in p.stderr


def test_a_token_file_readable_by_others_is_refused(tmp_path):
    path, _ = token_file(str(tmp_path))
    os.chmod(path, 0o644)
    p = subprocess.run([*FACE, "--http", "127.0.0.1:0", "--token-file", path], env=env(),
                       capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL)
    assert p.returncode == 2 and "chmod 600" in p.stderr


def test_listen_any_with_a_token_serves(server, tmp_path):
    path, tok = token_file(str(tmp_path))
    f = HttpFace("-a", server.addr, "--http", "0.0.0.0:0", "--listen-any",
                 "--token-file", path)
    try:
        url = f.url.replace("0.0.0.0", "127.0.0.1")

        async def go():
            async with http_face(url, tok) as s:
                return await s.call_tool("echo", {"any": 1})
        assert anyio.run(go).is_error is False
        assert "bearer token required" in f.stderr()
    finally:
        f.stop()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_http_face_gracefully(server, sig):
    """SIGTERM or SIGINT with a client session open (its stream listening): the face
    stops uvicorn gracefully and ends with status 0, its own cleanup done, and prints no
    traceback (uvicorn's own handling printed the lifespan's CancelledError, or re-raised
    SIGTERM and died by it, status -15)."""
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", "--no-token")
    try:
        async def go():
            async with http_face(f.url) as s:
                assert (await s.call_tool("echo", {"before": "the signal"})).is_error is False
                f.p.send_signal(sig)
                return await anyio.to_thread.run_sync(f.p.wait, 60)
        try:
            rc = anyio.run(go)
        except BaseException:         # the session's end after the face went: not the test
            rc = f.p.wait(60)
        assert rc == 0, f.stderr()
        assert "Traceback" not in f.stderr() and "Error" not in f.stderr(), f.stderr()
    finally:
        f.stop()


def test_a_sigterm_with_a_call_running_ends_the_face_and_kills_the_run(server):
    """A call in flight when SIGTERM comes: its response is told its client went away,
    the session ends, the face exits 0 without a
    traceback, and the tool's process is killed (the run's 9P read is flushed)."""
    marker = f"600.{uuid.uuid4().int % 10**9:09d}"
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", "--no-token")
    try:
        async def go():
            async with http_face(f.url) as s:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(s.call_tool, "marked", {"s": marker})
                    with anyio.fail_after(30):
                        while not processes_with(marker):
                            await anyio.sleep(0.02)
                    f.p.send_signal(signal.SIGTERM)
                    rc = await anyio.to_thread.run_sync(f.p.wait, 60)
                    tg.cancel_scope.cancel()
                return rc
        try:
            rc = anyio.run(go)
        except BaseException:
            rc = f.p.wait(60)
        assert rc == 0, f.stderr()
        assert "Traceback" not in f.stderr(), f.stderr()
        end = time.monotonic() + 30
        while processes_with(marker) and time.monotonic() < end:
            time.sleep(0.05)
        assert processes_with(marker) == []
    finally:
        f.stop()


def test_the_audit_trail_names_the_token_and_the_peer_not_the_token(face, server):
    """An HTTP request's principal in the tree's audit record: the static token by its
    SHA-256's head (never the token itself) and the uid the connection came from."""
    import hashlib

    async def go():
        async with http_face(face.url, face.token) as s:
            return await s.call_tool("echo", {"audited": "over http"})
    assert text(anyio.run(go))
    path = os.path.join(server.app.opts.state_dir, "audit.jsonl")
    with open(path) as f:
        trail = f.read()
    calls = [json.loads(line) for line in trail.splitlines() if '"event":"call"' in line]
    mine = [r for r in calls if r["tool"] == "echo"]
    assert mine, calls[-3:]
    want = (f"bearer token sha256:{hashlib.sha256(face.token.encode()).hexdigest()[:12]} "
            f"from uid {os.getuid()}")
    assert mine[-1]["principal"]["on_behalf_of"] == want, mine[-1]
    assert face.token not in trail
