"""One immutable class per 9P2000 message, named and shaped as in intro(5).

Field names follow the manual (tag, fid, newfid, wname, iounit, ...).  Each
class carries its wire type number as the class attribute TYPE.  `MESSAGES`
maps type number -> class; `Dir` is the stat structure and `Qid` the qid.
`replace(obj, **changes)` is a copy with some fields changed.

Theory of operation
-------------------
The classes are written out by hand rather than made by @dataclass: making
29 dataclasses (27 messages, Qid, Dir) execs generated code at import time,
40 ms or more of the server's launch (doc/performance.md, Start-up), where
these classes import in about 1 ms.  They behave as the frozen, slotted dataclasses they replace:
- a class's fields are its __slots__, in wire order; __init__ takes them
  positionally or by keyword, with the manual's defaults (Twalk.wname=(),
  Ropen.iounit=0, Rread.data=b"", every Dir and Qid field);
- immutable: assigning or deleting any attribute raises
  dataclasses.FrozenInstanceError (an AttributeError), as a frozen dataclass
  does; __init__ stores the fields through the slots' own descriptors (their
  setters, bound once per class in _SET), which is also faster than the
  object.__setattr__ a frozen dataclass's __init__ calls per field;
- equal when of the same class with equal fields, hashable, repr
  `Name(field=value, ...)`, positional pattern matching (__match_args__), and
  copy/pickle rebuild through __init__.
"""
from __future__ import annotations

from operator import attrgetter

from . import const as C


class _Record:
    """Base of Qid, Dir and every message: equality, hash, repr and immutability
    from the subclass's __slots__ (see the module's theory of operation)."""
    __slots__: tuple[str, ...] = ()
    _SET: tuple = ()                  # the slots' setters, in __slots__ order
    _key = staticmethod(lambda self: ())   # the field values, for == and hash

    def __eq__(self, other: object) -> bool:
        if other.__class__ is self.__class__:
            return self._key(self) == other._key(other)
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._key(self))

    def __repr__(self) -> str:
        fields = ", ".join(f"{n}={getattr(self, n)!r}" for n in self.__slots__)
        return f"{type(self).__qualname__}({fields})"

    def __setattr__(self, name: str, value: object) -> None:
        raise _frozen(f"cannot assign to field {name!r}")

    def __delattr__(self, name: str) -> None:
        raise _frozen(f"cannot delete field {name!r}")

    def __reduce__(self) -> tuple:
        return type(self), tuple(getattr(self, n) for n in self.__slots__)


def _frozen(text: str) -> AttributeError:
    from dataclasses import FrozenInstanceError   # only on a misuse: not at import
    return FrozenInstanceError(text)


def _record(cls: type[_Record]) -> type[_Record]:
    """Finish a hand-written record class: setters, value getter, match args."""
    names = cls.__slots__
    cls._SET = tuple(vars(cls)[n].__set__ for n in names)
    get = attrgetter(*names)
    # (one name: attrgetter gives the value, not a tuple; mypy's stub cannot tell the two)
    cls._key = staticmethod(get if len(names) > 1 else  # type: ignore[arg-type]
                            lambda self: (get(self),))
    cls.__match_args__ = names  # type: ignore[attr-defined,misc]  # per class, as dataclass does
    return cls


def replace(obj: _Record, **changes: object) -> _Record:
    """A copy of a message, Dir or Qid with the named fields changed."""
    names = type(obj).__slots__
    unknown = changes.keys() - set(names)
    if unknown:
        raise TypeError(f"{type(obj).__name__} has no field {sorted(unknown)[0]!r}")
    return type(obj)(*[changes[n] if n in changes else getattr(obj, n) for n in names])


@_record
class Qid(_Record):
    __slots__ = ("type", "vers", "path")
    type: int
    vers: int
    path: int

    NOTOUCH: Qid = None  # type: ignore[assignment]  # set below: the all-ones qid of a wstat

    def __init__(self, type: int = 0, vers: int = 0, path: int = 0) -> None:
        a, b, c = self._SET
        a(self, type)
        b(self, vers)
        c(self, path)


Qid.NOTOUCH = Qid(0xFF, C.NOTOUCH32, C.NOTOUCH64)
_QID0 = Qid()


@_record
class Dir(_Record):
    """The stat structure of stat(5), without its leading size[2]."""
    __slots__ = ("type", "dev", "qid", "mode", "atime", "mtime", "length",
                 "name", "uid", "gid", "muid")
    type: int
    dev: int
    qid: Qid
    mode: int
    atime: int
    mtime: int
    length: int
    name: str
    uid: str
    gid: str
    muid: str

    def __init__(self, type: int = 0, dev: int = 0, qid: Qid = _QID0, mode: int = 0,
                 atime: int = 0, mtime: int = 0, length: int = 0, name: str = "",
                 uid: str = "", gid: str = "", muid: str = "") -> None:
        a, b, c, d, e, f, g, h, i, j, k = self._SET
        a(self, type)
        b(self, dev)
        c(self, qid)
        d(self, mode)
        e(self, atime)
        f(self, mtime)
        g(self, length)
        h(self, name)
        i(self, uid)
        j(self, gid)
        k(self, muid)

    @classmethod
    def notouch(cls, **changes) -> "Dir":
        """A wstat Dir with every field "don't touch", then `changes` applied."""
        d = cls(C.NOTOUCH16, C.NOTOUCH32, Qid.NOTOUCH, C.NOTOUCH32, C.NOTOUCH32,
                C.NOTOUCH32, C.NOTOUCH64, "", "", "", "")
        return replace(d, **changes) if changes else d  # type: ignore[return-value]


