"""The bundled resident `shell` tool (issue 17), called through a whole server under the
sandbox: state kept across calls, a process per agent, a hung command hitting its timeout,
the output cap.  Process checks look at the real process table; nothing asserts on timing.
"""
from __future__ import annotations

import json
import os
import re
import sys
from pathlib import Path

import pytest

from apphelpers import AppThread
from py9phelpers import agent, connect, mkdir, rdwr, read
from serverhelpers import wait_for

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tools"))
from sandbox_support import processes_with  # noqa: E402

# sleeps of a length no other test process uses (another suite may run beside this one)
LONG = 3_600_000 + os.getpid() % 100_000
TOOLS = Path(__file__).resolve().parents[2] / "data" / "tools"


@pytest.fixture(scope="module")
def srv():
    app = AppThread([str(TOOLS)], timeout=15).start()
    yield app
    app.cleanup()


def sh(c, a: str, command: str, **more) -> str:
    return rdwr(c, a + "/tools/shell/call",
                json.dumps({"command": command, **more}).encode()).decode()


def shells() -> list[int]:
    return processes_with(f"{TOOLS}/shell\0")


def test_state_survives_between_calls(srv):
    with connect(srv) as c:
        a = agent(c, "sh1", "a", "shell")
        assert sh(c, a, "mkdir -p sub/dir && cd sub && X=41; export Y=hello; "
                        "inc() { X=$((X+1)); echo \"x=$X\"; }") == "[exit 0]"
        assert sh(c, a, "inc; echo \"$Y\"; basename \"$PWD\"") == "x=42\nhello\nsub\n[exit 0]"
        assert sh(c, a, "cd dir; inc") == "x=43\n[exit 0]"
        assert sh(c, a, "basename \"$PWD\"; echo oops >&2; exit_code() { return 3; }; "
                        "exit_code") == "dir\noops\n[exit 3]"
        assert sh(c, a, "echo \"unterminated").endswith("[exit 2]")   # eval's syntax error
        assert sh(c, a, "inc") == "x=44\n[exit 0]"                     # the shell went on
        status = read(c, a + "/tools/shell/status").decode().splitlines()
        assert status[1].startswith("resident up ") and status[1].endswith("6 calls")
        # the server's status counts the idle shell apart from the runs going on
        line = read(c, "status").decode().splitlines()[0]
        assert re.fullmatch(r"runs: 0 running, \d+ resident process(es)? up between calls",
                            line), line


def test_each_agent_has_its_own_shell(srv):
    with connect(srv) as c:
        a = agent(c, "sh2", "a", "shell")
        mkdir(c, "session/sh2/agent/b")
        b = "session/sh2/agent/b"
        rdwr(c, b + "/ctl", b"tool_load shell")
        sh(c, a, "V=mine")
        assert sh(c, b, "echo \"[$V]\"") == "[]\n[exit 0]"
        assert sh(c, a, "echo \"[$V]\"") == "[mine]\n[exit 0]"


def test_a_hung_command_hits_its_timeout_and_the_shell_lives_on(srv):
    with connect(srv) as c:
        a = agent(c, "sh3", "a", "shell")
        sh(c, a, "K=kept")
        out = sh(c, a, f"echo before; sleep {LONG}", timeout=0.5)
        assert out.startswith("before\n")
        assert "[shell: timed out after 0.5s: the command was killed]" in out
        assert out.endswith("[exit 143]")
        assert wait_for(lambda: not processes_with(f"sleep\x00{LONG}\x00"), 60)   # killed
        assert sh(c, a, "echo $K") == "kept\n[exit 0]"
        # the timeout stops the whole command line, not only what ran then: nothing after
        # the killed sleep runs, nor the rest of a loop of builtins; the shell lives on
        out = sh(c, a, f"sleep {LONG}; echo after > marker; echo ran", timeout=0.5)
        assert "ran" not in out and out.endswith("[exit 143]")
        out = sh(c, a, "n=0; while :; do n=$((n+1)); done; echo past-loop", timeout=0.3)
        assert "past-loop" not in out and out.endswith("[exit 143]")
        assert sh(c, a, "test -e marker || echo none; echo $K") == "none\nkept\n[exit 0]"
        assert sh(c, a, "f() { return 3; }; f") == "[exit 3]"
        # killed inside a function or a sourced file, whose rest a return would run on: the
        # shell goes with it (a new one, said), and still nothing after the kill runs
        with open(os.path.join(read(c, "session/sh3/cwd").decode().strip(), "s.sh"), "w") as f:
            f.write(f"sleep {LONG}; echo sourced > marker\n")
        for command in (f"g() {{ sleep {LONG}; echo in-g > marker; }}; g; echo after > marker",
                        ". ./s.sh; echo after > marker"):
            out = sh(c, a, command, timeout=0.5)
            assert "killed inside a function or a sourced file, and the shell with it; a new " \
                "one was started" in out, out
            assert sh(c, a, "test -e marker || echo none; echo \"[$K]\"") == "none\n[]\n[exit 0]"
        sh(c, a, "K=kept")
        # a command that ignores SIGTERM ends the shell: a new one, and the answer says so
        out = sh(c, a, "trap '' TERM; while :; do :; done", timeout=0.3)
        assert "the shell was killed and a new one started" in out
        assert sh(c, a, "echo \"[$K]\"") == "[]\n[exit 0]"


