"""Nested calls (issue 45, tree/calls/nested.py): a call written through the connection a
running call was given is its child.  Real processes, real Landlock: client_9p (the
client9p profile) calls its own agent's tools.

- a non-readOnly child of a non-readOnly parent answers at once (it waited for the turn its
  parent held until the time limit);
- cancelling the parent kills its child;
- a chain deeper than the bound, and a cycle, fail at once, naming the bound;
- a child is confined by its own tool's profile: a nested file_read of /etc/shadow is
  refused."""
from __future__ import annotations

import json
import os
import shutil
import threading

import pytest

from apphelpers import AppThread, add_tool, agent, tools_dir
from serverhelpers import wait_for
from toolsrv.cli.client import Client, ClientError
from toolsrv.tree.calls.nested import MAX_DEPTH

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUNDLED = os.path.join(REPO, "data", "tools")
CLIENT = os.path.join(BUNDLED, "client_9p")

# marks that it runs, then waits far past any test (only a kill ends it)
HANG = """#!/bin/sh
cat >/dev/null
: > hang-started
sleep 600
"""
# calls itself with the same args, {}: a cycle
LOOP = f"""#!/bin/sh
cat >/dev/null
printf '{{"op": "rdwr", "path": "session/%s/agent/%s/tools/loop/call", "data": "{{}}"}}' \\
  "$OLLIE_SESSION_ID" "$OLLIE_AGENT" | exec /usr/bin/python3 {CLIENT}
"""


@pytest.fixture(scope="module")
def app():
    d = tools_dir()
    add_tool(d, "hang", HANG)
    add_tool(d, "loop", LOOP, {"sandbox": "client9p"})
    a = AppThread([BUNDLED, d], timeout=8).start()
    yield a
    a.cleanup()
    shutil.rmtree(d, ignore_errors=True)


def via_client(a: str, op: str, path: str, data: str = "") -> bytes:
    return json.dumps({"op": op, "path": path, "data": data}).encode()


def log(c: Client, a: str) -> str:
    return c.read(f"{a}/log").decode()


def test_child_of_a_turn_holder_answers_at_once(app):
    with Client.connect(app.addr) as c:
        a = agent(c, "n1", "client_9p file_write file_read")
        write = json.dumps({"path": "x.txt", "content": "nested\n"})
        out = c.rdwr(f"{a}/tools/client_9p/call",
                     via_client(a, "rdwr", f"{a}/tools/file_write/call", write))
        assert b"Created x.txt" in out
        assert c.read(f"{a}/tools/file_write/status").startswith(b"ok ")
        text = log(c, a)
        assert "call file_write (child of client_9p) -> ok" in text
        assert "call client_9p -> ok" in text


def test_cancelling_the_parent_kills_the_child(app):
    with Client.connect(app.addr) as c:
        a = agent(c, "n2", "client_9p hang")
        cwd = c.read("session/n2/cwd").decode().strip()
        got: list = []

        def parent() -> None:
            with Client.connect(app.addr) as c2:
                try:
                    got.append(c2.rdwr(f"{a}/tools/client_9p/call",
                                       via_client(a, "rdwr", f"{a}/tools/hang/call", "{}")))
                except ClientError as e:
                    got.append(e)
        t = threading.Thread(target=parent, daemon=True)
        t.start()
        assert wait_for(lambda: os.path.exists(os.path.join(cwd, "hang-started")))
        assert c.read(f"{a}/tools/hang/status").startswith(b"running")
        c.rdwr(f"{a}/ctl", b"cancel client_9p")
        t.join(20)
        assert isinstance(got[0], ClientError) and "cancelled" in str(got[0])
        assert wait_for(lambda: c.read(f"{a}/tools/hang/status").startswith(b"killed"))
        assert "call hang (child of client_9p) -> killed" in log(c, a)


