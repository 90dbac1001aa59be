"""Tflush of a change that already took effect, with the state on (the group commit).

A Tcreate of a session or agent, and the Twrite of ctl, cwd or sandbox, are answered once
their change is on disk (sessions.py).  The change is made when the request arrives; a
flush while the save is under way must not answer it `interrupted`: the real reply goes
out, then the Rflush (flush(5) allows it; lib9p does it).  Frames go into a NinePProtocol
whose transport records every write, as in test_call_replies.py; the state file's write is
held at a gate so a test decides when the save ends.
"""
from __future__ import annotations

import asyncio
import os
import tempfile
import threading
from typing import Any

import pytest

from toolsrv.proto import (
    DMDIR, NOFID, NOTAG, OREAD, OWRITE, Rcreate, Rerror, Rflush, Ropen, Rwalk, Rwrite,
    Tattach, Tcreate, Tflush, Topen, Tversion, Twalk, Twrite, encode,
)
from toolsrv.serve.server import ServerConfig
from toolsrv.serve.transport import NinePProtocol

from fakes import FakeRunner, RecordingTransport as Transport, make_fs

MSIZE = 8192


class Gate(threading.Event):
    """Once armed, the state file's writes wait (in the writer's thread) until the event
    is set; the armed writes numbered in `fail` find the disk full."""

    def __init__(self) -> None:
        super().__init__()
        self.armed, self.writes, self.fail = False, 0, set()
        self.entered = threading.Event()  # a write is held here: the save is under way


@pytest.fixture
def gate(monkeypatch):
    import toolsrv.tree.state.sessions as S
    real, g = S._write_file, Gate()

    def write(state_dir: Any, path: str, data: bytes) -> Any:
        if g.armed:
            g.entered.set()
            g.wait(60)
            g.writes += 1
            if g.writes in g.fail:
                return OSError(28, "No space left on device")
        return real(state_dir, path, data)
    monkeypatch.setattr(S, "_write_file", write)
    return g


async def serving(gate: Gate) -> tuple[Any, NinePProtocol, Transport]:
    """A tree with a session `s` (its private cwd made) and the group commit on, its
    writes held at the gate."""
    fs = make_fs(tempfile.mkdtemp(prefix="toolsrv-test."), runner=FakeRunner())
    fs.store.create("s")
    fs.store.start_writer()
    gate.armed = True
    p, t = NinePProtocol(fs, ServerConfig(msize=MSIZE), set()), Transport()
    p.connection_made(t)
    p.data_received(encode(Tversion(NOTAG, MSIZE, "9P2000")) +
                    encode(Tattach(1, 0, NOFID, "u", "")))
    t.writes.clear()
    return fs, p, t


async def until(t: Transport, n: int, limit: float = 60.0) -> list:
    """The replies once there are n of them (or all there are after `limit` seconds)."""
    await until_true(lambda: len(t.replies()) >= n, limit)
    return t.replies()


async def until_true(pred: Any, limit: float = 60.0) -> bool:
    """Wait for pred() with a generous deadline; its last value."""
    end = asyncio.get_running_loop().time() + limit
    while not pred() and asyncio.get_running_loop().time() < end:
        await asyncio.sleep(0.01)
    return bool(pred())


async def saving(gate: Gate, made: Any) -> None:
    """Until the change is made (made()) and the state's save has reached the gate."""
    assert await until_true(lambda: gate.entered.is_set() and made()), "no change, or no save"


def test_a_flushed_create_that_took_effect_gets_its_rcreate_then_rflush(gate):
    async def go() -> None:
        fs, p, t = await serving(gate)
        p.data_received(encode(Twalk(1, 0, 1, ("session",))) +
                        encode(Tcreate(2, 1, "new", DMDIR | 0o755, OREAD)) +
                        encode(Tflush(3, 2)))
        await saving(gate, lambda: "new" in fs.store.sessions)
        assert [type(m) for m in t.replies()] == [Rwalk]        # the save is under way
        assert "new" in fs.store.sessions                         # ... of a change made
        gate.set()
        r = await until(t, 3)
        assert [(type(m), m.tag) for m in r] == [(Rwalk, 1), (Rcreate, 2), (Rflush, 3)]
        assert "new" in fs.store.sessions
        await fs.store.stop_writer()
    asyncio.run(go())


