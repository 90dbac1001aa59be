"""Fuzzing the server: arbitrary 9P message sequences over one connection.

Hypothesis builds sequences from a vocabulary that knows the served tree (so
sequences reach ctl, call, out, revwait and session creation, not only
"file not found") mixed with hostile values: unknown and duplicate fids and
tags, flushes of anything, Tversion mid-stream, bad names, bad modes, huge
offsets and counts, garbage writes.  Each sequence runs against a fresh tree
(fake registry, fake runner) over an in-memory Conn, and must leave behind:

- no exception escaping `Conn.receive` and none caught and logged by it
  (no "internal server error" reply, no ERROR log line from toolsrv);
- exactly one reply per request, except those a successful Tversion aborted; every
  Rflush after the reply of the request it flushed; no reply above msize;
- after hang-up: no fid, no in-flight tag, no task left running;
- a second, well-behaved connection on the same tree that still answers.

The same invariants run over a real socket (bytes, not messages) against a
listening server, and on every sequence kept in tests/corpus/server/.
`-m slow` runs the long version (see doc/reliability.md for counts).
"""
from __future__ import annotations

import asyncio
import logging
import pathlib
import shutil
import socket
import struct
import tempfile

import pytest
from hypothesis import HealthCheck, event, given, settings, strategies as st
from hypothesis.control import currently_in_test_context

from toolsrv.proto import (
    DMDIR, IOHDRSZ, NOFID, NOTAG, Dir, Framer, Qid, Rattach, Rerror, Rflush, Rread, Rversion,
    Tattach, Tauth, Tclunk, Tcreate, Tflush, Topen, Tread, Tremove, Tstat, Tversion, Twalk,
    Twrite, Twstat, encode, format_msg, parse_msg,
)
from toolsrv import errors as E
from toolsrv.run.runner import RunResult
from toolsrv.serve.server import Conn, ServerConfig

from fakes import FakeRegistry, ThreadServer, make_fs

CORPUS = pathlib.Path(__file__).parent.parent / "corpus" / "server"
YIELD = "!yield"
COUNTS = {"memory": 0, "socket": 0, "corpus": 0}


class FuzzRunner:
    """Echoes stdin; args mentioning "slow" take a few loop turns, "fail" exits 2."""

    runs = 0

    async def run(self, req):
        FuzzRunner.runs += 1
        if b"slow" in req.stdin:
            await asyncio.sleep(0.002)
        if b"fail" in req.stdin:
            return RunResult(stderr=b"it failed\n", exit_code=2)
        return RunResult(stdout=req.stdin, exit_code=0)


# ------------------------------------------------------------------ vocabulary

NAMES = ["revision", "revwait", "tools", "index", "errors", "echo", "file_read", "meta",
         "schema", "prompt", "session", "s", "t", "agent", "a", "b", "ctl", "log", "schemas",
         "call", "out", "err", "status", "cwd", "sandbox", "..", ".", "", "x", "a/b", "/",
         "\x00", "é", "n" * 200]
PATHS = [("session", "s", "agent", "a", "tools", "echo", f) for f in ("call", "out", "status")] + [
    ("session", "s", "agent", "a", "ctl"), ("session", "s", "agent", "a", "log"),
    ("session", "s", "agent", "a", "schemas"), ("session", "s", "cwd"),
    ("session", "s", "sandbox"), ("session", "s", "agent"), ("session",), ("revwait",),
    ("revision",), ("tools", "echo", "meta"), ("tools", "index"), ("..", "..", "tools"),
    ("session", "s", "agent", "a", "tools", "file_read", "call")]
DATA = [b"tool_load echo\n", b"tool_load echo file_read", b"tool_unload echo\n",
        b"cancel echo\n", b"bogus\n", b"tool_load nosuch\n", b'{"x": 1}', b'{"slow": 1}',
        b'{"fail": 1}', b'{"x":', b"1}", b"[1, 2]", b'{"elevated": true}', b"\xff\xfe",
        b"/tmp", b"default", b"../../etc", b"", b"x" * 5000, b"0\n"]

