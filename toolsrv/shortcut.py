"""`toolsrv call SESSION AGENT TOOL JSON`: the one-line way to call a tool.

Creates the session and the agent when they are missing, loads the tool
(loading is idempotent), writes the JSON to the tool's call file and reads
the result back on the same fid, exactly as an agent's `rdwr` does.
"""
from __future__ import annotations

from typing import Any

from .client import ClientError


def ensure_dir(c: Any, path: str) -> None:
    try:
        c.mkdir(path)
    except ClientError as e:
        if "exists" not in str(e):
            raise


def call(c: Any, session: str, agent: str, tool: str, args: str) -> bytes:
    """Call `tool` with `args` (JSON text) and return its output."""
    ensure_dir(c, f"session/{session}")
    base = f"session/{session}/agent/{agent}"
    ensure_dir(c, base)
    c.rdwr(f"{base}/ctl", f"tool_load {tool}".encode())
    return c.rdwr(f"{base}/tools/{tool}/call", args.encode())
