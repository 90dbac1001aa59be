"""MCP client set-up that cannot silently go wrong (issue 27, 5): `toolsrv mcp --config`
prints a client configuration with the absolute command and the address, which works
from a client that passes an environment of its own (no PATH to toolsrv, no NAMESPACE);
standalone mode says so in initialize's instructions and once on stderr."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

import anyio  # noqa: E402
from mcp import ClientSession, StdioServerParameters  # noqa: E402
from mcp.client.stdio import stdio_client  # noqa: E402

from mcphelpers import CLIENT  # noqa: E402
from shellhelpers import TOOLSRV, serving  # noqa: E402
from toolsrv.cli.client import Client  # noqa: E402


def config(env: dict, *more: str) -> dict:
    p = subprocess.run(TOOLSRV + ["mcp", "--config", *more], env=env, capture_output=True,
                       text=True, timeout=60, cwd=tempfile.gettempdir())
    assert p.returncode == 0, p.stderr
    return json.loads(p.stdout)


def test_the_config_names_the_absolute_command_and_the_address():
    env = dict(os.environ, NAMESPACE="/tmp/ns-for-config-27")
    env.pop("TOOLSRV_ADDR", None)
    c = config(env)["mcpServers"]["toolsrv"]
    assert os.path.isabs(c["command"]) and os.access(c["command"], os.X_OK)
    assert c["args"][-3:] == ["mcp", "-a", "unix!/tmp/ns-for-config-27/toolsrv"]
    v = config(env, "vscode", "--search", "--tools", "file_read")["servers"]["toolsrv"]
    assert v["type"] == "stdio" and v["command"] == c["command"]
    assert v["args"][-6:] == ["mcp", "-a", "unix!/tmp/ns-for-config-27/toolsrv", "--tools",
                              "file_read", "--search"]
    assert config(env, "cursor") == config(env)      # Cursor reads mcpServers too


async def _initialize(command: str, args: list[str], environ: dict, errlog,
                      during=lambda: None) -> tuple:
    params = StdioServerParameters(command=command, args=args, env=environ,
                                   cwd=tempfile.gettempdir())
    async with stdio_client(params, errlog=errlog) as (r, w):
        async with ClientSession(r, w, client_info=CLIENT) as s:
            with anyio.fail_after(60):
                init = await s.initialize()
                names = {t.name for t in (await s.list_tools()).tools}
                await s.call_tool("file_glob", {"pattern": "no-such-27-*"})  # takes a seat
                seen = await anyio.to_thread.run_sync(during)   # while it is connected
            return init.instructions or "", names, seen


def test_the_printed_config_reaches_the_server_from_a_bare_environment():
    """As a client starts it: only the SDK's default variables (no NAMESPACE, a PATH
    without toolsrv).  It must reach the running server, not fall back to standalone."""
    from mcp.client.stdio import get_default_environment
    with serving() as (env, _, _p):
        c = config(env)["mcpServers"]["toolsrv"]
        bare = dict(get_default_environment(), PATH="/usr/bin:/bin", HOME=env["HOME"])
        assert "NAMESPACE" not in bare
        def sessions() -> list[str]:
            with Client.connect(f"unix!{env['NAMESPACE']}/toolsrv") as cl:
                return [d.name for d in cl.ls("session")]
        with tempfile.TemporaryFile("w+") as log:
            instructions, names, seen = anyio.run(_initialize, c["command"], c["args"], bare,
                                                  log, sessions)
            log.seek(0)
            err = log.read()
        assert "file_read" in names
        assert "Standalone" not in instructions and "standalone" not in err, err
        assert any(n.startswith("pytest-client") for n in seen), seen   # its seat is there


def test_standalone_says_so_in_the_instructions_and_once_on_stderr():
    with tempfile.TemporaryDirectory(prefix="ns27.", dir="/tmp") as ns:
        environ = dict(os.environ, NAMESPACE=ns, HOME=ns)
        environ.pop("TOOLSRV_ADDR", None)
        environ.pop("OLLIE_TOOLS_PATH", None)
        with tempfile.TemporaryFile("w+") as log:
            instructions, names, _ = anyio.run(_initialize, sys.executable,
                                               ["-m", "toolsrv", "mcp"], environ, log)
            log.seek(0)
            err = log.read()
    assert f"Standalone mode: no toolsrv answered at unix!{ns}/toolsrv" in instructions
    assert "toolsrv mcp --config" in instructions
    assert err.count("toolsrv mcp: standalone: nothing answers at") == 1, err
    assert "file_read" in names