fids = st.sampled_from([1, 2, 3, 4, 5, 6, NOFID] * 3 + [0])   # the root (fid 0), now and then
from_fids = st.sampled_from([0, 0, 0, 1, 2, 3, 4])
tags = st.sampled_from([0, 1, 2, 3, 4, 5, NOTAG])
msizes = st.sampled_from([0, 100, 256, 8192 + IOHDRSZ, 65536 + IOHDRSZ, 0xFFFFFFFF])
modes = st.one_of(st.sampled_from([0, 1, 2, 3, 0x10, 0x11, 0x12, 0x40, 0x20]),
                  st.integers(0, 0xFF))
offsets = st.one_of(st.sampled_from([0, 0, 0, 1, 100, 1 << 63]), st.integers(0, (1 << 64) - 1))
counts = st.one_of(st.sampled_from([0, 1, 7, 4096, 8192, 65536]), st.integers(0, 0xFFFFFFFF))
wnames = st.one_of(st.sampled_from(PATHS),
                   st.lists(st.sampled_from(NAMES), max_size=17).map(tuple))
datas = st.one_of(st.sampled_from(DATA), st.binary(max_size=64))
wstats = st.sampled_from([Dir.notouch(), Dir.notouch(length=0), Dir.notouch(length=5),
                          Dir.notouch(name="new"), Dir.notouch(mode=0o777),
                          Dir(0, 0, Qid(), 0, 0, 0, 0, "", "", "", "")])

versions = st.builds(Tversion, tags, msizes, st.sampled_from(["9P2000", "9P2000.L", "", "9P"]))
messages = st.one_of(
    st.builds(Tauth, tags, fids, st.sampled_from(["", "u"]), st.sampled_from(["", "x"])),
    st.builds(Tattach, tags, fids, fids, st.sampled_from(["", "u", "glenda"]),
              st.sampled_from(["", "x"])),
    st.builds(Tflush, tags, tags),
    st.builds(Twalk, tags, from_fids, fids, wnames),
    st.builds(Topen, tags, fids, modes),
    st.builds(Tcreate, tags, fids, st.sampled_from(["s", "t", "a", "b", "..", "x/y", ""]),
              st.sampled_from([DMDIR | 0o755, 0o644, 0]), modes),
    st.builds(Tread, tags, fids, offsets, counts),
    st.builds(Twrite, tags, fids, offsets, datas),
    st.builds(Tclunk, tags, fids),
    st.builds(Tremove, tags, fids),
    st.builds(Tstat, tags, fids),
    st.builds(Twstat, tags, fids, wstats),
)
PRELUDE = [Tversion(NOTAG, 8192 + IOHDRSZ, "9P2000"), Tattach(0, 0, NOFID, "fuzz", "")]
AGENT = ("session", "s", "agent", "a")
files = st.sampled_from([AGENT + ("ctl",), AGENT + ("tools", "echo", "call"),
                         AGENT + ("tools", "file_read", "call"), ("session", "s", "cwd"),
                         AGENT + ("tools", "echo", "out"), ("revwait",)])
newfids = st.sampled_from([1, 2, 3, 4])
calls = st.builds(lambda t, t2, t3, f, d, end: [
    Twalk(t, 0, f, AGENT + ("tools", "echo", "call")), Topen(t, f, 2), Twrite(t, f, 0, d),
    Tread(t2, f, 0, 4096), Tclunk(t3, f) if end else Tflush(t3, t2)],
    tags, tags, tags, newfids,
    st.sampled_from([b'{"x": 1}', b'{"slow": 1}', b'{"fail": 1}', b'{"slow": "fail"}']),
    st.booleans())
