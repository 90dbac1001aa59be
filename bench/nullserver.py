"""`toolsrv serve` with a null runner: every call "runs" instantly and echoes its stdin.

Everything else is the real server (registry, sessions, validation, scheduling, call files,
the 9P core), so a call through it costs exactly toolsrv's own work: the 9P messages of one
rdwr plus the bookkeeping, with no spawn and no sandbox.  Used by bench_call.py and
bench_memory.py; run it like the real thing:

    python -m bench.nullserver serve -a unix!/tmp/x/toolsrv --tools DIR --state DIR
"""
from __future__ import annotations

import sys
from typing import Any

from toolsrv.cli import command as cli
from toolsrv import app as appmod
from toolsrv.run.runner import RunnerConfig, RunResult


class NullRunner:
    """The Runner interface, without processes."""

    def __init__(self) -> None:
        self.config = RunnerConfig()    # the app sets config.hidden; residents read it

    async def start(self) -> None:
        return None

    async def close(self) -> None:
        return None

    def check(self) -> None:
        return None

    def tool_uid(self) -> None:
        return None

    def summary(self) -> str:
        return "null runner (bench): no processes are started"

    async def run(self, req: Any) -> RunResult:
        return RunResult(stdout=req.stdin, exit_code=0)


def _make_runner(self: Any) -> tuple[NullRunner, None]:
    return NullRunner(), None


appmod.App._make_runner = _make_runner  # type: ignore[method-assign]

if __name__ == "__main__":
    sys.exit(cli.main())
