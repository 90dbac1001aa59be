"""Helpers of the MCP face's tests (tests/mcpface/): `toolsrv mcp` run as a real process
and reached with the official SDK's client, over stdio or streamable HTTP.

Waits are bounded (they fail the test when what is awaited never comes); nothing here
asserts on time."""
from __future__ import annotations

import contextlib
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Any, AsyncIterator

import anyio
import mcp_types as types
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from apphelpers import add_tool, tools_dir  # noqa: F401  (add_tool: for the tests too)

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FACE = [sys.executable, "-m", "toolsrv", "mcp"]
CLIENT = types.Implementation(name="pytest-client", version="1.0")
WAIT = 30.0


def face_tools() -> str:
    """A tools directory: echo (readOnly), fail (exit 3, an integer n required), marked
    (sleeps for the seconds in its args, so `sleep 600.<n>` marks its process), content
    (prints an MCP content object)."""
    d = tools_dir()
    add_tool(d, "echo", "#!/bin/sh\ncat\n", {"readOnly": True, "description": "echo the args"})
    add_tool(d, "fail", "#!/bin/sh\necho oops-from-fail >&2\nexit 3\n",
             {"args": {"type": "object", "properties": {"n": {"type": "integer"}},
                       "required": ["n"]}})
    add_tool(d, "marked", "#!/bin/sh\nexec sleep \"$(sed 's/[^0-9.]//g')\"\n",
             {"args": {"type": "object", "properties": {"s": {"type": "string"}}}})
    add_tool(d, "content", "#!/bin/sh\nprintf '%s' '{\"content\": [{\"type\": \"text\", "
             "\"text\": \"one\"}, {\"type\": \"text\", \"text\": \"two\"}]}'\n")
    return d


def env(**extra: str) -> dict[str, str]:
    """The environment of a `toolsrv mcp` process (the SDK passes only a few variables by
    default)."""
    e = {k: v for k, v in os.environ.items() if k != "OLLIE_TOOLS_PATH"}
    e.update(extra)
    return e


@contextlib.asynccontextmanager
async def stdio_face(*args: str, cwd: str | None = None, environ: dict[str, str] | None = None,
                     handler: Any = None, errlog: Any = None, **session: Any
                     ) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session to `toolsrv mcp ARGS` over stdio."""
    params = StdioServerParameters(command=FACE[0], args=[*FACE[1:], *args],
                                   env=environ or env(), cwd=cwd or tempfile.gettempdir())
    log = errlog or open(os.devnull, "w")
    try:
        async with stdio_client(params, errlog=log) as (r, w):
            async with ClientSession(r, w, message_handler=handler, client_info=CLIENT,
                                     **session) as s:
                with anyio.fail_after(WAIT):
                    await s.initialize()
                yield s
    finally:
        if errlog is None:
            log.close()


class Notes:
    """A message handler that keeps the server's notifications (tools/list_changed)."""

    def __init__(self) -> None:
        self.got: list[Any] = []
        self.event = anyio.Event()

    async def __call__(self, message: Any) -> None:
        if isinstance(message, types.ToolListChangedNotification) or \
                getattr(message, "method", None) == "notifications/tools/list_changed":
            self.got.append(message)
            self.event.set()

    async def wait(self) -> None:
        with anyio.fail_after(WAIT):
            await self.event.wait()


def text(result: Any) -> str:
    return "".join(getattr(c, "text", "") for c in result.content)


class HttpFace:
    """`toolsrv mcp --http 127.0.0.1:0 ...` as a process; `url` once it listens, and
    `token` the bearer token it made in its own state home (None when given one or
    none)."""

    def __init__(self, *args: str, cwd: str | None = None, state_home: str | None = None
                 ) -> None:
        self.log = tempfile.NamedTemporaryFile("w+", prefix="mcp-http.", delete=False)
        self.home = state_home or tempfile.mkdtemp(prefix="mcp-state.")
        self._own_home = None if state_home else self.home
        self.p = subprocess.Popen([*FACE, *args], cwd=cwd or tempfile.gettempdir(),
                                  env=env(XDG_STATE_HOME=self.home),
                                  stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                  stderr=self.log)
        self.url = self._wait_url()
        m = re.search(r"made the bearer token (\S+) in", self.stderr())
        self.token: str | None = m.group(1) if m else None

    def stderr(self) -> str:
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def _wait_url(self) -> str:
        import time
        end = time.monotonic() + WAIT
        while time.monotonic() < end:
            m = re.search(r"streamable HTTP on (http://\S+/mcp)", self.stderr())
            if m:
                return m.group(1)
            if self.p.poll() is not None:
                raise RuntimeError(f"toolsrv mcp exited {self.p.returncode}: {self.stderr()}")
            time.sleep(0.02)
        self.stop()
        raise RuntimeError(f"toolsrv mcp did not listen: {self.stderr()}")

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(20)
            except subprocess.TimeoutExpired:
                self.p.kill()
                self.p.wait()
        self.log.close()
        os.unlink(self.log.name)
        if self._own_home:
            import shutil
            shutil.rmtree(self._own_home, ignore_errors=True)


@contextlib.asynccontextmanager
async def modern_client(url: str, token: str | None = None, **kw: Any) -> AsyncIterator[Any]:
    """The SDK's high-level `Client` (it speaks the 2026-07-28 era when the server offers
    it) over streamable HTTP, with the bearer token; not entered yet (`async with` it)."""
    import httpx2
    from mcp.client.client import Client
    from mcp.client.streamable_http import streamable_http_client
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as hc:
        kw.setdefault("client_info", CLIENT)
        yield Client(streamable_http_client(url, http_client=hc), **kw)


@contextlib.asynccontextmanager
async def http_face(url: str, token: str | None = None, handler: Any = None
                    ) -> AsyncIterator[ClientSession]:
    """An initialized SDK client session to a streamable HTTP face."""
    import httpx2
    from mcp.client.streamable_http import streamable_http_client
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=httpx2.Timeout(30, read=300)) as hc:
        async with streamable_http_client(url, http_client=hc) as (r, w):
            async with ClientSession(r, w, message_handler=handler, client_info=CLIENT) as s:
                with anyio.fail_after(WAIT):
                    await s.initialize()
                yield s


def token_file(d: str) -> tuple[str, str]:
    """A bearer token file (mode 600) in d; (path, token)."""
    tok = os.urandom(16).hex()
    path = os.path.join(d, "token")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    os.write(fd, tok.encode() + b"\n")
    os.close(fd)
    return path, tok


def raw_rpc(proc: subprocess.Popen, msg: dict[str, Any]) -> None:
    assert proc.stdin is not None
    proc.stdin.write((json.dumps(msg) + "\n").encode())
    proc.stdin.flush()


RAW_INIT = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {
    "protocolVersion": "2025-06-18", "capabilities": {},
    "clientInfo": {"name": "raw", "version": "0"}}}


def raw_initialize(proc: subprocess.Popen) -> dict[str, Any]:
    """The handshake in raw JSON-RPC (id 1, then notifications/initialized): the result."""
    raw_rpc(proc, RAW_INIT)
    r = raw_reply(proc, 1)
    assert "result" in r, r
    raw_rpc(proc, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    return r["result"]


def raw_reply(proc: subprocess.Popen, want_id: int) -> dict[str, Any]:
    """The JSON-RPC response with id want_id (notifications in between skipped)."""
    assert proc.stdout is not None
    while True:
        line = proc.stdout.readline()
        if not line:
            raise ConnectionError("toolsrv mcp closed stdout")
        m = json.loads(line)
        if m.get("id") == want_id:
            return m
