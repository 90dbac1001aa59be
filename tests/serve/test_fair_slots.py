"""One agent cannot take every run slot (issue 25, section 3; shared/repro/round3/
slots_dos.sh), against a real `toolsrv serve`.

An agent starts many long read-only calls and never reads them (as a model does through
its own client_9p, op write).  Each `hold` call marks that it started and waits for its
own release file (the tool polls; the test waits on events).  With the default shares,
another session's call runs while the hog's calls are all still held; with no caps at
all (shares equal to --max-runs), the other session's waiting call starts as soon as one
of the hog's runs ends, ahead of the hog's queued ones."""
from __future__ import annotations

import json
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from serverhelpers import wait_for
from shellhelpers import serving
from toolsrv.cli.client import Client

# started-<id> when it runs; then waits (bounded) for release-<id>
HOLD = """#!/bin/sh
id=$(python3 -c 'import json,sys; print(json.load(sys.stdin)["id"])')
: > "started-$id"
i=0
while [ ! -e "release-$id" ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done
echo "held $id"
"""
# how many hold calls have started when it runs
COUNT = """#!/bin/sh
cat >/dev/null
ls | grep -c '^started-'
"""
TOOLS = {"hold": (HOLD, {"readOnly": True, "args": {"type": "object"}}),
         "count": (COUNT, {"readOnly": True, "args": {"type": "object"}})}
HOGS = 8


@pytest.fixture
def cwd() -> Iterator[Path]:
    d = Path(tempfile.mkdtemp(prefix="slots.", dir="/tmp"))
    d.chmod(0o777)
    yield d
    for i in range(HOGS):                 # let every hold end, whatever the test did
        (d / f"release-{i}").touch()
    shutil.rmtree(d, ignore_errors=True)


def connect(env: dict) -> Client:
    return Client.connect(f"unix!{env['NAMESPACE']}/toolsrv")


def session(c: Client, name: str, cwd: Path, agent: str = "a") -> str:
    c.mkdir(f"session/{name}")
    c.write(f"session/{name}/cwd", str(cwd).encode())
    c.mkdir(f"session/{name}/agent/{agent}")
    for t in TOOLS:
        c.rdwr(f"session/{name}/agent/{agent}/ctl", f"tool_load {t}".encode())
    return f"session/{name}/agent/{agent}"


def started(cwd: Path) -> int:
    return sum(1 for p in cwd.iterdir() if p.name.startswith("started-"))


def hog(c: Client, agent: str) -> None:
    for i in range(HOGS):                 # write, never read: the calls run on
        c.write(f"{agent}/tools/hold/call", json.dumps({"id": i}).encode())


def counted(env: dict, agent: str, out: list) -> threading.Thread:
    def go() -> None:
        with connect(env) as c:
            out.append(c.rdwr(f"{agent}/tools/count/call", b"{}"))
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def test_another_session_runs_while_one_agent_holds_its_share(cwd):
    with serving("--no-state", "--max-runs", "4", tools=TOOLS) as (env, _b, _p):
        with connect(env) as c:
            a = session(c, "hog", cwd)
            b = session(c, "other", cwd)
            hog(c, a)
            # the default shares: a session 2 of the 4 slots, an agent 1 of those
            assert wait_for(lambda: started(cwd) == 1, 60), started(cwd)
            out: list = []
            t = counted(env, b, out)
            t.join(60)
            assert out == [b"1\n"], out   # it ran while the hog's call was still held
            assert started(cwd) == 1 and not any(cwd.glob("release-*"))   # still held
            assert c.read(f"{a}/tools/hold/status").startswith(b"queued")  # its latest


def test_a_waiting_call_of_another_session_starts_at_the_next_run_end(cwd):
    with serving("--no-state", "--max-runs", "4", "--max-runs-per-session", "4",
                 "--max-runs-per-agent", "4", tools=TOOLS) as (env, _b, _p):
        with connect(env) as c:
            a = session(c, "hog", cwd)
            b = session(c, "other", cwd)
            hog(c, a)
            assert wait_for(lambda: started(cwd) == 4, 60), started(cwd)   # every slot
            out: list = []
            t = counted(env, b, out)
            assert wait_for(lambda: c.read(f"{b}/tools/count/status").startswith(b"queued"),
                            60)
            first = sorted(int(p.name.split("-")[1]) for p in cwd.iterdir()
                           if p.name.startswith("started-"))[0]
            (cwd / f"release-{first}").touch()          # one run ends
            t.join(60)
            assert out == [b"4\n"], out   # it ran before any of the hog's queued calls
            assert wait_for(lambda: started(cwd) == 5, 60)
