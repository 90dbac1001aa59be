"""The current revision's smaller items (issue 48.4), through the SDK's clients over
streamable HTTP, on both eras where the era has the feature:

- `Mcp-Method`/`Mcp-Name` (2026-07-28, SEP-2243): a request whose headers disagree with
  its body, or lack them, is 400 with JSON-RPC -32020 (HEADER_MISMATCH), checked by the
  SDK's modern transport behind the face's gate; a raw JSON-RPC transcript, since the
  SDK's client always sends them right;
- `tools/list` in the names' order, with `ttlMs` and `cacheScope` (2026-07-28's
  caching hints: top-level fields of the result, which the SDK carries);
- a `.meta` `icons` field listed as the tool's `icons` (entries MCP's Icon does not allow
  left out), and kept by `toolsrv import-mcp` from the server's tools;
- a request's `_meta.traceparent` carried into the call: the run's $TRACEPARENT and the
  agent's log line; a `_meta` a model writes inside the arguments never reaches the tree;
- input-validation failures are `isError` results, not JSON-RPC errors, on both eras.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile

import anyio
import httpx2
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

from mcphelpers import HttpFace, add_tool, face_tools, http_face, modern_client, text  # noqa: E402

TP = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
ICONS = [{"src": "https://example.test/a.png", "mimeType": "image/png", "sizes": ["48x48"]},
         {"src": "data:image/svg+xml;base64,PHN2Zy8+", "theme": "dark"}]


@pytest.fixture(scope="module")
def tools():
    d = face_tools()
    add_tool(d, "traced", "#!/bin/sh\nprintf '%s|' \"$TRACEPARENT\"\ncat\n",
             {"readOnly": True, "description": "print $TRACEPARENT, then the args"})
    add_tool(d, "iconic", "#!/bin/sh\ncat\n", {"description": "has icons", "icons": [
        *ICONS, {"src": "javascript:alert(1)"}, {"src": "https://x.test/b", "theme": "blue"},
        "not an icon"]})
    add_tool(d, "aaa_first", "#!/bin/sh\ncat\n", {"description": "sorts first"})
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="module")
def face(server):
    from mcphelpers import token_file
    tmp = tempfile.mkdtemp(prefix="mcp-spec.")
    path, tok = token_file(tmp)
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", "--token-file", path)
    f.token = tok
    yield f
    f.stop()
    shutil.rmtree(tmp, ignore_errors=True)


def modern_post(face, body: dict, **headers: str) -> httpx2.Response:
    """One 2026-07-28 request, as a raw transcript: the envelope in `_meta`, and the
    headers given (None-valued ones left out)."""
    body = {"jsonrpc": "2.0", "id": 1, **body}
    body["params"]["_meta"] = {"io.modelcontextprotocol/protocolVersion": "2026-07-28",
                               "io.modelcontextprotocol/clientCapabilities": {}}
    h = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json",
         "Authorization": f"Bearer {face.token}", "MCP-Protocol-Version": "2026-07-28"}
    h.update({k.replace("_", "-"): v for k, v in headers.items() if v is not None})
    return httpx2.post(face.url, headers=h, content=json.dumps(body), timeout=30)


CALL = {"method": "tools/call", "params": {"name": "echo", "arguments": {"x": 1}}}


@pytest.mark.parametrize("method, name, ok", [
    ("tools/call", "echo", True),
    ("tools/call", "fail", False),          # Mcp-Name names another tool than the body
    ("tools/list", "echo", False),          # Mcp-Method another method
    (None, "echo", False),                  # no Mcp-Method
    ("tools/call", None, False),            # no Mcp-Name on a name-bearing method
])
def test_mcp_method_and_name_must_match_the_body(face, method, name, ok):
    r = modern_post(face, json.loads(json.dumps(CALL)), Mcp_Method=method, Mcp_Name=name)
    if ok:
        assert r.status_code == 200, r.text
        assert '{\\"x\\": 1}' in r.text or '{\\"x\\":1}' in r.text
    else:
        assert r.status_code == 400, r.text
        assert "-32020" in r.text


def test_listing_order_cache_hints_and_icons(face):
    async def go():
        async with modern_client(face.url, face.token) as c:
            async with c:
                modern = await c.list_tools()
        async with http_face(face.url, face.token) as s:
            legacy = await s.list_tools()
        return modern, legacy
    modern, legacy = anyio.run(go)
    for got in (modern, legacy):
        names = [t.name for t in got.tools]
        assert names == sorted(names) and names[0] == "aaa_first"
        icons = {t.name: t.icons for t in got.tools}
        assert [i.model_dump(by_alias=True, exclude_none=True) for i in icons["iconic"]] \
            == ICONS
        assert not icons["echo"]
    assert modern.ttl_ms == 10_000 and modern.cache_scope == "private"


def test_traceparent_reaches_the_run_and_the_log(face):
    async def go():
        async with http_face(face.url, face.token) as s:
            traced = await s.call_tool("traced", {"a": 1}, meta={"traceparent": TP})
            plain = await s.call_tool("traced", {"a": 2, "_meta": {"principal": "bob",
                                                                   "traceparent": TP}})
            log = await s.read_resource("toolsrv://agent/log")
            return traced, plain, log.contents[0].text
    traced, plain, log = anyio.run(go)
    assert text(traced) == f'{TP}|{{"a": 1}}'
    assert text(plain) == '|{"a": 2}'           # the model's _meta never reached the tree
    # the HTTP principal the face passes on (the token by its hash, the peer), then the trace
    who = f"bearer token sha256:{hashlib.sha256(face.token.encode()).hexdigest()[:12]}"
    assert f'call traced {{"a": 1}} for {who} from uid {os.getuid()} trace {TP} -> started' \
        in log
    assert "bob" not in log


def test_input_validation_failures_are_error_results_on_both_eras(face):
    async def go():
        async with http_face(face.url, face.token) as s:
            legacy = [await s.call_tool("fail", {"n": "x"}), await s.call_tool("fail", {})]
        async with modern_client(face.url, face.token) as c:
            async with c:
                modern = [await c.call_tool("fail", {"n": "x"}), await c.call_tool("fail", {})]
        return legacy + modern
    for r in anyio.run(go):
        assert r.is_error is True and text(r).startswith("invalid args: "), text(r)


def test_import_mcp_keeps_the_servers_icons(tmp_path):
    fake = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                        "tools", "fake_mcp.py")
    p = subprocess.run([sys.executable, "-m", "toolsrv", "import-mcp", "--dir", str(tmp_path),
                        "--no-profile", "--", fake], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, HOME=str(tmp_path)))
    assert p.returncode == 0, p.stderr
    meta = json.loads((tmp_path / "image.meta").read_text())
    assert meta["icons"] == [{"src": "https://example.test/image.png",
                              "mimeType": "image/png", "sizes": ["48x48"]}]
    assert "icons" not in json.loads((tmp_path / "echo.meta").read_text())


def test_a_calls_meta_over_9p(server):
    """What the face sends: `_meta` in a call's args, taken out before they are checked
    (toolsrv(4)); a principal and a traceparent land in the log line, anything else is
    invalid args."""
    from toolsrv.cli.client import Client, ClientError
    with Client.connect(server.addr) as c:
        c.mkdir("session/meta9p")
        c.mkdir("session/meta9p/agent/a")
        c.rdwr("session/meta9p/agent/a/ctl", b"tool_load traced")
        call = "session/meta9p/agent/a/tools/traced/call"
        out = c.rdwr(call, json.dumps({"b": 1, "_meta": {"principal": "alice",
                                                         "traceparent": TP}}).encode())
        assert out.decode() == f'{TP}|{{"b": 1}}'
        for bad, why in (({"traceparent": "00-0-0-0"}, "not a W3C traceparent"),
                         ({"who": "x"}, "'who' is not a string of"), ("x", "must be an object")):
            with pytest.raises(ClientError, match=why):
                c.rdwr(call, json.dumps({"_meta": bad}).encode())
        log = c.read("session/meta9p/agent/a/log").decode()
        c.rm("session/meta9p")
    assert f'call traced {{"b": 1}} for alice trace {TP} -> started' in log
