"""Asking the MCP client's user before a call runs (issue 48.2): the SDK's side of the
face's broker (broker.py).

Theory of operation.  Each tools/call the face sends to the tree waits on the broker
(`around`) with an `ask` of its era; the tree asks only when the call needs a yes, and
the question (tool, args, and what the run may reach) is shown to the user:

  handshake era (2025-06-18, 2025-11-25)  an `elicitation/create` (form mode) on the
      request's own back-channel (stdio's stream, the POST's SSE stream), related to the
      tools/call; its one field, `approve`, a boolean.  The call waits for the answer.
  2026-07-28  no server-to-client request: the first round's question is kept (a random
      id, this process's memory, ten minutes, one use) and the tools/call answers an
      `input_required` result carrying the elicitation and that id as `requestState`;
      the client's retry brings the user's answer with the id, the face writes the call
      again, and the tree's question is answered from it when it is the same question
      (tool, args, why, principal).  Another question is asked afresh.

A yes is exactly `action: accept` with `approve: true`.  A decline, a dismissal, an
accept without the tick, no answer within WAIT seconds (the tree waits longer:
run/elevation.py's 60 s), and a client that declared no elicitation capability (that
cannot ask) are each a no, with the reason the tree puts in the refusal
(`permission denied: confirm: NAME needs a person's yes: the MCP client's user
declined`).  Nothing in the request's arguments is read here: a model's `"approved":
true` is an argument of the tool, shown to the user like the others.
"""
from __future__ import annotations

import json
import secrets
import time
from typing import Any, Awaitable, Callable

import anyio
import mcp_types as types
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from .broker import Broker, plain

KEY = "toolsrv-consent"         # the input request's key in an input_required result
WAIT = 50.0                     # seconds the user has to answer an elicitation
KEEP = 600.0                    # seconds a 2026-era question waits for the client's retry
KEPT_MAX = 1024                 # questions kept at once; the oldest goes first
SCHEMA = {"type": "object", "required": ["approve"], "properties": {"approve": {
    "type": "boolean", "title": "Run it",
    "description": "Yes: run this call as shown. No, or no answer: it does not run."}}}
CANNOT = ("the MCP client cannot ask its user (it declared no elicitation capability), so "
          "nobody said yes")
Send = Callable[[str, dict], Awaitable[Any]]


def message(req: dict) -> str:
    """What the user reads: the tool, its args, and what the run may reach."""
    tool, reach = req.get("tool"), req.get("reach") or ""
    args = json.dumps(plain(req.get("args")), indent=2, sort_keys=True, ensure_ascii=False,
                      default=str)
    head = (f"toolsrv asks your yes before it runs {tool} OUTSIDE ITS SANDBOX (an elevated "
            "call)." if "confirm" not in req else
            f"toolsrv asks your yes before it runs {tool}.")
    where = f"\nIn: {req.get('cwd')}" if req.get("cwd") else ""
    return f"{head}\nArguments: {args}{where}\nIf you say yes: {reach}."


def answer(got: Any) -> tuple[bool, str]:
    """An ElicitResult (or its dict) as the broker's answer."""
    action = getattr(got, "action", None) if not isinstance(got, dict) else got.get("action")
    content = getattr(got, "content", None) if not isinstance(got, dict) else \
        got.get("content")
    if action == "accept" and isinstance(content, dict) and content.get("approve") is True:
        return True, "the MCP client's user said yes"
    if action == "accept":
        return False, "the MCP client's user did not tick approve"
    if action == "decline":
        return False, "the MCP client's user declined"
    return False, "the MCP client's user dismissed the question"


def can_ask(caps: Any) -> bool:
    """Whether a client's capabilities let the face ask its user (form elicitation)."""
    e = getattr(caps, "elicitation", None)
    if e is None:
        return False
    return getattr(e, "form", None) is not None or getattr(e, "url", None) is None