def test_a_flushed_create_whose_save_failed_gets_that_error_then_rflush(gate):
    async def go() -> None:
        fs, p, t = await serving(gate)
        gate.fail.add(1)
        p.data_received(encode(Twalk(1, 0, 1, ("session",))) +
                        encode(Tcreate(2, 1, "new", DMDIR | 0o755, OREAD)) +
                        encode(Tflush(3, 2)))
        await saving(gate, lambda: "new" in fs.store.sessions)
        gate.set()
        r = await until(t, 3)
        assert [(type(m), m.tag) for m in r] == [(Rwalk, 1), (Rerror, 2), (Rflush, 3)]
        assert r[1].ename == "input/output error: state not saved: No space left on device"
        assert "new" not in fs.store.sessions                     # undone, as it said
        await fs.store.stop_writer()
    asyncio.run(go())


def test_a_flushed_cwd_write_gets_its_rwrite_and_the_old_private_cwd_goes(gate, tmp_path):
    async def go() -> None:
        fs, p, t = await serving(gate)
        s = fs.store.sessions["s"]
        private = s.cwd
        assert os.path.isdir(private)
        p.data_received(encode(Twalk(1, 0, 1, ("session", "s", "cwd"))) +
                        encode(Topen(2, 1, OWRITE)) +
                        encode(Twrite(3, 1, 0, f"{tmp_path}\n".encode())) +
                        encode(Tflush(4, 3)))
        await saving(gate, lambda: s.cwd == os.path.realpath(tmp_path))
        gate.set()
        r = await until(t, 4)
        assert [(type(m), m.tag) for m in r] == [(Rwalk, 1), (Ropen, 2), (Rwrite, 3),
                                                 (Rflush, 4)]
        assert s.cwd == os.path.realpath(tmp_path)
        assert not os.path.exists(private)                        # not left behind
        await fs.store.stop_writer()
    asyncio.run(go())


def test_a_hang_up_during_a_cwd_save_still_removes_the_old_private_cwd(gate, tmp_path):
    async def go() -> None:
        fs, p, t = await serving(gate)
        s = fs.store.sessions["s"]
        private = s.cwd
        p.data_received(encode(Twalk(1, 0, 1, ("session", "s", "cwd"))) +
                        encode(Topen(2, 1, OWRITE)) +
                        encode(Twrite(3, 1, 0, str(tmp_path).encode())))
        await saving(gate, lambda: s.cwd == os.path.realpath(tmp_path))
        t.writes.clear()
        p.connection_lost(None)
        gate.set()
        await fs.store.stop_writer()
        assert await until_true(lambda: not os.path.exists(private)), "the old cwd stayed"
        assert t.writes == []                                     # nobody to answer
        assert s.cwd == os.path.realpath(tmp_path) and not os.path.exists(private)
    asyncio.run(go())


def test_a_flushed_ctl_write_gets_its_rwrite_then_rflush(gate):
    async def go() -> None:
        fs, p, t = await serving(gate)
        gate.armed = False
        a = await fs.store.create_agent(fs.store.sessions["s"], "a")
        gate.armed = True
        p.data_received(encode(Twalk(1, 0, 1, ("session", "s", "agent", "a", "ctl"))) +
                        encode(Topen(2, 1, OWRITE)) +
                        encode(Twrite(3, 1, 0, b"tool_load echo\n")) + encode(Tflush(4, 3)))
        await saving(gate, lambda: a.loaded == ["echo"])
        assert a.loaded == ["echo"]                               # made; being saved
        gate.set()
        r = await until(t, 4)
        assert [(type(m), m.tag) for m in r] == [(Rwalk, 1), (Ropen, 2), (Rwrite, 3),
                                                 (Rflush, 4)]
        await fs.store.stop_writer()
    asyncio.run(go())
