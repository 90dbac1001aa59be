"""Every limit of doc/reliability.md: configurable, and a clear error when hit.

The whole server runs on a thread (AppThread) with small limits; clients are
raw sockets (to misbehave precisely) or toolsrv's own Client.  Misbehaving
clients run beside a well-behaved one, which must keep being served.  No
assertion depends on timing: waits are for events, bounded generously.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import struct

import pytest

from toolsrv.proto import NOTAG, Rerror, Rread, Tclunk, Topen, Tread, Tversion, Twalk, Twrite
from toolsrv.cli.command import build_parser, serve_options
from toolsrv.cli.client import Client, ClientError

from apphelpers import AppThread, add_tool, tools_dir
from serverhelpers import MSIZE, Raw, stop_clean, wait_for


def good_call(app, session: str = "good") -> None:
    """A whole tool call by a well-behaved client: proof the server still serves."""
    with Client.connect(app.addr) as c:
        c.mkdir(f"session/{session}")
        c.mkdir(f"session/{session}/agent/a")
        c.rdwr(f"session/{session}/agent/a/ctl", b"tool_load echo")
        assert c.rdwr(f"session/{session}/agent/a/tools/echo/call", b'{"ok": 1}') == b'{"ok": 1}'
        c.rm(f"session/{session}")


@pytest.fixture(scope="module")
def tools():
    d = tools_dir()
    add_tool(d, "echo", "#!/bin/sh\ncat\n", {"readOnly": True})
    add_tool(d, "big", "#!/bin/sh\nhead -c 1048576 /dev/zero | tr '\\0' x\n", {"readOnly": True})
    add_tool(d, "sleeper", "#!/bin/sh\nexec sleep 30\n")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def app_with(tools):
    made: list[AppThread] = []

    def start(**opts) -> AppThread:
        opts.setdefault("timeout", 40)
        a = AppThread([tools], **opts).start()
        made.append(a)
        return a
    yield start
    for a in made:
        stop_clean(a)


# ------------------------------------------------------------------ connections

def test_connection_limits_answer_why_and_free_on_close(app_with):
    app = app_with(max_conns=3, max_conns_per_peer=2)
    a, b = Client.connect(app.addr), Client.connect(app.addr)
    with pytest.raises(ClientError, match=r"resource busy: too many connections from uid "
                                          rf"{os.getuid()} \(limit 2\)"):
        Client.connect(app.addr)
    raw = Raw(app.addr, version=False, attach=False)       # any first request gets the answer
    r = raw.rpc(Tversion(NOTAG, MSIZE, "9P2000"))
    assert type(r) is Rerror and "too many connections" in r.ename
    assert raw.hung_up()
    raw.close()
    a.close()
    assert wait_for(lambda: app.call(lambda: app.app.gate.total) == 1)
    c = Client.connect(app.addr)                           # the slot came back
    assert c.read("revision").strip().isdigit()
    c.close()
    b.close()
    assert wait_for(lambda: app.call(lambda: app.app.gate.total) == 0)
    assert app.call(lambda: dict(app.app.gate.counts)) == {}


def test_total_connection_limit(app_with):
    app = app_with(max_conns=2, max_conns_per_peer=10)
    a, b = Client.connect(app.addr), Client.connect(app.addr)
    with pytest.raises(ClientError, match=r"resource busy: too many connections \(limit 2\)"):
        Client.connect(app.addr)
    a.close()
    b.close()


# ------------------------------------------------------------------ per connection

def test_fid_limit(app_with):
    app = app_with(max_fids=4)
    raw = Raw(app.addr)                                    # fid 0 is the root
    for f in (1, 2, 3):
        raw.ok(Twalk(1, 0, f, ()))
    r = raw.rpc(Twalk(1, 0, 4, ()))
    assert r == Rerror(1, "resource busy: too many fids (limit 4)")
    raw.ok(Tclunk(1, 3))
    raw.ok(Twalk(1, 0, 4, ()))                             # a clunk frees one
    raw.close()


def test_inflight_limit_and_flush(app_with):
    app = app_with(max_inflight=2, revwait_timeout=60)
    raw = Raw(app.addr)
    rev = app.call(lambda: app.app.registry.revision)
    for f in (1, 2, 3):
        raw.ok(Twalk(1, 0, f, ("revwait",)))
        raw.ok(Topen(1, f, 2))
        raw.ok(Twrite(1, f, 0, str(rev).encode()))         # wait from the current one
    raw.send(Tread(10, 1, 0, 100), Tread(11, 2, 0, 100))  # both block until a change
    r = raw.rpc(Tread(12, 3, 0, 100))
    assert r == Rerror(12, "resource busy: too many requests in flight (limit 2)")
    from toolsrv.proto import Rflush, Tflush
    raw.send(Tflush(13, 10))
    got = raw.recv(2)
    assert got == [Rerror(10, "interrupted"), Rflush(13)]
    raw.close()


def test_partial_frame_is_bounded_and_times_out(app_with):
    """Half a frame, then silence: msize bytes at most, the others unaffected, then closed."""
    app = app_with(frame_timeout=1.0)
    stalled = Raw(app.addr)
    body = b"\0" * (MSIZE - 8)
    stalled.sk.sendall(struct.pack("<IBHIQ", MSIZE, 118, 1, 1, 0)[:11] + body[:MSIZE - 20])
    conns = lambda: app.call(lambda: [p.framer.pending for p in app.app.conns])  # noqa: E731
    assert wait_for(lambda: MSIZE - 9 in conns())
    assert max(conns()) < MSIZE                            # never more than msize
    good_call(app)                                         # served meanwhile
    assert stalled.hung_up(), "a stalled partial frame should close its connection"
    stalled.close()
    over = Raw(app.addr)                                   # above msize: refused at once
    over.sk.sendall(struct.pack("<IBH", MSIZE + 1, 118, 1))
    assert over.hung_up()
    over.close()


def test_client_that_never_reads_holds_bounded_memory(app_with):
    """3000 reads of 8 KiB (24 MiB of replies) sent at once, none read: the server stops
    reading that client once its socket buffer is full; a good client is served; then
    every reply arrives, in order, none lost."""
    app = app_with()
    c = Client.connect(app.addr)
    c.mkdir("session/s")
    c.mkdir("session/s/agent/a")
    c.rdwr("session/s/agent/a/ctl", b"tool_load big")
    assert len(c.rdwr("session/s/agent/a/tools/big/call", b"{}")) == 1 << 20
    c.close()
    raw = Raw(app.addr)
    raw.ok(Twalk(1, 0, 1, ("session", "s", "agent", "a", "tools", "big", "out")))
    raw.ok(Topen(1, 1, 0))
    n = 3000
    raw.sk.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    raw.send(*[Tread(i % 1000, 1, (i * 8192) % (1 << 20), 8192) for i in range(n)])

    def held() -> int:
        return app.call(lambda: max(p.transport.get_write_buffer_size() + 24 * len(p.queue)
                                    for p in app.app.conns))
    assert wait_for(lambda: app.call(lambda: any(p.reading_paused for p in app.app.conns)))
    assert held() < 4 << 20, f"the server holds {held()} bytes for a client that never reads"
    good_call(app)
    replies = raw.recv(n)
    assert [r.tag for r in replies] == [i % 1000 for i in range(n)]
    assert all(type(r) is Rread and r.data == b"x" * 8192 for r in replies)
    raw.close()


def test_bytes_held_by_a_connections_fids(app_with):
    """Unfinished writes and read snapshots, summed over a connection's fids, are bounded
    (max_held): many fids each holding a little cannot add up to a lot."""
    app = app_with(max_held=100_000, max_args=60_000)
    with Client.connect(app.addr) as c:
        c.mkdir("session/s")
        c.mkdir("session/s/agent/a")
        c.rdwr("session/s/agent/a/ctl", b"tool_load echo")
        call = "session/s/agent/a/tools/echo/call"
        half = b'{"x": "' + b"y" * 45_000             # unfinished JSON: held by the fid
        f1, f2 = c.open(call, 2), c.open(call, 2)
        c.write_fid(f1, half)
        with pytest.raises(ClientError, match=r"resource busy: fids of this connection hold "
                                              r"over 100000 bytes \(clunk some\)"):
            c.write_fid(f2, half + b"y" * 10_000)
        c.clunk(f2)
        c.write_fid(f1, b'"}')                        # f1 kept its bytes, and completes
        assert c.read_fid(f1) == half + b'"}'
        c.clunk(f1)
        assert app.call(lambda: [p.conn.held for p in app.app.conns]) == [0]
        other = Client.connect(app.addr)              # another connection has its own share
        f3 = other.open(call, 2)
        other.write_fid(f3, half)
        c.write(call, b"{}")
        other.clunk(f3)
        other.close()


# ------------------------------------------------------------------ the tree

def test_session_and_agent_limits(app_with):
    app = app_with(max_sessions=2, max_agents=1)
    with Client.connect(app.addr) as c:
        c.mkdir("session/a")
        c.mkdir("session/b")
        with pytest.raises(ClientError, match=r"resource busy: too many sessions \(limit 2\)"):
            c.mkdir("session/c")
        c.mkdir("session/a/agent/x")
        with pytest.raises(ClientError,
                           match=r"resource busy: too many agents in session a \(limit 1\)"):
            c.mkdir("session/a/agent/y")
        c.rm("session/b")
        c.mkdir("session/c")                               # a removal frees one
        assert "invalid" not in c.read("session/a/agent/x/log").decode()


def test_args_size_limit(app_with):
    app = app_with(max_args=1000)
    with Client.connect(app.addr) as c:
        c.mkdir("session/s")
        c.mkdir("session/s/agent/a")
        c.rdwr("session/s/agent/a/ctl", b"tool_load echo")
        big = json.dumps({"x": "y" * 2000}).encode()
        fid = c.open("session/s/agent/a/tools/echo/call", 2)
        with pytest.raises(ClientError, match="invalid args: longer than 1000 bytes: too long"):
            for i in range(0, len(big), 500):              # split over Twrites: still counted
                c.write_fid(fid, big[i:i + 500])
        c.clunk(fid)
        ok = json.dumps({"x": "y" * 900}).encode()
        assert c.rdwr("session/s/agent/a/tools/echo/call", ok) == ok


def test_queued_calls_limit(app_with):
    app = app_with(max_runs=1, max_queued=2)
    with Client.connect(app.addr) as c:
        c.mkdir("session/s")
        c.mkdir("session/s/agent/a")
        c.rdwr("session/s/agent/a/ctl", b"tool_load sleeper")
        for _ in range(3):                                 # one runs, two wait
            c.write("session/s/agent/a/tools/sleeper/call", b"{}")
        assert wait_for(lambda: c.read("session/s/agent/a/tools/sleeper/status")
                        .startswith(b"queued"))
        with pytest.raises(ClientError, match=r"resource busy: too many queued calls "
                                              r"\(limit 2\)"):
            c.write("session/s/agent/a/tools/sleeper/call", b"{}")
        c.rdwr("session/s/agent/a/ctl", b"cancel sleeper")
        assert wait_for(lambda: c.read("session/s/agent/a/tools/sleeper/status")
                        .startswith(b"killed"))


def test_ctl_line_and_value_limits(app_with):
    app = app_with()
    with Client.connect(app.addr) as c:
        c.mkdir("session/s")
        c.mkdir("session/s/agent/a")
        fid = c.open("session/s/agent/a/ctl", 1)
        with pytest.raises(ClientError, match="ctl: line longer than 65536 bytes: too long"):
            for _ in range(40):                            # 160 KiB with no newline
                c.write_fid(fid, b"x" * 4096)
        c.clunk(fid)
        fid = c.open("session/s/cwd", 1)
        with pytest.raises(ClientError, match="cwd: value longer than 4096 bytes: too long"):
            for _ in range(3):
                c.write_fid(fid, b"/" * 2000)
        c.clunk(fid)


# ------------------------------------------------------------------ the command line

def test_every_limit_is_a_serve_flag():
    args = build_parser().parse_args([
        "serve", "--max-conns", "7", "--max-conns-per-peer", "3", "--max-fids", "9",
        "--max-inflight", "5", "--max-held", "777", "--frame-timeout", "2.5", "--max-sessions", "4",
        "--max-agents", "6", "--max-queued", "8", "--max-args", "1234", "--max-runs", "2",
        "--msize", "4096"])
    o = serve_options(args)
    assert (o.max_conns, o.max_conns_per_peer, o.max_fids, o.max_inflight, o.max_held,
            o.frame_timeout, o.max_sessions, o.max_agents, o.max_queued, o.max_args,
            o.max_runs, o.msize) == (7, 3, 9, 5, 777, 2.5, 4, 6, 8, 1234, 2, 4096)


def test_agent_log_is_bounded_in_bytes_and_keeps_whole_newest_lines(app_with):
    from toolsrv.tree.state import sessions
    app = app_with()
    with Client.connect(app.addr) as c:
        c.mkdir("session/a")
        c.mkdir("session/a/agent/x")
        for i in range(400):  # long and multi-byte lines: ~300 KiB noted in all
            with pytest.raises(ClientError):
                c.rdwr("session/a/agent/x/ctl", f"tool_load no_such_{i:04d}_{'é' * 300}".encode())
        log = c.read("session/a/agent/x/log")
    assert sessions.LOG_BYTES - sessions.LOG_LINE_MAX - 64 < len(log) <= sessions.LOG_BYTES
    lines = log.decode().splitlines()
    assert all(ln.startswith("20") and "tool_load no_such_" in ln for ln in lines), lines[:2]
    assert "no_such_0399_" in lines[-1] and "no_such_0000_" not in log.decode()
    numbers = [int(ln.split("no_such_")[1][:4]) for ln in lines]
    assert numbers == list(range(400 - len(lines), 400)), "the newest lines, in order"