def elicit(send: Send, caps: Any) -> Callable[[dict], Awaitable[tuple[bool, str]]]:
    """The handshake era's ask: an elicitation/create through `send`."""
    async def ask(req: dict) -> tuple[bool, str]:
        if not can_ask(caps):
            return False, CANNOT
        try:
            with anyio.fail_after(WAIT):
                got = await send(message(req), SCHEMA)
        except TimeoutError:
            return False, f"the MCP client's user did not answer within {WAIT:g}s"
        except Exception as e:          # an error answer, a client gone: nobody said yes
            return False, f"the MCP client did not ask its user: {e}"
        return answer(got)
    return ask


class Kept:
    """The 2026-era questions waiting for their client's retry (id -> question)."""

    def __init__(self) -> None:
        self.held: dict[str, tuple[float, str]] = {}

    def keep(self, key: str) -> str:
        now = time.monotonic()
        self.held = {k: v for k, v in self.held.items() if v[0] > now}
        while len(self.held) >= KEPT_MAX:
            self.held.pop(next(iter(self.held)))
        sid = secrets.token_urlsafe(24)
        self.held[sid] = (now + KEEP, key)
        return sid

    def take(self, sid: Any, key: str) -> bool:
        """Whether `sid` names this very question, still kept (used up either way)."""
        got = self.held.pop(sid, None) if isinstance(sid, str) else None
        return got is not None and got[0] > time.monotonic() and got[1] == key


def question_key(req: dict, principal: str | None) -> str:
    return json.dumps([req.get("tool"), plain(req.get("args")), req.get("confirm"),
                       req.get("reach"), principal], sort_keys=True, default=str)


class Round:
    """A 2026-era tools/call's ask: answered from the retry's input, else deferred."""

    def __init__(self, kept: Kept, caps: Any, params: Any, principal: str | None) -> None:
        self.kept, self.caps, self.principal = kept, caps, principal
        self.state = getattr(params, "request_state", None)
        self.got = (getattr(params, "input_responses", None) or {}).get(KEY)
        self.deferred: tuple[str, dict] | None = None

    async def __call__(self, req: dict) -> tuple[bool, str]:
        if not can_ask(self.caps):
            return False, CANNOT
        key = question_key(req, self.principal)
        if self.got is not None and self.kept.take(self.state, key):
            self.got, said = None, answer(self.got)
            return said
        self.deferred = (self.kept.keep(key), req)
        return False, "waiting for the MCP client's user (input_required)"

    def result(self) -> types.InputRequiredResult:
        assert self.deferred is not None
        sid, req = self.deferred
        ask = types.ElicitRequest(params=types.ElicitRequestFormParams(
            message=message(req), requested_schema=SCHEMA))
        return types.InputRequiredResult(input_requests={KEY: ask}, request_state=sid)


def target(face: Any, name: str, args: Any) -> tuple[str, Any]:
    """The tool and args the tree will see (call_tool's, in --search mode)."""
    from ..tools import CALL_TOOL
    search = getattr(face, "search", False) or getattr(face, "mode", None)
    if search and name == CALL_TOOL and isinstance(args, dict) \
            and isinstance(args.get("name"), str):
        return args["name"], args.get("arguments", {})
    return name, args


def around(broker: Broker | None, kept: Kept, ctx: Any, params: Any, seat: Any, face: Any,
           work: Callable[[], Awaitable[dict]], principal: str | None
           ) -> Callable[[], Awaitable[Any]]:
    """`work` (the face's call) with its question, if the tree asks one, put to the
    request's user; its result, or an InputRequiredResult (2026-07-28)."""
    if broker is None:
        return work
    tool, args = target(face, params.name, params.arguments or {})
    caps = getattr(ctx.session, "client_capabilities", None)
    if ctx.protocol_version in MODERN_PROTOCOL_VERSIONS:
        ask: Any = Round(kept, caps, params, principal)
    else:
        ask = elicit(lambda text, schema: ctx.session.elicit_form(
            text, schema, related_request_id=ctx.request_id), caps)

    async def asked() -> Any:
        with broker.waiting(seat, tool, args, ask):
            res = await work()
        if isinstance(ask, Round) and ask.deferred is not None and res.get("isError"):
            return ask.result()
        return res
    return asked