# coherent steps, so that sequences get deep: sessions, agents, loaded tools, runs, flushes
macros = st.one_of(
    st.builds(lambda t, f, n: [Twalk(t, 0, f, ("session",)), Tcreate(t, f, n, DMDIR | 0o755, 0),
                               Tclunk(t, f)], tags, newfids, st.sampled_from(["s", "s", "t"])),
    st.builds(lambda t, f, n: [Twalk(t, 0, f, ("session", "s", "agent")),
                               Tcreate(t, f, n, DMDIR | 0o755, 0), Tclunk(t, f)],
              tags, newfids, st.sampled_from(["a", "a", "b"])),
    st.builds(lambda t, f, d: [Twalk(t, 0, f, AGENT + ("ctl",)), Topen(t, f, 2),
                               Twrite(t, f, 0, d), Tclunk(t, f)],
              tags, newfids, st.sampled_from([b"tool_load echo file_read\n", b"tool_load echo",
                                              b"cancel echo\n", b"tool_unload file_read\n"])),
    st.builds(lambda t, t2, f, p, d: [Twalk(t, 0, f, p), Topen(t, f, 2), Twrite(t, f, 0, d),
                                      Tread(t2, f, 0, 4096)],
              tags, tags, newfids, files, datas),
    *[calls] * 3,

    st.builds(lambda t, p: [Twalk(t, 0, 5, p), Tremove(t, 5)], tags,
              st.sampled_from([("session", "t")] * 4 + [AGENT[:3] + ("b",)] * 3
                              + [AGENT, ("session", "s")])),
    st.builds(lambda t, old: [Tflush(t, old)], tags, tags),
)
SETUP = PRELUDE + [  # a session s, an agent a with echo loaded; fids 1-4 free again
    Twalk(0, 0, 1, ("session",)), Tcreate(0, 1, "s", DMDIR | 0o755, 0), Tclunk(0, 1),
    Twalk(0, 0, 1, ("session", "s", "agent")), Tcreate(0, 1, "a", DMDIR | 0o755, 0),
    Tclunk(0, 1), Twalk(0, 0, 1, AGENT + ("ctl",)), Topen(0, 1, 1),
    Twrite(0, 1, 0, b"tool_load echo\n"), Tclunk(0, 1)]
single = messages.map(lambda m: [m])
hostile_steps = st.one_of(*[single] * 4, *[macros] * 4, st.just([YIELD]),
                          versions.map(lambda m: [m]))
deep_steps = st.one_of(*[calls] * 4, *[macros] * 4, single, st.just([YIELD]))
flat = lambda steps: [m for step in steps for m in step]  # noqa: E731
sequences = st.one_of(   # half start from an agent with a tool loaded; half from anywhere
    st.lists(deep_steps, min_size=3, max_size=30).map(lambda s: SETUP + flat(s)),
    st.tuples(st.sampled_from([PRELUDE, PRELUDE, []]),
              st.lists(hostile_steps, min_size=1, max_size=30)).map(lambda t: t[0] + flat(t[1])))


# ------------------------------------------------------------------ the check

class ErrorLog(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.ERROR)
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


async def settle(pred, turns: int = 400) -> bool:
    """Let the loop run until pred() holds (bounded by loop turns and a short sleep)."""
    for i in range(turns):
        if pred():
            return True
        await asyncio.sleep(0 if i < 100 else 0.005)
    return pred()


async def good_client_works(fs) -> None:
    """A second connection on the same tree negotiates, attaches, walks and reads."""
    got: list = []
    c = Conn(fs, got.append, ServerConfig(msize=8192 + IOHDRSZ), "good")
    for m in [Tversion(NOTAG, 8192 + IOHDRSZ, "9P2000"), Tattach(1, 0, NOFID, "good", ""),
              Twalk(2, 0, 1, ("revision",)), Topen(3, 1, 0), Tread(4, 1, 0, 100)]:
        c.receive(m)
    assert [type(r) for r in got[:2]] == [Rversion, Rattach], got
    assert got[-1] == Rread(4, f"{fs.registry.revision}\n".encode()), got
    c.hangup()


