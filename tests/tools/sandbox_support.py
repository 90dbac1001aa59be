"""Shared harness for the runner, sandbox and elevation tests (imported, not collected).

A Harness owns one event loop and one Runner (one zygote) for a test module, and a scratch
tree under /tmp that the tools' uid can traverse (pytest's tmp_path is 0700 under root):
  base/        0755, root
    cwd/       the session cwd, owned by the tool uid
    tools/     {TOOLS}: probe.py (tests/tools/probe.py), executable
    outside/   readable and writable by everyone, but outside every profile
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

import yaml

from toolsrv.registry import warmstart
from toolsrv.run.runner import Runner, RunnerConfig, RunRequest, RunResult
from toolsrv.run.sandbox import Profile, default_shipped_dir, landlock_status, parse_profile

HERE = Path(__file__).resolve().parent
LANDLOCK = landlock_status()
NO_LANDLOCK = f"kernel has no usable Landlock ({LANDLOCK.reason})"
ROOT = os.geteuid() == 0


def default_dict() -> dict[str, Any]:
    return yaml.safe_load((default_shipped_dir() / "default.yaml").read_text())


def profile_with(name: str = "custom", **extra_fs: list[str]) -> Profile:
    """The shipped default profile plus extra filesystem paths, e.g. ro=["/x"]."""
    data = default_dict()
    for key, paths in extra_fs.items():
        if key in ("ro", "rox", "rw", "rwx"):
            data["filesystem"].setdefault(key, []).extend(paths)
    return parse_profile(data, name)


def profile_from(data: dict[str, Any], name: str = "custom") -> Profile:
    return parse_profile(data, name)


def marker() -> str:
    """A unique sleep argument: `sleep <marker>` is findable in /proc afterwards."""
    return f"{1000 + uuid.uuid4().int % 100000}.{uuid.uuid4().int % 10**6:06d}"


def sleepers(m: str) -> list[int]:
    """Pids of `sleep <m>` processes (argv is NUL-separated in /proc/*/cmdline)."""
    return processes_with(f"sleep\0{m}\0")


def children(pid: int) -> list[int]:
    """The children of pid's main thread ([] once it is gone)."""
    try:
        with open(f"/proc/{pid}/task/{pid}/children") as f:
            return [int(p) for p in f.read().split()]
    except OSError:
        return []


def processes_with(text: str) -> list[int]:
    """Pids whose command line contains text."""
    found = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/cmdline", "rb") as f:
                if text.encode() in f.read():
                    found.append(int(name))
        except OSError:
            continue
    return found


class Harness:
    """One loop, one Runner, one scratch tree; see the module docstring."""

    def __init__(self, config: RunnerConfig | None = None, warm: bool = False) -> None:
        self.warm = warm  # Python tools start warm (toolsrv/run/init/warm.py), and must
        self.loop = asyncio.new_event_loop()
        self.base = Path(tempfile.mkdtemp(prefix="toolsrv-test-", dir="/tmp"))
        self.base.chmod(0o755)
        self.runner = Runner(config)
        self.run_async(self.runner.start())
        if warm:  # a warm start takes an idle init: the first ones are being forked
            self.run_async(self._spares())
        self.uid = self.runner.tool_uid()
        self.cwd = self.mkdir("cwd", owned=True)
        self.tools = self.mkdir("tools")
        shutil.copy(HERE / "probe.py", self.tools / "probe.py")
        (self.tools / "probe.py").chmod(0o755)
        self.outside = self.mkdir("outside")
        self.outside.chmod(0o777)
        self.secret = self.outside / "secret.txt"
        self.secret.write_text("secret\n")
        self.secret.chmod(0o666)
        self.default = profile_with("default")

    def mkdir(self, name: str, owned: bool = False) -> Path:
        path = self.base / name
        path.mkdir(mode=0o755, exist_ok=True)
        if owned and self.uid:
            os.chown(path, *self.uid)
        return path

    def run_async(self, coro: Any) -> Any:
        return self.loop.run_until_complete(coro)

    def request(self, argv: list[str], stdin: bytes = b"", profile: Profile | None = None,
                **kw: Any) -> RunRequest:
        kw.setdefault("cwd", str(self.cwd))
        kw.setdefault("env", {})
        kw.setdefault("tool_dir", str(self.tools))
        if self.warm:
            kw.setdefault("warm", warmstart.plan)
        return RunRequest(argv=argv, stdin=stdin, profile=profile or self.default, **kw)

    def run(self, argv: list[str], stdin: bytes = b"", profile: Profile | None = None,
            **kw: Any) -> RunResult:
        return self.run_async(self.runner.run(self.request(argv, stdin, profile, **kw)))

    def sh(self, script: str, **kw: Any) -> RunResult:
        return self.run(["/bin/sh", "-c", script], **kw)

    def probe(self, *probes: dict[str, Any], profile: Profile | None = None,
              **kw: Any) -> list[dict[str, Any]]:
        res = self.run([str(self.tools / "probe.py")], json.dumps(list(probes)).encode(),
                       profile, **kw)
        assert res.exit_code == 0 and res.error is None, res
        assert res.warm == self.warm, res
        return json.loads(res.stdout)

    async def _spares(self) -> None:
        for _ in range(200):
            if self.runner.launcher._spares:
                return
            await asyncio.sleep(0.05)

    def settle(self) -> None:
        """Let background work (scratch removal, reaping after cancel) finish."""
        self.run_async(self._settle())

    async def _settle(self) -> None:
        for group in (self.runner._background, self.runner.scratch.pending):
            if group:
                await asyncio.wait(set(group), timeout=10)

    def close(self) -> None:
        self.run_async(self.runner.close())
        self.loop.close()
        shutil.rmtree(self.base, ignore_errors=True)
