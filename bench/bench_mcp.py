"""The MCP face (`toolsrv mcp`, issue 19): a tool call through it, and list_changed.

Figures and their baselines, all measured in this run:
  call          a sandboxed /bin/sh JSON echo (Landlock, PID namespace, the ~100 B payload)
                called through `toolsrv mcp` over stdio (the SDK's client, ClientSession),
                which rdwr's the tool's call file of a `toolsrv serve` in its own process;
                and through a standalone `toolsrv mcp` (its server in process); against the
                MCP SDK's own server (bench/mcp_bench.py) running the same tool unsandboxed
                with asyncio.create_subprocess_exec: target <= 1.1x at the median.  The
                three alternate window by window so host noise hits them alike.
  list_changed  a .meta rewritten (its description changes, so the revision moves) to the
                notifications/tools/list_changed the SDK's client receives; against the
                same change seen by a direct 9P client blocked on `revwait` (the registry's
                own watch latency, the floor under any notification), both timed from the
                same write: target <= 100 ms at the median.
  resident      a resident python3 JSON echo (issue 17's lines protocol, bench_resident's)
                called through `toolsrv mcp`, against the SDK's in-process no-op tool over
                stdio: informative (the face's floor: MCP over stdio, then 9P to a process
                that is up already).

  mcp-server-time  the time server from PyPI imported with `toolsrv import-mcp` (resident,
                sandboxed under the profile import-mcp writes) and called through
                `toolsrv mcp`, against the same server called directly by the SDK's
                client over stdio, unsandboxed: target <= 1.1x at the median.

  before/after  with --old-tree DIR (an earlier commit's tree: `git archive COMMIT | tar
                -x -C DIR`), the same echo through that tree's `toolsrv mcp`, alternating
                with this tree's in the same windows: the ratio is this tree's cost.

    python bench/bench_mcp.py [--quick] [--json FILE] [--old-tree DIR]
"""
from __future__ import annotations

import asyncio
import json
import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Awaitable, Callable

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from .common import (  # noqa: E402
    ECHO_META, ECHO_SH, PAYLOAD, PY, REPO, ToolsrvProcess, finish, lat, make_tools_dir, parser, row,
)

B = "mcp"
ARGS = json.loads(PAYLOAD)


async def face_session(addr: str | None, stack: Any, tools: str = "",
                       repo: str | None = None) -> Any:
    """An initialized SDK client session to `toolsrv mcp -a addr` over stdio; with addr
    None, to a standalone one (nothing answers at its default address: an empty
    $NAMESPACE) serving `tools` in its own process."""
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client
    from .mcp_bench import NoteHandler
    env = {**os.environ, "PYTHONPATH": str(repo or REPO)}
    argv = ["-m", "toolsrv", "mcp", "-a", addr] if addr else ["-m", "toolsrv", "mcp"]
    if addr is None:
        ns = tempfile.mkdtemp(prefix="bench-ns.", dir="/tmp")
        stack.callback(os.rmdir, ns)
        env.update(NAMESPACE=ns, OLLIE_TOOLS_PATH=tools)
        env.pop("TOOLSRV_ADDR", None)
    params = StdioServerParameters(command=PY, args=argv, env=env, cwd=tempfile.gettempdir())
    notes = NoteHandler()
    errlog = stack.enter_context(open(os.devnull, "w"))
    r, w = await stack.enter_async_context(stdio_client(params, errlog=errlog))
    s = await stack.enter_async_context(ClientSession(r, w, message_handler=notes))
    await s.initialize()
    s.notes = notes                          # type: ignore[attr-defined]
    return s


