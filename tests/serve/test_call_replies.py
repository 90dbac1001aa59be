"""How a call's replies leave the server: batching, waiting readers, kept nodes.

A transcript at the level of the transport: frames go into a NinePProtocol whose
transport records every write, the tree is the real one (sessions, agents, call
files, scheduler) over a fake registry, and the runner is in-process so a test
decides when a run ends.
"""
from __future__ import annotations

import asyncio
import json
import tempfile
from typing import Any

import pytest

from toolsrv.proto import (
    IOHDRSZ, NOFID, NOTAG, OREAD, ORDWR, OWRITE, Rerror, Rflush, Ropen, Rread, Rwalk, Rwrite, Tattach, Tclunk,
    Tflush, Topen, Tread, Tversion, Twalk, Twrite, encode,
)
from toolsrv.run.runner import RunResult
from toolsrv.serve.server import ServerConfig
from toolsrv.serve.transport import NinePProtocol

from fakes import RecordingTransport as Transport, make_fs

MSIZE = 8192
CALL = ("session", "s", "agent", "a", "tools", "echo", "call")


class GatedRunner:
    """Echoes stdin; a run waits for `gate` when it is set up (None: at once)."""

    def __init__(self) -> None:
        self.gate: asyncio.Event | None = None
        self.requests: list[Any] = []
        self.killed = 0

    async def run(self, req: Any) -> RunResult:
        self.requests.append(req)
        if self.gate is not None:
            kill = asyncio.ensure_future(req.kill.wait())
            gate = asyncio.ensure_future(self.gate.wait())
            await asyncio.wait([kill, gate], return_when=asyncio.FIRST_COMPLETED)
            kill.cancel()
            gate.cancel()
            if req.kill.is_set():
                self.killed += 1
                return RunResult(stdout=b"", exit_code=None, signal=9, cancelled=True)
        return RunResult(stdout=req.stdin, exit_code=0, duration=0.0)


async def setup(runner: GatedRunner) -> tuple[Any, NinePProtocol, Transport]:
    fs = make_fs(tempfile.mkdtemp(prefix="toolsrv-test."), runner=runner)
    s = fs.store.create("s")
    fs.store.create_agent(s, "a")
    fs.agent_files.calls.apply(s.agents["a"], "tool_load echo")
    p, t = NinePProtocol(fs, ServerConfig(msize=MSIZE), set()), Transport()
    p.connection_made(t)
    p.data_received(encode(Tversion(NOTAG, MSIZE, "9P2000")) +
                    encode(Tattach(1, 0, NOFID, "agent", "")))
    t.writes.clear()
    return fs, p, t


async def calling(args: bytes) -> tuple[GatedRunner, Any, NinePProtocol, Transport]:
    """setup() with a run that waits for its gate, and the call with `args` sent."""
    runner = GatedRunner()
    runner.gate = asyncio.Event()
    fs, p, t = await setup(runner)
    p.data_received(pipelined(args))
    return runner, fs, p, t


def pipelined(args: bytes) -> bytes:
    """client_9p's rdwr as toolsrv.cli.client sends it: four requests in one write."""
    return b"".join(encode(m) for m in (
        Twalk(1, 0, 7, CALL), Topen(2, 7, ORDWR), Twrite(3, 7, 0, args),
        Tread(4, 7, 0, MSIZE - IOHDRSZ)))


async def turns(n: int = 5) -> None:
    for _ in range(n):
        await asyncio.sleep(0)


def test_a_call_that_ends_at_once_is_answered_in_one_write():
    async def go() -> None:
        _, p, t = await setup(GatedRunner())
        p.data_received(pipelined(b'{"x": 1}'))
        assert t.writes == []           # the batch waits one turn for the run it started
        await turns()
        assert len(t.writes) == 1
        r = t.replies()
        assert [type(m) for m in r] == [Rwalk, Ropen, Rwrite, Rread]
        assert [m.tag for m in r] == [1, 2, 3, 4]
        assert json.loads(r[3].data) == {"x": 1}
    asyncio.run(go())


