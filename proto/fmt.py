r"""The one-line text form of 9P messages: the -D trace and the test transcripts.

Shaped after plan9port's fcallfmt (lib9/fcallfmt.c), and made exactly
invertible: parse_msg(format_msg(m)) == m for every message, and for the
codec's Malformed (a sound frame with bad content, shown in the -D trace):

    Malformed tag 1 type Twalk why invalid UTF-8 in string

    Tversion tag 65535 msize 8192 version 9P2000
    Tattach tag 0 fid 0 afid -1 uname glenda aname ''
    Twalk tag 1 fid 0 newfid 1 nwname 2 0:tools 1:index
    Rwalk tag 1 nwqid 2 0:(0000000000000001 0 d) 1:(0000000000000002 0 )
    Tcreate tag 1 fid 1 name foo perm d-rwxr-xr-x mode 0
    Rread tag 1 count 3 'hi\n'
    Rerror tag 1 ename file not found
    Rstat tag 1 stat 'x' 'glenda' 'sys' '' q (0000000000000003 1 ) m 0644 at 0 mt 0 l 3 t 0 d 0

Grammar
-------
    line    = NAME { key value }     every key of NAME (see _FIELDS), in that order;
                                     tag always comes first and is never optional
    number  = decimal | 0x hex | 0 octal (also 0o) | -n (two's complement in the
              field's width: -1 is all ones).  fid, afid and newfid print NOFID as -1.
    string  = bare | quoted.  A bare word is printable (str.isprintable, so é and
              日本 are bare), has no space or backslash and does not start with a
              quote; it stands for itself.  Anything else is quoted: 'text', where
              '' is a quote (\' is accepted too), \n \t \r \\ are escapes, \xNN
              is one byte of the UTF-8 text, and every other character is literal.
    data    = count N quoted         the bytes of Rread/Twrite, always quoted; valid
              UTF-8 shows as text, other bytes as \xNN.  N must equal the length
              (count 0 may omit the quotes).  format_msg(m, maxdata=K) shows only
              K bytes followed by '...', for traces; such a line does not parse.
    qid     = (path vers type)       path in hex (16 digits when printed, 0x
              optional), vers a number, type the letters d a l M A t (QTDIR
              QTAPPEND QTEXCL QTMOUNT QTAUTH QTTMP, any order), empty or left out
              for a plain file, or a number when other bits are set.
    perm    = a mode string as ls -l / %M prints it ([-daA][-l]rwxrwxrwx), or a
              number when the mode string cannot say it exactly.
    wname   = nwname N then N items i:string;  wqid = nwqid N then N items i:qid.
    ename   = the rest of the line, or one quoted string when the text needs quoting.
    type    = a message name (Twalk), or the number of a type that has none.
    stat    = string string string string q qid m MODE at N mt N l N t N d N
              (name uid gid muid, always quoted when printed; MODE octal or a mode
              string; in a stat every all-ones number prints as -1).
Spaces and tabs separate; leading and trailing blanks of a line are ignored.
"""
from __future__ import annotations

import re
from typing import Any, Callable

from . import const as C
from .messages import MESSAGES, Dir, Malformed, Message, Qid

__all__ = ["format_msg", "parse_msg", "format_dir"]

_QT_LETTERS = (("d", C.QTDIR), ("a", C.QTAPPEND), ("l", C.QTEXCL),
               ("M", C.QTMOUNT), ("A", C.QTAUTH), ("t", C.QTTMP))
_QT_NAMED = sum(bit for _, bit in _QT_LETTERS)
_MODE_FIRST = {"d": C.DMDIR, "a": C.DMAPPEND, "A": C.DMAUTH, "-": 0}
_MODE_SHOWN = C.DMDIR | C.DMAPPEND | C.DMAUTH | C.DMEXCL | 0o777
_MODE_RE = re.compile(r"[-daA][-l](?:[-r][-w][-x]){3}")
_NUM_RE = re.compile(r"(-?)(?:0[xX]([0-9a-fA-F]+)|0[oO]?([0-7]+)|([1-9][0-9]*|0))")
_HEX_RE = re.compile(r"(?:0[xX])?([0-9a-fA-F]+)")
_SPECIAL = re.compile(r"['\\]|[^\x20-\x7e]")
_ESCAPES = {"'": "''", "\\": "\\\\", "\n": "\\n", "\t": "\\t", "\r": "\\r"}
_UNESCAPE = {"n": b"\n", "t": b"\t", "r": b"\r", "\\": b"\\", "'": b"'"}
_WORD = re.compile(r"[^ \t]+")
_BLANK = re.compile(r"[ \t]*")
_QUOTE_STOP = re.compile(r"['\\]")
_ITEM = re.compile(r"([0-9]+):")
_HEX2 = re.compile(r"[0-9a-fA-F]{2}")