class Message(_Record):
    """Base of every message: each has `tag` and a class-level TYPE."""
    __slots__ = ()
    TYPE: int = 0
    tag: int                # each message's first slot; its fields are annotated likewise


def _message(type_number: int):
    def wrap(cls):
        cls = _record(cls)
        cls.TYPE = type_number
        MESSAGES[type_number] = cls
        return cls
    return wrap


MESSAGES: dict[int, type[Message]] = {}


@_message(C.Tversion_T)
class Tversion(Message):
    __slots__ = ("tag", "msize", "version")
    msize: int
    version: str

    def __init__(self, tag: int, msize: int, version: str) -> None:
        a, b, c = self._SET
        a(self, tag)
        b(self, msize)
        c(self, version)


@_message(C.Rversion_T)
class Rversion(Message):
    __slots__ = ("tag", "msize", "version")
    msize: int
    version: str

    def __init__(self, tag: int, msize: int, version: str) -> None:
        a, b, c = self._SET
        a(self, tag)
        b(self, msize)
        c(self, version)


@_message(C.Tauth_T)
class Tauth(Message):
    __slots__ = ("tag", "afid", "uname", "aname")
    afid: int
    uname: str
    aname: str

    def __init__(self, tag: int, afid: int, uname: str, aname: str) -> None:
        a, b, c, d = self._SET
        a(self, tag)
        b(self, afid)
        c(self, uname)
        d(self, aname)


@_message(C.Rauth_T)
class Rauth(Message):
    __slots__ = ("tag", "aqid")
    aqid: Qid

    def __init__(self, tag: int, aqid: Qid) -> None:
        a, b = self._SET
        a(self, tag)
        b(self, aqid)


@_message(C.Tattach_T)
class Tattach(Message):
    __slots__ = ("tag", "fid", "afid", "uname", "aname")
    fid: int
    afid: int
    uname: str
    aname: str

    def __init__(self, tag: int, fid: int, afid: int, uname: str, aname: str) -> None:
        a, b, c, d, e = self._SET
        a(self, tag)
        b(self, fid)
        c(self, afid)
        d(self, uname)
        e(self, aname)


@_message(C.Rattach_T)
class Rattach(Message):
    __slots__ = ("tag", "qid")
    qid: Qid

    def __init__(self, tag: int, qid: Qid) -> None:
        a, b = self._SET
        a(self, tag)
        b(self, qid)


@_message(C.Rerror_T)
class Rerror(Message):
    __slots__ = ("tag", "ename")
    ename: str

    def __init__(self, tag: int, ename: str) -> None:
        a, b = self._SET
        a(self, tag)
        b(self, ename)


@_message(C.Tflush_T)
class Tflush(Message):
    __slots__ = ("tag", "oldtag")
    oldtag: int

    def __init__(self, tag: int, oldtag: int) -> None:
        a, b = self._SET
        a(self, tag)
        b(self, oldtag)


@_message(C.Rflush_T)
class Rflush(Message):
    __slots__ = ("tag",)

    def __init__(self, tag: int) -> None:
        self._SET[0](self, tag)


@_message(C.Twalk_T)
class Twalk(Message):
    __slots__ = ("tag", "fid", "newfid", "wname")
    fid: int
    newfid: int
    wname: tuple[str, ...]

    def __init__(self, tag: int, fid: int, newfid: int, wname: tuple[str, ...] = ()) -> None:
        a, b, c, d = self._SET
        a(self, tag)
        b(self, fid)
        c(self, newfid)
        d(self, wname)


@_message(C.Rwalk_T)
class Rwalk(Message):
    __slots__ = ("tag", "wqid")
    wqid: tuple[Qid, ...]

    def __init__(self, tag: int, wqid: tuple[Qid, ...] = ()) -> None:
        a, b = self._SET
        a(self, tag)
        b(self, wqid)


@_message(C.Topen_T)
class Topen(Message):
    __slots__ = ("tag", "fid", "mode")
    fid: int
    mode: int

    def __init__(self, tag: int, fid: int, mode: int) -> None:
        a, b, c = self._SET
        a(self, tag)
        b(self, fid)
        c(self, mode)


@_message(C.Ropen_T)
class Ropen(Message):
    __slots__ = ("tag", "qid", "iounit")
    qid: Qid
    iounit: int

    def __init__(self, tag: int, qid: Qid, iounit: int = 0) -> None:
        a, b, c = self._SET
        a(self, tag)
        b(self, qid)
        c(self, iounit)