async def windows(variants: dict[str, Callable[[], Awaitable[object]]], rounds: int,
                  per: int) -> dict[str, list[float]]:
    """Sequential calls of each variant, `per` at a time, alternating for `rounds`."""
    out: dict[str, list[float]] = {k: [] for k in variants}
    pc = time.perf_counter
    for name, fn in variants.items():          # warm-up
        for _ in range(max(5, per // 5)):
            await fn()
    for _ in range(rounds):
        for name, fn in variants.items():
            for _ in range(per):
                t = pc()
                await fn()
                out[name].append(pc() - t)
    return out


async def list_changed(face: Any, srv: ToolsrvProcess, tools: str, n: int
                       ) -> tuple[list[float], list[float]]:
    """n .meta rewrites: (seconds to the face's notification, to the direct revwait)."""
    from toolsrv.mcp.ninep import NineP
    nine = await NineP.connect(srv.addr)
    meta = Path(tools, "flip.meta")
    note, direct = [], []
    try:
        for i in range(n):
            rev = (await nine.read("revision")).strip()
            await face.list_tools()                  # the client has looked: a fresh start
            face.notes.reset()
            waiting = asyncio.ensure_future(nine.rdwr("revwait", rev))
            await asyncio.sleep(0.05)                # both listening before the change
            t0 = time.perf_counter()
            meta.write_text(json.dumps({**ECHO_META, "description": f"flip {i}"}))
            await asyncio.wait_for(waiting, 10)
            direct.append(time.perf_counter() - t0)
            await asyncio.wait_for(face.notes.event.wait(), 10)
            note.append(face.notes.when - t0)
            await asyncio.sleep(0.05)
    finally:
        nine.close()
    return note, direct


TIME_ARGS = ["--local-timezone", "UTC"]


def import_time(tools: str, srv: ToolsrvProcess) -> str | None:
    """`toolsrv import-mcp` of mcp-server-time into `tools`, its profile in a HOME of the
    server's own; the server's path, or None where it is not installed."""
    import shutil
    import subprocess
    exe = shutil.which("mcp-server-time", path=os.path.dirname(PY))
    if exe is None:
        return None
    home = tempfile.mkdtemp(prefix="bench-home.", dir="/tmp")
    os.chmod(home, 0o755)
    env = {**os.environ, "HOME": home, "PYTHONPATH": str(REPO)}
    subprocess.run([PY, "-m", "toolsrv", "import-mcp", "--dir", tools, "--prefix", "time.",
                    "--", exe, *TIME_ARGS], env=env, check=True, stdout=subprocess.DEVNULL,
                   cwd=tempfile.gettempdir())
    srv.env["HOME"] = home
    return exe


def time_session(exe: str) -> Any:
    """An SDK client session straight to mcp-server-time (unsandboxed), initialized."""
    import contextlib
    from mcp import ClientSession, StdioServerParameters
    from mcp.client.stdio import stdio_client

    @contextlib.asynccontextmanager
    async def session() -> Any:
        params = StdioServerParameters(command=exe, args=TIME_ARGS)
        with open(os.devnull, "w") as errlog:
            async with stdio_client(params, errlog=errlog) as (r, w):
                async with ClientSession(r, w) as s:
                    await s.initialize()
                    yield s
    return session()


async def run(opts: Any) -> list[dict]:
    import contextlib
    q = opts.quick
    from .bench_resident import RES_ECHO, RES_META
    tools = make_tools_dir({"flip": (ECHO_SH, {**ECHO_META, "description": "flip"}),
                            "recho": (RES_ECHO, RES_META)})
    rows: list[dict] = []
    srv = ToolsrvProcess(tools)
    timesrv = import_time(tools, srv)
    srv.start()
    try:
        from .mcp_bench import echo_call, mcp_session, noop_call
    except ImportError:
        srv.stop()
        return [row(B, "sandboxed sh echo call through toolsrv mcp", "ms", None,
                    note="mcp is not installed (pip install '.[bench]'): not measured")]
    try:
        async with contextlib.AsyncExitStack() as stack:
            face = await face_session(srv.addr, stack)
            alone = await face_session(None, stack, tools)
            sdk = await stack.enter_async_context(mcp_session(f"{tools}/echo"))
            old = getattr(opts, "old_tree", None)
            before = await face_session(srv.addr, stack, repo=old) if old else None

            def through(s: Any) -> Callable[[], Awaitable[None]]:
                async def call() -> None:
                    r = await s.call_tool("echo", ARGS)
                    if r.is_error:
                        raise RuntimeError(f"toolsrv mcp echo failed: {r}")
                return call
            from toolsrv.mcp.ninep import NineP
            nine = await NineP.connect(srv.addr)
            await nine.mkdir("session/bench")
            await nine.mkdir("session/bench/agent/a")
            await nine.rdwr("session/bench/agent/a/ctl", b"tool_load echo")

            async def rdwr() -> None:
                if await nine.rdwr("session/bench/agent/a/tools/echo/call", PAYLOAD) != PAYLOAD:
                    raise RuntimeError("rdwr of echo failed")
            async def resident() -> None:
                r = await face.call_tool("recho", ARGS)
                if r.is_error:
                    raise RuntimeError(f"toolsrv mcp recho failed: {r}")
            variants = {"face": through(face), "alone": through(alone),
                        "sdk": lambda: echo_call(sdk), "rdwr": rdwr,
                        "noop": lambda: noop_call(sdk), "res": resident}
            if before is not None:
                variants["old"] = through(before)
            if timesrv is not None:
                direct = await stack.enter_async_context(time_session(timesrv))

                async def now(s: Any, name: str) -> None:
                    r = await s.call_tool(name, {"timezone": "UTC"})
                    if r.is_error:
                        raise RuntimeError(f"{name} failed: {r}")
                variants["time_face"] = lambda: now(face, "time.get_current_time")
                variants["time_sdk"] = lambda: now(direct, "get_current_time")
            got = await windows(variants, rounds=5, per=20 if q else 100)
            nine.close()
            L = {k: lat(v) for k, v in got.items()}
            parts = {k: L["rdwr"][k] + L["noop"][k] for k in ("median", "p99")}
            rows.append(row(B, "sandboxed sh echo call through toolsrv mcp (stdio)", "ms",
                            L["face"], "MCP SDK server, same tool unsandboxed", L["sdk"],
                            "<= 1.1x", L["face"]["median"] <= 1.1 * L["sdk"]["median"],
                            "the face is a 9P client of a toolsrv serve in its own process: "
                            "MCP over stdio, then one pipelined rdwr of the tool's call file "
                            "(one more process hop than the SDK's server)"))
            rows.append(row(B, "the same, toolsrv mcp standalone (server in process)", "ms",
                            L["alone"], "MCP SDK server, same tool unsandboxed", L["sdk"],
                            "<= 1.1x", L["alone"]["median"] <= 1.1 * L["sdk"]["median"],
                            "nothing answered at its address: the face serves the registry "
                            "in its own process and is a 9P client of it over a private "
                            "socket"))
            rows.append(row(B, "sandboxed sh echo call through toolsrv mcp (stdio)", "ms",
                            L["face"], "its parts: 9P rdwr of the echo + MCP SDK no-op", parts,
                            "informative", None,
                            f"the parts measured alone in this run: the sandboxed rdwr "
                            f"{L['rdwr']['median']:.2f} ms and the SDK's no-op call "
                            f"{L['noop']['median']:.2f} ms (medians); near 1x, the face adds "
                            "little of its own"))
            if before is not None:
                rows.append(row(B, "sandboxed sh echo call through toolsrv mcp (stdio)",
                                "ms", L["face"], f"the same through {old}'s toolsrv mcp",
                                L["old"], "within noise (<= 1.1x)",
                                L["face"]["median"] <= 1.1 * L["old"]["median"],
                                "this tree's face against an earlier tree's, alternating "
                                "in the same windows against the same server"))
            if timesrv is not None:
                rows.append(row(B, "mcp-server-time call, imported, through toolsrv mcp",
                                "ms", L["time_face"], "the same server called directly by "
                                "the SDK's client", L["time_sdk"], "<= 1.1x",
                                L["time_face"]["median"] <= 1.1 * L["time_sdk"]["median"],
                                "get_current_time: toolsrv import-mcp's .meta files, the "
                                "server resident and sandboxed under its profile, reached "
                                "through the face's 9P; the baseline runs it unsandboxed"))
            else:
                rows.append(row(B, "mcp-server-time call, imported, through toolsrv mcp",
                                "ms", None, note="mcp-server-time is not installed "
                                "(the test extra has it): not measured"))
            note, direct = await list_changed(face, srv, tools, 5 if q else 20)
            ln, ld = lat(note), lat(direct)
            rows.append(row(B, "list_changed after a .meta change", "ms", ln,
                            "the same change seen on revwait (direct 9P)", ld,
                            "<= 100 ms", ln["median"] <= 100.0,
                            "from the write of the .meta to the notification at the SDK's "
                            "client; the baseline is the registry's own watch latency"))
            rows.append(row(B, "resident echo through toolsrv mcp (stdio)", "ms", L["res"],
                            "MCP SDK server's in-process no-op", L["noop"], "informative",
                            None, "a resident python3 echo (lines protocol), up already: "
                            "MCP over stdio, 9P, one line each way, sandboxed"))
    finally:
        srv.stop()
    return rows


def main() -> None:
    ap = parser(__doc__ or "")
    ap.add_argument("--old-tree", metavar="DIR", help="also call through the toolsrv mcp "
                    "of this checkout (an earlier commit), alternating with this tree's")
    opts = ap.parse_args()
    rows = asyncio.run(run(opts))
    finish(rows, opts)


if __name__ == "__main__":
    main()