_FID = ("fid", "fid", "fid")
_QID = ("qid", "qid", "qid")
_FIELDS = {                      # message -> its (key, attribute, kind)s after the tag
    "Tversion": (("msize", "msize", "u32"), ("version", "version", "str")),
    "Rversion": (("msize", "msize", "u32"), ("version", "version", "str")),
    "Tauth": (("afid", "afid", "fid"), ("uname", "uname", "str"), ("aname", "aname", "str")),
    "Rauth": (("qid", "aqid", "qid"),),
    "Tattach": (_FID, ("afid", "afid", "fid"), ("uname", "uname", "str"),
                ("aname", "aname", "str")),
    "Rattach": (_QID,), "Rerror": (("ename", "ename", "ename"),),
    "Tflush": (("oldtag", "oldtag", "u16"),), "Rflush": (),
    "Twalk": (_FID, ("newfid", "newfid", "fid"), ("nwname", "wname", "wname")),
    "Rwalk": (("nwqid", "wqid", "wqid"),),
    "Topen": (_FID, ("mode", "mode", "u8")), "Ropen": (_QID, ("iounit", "iounit", "u32")),
    "Tcreate": (_FID, ("name", "name", "str"), ("perm", "perm", "perm"), ("mode", "mode", "u8")),
    "Rcreate": (_QID, ("iounit", "iounit", "u32")),
    "Tread": (_FID, ("offset", "offset", "u64"), ("count", "count", "u32")),
    "Rread": (("count", "data", "data"),),
    "Twrite": (_FID, ("offset", "offset", "u64"), ("count", "data", "data")),
    "Rwrite": (("count", "count", "u32"),),
    "Tclunk": (_FID,), "Rclunk": (), "Tremove": (_FID,), "Rremove": (),
    "Tstat": (_FID,), "Rstat": (("stat", "stat", "stat"),),
    "Twstat": (_FID, ("stat", "stat", "stat")), "Rwstat": (),
    "Malformed": (("type", "type", "type"), ("why", "why", "ename")),
}
_BY_NAME: dict[str, type[Message] | type[Malformed]] = {
    cls.__name__: cls for cls in [*MESSAGES.values(), Malformed]}
_SPEC = {_BY_NAME[name]: (("tag", "tag", "u16"),) + rest for name, rest in _FIELDS.items()}


# ---------------------------------------------------------------- formatting

def _escape(m: re.Match) -> str:
    ch = m.group()
    esc = _ESCAPES.get(ch)
    if esc is not None:
        return esc
    if ch.isprintable():
        return ch
    try:
        raw = ch.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:          # a lone surrogate: no valid 9P string has one
        raw = ch.encode("utf-8", "surrogatepass")
    return "".join(f"\\x{b:02x}" for b in raw)


def _quote(s: str) -> str:
    return "'" + _SPECIAL.sub(_escape, s) + "'"


def _string(s: str) -> str:
    if s and s.isprintable() and " " not in s and "\\" not in s and s[0] != "'":
        return s
    return _quote(s)


def _ename(s: str) -> str:
    if s and s.isprintable() and "\\" not in s and s[0] != "'" and s.strip(" ") == s:
        return s
    return _quote(s)


def _data(b: bytes, limit: int | None = None) -> str:
    shown = b if limit is None or len(b) <= limit else b[:limit]
    text = _quote(bytes(shown).decode("utf-8", "surrogateescape"))
    return f"{len(b)} {text}" + ("..." if len(shown) < len(b) else "")


def _qid(q: Qid) -> str:
    if q.type & ~_QT_NAMED & 0xFF or q.type > 0xFF:
        typ = f"{q.type:#x}"
    else:
        typ = "".join(ch for ch, bit in _QT_LETTERS if q.type & bit)
    return f"({q.path:016x} {q.vers} {typ})"


def _perm(v: int) -> str:
    kinds = [v & C.DMDIR, v & C.DMAPPEND, v & C.DMAUTH]
    if v & ~_MODE_SHOWN or sum(map(bool, kinds)) > 1:
        return f"0{v:o}" if v else "0"
    first = "d" if kinds[0] else "a" if kinds[1] else "A" if kinds[2] else "-"
    bits = "".join(ch if v & (1 << (8 - i)) else "-" for i, ch in enumerate("rwxrwxrwx"))
    return first + ("l" if v & C.DMEXCL else "-") + bits


def _ones(v: int, bits: int, octal: bool = False) -> str:
    if v == (1 << bits) - 1:
        return "-1"
    return (f"0{v:o}" if v else "0") if octal else str(v)


