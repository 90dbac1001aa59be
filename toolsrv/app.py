"""The server process: wires the registry, session store, runner and tree to
listeners, and runs until SIGTERM/SIGINT.

Start-up order: registry (initial scan, then watching), runner (the launcher
starts before the server grows), session state restored, listeners opened.
Shutdown is graceful: stop accepting, hang up connections (their calls are
cancelled), kill every run, save state, remove the Unix socket, exit 0.
"""
from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import struct
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from . import dial
from .fs import ToolsrvFS
from .server import DEFAULT_MSIZE, ServerConfig
from .sessions import SessionStore
from .transport import NinePProtocol, listen

log = logging.getLogger("toolsrv")

REPO = Path(__file__).resolve().parents[1]
BUNDLED_TOOLS = REPO / "data" / "tools"


@dataclass
class Options:
    addrs: list[str] = field(default_factory=list)   # dial strings; empty: the default
    tools: list[str] | None = None                   # search path; None: env or defaults
    state_dir: str | None = None
    msize: int = DEFAULT_MSIZE
    trace: bool = False
    listen_any: bool = False
    allow_uids: list[int] = field(default_factory=list)
    revwait_timeout: float = 60.0
    timeout: float = 30.0
    max_runs: int = 16
    run_as: str | None = "nobody"
    persist: bool = True


def default_state_dir() -> str:
    base = os.environ.get("XDG_STATE_HOME") or os.path.expanduser("~/.local/state")
    return os.path.join(base, "toolsrv")


def default_tools_path() -> list[str]:
    """$OLLIE_TOOLS_PATH, else the user's tools followed by the bundled ones."""
    env = os.environ.get("OLLIE_TOOLS_PATH")
    if env:
        return [p for p in env.split(":") if p]
    return [os.path.expanduser("~/.config/ollie/tools"), str(BUNDLED_TOOLS)]


def peer_uid(transport: Any) -> int | None:
    sock = transport.get_extra_info("socket")
    if sock is None or sock.family != socket.AF_UNIX:
        return None
    creds = sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    return struct.unpack("3i", creds)[1]


class App:
    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.stopping = asyncio.Event()
        self.servers: list[asyncio.AbstractServer] = []
        self.unix_paths: list[str] = []
        self.conns: set[NinePProtocol] = set()
        self.addrs = [dial.parse(a) for a in opts.addrs] or [dial.default_addr()]
        self.runner: Any = None
        self.calls: Any = None

    def _make_registry(self) -> Any:
        from .registry import Registry
        return Registry(self.opts.tools if self.opts.tools is not None else default_tools_path())

    def _peer_check(self, transport: Any) -> str | None:
        uid = peer_uid(transport)
        if uid is None or uid == os.getuid() or uid in self.opts.allow_uids:
            return None
        return f"peer uid {uid} is not the server's uid (see --allow-uid)"

    async def start(self) -> None:
        opts = self.opts
        self.registry = self._make_registry()
        await self.registry.start()
        self.runner, tool_uid = await self._start_runner()
        state = (opts.state_dir or default_state_dir()) if opts.persist else None
        work = self._work_dir(state, tool_uid)
        self.store = SessionStore(state, work, tool_uid, self._check_profile)
        for problem in self.store.restore():
            print(f"toolsrv: {problem}", file=sys.stderr)
        self.fs = ToolsrvFS(self.registry, self.store, revwait_timeout=opts.revwait_timeout)
        self._start_calls()
        config = ServerConfig(msize=opts.msize, trace=self._trace if opts.trace else None)

        def factory() -> NinePProtocol:
            return NinePProtocol(self.fs, config, self.conns, self._peer_check)

        for a in self.addrs:
            self.servers.append(await listen(a, factory, allow_nonloopback=opts.listen_any))
            if a.kind == "unix":
                self.unix_paths.append(a.path)

    def _work_dir(self, state: str | None, tool_uid: tuple[int, int] | None) -> str:
        if state and tool_uid is None:
            return os.path.join(state, "work")
        base = f"/var/tmp/toolsrv.{os.getuid()}"
        os.makedirs(base, 0o711, exist_ok=True)
        os.chmod(base, 0o711)
        return os.path.join(base, "work")

    async def _start_runner(self) -> tuple[Any, tuple[int, int] | None]:
        try:
            from .runner import Runner, RunnerConfig
        except ImportError:
            return None, None
        runner = Runner(RunnerConfig(timeout=self.opts.timeout, run_as=self.opts.run_as))
        await runner.start()
        return runner, runner.tool_uid()

    def _check_profile(self, name: str) -> None:
        try:
            from .sandbox import load_profile
        except ImportError:
            return
        load_profile(name)

    def _start_calls(self) -> None:
        try:
            from .toolfile import Calls
        except ImportError:
            return
        self.calls = Calls(self)
        self.fs.agent_entries = self.calls.agent_entries

    def _trace(self, line: str) -> None:
        print(line, file=sys.stderr, flush=True)

    async def run(self) -> None:
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, self.stopping.set)
        await self.stopping.wait()
        await self.stop()

    async def stop(self) -> None:
        for s in self.servers:
            s.close()
        for p in list(self.conns):
            p.close()
            if p.conn is not None:
                p.conn.hangup()
        if self.calls is not None:
            await self.calls.close()
        if self.runner is not None:
            await self.runner.close()
        await self.registry.close()
        self.store.save()
        for path in self.unix_paths:
            try:
                os.unlink(path)
            except FileNotFoundError:
                pass
        for s in self.servers:
            try:
                await asyncio.wait_for(s.wait_closed(), 2)
            except (asyncio.TimeoutError, Exception):
                pass
