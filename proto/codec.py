"""9P2000 wire codec: message objects <-> bytes, as intro(5) lays them out.

Theory of operation
-------------------
A frame is size[4] type[1] tag[2] followed by the type's fields, all integers
little-endian, strings s[2]+UTF-8.  `encode` picks an encoder by message class;
`decode` reads the 7-byte header, picks a decoder by type number and hands it
the frame's body as (buf, p, end): the decoder bounds-checks every field
against `end` (never against len(buf), which may hold the next frame) and must
finish exactly at `end`.  Fixed-layout messages share one struct-driven encoder
and decoder; the rest (strings, walks, data, stat) are written out by hand.

Two kinds of bad input.  What breaks the framing (a size, a type, a count or
a string length that does not fit the frame, bytes left over) raises
ProtocolError: the stream can no longer be trusted.  What breaks only the
content of a frame that is otherwise sound (a string that is not UTF-8 or
holds NUL, a stat[n] that is not one whole Dir) decodes to `Malformed(tag,
type, why)`: one bad request, which the server answers with Rerror.  This is
lib9p's split: convM2S checks lengths only, and srv.c answers the rest.  A
content error is found by the strict decoders, which then run again with
`lenient` set (strings and the Dir not read) to tell the two kinds apart; the
common path pays nothing for it.

Invariants
- decode never raises anything but ProtocolError, and never reads past the
  frame's declared size.  It returns None only while the frame is incomplete.
- A message's strings are valid UTF-8 without NUL (intro(5): NUL is illegal in
  9P text); a frame whose strings are not decodes to Malformed.
- stat[n] in Rstat/Twstat is n[2] followed by one Dir that carries its own
  size[2] (plan9port convS2M/convD2M); n must equal that Dir's length + 2.  An n
  that does not end the frame is a framing error; a Dir that does not fill its
  n bytes exactly is a content error (Malformed).
- encode raises ValueError (TypeError for a non-message) for values that do
  not fit their fields; it never produces a frame decode would reject.
"""
from __future__ import annotations

import struct
from operator import attrgetter
from typing import Callable, Union

from . import const as C
from .errors import ProtocolError
from .messages import (
    MESSAGES, Dir, Malformed, Message, Qid, Rattach, Rauth, Rclunk, Rcreate, Rerror, Rflush,
    Ropen, Rread, Rremove, Rstat, Rversion, Rwalk, Rwrite, Rwstat, Tattach, Tauth,
    Tclunk, Tcreate, Tflush, Topen, Tread, Tremove, Tstat, Tversion, Twalk, Twrite,
    Twstat,
)

__all__ = ["encode", "decode", "decode_frame", "encode_dir", "decode_dir",
           "decode_dirs", "dir_size", "frame_size", "STATFIXLEN"]

Buffer = Union[bytes, bytearray, memoryview]
STATFIXLEN = 49          # a Dir with four empty strings, size[2] included

_HDR = struct.Struct("<IBH")
_U16 = struct.Struct("<H")
_U32 = struct.Struct("<I")
_QID = struct.Struct("<BIQ")
_QIDMSG = struct.Struct("<IBHBIQ")          # Rauth, Rattach
_QIDIOU = struct.Struct("<IBHBIQI")         # Ropen, Rcreate
_QIDIOU_BODY = struct.Struct("<BIQI")
_RREAD = struct.Struct("<IBHI")
_TWRITE = struct.Struct("<IBHIQI")
_TWALK = struct.Struct("<IIH")
_DIRFIX = struct.Struct("<HHIBIQIIIQ")      # size type dev qid mode atime mtime length

_FIXED: dict[type[Message], tuple[str, ...]] = {  # message -> (struct format, field names)
    Tflush: ("H", "oldtag"), Rwrite: ("I", "count"), Topen: ("IB", "fid", "mode"),
    Tread: ("IQI", "fid", "offset", "count"), Tclunk: ("I", "fid"),
    Tremove: ("I", "fid"), Tstat: ("I", "fid"),
    Rflush: ("",), Rclunk: ("",), Rremove: ("",), Rwstat: ("",),
}


# ---------------------------------------------------------------- encoding

