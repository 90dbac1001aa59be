"""The 9P2000 codec: a round-trip table, framing edges, every malformed case, fuzzing.

The hypothesis strategies here (`messages`, `SAMPLES`) are shared with
test_codec_interop.py and test_fmt.py.
"""
from __future__ import annotations

import copy
import inspect
import pickle
import struct

import pytest
from hypothesis import HealthCheck, given, settings, strategies as st

from toolsrv.proto import (
    DMDIR, MAXWELEM, MESSAGES, NOFID, NOTAG, QTDIR, Dir, Message, ProtocolError, Qid, Rattach,
    Rauth, Rclunk, Rcreate, Rerror, Rflush, Ropen, Rread, Rremove, Rstat, Rversion,
    Rwalk, Rwrite, Rwstat, Tattach, Tauth, Tclunk, Tcreate, Tflush, Topen, Tread,
    Tremove, Tstat, Tversion, Twalk, Twrite, Twstat, Framer, Malformed, decode, decode_dir,
    decode_dirs, encode, encode_dir, replace,
)
from toolsrv.proto.codec import STATFIXLEN, dir_size
from toolsrv.proto.fmt import format_msg, parse_msg

U8, U16, U32, U64 = 0xFF, 0xFFFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF
FAST = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
SLOW = settings(max_examples=5000, deadline=None, suppress_health_check=list(HealthCheck))


# ---------------------------------------------------------------- strategies

TEXT = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="\0"),
               max_size=24)     # any valid 9P string: no surrogates, no NUL
QIDS = st.builds(Qid, st.integers(0, U8), st.integers(0, U32), st.integers(0, U64))


_WIDTH = {"tag": U16, "oldtag": U16, "mode": U8, "offset": U64, "msize": U32, "fid": U32,
          "afid": U32, "newfid": U32, "iounit": U32, "perm": U32, "count": U32}


def dirs(length_max: int = U64) -> st.SearchStrategy[Dir]:
    return st.one_of(
        st.builds(Dir, st.integers(0, U16), st.integers(0, U32), QIDS, st.integers(0, U32),
                  st.integers(0, U32), st.integers(0, U32), st.integers(0, length_max),
                  TEXT, TEXT, TEXT, TEXT),
        st.just(Dir.notouch(length=0)), st.just(Dir.notouch(name="new", length=length_max)))


def messages(offset_max: int = U64, length_max: int = U64) -> st.SearchStrategy:
    """Any valid 9P2000 message; the limits let py9p's int64 fields keep up."""
    def field(name: str, typ: str) -> st.SearchStrategy:
        if typ == "int":
            return st.integers(0, offset_max if name == "offset" else _WIDTH[name])
        return {"str": TEXT, "bytes": st.binary(max_size=200), "Qid": QIDS,
                "Dir": dirs(length_max),
                "tuple[str, ...]": st.lists(TEXT, max_size=MAXWELEM).map(tuple),
                "tuple[Qid, ...]": st.lists(QIDS, max_size=MAXWELEM).map(tuple)}[typ]
    return st.one_of([st.builds(cls, **{p.name: field(p.name, p.annotation)
                                        for p in inspect.signature(cls).parameters.values()})
                      for cls in MESSAGES.values()])


