"""`toolsrv mcp --http --oauth-issuer ISSUER --oauth-jwks FILE` (issue 48.3): the face as
an OAuth 2.1 resource server.

Tokens are minted here with PyJWT from key pairs made here (cryptography); the JWKS is a
file.  Each bad token (wrong audience, expired, wrong issuer, another key, alg none, HS256
keyed with the public key) is 401 with `WWW-Authenticate` naming the resource metadata
and `error="invalid_token"`; a request without the scope it needs is 403
`insufficient_scope` naming the scope (RFC 6750); the good token goes through the SDK's
streamable-HTTP client (in its headers), lists only the tools its scopes may call, calls
one, and its session's agent is named after the token's subject.  The metadata (RFC
9728) is served without a token.
"""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import time

import anyio
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")
jwt = pytest.importorskip("jwt", reason="PyJWT is not installed (pip install 'toolsrv[mcp]')")

import httpx2  # noqa: E402
from cryptography.hazmat.primitives.asymmetric import ec, rsa  # noqa: E402
from mcp.shared.exceptions import MCPError  # noqa: E402

from mcphelpers import HttpFace, http_face, modern_client, text  # noqa: E402

ISSUER = "https://issuer.example.test"


def _jwk(key, kid: str) -> dict:
    from jwt.algorithms import ECAlgorithm, RSAAlgorithm
    alg = RSAAlgorithm if isinstance(key, rsa.RSAPrivateKey) else ECAlgorithm
    out = json.loads(alg.to_jwk(key.public_key()))
    out.update(kid=kid, use="sig")
    return out


@pytest.fixture(scope="module")
def keys():
    return {"rsa": rsa.generate_private_key(public_exponent=65537, key_size=2048),
            "ec": ec.generate_private_key(ec.SECP256R1()),
            "other": rsa.generate_private_key(public_exponent=65537, key_size=2048)}


@pytest.fixture(scope="module")
def face(server, keys):
    tmp = tempfile.mkdtemp(prefix="mcp-oauth.")
    jwks = os.path.join(tmp, "jwks.json")
    with open(jwks, "w") as f:
        json.dump({"keys": [_jwk(keys["rsa"], "k1"), _jwk(keys["ec"], "k2")]}, f)
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", "--oauth-issuer", ISSUER,
                 "--oauth-jwks", jwks)
    yield f
    f.stop()
    shutil.rmtree(tmp, ignore_errors=True)


def mint(face, keys, *, key="rsa", kid="k1", alg="RS256", sub="alice",
         scope="tools:list tools:call:echo", **claims) -> str:
    now = int(time.time())
    body = {"iss": ISSUER, "aud": face.url, "sub": sub, "iat": now, "exp": now + 300,
            "scope": scope, **claims}
    return jwt.encode({k: v for k, v in body.items() if v is not None}, keys[key],
                      algorithm=alg, headers={"kid": kid})