def _s(s: str) -> bytes:
    """One wire string: s[2] then its UTF-8 bytes."""
    b = s.encode("utf-8")
    if len(b) > 0xFFFF or "\0" in s:
        raise ValueError(f"string not representable in 9P: {s[:40]!r}...")
    return _U16.pack(len(b)) + b


def _frame(t: int, tag: int, *parts: bytes) -> bytes:
    size = 7 + sum(map(len, parts))
    return b"".join((_HDR.pack(size, t, tag), *parts))


def encode_dir(d: Dir) -> bytes:
    """The stat(5) encoding of `d`, starting with its own size[2]."""
    strs = b"".join((_s(d.name), _s(d.uid), _s(d.gid), _s(d.muid)))
    q = d.qid
    return _DIRFIX.pack(STATFIXLEN - 10 + len(strs), d.type, d.dev, q.type, q.vers,
                        q.path, d.mode, d.atime, d.mtime, d.length) + strs


def dir_size(d: Dir) -> int:
    """len(encode_dir(d)), cheaper: what one directory-read entry costs."""
    return (STATFIXLEN + len(d.name.encode()) + len(d.uid.encode())
            + len(d.gid.encode()) + len(d.muid.encode()))


def _e_stat(t: int, tag: int, head: bytes, d: Dir) -> bytes:
    stat = encode_dir(d)
    return _frame(t, tag, head, _U16.pack(len(stat)), stat)


def _e_walk(m: Twalk) -> bytes:
    if len(m.wname) > C.MAXWELEM:
        raise ValueError(f"Twalk: {len(m.wname)} names, at most {C.MAXWELEM}")
    return _frame(C.Twalk_T, m.tag, _TWALK.pack(m.fid, m.newfid, len(m.wname)),
                  *map(_s, m.wname))


def _e_rwalk(m: Rwalk) -> bytes:
    n = len(m.wqid)
    if n > C.MAXWELEM:
        raise ValueError(f"Rwalk: {n} qids, at most {C.MAXWELEM}")
    pack = _QID.pack
    return b"".join((_HDR.pack(9 + 13 * n, C.Rwalk_T, m.tag), _U16.pack(n),
                     *[pack(q.type, q.vers, q.path) for q in m.wqid]))


def _e_rread(m: Rread) -> bytes:
    n = len(m.data)
    return _RREAD.pack(11 + n, C.Rread_T, m.tag, n) + m.data


def _e_qid(m: Rauth | Rattach) -> bytes:
    q = m.aqid if type(m) is Rauth else m.qid  # type: ignore[union-attr]
    return _QIDMSG.pack(20, m.TYPE, m.tag, q.type, q.vers, q.path)


def _e_qidiou(m: Ropen | Rcreate) -> bytes:
    q = m.qid
    return _QIDIOU.pack(24, m.TYPE, m.tag, q.type, q.vers, q.path, m.iounit)


def _fixed_encoder(cls: type[Message], fmt: str, *names: str) -> Callable[[Message], bytes]:
    st = struct.Struct("<IBH" + fmt)
    size, t = st.size, cls.TYPE
    if not names:
        return lambda m: st.pack(size, t, m.tag)
    get = attrgetter("tag", *names)
    return lambda m: st.pack(size, t, *get(m))


_ENCODERS: dict[type[Message], Callable] = {
    Tversion: lambda m: _frame(C.Tversion_T, m.tag, _U32.pack(m.msize), _s(m.version)),
    Rversion: lambda m: _frame(C.Rversion_T, m.tag, _U32.pack(m.msize), _s(m.version)),
    Tauth: lambda m: _frame(C.Tauth_T, m.tag, _U32.pack(m.afid), _s(m.uname), _s(m.aname)),
    Tattach: lambda m: _frame(C.Tattach_T, m.tag, struct.pack("<II", m.fid, m.afid),
                              _s(m.uname), _s(m.aname)),
    Rerror: lambda m: _frame(C.Rerror_T, m.tag, _s(m.ename)),
    Tcreate: lambda m: _frame(C.Tcreate_T, m.tag, _U32.pack(m.fid), _s(m.name),
                              struct.pack("<IB", m.perm, m.mode)),
    Twrite: lambda m: _TWRITE.pack(23 + len(m.data), C.Twrite_T, m.tag, m.fid, m.offset,
                                   len(m.data)) + m.data,
    Rstat: lambda m: _e_stat(C.Rstat_T, m.tag, b"", m.stat),
    Twstat: lambda m: _e_stat(C.Twstat_T, m.tag, _U32.pack(m.fid), m.stat),
    Twalk: _e_walk, Rwalk: _e_rwalk, Rread: _e_rread,
    Rauth: _e_qid, Rattach: _e_qid, Ropen: _e_qidiou, Rcreate: _e_qidiou,
    **{cls: _fixed_encoder(cls, *spec) for cls, spec in _FIXED.items()},
}