Q = Qid(QTDIR, 7, 0x0123456789ABCDEF)
D = Dir(1, 2, Q, DMDIR | 0o755, 3, 4, 5, "name", "uid", "gid", "muid")
SAMPLES = [
    Tversion(NOTAG, 8192, "9P2000"), Rversion(NOTAG, 8192, "9P2000"),
    Tversion(0, 0, ""), Rversion(U16, U32, "9P2000.u"),
    Tauth(1, 2, "glenda", ""), Tauth(U16, NOFID, "", "main/active"),
    Rauth(1, Q), Rauth(0, Qid(0xFF, U32, U64)),
    Tattach(0, 0, NOFID, "root", ""), Tattach(U16, U32, 0, "ü", "日本"),
    Rattach(0, Q), Rerror(1, "file not found"), Rerror(2, ""), Rerror(3, "é" * 100),
    Tflush(1, 2), Tflush(U16, U16), Rflush(1),
    Twalk(1, 0, 1, ()), Twalk(1, 0, 1, ("tools", "index")),
    Twalk(2, U32, U32, tuple(f"n{i}" for i in range(MAXWELEM))), Twalk(3, 1, 2, ("", "..", "a b")),
    Rwalk(1, ()), Rwalk(1, (Q,)), Rwalk(U16, tuple(Qid(i, i, i) for i in range(MAXWELEM))),
    Topen(1, 2, 0), Topen(1, 2, U8), Ropen(1, Q, 0), Ropen(1, Q, U32),
    Tcreate(1, 2, "foo", DMDIR | 0o755, 0), Tcreate(1, 2, "", U32, U8),
    Rcreate(1, Q, 8168), Tread(1, 2, 0, 8192), Tread(1, 2, U64, U32),
    Rread(1, b""), Rread(1, b"hi\n"), Rread(1, bytes(range(256)) * 40),
    Twrite(1, 2, 0, b""), Twrite(1, 2, U64, b"\0\xff" * 500), Rwrite(1, 0), Rwrite(1, U32),
    Tclunk(1, 2), Rclunk(1), Tremove(1, NOFID), Rremove(1), Tstat(1, 0),
    Rstat(1, D), Rstat(1, Dir()), Twstat(1, 2, Dir.notouch()), Twstat(1, 2, Dir.notouch(length=0)),
    Twstat(1, 2, Dir.notouch(name="new name", mode=0o600)), Rwstat(U16),
    Rstat(1, Dir(U16, U32, Qid(U8, U32, U64), U32, U32, U32, U64,
                 "x" * 300, "", "ü", "\U0001f600")),
]


def test_samples_cover_every_message() -> None:
    assert {type(m) for m in SAMPLES} == set(MESSAGES.values())


@pytest.mark.parametrize("msg", SAMPLES + [Q, D, Dir(), Qid.NOTOUCH],
                         ids=lambda m: type(m).__name__)
def test_records_behave_as_frozen_dataclasses(msg) -> None:
    """What the hand-written classes keep of the frozen dataclasses they replaced."""
    cls, names = type(msg), type(msg).__slots__
    values = [getattr(msg, n) for n in names]
    assert cls(*values) == msg and cls(**dict(zip(names, values))) == msg
    assert hash(cls(*values)) == hash(msg)
    assert repr(msg) == f"{cls.__name__}({', '.join(f'{n}={v!r}' for n, v in zip(names, values))})"
    assert cls.__match_args__ == names
    for name in (*names, "other"):   # a non-field name raised TypeError with the dataclasses
        with pytest.raises(AttributeError):           # dataclasses.FrozenInstanceError
            setattr(msg, name, 1)
        with pytest.raises(AttributeError):
            delattr(msg, name)
    assert [getattr(msg, n) for n in names] == values
    assert copy.copy(msg) == msg and pickle.loads(pickle.dumps(msg)) == msg
    assert replace(msg, **{names[-1]: values[-1]}) == msg
    with pytest.raises(TypeError):
        replace(msg, nonesuch=1)
    assert not hasattr(msg, "__dict__")


def test_records_equality_and_defaults() -> None:
    assert Tclunk(1, 2) != Tremove(1, 2) and Tclunk(1, 2) != (1, 2)
    assert Rflush(1) != Rclunk(1) and Rflush(1) == Rflush(1) != Rflush(2)
    assert replace(Tread(1, 2, 3, 4), tag=9) == Tread(9, 2, 3, 4)
    assert Twalk(1, 2, 3).wname == () and Rwalk(1).wqid == () and Rread(1).data == b""
    assert Twrite(1, 2, 3).data == b"" and Ropen(1, Q).iounit == 0 == Rcreate(1, Q).iounit
    assert Dir() == Dir(0, 0, Qid(0, 0, 0), 0, 0, 0, 0, "", "", "", "") and Qid() == Qid(0, 0, 0)
    assert Dir.notouch(name="n") == replace(Dir.notouch(), name="n")
    assert len({Qid(1, 2, 3), Qid(1, 2, 3), Qid(1, 2, 4)}) == 2
    assert isinstance(Tread(1, 2, 3, 4), Message) and not isinstance(Qid(), Message)


# ---------------------------------------------------------------- round trips

@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: format_msg(m, 16)[:60])
def test_round_trip(msg) -> None:
    frame = encode(msg)
    assert struct.unpack_from("<IBH", frame) == (len(frame), msg.TYPE, msg.tag)
    for buf in (frame, bytearray(frame), memoryview(frame), frame + b"\x07\0\0\0"):
        assert decode(buf) == (msg, len(frame))
    assert decode(frame, msize=len(frame)) == (msg, len(frame))


