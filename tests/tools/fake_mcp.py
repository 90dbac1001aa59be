#!/usr/bin/env python3
"""A small MCP server on stdio without the SDK, for the tests of the mcp protocol: tools
`echo` (text), `image` (non-text content), `fail` (isError), `sleep` (waits; records a
notifications/cancelled it gets in $FAKE_MCP_LOG), and one whose name toolsrv cannot serve."""
import json
import os
import select
import sys
import time

TOOLS = [
    {"name": "echo", "description": "Echo the text back.",
     "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}},
                     "required": ["text"]}, "annotations": {"readOnlyHint": True}},
    {"name": "image", "description": "A picture.", "inputSchema": {"type": "object"},
     "icons": [{"src": "https://example.test/image.png", "mimeType": "image/png",
                "sizes": ["48x48"]}, {"src": "javascript:alert(1)"}]},
    {"name": "fail", "description": "Always fails.", "inputSchema": {"type": "object"}},
    {"name": "sleep", "description": "Sleep a while.",
     "inputSchema": {"type": "object", "properties": {"t": {"type": "number"}}}},
    {"name": "who am/i", "description": "A name with a slash and a space.",
     "inputSchema": {"type": "object"}},
]
token = os.urandom(4).hex()


buf = b""


def next_line(timeout=None):
    """The next line of stdin (b"" at EOF), or None when `timeout` passes first."""
    global buf
    end = None if timeout is None else time.monotonic() + timeout
    while b"\n" not in buf:
        left = None if end is None else max(0.0, end - time.monotonic())
        if not select.select([0], [], [], left)[0]:
            return None
        data = os.read(0, 65536)
        if not data:
            return b""
        buf += data
    line, buf = buf.split(b"\n", 1)
    return line


def note_cancel(msg):
    if os.environ.get("FAKE_MCP_LOG"):
        with open(os.environ["FAKE_MCP_LOG"], "a") as f:
            f.write(json.dumps(msg["params"]) + "\n")


def sleep(t):
    """Sleep t seconds, or until a notifications/cancelled comes: False then."""
    end = time.monotonic() + t
    while time.monotonic() < end:
        line = next_line(end - time.monotonic())
        if line is None:
            break
        if line == b"":
            sys.exit(0)
        msg = json.loads(line)
        if msg.get("method") == "notifications/cancelled":
            note_cancel(msg)
            return False
    return True


def send(msg):
    sys.stdout.write(json.dumps(msg) + "\n")
    sys.stdout.flush()


while True:
    line = next_line()
    if not line:
        break
    msg = json.loads(line)
    method, rid = msg.get("method"), msg.get("id")
    if method == "notifications/cancelled":
        note_cancel(msg)
    if rid is None:
        continue
    if method == "initialize":
        send({"jsonrpc": "2.0", "id": rid, "result": {
            "protocolVersion": msg["params"]["protocolVersion"], "capabilities": {"tools": {}},
            "serverInfo": {"name": "fake", "version": "1"}}})
    elif method == "tools/list":
        send({"jsonrpc": "2.0", "method": "notifications/message",
              "params": {"level": "info", "data": "listing"}})
        send({"jsonrpc": "2.0", "id": rid, "result": {"tools": TOOLS}})
    elif method == "tools/call":
        name, args = msg["params"]["name"], msg["params"].get("arguments", {})
        print(f"calling {name}", file=sys.stderr, flush=True)
        if name == "echo":
            res = {"content": [{"type": "text", "text": args["text"]},
                               {"type": "text", "text": token}]}
            trace = (msg["params"].get("_meta") or {}).get("traceparent")
            if trace:                     # the call's trace context, when it has one
                res["content"].append({"type": "text", "text": f"trace {trace}"})
        elif name == "image":
            res = {"content": [{"type": "image", "data": "aGk=", "mimeType": "image/png"}]}
        elif name == "fail":
            res = {"content": [{"type": "text", "text": "no such record: 42"}], "isError": True}
        elif name == "sleep":
            if not sleep(args.get("t", 0)):
                continue                  # cancelled: no response, as MCP says
            res = {"content": [{"type": "text", "text": "slept"}]}
        else:
            send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32602,
                                                        "message": f"unknown tool {name}"}})
            continue
        send({"jsonrpc": "2.0", "id": rid, "result": res})
    else:
        send({"jsonrpc": "2.0", "id": rid, "error": {"code": -32601, "message": "no"}})