def test_replies_do_not_wait_for_a_run_that_takes_time():
    async def go() -> None:
        runner, _, p, t = await calling(b'{"x": 2}')
        await turns()
        r = t.replies()
        assert [type(m) for m in r] == [Rwalk, Ropen, Rwrite]   # sent while the tool runs
        runner.gate.set()
        await turns()
        r = t.replies()
        assert [type(m) for m in r] == [Rwalk, Ropen, Rwrite, Rread]
        assert json.loads(r[3].data) == {"x": 2}
        assert len(t.writes) == 2
    asyncio.run(go())


def test_requests_that_need_no_waiting_are_answered_in_the_same_turn():
    async def go() -> None:
        _, p, t = await setup(GatedRunner())
        p.data_received(encode(Twalk(1, 0, 7, ("session", "s"))) + encode(Tclunk(2, 7)))
        assert len(t.writes) == 1 and len(t.replies()) == 2
    asyncio.run(go())


def test_flush_of_a_waiting_read_kills_the_run_then_answers_in_order():
    async def go() -> None:
        runner, _, p, t = await calling(b'{"x": 3}')
        await turns()
        t.writes.clear()
        p.data_received(encode(Tflush(9, 4)))
        await turns()
        r = t.replies()
        assert [(type(m), m.tag) for m in r] == [(Rerror, 4), (Rflush, 9)]
        assert r[0].ename == "interrupted"
        assert runner.killed == 1
    asyncio.run(go())


def test_hang_up_while_a_read_waits_kills_the_run_and_sends_nothing():
    async def go() -> None:
        runner, fs, p, t = await calling(b'{"x": 4}')
        await turns()
        t.writes.clear()
        p.connection_lost(None)
        await turns()
        assert t.writes == [] and runner.killed == 1
        assert fs.agent_files.calls.sched.live == set()
    asyncio.run(go())


def test_two_readers_of_one_call_both_get_the_result():
    async def go() -> None:
        runner, _, p, t = await calling(b'{"x": 5}')
        p.data_received(encode(Tread(5, 7, 0, 10)))      # a second Tread of the same fid
        await turns()
        runner.gate.set()
        await turns()
        reads = {m.tag: m.data for m in t.replies() if type(m) is Rread}
        assert reads == {4: b'{"x": 5}', 5: b'{"x": 5}'[:10]}
    asyncio.run(go())


async def handing_over(args: bytes) -> tuple[GatedRunner, Any, NinePProtocol, Transport]:
    """setup() with a run that waits for its gate, and the call with `args` written on a
    fid clunked at once (`echo … > call`): its result is handed over to out and err."""
    runner = GatedRunner()
    runner.gate = asyncio.Event()
    fs, p, t = await setup(runner)
    p.data_received(b"".join(encode(m) for m in (
        Twalk(1, 0, 7, CALL), Topen(2, 7, OWRITE), Twrite(3, 7, 0, args), Tclunk(4, 7))))
    await turns()
    return runner, fs, p, t


def test_a_read_of_out_waits_for_the_run_and_its_flush_leaves_the_run_alone():
    async def go() -> None:
        runner, fs, p, t = await handing_over(b'{"x": 6}')
        out = CALL[:-1] + ("out",)
        p.data_received(encode(Twalk(10, 0, 8, out)) + encode(Topen(11, 8, OREAD)) +
                        encode(Tread(12, 8, 0, 100)))
        await turns()
        call = fs.agent_files.calls.latest(fs.store.sessions["s"].agents["a"])["echo"]
        assert len(call.waiters) == 1                 # out's reader, handed the result
        t.writes.clear()
        p.data_received(encode(Tflush(13, 12)))
        await turns()
        r = t.replies()
        assert [(type(m), m.tag) for m in r] == [(Rerror, 12), (Rflush, 13)]
        assert runner.killed == 0 and call.waiters == []   # no waiter left behind
        p.data_received(encode(Tread(14, 8, 0, 100)))   # the wait passed to the next read
        await turns()
        assert len(call.waiters) == 1
        runner.gate.set()
        await turns()
        reads = {m.tag: m.data for m in t.replies() if type(m) is Rread}
        assert reads == {14: b'{"x": 6}'}
        assert call.waiters == []
    asyncio.run(go())


