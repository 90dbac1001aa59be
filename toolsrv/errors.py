"""Plan 9 error strings, declared once, and the errno 9pfuse will map them to.

Every Rerror the server sends carries one of these strings: a handler raises
`P9Error(ename)`, and the 9P core answers with a constant of this module directly
where no handler runs (an unknown type, a duplicate tag, a flushed request, a reply that
cannot be encoded, a refused connection).  9pfuse turns an ename
into an errno by case-insensitive substring match against the table in
plan9port's src/cmd/9pfuse/errstr.c, first table entry wins, ERANGE when
nothing matches.  `errno_for()` reproduces that table so the tests can prove
every string below lands on a fitting errno and never on ERANGE.
Strings stay under 128 bytes (ERRMAX): `P9Error` truncates longer ones.
"""
from __future__ import annotations

import errno as E
import re

ERRMAX = 128


class P9Error(Exception):
    """A request failed; `ename` is the Plan 9 error string sent in Rerror, cut to
    ERRMAX; `full` is the whole text, for the agent's log (default: ename uncut)."""

    def __init__(self, ename: str, full: str | None = None) -> None:
        if full is None:
            full = getattr(ename, "full", None)     # jsonargs.fit's: the text before its cut
        ename = printable(" ".join(str(ename).split()))  # one line, no control chars
        self.full = ename if full is None else printable(" ".join(str(full).split()))
        if len(ename.encode()) >= ERRMAX:
            ename = shorten(ename, ERRMAX - 1)
        super().__init__(ename)
        self.ename = ename


SUFFIX = " (invalid argument)"


class Fitted(str):
    """What fit() gives: the text cut to fit, with the whole of it in `full` (which a
    P9Error made of it keeps for the agent's log)."""
    full: str


def fit(prefix: str, detail: str, suffix: str = SUFFIX) -> Fitted:
    """The Rerror prefix + detail + suffix, with detail shortened in the middle (shorten:
    a path is never cut) so the whole fits in ERRMAX; the uncut text is in `.full`."""
    detail = " ".join(detail.split())
    whole = prefix + detail + suffix
    room = ERRMAX - 1 - len(prefix.encode()) - len(suffix.encode())
    detail = shorten(detail, max(room, 0))    # the middle goes, a path stays whole
    out = Fitted(prefix + detail + suffix)
    out.full = whole
    return out


def quoting(prefix: str, detail: str, keep: str, suffix: str = SUFFIX) -> P9Error:
    """The P9Error of fit(prefix, detail, suffix) where detail quotes someone else's words
    (args, a schema, a path): 9pfuse's words in it that would outrank `keep` are defused
    in the Rerror, and the log's text (`full`) has them as written."""
    out = fit(prefix, defuse(detail, keep), suffix)
    return P9Error(out, full=words(out.full))


def busy(what: str, limit: int | None = None, then: str = "") -> str:
    """The Rerror of a bound reached or a name not yet free: `resource busy: WHAT`, then
    ` (limit N)` and ` (THEN)`, what the client may do (9pfuse: EBUSY)."""
    return (f"resource busy: {what}" + (f" (limit {limit})" if limit is not None else "")
            + (f" ({then})" if then else ""))


def too_long(what: str, limit: int, thing: str = "") -> str:
    """The Rerror of a write past a bound: `WHAT: [THING ]longer than N bytes: too long`
    (9pfuse: E2BIG)."""
    return f"{what}: {thing + ' ' if thing else ''}longer than {limit} bytes: too long"


