"""`toolsrv mcp`: the MCP face, an MCP server (the official `mcp` SDK) over the 9P tree.

Theory of operation.  This module is the only one of toolsrv that imports the SDK (the
`mcp` extra: `pip install 'toolsrv[mcp]'`); `serve` never loads it.  It builds the SDK's
low-level `Server` with two handlers, tools/list and tools/call, that ask the `Face`
(face.py: what those mean in files) and turn its answers into the SDK's types, and runs
it over stdio (default) or streamable HTTP (http.py).

Connections.  Every MCP connection of the handshake era (stdio, a stateful HTTP session)
is met by a middleware on its first message: it gets a `Seat` (its session and agent,
made on its first call) and a teardown on the SDK's per-connection exit stack that
removes them.  A seat is never shared, whatever the client calls itself: its name is a
label.  A request of the 2026 era arrives without a connection that outlives it: over
stdio the process is the client's connection (one seat, until `toolsrv mcp` exits);
over HTTP nothing ties two requests together, so each `tools/call` gets a seat of its
own, removed when the call ends (no state is carried from one call to the next).

Notifications.  The face's watcher (revwait) calls `changed()`: every live
handshake-era connection gets `notifications/tools/list_changed` on its standalone
channel (stdio's stream, HTTP's GET stream), and the subscription bus carries the same
event to 2026-era `subscriptions/listen` streams.

Cancellation.  The SDK cancels a request's task on `notifications/cancelled`; the
cancellation reaches the 9P read of `call`, which ninep.py flushes: toolsrv kills the run.
"""
from __future__ import annotations

import base64
import logging
import warnings
from typing import Any

import anyio
import mcp_types as types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS
from mcp.server.lowlevel.server import NotificationOptions, Server
from mcp.server.subscriptions import (InMemorySubscriptionBus, ListenHandler,
                                      PromptsListChanged, ToolsListChanged)
from mcp.shared.exceptions import MCPError