def test_hang_up_of_an_out_reader_leaves_the_run_and_no_waiter():
    async def go() -> None:
        runner, fs, p, t = await handing_over(b'{"x": 7}')
        call = fs.agent_files.calls.latest(fs.store.sessions["s"].agents["a"])["echo"]
        q, u = NinePProtocol(fs, ServerConfig(msize=MSIZE), set()), Transport()
        q.connection_made(u)                          # a second connection reads out
        q.data_received(encode(Tversion(NOTAG, MSIZE, "9P2000")) +
                        encode(Tattach(1, 0, NOFID, "watcher", "")) +
                        encode(Twalk(2, 0, 8, CALL[:-1] + ("out",))) +
                        encode(Topen(3, 8, OREAD)) + encode(Tread(4, 8, 0, 100)))
        await turns()
        assert len(call.waiters) == 1
        q.connection_lost(None)
        await turns()
        assert runner.killed == 0 and call.waiters == []
        t.writes.clear()
        p.data_received(encode(Twalk(10, 0, 8, CALL[:-1] + ("out",))) +
                        encode(Topen(11, 8, OREAD)) + encode(Tread(12, 8, 0, 100)))
        await turns()
        assert len(call.waiters) == 1                 # handed to the next reader
        runner.gate.set()
        await turns()
        assert [m.data for m in t.replies() if type(m) is Rread] == [b'{"x": 7}']
    asyncio.run(go())


def _second(fs: Any) -> tuple[NinePProtocol, Transport]:
    """Another connection to the same tree, attached (a 9pfuse mount beside an agent)."""
    q, u = NinePProtocol(fs, ServerConfig(msize=MSIZE), set()), Transport()
    q.connection_made(u)
    q.data_received(encode(Tversion(NOTAG, MSIZE, "9P2000")) +
                    encode(Tattach(1, 0, NOFID, "shell", "")))
    u.writes.clear()
    return q, u


def _read_streams(q: NinePProtocol, reads: list[tuple[int, str, int]]) -> None:
    q.data_received(b"".join(encode(m) for f, name, tag in reads for m in (
        Twalk(tag, 0, f, CALL[:-1] + (name,)), Topen(tag + 1, f, OREAD),
        Tread(tag + 2, f, 0, 100), Tclunk(tag + 3, f))))


def test_out_and_err_wait_only_for_the_reader_a_call_was_handed_over_to():
    """Issue 46 item 2: the rule of toolsrv(4).  A call written and read on one fid
    (client_9p's rdwr) hands out and err to its own connection only (a front reads a
    remote's err beside the call): another connection's reads (`grep -r` over a mount)
    answer at once, empty while it runs.  A call whose writer clunks without reading
    hands the wait to the first read of out or err at offset 0 from anywhere; every other
    read answers at once."""
    async def go() -> None:
        runner, fs, p, t = await calling(b'{"x": 8}')     # written and read on one fid
        await turns()
        call = fs.agent_files.calls.latest(fs.store.sessions["s"].agents["a"])["echo"]
        q, u = _second(fs)
        _read_streams(q, [(8, "out", 10), (9, "err", 14), (8, "out", 18)])
        await turns()
        assert {m.tag: m.data for m in u.replies() if type(m) is Rread} == \
            {12: b"", 16: b"", 20: b""}
        assert len(call.waiters) == 1                 # only the writer's read of call
        t.writes.clear()
        _read_streams(p, [(8, "err", 10)])           # the front's err, beside its call
        await turns()
        assert len(call.waiters) == 2
        runner.gate.set()
        await turns()
        assert {m.tag: m.data for m in t.replies() if type(m) is Rread} == \
            {4: b'{"x": 8}', 12: b""}

        runner.gate.clear()                           # now `echo … > call` on p
        p.data_received(b"".join(encode(m) for m in (
            Twalk(20, 0, 20, CALL), Topen(21, 20, OWRITE), Twrite(22, 20, 0, b'{"x": 9}'),
            Tclunk(23, 20))))
        await turns()
        call = fs.agent_files.calls.latest(fs.store.sessions["s"].agents["a"])["echo"]
        assert call.handed is True and call.heir is None
        u.writes.clear()
        _read_streams(q, [(8, "out", 30), (9, "out", 34), (10, "err", 38), (11, "err", 42)])
        await turns()
        got = {m.tag: m.data for m in u.replies() if type(m) is Rread}
        assert got == {36: b"", 40: b"", 44: b""}     # all but the first: at once
        assert len(call.waiters) == 1 and call.handed is False
        runner.gate.set()
        await turns()
        got = {m.tag: m.data for m in u.replies() if type(m) is Rread}
        assert got == {36: b"", 40: b"", 44: b"", 32: b'{"x": 9}'}   # the first: the whole
    asyncio.run(go())