def encode(msg: Message) -> bytes:
    """The complete frame of `msg`: size[4] type[1] tag[2] and its fields.

    Raises ValueError when a field does not fit (an int out of range, a string
    over 65535 bytes or holding NUL, more than 16 names or qids) and TypeError
    when `msg` is not a 9P2000 message.
    """
    enc = _ENCODERS.get(type(msg))
    if enc is None:
        raise TypeError(f"not a 9P2000 message: {msg!r}")
    try:
        return enc(msg)
    except struct.error as e:
        raise ValueError(f"{type(msg).__name__}: {e}") from None
    except AttributeError as e:       # a str or Dir field holding something else
        raise TypeError(f"{type(msg).__name__}: {e}") from None


# ---------------------------------------------------------------- decoding

def _bad(what: str) -> ProtocolError:
    return ProtocolError(what)


class _Illegal(ProtocolError):
    """The content of a soundly framed message breaks intro(5) (see Malformed)."""


def _gstr(buf: Buffer, p: int, end: int, lenient: bool = False) -> tuple[str, int]:
    """The string at buf[p:], checked to lie within the frame; (text, next p).
    Lenient: only its length is checked (the text is "")."""
    if p + 2 > end:
        raise _bad("string count past end of message")
    q = p + 2 + (buf[p] | buf[p + 1] << 8)
    if q > end:
        raise _bad("string past end of message")
    try:
        s = str(buf[p + 2:q], "utf-8")
    except UnicodeDecodeError:
        if lenient:
            return "", q
        raise _Illegal("invalid UTF-8 in string") from None
    if "\0" in s and not lenient:
        raise _Illegal("NUL in string")
    return s, q


def _done(p: int, end: int, name: str) -> None:
    if p != end:
        raise _bad(f"{name}: {end - p} trailing bytes in message")


def _gdir(buf: Buffer, p: int, end: int) -> Dir:
    """The Dir filling exactly buf[p:end], size[2] included."""
    if end - p < STATFIXLEN:
        raise _bad("stat shorter than STATFIXLEN")
    (size, typ, dev, qt, qv, qp, mode, atime, mtime, length) = _DIRFIX.unpack_from(buf, p)
    if size + 2 != end - p:
        raise _bad(f"stat size {size} disagrees with its {end - p - 2} bytes")
    name, p = _gstr(buf, p + 41, end)
    uid, p = _gstr(buf, p, end)
    gid, p = _gstr(buf, p, end)
    muid, p = _gstr(buf, p, end)
    _done(p, end, "stat")
    return Dir(typ, dev, Qid(qt, qv, qp), mode, atime, mtime, length, name, uid, gid, muid)


_DIR0 = Dir()     # what a lenient decoder puts where a stat was


def _d_stat(buf: Buffer, p: int, end: int, lenient: bool = False) -> Dir:
    """stat[n]: n must end the message (framing); the Dir must fill it (content)."""
    if p + 2 > end:
        raise _bad("stat count past end of message")
    n = buf[p] | buf[p + 1] << 8
    if p + 2 + n != end:
        raise _bad(f"stat[{n}] does not end the message")
    if lenient:
        return _DIR0
    try:
        return _gdir(buf, p + 2, end)
    except ProtocolError as e:
        raise _Illegal(f"bad directory entry: {e}") from None


def _d_strings(cls: type, fmt: str, nstr: int) -> Callable:
    """Decoder of a message that is some integers, then `nstr` strings."""
    st = struct.Struct("<" + fmt)
    n, name = st.size, cls.__name__

    def dec(buf: Buffer, p: int, end: int, tag: int, lenient: bool = False) -> Message:
        if p + n > end:
            raise _bad(f"{name}: short message")
        vals: list = [*st.unpack_from(buf, p)]
        p += n
        for _ in range(nstr):
            text, p = _gstr(buf, p, end, lenient)
            vals.append(text)
        _done(p, end, name)
        return cls(tag, *vals)
    return dec


