"""Issue 46.15: an error too long for an Rerror (ERRMAX) that nests another's words kept
words from everywhere and cut the clause that says what to do (`... (outside this ...
doc/sandbox.md ... more)`).  A call's error cut now keeps its head (the errno word) and its
innermost clauses, the fix last, and says the log has it all; real processes, real Landlock:
file_write refused outside the grants, called directly and through client_9p."""
from __future__ import annotations

import errno
import json
import os
import re
import shutil

import pytest

from apphelpers import AppThread
from toolsrv.cli.client import Client, ClientError
from toolsrv.errors import ERRMAX, errno_for, words

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUNDLED = os.path.join(REPO, "toolsrv", "data", "tools")
HEAD = "exit 1 (input/output error): "
FIX = re.compile(r" \((outside|not in) the grants: [^()]*\)$")    # file tools' denied()


@pytest.fixture(scope="module")
def app():
    a = AppThread([BUNDLED], timeout=8).start()
    yield a
    a.cleanup()


def agent(c: Client, s: str) -> str:
    c.mkdir(f"session/{s}")
    c.mkdir(f"session/{s}/agent/a")
    c.rdwr(f"session/{s}/agent/a/ctl", b"tool_load client_9p file_write")
    return f"session/{s}/agent/a"


def refused(c: Client, path: str, args: dict) -> str:
    with pytest.raises(ClientError) as e:
        c.rdwr(path, json.dumps(args).encode())
    return e.value.ename     # as sent (str(e) is its words: errors.words)


def check(c: Client, a: str, ename: str, outside: str) -> None:
    """The Rerror: its head, the refused path, the fix last, where the rest is; the log
    has the whole."""
    assert len(ename.encode()) < ERRMAX and errno_for(ename) == errno.EIO, ename
    said = words(ename)
    assert said.startswith(HEAD + "... (all in log) "), said
    assert f"permission denied: {outside} (" in said and FIX.search(said), said
    whole = c.read(f"{a}/log").decode()
    assert said[len(HEAD + "... (all in log) "):] in whole


def test_a_nested_refusal_keeps_its_fix_and_points_to_the_log(app):
    with Client.connect(app.addr) as c:
        a = agent(c, "cut1")
        outside = "/usr/lib/x.txt"
        inner = {"path": outside, "content": "x"}
        ename = refused(c, f"{a}/tools/client_9p/call",
                        {"op": "rdwr", "path": f"{a}/tools/file_write/call",
                         "data": json.dumps(inner)})
        check(c, a, ename, outside)
        assert "client_9p: rdwr " in c.read(f"{a}/log").decode()   # the whole, nested


def test_a_long_refusal_keeps_its_fix_and_points_to_the_log(app):
    with Client.connect(app.addr) as c:
        a = agent(c, "cut2")
        outside = "/usr/lib/toolsrv-no-such-dir/" + "d" * 30 + "/x.txt"
        ename = refused(c, f"{a}/tools/file_write/call", {"path": outside, "content": "x"})
        assert words(ename).endswith(")") and FIX.search(words(ename)), ename
        assert words(ename).startswith(HEAD + "... (all in log) "), ename
        assert errno_for(ename) == errno.EIO
