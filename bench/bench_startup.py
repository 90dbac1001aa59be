"""Start-up and idle memory: toolsrv vs the MCP server, launched again and again.

Figures (medians over several launches, each a fresh process):
  first request   launch of `toolsrv serve` -> the socket answers -> Tversion, Tattach and a
                  Tread of `revision` answered: target < 150 ms.  Baseline: MCP stdio server
                  launch -> initialize -> first no-op tool result.
  first call      launch -> first sh echo call result (mkdir session and agent, tool_load,
                  rdwr on call), informative, against the same MCP baseline.
  floor           the same launch -> first answer for the floor of any Python asyncio server:
                  the venv's python on a script that imports asyncio and echoes on a Unix
                  socket (the raw echo of bench/baselines.py, without the bench package),
                  driven by the same client and frames, launched in the same rounds.
                  toolsrv's launch is reported against it as a ratio, and toolsrv's own
                  share as the per-round difference.
  idle RSS        the server process after its first request: target < 40 MiB; the zygote
                  (the runner's launcher process) is reported in a note.  Baseline: the MCP
                  server process after its first call.
Source is byte-compiled first (as an installed package is), so no launch pays for compiling.
The tools directory has a parent of its own, as data/tools has (see tools_dir).

    python bench/bench_startup.py [--quick] [--json FILE]
"""
from __future__ import annotations

import asyncio
import atexit
import compileall
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from toolsrv.proto import OREAD, Topen, Tread, Twalk  # noqa: E402

from toolsrv.cli.client import Client  # noqa: E402

from .common import (  # noqa: E402
    HAVE_UVLOOP, NO_UVLOOP, PAYLOAD, PY, REPO, ToolsrvProcess, children, finish, lat,
    make_tools_dir, one, parser, row, rss_kib,
)
from .wire import Wire  # noqa: E402

B = "startup"
MiB = 1024.0


def compile_sources() -> None:
    for d in ("toolsrv", "bench"):
        compileall.compile_dir(str(REPO / d), quiet=1)


# The floor server: asyncio and a Unix-socket echo, nothing else (see the header).
FLOOR_SERVER = """\
import asyncio, os, sys
class Echo(asyncio.Protocol):
    def connection_made(self, transport): self.transport = transport
    def data_received(self, data): self.transport.write(data)
async def main(path):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    srv = await asyncio.get_running_loop().create_unix_server(Echo, path)
    async with srv:
        await srv.serve_forever()
asyncio.run(main(sys.argv[1]))
"""


def tools_dir() -> str:
    """make_tools_dir's tools, moved into a directory of their own.  The server watches each
    tools directory's parent too (watch.py); make_tools_dir's parent is /tmp, and adding an
    inotify watch to a directory walks the kernel's cached entries of its children, deleted
    and never-found names included: on this VM, after a day of tests, /tmp took 25-30 ms of
    every launch.  The bundled data/tools, as `make run` serves it, has a small parent."""
    d = tempfile.mkdtemp(prefix="bench-startup.", dir="/tmp")
    os.chmod(d, 0o755)
    atexit.register(shutil.rmtree, d, True)
    os.rename(make_tools_dir(), f"{d}/tools")
    return f"{d}/tools"


def first_answers(path: str) -> Wire:
    """Tversion, Tattach, and a Twalk, Topen and Tread of `revision`, one at a time."""
    w = Wire.unix(path)
    w.hello()
    w.rpc(Twalk(1, 0, 1, ("revision",)))
    w.rpc(Topen(1, 1, OREAD))
    w.rpc(Tread(1, 1, 0, 8192))
    return w


def floor_first() -> float:
    """Launch -> first answers of the floor server (its frames come back as they went)."""
    srv = ToolsrvProcess(tools="")          # for its socket path, environment and polling
    srv.argv = [PY, "-c", FLOOR_SERVER, srv.path]
    t0 = time.perf_counter()
    srv.start(timeout=60)
    try:
        first_answers(srv.path).close()
        return time.perf_counter() - t0
    finally:
        srv.stop()


