"""A whole toolsrv (registry, runner, sessions, calls) on a thread, for end-to-end tests.

It runs real tools in the real sandbox, so it needs Landlock: where the kernel has none,
a test that starts one is skipped, saying why, as tests/run/ does.  It starts in the test
process's working directory, outside the checkout (tests/outside.py, conftest.py)."""
from __future__ import annotations

import asyncio
import os
import shutil
import tempfile
import textwrap
import threading
from typing import Any

from toolsrv.app import App, Options


def tools_dir() -> str:
    """A directory tools can be read from by the uid tools run as (0755 parents)."""
    d = tempfile.mkdtemp(prefix="tools.", dir="/tmp")
    os.chmod(d, 0o755)
    return d


def add_tool(d: str, name: str, script: str | None = None, meta: dict | None = None) -> None:
    """Write <name>.meta and, when given, an executable <name>."""
    import json
    m = {"description": f"test tool {name}", "args": {"type": "object"}}
    m.update(meta or {})
    with open(os.path.join(d, name + ".meta"), "w") as f:
        json.dump(m, f)
    if script is not None:
        p = os.path.join(d, name)
        with open(p, "w") as f:
            f.write(textwrap.dedent(script).lstrip())
        os.chmod(p, 0o755)


def agent(c: Any, s: str, tools: str, a: str = "a") -> str:
    """Session s with agent a made through the Client c, `tools` loaded: the agent's path."""
    c.mkdir(f"session/{s}")
    c.mkdir(f"session/{s}/agent/{a}")
    c.rdwr(f"session/{s}/agent/{a}/ctl", f"tool_load {tools}".encode())
    return f"session/{s}/agent/{a}"


def ranked(answer: bytes) -> list[bytes]:
    """A tools/search answer's ranked lines: past the `#` line a search without the
    search extra starts with (doc/search.md, Without the extra)."""
    return [x for x in answer.splitlines() if not x.startswith(b"#")]


def no_landlock() -> str | None:
    """Why tools cannot run sandboxed here, or None (the same test as tests/run/'s)."""
    from toolsrv.run.sandbox import landlock_status
    st = landlock_status()
    return None if st.abi >= 1 else f"kernel has no usable Landlock ({st.reason})"


class AppThread:
    def __init__(self, tools: list[str], **opts: Any) -> None:
        self.tmp = tempfile.mkdtemp(prefix="ts.", dir="/tmp")
        self.addr = f"unix!{self.tmp}/ns/toolsrv"
        opts.setdefault("state_dir", os.path.join(self.tmp, "state"))
        self.opts = Options(addrs=[self.addr], tools=tools, **opts)
        self.loop = asyncio.new_event_loop()
        self.ready = threading.Event()
        self.error: BaseException | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        asyncio.set_event_loop(self.loop)
        self.app = App(self.opts)
        try:
            self.loop.run_until_complete(self.app.start())
        except BaseException as e:
            self.error = e
            self.ready.set()
            return
        self.ready.set()
        self.loop.run_until_complete(self.app.stopping.wait())
        self.loop.run_until_complete(self.app.stop())

    def start(self) -> "AppThread":
        why = no_landlock()
        if why is not None:
            import pytest
            self.cleanup()
            pytest.skip(why)
        self.thread.start()
        self.ready.wait(30)
        if self.error:
            raise self.error
        return self

    def call(self, fn: Any) -> Any:
        async def wrap() -> Any:
            r = fn()
            return await r if asyncio.iscoroutine(r) else r
        return asyncio.run_coroutine_threadsafe(wrap(), self.loop).result(30)

    def stop(self) -> None:
        if self.thread.is_alive():
            self.loop.call_soon_threadsafe(self.app.stopping.set)
            self.thread.join(30)

    def cleanup(self) -> None:
        self.stop()
        shutil.rmtree(self.tmp, ignore_errors=True)
