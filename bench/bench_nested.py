"""Nested calls and the `script` tool (issue 45): what a call made by a running call costs.

Figures and their baselines, all measured in this run, against a real `toolsrv serve` with
the bundled tools:
  nested      a call of a tool made from inside a `script` run, through tools.py on the
              scoped connection (timed in the script, around each call), against the same
              call made directly from outside (toolsrv.cli.client's rdwr, timed here):
              target <= 1.2x at the median.  For file_read (the agent's resident
              interpreter) and for py_echo (a Python tool forked from a warm interpreter).
  script      one `script` whose program imports tools and calls that tool once, called
              from outside, against the tool called directly: target <= 2x.
Windows alternate between the variants so host noise hits them alike.

    python bench/bench_nested.py [--quick] [--json FILE]
"""
from __future__ import annotations

import json
import sys
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from toolsrv.cli.client import Client  # noqa: E402

from .common import REPO, PY_ECHO, ToolsrvProcess, finish, lat, make_tools_dir, parser, row  # noqa: E402,E501

B = "nested"
A = "session/bench/agent/a"
BUNDLED = str(REPO / "data" / "tools")
PY_META = {"description": "echo the JSON args (Python)", "args": {"type": "object"}}
ARGS = {"file_read": {"path": "notes.txt"}, "py_echo": {"x": 1}}
# N nested calls of TOOL with ARGS, each timed; the samples (s) as JSON on stdout
INSIDE = """import json, time, tools
out = []
for _ in range({n}):
    t = time.perf_counter()
    tools.call_tool({tool!r}, {args!r})
    out.append(time.perf_counter() - t)
print(json.dumps(out))
"""
ONE = "import tools\nprint(tools.call_tool({tool!r}, {args!r}))\n"


def call(c: Client, tool: str, args: dict) -> bytes:
    return c.rdwr(f"{A}/tools/{tool}/call", json.dumps(args).encode())


def timed(c: Client, tool: str, args: dict, n: int) -> list[float]:
    out = []
    for _ in range(n):
        t = time.perf_counter()
        call(c, tool, args)
        out.append(time.perf_counter() - t)
    return out


def main() -> None:
    opts = parser(__doc__).parse_args()
    windows, per = (3, 10) if opts.quick else (8, 25)
    tools = make_tools_dir({"py_echo": (PY_ECHO, PY_META)})
    rows = []
    with ToolsrvProcess(f"{tools}:{BUNDLED}") as srv:
        c = Client.connect(srv.addr)
        c.mkdir("session/bench")
        c.mkdir(A)
        c.rdwr(f"{A}/ctl", b"tool_load script file_read file_write py_echo")
        call(c, "file_write", {"path": "notes.txt", "content": "alpha\nbeta\n" * 20})
        got: dict[str, list[float]] = {}
        for _ in range(2):                    # warm: the resident, the warm interpreters
            for tool, args in ARGS.items():
                call(c, tool, args)
                call(c, "script", {"code": ONE.format(tool=tool, args=args)})
        for _ in range(windows):
            for tool, args in ARGS.items():
                code = INSIDE.format(n=per, tool=tool, args=args)
                got.setdefault(f"nested {tool}", []).extend(
                    json.loads(call(c, "script", {"code": code})))
                got.setdefault(f"direct {tool}", []).extend(timed(c, tool, args, per))
                got.setdefault(f"script {tool}", []).extend(
                    timed(c, "script", {"code": ONE.format(tool=tool, args=args)}, per // 2))
        c.close()
    for tool in ARGS:
        direct = lat(got[f"direct {tool}"])
        nested = lat(got[f"nested {tool}"])
        script = lat(got[f"script {tool}"])
        rows.append(row(B, f"nested call of {tool}", "ms", nested, f"{tool} direct", direct,
                        "<= 1.2x", nested["median"] <= 1.2 * direct["median"]))
        rows.append(row(B, f"script calling {tool} once", "ms", script, f"{tool} direct",
                        direct, "<= 2x", script["median"] <= 2 * direct["median"]))
    finish(rows, opts)


if __name__ == "__main__":
    main()