from . import extras
from .consent import ask as consent
from .face import Face, Seat, Unknown, clean_name
from .tasks.serve import Tasks
from .tools import META
from ..dirs.statedir import state_home
from ..tree.calls.jsonargs import TRACEPARENT

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
        self.modern: Seat | None = None     # 2026-era requests over stdio: the process's
        self.http = False                   # set by http.py: 2026-era seats per request
        self.bus = InMemorySubscriptionBus()
        self.notes = NotificationOptions(tools_changed=True, prompts_changed=True)
        self.subscribed: set[int] = set()   # connections subscribed to the log
        self.fast: Any = None               # fast.py's Calls, over stdio
        self.stop: Any = None               # http.py: ask uvicorn to stop (a signal came)
        self.consent: Any = None            # consent/broker.py: the face's broker (run.py)
        self.kept = consent.Kept()          # 2026-era questions awaiting their retry
        with warnings.catch_warnings():   # roots: deprecated in the 2026 era (SEP-2577) only
            warnings.filterwarnings("ignore", "The roots capability is deprecated")
            self.server: Server[Any] = Server(
                "toolsrv", version=_version(),
                instructions=INSTRUCTIONS + (face.mode.instructions() if face.mode else "")
                + standalone_instructions(getattr(face, "standalone", None)),
                on_list_tools=self.list_tools, on_call_tool=self.call_tool,
                on_list_prompts=self.list_prompts, on_get_prompt=self.get_prompt,
                on_list_resources=self.list_resources, on_read_resource=self.read_resource,
                on_subscribe_resource=self.subscribe,
                on_unsubscribe_resource=self.unsubscribe,
                on_roots_list_changed=self.roots_changed,
                on_subscriptions_listen=ListenHandler(self.bus))
        self.server.middleware.append(self._meet)
        self.tasks = Tasks(face, _result, state_home(), PRINCIPAL)    # 2026-era tasks
        self.tasks.install(self.server)
        # the capabilities are the same on every transport: HTTP's session manager asks
        # for the default options, which would say listChanged: false
        made = self.server.create_initialization_options
        self.server.create_initialization_options = (  # type: ignore[method-assign]
            lambda notes=None, *a, **k: made(notes or self.notes, *a, **k))

    def init_options(self) -> Any:
        return self.server.create_initialization_options(self.notes)

    # -- connections --
    async def _meet(self, ctx: Any, call_next: Any) -> Any:
        """Middleware: give a handshake-era connection its seat on its first message."""
        conn = _connection(ctx)
        if conn is not None and id(conn) not in self.conns and \
                ctx.protocol_version not in MODERN_PROTOCOL_VERSIONS:
            seat = self.face.seat("mcp", self.pid, _principal(ctx))
            self.conns[id(conn)] = (conn, seat)
            conn.exit_stack.push_async_callback(self._gone, id(conn))
        if ctx.method != "tools/call":
            return await call_next(ctx)
        try:
            if isinstance(ctx.params, dict):
                _check_arguments(ctx.params)
            return await call_next(ctx)
        finally:
            if self.fast is not None:   # fast.py: one call of the SDK's fewer in flight
                self.fast.settled()

    async def _gone(self, key: int) -> None:
        self.subscribed.discard(key)
        conn, seat = self.conns.pop(key, (None, None))
        if seat is not None:
            with anyio.move_on_after(5, shield=True):
                await self.face.release(seat)

    def seat_of(self, ctx: Any) -> tuple[Seat, bool]:
        """The seat of a request, and whether it is the request's own (to release at its
        end: a 2026-era request over HTTP)."""
        client = _client(ctx)
        conn = _connection(ctx)
        got = self.conns.get(id(conn)) if conn is not None else None
        if got is not None and got[0] is conn:
            seat = got[1]
            if not seat.ready:
                seat.client = clean_name(client)   # known by now
            return seat, False
        if self.http:
            return self.face.seat(client, None, _principal(ctx)), True
        if self.modern is None:
            self.modern = self.face.seat(client, self.pid)
        return self.modern, False

    async def changed(self) -> None:
        """The registry moved: tell every connection that can hear it (the tools, and
        the prompts, which are the tools')."""
        for conn, _ in list(self.conns.values()):
            if conn.protocol_version not in MODERN_PROTOCOL_VERSIONS:
                try:
                    await conn.send_tool_list_changed()
                    await conn.send_prompt_list_changed()
                except Exception as e:      # a connection going away: not ours to fail
                    log.debug("list_changed not sent: %s", e)
        await self.bus.publish(ToolsListChanged())
        await self.bus.publish(PromptsListChanged())

    # -- handlers --
    async def list_tools(self, ctx: Any, params: Any) -> types.ListToolsResult:
        start = _offset(getattr(params, "cursor", None) if params is not None else None)
        try:
            who = _principal(ctx)
            tools = _callable(ctx, await self.face.listing(
                who.may_call if who is not None else None))
        except Exception as e:
            raise MCPError(types.INTERNAL_ERROR, f"toolsrv: {e}") from None
        if start > len(tools):
            raise MCPError(types.INVALID_PARAMS, "invalid cursor: past the end of the list "
                           "(list again without a cursor)")
        page: dict[str, Any] = {"tools": [t.wire() for t in tools[start:start + PAGE]],
                                "ttlMs": LIST_TTL_MS, "cacheScope": "private"}
        if start + PAGE < len(tools):
            page["nextCursor"] = _cursor(start + PAGE)
        return types.ListToolsResult.model_validate(page)

    async def call_tool(self, ctx: Any, params: types.CallToolRequestParams
                        ) -> types.CallToolResult | types.InputRequiredResult:
        args = params.arguments if params.arguments is not None else {}
        seat, once = self.seat_of(ctx)
        if not seat.ready and seat.cwd is None and extras.wants_roots(ctx):
            seat.cwd = await extras.first_root(ctx) or ""

        meta, who = _context(ctx, params), _principal(ctx)

        async def work() -> dict[str, Any]:
            return await self.face.call(seat, params.name, args, meta,
                                        who.may_call if who is not None else None)
        try:
            if self.tasks.asked(ctx) and await self.tasks.serves(params.name):
                task = await self.tasks.start(ctx, seat, once, params.name, args, work)
                once = False            # the task's seat now: removed when the call ends
                return task             # (tasks/serve.py: a handle, polled with tasks/get)
            asked = consent.around(self.consent, self.kept, ctx, params, seat, self.face,
                                   work, meta.get("principal"))    # consent/ask.py
            if extras.progress_token(params) is not None:
                res = await extras.with_progress(
                    ctx, params.name, asked, lambda: self.face.status(seat, params.name, args))
            else:
                res = await asked()
        except Unknown as e:
            raise MCPError(types.INVALID_PARAMS, str(e)) from None
        finally:
            if once:
                with anyio.move_on_after(5, shield=True):
                    await self.face.release(seat)
        conn = _connection(ctx)
        if conn is not None and id(conn) in self.subscribed:
            try:
                await conn.send_resource_updated(extras.LOG_URI)
            except Exception as e:
                log.debug("resources/updated not sent: %s", e)
        if not isinstance(res, dict):       # input_required: the user is asked first
            return res
        return _result(res)

    # -- prompts, the log, roots (extras.py) --
    async def list_prompts(self, ctx: Any, params: Any) -> types.ListPromptsResult:
        return extras.prompt_list(_callable(ctx, list((await self.face.registry()).values())))

    async def get_prompt(self, ctx: Any, params: Any) -> types.GetPromptResult:
        return extras.prompt_get(await self.face.registry(), params.name)

    async def list_resources(self, ctx: Any, params: Any) -> types.ListResourcesResult:
        return extras.resource_list()

    async def read_resource(self, ctx: Any, params: Any) -> types.ReadResourceResult:
        uri = str(params.uri)
        if uri not in (extras.LOG_URI, extras.TOOLS_URI):
            return extras.resource_contents(uri, "")
        seat, once = self.seat_of(ctx)
        if uri == extras.TOOLS_URI:
            who = _principal(ctx)
            text = await self.face.tools_py(seat, who.may_call if who is not None else None)
            if once:                        # a 2026-era request over HTTP: its own seat
                with anyio.move_on_after(5, shield=True):
                    await self.face.release(seat)
            return extras.resource_contents(uri, text)
        if once:                            # a 2026-era request over HTTP: nothing logged
            self.face.seats.discard(seat)
            return extras.resource_contents(uri, "")
        return extras.resource_contents(uri, await self.face.log_text(seat))

    async def subscribe(self, ctx: Any, params: Any) -> types.EmptyResult:
        conn = _connection(ctx)
        if conn is not None and id(conn) in self.conns:     # a connection that lasts
            self.subscribed.add(id(conn))
        return types.EmptyResult()

    async def unsubscribe(self, ctx: Any, params: Any) -> types.EmptyResult:
        conn = _connection(ctx)
        if conn is not None:
            self.subscribed.discard(id(conn))
        return types.EmptyResult()

    async def roots_changed(self, ctx: Any, params: Any) -> None:
        seat, once = self.seat_of(ctx)
        if once:
            self.face.seats.discard(seat)
            return
        root = await extras.first_root(ctx)
        if root:
            await self.face.move(seat, root)