async def run_sequence(seq: list, tmp: str) -> None:
    fs = make_fs(tmp, FakeRegistry(), revwait_timeout=0.02, runner=FuzzRunner())
    sent: list = []       # (tag, message) of every request handled
    replies: list = []
    aborted = 0
    msize = [0]
    flushes: list = []    # (replies so far, tag, oldtag) of flushes of a live request

    def send(r) -> None:
        data = encode(r)                      # every reply must encode
        if msize[0]:
            assert len(data) <= msize[0], f"reply above msize {msize[0]}: {format_msg(r)}"
        replies.append(r)

    runs0 = FuzzRunner.runs
    conn = Conn(fs, send, ServerConfig(msize=65536 + IOHDRSZ, max_fids=8, max_inflight=4))
    for m in seq:
        if m == YIELD:
            await asyncio.sleep(0)
            continue
        in_flight = len(conn.inflight)
        if (type(m) is Tflush and m.tag not in conn.inflight and m.oldtag != m.tag
                and m.oldtag in conn.inflight and conn.inflight[m.oldtag].flushing is None):
            flushes.append((len(replies), m.tag, m.oldtag))
        conn.receive(m)
        sent.append(m)
        if type(m) is Tversion:
            msize[0] = conn.msize
            if replies[-1] == Rversion(m.tag, conn.msize, "9P2000"):
                aborted += in_flight      # only a successful Tversion aborts (version(5))
    assert await settle(lambda: not conn.inflight), f"requests never answered: {conn.inflight}"
    assert conn.held == sum(f.held for f in conn.fids.values()) >= 0
    internal = [r for r in replies if type(r) is Rerror and r.ename == E.EINTERNAL]
    assert not internal, f"internal error replies: {internal}"
    assert len(replies) == len(sent) - aborted, \
        f"{len(sent)} requests, {aborted} aborted, {len(replies)} replies"
    _check_flush_order(replies, flushes)
    for what, n in [("tool ran", FuzzRunner.runs - runs0), ("session made", len(fs.store.sessions)),
                    ("live request flushed", len(flushes)),
                    ("Rerror", sum(type(r) is Rerror for r in replies))]:
        if n and currently_in_test_context():
            event(what)
    conn.hangup()
    assert not conn.fids and not conn.inflight and conn.held == 0
    me = asyncio.current_task()
    assert await settle(lambda: asyncio.all_tasks() == {me}), \
        f"tasks left: {asyncio.all_tasks() - {me}}"
    await good_client_works(fs)


def _check_flush_order(replies: list, flushes: list) -> None:
    """Each Rflush comes after the reply of the request it flushed (flush(5))."""
    for start, tag, oldtag in flushes:
        rest = replies[start:]
        rflush = next((i for i, r in enumerate(rest) if r.tag == tag and type(r) is Rflush),
                      None)
        if rflush is None:
            continue                  # aborted by a Tversion, with the request
        old = next((i for i, r in enumerate(rest) if r.tag == oldtag), None)
        assert old is not None and old < rflush, \
            f"Rflush tag {tag} before the reply to tag {oldtag}: {rest}"


def check(seq: list) -> None:
    tmp = tempfile.mkdtemp(prefix="fz.", dir="/tmp")
    handler = ErrorLog()
    logger = logging.getLogger("toolsrv")
    logger.addHandler(handler)
    try:
        asyncio.run(run_sequence(seq, tmp))
    finally:
        logger.removeHandler(handler)
        shutil.rmtree(tmp, ignore_errors=True)
    assert not handler.records, [r.getMessage() for r in handler.records]


# ------------------------------------------------------------------ tests



FAST = settings(max_examples=150, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=20000, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))


@FAST
@given(sequences)
def test_fuzz_sequences(seq) -> None:
    COUNTS["memory"] += 1
    check(seq)


@pytest.mark.slow
@SLOW
@given(sequences)
def test_fuzz_sequences_long(seq) -> None:
    COUNTS["memory"] += 1
    check(seq)


def read_corpus(path: pathlib.Path) -> list:
    seq: list = []
    for raw in path.read_text().splitlines():
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        seq.append(YIELD if line == YIELD else parse_msg(line))
    return seq


def write_corpus(path: pathlib.Path, seq: list, why: str) -> None:
    """Save a sequence (hypothesis's falsifying example, say) in the corpus form."""
    lines = [f"# {why}"] + [YIELD if m == YIELD else format_msg(m) for m in seq]
    path.write_text("\n".join(lines) + "\n")


CORPUS_FILES = sorted(CORPUS.glob("*.txt"))


@pytest.mark.parametrize("path", CORPUS_FILES, ids=[p.stem for p in CORPUS_FILES])
def test_corpus(path: pathlib.Path) -> None:
    COUNTS["corpus"] += 1
    check(read_corpus(path))


def test_corpus_is_there() -> None:
    assert len(CORPUS_FILES) >= 5


# ------------------------------------------------------------------ over a socket