def post(face, token: str | None, msg: dict) -> httpx2.Response:
    headers = {"Accept": "application/json, text/event-stream",
               "Content-Type": "application/json"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return httpx2.post(face.url, headers=headers, timeout=30,
                       content=json.dumps({"jsonrpc": "2.0", "id": 1, **msg}))


INIT = {"method": "initialize", "params": {
    "protocolVersion": "2025-11-25", "capabilities": {},
    "clientInfo": {"name": "raw", "version": "1"}}}


def metadata_url(face) -> str:
    return face.url.replace("/mcp", "/.well-known/oauth-protected-resource/mcp")


def test_metadata_is_served_without_a_token(face):
    for url in (metadata_url(face), face.url.replace("/mcp", "/.well-known/"
                                                     "oauth-protected-resource")):
        r = httpx2.get(url, timeout=30)
        assert r.status_code == 200, r.text
        doc = r.json()
        assert doc["resource"] == face.url and doc["authorization_servers"] == [ISSUER]
        assert "tools:call" in doc["scopes_supported"]


def test_no_token_is_401_naming_the_metadata(face):
    r = post(face, None, INIT)
    assert r.status_code == 401
    challenge = r.headers["www-authenticate"]
    assert challenge.startswith("Bearer ") and "error=" not in challenge
    assert f'resource_metadata="{metadata_url(face)}"' in challenge
    assert ISSUER in r.json()["error"]["message"]


def _forged(face, keys, how: str) -> str:
    if how == "none":
        return jwt.encode({"iss": ISSUER, "aud": face.url, "sub": "alice",
                           "exp": int(time.time()) + 300}, None, algorithm="none")
    from cryptography.hazmat.primitives import serialization
    pem = keys["rsa"].public_key().public_bytes(serialization.Encoding.PEM,
                                                serialization.PublicFormat.SubjectPublicKeyInfo)
    import hashlib
    import hmac
    import base64

    def b64(b: bytes) -> str:
        return base64.urlsafe_b64encode(b).rstrip(b"=").decode()
    head = b64(json.dumps({"alg": "HS256", "typ": "JWT", "kid": "k1"}).encode())
    body = b64(json.dumps({"iss": ISSUER, "aud": face.url, "sub": "alice",
                           "exp": int(time.time()) + 300, "scope": "tools:call"}).encode())
    sig = hmac.new(pem, f"{head}.{body}".encode(), hashlib.sha256).digest()
    return f"{head}.{body}.{b64(sig)}"


@pytest.mark.parametrize("bad, why", [
    ({"aud": "http://elsewhere.test/mcp"}, "not for this server"),
    ({"exp": int(time.time()) - 3600, "iat": int(time.time()) - 7200}, "expired"),
    ({"iss": "https://another-issuer.test"}, "not issued by"),
    ({"key": "other"}, "Signature verification failed"),
    ({"sub": None}, "sub"),
    ("none", "alg 'none' is not allowed"),
    ("hs256", "alg 'HS256' is not allowed"),
])
def test_a_bad_token_is_401_invalid_token(face, keys, bad, why):
    token = _forged(face, keys, bad) if isinstance(bad, str) else mint(face, keys, **bad)
    r = post(face, token, INIT)
    assert r.status_code == 401, r.text
    challenge = r.headers["www-authenticate"]
    assert 'error="invalid_token"' in challenge
    assert f'resource_metadata="{metadata_url(face)}"' in challenge
    assert why in r.json()["error"]["message"]


def test_a_missing_scope_is_403_insufficient_scope(face, keys):
    token = mint(face, keys, scope="tools:list tools:call:echo")
    r = post(face, token, {"method": "tools/call", "params": {"name": "fail",
                                                             "arguments": {"n": 1}}})
    assert r.status_code == 403, r.text
    challenge = r.headers["www-authenticate"]
    assert 'error="insufficient_scope"' in challenge and 'scope="tools:call:fail"' in challenge
    assert f'resource_metadata="{metadata_url(face)}"' in challenge
    no_list = mint(face, keys, scope="tools:call")
    r = post(face, no_list, {"method": "tools/list", "params": {}})
    assert r.status_code == 403 and 'scope="tools:list"' in r.headers["www-authenticate"]


def test_the_good_token_through_the_sdk_client(face, keys, server):
    token = mint(face, keys, key="ec", kid="k2", alg="ES256", sub="alice@example.test")
    assert post(face, token, INIT).status_code == 200

    async def go():
        async with http_face(face.url, token) as s:
            names = [t.name for t in (await s.list_tools()).tools]
            ok = await s.call_tool("echo", {"via": "oauth"})
            agents = server.call(lambda: sorted(
                a for sess in server.app.store.sessions.values() for a in sess.agents))
            return names, ok, agents
    names, ok, agents = anyio.run(go)
    assert names == ["echo"]            # tools:call:echo alone: the one tool it may call
    assert ok.is_error is False and json.loads(text(ok)) == {"via": "oauth"}
    assert "alice-example.test" in agents       # the principal names the agent

    async def modern():                 # the 2026-07-28 era: a seat per call, the same
        async with modern_client(face.url, token) as c:
            async with c:
                return ([t.name for t in (await c.list_tools()).tools],
                        await c.call_tool("echo", {"era": 2026}))
    names, ok = anyio.run(modern)
    assert names == ["echo"] and json.loads(text(ok)) == {"era": 2026}


def test_a_session_is_bound_to_its_principal(face, keys):
    """The SDK keeps an HTTP session to the principal that made it: another principal's
    request for it is 404, as if it did not exist."""
    alice, bob = (mint(face, keys, sub=s, scope="tools:list tools:call") for s in
                  ("alice", "bob"))
    r = post(face, alice, INIT)
    sid = r.headers["mcp-session-id"]
    headers = {"Accept": "application/json, text/event-stream",
               "Content-Type": "application/json", "Mcp-Session-Id": sid,
               "Mcp-Protocol-Version": "2025-11-25", "Authorization": f"Bearer {bob}"}
    r = httpx2.post(face.url, headers=headers, timeout=30, content=json.dumps(
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list", "params": {}}))
    assert r.status_code == 404


def test_the_face_will_not_start_on_a_symmetric_key(server, tmp_path):
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [{"kty": "oct", "k": "c2VjcmV0", "kid": "s"}]}))
    with pytest.raises(RuntimeError, match="symmetric"):
        HttpFace("-a", server.addr, "--http", "127.0.0.1:0", "--oauth-issuer", ISSUER,
                 "--oauth-jwks", str(jwks))


def test_an_unknown_tool_through_a_token_that_may_call_all(face, keys):
    token = mint(face, keys, scope="tools:list tools:call")

    async def go():
        async with http_face(face.url, token) as s:
            names = {t.name for t in (await s.list_tools()).tools}
            with pytest.raises(MCPError) as e:
                await s.call_tool("no_such_tool", {})
            return names, e.value
    names, unknown = anyio.run(go)
    assert {"echo", "fail", "marked", "content"} <= names
    assert unknown.code == -32602