def _d_twalk(buf: Buffer, p: int, end: int, tag: int, lenient: bool = False) -> Twalk:
    if p + 10 > end:
        raise _bad("Twalk: short message")
    fid, newfid, n = _TWALK.unpack_from(buf, p)
    if n > C.MAXWELEM:
        raise _bad(f"Twalk: {n} names, at most {C.MAXWELEM}")
    p += 10
    names = []
    for _ in range(n):
        s, p = _gstr(buf, p, end, lenient)
        names.append(s)
    _done(p, end, "Twalk")
    return Twalk(tag, fid, newfid, tuple(names))


def _d_rwalk(buf: Buffer, p: int, end: int, tag: int) -> Rwalk:
    if p + 2 > end:
        raise _bad("Rwalk: short message")
    n = buf[p] | buf[p + 1] << 8
    if n > C.MAXWELEM:
        raise _bad(f"Rwalk: {n} qids, at most {C.MAXWELEM}")
    if end - p - 2 != 13 * n:
        raise _bad(f"Rwalk: {n} qids in {end - p - 2} bytes")
    return Rwalk(tag, tuple([Qid(*t) for t in _QID.iter_unpack(buf[p + 2:end])]))


def _d_tcreate(buf: Buffer, p: int, end: int, tag: int, lenient: bool = False) -> Tcreate:
    if p + 4 > end:
        raise _bad("Tcreate: short message")
    fid = _U32.unpack_from(buf, p)[0]
    name, p = _gstr(buf, p + 4, end, lenient)
    if p + 5 != end:
        raise _bad("Tcreate: perm and mode do not end the message")
    perm, mode = struct.unpack_from("<IB", buf, p)
    return Tcreate(tag, fid, name, perm, mode)


def _d_rread(buf: Buffer, p: int, end: int, tag: int) -> Rread:
    if p + 4 > end:
        raise _bad("Rread: short message")
    count = _U32.unpack_from(buf, p)[0]
    if p + 4 + count != end:
        raise _bad(f"Rread: count {count} but {end - p - 4} data bytes")
    return Rread(tag, bytes(buf[p + 4:end]))


def _d_twrite(buf: Buffer, p: int, end: int, tag: int) -> Twrite:
    if p + 16 > end:
        raise _bad("Twrite: short message")
    fid, offset, count = struct.unpack_from("<IQI", buf, p)
    if p + 16 + count != end:
        raise _bad(f"Twrite: count {count} but {end - p - 16} data bytes")
    return Twrite(tag, fid, offset, bytes(buf[p + 16:end]))


def _d_qid(cls: type) -> Callable:
    def dec(buf: Buffer, p: int, end: int, tag: int) -> Message:
        if end - p != 13:
            raise _bad(f"{cls.__name__}: size {end - p + 7}, want 20")
        return cls(tag, Qid(*_QID.unpack_from(buf, p)))
    return dec


def _d_qidiou(cls: type) -> Callable:
    def dec(buf: Buffer, p: int, end: int, tag: int) -> Message:
        if end - p != 17:
            raise _bad(f"{cls.__name__}: size {end - p + 7}, want 24")
        t, v, path, iounit = _QIDIOU_BODY.unpack_from(buf, p)
        return cls(tag, Qid(t, v, path), iounit)
    return dec


def _fixed_decoder(cls: type, fmt: str, *names: str) -> Callable:
    st = struct.Struct("<" + fmt)
    n, unpack = st.size, st.unpack_from

    def dec(buf: Buffer, p: int, end: int, tag: int) -> Message:
        if end - p != n:
            raise _bad(f"{cls.__name__}: size {end - p + 7}, want {n + 7}")
        return cls(tag, *unpack(buf, p))
    return dec


def _d_rstat(buf: Buffer, p: int, end: int, tag: int, lenient: bool = False) -> Rstat:
    return Rstat(tag, _d_stat(buf, p, end, lenient))


