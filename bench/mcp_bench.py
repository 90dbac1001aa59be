"""The MCP baseline: the same tools behind the official `mcp` Python SDK, over stdio.

The server (this module run as a script) has these tools:
  noop       returns its args (no subprocess): MCP's own per-call cost;
  echo_sh    runs the /bin/sh JSON echo with asyncio.create_subprocess_exec, args on stdin,
             unsandboxed: what a user would write to serve that tool over MCP;
  file_read, file_grep   the bundled scripts' code run in the server's process (file_grep's
             pure-Python engine), unsandboxed: the in-process cost toolsrv is held to.
It uses `MCPServer` (SDK 2.x) or `FastMCP` (1.x), whichever the installed SDK has.
`mcp` is a bench-only extra: `pip install '.[bench]'`.

    python -m bench.mcp_bench TOOL_PATH      (speaks MCP on stdin/stdout)
"""
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from typing import Any, AsyncIterator

from mcp import ClientSession, StdioServerParameters  # noqa: F401  (ImportError: no mcp)
from mcp.client.stdio import stdio_client

from .common import PAYLOAD, REPO

ARGS = json.loads(PAYLOAD)


def build_server(tool_path: str) -> Any:
    try:
        from mcp.server.mcpserver import MCPServer as Server
    except ImportError:
        from mcp.server.fastmcp import FastMCP as Server  # type: ignore[no-redef]
    srv = Server("bench")

    @srv.tool()
    def noop(args: dict) -> str:
        """Return the args."""
        return json.dumps(args)

    @srv.tool()
    async def echo_sh(args: dict) -> str:
        """Run the sh JSON echo on the args."""
        p = asyncio.subprocess.PIPE
        proc = await asyncio.create_subprocess_exec(tool_path, stdin=p, stdout=p, stderr=p)
        out, err = await proc.communicate(json.dumps(args).encode())
        if proc.returncode:
            raise RuntimeError(f"exit {proc.returncode}: {err.decode()[-200:]}")
        return out.decode()

    def in_process(name: str, argv: list[str]) -> Any:
        """The bundled script `name` run in this process on the args: its stdout."""
        import io
        tools = os.path.join(REPO, "data", "tools")
        if tools not in sys.path:  # as the script's own directory is: its modules import
            sys.path.append(tools)
        code = compile(open(os.path.join(tools, name), encoding="utf-8").read(), name, "exec")

        def run(args: dict) -> str:
            saved = sys.stdin, sys.stdout, sys.argv
            sys.stdin, sys.stdout = io.StringIO(json.dumps(args)), io.StringIO()
            sys.argv = list(argv)
            try:
                exec(code, {"__name__": "__main__"})
            except SystemExit:
                pass
            finally:
                out = sys.stdout.getvalue()
                sys.stdin, sys.stdout, sys.argv = saved
            return out
        return run
    read, grep = in_process("file_read", ["file_read"]), in_process("file_grep.py",
                                                                    ["file_grep.py"])

    @srv.tool()
    def file_read(args: dict) -> str:
        """The bundled file_read, run in process (no subprocess, no sandbox)."""
        return read(args)

    @srv.tool()
    def file_grep(args: dict) -> str:
        """The bundled file_grep's pure-Python engine, run in process (no sandbox)."""
        return grep(args)

    return srv


@contextlib.asynccontextmanager
async def mcp_session(tool_path: str = "/bin/cat") -> AsyncIterator[ClientSession]:
    """An initialized client session to a fresh MCP server process."""
    params = StdioServerParameters(command=sys.executable,
                                   args=["-m", "bench.mcp_bench", tool_path],
                                   env={"PYTHONPATH": str(REPO)}, cwd=str(REPO))
    with open(os.devnull, "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (r, w):
            async with ClientSession(r, w) as s:
                await s.initialize()
                yield s


class NoteHandler:
    """A ClientSession message handler that stamps when tools/list_changed arrives."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.event = asyncio.Event()
        self.when = 0.0

    async def __call__(self, message: Any) -> None:
        if getattr(message, "method", None) == "notifications/tools/list_changed" or \
                type(message).__name__ == "ToolListChangedNotification":
            self.when = time.perf_counter()
            self.event.set()


def server_pid_of(session: ClientSession) -> int | None:
    """Not exposed by the SDK; found from our children instead (see bench_startup)."""
    return None


async def noop_call(s: ClientSession) -> None:
    r = await s.call_tool("noop", {"args": ARGS})
    if r.is_error:
        raise RuntimeError(f"MCP noop failed: {r}")


async def echo_call(s: ClientSession) -> None:
    r = await s.call_tool("echo_sh", {"args": ARGS})
    if r.is_error:
        raise RuntimeError(f"MCP echo_sh failed: {r}")


if __name__ == "__main__":
    build_server(sys.argv[1] if len(sys.argv) > 1 else "/bin/cat").run()


async def file_grep_call(s: ClientSession, args: dict) -> str:
    r = await s.call_tool("file_grep", {"args": args})
    if r.is_error:
        raise RuntimeError(f"MCP file_grep failed: {r}")
    return r.content[0].text  # type: ignore[union-attr]


async def file_read_call(s: ClientSession, path: str) -> str:
    r = await s.call_tool("file_read", {"args": {"path": path, "limit": 50}})
    if r.is_error:
        raise RuntimeError(f"MCP file_read failed: {r}")
    return r.content[0].text  # type: ignore[union-attr]
