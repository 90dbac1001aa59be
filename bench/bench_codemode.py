"""Code mode (issue 45): the bytes that pass through a model's context for ten multi-step
jobs, done call by call, against one `script` call each.

Each job is one Python program written against `tools` (the agent's tools.py).  Done
directly, the bench runs that same program here, with every tool call made from outside
as a model's harness makes it (toolsrv.cli.client's rdwr of the call file): the bytes are
every call's JSON args and every result, as the model would send and read them.  Done in
code mode it is one `script` call: its args (the program) and its result (what the
program printed).  Both must print the same answer.  The tree is this repository's HEAD
(git archive), the session's cwd.

Figure: the ratio direct bytes / script bytes per job, and the median over the jobs:
target >= 10x, with the same answer.  Also each job's wall time both ways, informative.

    python bench/bench_codemode.py [--json FILE]
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from toolsrv.cli.client import Client  # noqa: E402

from .common import REPO, ToolsrvProcess, finish, parser, row  # noqa: E402

B = "codemode"
A = "session/code/agent/a"
BUNDLED = str(REPO / "data" / "tools")

JOBS = {
    "first line of every doc": """
for p in tools.file_glob(pattern="doc/*.md").splitlines():
    print(p, tools.file_read(path=p, limit=1).splitlines()[0].split("\\t", 1)[1])
""",
    "functions over 80 lines": """
defs = tools.file_grep(pattern=r"^\\s*(async )?def ", path="toolsrv", max_results=5000)
rows = [ln.split(":", 2) for ln in defs.splitlines() if ln.count(":") >= 2]
for (f, n, t), (g, m, _) in zip(rows, rows[1:]):
    if f == g and n.isdigit() and m.isdigit() and int(m) - int(n) > 80:
        print(f, t.strip().split("(")[0], int(m) - int(n))
""",
    "where MAX_DEPTH is defined, its users": """
print(tools.file_grep(pattern=r"^MAX_DEPTH\\s*=", path="toolsrv", output="files"))
print(tools.file_grep(pattern=r"MAX_DEPTH", path=".", output="files"))
""",
    "lines per module of serve/": """
for p in tools.file_glob(pattern="toolsrv/serve/*.py").splitlines():
    print(p, len(tools.file_read(path=p, limit=20000).splitlines()))
""",
    "each bundled tool's description": """
import json
for p in tools.file_glob(pattern="data/tools/*.meta").splitlines():
    for ln in tools.file_read(path=p, limit=20000).splitlines():
        text = ln.split("\\t", 1)[-1]
        if text.startswith('  "description": '):
            desc = json.loads("{" + text.rstrip(",") + "}")["description"]
            print(p.rsplit("/", 1)[1][:-5], desc[:60])
""",
    "the longest doc": """
sizes = {p: len(tools.file_read(path=p, limit=20000).splitlines())
         for p in tools.file_glob(pattern="doc/*.md").splitlines()}
print(max(sizes, key=sizes.get), max(sizes.values()))
""",
    "where fit() is defined, its callers per file": """
print(tools.file_grep(pattern=r"^def fit\\(", path="toolsrv", output="files"))
counts = [ln.rsplit(":", 1) for ln in tools.file_grep(
    pattern=r"\\bfit\\(", path="toolsrv", output="count").splitlines() if ":" in ln]
for f, n in sorted(counts, key=lambda x: (-int(x[1]), x[0]))[:5]:
    print(f, n)
""",
    "each bundled tool's tier and readOnly": """
for p in tools.file_glob(pattern="data/tools/*.meta").splitlines():
    got = [ln.split("\\t", 1)[-1].strip().rstrip(",") for ln in
           tools.file_read(path=p, limit=20000).splitlines()]
    print(p.rsplit("/", 1)[1][:-5], *[g for g in got if g.startswith(('"tier"', '"readOnly"'))])
""",
    "headings per doc page": """
hits = tools.file_grep(pattern=r"^## ", path="doc", glob="*.md", max_results=5000)
per = {}
for ln in hits.splitlines():
    per[ln.split(":", 1)[0]] = per.get(ln.split(":", 1)[0], 0) + 1
for f in sorted(per):
    print(f, per[f])
""",
    "first docstring line of calls/": """
for p in tools.file_glob(pattern="toolsrv/tree/calls/*.py").splitlines():
    print(p, tools.file_read(path=p, limit=1).splitlines()[0].split("\\t", 1)[1][:70])
""",
}


def tree() -> str:
    """This repository's HEAD in a directory the tools' uid can read."""
    d = tempfile.mkdtemp(prefix="bench-tree.", dir="/tmp")
    os.chmod(d, 0o755)
    arch = subprocess.run(["git", "archive", "HEAD"], cwd=REPO, capture_output=True,
                          check=True).stdout
    subprocess.run(["tar", "-x", "-C", d], input=arch, check=True)
    return d


def direct(c: Client, module: str, code: str) -> tuple[str, int]:
    """The program run here, each of its calls made from outside: (its output, the bytes of
    every call's args and result)."""
    spent = [0]

    def call_tool(name: str, args: dict | None = None, structured: bool = False) -> str:
        args = {k: v for k, v in (args or {}).items() if v is not None}
        data = json.dumps(args).encode()
        out = c.rdwr(f"{A}/tools/{name}/call", data)
        spent[0] += len(data) + len(out)
        return out.decode()
    tools: dict = {}
    exec(compile(module, "tools.py", "exec"), tools)
    tools["call_tool"] = call_tool
    mod = type(sys)("tools")
    mod.__dict__.update(tools)
    buf = io.StringIO()
    with contextlib.redirect_stdout(buf):
        exec(compile(code, "<job>", "exec"), {"tools": mod})
    return buf.getvalue(), spent[0]


def main() -> None:
    opts = parser(__doc__).parse_args()
    work = tree()
    rows, ratios = [], []
    try:
        with ToolsrvProcess(BUNDLED) as srv, Client.connect(srv.addr) as c:
            c.mkdir("session/code")
            c.write("session/code/cwd", work.encode())
            c.mkdir(A)
            c.rdwr(f"{A}/ctl", b"tool_load script file_glob file_read file_grep")
            module = c.read(f"{A}/tools.py").decode()
            for job, code in JOBS.items():
                t = time.perf_counter()
                answer, d_bytes = direct(c, module, code)
                d_s = time.perf_counter() - t
                args = json.dumps({"code": "import tools\n" + code.lstrip()}).encode()
                t = time.perf_counter()
                out = c.rdwr(f"{A}/tools/script/call", args).decode()
                s_s = time.perf_counter() - t
                s_bytes = len(args) + len(out.encode())
                same = out == answer
                ratios.append(d_bytes / s_bytes)
                rows.append(row(B, f"{job}: context bytes, script", "B", {
                    "median": s_bytes, "p99": s_bytes, "n": 1}, "call by call",
                    {"median": d_bytes, "p99": d_bytes, "n": 1}, "same answer", same,
                    note=f"{d_s * 1e3:.0f} ms call by call, {s_s * 1e3:.0f} ms script"))
    finally:
        shutil.rmtree(work, ignore_errors=True)
    med = statistics.median(ratios)
    rows.append(row(B, "median bytes saved over the jobs (direct / script)", "x",
                    {"median": med, "p99": min(ratios), "n": len(ratios)}, target=">= 10x",
                    met=med >= 10 and all(r["met"] for r in rows)))
    finish(rows, opts)


if __name__ == "__main__":
    main()
