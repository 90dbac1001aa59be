"""rmdir of a session or agent directory (issue 46 item 5), driven by python-9p.

9P has one Tremove, and 9pfuse sends the same walk and Tremove for rmdir(2) as for
unlink(2), so `rmdir` and the last step of `rm -r` are one request: by design (toolsrv(4),
"rmdir"), removing an agent's or a session's directory ends it whatever it holds, its calls
killed; the files and directories inside accept Tremove and stay, so `rm -r` works.
"""
from __future__ import annotations

import os
import threading

import pytest
from py9p import OREAD, RemoteError, decode_dir

from apphelpers import AppThread, add_tool, tools_dir
from py9phelpers import _fids, agent, connect, rdwr, read

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def srv():
    d = tools_dir()
    add_tool(d, "sleeper", "#!/bin/sh\nexec sleep \"$(sed 's/[^0-9.]//g')\"\n")
    add_tool(d, "echo", None, {"cmd": "cat", "readOnly": True})
    app = AppThread([d], timeout=60).start()
    yield app
    app.cleanup()


def _remove(c, path: str) -> None:
    f = next(_fids)
    c.walk(0, f, path)
    c.remove(f)


def _names(c, path: str) -> list[str]:
    f = next(_fids)
    c.walk(0, f, path)
    c.open(f, OREAD)
    data = b""
    try:
        while chunk := c.read(f, offset=len(data)):
            data += chunk
    finally:
        c.clunk(f)
    names, i = [], 0
    while i < len(data):
        size = int.from_bytes(data[i:i + 2], "little")
        names.append(decode_dir(data[i:i + 2 + size]).name)
        i += 2 + size
    return names


def test_rmdir_of_a_full_agent_ends_it_and_kills_its_call(srv):
    c = connect(srv)
    base = agent(c, "r1", "a", "sleeper")
    agent(c, "r1x", "b")                              # (another session, left alone)
    got: list[BaseException] = []

    def calling() -> None:
        try:
            rdwr(connect(srv), f"{base}/tools/sleeper/call", b'{"t": "50"}')
        except RemoteError as e:
            got.append(e)
    th = threading.Thread(target=calling, daemon=True)
    th.start()
    ev = threading.Event()
    while not read(c, f"{base}/tools/sleeper/status").startswith(b"running"):
        ev.wait(0.02)
    _remove(c, base)                                  # what `rmdir agent/a` sends
    th.join(60)
    assert got and "cancelled" in str(got[0])
    assert _names(c, "session/r1/agent") == []
    assert "r1" in _names(c, "session") and "b" in _names(c, "session/r1x/agent")
    _remove(c, "session/r1")                          # `rmdir session/r1`: full or not
    assert "r1" not in _names(c, "session")
    c.close()


def test_rm_r_removes_children_first_and_then_the_agent(srv):
    c = connect(srv)
    base = agent(c, "r2", "a", "echo")
    assert rdwr(c, f"{base}/tools/echo/call", b"{}") == b"{}"
    for name in _names(c, base):                      # rm -r: depth first, files first
        if name == "tools":
            for tool in _names(c, f"{base}/tools"):
                for f in _names(c, f"{base}/tools/{tool}"):
                    _remove(c, f"{base}/tools/{tool}/{f}")
                _remove(c, f"{base}/tools/{tool}")
            _remove(c, f"{base}/tools")
        else:
            _remove(c, f"{base}/{name}")
    assert "ctl" in _names(c, base)                   # the removals changed nothing
    _remove(c, base)
    assert _names(c, "session/r2/agent") == []
    c.close()


def test_toolsrv_4_says_rmdir_ends_an_agent():
    with open(os.path.join(REPO, "doc", "toolsrv.4.md")) as fh:
        text = " ".join(fh.read().split())
    assert "*rmdir.*" in text and "there is no `directory not empty`" in text
