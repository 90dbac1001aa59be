"""The face's steady-state `tools/call`, answered beside the SDK's dispatch (stdio only).

Theory of operation.  Once a stdio connection of the handshake era is initialized and its
seat is made (its first call went through the SDK: seat, roots, client name), a plain
`tools/call` costs the SDK's request machinery (parse into its models, the dispatcher's
task and cancel scope, middleware, the result's model and its dump, the writer task)
about three quarters of the face's CPU per call, as much again as the 9P rdwr that does
the work (doc/performance.md, The MCP face).  `Calls.take(line)` sees each stdin line
before the SDK does (stdio.py's `LinesIn`) and keeps the ones that are exactly such a
call:

  taken      a JSON-RPC request `tools/call` with an int or string id not in flight
             here, params of `name` (a string) and `arguments` (an object or absent) and
             nothing else (no `_meta`: progress, and whatever else a client may attach,
             stay the SDK's), on the one handshake-era connection, whose seat is ready.
  answered   by a task: `Face.call` as server.py's handler calls it; the result shaped
             by the SDK's own per-version serializer (`serialize_server_result`, what
             its runner applies) and written as one line through the same writer; an
             `Unknown` tool the SDK's -32602, another exception its code 0.  A call
             whose result does not fit MCP's types goes through server.py's `_result`
             (the text fallback) first.
  in order   while a tools/call passed to the SDK is in flight (a first call, one with
             `_meta`), none is taken: the calls of one agent keep the order they came in
             (server.py's middleware says when the SDK is done with each).
  consent    a call the tree asks about (consent/) is put to the user by an
             `elicitation/create` on the connection, as the SDK's path does
  cancelled  a `notifications/cancelled` naming a request taken here cancels its task
             (ninep.py flushes the read: toolsrv kills the run), and it is never
             answered, as the spec says and the SDK does; the notification is still
             passed on (the SDK ignores ids it does not hold).

Everything else (the first call, a call with `_meta`, every other method, HTTP, the
2026-era stdio requests) is the SDK's, untouched; so is every call when an OpenTelemetry
tracer provider is set (the SDK's middleware makes a span of each request: a traced
face keeps them all).  The wire is the same either way: tests/mcpface/test_fast.py sends
each kind of call both ways and compares the answers.
"""
from __future__ import annotations

import asyncio
import json
import logging
from typing import Any

from mcp_types import INVALID_PARAMS, methods
from mcp_types.jsonrpc import CONNECTION_CLOSED     # the SDK's answer to a request cut off
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from mcp.shared.dispatcher import coerce_request_id as _key   # "7" and 7: one request
from pydantic import ValidationError

from . import extras
from .face import Unknown
from .server import _result
from .stdio import LinesOut

log = logging.getLogger("toolsrv.mcp")


