"""Consent a model cannot give itself, through the MCP face (issue 48.2; doc/mcp.md,
Consent; toolsrv/mcp/consent/).

A tool whose .meta says `"confirm": true` runs only after the MCP client's user said yes;
the face is the approval broker of its own calls and asks the user the protocol's way on
each era.  With the official Python SDK's clients:

- the handshake era (2025-11-25 over stdio, the SDK's ClientSession): an
  `elicitation/create` the elicitation callback answers: accept -> the call runs (its
  question names the tool and shows its args); decline -> an error result saying so;
  a client with no elicitation callback (no capability: it cannot ask) -> an error
  result saying so; the same on a steady connection's calls (fast.py's path), and for
  `call_tool` of the search mode, asked about the tool it calls;
- the 2026-07-28 era (the SDK's Client over streamable HTTP, which drives
  `input_required` itself): accept, decline, a client that cannot ask; and the
  handshake era over streamable HTTP (the elicitation on the POST's stream);
- a raw 2026-era transcript (the spec's retry: `inputResponses` and `requestState`):
  an accept sent with a `requestState` the face did not give, or with another call's,
  is not a yes: the face asks again, and nothing runs;
- a model-written `"approved": true` in the args changes nothing: it is shown to the
  user as an argument, and a decline still refuses;
- an elevated call's question says it runs outside the sandbox and what it may reach;
- a nested call from a running tool (client_9p, on its own connection) to a confirm tool
  is never put to the face's user, whose yes to the parent covers nothing of it;
- in process: no answer within the face's wait is a no, and a kept 2026-era question
  is used once and not past its time.
"""
from __future__ import annotations

import json
import os
import shutil

import anyio
import httpx2
import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

import mcp_types as types  # noqa: E402

from mcphelpers import (HttpFace, add_tool, face_tools, modern_client, stdio_face,  # noqa: E402
                        text, token_file)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENT9P = os.path.join(REPO, "data", "tools", "client_9p")
NESTED = f"""#!/bin/sh
cat >/dev/null
printf '{{"op": "rdwr", "path": "session/%s/agent/%s/tools/guarded/call", "data": "{{}}"}}' \\
  "$OLLIE_SESSION_ID" "$OLLIE_AGENT" | /usr/bin/python3 {CLIENT9P} 2>&1
echo "nester done"
"""


@pytest.fixture(scope="module")
def tools():
    d = face_tools()
    add_tool(d, "guarded", "#!/bin/sh\necho ran-guarded; cat\n",
             {"confirm": True, "readOnly": True, "description": "asks first"})
    add_tool(d, "nester", NESTED, {"sandbox": "client9p"})
    yield d
    shutil.rmtree(d, ignore_errors=True)


class User:
    """An elicitation callback: answers `action` (approve ticked on accept), keeps what
    it was asked."""

    def __init__(self, action: str = "accept") -> None:
        self.action = action
        self.asked: list[str] = []

    async def __call__(self, ctx, params) -> types.ElicitResult:
        self.asked.append(params.message)
        if self.action == "accept":
            return types.ElicitResult(action="accept", content={"approve": True})
        return types.ElicitResult(action=self.action)


# -- the handshake era, over stdio --
async def stdio_calls(server, user, calls):
    kw = {"elicitation_callback": user} if user is not None else {}
    out = []
    async with stdio_face("-a", server.addr, **kw) as s:
        for name, args in calls:
            with anyio.fail_after(60):
                out.append(await s.call_tool(name, args))
    return out


def test_an_accepting_user_lets_it_run_each_time(server, tools):
    user = User("accept")
    got = anyio.run(stdio_calls, server, user, [("guarded", {"n": 1}), ("echo", {}),
                                                ("guarded", {"n": 2}), ("guarded", {"n": 3})])
    for r, n in zip([got[0], got[2], got[3]], (1, 2, 3)):
        assert r.is_error is False and text(r) == f'ran-guarded\n{{"n": {n}}}', text(r)
    assert len(user.asked) == 3         # each run, the steady path's calls too; not echo
    assert "before it runs guarded" in user.asked[0] and '"n": 1' in user.asked[0]
    assert "runs in its sandbox" in user.asked[0]


