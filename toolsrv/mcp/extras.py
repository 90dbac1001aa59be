"""The MCP face's other features, each backed by a file of the tree: prompts (a tool's
`.meta` prompt), the agent's `log` as a resource, roots as the session's cwd, and
progress while a call runs.  server.py registers these handlers; the SDK is imported
here too (the `mcp` extra), never by `serve`.

Theory of operation.
  prompts    prompts/list lists one prompt per tool that has a `prompt`, named after
             the tool; prompts/get returns it as one user message.  Read from the
             face's listing (tools/<name>/meta), so it follows the registry: a change
             sends notifications/prompts/list_changed with the tools'.
  log        resources/list lists `toolsrv://agent/log`, the connection's agent's `log`
             file; resources/read reads it (empty before the connection's first call:
             its agent is made then).  A client that subscribes gets
             notifications/resources/updated after each call of its connection ends
             (a call is what writes the log).
  tools.py   resources/list lists `toolsrv://agent/tools.py` too: the agent's tools.py
             (toolsrv(4)), every tool the connection may call loaded for it first
             (face.tools_py), the module a `script` call imports as `tools`.
  roots      a client that declares `roots` is asked for them (roots/list) before its
             seat is made: its first `file://` root that is a directory becomes the
             session's cwd.  notifications/roots/list_changed asks again and moves the
             cwd of a session the face made (a `--session` keeps its own).
  progress   a tools/call with a progressToken gets notifications/progress every
             PROGRESS_EVERY seconds while it runs, and within POLL seconds of the
             tool's own report moving: the face reads the call's `status` every POLL
             seconds (a running call's line carries `out N`, the bytes of stdout so
             far, and the tool's latest `progress DONE/TOTAL MESSAGE` line of stderr:
             toolsrv(4)).  progress = the tool's DONE and TOTAL once it has reported,
             else the seconds elapsed; the message says the time, the bytes and the
             tool's words.
"""
from __future__ import annotations

import logging
import re
import urllib.parse
import warnings
from typing import Any, Awaitable, Callable, TypeVar

import anyio
import mcp_types as types
from mcp.shared.exceptions import MCPError

log = logging.getLogger("toolsrv.mcp")

LOG_URI = "toolsrv://agent/log"
TOOLS_URI = "toolsrv://agent/tools.py"
PROGRESS_EVERY = 4.0          # seconds between notifications/progress (at most 5)
POLL = 1.0                    # seconds between reads of a call's status, for its progress
T = TypeVar("T")


# -- prompts --
def prompt_list(tools: list[Any]) -> types.ListPromptsResult:
    return types.ListPromptsResult.model_validate({"prompts": [
        {"name": t.name, "title": t.title or t.name,
         "description": f"How to use the tool {t.name}: its documentation for the model"}
        for t in tools if t.prompt]})


def prompt_get(tools: dict[str, Any], name: str) -> types.GetPromptResult:
    t = tools.get(name)
    if t is None or not t.prompt:
        raise MCPError(types.INVALID_PARAMS, f"unknown prompt: {name} (prompts/list lists "
                       "them: one per tool with a prompt)")
    return types.GetPromptResult.model_validate({
        "description": f"How to use the tool {name}",
        "messages": [{"role": "user", "content": {"type": "text", "text": t.prompt}}]})


# -- the log as a resource --
def resource_list() -> types.ListResourcesResult:
    return types.ListResourcesResult.model_validate({"resources": [{
        "uri": LOG_URI, "name": "log", "title": "This connection's agent log",
        "mimeType": "text/plain",
        "description": "toolsrv's log of this connection's agent: one line per call "
                       "(time, tool, arguments, outcome)"}, {
        "uri": TOOLS_URI, "name": "tools.py", "title": "This connection's tools as Python",
        "mimeType": "text/x-python",
        "description": "The module a `script` call imports as `tools`: one function per "
                       "tool this connection may call, typed and documented (code mode)"}]})


