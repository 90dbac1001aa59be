"""Who waits on a running call (issue 46 items 2 and 4), driven by python-9p.

A program that reads the whole tree (`grep -r`, `find -exec cat`, a backup) never waits on
a call; the shell's `echo … > call; cat out` still gets the whole result, because a call
whose writer closes `call` without reading it hands its result to the first reader of
`out` or `err`.  A hang-up while a read of `call` waits kills the run.  The tool here
waits for a file `go` in the session's directory, which the test makes: no timing.
"""
from __future__ import annotations

import os
import socket
import threading
from typing import Any

import pytest
from py9p import OREAD, ORDWR, OWRITE, RemoteError, decode_dir

from apphelpers import AppThread, add_tool, tools_dir
from py9phelpers import _fids, agent, connect, rdwr, read
from serverhelpers import Raw
from toolsrv.proto import OWRITE as T_OWRITE, Tclunk, Topen, Twalk, Twrite

GATED = """\
#!/bin/sh
input=$(cat)
echo "waiting" >&2
while [ ! -e go ]; do sleep 0.05; done
echo "got $input"
"""
REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def srv():
    d = tools_dir()
    add_tool(d, "gated", GATED, {"readOnly": True})
    add_tool(d, "patterned", GATED, {"readOnly": True, "args": {   # checked in a thread
        "type": "object", "properties": {"w": {"type": "string", "pattern": "^a+$"}}}})
    app = AppThread([d], timeout=60).start()
    yield app
    app.cleanup()


def _status(c: Any, base: str, tool: str = "gated") -> bytes:
    return read(c, f"{base}/tools/{tool}/status")


def _wait(pred: Any, what: str) -> None:
    ev = threading.Event()
    for _ in range(3000):               # a bound against a hang, never a timing assertion
        if pred():
            return
        ev.wait(0.02)
    raise AssertionError(what)


def _read_all(c: Any, fid: int) -> bytes:
    out = b""
    while True:
        chunk = c.read(fid, offset=len(out))
        if not chunk:
            return out
        out += chunk


def _walk_and_read(c: Any, path: str, seen: list[str]) -> None:
    """What grep -r does: list every directory, open and read every file to its end."""
    f = next(_fids)
    c.walk(0, f, path) if path else c.walk(0, f, "")
    try:
        c.open(f, OREAD)
        listing = _read_all(c, f)
    finally:
        c.clunk(f)
    i = 0
    while i < len(listing):
        size = int.from_bytes(listing[i:i + 2], "little")
        d = decode_dir(listing[i:i + 2 + size])
        i += 2 + size
        sub = f"{path}/{d.name}" if path else d.name
        if d.mode & 0x80000000:
            _walk_and_read(c, sub, seen)
            continue
        g = next(_fids)
        c.walk(0, g, sub)
        try:
            c.open(g, OREAD)
            _read_all(c, g)
            seen.append(sub)
        except RemoteError:
            pass
        finally:
            c.clunk(g)


def _go(c: Any, base: str) -> str:
    cwd = read(c, base.rsplit("/agent/", 1)[0] + "/cwd").decode().strip()
    return os.path.join(cwd, "go")


def test_reading_the_whole_tree_never_waits_on_a_call_and_echo_then_cat_out_does(srv):
    """Issue 46 item 2.  An agent's call (written and read on one fid) runs: a reader of
    every file finishes while it still runs.  Then `echo … > call` (a fid clunked without
    reading), whose `cat out` waits, and the tree is read again: still no wait, as the
    call was handed to that `cat`, which gets the whole result."""
    with connect(srv) as c:
        base = agent(c, "w1", "a", "gated")
        got: dict[str, Any] = {}
        caller = connect(srv)
        t = threading.Thread(target=lambda: got.setdefault(
            "call", rdwr(caller, f"{base}/tools/gated/call", b'{"n": 1}')), daemon=True)
        t.start()
        _wait(lambda: _status(c, base).startswith(b"running"), "the call never ran")
        seen: list[str] = []
        walker = threading.Thread(target=_walk_and_read, args=(connect(srv), "", seen),
                                  daemon=True)
        walker.start()
        walker.join(60)
        assert not walker.is_alive(), "reading the tree waited on the running call"
        assert f"{base}/tools/gated/out" in seen and _status(c, base).startswith(b"running")
        open(_go(c, base), "w").close()
        t.join(60)
        assert got["call"] == b'got {"n": 1}\n'
        os.unlink(_go(c, base))

        f = next(_fids)                                  # echo '{"n": 2}' > call
        c.walk(0, f, f"{base}/tools/gated/call")
        c.open(f, OWRITE)
        c.write(f, b'{"n": 2}\n')
        c.clunk(f)
        _wait(lambda: _status(c, base).startswith(b"running"), "the call never ran")
        cat: dict[str, bytes] = {}
        th = threading.Thread(target=lambda: cat.setdefault("out", read(
            connect(srv), f"{base}/tools/gated/out")), daemon=True)
        th.start()
        _wait(lambda: len(srv.call(lambda: srv.app.calls.latest(
            srv.app.store.sessions["w1"].agents["a"])["gated"].waiters)) == 1,
            "cat out never waited")
        walker = threading.Thread(target=_walk_and_read, args=(connect(srv), "", []),
                                  daemon=True)
        walker.start()
        walker.join(60)
        assert not walker.is_alive(), "reading the tree waited on the handed-over call"
        assert read(c, f"{base}/tools/gated/out") == b""    # a second reader: at once
        assert read(c, f"{base}/tools/gated/err") == b""
        open(_go(c, base), "w").close()
        th.join(60)
        assert cat == {"out": b'got {"n": 2}\n'}
        assert read(c, f"{base}/tools/gated/err") == b"waiting\n"


