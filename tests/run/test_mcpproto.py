"""toolsrv's own MCP stdio client (tree/resident/mcp.py), fed whole conversations through a
scripted pipe: the handshake, notifications and server requests met on the way, a
response to an abandoned request, paging, and how a tools/call result maps to an outcome.
And `toolsrv serve` never imports the `mcp` SDK."""
from __future__ import annotations

import asyncio
import json
import subprocess
import sys

import pytest

from toolsrv.tree.resident.mcp import Client, MCPError, result_outcome


class Scripted:
    """A pipe whose server side answers each request from `replies` (method -> lines)."""

    def __init__(self, replies: dict) -> None:
        self.replies, self.sent, self.queue = replies, [], []

    def send(self, data: bytes) -> None:
        msg = json.loads(data)
        assert data.endswith(b"\n") and b"\n" not in data[:-1]
        self.sent.append(msg)
        if "id" in msg and "method" in msg:
            for line in self.replies[msg["method"]](msg):
                self.queue.append(line if isinstance(line, bytes) else json.dumps(line).encode())

    async def line(self) -> bytes:
        if not self.queue:
            raise MCPError("EOF")
        return self.queue.pop(0)


def ok(result):
    return lambda m: [{"jsonrpc": "2.0", "id": m["id"], "result": result}]


def run(coro):
    return asyncio.run(coro)


def test_handshake_then_initialized_notification():
    p = Scripted({"initialize": ok({"protocolVersion": "2025-06-18", "capabilities": {},
                                    "serverInfo": {"name": "s", "version": "1"}})})
    c = Client(p)
    assert run(c.initialize())["serverInfo"]["name"] == "s"
    assert [m.get("method") for m in p.sent] == ["initialize", "notifications/initialized"]
    assert p.sent[0]["params"]["clientInfo"]["name"] == "toolsrv" and c.ready


def test_notifications_server_requests_and_stale_responses_are_passed_by():
    def call(m):
        return [{"jsonrpc": "2.0", "method": "notifications/message", "params": {}},
                {"jsonrpc": "2.0", "id": "s1", "method": "ping"},
                {"jsonrpc": "2.0", "id": "s2", "method": "roots/list"},
                {"jsonrpc": "2.0", "id": m["id"] - 1, "result": {"content": []}},  # abandoned
                b"",
                {"jsonrpc": "2.0", "id": m["id"], "result": {
                    "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}}]
    p = Scripted({"tools/call": call})
    c = Client(p)
    assert run(c.call("t", {"x": 1})) == ("a\nb", None)
    answers = {m["id"]: m for m in p.sent if "method" not in m}
    assert answers["s1"]["result"] == {}
    assert answers["s2"]["error"]["code"] == -32601
    assert p.sent[0]["params"] == {"name": "t", "arguments": {"x": 1}}


@pytest.mark.parametrize("rid", [lambda i: i + 1, lambda i: str(i), lambda i: None])
def test_a_response_to_an_id_never_sent_is_a_protocol_error(rid):
    """A server answering with a later id, a string or null for our int: the call fails
    at once, naming it, instead of waiting out its time limit."""
    p = Scripted({"tools/call": lambda m: [{"jsonrpc": "2.0", "id": rid(m["id"]),
                                            "result": {"content": []}}]})
    with pytest.raises(MCPError, match="an id toolsrv never sent"):
        run(Client(p).call("t", {}))


def test_paging_of_tools_list():
    pages = iter([{"tools": [{"name": "a"}], "nextCursor": "p2"}, {"tools": [{"name": "b"}]}])
    p = Scripted({"tools/list": lambda m: [{"jsonrpc": "2.0", "id": m["id"],
                                            "result": next(pages)}]})
    assert [t["name"] for t in run(Client(p).list_tools())] == ["a", "b"]
    assert p.sent[1]["params"] == {"cursor": "p2"}


@pytest.mark.parametrize("line", [b"Traceback (most recent call last):", b"[1, 2]"])
def test_a_line_that_is_not_json_rpc_is_a_protocol_error(line):
    p = Scripted({"tools/call": lambda m: [line]})
    with pytest.raises(MCPError, match="not (JSON-RPC|a JSON-RPC object)"):
        run(Client(p).call("t", {}))


def test_error_response_and_cancelled_notification():
    p = Scripted({"tools/call": lambda m: [{"jsonrpc": "2.0", "id": m["id"], "error": {
        "code": -32602, "message": "unknown tool t"}}]})
    c = Client(p)
    assert run(c.call("t", {})) == (None, "mcp error -32602: unknown tool t")
    c.cancelled()
    assert p.sent[-1] == {"jsonrpc": "2.0", "method": "notifications/cancelled",
                          "params": {"requestId": 1, "reason": "cancelled by the caller"}}


@pytest.mark.parametrize("result,outcome", [
    ({"content": [{"type": "text", "text": "hi"}]}, ("hi", None)),
    ({"content": []}, ("", None)),
    ({"content": [{"type": "image", "data": "x", "mimeType": "image/png"}]},
     ('{"content": [{"type": "image", "data": "x", "mimeType": "image/png"}]}', None)),
    ({"content": [{"type": "text", "text": "bad"}], "isError": True}, (None, "bad")),
    ({"content": [{"type": "text", "text": "bad"}], "is_error": True}, (None, "bad")),
    ({"content": [], "isError": True}, (None, "the tool reported an error")),
    ([1], (None, "tools/call result is not an object: [1]")),
])
def test_result_outcome(result, outcome):
    assert result_outcome(result) == outcome


def test_serve_never_imports_the_mcp_sdk():
    code = ("import sys, toolsrv.app, toolsrv.tree.agent, toolsrv.tree.resident.manager, "
            "toolsrv.tree.resident.mcp, toolsrv.cli.command\n"
            "print(sorted(m for m in sys.modules if m == 'mcp' or m.startswith('mcp.')))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True).stdout
    assert out.strip() == "[]"
