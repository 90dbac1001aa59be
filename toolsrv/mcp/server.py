"""`toolsrv mcp`: the MCP face, an MCP server (the official `mcp` SDK) over the 9P tree.

Theory of operation.  This module is the only one of toolsrv that imports the SDK (the
`mcp` extra: `pip install 'toolsrv[mcp]'`); `serve` never loads it.  It builds the SDK's
low-level `Server` with two handlers, tools/list and tools/call, that ask the `Face`
(face.py: what those mean in files) and turn its answers into the SDK's types, and runs
it over stdio (default) or streamable HTTP (http.py).

Connections.  Every MCP connection of the handshake era (stdio, a stateful HTTP session)
is met by a middleware on its first message: it gets a `Seat` (its session and agent,
made on its first call) and a teardown on the SDK's per-connection exit stack that
removes them.  A request of the 2026 era arrives without a connection that outlives
it; its seat is the client's, kept until `toolsrv mcp` exits.

Notifications.  The face's watcher (revwait) calls `changed()`: every live
handshake-era connection gets `notifications/tools/list_changed` on its standalone
channel (stdio's stream, HTTP's GET stream), and the subscription bus carries the same
event to 2026-era `subscriptions/listen` streams.

Cancellation.  The SDK cancels a request's task on `notifications/cancelled`; the
cancellation reaches the 9P read of `call`, which ninep.py flushes: toolsrv kills the run.
"""
from __future__ import annotations

import logging
from typing import Any

import anyio
import mcp_types as types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.subscriptions import InMemorySubscriptionBus, ListenHandler, ToolsListChanged
from mcp.shared.exceptions import MCPError

from .face import Face, Seat, Unknown, clean_name

log = logging.getLogger("toolsrv.mcp")

INSTRUCTIONS = """\
These tools are served by toolsrv, a file server of tools for agents (9P2000): each \
tool is a program on this host described by a .meta file. Every call runs as its own \
process, confined: a Landlock sandbox (the session's profile, `default` unless set) \
limits the files it may read and write (the session's working directory and what the \
profile lists) and its network, and it has a timeout and an output cap; a tool runs \
outside the sandbox only when the user's approval broker approves it. A call that fails \
(arguments not valid against the tool's inputSchema, a non-zero exit, a timeout, a \
refusal of the sandbox) comes back as an error result carrying toolsrv's full reason: \
read it and correct the call. Cancelling a call kills its process. The list of tools \
follows the tools on disk (notifications/tools/list_changed).\
"""
SEARCH_INSTRUCTIONS = """ This server lists two tools instead of its whole registry: \
search_tools finds the tools for a need described in words, and call_tool calls one by \
name with its arguments."""


def standalone_instructions(tried: str | None) -> str:
    """What the instructions add when the face serves its own registry (run.py): nothing
    answered at `tried`, so this is not the user's server, its sessions or its state."""
    if not tried:
        return ""
    return (f" Standalone mode: no toolsrv answered at {tried}, so this process serves "
            "the default registry itself and keeps no state; it does not share sessions, "
            "files or logs with the user's server. Start one (`toolsrv serve`, or `make "
            "run` in the checkout) and restart this MCP server to use it, or give its "
            "address with `toolsrv mcp -a ADDR` (`toolsrv mcp --config` prints a client "
            "configuration that names it).")


def _connection(ctx: Any) -> Any:
    """The SDK's per-connection object of a request (Connection: state, exit_stack,
    outbound).  The low-level context does not name it; its session proxy holds it."""
    return getattr(ctx.session, "_connection", None)


def _client(ctx: Any) -> str:
    params = getattr(ctx.session, "client_params", None)
    info = getattr(params, "client_info", None)
    return getattr(info, "name", None) or "mcp"