def first_request(tools: str, uvloop: bool) -> tuple[float, float, int, int]:
    """(launch->first Rread s, launch->first call result s, server RSS KiB, zygote RSS KiB)."""
    srv = ToolsrvProcess(tools, uvloop=uvloop)
    t0 = time.perf_counter()
    srv.start(timeout=60)
    try:
        w = first_answers(srv.path)
        t_req = time.perf_counter() - t0
        with Client.connect(srv.addr) as c:
            c.mkdir("session/s")
            c.mkdir("session/s/agent/a")
            c.rdwr("session/s/agent/a/ctl", b"tool_load echo")
        out = w.rdwr(7, ("session", "s", "agent", "a", "tools", "echo", "call"), PAYLOAD)
        t_call = time.perf_counter() - t0
        assert out == PAYLOAD
        rss = srv.rss_kib()
        zyg = sum(rss_kib(p) for p in children(srv.pid))
        w.close()
    finally:
        srv.stop()
    return t_req, t_call, rss, zyg


async def mcp_first(tools: str) -> tuple[float, int]:
    from .mcp_bench import mcp_session, noop_call
    t0 = time.perf_counter()
    before = set(children(os.getpid()))
    async with mcp_session(f"{tools}/echo") as s:
        await noop_call(s)
        t = time.perf_counter() - t0
        pids = [p for p in children(os.getpid()) if p not in before]
        rss = max((rss_kib(p) for p in pids), default=0)
    return t, rss


def main(argv: list[str] | None = None) -> list[dict]:
    opts = parser(__doc__).parse_args(argv)
    n = 4 if opts.quick else 12
    compile_sources()
    tools = tools_dir()
    req, call, rss, zyg, uv, floor = [], [], [], [], [], []
    m_t, m_rss = [], []
    try:
        import mcp  # noqa: F401
        have_mcp = True
    except ImportError:
        have_mcp = False
    for i in range(n + 1):                  # the first round warms the page cache
        a, b, r, z = first_request(tools, False)
        u = first_request(tools, True)[0] if HAVE_UVLOOP else 0.0
        f = floor_first()
        if have_mcp:
            mt, mr = asyncio.run(mcp_first(tools))
        if i:
            req.append(a)
            call.append(b)
            rss.append(r)
            zyg.append(z)
            uv.append(u)
            floor.append(f)
            if have_mcp:
                m_t.append(mt)
                m_rss.append(mr)
    mcp_lat = lat(m_t) if have_mcp else None
    mcp_note = "" if have_mcp else "mcp is not installed (pip install '.[bench]'): no baseline"
    rows = [
        row(B, "launch -> first answered request", "ms", lat(req), "MCP launch -> first result",
            mcp_lat, "< 150 ms", lat(req)["median"] < 150, mcp_note),
        row(B, "launch -> first request, uvloop", "ms", lat(uv) if HAVE_UVLOOP else None,
            "std loop", lat(req), "informative", None, "" if HAVE_UVLOOP else NO_UVLOOP),
        row(B, "launch -> first request, against the asyncio floor", "ms", lat(req),
            "bare asyncio echo launch -> first answer", lat(floor), "informative"),
        row(B, "toolsrv's own share: launch minus the floor", "ms",
            lat(a - b for a, b in zip(req, floor)), target="informative",
            note="per round, toolsrv's launch minus the bare asyncio echo's launch just after"),
        row(B, "launch -> first sh echo call result", "ms", lat(call),
            "MCP launch -> first result", mcp_lat, "informative"),
        row(B, "idle RSS, server process", "MiB", one(sorted(rss)[len(rss) // 2] / MiB),
            "MCP server RSS" if have_mcp else None,
            one(sorted(m_rss)[len(m_rss) // 2] / MiB) if have_mcp else None, "< 40 MiB",
            sorted(rss)[len(rss) // 2] / MiB < 40,
            f"plus the runner's zygote process: {sorted(zyg)[len(zyg) // 2] / MiB:.1f} MiB"),
    ]
    finish(rows, opts)
    return rows


if __name__ == "__main__":
    main()