def format_dir(d: Dir) -> str:
    """A Dir in the stat form of the grammar (close to plan9port's %D)."""
    return (f"{_quote(d.name)} {_quote(d.uid)} {_quote(d.gid)} {_quote(d.muid)} "
            f"q {_qid(d.qid)} m {_ones(d.mode, 32, True)} at {_ones(d.atime, 32)} "
            f"mt {_ones(d.mtime, 32)} l {_ones(d.length, 64)} t {_ones(d.type, 16)} "
            f"d {_ones(d.dev, 32)}")


_FORMAT: dict[str, Callable] = {
    "u8": str, "u16": str, "u32": str, "u64": str, "str": _string, "ename": _ename,
    "fid": lambda v: "-1" if v == C.NOFID else str(v), "qid": _qid, "perm": _perm,
    "wname": lambda ws: " ".join([str(len(ws))] + [f"{i}:{_string(w)}" for i, w in enumerate(ws)]),
    "wqid": lambda qs: " ".join([str(len(qs))] + [f"{i}:{_qid(q)}" for i, q in enumerate(qs)]),
    "data": _data, "stat": format_dir,
    "type": lambda t: MESSAGES[t].__name__ if t in MESSAGES else str(t),
}


def format_msg(msg: Message | Malformed, maxdata: int | None = None) -> str:
    """One line describing `msg`; parse_msg inverts it exactly.

    With `maxdata`, data longer than that shows only its first `maxdata`
    bytes followed by '...' (for traces; such a line no longer parses).
    """
    spec = _SPEC.get(type(msg))
    if spec is None:
        raise TypeError(f"not a 9P2000 message: {msg!r}")
    out = [type(msg).__name__]
    for key, attr, kind in spec:
        val = getattr(msg, attr)
        out.append(key)
        out.append(_data(val, maxdata) if kind == "data" else _FORMAT[kind](val))
    return " ".join(out)


# ---------------------------------------------------------------- parsing

def _number(tok: str, bits: int) -> int:
    m = _NUM_RE.fullmatch(tok)
    if m is None:
        raise ValueError(f"bad number {tok!r}")
    neg, hx, oc, dec = m.groups()
    v = int(hx, 16) if hx else int(oc, 8) if oc else int(dec)
    if neg and v:
        if v > 1 << (bits - 1):
            raise ValueError(f"{tok} out of range for {bits} bits")
        v = (1 << bits) - v
    if v >> bits:
        raise ValueError(f"{tok} out of range for {bits} bits")
    return v


def _mode_string(tok: str) -> int:
    v = _MODE_FIRST[tok[0]] | (C.DMEXCL if tok[1] == "l" else 0)
    for i, ch in enumerate(tok[2:]):
        if ch != "-":
            v |= 1 << (8 - i)
    return v