def resource_contents(uri: str, text: str) -> types.ReadResourceResult:
    if uri not in (LOG_URI, TOOLS_URI):
        raise MCPError(types.INVALID_PARAMS, f"unknown resource: {uri} (resources/list "
                       "lists them)")
    kind = "text/plain" if uri == LOG_URI else "text/x-python"
    return types.ReadResourceResult.model_validate(
        {"contents": [{"uri": uri, "mimeType": kind, "text": text}]})


# -- roots --
def wants_roots(ctx: Any) -> bool:
    params = getattr(ctx.session, "client_params", None)
    caps = getattr(params, "capabilities", None)
    return getattr(caps, "roots", None) is not None


async def first_root(ctx: Any) -> str | None:
    """The client's first root that is a local directory (a path), or None."""
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")          # deprecated in the 2026 era only
            with anyio.fail_after(10):
                got = await ctx.session.list_roots()
    except Exception as e:                            # the client did not answer: none
        log.debug("roots/list: %s", e)
        return None
    for root in got.roots:
        u = urllib.parse.urlsplit(str(root.uri))
        if u.scheme == "file" and u.netloc in ("", "localhost"):
            return urllib.parse.unquote(u.path) or None
    return None


# -- progress --
def progress_token(params: Any) -> Any:
    meta = getattr(params, "meta", None)
    return meta.get("progress_token") if isinstance(meta, dict) else None


async def with_progress(ctx: Any, name: str, work: Callable[[], Awaitable[T]],
                        status: Callable[[], Awaitable[str | None]] | None = None) -> T:
    """await work(), sending notifications/progress every PROGRESS_EVERY seconds, and as
    soon as the tool's own report moves (`status()` reads the call's status line)."""
    got: list[Any] = []

    async def tick() -> None:
        start = sent = anyio.current_time()
        last: Any = None
        while True:
            await anyio.sleep(POLL if status is not None else PROGRESS_EVERY)
            now = anyio.current_time()
            seen = running(await status()) if status is not None else None
            report = seen[1] if seen is not None else None
            if report == last and now - sent < PROGRESS_EVERY:
                continue
            last, sent = report, now
            p, total, message = progress_of(name, now - start, seen)
            try:
                await ctx.session.report_progress(p, total, message)
            except Exception as e:                    # a client gone: not the call's end
                log.debug("progress not sent: %s", e)
    async with anyio.create_task_group() as tg:
        tg.start_soon(tick)
        try:
            got.append(await work())
        except Exception as e:                        # raised outside the task group
            got.append(e)
        finally:
            tg.cancel_scope.cancel()
    if isinstance(got[0], Exception):
        raise got[0]
    return got[0]


_RUNNING = re.compile(r"running [0-9.]+s(?: out (\d+))?"
                      r"(?: progress ([0-9.]+)(?:/([0-9.]+))?(?: (.*))?)?")


def running(line: str | None) -> tuple[int | None, Any] | None:
    """(bytes of out so far, (done, total, message) or None) of a running call's status
    line (toolsrv(4)); None when the line is not a running call's."""
    m = _RUNNING.fullmatch((line or "").split("\n", 1)[0])
    if m is None:
        return None
    out = int(m.group(1)) if m.group(1) else None
    if m.group(2) is None:
        return out, None
    return out, (float(m.group(2)), float(m.group(3)) if m.group(3) else None, m.group(4) or "")


def progress_of(name: str, took: float, seen: tuple[int | None, Any] | None
                ) -> tuple[float, float | None, str]:
    """(progress, total, message) of a notification: the tool's own numbers when it has
    reported, else the seconds elapsed; the message says both, and the bytes of out."""
    text = f"{name}: running for {took:.0f}s"
    out, report = seen if seen is not None else (None, None)
    if out is not None:
        text += f", {out} bytes of output"
    if report is None:
        return round(took, 1), None, text
    done, total, message = report
    return done, total, f"{text}: {message}" if message else text
