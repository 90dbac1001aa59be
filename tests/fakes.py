"""Test doubles: an in-memory registry and a server running in a thread."""
from __future__ import annotations

import asyncio
import os
import tempfile
import threading
from dataclasses import dataclass, field
from typing import Any

from bench.common import FakeTransport as RecordingTransport  # noqa: F401 (keeps every write)
from toolsrv.tree.root import ToolsrvFS
from toolsrv.serve.server import ServerConfig
from toolsrv.tree.state.sessions import SessionStore
from toolsrv.serve.transport import NinePProtocol, listen
from toolsrv.serve import dial


@dataclass
class FakeCommand:
    argv: tuple = ("/bin/cat",)


@dataclass
class FakeTool:
    name: str
    description: str = "a fake tool"
    prompt: str = "## fake\n"
    tier: str = "hot"
    read_only: bool = False
    schema: dict = field(default_factory=lambda: {"type": "object"})
    command: FakeCommand = field(default_factory=FakeCommand)
    dir: str = "/nonexistent"

    def meta_json(self) -> dict:
        return {"name": self.name, "description": self.description}


class FakeRegistry:
    """Tools in a dict; bump() moves the revision and wakes revwait."""

    def __init__(self, names: tuple[str, ...] = ("echo", "file_read")) -> None:
        self.revision = 0
        self.tools = {n: FakeTool(n) for n in names}
        self._cond: asyncio.Condition | None = None
        self._waiters: list[asyncio.Future] = []

    def get(self, name: str) -> Any:
        return self.tools.get(name)

    def index_text(self) -> str:
        return "".join(f"{t.name}\t{t.tier}\t{t.description}\n"
                       for t in sorted(self.tools.values(), key=lambda t: t.name))

    def why_missing(self, name: str) -> str:
        """As Registry.why_missing: nothing more to say of an unknown name here."""
        return ""

    def errors_text(self) -> str:
        return "broken.meta\tline 1 column 2: Expecting value\n"

    def bump(self) -> None:
        self.revision += 1
        for w in self._waiters:
            if not w.done():
                w.set_result(None)
        self._waiters.clear()

    async def wait_change(self, seen: int, timeout: float) -> int:
        if self.revision != seen:
            return self.revision
        fut = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await asyncio.wait_for(fut, timeout)
        except asyncio.TimeoutError:
            pass
        return self.revision

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass


class FakeRunner:
    """Echoes the args back, as a tool that cats its stdin would; no processes."""

    def __init__(self) -> None:
        self.requests: list = []

    async def run(self, req: Any) -> Any:
        from toolsrv.run.runner import RunResult
        self.requests.append(req)
        if b"fail" in req.stdin:
            return RunResult(stdout=b"", stderr=b"it failed\n", exit_code=2, duration=0.001)
        return RunResult(stdout=req.stdin, exit_code=0, duration=0.001)


def make_fs(tmp: str, registry: Any = None, revwait_timeout: float = 5.0,
            runner: Any = None) -> ToolsrvFS:
    """A tree over a fake registry; with a runner, agents get ctl and call files."""
    store = SessionStore(os.path.join(tmp, "state"), os.path.join(tmp, "work"))
    fs = ToolsrvFS(registry or FakeRegistry(), store, revwait_timeout=revwait_timeout)
    if runner is not None:
        from toolsrv.tree.agent import AgentFiles
        from toolsrv.tree.calls.apply import Calls
        fs.agent_files = AgentFiles(Calls(fs.registry, store, runner, max_runs=4))
    return fs


class ThreadServer:
    """A listening server on its own event loop thread, for socket tests."""

    def __init__(self, fs: ToolsrvFS, addrs: list[str], config: ServerConfig | None = None) -> None:
        self.fs = fs
        self.config = config or ServerConfig()
        self.addrs = [dial.parse(a) for a in addrs]
        self.conns: set = set()
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.error: BaseException | None = None

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        try:
            self.loop.run_until_complete(self._start())
        except BaseException as e:
            self.error = e
            self.ready.set()
            return
        self.ready.set()
        self.loop.run_forever()

    async def _start(self) -> None:
        self.servers = []
        for a in self.addrs:
            srv = await listen(a, lambda: NinePProtocol(self.fs, self.config, self.conns))
            self.servers.append(srv)
            if a.kind == "tcp" and a.port == 0:
                port = srv.sockets[0].getsockname()[1]
                self.addrs[self.addrs.index(a)] = dial.Addr("tcp", host=a.host, port=port)

    def start(self) -> "ThreadServer":
        self.thread.start()
        self.ready.wait(10)
        if self.error:
            raise self.error
        return self

    def call(self, fn: Any) -> Any:
        """Run fn() on the server's loop and return its result."""
        fut = asyncio.run_coroutine_threadsafe(_as_coro(fn), self.loop)
        return fut.result(10)

    def stop(self) -> None:
        async def _stop() -> None:
            for s in self.servers:
                s.close()
            for p in list(self.conns):
                p.close()
        asyncio.run_coroutine_threadsafe(_stop(), self.loop).result(10)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


async def _as_coro(fn: Any) -> Any:
    return fn()


def short_tmpdir() -> str:
    """A short directory path (Unix socket paths are limited to 108 bytes)."""
    return tempfile.mkdtemp(prefix="ts.", dir="/tmp")
