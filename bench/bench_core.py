"""toolsrv's CPU per request with no socket in between: the server core in this process.

The whole server (registry, sessions, call files, scheduler, the 9P core and transport
adapter) runs on this process's event loop with the null runner (bench/nullserver.py); frames
are fed to its NinePProtocol through a fake transport that keeps the replies.  No system call,
no other process, no scheduler wake-up: what remains is the Python work per request, the part
optimisation can change, measured with little noise.  Baseline: the same frames through a
raw asyncio echo Protocol (the floor: one data_received, one write).

  rdwr       one agent call: Twalk, Topen, Twrite, Tread (result), Tclunk, each fed alone
  tread      Tread of `revision` on an open fid, fed alone
  tread x16  16 Treads fed in one chunk (what 16 in flight look like to the server)

    python bench/bench_core.py [--quick] [--json FILE] [--profile]
"""
from __future__ import annotations

import asyncio
import atexit
import cProfile
import inspect
import pstats
import shutil
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

if __package__ in (None, ""):
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    __package__ = "bench"

from toolsrv.proto import (  # noqa: E402
    IOHDRSZ, NOFID, NOTAG, OREAD, ORDWR, Tattach, Tclunk, Topen, Tread, Tversion, Twalk,
    Twrite, encode,
)

from . import nullserver  # noqa: E402,F401  (patches App to use the null runner)
from .common import (  # noqa: E402
    PAYLOAD, FakeTransport, finish, lat, make_tools_dir, parser, row,
)
from .wire import MSIZE  # noqa: E402

B = "core"
CALL = ("session", "s", "agent", "a", "tools", "echo", "call")


class Echo(asyncio.Protocol):
    def connection_made(self, transport: Any) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.transport.write(data)


async def start_app(tools: str) -> Any:
    from toolsrv.app import App, Options
    tmp = tempfile.mkdtemp(prefix="bench-core.", dir="/tmp")
    atexit.register(shutil.rmtree, tmp, True)
    app = App(Options(addrs=[f"unix!{tmp}/ns/toolsrv"], tools=[tools], state_dir=f"{tmp}/st"))
    await app.start()
    for made in (lambda: app.store.create("s"),     # with a state writer: awaitables
                 lambda: app.store.create_agent(app.store.sessions["s"], "a"),
                 lambda: app.calls.apply(app.store.sessions["s"].agents["a"], "tool_load echo")):
        got = made()
        if inspect.isawaitable(got):
            await got
    return app


def connect(app: Any) -> tuple[Any, FakeTransport]:
    from toolsrv.serve.server import ServerConfig
    from toolsrv.serve.transport import NinePProtocol
    p = NinePProtocol(app.fs, ServerConfig(), set())
    t = FakeTransport()
    p.connection_made(t)
    p.data_received(encode(Tversion(NOTAG, MSIZE, "9P2000")))
    p.data_received(encode(Tattach(1, 0, NOFID, "bench", "")))
    return p, t


async def rdwr_calls(p: Any, t: FakeTransport, n: int) -> list[float]:
    frames = [encode(m) for m in (Twalk(1, 0, 7, CALL), Topen(2, 7, ORDWR),
                                  Twrite(3, 7, 0, PAYLOAD), Tread(4, 7, 0, MSIZE - IOHDRSZ))]
    clunk = encode(Tclunk(5, 7))
    out, pc, feed = [], time.perf_counter, p.data_received
    for _ in range(n):
        t.writes.clear()
        t0 = pc()
        for f in frames:
            feed(f)
        while len(t.writes) < 4:        # the read waits for the (null) run: let the loop go
            await asyncio.sleep(0)
        feed(clunk)
        out.append(pc() - t0)
    assert t.writes[3][7 + 4:] == PAYLOAD and len(t.writes) == 5, t.writes
    return out


def treads(feed: Any, frame: bytes, n: int, per: int) -> list[float]:
    out, pc = [], time.perf_counter
    for _ in range(n):
        t0 = pc()
        feed(frame)
        out.append((pc() - t0) / per)
    return out


async def run(opts: Any) -> list[dict]:
    n = 2000 if opts.quick else 10000
    app = await start_app(make_tools_dir())
    p, t = connect(app)
    p.data_received(encode(Twalk(1, 0, 1, ("revision",))) + encode(Topen(1, 1, OREAD)))
    echo, et = Echo(), FakeTransport()
    echo.connection_made(et)
    one = encode(Tread(9, 1, 0, 8192))
    sixteen = b"".join(encode(Tread(tag, 1, 0, 8192)) for tag in range(16))
    await rdwr_calls(p, t, 200)
    prof = cProfile.Profile() if opts.profile else None
    if prof:
        prof.enable()
    s = {"rdwr": await rdwr_calls(p, t, n // 5),
         "tread": treads(p.data_received, one, n, 1),
         "tread16": treads(p.data_received, sixteen, n // 4, 16)}
    if prof:
        prof.disable()
        pstats.Stats(prof).sort_stats("tottime").print_stats(25)
    e = {"rdwr": [], "tread": treads(echo.data_received, one, n, 1),
         "tread16": treads(echo.data_received, sixteen, n // 4, 16)}
    frames = [encode(m) for m in (Twalk(1, 0, 7, CALL), Topen(2, 7, ORDWR),
                                  Twrite(3, 7, 0, PAYLOAD), Tread(4, 7, 0, 8192), Tclunk(5, 7))]
    for _ in range(n // 5):
        t0 = time.perf_counter()
        for f in frames:
            echo.data_received(f)
        e["rdwr"].append(time.perf_counter() - t0)
    await app.stop()
    L = {k: lat(v) for k, v in s.items()}
    E = {k: lat(v) for k, v in e.items()}
    return [
        row(B, "server CPU per rdwr call, in process", "ms", L["rdwr"],
            "echo Protocol, same 5 frames", E["rdwr"], "informative"),
        row(B, "server CPU per Tread, in process", "ms", L["tread"],
            "echo Protocol, same frame", E["tread"], "informative"),
        row(B, "server CPU per Tread, 16 per chunk", "ms", L["tread16"],
            "echo Protocol, same chunk", E["tread16"], "informative"),
    ]


def main(argv: list[str] | None = None) -> list[dict]:
    ap = parser(__doc__)
    ap.add_argument("--profile", action="store_true", help="print cProfile's top entries")
    opts = ap.parse_args(argv)
    rows = asyncio.run(run(opts))
    finish(rows, opts)
    return rows


if __name__ == "__main__":
    main()
