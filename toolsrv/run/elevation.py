# toolsrv/run/elevation.py — asking the approval broker before a run leaves the sandbox.
#
# Theory of operation.  A call with "elevated": true runs outside Landlock only after the
# broker at $OLLIE_BYPASS_SOCKET says yes.  The protocol is one JSON line each way over a Unix
# stream socket: the server sends {"session", "agent", "tool", "args", "cwd"}, the broker
# answers {"approve": true|false, "reason": "..."}.  Every doubt means no: no socket
# configured, a socket that does not answer, a timeout, a closed connection, an answer that is
# not exactly a JSON object whose "approve" is the boolean true.
#
# This is the server's half (the client of the broker).  The reference broker, `toolsrv
# approve [--allow TOOL …] [--socket PATH]`, is a command of its own: cli/approve.py.
from __future__ import annotations

import asyncio
import json

MAX_LINE = 1 << 20


async def request_approval(socket_path: str | None, request: dict,
                           timeout: float = 60.0) -> tuple[bool, str]:
    """Ask the broker; return (approved, reason). Never raises for broker trouble."""
    if not socket_path:
        return False, "no approval broker configured (OLLIE_BYPASS_SOCKET is unset)"
    try:
        return await asyncio.wait_for(_ask(socket_path, request), timeout)
    except TimeoutError:
        return False, f"approval broker did not answer within {timeout:g}s"
    except (OSError, ValueError) as e:
        return False, f"approval broker at {socket_path}: {e.strerror or e}" \
            if isinstance(e, OSError) else f"approval broker: bad answer: {e}"


async def _ask(socket_path: str, request: dict) -> tuple[bool, str]:
    reader, writer = await asyncio.open_unix_connection(socket_path, limit=MAX_LINE)
    try:
        writer.write(json.dumps(request, default=str).encode() + b"\n")
        await writer.drain()
        line = await reader.readline()
    finally:
        writer.close()
    if not line:
        return False, "approval broker closed the connection without answering"
    answer = json.loads(line)
    if not isinstance(answer, dict):
        raise ValueError("not a JSON object")
    reason = str(answer.get("reason") or "")
    if answer.get("approve") is True:
        return True, reason or "approved"
    return False, reason or "refused by the approval broker"