def test_output_is_capped_and_the_cut_is_said(srv):
    with connect(srv) as c:
        a = agent(c, "sh4", "a", "shell")
        out = sh(c, a, "head -c 5000000 /dev/zero | tr '\\0' y", max_output=1000)
        assert out.startswith("y" * 1000 + "\n[shell: output cut at 1000 bytes; 4999000 more "
                              "bytes dropped]")
        assert out.endswith("[exit 0]")
        assert len(sh(c, a, "seq 1 10000")) == len("\n".join(map(str, range(1, 10001)))) \
            + len("\n[exit 0]")


def test_the_shell_is_sandboxed(srv):
    with connect(srv) as c:
        a = agent(c, "sh5", "a", "shell")
        out = sh(c, a, "cat /root/.bashrc /etc/shadow 2>&1; touch /usr/x 2>&1")
        assert "Permission denied" in out and not out.endswith("[exit 0]")
        assert sh(c, a, "id -u").split("\n")[0] == ("65534" if os.geteuid() == 0
                                                    else str(os.geteuid()))


def test_unload_ends_the_shell_and_its_jobs(srv):
    with connect(srv) as c:
        a = agent(c, "sh6", "a", "shell")
        before = set(shells())
        sh(c, a, f"sleep {LONG + 1} >/dev/null 2>&1 &")
        # the job is a fork that execs sleep when the machine gets to it: until then its
        # command line is its shell's (and no sleep is listed), so wait for the exec
        assert wait_for(lambda: processes_with(f"sleep\x00{LONG + 1}\x00"), 60)
        mine = set(shells()) - before
        assert len(mine) == 1
        rdwr(c, a + "/ctl", b"tool_unload shell")
        assert wait_for(lambda: not processes_with(f"sleep\x00{LONG + 1}\x00")
                        and not mine & set(shells()), 60)


def _ppid(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return 0


def _live_bash_of(shell_pid: int) -> list[int]:
    """The bash processes (not zombies) the shell tool `shell_pid` runs."""
    out = []
    for pid in processes_with("bash\0--noprofile\0--norc\0"):
        try:
            with open(f"/proc/{pid}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state != "Z" and _ppid(pid) == shell_pid:
            out.append(pid)
    return out


def test_a_command_after_the_idle_bash_died_runs_in_a_new_one_and_says_so(srv):
    """Issue 34: the shell's bash killed while idle (as by the OOM killer); the next call's
    command is run, in a new bash, and the answer says the old one's state is lost."""
    import signal
    with connect(srv) as c:
        a = agent(c, "sh7", "a", "shell")
        before = set(shells())
        assert sh(c, a, "export X=1; echo one") == "one\n[exit 0]"
        mine = set(shells()) - before
        assert len(mine) == 1
        (tool,) = mine
        bash = _live_bash_of(tool)
        assert len(bash) == 1
        os.kill(bash[0], signal.SIGKILL)
        assert wait_for(lambda: _live_bash_of(tool) != bash, 60)    # the kill has landed
        out = sh(c, a, "echo two > two.txt; echo \"two [$X]\"")
        assert out == ("two []\n[shell: the shell had ended while idle (status -9): a new one "
                       "was started and ran this command (cd, variables and functions are "
                       "lost)]\n[exit 0]")
        cwd = read(c, "session/sh7/cwd").decode().strip()
        assert open(os.path.join(cwd, "two.txt")).read() == "two\n"   # it really ran
        assert sh(c, a, "echo three") == "three\n[exit 0]"            # the new one lives on
        assert set(shells()) & mine == mine                           # the same tool process