def shorten(text: str, room: int) -> str:
    """`text` in at most `room` bytes, never cut through a path (a word holding "/"): a
    long value (a word over 40 characters) loses its middle first, then whole words go
    from just before the last word backwards ("..." stands where they were), so the head
    (what failed, the errno word) and the last word stay.  Only when the paths and the
    ends alone do not fit is the end cut."""
    if len(text.encode()) <= room:
        return text
    words = text.split(" ")
    for i in sorted(range(len(words)), key=lambda i: -len(words[i])):
        w, over = words[i], len(" ".join(words).encode()) - room
        if over <= 0 or len(w) <= 40 or "/" in w:
            break
        keep = max(len(w) - over - 3, 24)          # characters of it left, around "..."
        words[i] = w[:keep * 2 // 3] + "..." + w[len(w) - (keep - keep * 2 // 3):]
    text = " ".join(words)
    if len(text.encode()) <= room:
        return text
    gone: set[int] = set()
    for i in range(len(words) - 2, 0, -1):
        if "/" in words[i]:
            continue
        gone.add(i)
        out = _joined(words, gone)
        if len(out.encode()) <= room:
            return out
    return text.encode()[: max(room - 3, 0)].decode("utf-8", "ignore") + "..."


def _joined(words: list[str], gone: set[int]) -> str:
    out: list[str] = []
    for i, w in enumerate(words):
        if i not in gone:
            out.append(w)
        elif not out or out[-1] != "...":
            out.append("...")
    return " ".join(out)


def printable(s: str) -> str:
    """`s` with its control characters written out (\\x1b): NUL cannot be sent at all (a
    9P string holds none), and text from elsewhere (a remote's description, name or error)
    must not drive the terminal it is read in; defuse's JOINER aside: it is toolsrv's own,
    and words() takes it out again."""
    if s.isprintable():
        return s
    return "".join(c if c.isprintable() or c == JOINER else f"\\x{ord(c):02x}" for c in s)


# -- the declared strings (lib9p's where they map well, reworded where not) --
ENOTFOUND = "file not found"
EPERM = "permission denied"
EISDIR = "is a directory"
ENOTDIR = "not a directory"
EFIDINUSE = "fid in use"
EUNKFID = "bad file: unknown fid"
EINTR = "interrupted"          # only the answer to a flushed request (server.py)
ECANCELLED = "cancelled (input/output error)"  # a call ended by cancel, unload or removal
ECREATE = "permission denied: create prohibited"
EREMOVE = "permission denied: remove prohibited"
EWSTAT = "permission denied: wstat prohibited"
EOFFSET = "invalid offset (invalid argument)"
EDIRCOUNT = "read count too small for one entry (invalid argument)"
EOPEN = "bad file: fid already open"
ENOTOPEN = "bad file: fid not open for this operation"
EWALKOPEN = "bad file: cannot walk an open fid"
EBADNAME = "illegal file name"
EBADDIR = "bad directory in wstat"            # lib9p's; 9pfuse: ENOTDIR
EBADSTRING = "illegal string: not UTF-8 or holds a NUL"
EBADTYPE = "illegal message type (invalid argument)"
EEXIST = "file already exists"
ENOAUTH = "authentication not required: permission denied for auth fid"
EDUPTAG = "duplicate tag in use"
ENOVERSION = "illegal request before Tversion (invalid argument)"
EBADMODE = "illegal open mode (invalid argument)"
EMSIZE = "msize too small (invalid argument)"
EWCOUNT = "write count above the iounit (invalid argument)"
EINTERNAL = "input/output error: internal server error"
ETIMEOUT = "timeout"
EREVWAIT = "revwait: write a revision number (invalid argument)"

DECLARED = [v for k, v in dict(globals()).items()
            if k.isupper() and k not in ("ERRMAX", "DECLARED", "SUFFIX", "JOINER")
            and isinstance(v, str)]

# plan9port src/cmd/9pfuse/errstr.c, in table order.
_ERRTAB = [
    ("permitted", E.EPERM), ("permission", E.EACCES), ("access", E.EACCES),
    ("exists", E.EEXIST), ("exist", E.ENOENT), ("no such", E.ENOENT),
    ("not found", E.ENOENT), ("not implemented", E.ENOSYS), ("input/output", E.EIO),
    ("timeout", E.ETIMEDOUT),
    ("timed out", E.ETIMEDOUT), ("i/o", E.EIO), ("too long", E.E2BIG),
    ("interrupt", E.EINTR), ("no such", E.ENODEV), ("bad file", E.EBADF),
    (" fid ", E.EBADF), ("temporar", E.EAGAIN), ("memory", E.ENOMEM),
    ("is a directory", E.EISDIR), ("directory", E.ENOTDIR), ("argument", E.EINVAL),
    ("pipe", E.EPIPE), ("in use", E.EBUSY), ("busy", E.EBUSY),
    ("illegal", E.EINVAL), ("invalid", E.EINVAL), ("read-only", E.EROFS),
    ("read only", E.EROFS), ("stale ", E.ESTALE), ("proto", E.EPROTO), ("entry", E.ENOENT),
]


# The table's words that come before "input/output": one of them anywhere in a string
# decides its errno before toolsrv's own "(input/output error)" can (the first entry of
# the table that matches wins, wherever in the string it stands).
def _before(word: str) -> re.Pattern[str]:
    """The table's words that come before `word` (one of its entries), longest first."""
    ahead = {t for t, _ in _ERRTAB[:[t for t, _ in _ERRTAB].index(word)]}
    return re.compile("|".join(re.escape(t) for t in sorted(ahead, key=len, reverse=True)),
                      re.IGNORECASE)


_BEFORE: dict[str, re.Pattern[str]] = {}
_SYLLABLE = {"permitted": 3, "permission": 3, "access": 2, "exists": 2, "exist": 2}

# U+2060 WORD JOINER: invisible, and no word at all, so "per\u2060mission" is read as
# "permission" by a person or an agent while 9pfuse's substring match no longer finds it.
JOINER = "\u2060"


def defuse(text: str, keep: str = "input/output") -> str:
    """`text` (words toolsrv passes on to 9pfuse: a tool's stderr; args or a schema quoted in
    an `invalid args`, keep="argument"; a client's path, keep="no such") with a JOINER
    inside each of 9pfuse's words that would outrank `keep`, so that the errno stays
    toolsrv's: "no such" -> "no \u2060such", "Permission" -> "Per\u2060mission".  Only the
    9P error string carries it: `words()` takes it out, and the CLI, the MCP face, `log` and `err`
    show the tool's words exactly as it wrote them (a JOINER of the tool's own is dropped
    here, so that words() gives back the text exactly)."""
    def cut(m: re.Match[str]) -> str:
        w = m.group(0)
        if " " in w:
            return w.replace(" ", " " + JOINER, 1)
        at = _SYLLABLE.get(w.lower(), len(w) // 2)
        return f"{w[:at]}{JOINER}{w[at:]}"
    pattern = _BEFORE.get(keep)
    if pattern is None:
        pattern = _BEFORE[keep] = _before(keep)
    out = text.replace(JOINER, "")
    for _ in range(4):         # again: a word left whole inside a phrase ("is a directory")
        more = pattern.sub(cut, out)
        if more == out:
            break
        out = more
    return out


def words(ename: str) -> str:
    """An error string as a person reads it: defuse() undone (the tool's own words)."""
    return ename.replace(JOINER, "")


def errno_for(ename: str) -> int:
    """The errno 9pfuse gives a process for this Rerror string."""
    low = ename.lower()
    for text, num in _ERRTAB:
        if text in low:
            return num
    return E.ERANGE
