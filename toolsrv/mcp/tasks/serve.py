"""Tasks through the SDK: the `io.modelcontextprotocol/tasks` extension of the 2026-07-28
revision (its specification, SEP-2663), served over stdio and streamable HTTP.

Theory of operation.
  declared   the face advertises the extension (`capabilities.extensions`, in
             server/discover's answer).  A 2026-era `tools/call` whose request declares
             it too (its `_meta` clientCapabilities) and names a tool the face lists is
             a task: the server decides per request, and this face always does (a
             client that declares the extension must take either shape).  Any other
             call (a client that does not declare it, the handshake era, an unknown
             tool: still its -32602) is answered as before.
  a task     is the call the request would have run, the same `Face.call` on the same
             seat, held open by an asyncio task of the face instead of the request:
             the client gets `CreateTaskResult` (`resultType: "task"`, `working`) at
             once, after store.py wrote the record.  Over HTTP the call's seat (a
             session and agent of its own) is the task's, removed when the call ends;
             over stdio it is the connection's.  The run is the tree's call
             `session/S/agent/A/tools/T/call`: `status` says how it runs, and the agent's
             `log` names it.
  tasks/get  the record: while it runs, `statusMessage` is the call's `status` line
             (`running 12.031s out 4096 progress 40/100 …`); when it ended, `completed`
             with the result a plain call would have had (an error result included,
             `isError`), or `cancelled`.  An id of another principal, or expired: -32602.
  tasks/cancel  cancels the asyncio task: ninep.py flushes the call's read and toolsrv
             kills the run, every process of its PID namespace.  The record reads
             `cancelled`.  A call ended another way as `cancelled` (`cancel` on the
             agent's ctl, the seat's removal) reads `cancelled` too.
  tasks/update  there is no input a task asks for: any response is ignored (the spec's
             SHOULD for keys not outstanding), acknowledged empty.
  owner      the principal: an OAuth token's issuer and subject; else the static token
             (by its hash) and the peer (http.py Gate.who: its uid on loopback); over
             stdio, the local user (any `toolsrv mcp` of this state home).

A task outlives the request and the connection that made it (a client that reconnects as
the same principal gets it by id), not the face: a call running when `toolsrv mcp` stops
is killed with its 9P connection, and its record then reads `cancelled`.  Requests of a
client that does not declare the extension get -32021 (missing capability), of the
handshake era -32601 (no such method).  Notifications (`notifications/tasks` on
`subscriptions/listen`) are not sent: clients poll.
"""
from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Awaitable, Callable, TypeVar

import mcp_types as types
from mcp_types import methods
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from mcp.shared.exceptions import MCPError

from .store import TERMINAL, Store, TooMany, mark, wire

log = logging.getLogger("toolsrv.mcp")

EXTENSION = "io.modelcontextprotocol/tasks"
MISSING_CAPABILITY = -32021     # the spec's Missing Required Client Capability
T = TypeVar("T")


class TaskParams(types.RequestParams):
    """tasks/get, tasks/cancel and tasks/update's params (the update's inputResponses,
    a field this model does not keep, are ignored)."""
    task_id: str