class _Scanner:
    """A cursor over one line, reading the tokens of the grammar."""

    def __init__(self, line: str) -> None:
        self.s = line.strip(" \t\r\n")
        self.i = 0

    def at_end(self) -> bool:
        self.i = _BLANK.match(self.s, self.i).end()  # type: ignore[union-attr]
        return self.i >= len(self.s)

    def word(self) -> str:
        if self.at_end():
            raise ValueError("unexpected end of line")
        m = _WORD.match(self.s, self.i)
        self.i = m.end()  # type: ignore[union-attr]
        return m.group()  # type: ignore[union-attr]

    def key(self, key: str) -> None:
        got = self.word()
        if got != key:
            raise ValueError(f"expected {key!r}, got {got!r}")

    def quoted(self) -> bytes:
        s, i, out = self.s, self.i + 1, bytearray()
        while True:
            m = _QUOTE_STOP.search(s, i)
            if m is None:
                raise ValueError("unterminated quote")
            j = m.start()
            out += s[i:j].encode("utf-8")
            if s[j] == "'" and s.startswith("''", j):
                out += b"'"
                i = j + 2
            elif s[j] == "'":
                break
            elif s[j + 1:j + 2] in _UNESCAPE:
                out += _UNESCAPE[s[j + 1]]
                i = j + 2
            elif s[j + 1:j + 2] == "x" and _HEX2.fullmatch(s, j + 2, j + 4):
                out.append(int(s[j + 2:j + 4], 16))
                i = j + 4
            else:
                raise ValueError(f"bad escape {s[j:j + 4]!r}")
        self.i = j + 1
        if self.i < len(s) and s[self.i] not in " \t":
            raise ValueError("text right after a closing quote")
        return bytes(out)

    def string(self) -> str:
        if self.at_end():
            raise ValueError("unexpected end of line")
        if self.s[self.i] != "'":
            return self.word()
        try:
            return self.quoted().decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("quoted string is not valid UTF-8") from None

    def rest(self) -> str:
        if not self.at_end() and self.s[self.i] == "'":
            return self.string()
        text, self.i = self.s[self.i:], len(self.s)
        return text

    def qid(self) -> Qid:
        self.at_end()
        s, i = self.s, self.i
        j = s.find(")", i)
        if not s.startswith("(", i) or j < 0:
            raise ValueError("expected a qid (path vers type)")
        parts = s[i + 1:j].split()
        self.i = j + 1
        if len(parts) not in (2, 3):
            raise ValueError(f"qid needs path, vers and type: {s[i:j + 1]!r}")
        m = _HEX_RE.fullmatch(parts[0])
        if m is None or len(m.group(1)) > 16:
            raise ValueError(f"bad qid path {parts[0]!r}")
        typ = parts[2] if len(parts) == 3 else ""
        return Qid(_qtype(typ), _number(parts[1], 32), int(m.group(1), 16))

    def items(self, item: Callable[[], object]) -> tuple:
        n = _number(self.word(), 16)
        if n > C.MAXWELEM:
            raise ValueError(f"{n} items, at most {C.MAXWELEM}")
        out = []
        for k in range(n):
            self.at_end()
            m = _ITEM.match(self.s, self.i)
            if m is None or int(m.group(1)) != k:
                raise ValueError(f"expected item {k}:")
            self.i = m.end()
            out.append(item())
        return tuple(out)

    def data(self) -> bytes:
        n = _number(self.word(), 32)
        if n == 0 and self.at_end():
            return b""
        if self.at_end() or self.s[self.i] != "'":
            raise ValueError("expected quoted data")
        b = self.quoted()
        if len(b) != n:
            raise ValueError(f"count {n} but the data has {len(b)} bytes")
        return b

    def dir(self) -> Dir:
        name, uid, gid, muid = (self.string() for _ in range(4))
        self.key("q")
        qid = self.qid()
        self.key("m")
        mode = _perm_value(self.word())
        nums = []
        for key, bits in (("at", 32), ("mt", 32), ("l", 64), ("t", 16), ("d", 32)):
            self.key(key)
            nums.append(_number(self.word(), bits))
        atime, mtime, length, typ, dev = nums
        return Dir(typ, dev, qid, mode, atime, mtime, length, name, uid, gid, muid)


def _qtype(tok: str) -> int:
    if tok[:1].isdigit():
        return _number(tok, 8)
    letters = dict(_QT_LETTERS)
    if any(ch not in letters for ch in tok) or len(set(tok)) != len(tok):
        raise ValueError(f"bad qid type {tok!r}")
    return sum(letters[ch] for ch in tok)


def _perm_value(tok: str) -> int:
    return _mode_string(tok) if _MODE_RE.fullmatch(tok) else _number(tok, 32)


_PARSE: dict[str, Callable[[_Scanner], object]] = {
    "u8": lambda sc: _number(sc.word(), 8), "u16": lambda sc: _number(sc.word(), 16),
    "u32": lambda sc: _number(sc.word(), 32), "u64": lambda sc: _number(sc.word(), 64),
    "fid": lambda sc: _number(sc.word(), 32), "str": _Scanner.string,
    "ename": _Scanner.rest, "qid": _Scanner.qid, "perm": lambda sc: _perm_value(sc.word()),
    "wname": lambda sc: sc.items(sc.string), "wqid": lambda sc: sc.items(sc.qid),
    "data": _Scanner.data, "stat": _Scanner.dir, "type": lambda sc: _type_value(sc.word()),
}


def _type_value(tok: str) -> int:
    cls = _BY_NAME.get(tok)
    if cls is not None and issubclass(cls, Message):     # every name but Malformed
        return cls.TYPE
    return _number(tok, 8)


def parse_msg(line: str) -> Message | Malformed:
    """The message a format_msg line describes; ValueError if it is malformed."""
    sc = _Scanner(line)
    try:
        name = sc.word()
        cls = _BY_NAME.get(name)
        if cls is None:
            raise ValueError(f"unknown message {name!r}")
        vals: dict[str, Any] = {}
        for key, attr, kind in _SPEC[cls]:
            sc.key(key)
            vals[attr] = _PARSE[kind](sc)
        if not sc.at_end():
            raise ValueError(f"unexpected {sc.s[sc.i:sc.i + 20]!r}")
        return cls(**vals)
    except ValueError as e:
        raise ValueError(f"{e} at column {sc.i} of {line!r}") from None