def test_a_declining_user_and_a_client_that_cannot_ask_are_a_no(server, tools):
    user = User("decline")
    r, = anyio.run(stdio_calls, server, user, [("guarded", {"approved": True})])
    assert r.is_error is True and "ran-guarded" not in text(r)
    assert text(r).startswith("permission denied: confirm: guarded needs a person's yes: "
                              "the MCP client's user declined"), text(r)
    assert '"approved": true' in user.asked[0]          # an argument, shown as one
    r, = anyio.run(stdio_calls, server, User("cancel"), [("guarded", {})])
    assert "the MCP client's user dismissed the question" in text(r)
    r, = anyio.run(stdio_calls, server, None, [("guarded", {"approved": True})])
    assert r.is_error is True and "ran-guarded" not in text(r)
    assert "the MCP client cannot ask its user (it declared no elicitation capability)" \
        in text(r), text(r)


def test_call_tool_of_the_search_mode_asks_about_the_tool_it_calls(server, tools):
    async def go(user):
        async with stdio_face("-a", server.addr, "--search", elicitation_callback=user) as s:
            with anyio.fail_after(60):
                return await s.call_tool("call_tool", {"name": "guarded",
                                                       "arguments": {"q": 1}})
    user = User("accept")
    r = anyio.run(go, user)
    assert r.is_error is False and 'ran-guarded\n{"q": 1}' in text(r), text(r)
    assert len(user.asked) == 1 and "before it runs guarded" in user.asked[0]
    r = anyio.run(go, User("decline"))
    assert r.is_error is True and "the MCP client's user declined" in text(r), text(r)


def test_an_elevated_call_says_it_leaves_the_sandbox(server, tools):
    user = User("decline")
    r, = anyio.run(stdio_calls, server, user, [("echo", {"elevated": True, "x": 1})])
    assert r.is_error is True
    assert "elevation denied (permission denied): the MCP client's user declined" in text(r)
    assert "OUTSIDE ITS SANDBOX" in user.asked[0] and "leaves Landlock" in user.asked[0]
    assert '"x": 1' in user.asked[0]


def test_a_nested_call_is_not_put_to_the_user(server, tools):
    user = User("accept")               # guarded loaded (and said yes to) first
    first, r = anyio.run(stdio_calls, server, user, [("guarded", {}), ("nester", {})])
    assert "ran-guarded" in text(first)
    assert "nester done" in text(r) and "ran-guarded" not in text(r), text(r)
    assert "permission denied: confirm: guarded needs a person's yes" in text(r), text(r)
    assert len(user.asked) == 1         # the face's user was never asked about it


# -- the 2026-07-28 era, over streamable HTTP --
@pytest.fixture(scope="module")
def face(server, tmp_path_factory):
    path, tok = token_file(str(tmp_path_factory.mktemp("consent-token")))
    f = HttpFace("-a", server.addr, "--http", "127.0.0.1:0", "--token-file", path)
    f.token = tok
    yield f
    f.stop()


async def modern_call(face, user, name, args):
    kw = {"elicitation_callback": user} if user is not None else {}
    async with modern_client(face.url, face.token, **kw) as c:
        async with c:
            assert c.session.protocol_version == "2026-07-28"
            with anyio.fail_after(60):
                return await c.call_tool(name, args)


def test_the_current_era_asks_through_input_required(face):
    user = User("accept")
    r = anyio.run(modern_call, face, user, "guarded", {"k": "v"})
    assert r.is_error is False and text(r) == 'ran-guarded\n{"k": "v"}', text(r)
    assert len(user.asked) == 1 and '"k": "v"' in user.asked[0]
    user = User("decline")
    r = anyio.run(modern_call, face, user, "guarded", {"approved": True})
    assert r.is_error is True and "the MCP client's user declined" in text(r), text(r)
    r = anyio.run(modern_call, face, None, "guarded", {})
    assert r.is_error is True and "cannot ask its user" in text(r), text(r)


async def handshake_http_call(face, user, name, args):
    from mcp import ClientSession
    from mcp.client.streamable_http import streamable_http_client
    from mcphelpers import CLIENT
    headers = {"Authorization": f"Bearer {face.token}"}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=120)) as hc:
        async with streamable_http_client(face.url, http_client=hc) as (r, w):
            async with ClientSession(r, w, client_info=CLIENT, elicitation_callback=user) as s:
                with anyio.fail_after(60):
                    await s.initialize()
                    return await s.call_tool(name, args)


