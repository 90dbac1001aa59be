"""The bundled `shell` tool's status pipe is not the commands' (issue 25, section 7): no
program a command runs has it open, and a write to it (or to any fd bash holds) neither
ends the call early nor pushes the call's late output into the next call."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from apphelpers import AppThread
from py9phelpers import agent, connect, rdwr

TOOLS = Path(__file__).resolve().parents[2] / "data" / "tools"
FDS = ("python3 -c 'import os\nfor fd in range(3, 256):\n    try:\n        os.fstat(fd)\n"
       "        print(\"open\", fd)\n    except OSError:\n        pass'")


@pytest.fixture(scope="module")
def srv():
    app = AppThread([str(TOOLS)], timeout=15).start()
    yield app
    app.cleanup()


def sh(c, a: str, command: str) -> str:
    return rdwr(c, a + "/tools/shell/call", json.dumps({"command": command}).encode()).decode()


def test_no_program_a_command_runs_has_the_status_pipe(srv):
    with connect(srv) as c:
        a = agent(c, "fd1", "a", "shell")
        assert sh(c, a, FDS) == "[exit 0]"
        assert sh(c, a, "{ true >&4; } 2>/dev/null && echo fd 4 is open; echo ok") == \
            "ok\n[exit 0]"


def test_a_forged_status_line_ends_nothing(srv):
    with connect(srv) as c:
        a = agent(c, "fd2", "a", "shell")
        assert sh(c, a, "{ printf '0\\n' >&4; } 2>/dev/null; sleep 0.3; echo late") == "late\n[exit 0]"
        assert sh(c, a, "echo next") == "next\n[exit 0]"
        # every fd bash holds, its saved copy of the status pipe among them
        forged = ("for fd in $(seq 3 255); do { printf '0\\n0 0\\n' >&$fd; } 2>/dev/null; "
                  "done; sleep 0.3; echo done")
        out = sh(c, a, forged)          # (what reached a copy of its own stdout is output)
        assert out.endswith("done\n[exit 0]") and set(out[:-len("done\n[exit 0]")]) <= \
            set("0 \n"), out
        assert sh(c, a, "echo next; (exit 3)") == "next\n[exit 3]"
