"""Fuzzing the codec: mutated frames, arbitrary chunkings, and a corpus of odd inputs.

test_codec.py already feeds decode() random bytes.  Random bytes rarely get
past the header, so this file starts from valid frames and mutates them (a
byte flipped or set, a size or string length rewritten, truncated, extended,
spliced), which reaches every field decoder.  Invariants, as h11's fuzz
target states them, plus three the server relies on:

- decode returns None (incomplete), or (message, consumed), or (Malformed,
  consumed) for a sound frame with bad content, or raises ProtocolError;
  nothing else, ever;
- what decodes is canonical: encode(message) gives back exactly the bytes
  consumed, a Malformed carries the frame's own type and tag, and the trace
  form round-trips (parse_msg(format_msg(m)) == m);
- a Framer fed the same bytes in any chunking yields the same messages as a
  decode loop, and never holds more than msize bytes of a partial frame;
- every input kept in tests/corpus/codec/ still gives its recorded outcome.
"""
from __future__ import annotations

import pathlib
import struct

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from toolsrv.proto import Framer, Malformed, ProtocolError, decode, encode, format_msg, parse_msg

from test_codec import SAMPLES, messages

CORPUS = pathlib.Path(__file__).parent.parent / "corpus" / "codec"
MSIZE = 8192 + 24
COUNTS = {"mutated": 0, "chunked": 0, "framer_bound": 0, "corpus": 0}


def outcome(buf: bytes, msize: int | None = None) -> str:
    """decode's verdict as a word: a message name, 'incomplete' or 'error'."""
    try:
        r = decode(buf, msize)
    except ProtocolError:
        return "error"
    if r is None:
        return "incomplete"
    m, n = r
    assert 7 <= n <= len(buf) and n == struct.unpack_from("<I", buf)[0]
    assert parse_msg(format_msg(m)) == m, format_msg(m)
    if type(m) is Malformed:       # one bad request: its header as sent, nothing to encode
        assert (m.type, m.tag) == (buf[4], buf[5] | buf[6] << 8) and m.why
        return "Malformed"
    assert encode(m) == bytes(buf[:n]), f"not canonical: {format_msg(m)}"
    return type(m).__name__


# ------------------------------------------------------------------ mutations

def _mutate(frame: bytes, kind: str, i: int, v: int, junk: bytes) -> bytes:
    b = bytearray(frame)
    if len(b) < 4:
        return bytes(b + junk) if kind in ("extend", "splice") else bytes(b)
    i %= len(b)
    if kind == "flip":
        b[i] ^= 1 << (v % 8)
    elif kind == "set":
        b[i] = v & 0xFF
    elif kind == "size":
        struct.pack_into("<I", b, 0, v)
    elif kind == "u16" and len(b) >= 9:      # a string length, count, nwname...
        j = 7 + i % (len(b) - 8)
        struct.pack_into("<H", b, j, v & 0xFFFF)
    elif kind == "u32" and len(b) >= 11:
        j = 7 + i % (len(b) - 10)
        struct.pack_into("<I", b, j, v)
    elif kind == "truncate":
        del b[i:]
    elif kind == "extend":
        b += junk
        struct.pack_into("<I", b, 0, len(b))   # the junk is inside the frame
    elif kind == "splice":
        b[i:i] = junk
    return bytes(b)


mutations = st.lists(st.tuples(
    st.sampled_from(["flip", "set", "size", "u16", "u32", "truncate", "extend", "splice"]),
    st.integers(0, 1 << 16), st.integers(0, 0xFFFFFFFF), st.binary(max_size=8)),
    min_size=1, max_size=4)
frames = st.one_of(st.sampled_from(SAMPLES), messages(length_max=1 << 40)).map(encode)

FAST = settings(max_examples=500, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))
SLOW = settings(max_examples=50000, deadline=None, database=None,
                suppress_health_check=list(HealthCheck))




