"""proto's codec against python-9p, whose codec is plan9port's convM2S/convS2M (C).

Every message proto encodes must be byte-identical to what convS2M makes of the
same fields, and each side must decode the other's frames to the same values.

python-9p quirks this file works around (see test names):
- Tread/Twrite offset and Dir.length are C int64 there: values >= 2**63 cannot
  be built, and decode as negative numbers.
- Its strings are C strings: it cannot carry NUL, and decoding truncates at one.
- Invalid UTF-8 in a string escapes its decoder as UnicodeDecodeError.
- convM2S checks the framing only, as proto does before it calls a frame Malformed:
  every frame proto decodes to Malformed, convM2S accepts.
"""
from __future__ import annotations

import struct

import py9p
import pytest
from hypothesis import given, strategies as st

from toolsrv.proto import MESSAGES, Dir, Malformed, ProtocolError, Qid, Rerror, Tread, Twstat
from toolsrv.proto import decode, decode_dir, encode, encode_dir
from test_codec import FAST, ILLEGAL, MALFORMED, SAMPLES, dirs, messages, mangled_frames

I63 = (1 << 63) - 1


def to_py9p(v):
    """proto value -> python-9p value (messages, Dir, Qid, tuples, scalars)."""
    if isinstance(v, Qid):
        return py9p.Qid(v.type, v.vers, v.path)
    if isinstance(v, tuple):
        return tuple(map(to_py9p, v))
    if isinstance(v, Dir) or type(v) in MESSAGES.values():
        cls = py9p.Dir if isinstance(v, Dir) else getattr(py9p, type(v).__name__)
        return cls(**{f: to_py9p(getattr(v, f)) for f in type(v).__slots__})
    return v


def from_py9p(v):
    """python-9p value -> proto value."""
    if isinstance(v, py9p.Qid):
        return Qid(v.type, v.vers, v.path)
    if isinstance(v, tuple):
        return tuple(map(from_py9p, v))
    if isinstance(v, py9p.Dir):
        return Dir(**{f: from_py9p(getattr(v, f)) for f in Dir.__slots__})
    if isinstance(v, py9p.Message):
        cls = MESSAGES[int(v.message_type)]
        return cls(**{f: from_py9p(getattr(v, f)) for f in cls.__slots__})
    return v


def fits_py9p(msg) -> bool:
    return getattr(msg, "offset", 0) <= I63 and getattr(getattr(msg, "stat", None),
                                                         "length", 0) <= I63


def check_both_ways(msg) -> None:
    ours = encode(msg)
    theirs = py9p.encode_message(to_py9p(msg))
    assert ours == theirs
    assert from_py9p(py9p.decode_message(ours)) == msg
    assert decode(theirs) == (msg, len(theirs))


@pytest.mark.parametrize("msg", [m for m in SAMPLES if fits_py9p(m)], ids=repr)
def test_samples_both_ways(msg) -> None:
    check_both_ways(msg)


def test_samples_skip_only_int64_overflow() -> None:
    skipped = [m for m in SAMPLES if not fits_py9p(m)]
    assert {type(m).__name__ for m in skipped} <= {"Tread", "Twrite", "Twstat", "Rstat"}
    assert {type(m) for m in SAMPLES if fits_py9p(m)} == set(MESSAGES.values())


@FAST
@given(messages(offset_max=I63, length_max=I63))
def test_property_both_ways(msg) -> None:
    check_both_ways(msg)


@FAST
@given(dirs(length_max=I63))
def test_dirs_both_ways(d) -> None:
    ours = encode_dir(d)
    assert ours == py9p.encode_dir(to_py9p(d))
    assert from_py9p(py9p.decode_dir(ours)) == d
    assert decode_dir(py9p.encode_dir(to_py9p(d))) == d


def test_offset_above_int64_one_way() -> None:
    """py9p cannot build offset 2**64-1; it reads our frame as -1 (int64)."""
    msg = Tread(1, 2, 2**64 - 1, 8192)
    theirs = py9p.decode_message(encode(msg))
    assert theirs.offset == -1 and theirs.offset % 2**64 == msg.offset
    raw = bytearray(py9p.encode_message(py9p.Tread(fid=2, offset=0, count=8192, tag=1)))
    raw[11:19] = b"\xff" * 8
    assert decode(bytes(raw))[0] == msg


def test_notouch_wstat_one_way() -> None:
    """Dir.notouch() has length 2**64-1, which python-9p's int64 cannot hold."""
    raw = bytearray(py9p.encode_message(py9p.Twstat(
        fid=2, tag=1, stat=to_py9p(Dir.notouch(length=0)))))
    length_at = 7 + 4 + 2 + 2 + 2 + 4 + 13 + 4 + 4 + 4   # hdr fid n size type dev qid ...
    assert raw[length_at:length_at + 8] == b"\0" * 8
    raw[length_at:length_at + 8] = b"\xff" * 8
    assert decode(bytes(raw))[0] == Twstat(1, 2, Dir.notouch())
    assert encode(Twstat(1, 2, Dir.notouch())) == bytes(raw)
    theirs = py9p.decode_message(bytes(raw))
    assert theirs.stat.length == -1 and theirs.stat.qid.path == 2**64 - 1


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed_frames_against_convM2S(name) -> None:
    """Every frame whose framing we call broken, plan9port's convM2S rejects too."""
    data = MALFORMED[name]
    with pytest.raises(ProtocolError):
        decode(data)
    try:
        theirs = py9p.decode_message(data)
    except py9p.CodecError:
        return                                  # convM2S or py9p rejected it as well
    pytest.fail(f"convM2S accepts what we call broken framing: {theirs}")


@pytest.mark.parametrize("name", ILLEGAL)
def test_malformed_content_is_sound_framing_for_convM2S(name) -> None:
    """What we decode to Malformed (one bad request), convM2S reads as a whole frame: it
    does not look inside stat[n] (py9p hands back raw bytes) nor for NUL (it truncates),
    and py9p leaks UnicodeDecodeError for bad UTF-8 after convM2S accepted the frame."""
    data = ILLEGAL[name]
    assert type(decode(data)[0]) is Malformed
    try:
        py9p.decode_message(data)
    except UnicodeDecodeError:
        pass


def test_py9p_truncates_at_nul() -> None:
    data = struct.pack("<IBHH", 12, 107, 1, 3) + b"a\0b"
    assert py9p.decode_message(data) == py9p.Rerror(ename="a", tag=1)
    assert decode(data) == (Malformed(1, 107, "NUL in string"), 12)
    with pytest.raises(ValueError):
        encode(Rerror(1, "a\0b"))


@FAST
@given(st.one_of(mangled_frames(), st.binary(max_size=40)))
def test_differential_fuzz(data) -> None:
    """What we accept convM2S accepts, with the same values; what it rejects, we reject."""
    try:
        ours = decode(data)
    except ProtocolError:
        ours = "error"
    if ours is None or len(data) < 7 or ours != "error" and ours[1] != len(data):
        return                                   # py9p decodes exact frames only
    try:
        theirs = from_py9p(py9p.decode_message(data))
    except py9p.CodecError:
        assert ours == "error"                   # never Malformed: the framing is broken
        return
    except UnicodeDecodeError:                   # py9p's leak, after convM2S accepted it
        assert ours == "error" or type(ours[0]) is Malformed
        return
    if ours == "error":
        return                                   # stricter here
    msg = ours[0]
    if type(msg) is Malformed:
        return                                   # a NUL (truncated there), a bad stat (bytes)
    if fits_py9p(msg):
        assert theirs == msg
