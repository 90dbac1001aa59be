# toolsrv/tree/resident/mcp.py — the client side of MCP over stdio, spoken by toolsrv itself.
#
# Theory of operation.  An MCP server on stdio reads and writes newline-delimited JSON-RPC
# 2.0 messages (one compact object per line), as the official `mcp` SDK does.  `Client`
# drives one over any pipe pair that offers `send(bytes)` and `async line() -> bytes`
# (a resident Process, or import-mcp's plain subprocess): `initialize` (the request, then
# the `notifications/initialized` notification), `list_tools` (following `nextCursor`),
# and `call` (`tools/call`).  Requests are sent one at a time (the caller holds the
# process's lock), so a read loop only has to wait for the response with our id (one to an
# earlier id, a request given up on, is dropped; one to an id never sent fails the call); on the
# way it answers the server's own requests (`ping` with an empty result, anything else
# with "method not found") and drops its notifications (logging, progress).  The SDK is
# never imported: `toolsrv serve` stays free of it.
#
# A tools/call result maps to a call's outcome: text content joined by newlines is the
# output; any other content is returned as {"content": [...]} JSON; the result's error
# flag (`isError` on the wire, `is_error` in the 2.x SDK's objects) makes it an error,
# its text the reason.  A JSON-RPC error response is an error too, with its code.
from __future__ import annotations

import itertools
import json
from typing import Any

PROTOCOL_VERSION = "2025-06-18"
CLIENT_INFO = {"name": "toolsrv", "version": "1"}


class MCPError(Exception):
    """The server broke the protocol (not JSON-RPC, a wrong answer): the process must go."""


class Client:
    """One MCP server's client: initialize once, then list or call tools."""

    def __init__(self, pipe: Any) -> None:
        self.pipe = pipe
        self.ids = itertools.count(1)
        self.ready = False
        self.last_id = 0

    def _send(self, msg: dict[str, Any]) -> None:
        self.pipe.send(json.dumps(msg, separators=(",", ":"), ensure_ascii=False).encode()
                       + b"\n")

    def notify(self, method: str, params: dict[str, Any] | None = None) -> None:
        msg: dict[str, Any] = {"jsonrpc": "2.0", "method": method}
        if params is not None:
            msg["params"] = params
        self._send(msg)

    async def request(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """Send one request and read up to its response: the response object."""
        rid = self.last_id = next(self.ids)
        self._send({"jsonrpc": "2.0", "id": rid, "method": method, "params": params})
        while True:
            raw = await self.pipe.line()
            if not raw.strip():
                continue
            try:
                msg = json.loads(raw)
            except ValueError:
                raise MCPError(f"not JSON-RPC: {raw[:40]!r}") from None
            if not isinstance(msg, dict):
                raise MCPError(f"not a JSON-RPC object: {raw[:40]!r}")
            if "method" in msg:
                if "id" in msg:                 # the server asks us something
                    self._answer(msg)
                continue                        # a notification: logging, progress
            got = msg.get("id")
            if got == rid:
                return msg
            if not (type(got) is int and got < rid):   # never sent: not an answer of MCP
                raise MCPError(f"a response with id {json.dumps(got)[:40]}, an id toolsrv never "
                               f"sent (it waits for {rid}): the server speaks JSON-RPC wrong")
            # a response to a request we gave up on (cancelled): dropped

    def _answer(self, msg: dict[str, Any]) -> None:
        if msg.get("method") == "ping":
            self._send({"jsonrpc": "2.0", "id": msg["id"], "result": {}})
        else:
            self._send({"jsonrpc": "2.0", "id": msg["id"], "error": {
                "code": -32601, "message": f"method not found: {msg.get('method')}"}})

    async def initialize(self) -> dict[str, Any]:
        """The handshake; the server's initialize result."""
        resp = await self.request("initialize", {
            "protocolVersion": PROTOCOL_VERSION, "capabilities": {},
            "clientInfo": CLIENT_INFO})
        if "result" not in resp or not isinstance(resp["result"], dict):
            raise MCPError(f"initialize failed: {_rpc_error(resp)}")
        self.notify("notifications/initialized")
        self.ready = True
        return resp["result"]

    async def list_tools(self) -> list[dict[str, Any]]:
        """Every tool of tools/list, all pages."""
        tools: list[dict[str, Any]] = []
        cursor = None
        for _ in range(1000):
            resp = await self.request("tools/list", {"cursor": cursor} if cursor else {})
            res = resp.get("result")
            if not isinstance(res, dict) or not isinstance(res.get("tools"), list):
                raise MCPError(f"tools/list failed: {_rpc_error(resp)}")
            tools += [t for t in res["tools"] if isinstance(t, dict)]
            cursor = res.get("nextCursor")
            if not cursor:
                break
        return tools

    async def call(self, tool: str, args: dict[str, Any], traceparent: str | None = None
                   ) -> tuple[str | None, str | None]:
        """tools/call: (output, None) or (None, the error); a call's W3C `traceparent`
        goes in the request's `_meta`, as MCP carries trace context."""
        params: dict[str, Any] = {"name": tool, "arguments": args}
        if traceparent:
            params["_meta"] = {"traceparent": traceparent}
        resp = await self.request("tools/call", params)
        if "result" not in resp:
            return None, _rpc_error(resp)
        return result_outcome(resp["result"])

    def cancelled(self, reason: str = "cancelled by the caller") -> None:
        """Tell the server the request in flight is abandoned."""
        try:
            self.notify("notifications/cancelled", {"requestId": self.last_id,
                                                    "reason": reason})
        except Exception:
            pass


def _rpc_error(resp: dict[str, Any]) -> str:
    err = resp.get("error")
    if isinstance(err, dict):
        return f"mcp error {err.get('code')}: {err.get('message')}"
    return f"no result in {json.dumps(resp)[:60]}"


def result_outcome(res: Any) -> tuple[str | None, str | None]:
    """A tools/call result as (output, None) or (None, error); see the header."""
    if not isinstance(res, dict):
        return None, f"tools/call result is not an object: {json.dumps(res)[:60]}"
    content = res.get("content")
    content = content if isinstance(content, list) else []
    if all(isinstance(c, dict) and c.get("type") == "text" and isinstance(c.get("text"), str)
           for c in content):
        text = "\n".join(c["text"] for c in content)
    else:
        text = json.dumps({"content": content}, ensure_ascii=False)
    if res.get("isError") or res.get("is_error"):
        return None, text or "the tool reported an error"
    return text, None