def mutated_case(frame: bytes, muts: list) -> None:
    COUNTS["mutated"] += 1
    for kind, i, v, junk in muts:
        frame = _mutate(frame, kind, i, v, junk)
    outcome(frame)
    outcome(frame, MSIZE)


@FAST
@given(frames, mutations)
def test_mutated_frames(frame, muts) -> None:
    mutated_case(frame, muts)


@pytest.mark.slow
@SLOW
@given(frames, mutations)
def test_mutated_frames_long(frame, muts) -> None:
    mutated_case(frame, muts)


# ------------------------------------------------------------------ framing

def chunked_case(frames_: list[bytes], tail: bytes, cuts: list[int]) -> None:
    """The Framer agrees with a decode loop, however the stream is cut."""
    COUNTS["chunked"] += 1
    stream = b"".join(frames_) + tail
    want: list = []
    p, err = 0, False
    while True:
        try:
            r = decode(stream[p:], MSIZE)
        except ProtocolError:
            err = True
            break
        if r is None:
            break
        want.append(r[0])
        p += r[1]
    fr, got, raised = Framer(MSIZE), [], False
    points = sorted({c % (len(stream) + 1) for c in cuts}) + [len(stream)]
    prev = 0
    for c in points:
        try:
            got += fr.feed(stream[prev:c])
        except ProtocolError:
            raised = True
            break
        assert fr.pending < MSIZE, "a partial frame above msize was kept"
        prev = c
    assert raised == err
    if not err:
        assert got == want and fr.pending == len(stream) - p
    else:                             # what came before the bad frame may be lost
        assert got == want[:len(got)]


small = st.one_of(st.sampled_from(SAMPLES), messages(length_max=1 << 40)).map(encode).filter(
    lambda b: len(b) <= MSIZE)


@FAST
@given(st.lists(small, max_size=6), st.binary(max_size=20), st.lists(st.integers(0, 1 << 16)))
def test_any_chunking(frames_, tail, cuts) -> None:
    chunked_case(frames_, tail, cuts)


@pytest.mark.slow
@SLOW
@given(st.lists(small, max_size=6), st.binary(max_size=20), st.lists(st.integers(0, 1 << 16)))
def test_any_chunking_long(frames_, tail, cuts) -> None:
    chunked_case(frames_, tail, cuts)


@FAST
@given(st.lists(st.binary(min_size=1, max_size=300), max_size=30))
def test_framer_holds_at_most_msize(chunks) -> None:
    """Whatever arrives, a partial frame never makes the framer hold msize bytes or more."""
    COUNTS["framer_bound"] += 1
    fr = Framer(256)
    for c in chunks:
        try:
            fr.feed(c)
        except ProtocolError:
            return
        assert fr.pending < 256


# ------------------------------------------------------------------ corpus

def read_case(path: pathlib.Path) -> tuple[str, bytes]:
    """A corpus file: '# comment' lines, 'expect: OUTCOME', then hex (spaces allowed)."""
    expect, hexes = "", []
    for line in path.read_text().splitlines():
        line = line.strip()
        if line.startswith("#") or not line:
            continue
        if line.startswith("expect:"):
            expect = line.split(":", 1)[1].strip()
        else:
            hexes.append(line)
    return expect, bytes.fromhex(" ".join(hexes))


CASES = sorted(CORPUS.glob("*.hex"))


@pytest.mark.parametrize("path", CASES, ids=[p.stem for p in CASES])
def test_corpus(path) -> None:
    COUNTS["corpus"] += 1
    expect, data = read_case(path)
    assert expect, f"{path.name}: no 'expect:' line"
    assert outcome(data, MSIZE) == expect


def test_corpus_is_there() -> None:
    assert len(CASES) >= 10


def test_zz_report_counts(capsys) -> None:
    with capsys.disabled():
        print(f"\nfuzz_codec inputs: {COUNTS}")
    assert sum(COUNTS.values()) > 0