def test_known_bytes() -> None:
    """Byte layouts written out by hand from intro(5) and stat(5)."""
    assert encode(Tversion(NOTAG, 8192, "9P2000")) == \
        b"\x13\0\0\0\x64\xff\xff\x00\x20\0\0\x06\x009P2000"
    assert encode(Twalk(1, 0, 1, ("ab",))) == \
        b"\x15\0\0\0\x6e\x01\0" + b"\0\0\0\0\x01\0\0\0\x01\0\x02\0ab"
    assert encode(Rread(1, b"hi")) == b"\x0d\0\0\0\x75\x01\0\x02\0\0\0hi"
    dir_bytes = struct.pack("<HHIBIQIIIQ", 47 + 4, 1, 2, 0x80, 7, 0x0123456789ABCDEF,
                            DMDIR | 0o755, 3, 4, 5) + b"".join(
        struct.pack("<H", len(s)) + s for s in (b"n", b"u", b"g", b"m"))
    assert encode_dir(replace(D, name="n", uid="u", gid="g", muid="m")) == dir_bytes
    # stat[n] is a 2-byte count followed by the Dir with its own size[2].
    assert encode(Rstat(9, decode_dir(dir_bytes))) == \
        struct.pack("<IBHH", 9 + len(dir_bytes), 125, 9, len(dir_bytes)) + dir_bytes


def test_dir_helpers() -> None:
    for d in (D, Dir(), Dir.notouch(), replace(D, name="日本語")):
        b = encode_dir(d)
        assert len(b) == dir_size(d) and decode_dir(b) == d
        assert decode_dir(bytearray(b)) == d
    assert dir_size(Dir()) == STATFIXLEN
    listing = b"".join(encode_dir(replace(D, name=f"f{i}")) for i in range(5))
    assert decode_dirs(listing) == [replace(D, name=f"f{i}") for i in range(5)]
    assert decode_dirs(b"") == []
    for bad in (listing[:-1], listing + b"\0", encode_dir(D)[:-1], encode_dir(D) + b"x", b"\0"):
        with pytest.raises(ProtocolError):
            decode_dirs(bad)
        with pytest.raises(ProtocolError):
            decode_dir(bad)


@pytest.mark.parametrize("msg, why", [
    (Twalk(1, 2, 3, ("a",) * (MAXWELEM + 1)), "17 names"),
    (Rwalk(1, (Q,) * (MAXWELEM + 1)), "17 qids"),
    (Rerror(1, "x" * 0x10000), "string too long"),
    (Rerror(1, "a\0b"), "NUL in string"),
    (Rerror(1, "\udc80"), "lone surrogate"),
    (Tclunk(U16 + 1, 0), "tag too big"),
    (Tread(1, 2, U64 + 1, 0), "offset too big"),
    (Topen(1, 2, -1), "negative"),
    (Rstat(1, replace(D, length=-1)), "negative length"),
    (Tcreate(1, 2, "x", 0, 256), "mode too big"),
])
def test_encode_rejects(msg, why) -> None:
    with pytest.raises(ValueError):
        encode(msg)


def test_encode_rejects_non_messages() -> None:
    with pytest.raises(TypeError):
        encode(D)  # type: ignore[arg-type]


# ---------------------------------------------------------------- incomplete frames

@pytest.mark.parametrize("msg", [Tversion(NOTAG, 8192, "9P2000"), Rstat(1, D), Rclunk(1)])
def test_incomplete_is_none(msg) -> None:
    frame = encode(msg)
    for n in range(len(frame)):
        assert decode(frame[:n]) is None
    assert decode(frame) == (msg, len(frame))


def test_msize_is_checked_from_four_bytes() -> None:
    frame = encode(Rread(1, b"x" * 100))
    assert decode(frame[:3], msize=50) is None
    for n in (4, 5, 50, len(frame)):
        with pytest.raises(ProtocolError):
            decode(frame[:n], msize=50)
    assert decode(frame, msize=len(frame))[1] == len(frame)


# ---------------------------------------------------------------- malformed frames

def frame(t: int, body: bytes, tag: int = 1, size: int | None = None) -> bytes:
    return struct.pack("<IBH", 7 + len(body) if size is None else size, t, tag) + body


def s(text: bytes) -> bytes:
    return struct.pack("<H", len(text)) + text


