"""Framer: a byte stream fed whole, byte by byte, in random chunks, and hostile."""
from __future__ import annotations

import struct

import pytest
from hypothesis import given, strategies as st

from toolsrv.proto import Framer, ProtocolError, Rclunk, Rread, Tclunk, Tversion, encode
from test_codec import FAST, SAMPLES

STREAM = b"".join(map(encode, SAMPLES))
MSIZE = max(len(encode(m)) for m in SAMPLES)


def test_default_msize() -> None:
    assert Framer().msize == 8192 + 24


def test_fed_whole() -> None:
    f = Framer(MSIZE)
    assert f.feed(STREAM) == SAMPLES
    assert f.pending == 0


def test_fed_byte_by_byte() -> None:
    f = Framer(MSIZE)
    out, done = [], 0
    for i in range(len(STREAM)):
        got = f.feed(STREAM[i:i + 1])
        done += sum(len(encode(m)) for m in got)
        out += got
        assert f.pending == i + 1 - done
    assert out == SAMPLES and f.pending == 0


@FAST
@given(st.lists(st.integers(1, 3000), max_size=40))
def test_fed_in_random_chunks(cuts) -> None:
    f, out, pos = Framer(MSIZE), [], 0
    for n in cuts:
        out += f.feed(STREAM[pos:pos + n])
        pos += n
    out += f.feed(STREAM[pos:])
    assert out == SAMPLES and f.pending == 0


@pytest.mark.parametrize("kind", [bytes, bytearray, memoryview])
def test_trailing_partial_frame_is_kept(kind) -> None:
    first, second = encode(Tclunk(1, 2)), encode(Rread(3, b"hello"))
    f = Framer()
    assert f.feed(kind(first + second[:5])) == [Tclunk(1, 2)]
    assert f.pending == 5
    assert f.feed(kind(second[5:])) == [Rread(3, b"hello")]
    assert f.pending == 0
    assert f.feed(b"") == []


def test_many_small_frames_in_one_feed() -> None:
    msgs = [Tclunk(i & 0xFFFF, i) for i in range(20000)]
    data = b"".join(map(encode, msgs)) + encode(Rclunk(1))[:3]
    f = Framer()
    assert f.feed(data) == msgs
    assert f.pending == 3


def test_oversize_frame_rejected_before_buffering() -> None:
    f = Framer(msize=100)
    assert f.feed(b"\xff\xff") == [] and f.pending == 2
    with pytest.raises(ProtocolError):
        f.feed(b"\0\0" + b"x" * 50)        # size 0xffff: refused, nothing kept
    assert f.pending == 0


def test_oversize_declared_in_four_bytes() -> None:
    f = Framer(msize=8216)
    with pytest.raises(ProtocolError):
        f.feed(struct.pack("<I", 8217))
    assert f.pending == 0


def test_size_below_header() -> None:
    with pytest.raises(ProtocolError):
        Framer().feed(struct.pack("<I", 6) + b"\x6e\0\0")


def test_error_is_sticky() -> None:
    f = Framer()
    with pytest.raises(ProtocolError):
        f.feed(b"\x07\0\0\0\x6a\0\0")          # Terror
    with pytest.raises(ProtocolError):
        f.feed(encode(Tclunk(1, 1)))


def test_msize_raised_after_version() -> None:
    big = encode(Rread(1, b"x" * 10000))
    f = Framer(msize=8192)
    assert f.feed(encode(Tversion(0xFFFF, 65536, "9P2000"))) == [Tversion(0xFFFF, 65536, "9P2000")]
    f.msize = 65536
    assert f.feed(big) == [Rread(1, b"x" * 10000)]
    f.msize = 8192
    with pytest.raises(ProtocolError):
        f.feed(big[:4])