def test_keys_from_a_loopback_url_read_again_for_a_new_key(server, keys):
    """--oauth-jwks URL: fetched at start, and again (off the loop) when a token names a
    key id the set does not have yet: the issuer's key rotation."""
    import http.server
    import threading
    served = {"keys": [_jwk(keys["rsa"], "k1")]}

    class Keys(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            body = json.dumps(served).encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *a):
            pass
    httpd = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Keys)
    threading.Thread(target=httpd.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{httpd.server_address[1]}/jwks.json"
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", "--oauth-issuer", ISSUER,
                 "--oauth-jwks", url)
    try:
        assert post(f, mint(f, keys), INIT).status_code == 200
        served["keys"].append(_jwk(keys["other"], "k3"))      # rotated in after the start
        r = post(f, mint(f, keys, key="other", kid="k3"), INIT)
        assert r.status_code == 200, r.text
    finally:
        f.stop()
        httpd.shutdown()


def test_a_jwks_url_must_be_https_or_loopback(server):
    with pytest.raises(RuntimeError, match="must be https, or http to a loopback"):
        HttpFace("-a", server.addr, "--http", "127.0.0.1:0", "--oauth-issuer", ISSUER,
                 "--oauth-jwks", "http://192.0.2.1/jwks.json")


def test_search_finds_only_what_the_principal_may_call(server, keys, tmp_path):
    """--search with OAuth: search_tools names only the tools the token's scopes let it
    call, and call_tool needs the scope of the tool it names (403 otherwise)."""
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [_jwk(keys["rsa"], "k1")]}))
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", "--search", "--oauth-issuer",
                 ISSUER, "--oauth-jwks", str(jwks))
    try:
        token = mint(f, keys, scope="tools:list tools:call:echo")
        everything = mint(f, keys, scope="tools:list tools:call")

        async def go():
            async with http_face(f.url, everything) as s:
                all_found = await s.call_tool("search_tools", {"need": "echo the args fail",
                                                               "limit": 20})
            async with http_face(f.url, token) as s:
                found = await s.call_tool("search_tools", {"need": "echo the args fail",
                                                           "limit": 20})
                ok = await s.call_tool("call_tool", {"name": "echo", "arguments": {"q": 1}})
                return all_found, found, ok
        all_found, found, ok = anyio.run(go)
        assert {"echo", "fail"} <= {t["name"] for t in all_found.structured_content["tools"]}
        assert [t["name"] for t in found.structured_content["tools"]] == ["echo"]
        assert json.loads(text(ok)) == {"q": 1}
        r = post(f, token, {"method": "tools/call", "params": {
            "name": "call_tool", "arguments": {"name": "fail", "arguments": {"n": 1}}}})
        assert r.status_code == 403 and 'scope="tools:call:fail"' in r.headers["www-authenticate"]
    finally:
        f.stop()


def test_the_typescript_sdk_client_with_a_token(face, keys):
    """The TypeScript SDK's client (tests/mcpface/ts/oauth.mjs, installed as
    test_ts_sdk.py installs it) with the token in its request headers: the good one lists
    and calls, an expired one is refused at connect with the 401."""
    from test_ts_sdk import install
    prefix = install()
    shutil.copy(os.path.join(os.path.dirname(os.path.abspath(__file__)), "ts", "oauth.mjs"),
                os.path.join(prefix, "oauth.mjs"))
    good = mint(face, keys, scope="tools:list tools:call:echo")
    expired = mint(face, keys, exp=int(time.time()) - 3600, iat=int(time.time()) - 7200)
    import subprocess
    p = subprocess.run(["node", os.path.join(prefix, "oauth.mjs"), face.url, good, expired],
                       capture_output=True, text=True, timeout=300, stdin=subprocess.DEVNULL)
    assert p.returncode == 0, p.stderr[-3000:]
    out = json.loads(p.stdout.strip().splitlines()[-1])
    assert out["names"] == ["echo"]
    assert out["echo"]["isError"] is False and json.loads(out["echo"]["text"]) == {"from": "ts"}
    assert out["bad"]["code"] == 401, out["bad"]
    assert "invalid token: the token has expired" in out["bad"]["message"]


def test_a_face_on_every_address_needs_its_audience_named(server, tmp_path, keys):
    jwks = tmp_path / "jwks.json"
    jwks.write_text(json.dumps({"keys": [_jwk(keys["rsa"], "k1")]}))
    with pytest.raises(RuntimeError, match="--oauth-audience: give the URL clients reach"):
        HttpFace("-a", server.addr, "--http", "0.0.0.0:0", "--listen-any", "--oauth-issuer",
                 ISSUER, "--oauth-jwks", str(jwks))
