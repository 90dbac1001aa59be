"""`tool NAME 'JSON'` (issue 45.3, data/bin/tool): a shell program run under a
profile with `general.toolsrv: true` (client9p, whose PATH has {BIN}) calls its agent's
tools through the run's scoped connection, each a nested call of the run.  Real processes,
real Landlock: a user's sh tool, not a bundled one, so the command is found through {BIN}
whatever directory the tool lives in.

- file_write then file_read through `tool`, the results printed;
- an error (a nested file_read of /etc/shadow, refused by file_read's own profile; a tool
  not loaded) exits non-zero with toolsrv's reason on stderr;
- a mistake in how `tool` is run exits 2 saying how it is used."""
from __future__ import annotations

import os
import shutil

import pytest

from apphelpers import AppThread, add_tool, agent, tools_dir
from toolsrv.cli.client import Client

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUNDLED = os.path.join(REPO, "data", "tools")

CALLS = """#!/bin/sh
cat >/dev/null
tool file_write '{"path": "t.txt", "content": "from a shell\\n"}' || exit 9
tool file_read '{"path": "t.txt"}' || exit 9
"""
ERRORS = """#!/bin/sh
cat >/dev/null
tool file_read '{"path": "/etc/shadow"}' 2>&1; echo "shadow exit $?"
tool file_edit '{}' 2>&1; echo "unloaded exit $?"
tool file_read '[1]' 2>&1; echo "array exit $?"
tool 2>&1; echo "bare exit $?"
"""


@pytest.fixture(scope="module")
def app():
    d = tools_dir()
    add_tool(d, "calls", CALLS, {"sandbox": "client9p"})
    add_tool(d, "errors", ERRORS, {"sandbox": "client9p"})
    a = AppThread([BUNDLED, d], timeout=15).start()
    yield a
    a.cleanup()
    shutil.rmtree(d, ignore_errors=True)


def test_a_shell_program_calls_its_agents_tools(app):
    with Client.connect(app.addr) as c:
        a = agent(c, "t1", "calls file_write file_read")
        out = c.rdwr(f"{a}/tools/calls/call", b"{}").decode()
        assert "Created t.txt" in out, out
        assert "from a shell" in out, out
        log = c.read(f"{a}/log").decode()
        assert "call file_write (child of calls) -> ok" in log, log
        assert "call file_read (child of calls) -> ok" in log, log


def test_an_error_is_non_zero_with_the_reason(app):
    with Client.connect(app.addr) as c:
        a = agent(c, "t2", "errors file_read")
        out = c.rdwr(f"{a}/tools/errors/call", b"{}").decode()
        lines = out.splitlines()
        shadow = lines[lines.index("shadow exit 1") - 1]
        assert shadow.startswith("tool: file_read: ") and "exit" in shadow, out
        assert "shadow" in shadow, out
        assert "unloaded exit 1" in lines, out
        assert "file_edit is not loaded for this agent" in out, out
        assert "tool: file_read: the args must be a JSON object, not list" in out, out
        assert "array exit 2" in lines and "bare exit 2" in lines, out
        assert "usage: tool NAME ['JSON']" in out, out