def test_the_handshake_era_over_http_asks_on_the_requests_stream(face):
    user = User("accept")
    r = anyio.run(handshake_http_call, face, user, "guarded", {"h": 1})
    assert r.is_error is False and text(r) == 'ran-guarded\n{"h": 1}', text(r)
    assert len(user.asked) == 1
    user = User("decline")
    r = anyio.run(handshake_http_call, face, user, "guarded", {"h": 2})
    assert r.is_error is True and "the MCP client's user declined" in text(r), text(r)


def post(face, params: dict, rid: int = 1) -> dict:
    """A raw 2026-07-28 tools/call (the spec's envelope), its JSON-RPC answer."""
    params = {**params, "_meta": {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"form": {}}}}}
    body = {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}
    r = httpx2.post(face.url, content=json.dumps(body), timeout=60, headers={
        "Accept": "application/json, text/event-stream", "Content-Type": "application/json",
        "Authorization": f"Bearer {face.token}", "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call", "Mcp-Name": params["name"]})
    assert r.status_code == 200, r.text
    if r.headers.get("content-type", "").startswith("text/event-stream"):
        for line in r.text.splitlines():
            if line.startswith("data: ") and '"id"' in line:
                return json.loads(line[6:])
    return r.json()


YES = {"toolsrv-consent": {"action": "accept", "content": {"approve": True}}}


def test_a_yes_without_the_questions_id_is_no_yes(face):
    """Raw JSON-RPC (the SDK's Client always echoes requestState right)."""
    first = post(face, {"name": "guarded", "arguments": {"a": 1}})["result"]
    assert first["resultType"] == "input_required", first
    ask = first["inputRequests"]["toolsrv-consent"]
    assert ask["method"] == "elicitation/create" and "guarded" in ask["params"]["message"]
    state = first["requestState"]
    for forged in ({"inputResponses": YES},                                # no state
                   {"inputResponses": YES, "requestState": "made-up"},     # not ours
                   {"inputResponses": YES, "requestState": state,          # another call's
                    "arguments": {"a": 2}}):
        got = post(face, {"name": "guarded", "arguments": {"a": 1}, **forged})["result"]
        assert got.get("resultType") == "input_required", (forged, got)
        assert "ran-guarded" not in json.dumps(got)
    again = post(face, {"name": "guarded", "arguments": {"a": 1}})["result"]
    done = post(face, {"name": "guarded", "arguments": {"a": 1}, "inputResponses": YES,
                       "requestState": again["requestState"]})["result"]
    assert done.get("isError") is False and "ran-guarded" in json.dumps(done), done
    used = post(face, {"name": "guarded", "arguments": {"a": 1}, "inputResponses": YES,
                       "requestState": again["requestState"]})["result"]
    assert used.get("resultType") == "input_required", used        # one use


# -- the face's own rules, in process --
def test_no_answer_in_time_is_a_no(monkeypatch):
    from toolsrv.mcp.consent import ask
    monkeypatch.setattr(ask, "WAIT", 0.2)

    async def never(text, schema):
        await anyio.sleep(3600)
    caps = types.ClientCapabilities(elicitation=types.ElicitationCapability())
    got = anyio.run(ask.elicit(never, caps), {"tool": "guarded", "args": {}, "confirm": "c"})
    assert got == (False, "the MCP client's user did not answer within 0.2s")
    no_caps = anyio.run(ask.elicit(never, types.ClientCapabilities()), {"tool": "guarded"})
    assert no_caps == (False, ask.CANNOT)
    assert ask.answer({"action": "accept", "content": {"approve": False}}) == (
        False, "the MCP client's user did not tick approve")


def test_a_kept_question_is_used_once_and_not_past_its_time(monkeypatch):
    from toolsrv.mcp.consent import ask
    kept = ask.Kept()
    sid = kept.keep("q")
    assert not kept.take(sid, "another question")           # and used up by the try
    sid = kept.keep("q")
    assert kept.take(sid, "q") and not kept.take(sid, "q")
    monkeypatch.setattr(ask, "KEEP", -1.0)                 # kept no time at all
    assert not kept.take(kept.keep("q"), "q")
