"""Language servers (issue 31): lsp_definition through toolsrv against the same request
made directly to the same language server (pylsp) over stdio, in the same run.

The project is the tests' (tests/lsphelpers.py), in the session's cwd.  toolsrv runs the
bundled lsp_definition (pylsp behind the bridge, sandboxed: Landlock, uid, its own PID
namespace, cgroup), called through the real server with client_9p's pipelined rdwr.  The
baseline is pylsp started by this process, unconfined, spoken to over its stdio pipes
with the same framing (toolsrv.tree.resident.lspproto), alternating call by call so host noise
hits both.

Figures and their baselines, all measured in this run:
  first   the first lsp_definition of a fresh session (sandbox, bridge, pylsp start,
          initialize, didOpen, jedi's first analysis) against the direct spawn +
          initialize + didOpen + definition: informative.
  warm    a later lsp_definition by position (the file re-checked on disk each call)
          against a direct textDocument/definition on the open document: target
          <= 1.5x at the median.

    python bench/bench_lsp.py [--quick] [--json FILE]
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from .common import REPO, ToolsrvProcess, finish, lat, parser, row  # noqa: E402
from .wire import Wire  # noqa: E402

sys.path.insert(0, str(REPO / "tests"))
from lsphelpers import PROJECT, PYLSP, write_project  # noqa: E402
from toolsrv.tree.resident.lspproto import Deframer, frame, path_uri  # noqa: E402

B = "lsp"
ARGS = json.dumps({"path": "pkg/a.py", "line": 5, "column": 24}).encode()
WANT = b"pkg/shapes.py:7:9: def area(self):\n"


class Direct:
    """pylsp on plain pipes: initialize, didOpen, definition requests."""

    def __init__(self, root: str) -> None:
        self.p = subprocess.Popen([PYLSP], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                  stderr=subprocess.DEVNULL, cwd=root)
        self.d, self.ids, self.root = Deframer(), 0, root

    def request(self, method: str, params: dict) -> object:
        self.ids += 1
        self.p.stdin.write(frame({"jsonrpc": "2.0", "id": self.ids, "method": method,
                                  "params": params}))
        self.p.stdin.flush()
        while True:
            for m in self.d.feed(os.read(self.p.stdout.fileno(), 65536)):
                if "method" in m and "id" in m:        # the server asks: null answers
                    self.p.stdin.write(frame({"jsonrpc": "2.0", "id": m["id"], "result": None}))
                    self.p.stdin.flush()
                elif m.get("id") == self.ids and "method" not in m:
                    return m.get("result")

    def notify(self, method: str, params: dict) -> None:
        self.p.stdin.write(frame({"jsonrpc": "2.0", "method": method, "params": params}))
        self.p.stdin.flush()

    def start(self) -> None:
        self.request("initialize", {"processId": None, "rootUri": path_uri(self.root),
                                    "capabilities": {}})
        self.notify("initialized", {})
        path = os.path.join(self.root, "pkg", "a.py")
        self.notify("textDocument/didOpen", {"textDocument": {
            "uri": path_uri(path), "languageId": "python", "version": 1,
            "text": open(path).read()}})

    def definition(self) -> object:
        got = self.request("textDocument/definition", {
            "textDocument": {"uri": path_uri(os.path.join(self.root, "pkg", "a.py"))},
            "position": {"line": 4, "character": 23}})
        assert got and "shapes.py" in json.dumps(got), got
        return got

    def close(self) -> None:
        self.p.kill()
        self.p.wait()


def fresh_session(srv: ToolsrvProcess, name: str) -> tuple[str, ...]:
    from toolsrv.cli.client import Client
    with Client.connect(srv.addr) as c:
        c.mkdir(f"session/{name}")
        c.mkdir(f"session/{name}/agent/a")
        c.rdwr(f"session/{name}/agent/a/ctl", b"tool_load lsp_definition")
        write_project(c.read(f"session/{name}/cwd").decode().strip(), PROJECT)
    return ("session", name, "agent", "a", "tools", "lsp_definition", "call")


def run(opts: object) -> list[dict]:
    q = getattr(opts, "quick")
    firsts, warms = (2, 100) if q else (5, 400)
    srv = ToolsrvProcess(str(REPO / "data" / "tools")).start()
    s: dict[str, list[float]] = {"first": [], "dfirst": [], "warm": [], "dwarm": []}
    pc = time.perf_counter
    try:
        w = Wire.unix(srv.path)
        w.hello()
        names = ()
        for i in range(firsts):
            names = fresh_session(srv, f"b{i}")
            t = pc()
            assert w.rdwr(7, names, ARGS, True) == WANT
            s["first"].append(pc() - t)
            root = "/tmp/bench-lsp-direct"
            os.makedirs(root, exist_ok=True)
            write_project(root, PROJECT)
            t = pc()
            d = Direct(root)
            d.start()
            d.definition()
            s["dfirst"].append(pc() - t)
            if i < firsts - 1:
                d.close()
        for _ in range(20):                      # both warm
            w.rdwr(7, names, ARGS, True)
            d.definition()
        for _ in range(warms):                   # alternating call by call: the host's
            t = pc()                             # noise (2 busy cores) hits both alike
            r = w.rdwr(7, names, ARGS, True)
            s["warm"].append(pc() - t)
            t = pc()
            d.definition()
            s["dwarm"].append(pc() - t)
        assert r == WANT, r
        d.close()
        w.close()
    finally:
        srv.stop()
    L = {k: lat(v) for k, v in s.items()}
    return [
        row(B, "first lsp_definition (fresh session: start, index, answer)", "ms", L["first"],
            "pylsp spawned + initialize + didOpen + definition, direct", L["dfirst"],
            "informative", None, "sandbox + bridge + pylsp start, jedi's first analysis"),
        row(B, "warm lsp_definition by position (rdwr)", "ms", L["warm"],
            "textDocument/definition to pylsp over stdio, direct", L["dwarm"], "<= 1.5x",
            L["warm"]["median"] <= 1.5 * L["dwarm"]["median"],
            "each call re-checks the file on disk through the bridge (one fstat)"),
    ]


def main(argv: list[str] | None = None) -> list[dict]:
    opts = parser(__doc__).parse_args(argv)
    if PYLSP is None:
        print("pylsp is not installed (pip install '.[lsp]'): nothing to measure")
        return []
    rows = run(opts)
    finish(rows, opts)
    return rows


if __name__ == "__main__":
    main()