@pytest.mark.parametrize("args, stdin", [
    ('{"s": "caf\u00e9"}', '{"s": "caf\u00e9"}'.encode()),      # UTF-8 as written
    ('{"s": "\\ud800"}', b'{"s": "\\ud800"}'),                  # a lone surrogate: escaped
])
def test_the_tool_reads_the_args_as_json(args, stdin):
    async def go() -> None:
        runner = GatedRunner()
        fs, p, t = await setup(runner)
        p.data_received(pipelined(args.encode()))
        await turns()
        assert runner.requests[0].stdin == stdin
        assert json.loads(runner.requests[0].stdin) == json.loads(args)
        log = bytes(fs.store.sessions["s"].agents["a"].log)
        assert b"call echo " in log and b"-> started" in log
    asyncio.run(go())


def test_walks_reuse_the_nodes_of_a_session_and_the_new_session_gets_new_ones():
    async def go() -> None:
        fs, p, t = await setup(GatedRunner())

        def walk() -> list:
            node = fs.root
            out = []
            for name in CALL:
                node = node.lookup(name)
                out.append(node)
            return out

        first, again = walk(), walk()
        assert all(x is y for x, y in zip(first, again))
        qids = [n.qid() for n in first]
        fs.store.remove("s")
        assert not first[-1].alive()
        s = fs.store.create("s")
        fs.store.create_agent(s, "a")
        fs.agent_files.calls.apply(s.agents["a"], "tool_load echo")
        fresh = walk()
        assert fresh[-1].alive() and fresh[-1] is not first[-1]
        assert [n.qid().path for n in fresh[1:]] != [q.path for q in qids[1:]]
        fs.agent_files.calls.apply(s.agents["a"], "tool_unload echo")
        assert fs.root.lookup("session").lookup("s").lookup("agent").lookup("a") \
            .lookup("tools").lookup("echo") is None
        assert not fresh[-1].alive()
    asyncio.run(go())


def test_a_call_leaves_no_cyclic_garbage():
    """Everything a call allocates is freed by reference counting when the call is over:
    nothing waits for the cyclic collector, whose passes would then free a call's worth of
    objects (0.3 ms each, every 20-30 calls, on the development VM)."""
    import gc

    async def go() -> list:
        fs, p, t = await setup(GatedRunner())
        for i in range(3):                         # warm: kept nodes, validators, qids
            p.data_received(pipelined(b'{"warm": %d}' % i) + encode(Tclunk(5, 7)))
            await turns()
        gc.collect()
        gc.disable()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            for i in range(20):
                p.data_received(pipelined(b'{"x": %d}' % i))
                await turns()
                p.data_received(encode(Tclunk(5, 7)))
            gc.collect()
            garbage = [type(o).__name__ for o in gc.garbage]
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
            gc.enable()
        assert len([m for m in t.replies() if type(m) is Rread]) == 23
        return garbage

    assert asyncio.run(go()) == []
