"""The `mcp` verb of the command line: the SDK is its dependency alone."""
from __future__ import annotations

import subprocess
import sys

import pytest

from toolsrv.dirs.bundled import install_hint
from toolsrv.cli.command import build_parser, parse


def run_py(code: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, stdin=subprocess.DEVNULL)


def test_without_the_sdk_the_verb_says_how_to_install_it():
    p = run_py("import sys\n"
               "sys.modules['mcp'] = sys.modules['mcp_types'] = None\n"
               "from toolsrv.cli.command import main\n"
               "sys.exit(main(['mcp']))\n")
    assert p.returncode == 1
    assert "toolsrv mcp: the MCP SDK is not installed" in p.stderr
    assert install_hint("mcp") in p.stderr    # tests/cli/test_install_hint.py: its forms


def test_serve_never_imports_the_sdk():
    p = run_py("import sys\n"
               "from toolsrv.cli import command\n"
               "command.parse(['serve', '--no-state'])\n"
               "import toolsrv.app, toolsrv.serve.server, toolsrv.tree.root, toolsrv.tree.agent\n"
               "print(sorted(m for m in sys.modules if m.split('.')[0] in "
               "('mcp', 'mcp_types', 'starlette', 'uvicorn', 'anyio', 'pydantic')))\n")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip() == "[]"


def test_the_verb_and_its_options_parse():
    a = parse(["mcp", "-a", "unix!/x", "--session", "s", "--agent", "a", "--tools", "x,y",
               "--search", "--http", "127.0.0.1:0", "--no-standalone"])
    assert (a.verb, a.addr, a.session, a.agent, a.tools, a.search, a.http,
            a.no_standalone) == ("mcp", "unix!/x", "s", "a", "x,y", "always", "127.0.0.1:0",
                                 True)
    a = parse(["mcp", "--search", "auto", "--search-budget", "9000", "--pin", "x,y",
               "--pin", "z"])
    assert (a.search, a.search_budget, a.pin) == ("auto", 9000, ["x,y", "z"])
    assert parse(["mcp"]).search is None
    assert "mcp" in build_parser().format_help()


@pytest.mark.parametrize("s, want", [("127.0.0.1:8080", ("127.0.0.1", 8080)),
                                     ("[::1]:0", ("::1", 0)), (":9", ("127.0.0.1", 9)),
                                     ("localhost:1", ("localhost", 1))])
def test_http_addresses(s, want):
    pytest.importorskip("mcp", reason="the MCP SDK is not installed")
    from toolsrv.mcp.http import parse_hostport
    assert parse_hostport(s) == want