class Tasks:
    """The face's tasks: the handlers and the runs held (module comment)."""

    def __init__(self, face: Any, shape: Callable[[dict[str, Any]], Any], home: str,
                 principal_key: str) -> None:
        self.face = face
        self.shape = shape              # server.py's _result: the face's dict -> the SDK's
        self.store = Store(home)
        self.principal_key = principal_key
        self.runs: dict[str, tuple[dict[str, Any], asyncio.Task[None], Any, str, Any]] = {}
        # the store's disk work (reads, sweeps, fsyncs): off the loop, one at a time
        self._disk = ThreadPoolExecutor(1, thread_name_prefix="toolsrv-mcp-tasks")

    async def _io(self, fn: Callable[..., T], *args: Any) -> T:
        """`fn(*args)`, a Store method, in the store's worker thread."""
        return await asyncio.get_running_loop().run_in_executor(self._disk, fn, *args)

    async def _end(self, rec: dict[str, Any], status: str, message: str | None = None,
                   **payload: Any) -> None:
        """The task ended: marked on the loop, written by the worker (a copy: the loop
        may read `rec` while it is written)."""
        mark(rec, status, message, **payload)
        await self._io(self.store.save, dict(rec))

    def install(self, server: Any) -> None:
        server.extensions[EXTENSION] = {}
        for method, handler in (("tasks/get", self.poll), ("tasks/cancel", self.cancel),
                                ("tasks/update", self.update)):
            server.add_request_handler(method, TaskParams, handler)

    # -- the call that becomes a task --
    def asked(self, ctx: Any) -> bool:
        """Whether a request may be answered with a task: the 2026 era, and the
        extension in the request's client capabilities."""
        return ctx.protocol_version in MODERN_PROTOCOL_VERSIONS and _declares(ctx)

    async def serves(self, name: str) -> bool:
        try:
            return any(t.name == name for t in await self.face.listing())
        except Exception:
            return False        # the plain path says what is wrong

    async def start(self, ctx: Any, seat: Any, own: bool, name: str, args: Any,
                    work: Callable[[], Awaitable[dict[str, Any]]]) -> Any:
        """Run `work` (the call the request would have run) as a task; its handle (a
        CreateTaskResult, a dict: the SDK passes a claimed `resultType` through).  `own`:
        the seat is the request's own, to release when the call ends."""
        try:
            rec = await self._io(self.store.new, self.owner(ctx), name)
        except TooMany as e:
            raise MCPError(types.INTERNAL_ERROR, str(e)) from None
        run = asyncio.ensure_future(self._run(rec, seat, own, work, ctx.protocol_version))
        self.runs[rec["taskId"]] = (rec, run, seat, name, args)
        return {"resultType": "task", **wire(rec)}

    async def _run(self, rec: dict[str, Any], seat: Any, own: bool,
                   work: Callable[[], Awaitable[dict[str, Any]]], version: str) -> None:
        try:
            res = await work()
            result = methods.serialize_server_result(
                "tools/call", version, self.shape(res).model_dump(
                    by_alias=True, mode="json", exclude_none=True))
            if result.get("isError") and _text(result).startswith("cancelled"):
                await self._end(rec, "cancelled", _text(result).splitlines()[0])
            else:
                await self._end(rec, "completed", None, result=result)
        except asyncio.CancelledError:
            if rec["status"] not in TERMINAL:
                await self._end(rec, "cancelled", "cancelled by tasks/cancel: the run was "
                               "killed")
        except MCPError as e:
            await self._end(rec, "failed", e.message, error=e.error.model_dump(
                mode="json", exclude_none=True))
        except Exception as e:          # Unknown (a tool gone from the registry), a bug
            code = types.INVALID_PARAMS if type(e).__name__ == "Unknown" else \
                types.INTERNAL_ERROR
            await self._end(rec, "failed", str(e), error={"code": code, "message": str(e)})
        finally:
            self.runs.pop(rec["taskId"], None)
            if rec.get("call") is None and seat.session and seat.agent:
                rec["call"] = f"{seat.base}/tools/{rec['tool']}/call"   # for the record
                await self._io(self.store.save, dict(rec))
            if own:
                await asyncio.shield(self.face.release(seat))

    # -- tasks/* --
    async def poll(self, ctx: Any, params: TaskParams) -> dict[str, Any]:
        rec = await self._find(ctx, params.task_id)
        out = wire(rec)
        if rec["status"] == "working":
            out["statusMessage"] = await self._running(rec)
        return out

    async def cancel(self, ctx: Any, params: TaskParams) -> dict[str, Any]:
        rec = await self._find(ctx, params.task_id)
        held = self.runs.get(rec["taskId"])
        if held is not None:
            held[1].cancel()
            await asyncio.wait({held[1]})       # the read flushed: the run is killed
            if rec["status"] not in TERMINAL:   # cancelled before it began
                await self._end(rec, "cancelled", "cancelled by tasks/cancel")
            self.runs.pop(rec["taskId"], None)
        elif rec["status"] == "working":
            raise MCPError(types.INVALID_PARAMS, f"task {rec['taskId']} is run by another "
                           f"toolsrv mcp (pid {rec.get('pid')}): cancel it there")
        return {}

    async def update(self, ctx: Any, params: TaskParams) -> dict[str, Any]:
        await self._find(ctx, params.task_id)
        return {}

    async def _find(self, ctx: Any, task_id: str) -> dict[str, Any]:
        if ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            raise MCPError(types.METHOD_NOT_FOUND, "Method not found", ctx.method)
        if not _declares(ctx):
            raise MCPError(MISSING_CAPABILITY, "Missing required client capability",
                           {"requiredCapabilities": {"extensions": {EXTENSION: {}}}})
        owner = self.owner(ctx)
        held = self.runs.get(task_id)
        rec = held[0] if held is not None and held[0]["owner"] == owner else \
            await self._io(self.store.find, task_id, owner)
        if rec is None:
            raise MCPError(types.INVALID_PARAMS, "Failed to retrieve task: task not found "
                           "(never made, made by another principal, or expired)")
        return rec

    async def _running(self, rec: dict[str, Any]) -> str:
        held = self.runs.get(rec["taskId"])
        if held is None:
            return f"running in another toolsrv mcp (pid {rec.get('pid')})"
        _, _, seat, name, args = held
        line = await self.face.status(seat, name, args)
        return line.splitlines()[0] if line and line.strip() else "working"

    def owner(self, ctx: Any) -> str:
        """The principal a task belongs to (module comment)."""
        req = getattr(ctx, "request", None)
        scope = getattr(req, "scope", None) or {}
        who = getattr(scope.get("user"), "principal", None)
        if who is not None:
            return f"oauth {who.issuer} {who.sub}"
        said = scope.get(self.principal_key)      # "bearer token sha256:… from uid N"
        return said or "local"


def _declares(ctx: Any) -> bool:
    """Whether the request's client capabilities name the extension."""
    conn = getattr(ctx.session, "_connection", None)
    caps = getattr(conn, "client_capabilities", None)
    if caps is None:
        params = getattr(ctx.session, "client_params", None)
        caps = getattr(params, "capabilities", None)
    extensions = getattr(caps, "extensions", None)
    return isinstance(extensions, dict) and EXTENSION in extensions


def _text(result: dict[str, Any]) -> str:
    return "".join(c.get("text", "") for c in result.get("content", [])
                   if isinstance(c, dict))