QB = struct.pack("<BIQ", 0, 0, 1)
MALFORMED = {                 # the framing is broken: ProtocolError
    "size 0": b"\0\0\0\0\x6e\x01\x00",
    "size 6": b"\x06\0\0\0\x6e\x01\x00",
    "Terror 106": frame(106, s(b"x")),
    "type 0": frame(0, b""), "type 255": frame(255, b""), "Topenfd 98": frame(98, b"\0" * 5),
    "type 99": frame(99, b""), "type 128": frame(128, b""),
    "string past frame": frame(107, struct.pack("<H", 5) + b"abc"),
    "string count past frame": frame(100, b"\0\x20\0\0" + b"\x06"),
    "trailing byte Rclunk": frame(121, b"\0"),
    "trailing byte Tclunk": frame(120, b"\0\0\0\0\0"),
    "short Tclunk": frame(120, b"\0\0\0"),
    "trailing byte Rerror": frame(107, s(b"no") + b"!"),
    "trailing byte Twalk": frame(110, struct.pack("<IIH", 0, 1, 1) + s(b"a") + b"\0"),
    "17 walk names": frame(110, struct.pack("<IIH", 0, 1, 17) + s(b"a") * 17),
    "17 walk qids": frame(111, struct.pack("<H", 17) + QB * 17),
    "walk names missing": frame(110, struct.pack("<IIH", 0, 1, 2) + s(b"a")),
    "walk qids short": frame(111, struct.pack("<H", 2) + QB),
    "walk qids extra": frame(111, struct.pack("<H", 1) + QB * 2),
    "Rread count past frame": frame(117, struct.pack("<I", 4) + b"abc"),
    "Rread count short": frame(117, struct.pack("<I", 2) + b"abc"),
    "Rread no count": frame(117, b"\0\0"),
    "Twrite count past frame": frame(118, struct.pack("<IQI", 1, 0, 10) + b"abc"),
    "Twrite count short": frame(118, struct.pack("<IQI", 1, 0, 1) + b"abc"),
    "Tcreate mode missing": frame(114, struct.pack("<I", 1) + s(b"x") + b"\0\0\0\0"),
    "Ropen short": frame(113, QB + b"\0\0\0"),
    "Rattach long": frame(105, QB + b"\0"),
    "stat n past frame": frame(125, struct.pack("<H", 100) + encode_dir(D)),
    "stat n short": frame(125, struct.pack("<H", len(encode_dir(D)) - 1) + encode_dir(D)),
    "stat no n": frame(125, b"\x01"),
    "Twstat fid only": frame(126, b"\0\0\0\0"),
    "Twstat short fid": frame(126, b"\0\0"),
}
ILLEGAL = {                   # sound frames with bad content: Malformed
    "invalid UTF-8": frame(107, s(b"\xff\xfe")),
    "overlong UTF-8": frame(107, s(b"\xc0\xaf")),
    "UTF-8 surrogate": frame(107, s(b"\xed\xa0\x80")),
    "NUL in string": frame(110, struct.pack("<IIH", 0, 1, 1) + s(b"a\0b")),
    "stat size too big": frame(125, s(struct.pack("<H", 999) + encode_dir(D)[2:])),
    "stat size too small": frame(125, s(struct.pack("<H", 3) + encode_dir(D)[2:])),
    "stat shorter than fixed": frame(125, s(struct.pack("<H", 10) + b"\0" * 10)),
    "stat string past": frame(125, s(encode_dir(D)[:-1])),
    "stat trailing bytes": frame(125, s(struct.pack("<H", len(encode_dir(D)) - 1)
                                        + encode_dir(D)[2:] + b"\0")),
    "stat bad UTF-8": frame(125, s(encode_dir(replace(D, muid="é"))[:-2] + b"\xc3\x28")),
    "Twalk name e9 74 e9": frame(110, struct.pack("<IIH", 0, 1, 2) + s(b"a") + s(b"\xe9t\xe9")),
    "Tcreate NUL": frame(114, struct.pack("<I", 1) + s(b"a\0") + struct.pack("<IB", 0, 0)),
    "Twstat inner size": frame(126, struct.pack("<I", 1) + s(struct.pack("<H", 48)
                                                             + encode_dir(Dir.notouch())[2:])),
    "Tattach bad uname": frame(104, struct.pack("<II", 0, NOFID) + s(b"\xff") + s(b"")),
}


@pytest.mark.parametrize("name", MALFORMED)
def test_malformed(name) -> None:
    with pytest.raises(ProtocolError):
        decode(MALFORMED[name])