def test_a_reader_handed_a_call_is_released_by_cancel(srv):
    """The one reader that waits ends with the call: `echo cancel gated > ctl` frees it
    (through 9pfuse, where no signal does)."""
    with connect(srv) as c:
        base = agent(c, "w2", "a", "gated")
        f = next(_fids)
        c.walk(0, f, f"{base}/tools/gated/call")
        c.open(f, OWRITE)
        c.write(f, b"{}")
        c.clunk(f)
        got: dict[str, bytes] = {}
        th = threading.Thread(target=lambda: got.setdefault("out", read(
            connect(srv), f"{base}/tools/gated/out")), daemon=True)
        th.start()
        _wait(lambda: len(srv.call(lambda: srv.app.calls.latest(
            srv.app.store.sessions["w2"].agents["a"])["gated"].waiters)) == 1,
            "cat out never waited")
        rdwr(c, f"{base}/ctl", b"cancel gated")
        th.join(60)
        assert got == {"out": b""} and _status(c, base).startswith(b"killed")


def test_a_writer_clunked_while_its_call_is_checked_still_hands_it_over(srv):
    """A schema with a pattern is checked in a thread; a client that pipelines the clunk
    behind its Twrite closes the fid before the call is made: the call still goes to the
    first reader of out, on any connection."""
    with connect(srv) as c:
        base = agent(c, "w4", "a", "patterned")
        raw = Raw(srv.addr)
        raw.send(Twalk(1, 0, 1, tuple(f"{base}/tools/patterned/call".split("/"))),
                 Topen(2, 1, T_OWRITE), Twrite(3, 1, 0, b'{"w": "aaa"}'), Tclunk(4, 1))
        raw.recv(4)
        _wait(lambda: _status(c, base, "patterned").startswith(b"running"), "never ran")
        got: dict[str, bytes] = {}
        th = threading.Thread(target=lambda: got.setdefault("out", read(
            connect(srv), f"{base}/tools/patterned/out")), daemon=True)
        th.start()
        _wait(lambda: len(srv.call(lambda: srv.app.calls.latest(
            srv.app.store.sessions["w4"].agents["a"])["patterned"].waiters)) == 1,
            "cat out never waited")
        open(_go(c, base), "w").close()
        th.join(60)
        assert got == {"out": b'got {"w": "aaa"}\n'}
        raw.sk.close()


def test_a_hang_up_while_a_read_of_call_waits_kills_the_run(srv):
    """Issue 46 item 4, the rule of toolsrv(4) and doc/architecture.md: a call outlives
    its writer's fid and connection, except that hanging up while a read of `call` waits
    for it (Ctrl-C on `9p rdwr`) is a flush of that read, which kills the run."""
    with connect(srv) as c:
        base = agent(c, "w3", "a", "gated")
        p = connect(srv)
        f = next(_fids)
        p.walk(0, f, f"{base}/tools/gated/call")
        p.open(f, ORDWR)
        p.write(f, b"{}")
        ended: list[BaseException] = []

        def reading() -> None:
            try:
                _read_all(p, f)
            except (EOFError, OSError) as e:         # the hang-up ends it
                ended.append(e)
        th = threading.Thread(target=reading, daemon=True)
        th.start()
        _wait(lambda: len(srv.call(lambda: srv.app.calls.latest(
            srv.app.store.sessions["w3"].agents["a"])["gated"].waiters)) == 1,
            "the read of call never waited")
        p.transport.shutdown(socket.SHUT_RDWR)           # hang up (Ctrl-C on 9p rdwr)
        _wait(lambda: _status(c, base).startswith(b"killed"), "the run was not killed")
        th.join(60)
        assert ended, "the read of call was answered before the hang-up"
        p.close()
    for doc, words in (("doc/toolsrv.4.md", "A hang-up while a read of `call` waits"),
                       ("doc/architecture.md", "hang-up while a read of `call` waits")):
        with open(os.path.join(REPO, doc)) as fh:
            assert words in " ".join(fh.read().split()), f"{doc} states the rule"