class Wiring:
    """The SDK server and its bookkeeping: connections, seats, the subscription bus."""

    def __init__(self, face: Face, pid: str | None = None) -> None:
        self.face = face
        self.pid = pid                    # the client's pid (stdio: our parent), or None
        self.conns: dict[int, tuple[Any, Seat]] = {}
        self.by_client: dict[str, Seat] = {}   # 2026-era requests: one seat per client
        self.bus = InMemorySubscriptionBus()
        self.server: Server[Any] = Server(
            "toolsrv", version=_version(),
            instructions=INSTRUCTIONS + (SEARCH_INSTRUCTIONS if face.search else "")
            + standalone_instructions(getattr(face, "standalone", None)),
            on_list_tools=self.list_tools, on_call_tool=self.call_tool,
            on_subscriptions_listen=ListenHandler(self.bus))
        self.server.middleware.append(self._meet)

    def init_options(self) -> Any:
        return self.server.create_initialization_options(
            NotificationOptions(tools_changed=True))

    # -- connections --
    async def _meet(self, ctx: Any, call_next: Any) -> Any:
        """Middleware: give a handshake-era connection its seat on its first message."""
        conn = _connection(ctx)
        if conn is not None and id(conn) not in self.conns and \
                ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            seat = self.face.seat("mcp", self.pid)
            self.conns[id(conn)] = (conn, seat)
            conn.exit_stack.push_async_callback(self._gone, id(conn))
        if ctx.method == "tools/call" and isinstance(ctx.params, dict):
            _check_arguments(ctx.params)
        return await call_next(ctx)

    async def _gone(self, key: int) -> None:
        conn, seat = self.conns.pop(key, (None, None))
        if seat is not None:
            with anyio.move_on_after(5, shield=True):
                await self.face.release(seat)

    def seat_of(self, ctx: Any) -> Seat:
        client = _client(ctx)
        conn = _connection(ctx)
        got = self.conns.get(id(conn)) if conn is not None else None
        if got is not None and got[0] is conn:
            seat = got[1]
            if not seat.ready:
                seat.client = clean_name(client)   # known by now
            return seat
        seat = self.by_client.get(client)
        if seat is None:
            seat = self.by_client[client] = self.face.seat(client, self.pid)
        return seat

    async def changed(self) -> None:
        """The registry moved: tell every connection that can hear it."""
        for conn, _ in list(self.conns.values()):
            if conn.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                try:
                    await conn.send_tool_list_changed()
                except Exception as e:      # a connection going away: not ours to fail
                    log.debug("list_changed not sent: %s", e)
        await self.bus.publish(ToolsListChanged())

    # -- handlers --
    async def list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        try:
            tools = await self.face.listing()
        except Exception as e:
            raise MCPError(types.INTERNAL_ERROR, f"toolsrv: {e}") from None
        return types.ListToolsResult.model_validate({"tools": [t.wire() for t in tools]})

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams
                        ) -> types.CallToolResult:
        args = params.arguments if params.arguments is not None else {}
        try:
            res = await self.face.call(self.seat_of(ctx), params.name, args)
        except Unknown as e:
            raise MCPError(types.INVALID_PARAMS, str(e)) from None
        return _result(res)


_JSON_TYPES = {list: "an array", str: "a string", bool: "a boolean", int: "a number",
               float: "a number", type(None): "null"}


def _check_arguments(params: dict[str, Any]) -> None:
    """tools/call arguments that are not an object: an error that says so (the SDK's own
    check, which comes after, answers only "Invalid request parameters")."""
    args = params.get("arguments")
    if "arguments" in params and args is not None and not isinstance(args, dict):
        name = params.get("name")
        raise MCPError(types.INVALID_PARAMS, f"invalid arguments for {name!r}: they must be "
                       f"an object of the tool's parameters, not "
                       f"{_JSON_TYPES.get(type(args), type(args).__name__)}")


def _result(res: dict[str, Any]) -> types.CallToolResult:
    """The face's result as the SDK's type (not a dict: the 2026-era result has fields
    the type fills in, `resultType`); content a tool passed through that is not valid
    MCP content falls back to the tool's output as text."""
    text = res.pop("_text", None)
    try:
        return types.CallToolResult.model_validate(res)
    except ValueError as e:
        if text is None:
            raise
        log.debug("content passed through is not MCP content: %s", e)
        return types.CallToolResult.model_validate(
            {"content": [{"type": "text", "text": text}], "isError": False})


def _version() -> str:
    from .. import __version__
    return __version__