@pytest.mark.parametrize("name", ILLEGAL)
def test_illegal_content_is_one_malformed_request(name) -> None:
    """A sound frame whose strings or stat are bad decodes to Malformed, whole, and the
    next frame after it still decodes (the stream is not broken)."""
    data = ILLEGAL[name]
    m, n = decode(data + encode(Tclunk(9, 1)))
    assert type(m) is Malformed and n == len(data)
    assert (m.tag, m.type) == (1, data[4]) and m.why
    fr = Framer()
    assert fr.feed(data + encode(Tclunk(9, 1))) == [m, Tclunk(9, 1)]
    assert parse_msg(format_msg(m)) == m
    with pytest.raises(TypeError):
        encode(m)  # type: ignore[arg-type]


@pytest.mark.parametrize("data", [
    # a bad name, then a name whose length runs past the frame
    frame(110, struct.pack("<IIH", 0, 1, 2) + s(b"\xe9") + struct.pack("<H", 9) + b"ab"),
    frame(110, struct.pack("<IIH", 0, 1, 1) + s(b"a\0b") + b"!"),        # trailing byte
    frame(114, struct.pack("<I", 1) + s(b"\xff") + b"\0\0"),           # perm, mode short
    frame(104, struct.pack("<II", 0, NOFID) + s(b"\xff") + struct.pack("<H", 5)),  # aname
], ids=["walk name past frame", "trailing byte", "create short", "attach aname past frame"])
def test_broken_framing_wins_over_bad_content(data) -> None:
    with pytest.raises(ProtocolError):
        decode(data)


def test_size_above_msize() -> None:
    with pytest.raises(ProtocolError):
        decode(struct.pack("<I", 8217), msize=8216)
    with pytest.raises(ProtocolError):
        decode(b"\xff\xff\xff\xff", msize=8216)


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: format_msg(m, 16)[:60])
def test_every_resize_is_rejected(msg) -> None:
    """Cutting a frame short or padding it (size adjusted) never decodes."""
    body = encode(msg)[7:]
    for n in range(len(body)):
        with pytest.raises(ProtocolError):
            decode(frame(msg.TYPE, body[:n]))
    for pad in (b"\0", b"\0" * 13, b"\xff" * 3):
        with pytest.raises(ProtocolError):
            decode(frame(msg.TYPE, body + pad))


# ---------------------------------------------------------------- properties

ANY_MESSAGE = messages()


@st.composite
def mangled_frames(draw) -> bytes:
    """Valid frames with bytes overwritten, cut or inserted; size mostly kept honest."""
    b = bytearray(encode(draw(ANY_MESSAGE)))
    for _ in range(draw(st.integers(1, 3))):
        i = draw(st.integers(0, len(b)))
        op = draw(st.sampled_from(["set", "cut", "insert"]))
        if op == "set" and i < len(b):
            b[i] = draw(st.integers(0, 255))
        elif op == "cut":
            del b[i:i + draw(st.integers(1, 4))]
        else:
            b[i:i] = draw(st.binary(min_size=1, max_size=4))
    if len(b) >= 4 and draw(st.booleans()):
        b[:4] = struct.pack("<I", len(b))
    return bytes(b)


ANY_BYTES = st.one_of(st.binary(max_size=64), mangled_frames())


def check_decode_invariant(data: bytes) -> None:
    try:
        out = decode(data, msize=1 << 20)
    except ProtocolError:
        return
    if out is not None:
        msg, n = out
        assert 7 <= n <= len(data)
        if type(msg) is Malformed:      # a sound frame with bad content: its header, as sent
            assert (msg.type, msg.tag) == (data[4], data[5] | data[6] << 8)
            assert n == struct.unpack_from("<I", data)[0]
            return
        assert encode(msg) == data[:n]  # the encoding is canonical: one frame per message


@FAST
@given(ANY_BYTES)
def test_fuzz_decode_returns_or_raises_protocol_error(data) -> None:
    check_decode_invariant(data)


@FAST
@given(ANY_MESSAGE)
def test_property_round_trip(msg) -> None:
    frame_bytes = encode(msg)
    assert decode(frame_bytes) == (msg, len(frame_bytes))
    assert parse_msg(format_msg(msg)) == msg


@pytest.mark.slow
def test_slow_fuzz() -> None:
    slow_fuzz()


@SLOW
@given(data=ANY_BYTES, msg=ANY_MESSAGE)
def slow_fuzz(data, msg) -> None:
    check_decode_invariant(data)
    assert decode(encode(msg))[0] == msg
    assert parse_msg(format_msg(msg)) == msg