def _d_twstat(buf: Buffer, p: int, end: int, tag: int, lenient: bool = False) -> Twstat:
    if p + 4 > end:
        raise _bad("Twstat: short message")
    return Twstat(tag, _U32.unpack_from(buf, p)[0], _d_stat(buf, p + 4, end, lenient))


_DECODERS: dict[int, Callable] = {
    C.Tversion_T: _d_strings(Tversion, "I", 1), C.Rversion_T: _d_strings(Rversion, "I", 1),
    C.Tauth_T: _d_strings(Tauth, "I", 2), C.Tattach_T: _d_strings(Tattach, "II", 2),
    C.Rerror_T: _d_strings(Rerror, "", 1),
    C.Rauth_T: _d_qid(Rauth), C.Rattach_T: _d_qid(Rattach),
    C.Twalk_T: _d_twalk, C.Rwalk_T: _d_rwalk,
    C.Ropen_T: _d_qidiou(Ropen), C.Tcreate_T: _d_tcreate, C.Rcreate_T: _d_qidiou(Rcreate),
    C.Rread_T: _d_rread, C.Twrite_T: _d_twrite,
    C.Rstat_T: _d_rstat, C.Twstat_T: _d_twstat,
    **{cls.TYPE: _fixed_decoder(cls, *spec) for cls, spec in _FIXED.items()},
}
assert set(_DECODERS) == set(MESSAGES) == {c.TYPE for c in _ENCODERS}


def frame_size(buf: Buffer, pos: int = 0, msize: int | None = None) -> int | None:
    """The declared size of the frame at buf[pos:], checked; None if < 4 bytes."""
    if len(buf) - pos < 4:
        return None
    size = buf[pos] | buf[pos + 1] << 8 | buf[pos + 2] << 16 | buf[pos + 3] << 24
    if size < C.HEADER_SIZE:
        raise _bad(f"message size {size} below the 7-byte header")
    if msize is not None and size > msize:
        raise _bad(f"message size {size} exceeds msize {msize}")
    return size


def decode_frame(buf: Buffer, pos: int, size: int) -> Message | Malformed:
    """Decode the complete frame buf[pos:pos+size] (size already checked >= 7): its
    message, or Malformed when only its content is bad."""
    t = buf[pos + 4]
    dec = _DECODERS.get(t)
    if dec is None:
        raise _bad(f"unknown message type {t}")
    tag = buf[pos + 5] | buf[pos + 6] << 8
    try:
        try:
            return dec(buf, pos + 7, pos + size, tag)
        except _Illegal as e:     # only decoders that read strings raise it
            dec(buf, pos + 7, pos + size, tag, True)      # framing errors still win
            return Malformed(tag, t, str(e))
    except ProtocolError:
        raise
    except (struct.error, IndexError, ValueError, TypeError) as e:  # safety net
        raise _bad(f"malformed {MESSAGES[t].__name__}: {e}") from None


def decode(buf: Buffer, msize: int | None = None
           ) -> tuple[Message | Malformed, int] | None:
    """Decode the first frame of `buf`: (message, bytes consumed), or None.

    None means the frame is not complete yet.  A size below 7 or above
    `msize` raises ProtocolError as soon as the four size bytes are present;
    so does any frame whose framing is broken.  A sound frame whose content is
    not (see Malformed) gives (Malformed, bytes consumed).  Nothing but
    ProtocolError is raised.
    """
    size = frame_size(buf, 0, msize)
    if size is None or len(buf) < size:
        return None
    return decode_frame(buf, 0, size), size


def decode_dir(buf: Buffer) -> Dir:
    """The one Dir that fills `buf` exactly (size[2] included)."""
    try:
        return _gdir(buf, 0, len(buf))
    except struct.error as e:
        raise _bad(f"malformed stat: {e}") from None


def decode_dirs(buf: Buffer) -> list[Dir]:
    """The Dirs of a directory read: whole entries laid end to end."""
    out, p, n = [], 0, len(buf)
    while p < n:
        if p + 2 > n:
            raise _bad("directory entry size past end of data")
        q = p + 2 + (buf[p] | buf[p + 1] << 8)
        if q > n:
            raise _bad("directory entry past end of data")
        out.append(_gdir(buf, p, q))
        p = q
    return out