@_message(C.Tcreate_T)
class Tcreate(Message):
    __slots__ = ("tag", "fid", "name", "perm", "mode")
    fid: int
    name: str
    perm: int
    mode: int

    def __init__(self, tag: int, fid: int, name: str, perm: int, mode: int) -> None:
        a, b, c, d, e = self._SET
        a(self, tag)
        b(self, fid)
        c(self, name)
        d(self, perm)
        e(self, mode)


@_message(C.Rcreate_T)
class Rcreate(Message):
    __slots__ = ("tag", "qid", "iounit")
    qid: Qid
    iounit: int

    def __init__(self, tag: int, qid: Qid, iounit: int = 0) -> None:
        a, b, c = self._SET
        a(self, tag)
        b(self, qid)
        c(self, iounit)


@_message(C.Tread_T)
class Tread(Message):
    __slots__ = ("tag", "fid", "offset", "count")
    fid: int
    offset: int
    count: int

    def __init__(self, tag: int, fid: int, offset: int, count: int) -> None:
        a, b, c, d = self._SET
        a(self, tag)
        b(self, fid)
        c(self, offset)
        d(self, count)


@_message(C.Rread_T)
class Rread(Message):
    __slots__ = ("tag", "data")
    data: bytes

    def __init__(self, tag: int, data: bytes = b"") -> None:
        a, b = self._SET
        a(self, tag)
        b(self, data)


@_message(C.Twrite_T)
class Twrite(Message):
    __slots__ = ("tag", "fid", "offset", "data")
    fid: int
    offset: int
    data: bytes

    def __init__(self, tag: int, fid: int, offset: int, data: bytes = b"") -> None:
        a, b, c, d = self._SET
        a(self, tag)
        b(self, fid)
        c(self, offset)
        d(self, data)


@_message(C.Rwrite_T)
class Rwrite(Message):
    __slots__ = ("tag", "count")
    count: int

    def __init__(self, tag: int, count: int) -> None:
        a, b = self._SET
        a(self, tag)
        b(self, count)


@_message(C.Tclunk_T)
class Tclunk(Message):
    __slots__ = ("tag", "fid")
    fid: int

    def __init__(self, tag: int, fid: int) -> None:
        a, b = self._SET
        a(self, tag)
        b(self, fid)


@_message(C.Rclunk_T)
class Rclunk(Message):
    __slots__ = ("tag",)

    def __init__(self, tag: int) -> None:
        self._SET[0](self, tag)


@_message(C.Tremove_T)
class Tremove(Message):
    __slots__ = ("tag", "fid")
    fid: int

    def __init__(self, tag: int, fid: int) -> None:
        a, b = self._SET
        a(self, tag)
        b(self, fid)


@_message(C.Rremove_T)
class Rremove(Message):
    __slots__ = ("tag",)

    def __init__(self, tag: int) -> None:
        self._SET[0](self, tag)


@_message(C.Tstat_T)
class Tstat(Message):
    __slots__ = ("tag", "fid")
    fid: int

    def __init__(self, tag: int, fid: int) -> None:
        a, b = self._SET
        a(self, tag)
        b(self, fid)


@_message(C.Rstat_T)
class Rstat(Message):
    __slots__ = ("tag", "stat")
    stat: Dir

    def __init__(self, tag: int, stat: Dir) -> None:
        a, b = self._SET
        a(self, tag)
        b(self, stat)


@_message(C.Twstat_T)
class Twstat(Message):
    __slots__ = ("tag", "fid", "stat")
    fid: int
    stat: Dir

    def __init__(self, tag: int, fid: int, stat: Dir) -> None:
        a, b, c = self._SET
        a(self, tag)
        b(self, fid)
        c(self, stat)


@_message(C.Rwstat_T)
class Rwstat(Message):
    __slots__ = ("tag",)

    def __init__(self, tag: int) -> None:
        self._SET[0](self, tag)


@_record
class Malformed(_Record):
    """What the codec yields for a frame whose framing is sound (size, type and tag read,
    every count and string length inside the frame, the fields filling it exactly) but
    whose content breaks intro(5): a string that is not UTF-8 or holds a NUL, or a stat[n]
    that is not one whole Dir.  It stands where that message would: one bad request, not a
    broken stream, so the server answers its tag with Rerror and goes on (lib9p's convM2S
    too checks only the framing; srv.c answers "bad directory in wstat").  `type` is the
    frame's wire type number and `why` the codec's reason.  Not a message: never encoded."""
    __slots__ = ("tag", "type", "why")
    tag: int
    type: int
    why: str

    def __init__(self, tag: int, type: int, why: str) -> None:
        a, b, c = self._SET
        a(self, tag)
        b(self, type)
        c(self, why)


__all__ = (["Qid", "Dir", "Message", "MESSAGES", "Malformed", "replace"]
           + [c.__name__ for c in MESSAGES.values()])
