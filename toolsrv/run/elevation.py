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
import os
from collections.abc import Mapping

MAX_LINE = 1 << 20
SOCKET_VARS = ("OLLIE_BYPASS_SOCKET", "OLLIE_ELEVATE_SOCKET")   # toolsrv's name, the seeds'


def broker_socket(env: Mapping[str, str], namespace: str) -> str:
    """The broker's socket, by the one rule `toolsrv serve` (which asks) and `toolsrv
    approve` (which listens) both follow, so that they meet without being told:
    $OLLIE_BYPASS_SOCKET, else $OLLIE_ELEVATE_SOCKET (the name the seeds use), else
    approve.sock in the Plan 9 namespace directory.  ValueError when the two variables
    name different sockets: which one is meant cannot be guessed."""
    ours, seeds = (env.get(n) or "" for n in SOCKET_VARS)
    if ours and seeds and os.path.abspath(ours) != os.path.abspath(seeds):
        raise ValueError(f"OLLIE_BYPASS_SOCKET={ours} and OLLIE_ELEVATE_SOCKET={seeds} name "
                         "two approval brokers' sockets (both variables mean the one "
                         "broker): unset one, or make them agree")
    return ours or seeds or os.path.join(namespace, "approve.sock")


def no_broker(socket_path: str) -> str:
    """No broker listens at socket_path: what to do, in few words (an Rerror's ERRMAX)."""
    return f"no broker at {socket_path}: start one with `toolsrv approve`"


async def request_approval(socket_path: str | None, request: dict,
                           timeout: float = 60.0) -> tuple[bool, str]:
    """Ask the broker; return (approved, reason). Never raises for broker trouble."""
    if not socket_path:
        return False, "no approval broker configured (OLLIE_BYPASS_SOCKET is unset)"
    if not os.path.lexists(socket_path):    # the commonest case, before the token's
        return False, no_broker(socket_path)
    try:
        return await asyncio.wait_for(_ask(socket_path, request), timeout)
    except TimeoutError:
        return False, f"approval broker did not answer within {timeout:g}s"
    except (FileNotFoundError, ConnectionRefusedError):
        return False, no_broker(socket_path)
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
