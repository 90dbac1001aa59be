"""`toolsrv mcp --http`, hardened (issue 25 §5 and §6), from the reproducers of round 3:

- a token is required by default, loopback included: made on first start in the state
  home (mode 600) and printed; another local uid cannot read it, and its requests are
  refused 401 (mcp_other_uid.sh);
- abandoned HTTP sessions are released after --idle-timeout, never saved to the server's
  state, and the face's sessions have a limit of their own: they never refuse a 9P
  client's mkdir (mcp_sessions_dos.sh);
- Origin: only the face's own passes; on loopback the Host must name it too;
- two connections with the same clientInfo.name never share a session or agent, in
  either era of the protocol (mcp_same_name.py).

Everything waits on events with bounds; nothing asserts on time.
"""
from __future__ import annotations

import json
import os
import stat
import subprocess

import anyio
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

import mcp_types as types  # noqa: E402

from apphelpers import AppThread  # noqa: E402
from mcphelpers import REPO, HttpFace, http_face, modern_client, text  # noqa: E402
from serverhelpers import stop_clean, wait_for  # noqa: E402
from toolsrv.cli.client import Client as NineClient  # noqa: E402

BUNDLED = os.path.join(REPO, "data", "tools")
HDRS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "raw", "version": "0"}}}


@pytest.fixture(scope="module")
def server(tools):
    app = AppThread([tools, BUNDLED], max_sessions=3).start()
    yield app
    stop_clean(app)


def sessions(addr: str) -> list[str]:
    with NineClient.connect(addr) as c:
        return [e.name for e in c.ls("session")]


def saved(app: AppThread) -> list[str]:
    path = os.path.join(app.opts.state_dir, "state.json")
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [s["name"] for s in json.load(f)["sessions"]]


def post(url: str, body: dict, headers: dict | None = None, sid: str | None = None):
    import httpx2
    h = {**HDRS, **(headers or {})}
    if sid:
        h.update({"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-06-18"})
    return httpx2.post(url, json=body, headers=h, timeout=60)


def abandoned_client(url: str, token: str, name: str) -> str:
    """mcp_http_sessions.sh's client: initialize, call a tool, walk away (no DELETE)."""
    auth = {"Authorization": f"Bearer {token}"}
    r = post(url, {**INIT, "params": {**INIT["params"], "clientInfo": {"name": name,
                                                                       "version": "1"}}}, auth)
    assert r.status_code == 200, r.text
    sid = r.headers["mcp-session-id"]
    post(url, {"jsonrpc": "2.0", "method": "notifications/initialized"}, auth, sid)
    r = post(url, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                   "params": {"name": "echo", "arguments": {"who": name}}}, auth, sid)
    assert r.status_code == 200 and name in r.text, r.text
    return sid


def test_a_token_is_required_by_default_made_once_in_the_state_home(server):
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0")
    home = f.home
    try:
        assert f.token and len(f.token) >= 32
        path = os.path.join(home, "toolsrv", "mcp-token")
        st = os.stat(path)
        assert stat.S_IMODE(st.st_mode) == 0o600 and st.st_uid == os.getuid()
        assert open(path).read().strip() == f.token
        assert f"bearer token required: the text of {path}" in f.stderr()
        r = post(f.url, INIT)
        assert r.status_code == 401 and "Authorization: Bearer" in r.json()["error"]["message"]
        assert post(f.url, INIT, {"Authorization": f"Bearer {f.token}"}).status_code == 200
    finally:
        f.p.terminate()
        f.p.wait(30)
    g = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", state_home=home)
    try:
        assert g.token is None and "made the bearer token" not in g.stderr()  # kept

        async def go():
            async with http_face(g.url, f.token) as s:
                return await s.call_tool("echo", {"again": 1})
        assert anyio.run(go).is_error is False
    finally:
        g.stop()
        f.stop()


def test_no_token_is_an_explicit_choice_said_at_start(server):
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", "--no-token")
    try:
        assert "--no-token: any local user can connect" in f.stderr()
        assert post(f.url, INIT).status_code == 200
    finally:
        f.stop()


@pytest.mark.skipif(os.getuid() != 0, reason="needs root to run a client as another uid")
def test_another_local_uid_cannot_read_the_owners_file_through_the_face(server, tmp_path):
    """mcp_other_uid.sh: nobody, on the same host, asks file_read for the owner's 0600
    file through the loopback face: refused 401, and it cannot read the token either."""
    cwd = tmp_path / "owner"
    cwd.mkdir()
    (cwd / "owner-secret.txt").write_text("owner-only-data-42\n")
    os.chmod(cwd / "owner-secret.txt", 0o600)
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", cwd=str(cwd))
    script = f"""
import json, urllib.request, urllib.error
tok = None
try:
    tok = open({os.path.join(f.home, 'toolsrv', 'mcp-token')!r}).read()
except OSError as e:
    print("token:", e.strerror)
body = json.dumps({json.dumps(INIT)}).encode()
req = urllib.request.Request({f.url!r}, body, {HDRS!r})
try:
    print("status:", urllib.request.urlopen(req, timeout=60).status)
except urllib.error.HTTPError as e:
    print("status:", e.code)
"""
    try:
        p = subprocess.run(["/usr/bin/python3", "-c", script], user=65534, group=65534,
                           extra_groups=[], capture_output=True, text=True, timeout=120,
                           cwd="/")
        assert "token: Permission denied" in p.stdout, p.stdout + p.stderr
        assert "status: 401" in p.stdout, p.stdout + p.stderr
    finally:
        f.stop()


