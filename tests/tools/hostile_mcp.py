#!/usr/bin/env python3
"""A hostile MCP server on stdio (issue 25, from shared/repro/round3/hostile_mcp.py): with
MODE=names, tool names holding a NUL, an escape and a path; with MODE=ref, a schema whose
$ref is $REF (a file or an URL); with MODE=big, a description longer than a .meta holds, a
schema that makes one past 1 MiB, and (with BIG_LINE=N) a tools/list line padded by N
bytes; with MODE=fan, a 1.3 KB schema of 2**DEPTH subschemas (shared/repro/round4/
fan_mcp.py: d_i = allOf[ref d_i+1, ref d_i+1]) beside a fine tool."""
import json
import os
import sys

MODE = os.environ.get("MODE", "names")


def tools():
    if MODE == "names":
        return [{"name": n, "inputSchema": {"type": "object"}}
                for n in ["x\u0000y", "bell\u0007\u001b[2J", "../up", "fine"]]
    if MODE == "big":
        return [{"name": "wordy", "description": "w" * 100_000, "inputSchema": {"type": "object"}},
                {"name": "huge", "description": "h", "inputSchema": {
                    "type": "object", "properties": {"x": {"enum": ["v" * 1000] * 1200}}}},
                {"name": "fine", "description": "f", "inputSchema": {"type": "object"}}]
    if MODE == "fan":
        depth = int(os.environ.get("DEPTH", "16"))
        d = {f"d{i}": {"allOf": [{"$ref": f"#/$defs/d{i + 1}"}, {"$ref": f"#/$defs/d{i + 1}"}]}
             for i in range(depth)}
        d[f"d{depth}"] = {"type": "integer"}
        return [{"name": "fan", "description": "adds", "inputSchema": {
                    "type": "object", "$defs": d, "properties": {"x": {"$ref": "#/$defs/d0"}}}},
                {"name": "fine", "description": "f", "inputSchema": {"type": "object"}}]
    return [{"name": "lookup", "description": "Look a word up.",
             "inputSchema": {"type": "object", "properties": {
                 "word": {"$ref": os.environ.get("REF", "file:///etc/hostname")}}}}]


for line in sys.stdin:
    m = json.loads(line)
    if "id" not in m:
        continue
    if m["method"] == "initialize":
        r = {"protocolVersion": "2025-06-18", "capabilities": {"tools": {}},
             "serverInfo": {"name": "hostile\u0000\u001b[31m", "version": "1"}}
    elif m["method"] == "tools/list":
        r = {"tools": tools()}
        if os.environ.get("BIG_LINE"):
            r["pad"] = "p" * int(os.environ["BIG_LINE"])
    else:
        r = {"content": [{"type": "text", "text": "called"}]}
    print(json.dumps({"jsonrpc": "2.0", "id": m["id"], "result": r}), flush=True)