class Calls:
    """The steady-state tools/call of one stdio face (see the module's comment)."""

    def __init__(self, wiring: Any, out: LinesOut) -> None:
        self.wiring = wiring
        self.out = out
        self.running: dict[Any, asyncio.Task[None]] = {}
        self.cancelled: set[Any] = set()
        self.traced = _traced()
        self.sdk = 0                    # tools/call requests passed to the SDK, in flight
        self.said = False               # the verbose log's one line about this path

    def _conn(self) -> tuple[Any, Any] | None:
        """(connection, seat) when the one connection is steady: handshake era, seat made."""
        conns = self.wiring.conns
        if len(conns) != 1 or self.wiring.http:
            return None
        conn, seat = next(iter(conns.values()))
        version = getattr(conn, "protocol_version", None)
        if not seat.ready or not isinstance(version, str) or version in MODERN_PROTOCOL_VERSIONS:
            return None
        return conn, seat

    def take(self, line: str) -> bool:
        """True when the line is handled here (the SDK must not see it)."""
        call = '"tools/call"' in line
        if not call and '"notifications/cancelled"' not in line:
            return False
        if not call:
            self._cancel(line)
            return False
        try:
            msg = json.loads(line)
        except ValueError:
            return False
        if not isinstance(msg, dict) or msg.get("jsonrpc") != "2.0" or \
                msg.get("method") != "tools/call":
            return False
        rid, params = msg.get("id"), msg.get("params")
        if not isinstance(rid, (int, str)) or isinstance(rid, bool):   # true is an int
            return False                # not a request the SDK dispatches as one
        got = None if self.traced or self.sdk else self._conn()
        name = params.get("name") if isinstance(params, dict) else None
        args = params.get("arguments") if isinstance(params, dict) else None
        if got is None or not msg.keys() <= _REQUEST or _key(rid) in self.running or \
                not isinstance(params, dict) or not params.keys() <= _PARAMS or \
                not isinstance(name, str) or not (args is None or isinstance(args, dict)):
            self.sdk += 1               # the SDK's: settled() when it is done with it
            return False
        key = _key(rid)
        if not self.said:
            self.said = True
            log.debug("a steady tools/call (id %r): answered beside the SDK from now on "
                      "(doc/mcp.md, A connection's steady calls)", rid)
        self.running[key] = asyncio.get_running_loop().create_task(
            self._call(rid, key, got, name, args if args is not None else {}))
        return True

    def settled(self) -> None:
        """The SDK is done with a tools/call it was passed (answered, failed, cancelled)."""
        self.sdk = max(0, self.sdk - 1)

    def _cancel(self, line: str) -> None:
        try:
            msg = json.loads(line)
            rid = msg["params"]["requestId"]
        except (ValueError, TypeError, KeyError):
            return
        if msg.get("method") != "notifications/cancelled" or type(rid) not in (int, str):
            return
        task = self.running.get(_key(rid))
        if task is not None:
            self.cancelled.add(_key(rid))
            task.cancel()

    async def _call(self, rid: Any, key: Any, got: tuple[Any, Any], name: str,
                    args: dict[str, Any]) -> None:
        conn, seat = got
        answer: dict[str, Any]
        try:
            try:
                res = await self._asked(conn, seat, name, args)
                answer = {"result": _shaped(res, conn.protocol_version)}
            except Unknown as e:
                answer = {"error": {"code": INVALID_PARAMS, "message": str(e)}}
            except asyncio.CancelledError:
                if key in self.cancelled:
                    return                      # the client cancelled: never answered
                await self._write(rid, {"error": {"code": CONNECTION_CLOSED,
                                                  "message": "Connection closed"}})
                raise
            except Exception as e:              # as the SDK's dispatcher answers it
                log.exception("handler for 'tools/call' raised")
                answer = {"error": {"code": 0, "message": str(e)}}
            await self._write(rid, answer)
            if id(conn) in self.wiring.subscribed:
                try:
                    await conn.send_resource_updated(extras.LOG_URI)
                except Exception as e:
                    log.debug("resources/updated not sent: %s", e)
        finally:
            self.running.pop(key, None)
            self.cancelled.discard(key)

    async def _asked(self, conn: Any, seat: Any, name: str, args: dict[str, Any]
                     ) -> dict[str, Any]:
        """Face.call, its question, if the tree asks one, put to the user by an
        elicitation/create on the connection (consent/ask.py)."""
        broker = getattr(self.wiring, "consent", None)
        if broker is None:
            return await self.wiring.face.call(seat, name, args)
        from mcp_types import ElicitRequest, ElicitRequestFormParams
        from .consent.ask import elicit, target

        async def send(text: str, schema: dict) -> Any:
            return await conn.send_request(ElicitRequest(params=ElicitRequestFormParams(
                message=text, requested_schema=schema)))
        tool, targs = target(self.wiring.face, name, args)
        with broker.waiting(seat, tool, targs, elicit(send, conn.client_capabilities)):
            return await self.wiring.face.call(seat, name, args)

    async def _write(self, rid: Any, answer: dict[str, Any]) -> None:
        line = json.dumps({"jsonrpc": "2.0", "id": rid, **answer}, ensure_ascii=False,
                          separators=(",", ":"))
        try:
            await self.out.write(line + "\n")
            await self.out.flush()
        except (ConnectionError, RuntimeError) as e:   # the client went away
            log.debug("dropped result for %r: %s", rid, e)

    async def close(self) -> None:
        """Cancel what is still running (the connection ended): its runs are killed."""
        tasks = list(self.running.values())
        for t in tasks:
            t.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)


def _traced() -> bool:
    """Whether OpenTelemetry has a tracer provider (the SDK's own dependency)."""
    try:
        from opentelemetry import trace
    except ImportError:
        return False
    return not isinstance(trace.get_tracer_provider(),
                          (trace.ProxyTracerProvider, trace.NoOpTracerProvider))


_REQUEST = frozenset(("jsonrpc", "id", "method", "params"))
_PARAMS = frozenset(("name", "arguments"))


def _shaped(res: dict[str, Any], version: str) -> dict[str, Any]:
    """The face's result as the SDK's runner puts it on the wire for `version`."""
    try:
        plain = dict(res)
        plain.pop("_text", None)
        return methods.serialize_server_result("tools/call", version, plain)
    except ValidationError:         # content passed through that is not MCP's: the text
        dumped = _result(res).model_dump(by_alias=True, mode="json", exclude_none=True)
        return methods.serialize_server_result("tools/call", version, dumped)