def test_abandoned_sessions_are_released_and_never_saved(server):
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", "--idle-timeout", "1")
    try:
        before = set(sessions(server.addr))
        sid = abandoned_client(f.url, f.token, "walked-away")
        # released once idle: its tree session removed, never in state.json meanwhile
        assert wait_for(lambda: set(sessions(server.addr)) == before, 60)
        assert not [n for n in saved(server) if n.startswith("walked-away")]
        r = post(f.url, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
                 {"Authorization": f"Bearer {f.token}"}, sid)
        assert r.status_code == 404                     # the client must initialize again
    finally:
        f.stop()


def test_the_faces_sessions_have_a_limit_of_their_own(server):
    """The server allows 3 sessions; a face allowing 3 HTTP sessions fills them with its
    own (temporary) ones, refuses a fourth with 503, and a 9P client's mkdir still works."""
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", "--max-sessions", "3")
    made = []
    # an earlier test's session may still be open (a face's idle bound is 600 s): the
    # server's limit must be this test's alone, so what is left is removed first
    with NineClient.connect(server.addr) as c:
        for n in sessions(server.addr):
            try:
                c.rm(f"session/{n}")
            except Exception:
                pass
    assert wait_for(lambda: sessions(server.addr) == [], 60), sessions(server.addr)
    try:
        for n in range(3):
            abandoned_client(f.url, f.token, f"dos{n}")
        mine = [n for n in sessions(server.addr) if n.startswith("dos")]
        assert len(mine) == 3 and not [n for n in saved(server) if n.startswith("dos")]
        r = post(f.url, INIT, {"Authorization": f"Bearer {f.token}"})
        assert r.status_code == 503 and "Too many open sessions" in r.text
        with NineClient.connect(server.addr) as c:
            c.mkdir("session/owner-new")                # not refused by the face's sessions
            made.append("owner-new")
    finally:
        f.stop()
        with NineClient.connect(server.addr) as c:
            for n in made:
                c.rm(f"session/{n}")
    assert wait_for(lambda: not [n for n in sessions(server.addr) if n.startswith("dos")])


@pytest.mark.parametrize("header, status", [
    ({"Origin": "http://127.0.0.1:1"}, 403),            # another local port
    ({"Origin": "http://evil.example"}, 403),
    ({"Origin": "null"}, 403),
    ({"Host": "evil.example"}, 421),                    # DNS rebinding
])
def test_only_the_faces_own_origin_passes(server, header, status):
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0")
    try:
        auth = {"Authorization": f"Bearer {f.token}"}
        port = f.url.rsplit(":", 1)[1].split("/")[0]
        h = {**auth, **{k: v.replace("PORT", port) for k, v in header.items()}}
        r = post(f.url, INIT, h)
        assert r.status_code == status, r.text
        assert r.json()["error"]["code"] == -32001
        for own in (f"http://127.0.0.1:{port}", f"http://localhost:{port}"):
            assert post(f.url, INIT, {**auth, "Origin": own}).status_code == 200
        assert post(f.url, INIT, {**auth, "Host": f"localhost:{port}"}).status_code == 200
    finally:
        f.stop()


SAME = types.Implementation(name="same-name", version="1")


def test_two_modern_connections_with_one_name_share_nothing(server, tmp_path):
    """mcp_same_name.py: A exports a variable and cds; B, with the same clientInfo.name,
    sees neither (2026-07-28 era over HTTP: every call has its own seat)."""
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", cwd=str(tmp_path))

    async def one(cmd: str) -> tuple[str, str]:
        async with modern_client(f.url, f.token, client_info=SAME) as c:
            async with c:
                r = await c.call_tool("shell", {"command": cmd})
                return c.session.protocol_version, text(r)
    try:
        va, a = anyio.run(one, "export FOO=secret-of-A; cd /; echo set")
        vb, b = anyio.run(one, "echo FOO=$FOO; pwd")
        assert va.startswith("2026") and vb.startswith("2026"), (va, vb)
        assert "set" in a
        assert "FOO=\n" in b and "secret-of-A" not in b
        assert "\n/\n" not in b                          # not A's cd
        assert wait_for(lambda: not [n for n in sessions(server.addr)
                                     if n.startswith("same-name")])
    finally:
        f.stop()


def test_two_handshake_connections_with_one_name_share_nothing(server, tmp_path):
    """The same with two initialized sessions at once over HTTP, and with --session:
    each connection gets an agent of its own."""
    async def pair(url: str, token: str) -> tuple[str, str]:
        import httpx2
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client
        out = []
        async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"},
                                      timeout=httpx2.Timeout(30, read=300)) as hc:
            async with streamable_http_client(url, http_client=hc) as (r1, w1), \
                    streamable_http_client(url, http_client=hc) as (r2, w2):
                async with ClientSession(r1, w1, client_info=SAME) as a, \
                        ClientSession(r2, w2, client_info=SAME) as b:
                    await a.initialize()
                    await b.initialize()
                    out.append(text(await a.call_tool(
                        "shell", {"command": "export FOO=secret-of-A; echo set"})))
                    out.append(text(await b.call_tool("shell", {"command": "echo FOO=$FOO"})))
        return out[0], out[1]
    for extra in ([], ["--session", "shared-by-config"]):
        f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", *extra, cwd=str(tmp_path))
        try:
            a, b = anyio.run(pair, f.url, f.token)
            assert "set" in a and "FOO=\n" in b and "secret-of-A" not in b, (extra, a, b)
        finally:
            f.stop()

    def agents() -> list[str]:
        with NineClient.connect(server.addr) as c:
            return [e.name for e in c.ls("session/shared-by-config/agent")]
    assert wait_for(lambda: agents() == [], 60), agents()     # its own: gone
    with NineClient.connect(server.addr) as c:
        c.rm("session/shared-by-config")
