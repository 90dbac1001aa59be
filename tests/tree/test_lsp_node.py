"""A language server that is not Python (issue 31): typescript-language-server from npm,
set up by the test (npm install into a cache directory, as tests/mcpface/test_inspector.py
does), behind lsp_* .meta files of its own and a profile that grants its install.
Without node and npm the test is skipped, saying so.  (bash-language-server does not
start under the runner's 8 GiB address-space limit: V8 reserves more for WebAssembly.)"""
from __future__ import annotations

import json
import os
import shutil
import tempfile

import pytest
import yaml

from apphelpers import AppThread, add_tool, tools_dir
from lsphelpers import write_project
from npmhelpers import npm_prefix
from toolsrv.cli.client import Client

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VERSION = "4.3.4"
PACKAGES = [f"typescript-language-server@{VERSION}", "typescript@5.6.3"]
LIB = 'export function greet(name: string): string {\n  return "hi " + name;\n}\n'
MAIN = 'import { greet } from "./lib";\n\ngreet("a");\nconst n: number = greet("b");\n'



@pytest.fixture(scope="module")
def tsls() -> str:
    return npm_prefix(f"typescript-language-server-{VERSION}", PACKAGES,
                      os.path.join("node_modules", ".bin", "typescript-language-server"),
                      "the non-Python language server test needs node 16+")


@pytest.fixture(scope="module")
def srv(tsls):
    d = tools_dir()
    for op in ("definition", "references", "symbols", "diagnostics", "calls"):
        meta = json.load(open(os.path.join(REPO, "data", "tools", f"lsp_{op}.meta")))
        meta.update(cmd=f"exec {tsls}/node_modules/.bin/typescript-language-server --stdio",
                    sandbox="lspnode", resident={"protocol": "lsp", "tool": op,
                                                 "language": "typescript",
                                                 "extensions": [".ts", ".tsx"]})
        add_tool(d, f"ts_{op}", None, meta)
    home = tempfile.mkdtemp(prefix="home.", dir="/tmp")
    prof = yaml.safe_load(open(os.path.join(REPO, "sandbox", "lsp.yaml")))
    prof["filesystem"]["rox"].append(os.path.realpath(tsls))
    os.makedirs(f"{home}/.config/ollie/sandbox")
    with open(f"{home}/.config/ollie/sandbox/lspnode.yaml", "w") as f:
        yaml.safe_dump(prof, f)
    old = os.environ.get("HOME")
    os.environ["HOME"] = home
    app = AppThread([d], timeout=120).start()
    yield app
    app.cleanup()
    os.environ["HOME"] = old or "/root"
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(d, ignore_errors=True)


def test_typescript_language_server_answers_confined(srv):
    c = Client.connect(srv.addr)
    c.mkdir("session/ts")
    c.mkdir("session/ts/agent/a")
    c.rdwr("session/ts/agent/a/ctl", b"tool_load ts_definition ts_references ts_symbols "
           b"ts_diagnostics ts_calls")
    cwd = c.read("session/ts/cwd").decode().strip()
    write_project(cwd, {"lib.ts": LIB, "main.ts": MAIN})

    def call(tool: str, **args) -> str:
        return c.rdwr(f"session/ts/agent/a/tools/{tool}/call", json.dumps(args).encode()
                      ).decode()
    # diagnostics first: the answer waits for tsserver to have loaded the project
    assert call("ts_diagnostics", path="main.ts", wait=30) == (
        "main.ts:4:7: error: Type 'string' is not assignable to type 'number'. [typescript]\n"
        "main.ts:4:7: hint: 'n' is declared but its value is never read. [typescript]\n")
    assert call("ts_definition", path="main.ts", line=3, column=2) == \
        "lib.ts:1:17: export function greet(name: string): string {\n"
    assert call("ts_definition", symbol="greet") == \
        "lib.ts:1:17: export function greet(name: string): string {\n"
    assert call("ts_references", path="lib.ts", line=1, column=17) == (
        "lib.ts:1:17: export function greet(name: string): string {\n"
        'main.ts:1:10: import { greet } from "./lib";\n'
        'main.ts:3:1: greet("a");\n'
        'main.ts:4:19: const n: number = greet("b");\n')
    assert call("ts_symbols", path="lib.ts") == "lib.ts:1:17: function greet [1-3]\n"
    assert call("ts_calls", symbol="greet") == (
        'main.ts:3:1: greet("a");  <- module main.ts\n'
        'main.ts:4:19: const n: number = greet("b");  <- module main.ts\n')
    pid = next(int(p) for p in os.listdir("/proc") if p.isdigit() and _is_tsserver(p, cwd))
    status = open(f"/proc/{pid}/status").read()
    assert "NoNewPrivs:\t1" in status and "Seccomp:\t2" in status
    assert os.readlink(f"/proc/{pid}/ns/pid") != os.readlink("/proc/self/ns/pid")
    c.close()


def _is_tsserver(pid: str, cwd: str) -> bool:
    try:
        return os.readlink(f"/proc/{pid}/cwd") == cwd and \
            b"typescript-language-server" in open(f"/proc/{pid}/cmdline", "rb").read()
    except OSError:
        return False