@pytest.fixture(scope="module")
def listening():
    tmp = tempfile.mkdtemp(prefix="fz.", dir="/tmp")
    fs = make_fs(tmp, FakeRegistry(), revwait_timeout=0.02, runner=FuzzRunner())
    srv = ThreadServer(fs, [f"unix!{tmp}/ns/toolsrv"],
                       ServerConfig(msize=65536 + IOHDRSZ, max_fids=8, max_inflight=4)).start()
    yield srv
    srv.stop()
    shutil.rmtree(tmp, ignore_errors=True)


def _roundtrip_good(path: str) -> None:
    sk = socket.socket(socket.AF_UNIX)
    sk.settimeout(10)
    sk.connect(path)
    fr = Framer(8192 + IOHDRSZ)
    got: list = []
    sk.sendall(b"".join(encode(m) for m in [
        Tversion(NOTAG, 8192 + IOHDRSZ, "9P2000"), Tattach(1, 0, NOFID, "good", ""),
        Twalk(2, 0, 1, ("tools", "index")), Topen(3, 1, 0), Tread(4, 1, 0, 4096)]))
    while len(got) < 5:
        data = sk.recv(65536)
        assert data, "the good connection was hung up on"
        got += fr.feed(data)
    sk.close()
    assert type(got[-1]) is Rread and got[-1].data.startswith(b"echo\t"), got


def _send_sequence(path: str, data: bytes) -> None:
    sk = socket.socket(socket.AF_UNIX)
    sk.settimeout(10)
    sk.connect(path)
    try:
        sk.sendall(data)
        sk.shutdown(socket.SHUT_WR)
        while sk.recv(65536):          # read until the server is done with us
            pass
    except (ConnectionResetError, BrokenPipeError):
        pass
    finally:
        sk.close()


def wire(m) -> bytes:
    """The frame of m; a Twalk our codec refuses to encode (17 names, a NUL) is built by
    hand, so the server meets it as a hostile client would send it."""
    try:
        return encode(m)
    except ValueError:
        if type(m) is not Twalk:
            raise
        names = b"".join(struct.pack("<H", len(n.encode())) + n.encode() for n in m.wname)
        body = struct.pack("<IIH", m.fid, m.newfid, len(m.wname)) + names
        return struct.pack("<IBH", 7 + len(body), 110, m.tag) + body


def _socket_case(srv, seq: list, junk: bytes) -> None:
    COUNTS["socket"] += 1
    path = srv.addrs[0].path
    data = b"".join(wire(m) for m in seq if m != YIELD) + junk
    _send_sequence(path, data)
    _roundtrip_good(path)
    # after hang-up the server holds nothing of that connection
    assert srv.call(lambda: len(srv.conns)) == 0 or _settled_conns(srv)


def _settled_conns(srv) -> bool:
    import time
    for _ in range(200):
        if srv.call(lambda: len(srv.conns)) == 0:
            return True
        time.sleep(0.01)
    return False


@settings(max_examples=40, deadline=None, database=None, suppress_health_check=list(HealthCheck))
@given(seq=sequences, junk=st.one_of(st.just(b""), st.binary(max_size=40)))
def test_fuzz_over_socket(listening, seq, junk) -> None:
    _socket_case(listening, seq, junk)


@pytest.mark.slow
@settings(max_examples=3000, deadline=None, database=None,
          suppress_health_check=list(HealthCheck))
@given(seq=sequences, junk=st.one_of(st.just(b""), st.binary(max_size=40)))
def test_fuzz_over_socket_long(listening, seq, junk) -> None:
    _socket_case(listening, seq, junk)


def test_zz_report_counts(capsys) -> None:
    """Print how many inputs this module ran (read by doc/reliability.md)."""
    with capsys.disabled():
        print(f"\nfuzz_server inputs: {COUNTS}")
    assert sum(COUNTS.values()) > 0


def test_found_by_the_long_fuzz_nul_in_a_cwd_or_ctl_word() -> None:
    """A NUL written to cwd or ctl once made an Rerror that could not be encoded."""
    seq = list(SETUP)
    for path, data in [(("session", "s", "cwd"), b"/\0x"), (AGENT + ("ctl",), b"tool_lo\0ad x")]:
        seq += [Twalk(0, 0, 1, path), Topen(0, 1, 2), Twrite(0, 1, 0, data), Tclunk(0, 1)]
    check(seq)
