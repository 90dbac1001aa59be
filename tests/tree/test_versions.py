"""Every synthetic file whose content changes moves its qid version and mtime (issue 46
item 3; toolsrv(4)), so a client that caches by qid version (9pfuse's attributes, a Go
client) never serves a stale `tools/index`.  Driven by python-9p: each file is statted,
changed, and statted again.  The clock is waited on (never slept on) to pass the second of
the first stats, so a moved mtime is seen to move.
"""
from __future__ import annotations

import os
import threading
import time

import pytest

from apphelpers import AppThread, add_tool, tools_dir
from py9phelpers import _fids, agent, connect, rdwr, read


@pytest.fixture(scope="module")
def srv():
    d = tools_dir()
    add_tool(d, "alpha", None, {"cmd": "cat", "description": "Alpha the first.",
                                "prompt": "Use alpha first."})
    add_tool(d, "beta", None, {"cmd": "cat", "description": "Beta the second."})
    app = AppThread([d]).start()
    app.tools = d
    yield app
    app.cleanup()


def _stat(c, path: str) -> tuple[int, int]:
    f = next(_fids)
    c.walk(0, f, path)
    try:
        d = c.stat(f)
    finally:
        c.clunk(f)
    return d.qid.vers, d.mtime


def _next_second(after: int) -> None:
    ev = threading.Event()
    while int(time.time()) <= after:
        ev.wait(0.05)


def test_every_changing_file_moves_its_version_and_mtime(srv):
    c = connect(srv)
    base = agent(c, "v1", "a", "alpha")
    files = ["revision", "revwait", "status", "tools/index", "tools/errors",
             "tools/alpha/meta", "tools/alpha/schema", "tools/alpha/prompt",
             f"{base}/ctl", f"{base}/schemas", f"{base}/search", f"{base}/log"]
    before = {f: _stat(c, f) for f in files}
    _next_second(max(m for _, m in before.values()))

    rev = int(read(c, "revision"))
    add_tool(srv.tools, "alpha", None, {"cmd": "cat", "description": "Alpha, changed.",
                                        "prompt": "Use alpha second.",
                                        "args": {"type": "object", "properties": {
                                            "n": {"type": "integer"}}}})
    with open(os.path.join(srv.tools, "broken.meta"), "w") as fh:
        fh.write("{not json")
    rdwr(c, "revwait", str(rev).encode())                 # the registry saw them
    assert b"broken" in read(c, "tools/errors")
    rdwr(c, f"{base}/ctl", b"tool_load beta")
    rdwr(c, f"{base}/tools/alpha/call", b'{"n": 1}')      # a run: status's totals move
    rdwr(c, f"{base}/search", b"beta second")

    after = {f: _stat(c, f) for f in files}
    stuck = {f: (before[f], after[f]) for f in files
             if after[f][0] == before[f][0] or after[f][1] <= before[f][1]}
    assert not stuck, f"(version, mtime) before and after a change: {stuck}"
    assert after["revision"][0] == int(read(c, "revision")) == after["revwait"][0]
    c.close()


def test_a_file_that_did_not_change_keeps_its_version(srv):
    c = connect(srv)
    base = agent(c, "v2", "a", "beta")
    files = ["revision", "tools/index", "tools/beta/meta", f"{base}/schemas"]
    before = {f: _stat(c, f) for f in files}
    read(c, "tools/index")
    assert {f: _stat(c, f) for f in files} == before
    c.close()