PRINCIPAL = "toolsrv.principal"     # the ASGI scope's key for http.py Gate.who's answer
PAGE = 500          # tools per tools/list page (doc/mcp.md)
LIST_TTL_MS = 10_000    # how long a client may keep a tools/list page without asking again
                        # (2026-07-28 ttlMs; a change is told at once by list_changed)


def _principal(ctx: Any) -> Any:
    """The OAuth principal of an HTTP request (http.py puts it in the ASGI scope), or
    None (stdio, the static token)."""
    req = getattr(ctx, "request", None)
    user = getattr(req, "scope", {}).get("user") if req is not None else None
    return getattr(user, "principal", None)


def _context(ctx: Any, params: Any) -> dict[str, str]:
    """A call's context for the tree (face.call's `meta`): the request's W3C
    `traceparent` from its `_meta`, and its OAuth principal."""
    out = {}
    got = params.meta if isinstance(params.meta, dict) else {}
    if isinstance(got.get("traceparent"), str) and TRACEPARENT.match(got["traceparent"]):
        out["traceparent"] = got["traceparent"]
    who = _principal(ctx)
    if who is not None:
        out["principal"] = "".join(c for c in who.sub if c.isprintable())[:200] or "?"
    else:                   # the static token's hash and the peer (http.py Gate.who)
        req = getattr(ctx, "request", None)
        said = getattr(req, "scope", {}).get(PRINCIPAL) if req is not None else None
        if said:
            out["principal"] = said
    return out


def _callable(ctx: Any, tools: list[Any]) -> list[Any]:
    """The tools a request's principal may call (all, without OAuth), by name: the
    listing's order is the names', whatever order the server's index had (the search
    mode's two tools first, as they are)."""
    head = [t for t in tools if t.tier == META]
    who = _principal(ctx)
    if who is not None:
        tools = [t for t in tools if who.may_call(t.name)]
    return head + sorted((t for t in tools if t.tier != META), key=lambda t: t.name)
_CURSOR = "toolsrv-offset-"


def _cursor(offset: int) -> str:
    """An opaque cursor: where the next page starts, in the list as it is then."""
    return base64.urlsafe_b64encode(f"{_CURSOR}{offset}".encode()).decode()


def _offset(cursor: str | None) -> int:
    """Where a page starts: 0 without a cursor; -32602 for one this face did not make."""
    if cursor is None:
        return 0
    try:
        text = base64.urlsafe_b64decode(cursor.encode("ascii")).decode()
        if not text.startswith(_CURSOR):
            raise ValueError(text)
        offset = int(text[len(_CURSOR):])
        if offset < 0:
            raise ValueError(offset)
    except (ValueError, UnicodeError):
        raise MCPError(types.INVALID_PARAMS, f"invalid cursor {cursor[:40]!r}: give the "
                       "nextCursor of the page before, or none") from None
    return offset


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

