"""One frozen dataclass per 9P2000 message, named and shaped as in intro(5).

Field names follow the manual (tag, fid, newfid, wname, iounit, ...).  Each
class carries its wire type number as the class attribute TYPE.  `MESSAGES`
maps type number -> class; `Dir` is the stat structure and `Qid` the qid.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from . import const as C


@dataclass(frozen=True, slots=True)
class Qid:
    type: int = 0
    vers: int = 0
    path: int = 0

    NOTOUCH = None  # set below: the all-ones qid of a "don't touch" wstat


Qid.NOTOUCH = Qid(0xFF, C.NOTOUCH32, C.NOTOUCH64)  # type: ignore[misc]


@dataclass(frozen=True, slots=True)
class Dir:
    """The stat structure of stat(5), without its leading size[2]."""
    type: int = 0
    dev: int = 0
    qid: Qid = field(default_factory=Qid)
    mode: int = 0
    atime: int = 0
    mtime: int = 0
    length: int = 0
    name: str = ""
    uid: str = ""
    gid: str = ""
    muid: str = ""

    @classmethod
    def notouch(cls, **changes) -> "Dir":
        """A wstat Dir with every field "don't touch", then `changes` applied."""
        d = cls(C.NOTOUCH16, C.NOTOUCH32, Qid.NOTOUCH, C.NOTOUCH32, C.NOTOUCH32,
                C.NOTOUCH32, C.NOTOUCH64, "", "", "", "")
        return _replace(d, **changes) if changes else d


def _replace(obj, **changes):
    from dataclasses import replace
    return replace(obj, **changes)


class Message:
    """Base of every message: each has `tag` and a class-level TYPE."""
    __slots__ = ()
    TYPE: int = 0


def _msg(type_number: int):
    def wrap(cls):
        cls = dataclass(frozen=True, slots=True)(cls)
        cls.TYPE = type_number
        MESSAGES[type_number] = cls
        return cls
    return wrap


MESSAGES: dict[int, type] = {}


@_msg(C.Tversion_T)
class Tversion(Message):
    tag: int
    msize: int
    version: str


@_msg(C.Rversion_T)
class Rversion(Message):
    tag: int
    msize: int
    version: str


@_msg(C.Tauth_T)
class Tauth(Message):
    tag: int
    afid: int
    uname: str
    aname: str


@_msg(C.Rauth_T)
class Rauth(Message):
    tag: int
    aqid: Qid


@_msg(C.Tattach_T)
class Tattach(Message):
    tag: int
    fid: int
    afid: int
    uname: str
    aname: str


@_msg(C.Rattach_T)
class Rattach(Message):
    tag: int
    qid: Qid


@_msg(C.Rerror_T)
class Rerror(Message):
    tag: int
    ename: str


@_msg(C.Tflush_T)
class Tflush(Message):
    tag: int
    oldtag: int


@_msg(C.Rflush_T)
class Rflush(Message):
    tag: int


@_msg(C.Twalk_T)
class Twalk(Message):
    tag: int
    fid: int
    newfid: int
    wname: tuple[str, ...] = ()


@_msg(C.Rwalk_T)
class Rwalk(Message):
    tag: int
    wqid: tuple[Qid, ...] = ()


@_msg(C.Topen_T)
class Topen(Message):
    tag: int
    fid: int
    mode: int


@_msg(C.Ropen_T)
class Ropen(Message):
    tag: int
    qid: Qid
    iounit: int = 0


@_msg(C.Tcreate_T)
class Tcreate(Message):
    tag: int
    fid: int
    name: str
    perm: int
    mode: int


@_msg(C.Rcreate_T)
class Rcreate(Message):
    tag: int
    qid: Qid
    iounit: int = 0


@_msg(C.Tread_T)
class Tread(Message):
    tag: int
    fid: int
    offset: int
    count: int


@_msg(C.Rread_T)
class Rread(Message):
    tag: int
    data: bytes = b""


@_msg(C.Twrite_T)
class Twrite(Message):
    tag: int
    fid: int
    offset: int
    data: bytes = b""


@_msg(C.Rwrite_T)
class Rwrite(Message):
    tag: int
    count: int


@_msg(C.Tclunk_T)
class Tclunk(Message):
    tag: int
    fid: int


@_msg(C.Rclunk_T)
class Rclunk(Message):
    tag: int


@_msg(C.Tremove_T)
class Tremove(Message):
    tag: int
    fid: int


@_msg(C.Rremove_T)
class Rremove(Message):
    tag: int


@_msg(C.Tstat_T)
class Tstat(Message):
    tag: int
    fid: int


@_msg(C.Rstat_T)
class Rstat(Message):
    tag: int
    stat: Dir


@_msg(C.Twstat_T)
class Twstat(Message):
    tag: int
    fid: int
    stat: Dir


@_msg(C.Rwstat_T)
class Rwstat(Message):
    tag: int


__all__ = ["Qid", "Dir", "Message", "MESSAGES"] + [c.__name__ for c in MESSAGES.values()]