def test_depth_past_the_bound_fails_naming_it(app):
    with Client.connect(app.addr) as c:
        a = agent(c, "n3", "client_9p")
        inner = via_client(a, "read", "revision")
        for _ in range(MAX_DEPTH + 1):      # one more client_9p below the test's than allowed
            inner = via_client(a, "rdwr", f"{a}/tools/client_9p/call", inner.decode())
        with pytest.raises(ClientError):
            c.rdwr(f"{a}/tools/client_9p/call", inner)
        assert f"past the bound of {MAX_DEPTH} nested calls" in log(c, a)
        # at the bound itself it answers
        inner = via_client(a, "read", "revision")
        for _ in range(MAX_DEPTH):
            inner = via_client(a, "rdwr", f"{a}/tools/client_9p/call", inner.decode())
        assert c.rdwr(f"{a}/tools/client_9p/call", inner).strip().isdigit()


def test_a_cycle_fails_at_once(app):
    with Client.connect(app.addr) as c:
        a = agent(c, "n4", "loop")
        with pytest.raises(ClientError):
            c.rdwr(f"{a}/tools/loop/call", b"{}")
        text = log(c, a)
        assert "a cycle: loop with the same args" in text
        assert f"bound of {MAX_DEPTH} nested calls" in text
        assert "timeout" not in text


def test_a_child_is_confined_by_its_own_profile(app):
    with Client.connect(app.addr) as c:
        a = agent(c, "n5", "client_9p file_read")
        with pytest.raises(ClientError) as e:
            c.rdwr(f"{a}/tools/client_9p/call",
                   via_client(a, "rdwr", f"{a}/tools/file_read/call",
                              json.dumps({"path": "/etc/shadow"})))
        assert "file_read" in str(e.value) or "exit" in str(e.value)
        line = [ln for ln in log(c, a).splitlines() if "call file_read (child of client_9p) ->"
                in ln and "started" not in ln]
        assert line and "-> ok" not in line[-1]
        assert c.read(f"{a}/tools/file_read/out") == b""


def test_a_child_runs_when_its_parent_holds_the_last_slot():
    """One run slot: the parent holds it, and its child runs in it (nested.py, rule 3)."""
    one = AppThread([BUNDLED], timeout=8, max_runs=1).start()
    try:
        with Client.connect(one.addr) as c:
            a = agent(c, "n6", "client_9p file_write")
            write = json.dumps({"path": "y.txt", "content": "one slot\n"})
            out = c.rdwr(f"{a}/tools/client_9p/call",
                         via_client(a, "rdwr", f"{a}/tools/file_write/call", write))
            assert b"Created y.txt" in out
    finally:
        one.cleanup()


class _C:
    """A Call's fields that nested.py reads."""

    def __init__(self, tool: str, args: dict, parent=None, deadline=None) -> None:
        self.tool, self.args, self.parent, self.deadline = tool, args, parent, deadline


def test_a_child_runs_under_what_is_left_of_its_parents_limit():
    import time
    from toolsrv.tree.calls import nested
    top = _C("script", {}, deadline=time.monotonic() + 5)
    seconds, why = nested.limit(_C("file_read", {}, top), 30.0)
    assert 4 < seconds <= 5 and why == "what was left of the time limit of its parent script"
    assert nested.limit(_C("file_read", {}, top), 2.0) == (2.0, None)     # its own is less
    assert nested.limit(_C("file_read", {}), 30.0) == (30.0, None)        # no parent


def test_the_bounds_name_themselves():
    from toolsrv.errors import P9Error, errno_for
    from toolsrv.tree.calls import nested
    chain = None
    for i in range(MAX_DEPTH + 1):
        chain = _C("client_9p", {"n": i}, chain)
    with pytest.raises(P9Error) as e:
        nested.check(chain, "file_read", {})
    assert f"bound of {MAX_DEPTH}" in e.value.full and errno_for(e.value.ename) == 22
    nested.check(chain.parent, "file_read", {})                          # at the bound: fine
    with pytest.raises(P9Error) as e:
        nested.check(_C("loop", {"a": 1}, _C("loop", {"a": 1})), "loop", {"a": 1})
    assert "a cycle" in e.value.full
