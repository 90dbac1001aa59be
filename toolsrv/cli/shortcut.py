"""`toolsrv call [--cwd DIR] SESSION AGENT TOOL JSON`: the one-line way to call a tool.

Creates the session and the agent when they are missing, loads the tool
(loading is idempotent), writes the JSON to the tool's call file and reads
the result back on the same fid, exactly as an agent's `rdwr` does.

A session it creates works where the caller stands: its `cwd` is the caller's
current directory, or `--cwd DIR`.  An existing session keeps its cwd unless
`--cwd` is given.  When the cwd of a session just created cannot be set (the
directory does not exist on the server's host), the session is removed again
and the error is the cwd's.
"""
from __future__ import annotations

import json
import re
from typing import Any

from .client import ClientError

CALL_PATH = re.compile(r"(?:^|/)session/[^/]+/agent/[^/]+/tools/[^/]+/call/*$")


def is_call_path(path: str) -> bool:
    """True for a tool's call file (session/S/agent/A/tools/T/call), whose data is args."""
    return bool(CALL_PATH.search(path.lstrip("./")))


def args_problem(text: str) -> str | None:
    """Why `text` is not one complete JSON object (json's words and where), or None.
    Said before connecting: truncated JSON would otherwise be written, never make a
    call, and leave nothing to read (issue 27)."""
    if not text.strip():
        return "no args: write one JSON object, such as '{}'"
    try:
        val = json.loads(text)
    except json.JSONDecodeError as e:
        return (f"args are not one complete JSON object: {e.msg}: line {e.lineno} "
                f"column {e.colno} (char {e.pos})")
    except RecursionError:
        return "args are not one JSON object: nested too deeply"
    except ValueError as e:      # an integer of more digits than int() takes
        return f"args are not usable JSON: {e}"
    if not isinstance(val, dict):
        kind = {list: "an array", str: "a string", bool: "a boolean", type(None): "null",
                int: "a number", float: "a number"}.get(type(val), type(val).__name__)
        return f"args must be one JSON object ({{...}}), not {kind}"
    return None


def ensure_dir(c: Any, path: str) -> bool:
    """Make path (a session or agent); True when this call made it."""
    try:
        c.mkdir(path)
    except ClientError as e:
        if "exists" not in str(e):
            raise
        return False
    return True


def call(c: Any, session: str, agent: str, tool: str, args: str,
         cwd: str | None = None, here: str | None = None) -> bytes:
    """Call `tool` with `args` (JSON text) and return its output.  A session made here
    gets `cwd`, else `here` (the caller's directory), as its cwd; an existing one gets
    `cwd` when it is given."""
    made = ensure_dir(c, f"session/{session}")
    where = cwd if cwd is not None else here if made else None
    if where is not None:
        try:
            c.write(f"session/{session}/cwd", where.encode())
        except ClientError:
            if made:
                try:
                    c.rm(f"session/{session}")
                except ClientError:
                    pass
            raise
    base = f"session/{session}/agent/{agent}"
    ensure_dir(c, base)
    try:
        c.rdwr(f"{base}/ctl", f"tool_load {tool}".encode())
    except ClientError as e:
        raise whole(c, f"{base}/log", " ctl ", e) from None
    return call_file(c, f"{base}/tools/{tool}/call", args.encode())


def call_file(c: Any, path: str, data: bytes) -> bytes:
    """rdwr of a call file; an error cut to fit an Rerror (ERRMAX) is raised whole."""
    try:
        return c.rdwr(path, data)
    except ClientError as e:
        if not is_call_path(path):
            raise
        parts = path.strip("/").split("/")
        raise whole(c, "/".join(parts[:-3] + ["log"]), f" call {parts[-2]} ", e) from None


def whole(c: Any, log: str, key: str, e: ClientError) -> ClientError:
    """`e`, or, when the Rerror was shortened to fit ERRMAX ("..." in it), the whole
    reason as the agent's `log` has it: its newest line holding `key` and the text before
    the first "...", from there on."""
    why = str(e)
    if "..." not in why:
        return e
    try:
        lines = c.read(log).decode("utf-8", "replace").splitlines()
    except ClientError:
        return e
    head = why.split("...")[0].rstrip()
    for line in reversed(lines):
        at = line.find(head)
        if key in line and at >= 0:
            return ClientError(line[at:])
    return e
