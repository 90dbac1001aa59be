# toolsrv/run/secrets.py — a tool's secrets: read for its run, and kept out of what the
# run leaves behind (issue 50).
#
# Where a value comes from.  A `.meta` names the secrets its tool needs (`"secrets":
# ["GITHUB_TOKEN"]`; registry/names.py holds the names' rule).  At each call, before the
# run starts, each is read from
#   1. $CREDENTIALS_DIRECTORY/NAME, when the server has that variable (systemd's
#      LoadCredential=: a read-only directory only the unit's user and root may read),
#   2. else ~/.config/ollie/secrets/NAME (the server's HOME),
# the first that holds the file.  A value is read at each call, never cached, so a
# rotated secret is used by the next call (a resident process keeps the values it was
# started with, and is restarted when they change: tree/resident/manager.py).
#
# The server never follows a link out of either directory, and reads only what the
# server's user alone could have put there:
#   - the directory is opened O_DIRECTORY|O_NOFOLLOW, the file from it (dir_fd)
#     O_NOFOLLOW|O_NONBLOCK; a symbolic link in either place is refused, not followed, and
#     a file that is not regular (a FIFO, a device) is refused before it is read;
#   - both are checked on the open descriptors (fstat), never by path: in the home
#     directory, both are the server's uid's and neither may be read, written or searched
#     by group or others (the refusal names which, and the chmod to run); in systemd's,
#     owner the server's uid or root, writable by no one else (its read bits are not
#     checked: systemd grants the unit's user with an ACL, whose mask shows in the group
#     bits);
#   - a value is at most MAX_BYTES (64 KiB), read to that bound and not past it; one
#     trailing newline is stripped; it must be UTF-8 without NUL (an environment's), and at
#     least MIN_BYTES long: a shorter value cannot be told from ordinary output, so it
#     could not be kept out of it (below), and is refused.
# Every refusal is a SecretError whose text says which secret, what is wrong, where
# (both places for a missing one), in words 9pfuse maps to an errno ("no such file or
# directory", "permission denied", "invalid argument"); the call fails with it, unrun.
#
# Where a value goes.  Values is one call's: its `env` goes into that run's environment
# and nowhere else (tree/calls/scheduler.py).  Whatever the run gives back passes through
# it once, where the call's result is assembled, before anyone can read it: each value,
# longest first, becomes `[secret NAME]` in stdout, stderr and the reason
# (`redact_bytes`, `redact_text`; bytes.replace per value, over output the cap already
# bounds).  A value cut by the output cap leaves its beginning at the end of the output;
# that tail is redacted too (`cut=True`).  Only the value as written is found: a run that
# prints it encoded (base64, reversed) is the tool's own choice (SECURITY.md, out of
# scope).  repr() of a Values names the secrets, never their values.
from __future__ import annotations

import errno
import hashlib
import os
import stat

from ..errors import defuse, fit, words

MAX_BYTES = 64 << 10
MIN_BYTES = 4
HOME_DIR = "~/.config/ollie/secrets"
CREDENTIALS = "CREDENTIALS_DIRECTORY"


class SecretError(Exception):
    """A secret could not be read, or may not be used: the text says which and why (the
    call's Rerror, cut to fit; `full` the whole of it, for the agent's log)."""

    def __init__(self, name: str, detail: str, why: str) -> None:
        # `why`: the errno's words, last, where a cut never reaches; a name or path holding
        # a word 9pfuse ranks before them (ACCESS_KEY) is defused (errors.defuse)
        keep = KEEP[why]
        text = fit(defuse(f"secret {name}: ", keep), defuse(detail, keep), f" ({why})")
        super().__init__(str(text))
        self.full = words(text.full)


# each refusal's errno words -> the word of 9pfuse's table that gives its errno
KEEP = {"no such file or directory": "no such", "permission denied": "permission",
        "too long": "too long", "invalid argument": "argument",
        "not a directory": "directory", "input/output error": "input/output"}


def places() -> list[tuple[str, bool]]:
    """(directory, is systemd's) in the order they are looked in."""
    out = []
    cred = os.environ.get(CREDENTIALS)
    if cred:
        out.append((cred, True))
    out.append((os.path.expanduser(HOME_DIR), False))
    return out


class Values:
    """One call's secrets: `env` (name -> value) for its run alone; the redaction of what
    the run gives back."""

    __slots__ = ("env", "_bytes", "_text")

    def __init__(self, found: dict[str, str]) -> None:
        self.env = dict(found)
        order = sorted(found.items(), key=lambda kv: -len(kv[1].encode()))
        self._bytes = [(v.encode(), f"[secret {k}]".encode()) for k, v in order]
        self._text = [(v, f"[secret {k}]") for k, v in order]

    def __repr__(self) -> str:
        return f"<secrets {' '.join(self.env) or 'none'}>"

    def __bool__(self) -> bool:
        return bool(self.env)

    def stamp(self) -> str:
        """What tells these values from others (a resident process started with other
        values is restarted): a digest, so nothing holding it holds a value."""
        h = hashlib.sha256()
        for k, v in sorted(self.env.items()):
            h.update(k.encode() + b"\0" + v.encode() + b"\0")
        return h.hexdigest()

    def redact_bytes(self, data: bytes, cut: bool = False) -> bytes:
        """`data` with each value as `[secret NAME]`; `cut`: the data was cut at the
        output cap, so a tail that begins a value is redacted too."""
        if not data:
            return data
        for value, mark in self._bytes:
            if value in data:
                data = data.replace(value, mark)
        if cut:
            for value, mark in self._bytes:
                n = _tail_of(data, value)
                if n:
                    data = data[:-n] + mark
        return data

    def redact_text(self, text: str | None) -> str | None:
        """`text` (a reason, a progress line) with each value as `[secret NAME]`."""
        if not text:
            return text
        for value, mark in self._text:
            if value in text:
                text = text.replace(value, mark)
        return text


def _tail_of(data: bytes, value: bytes) -> int:
    """The length of the longest end of `data` that is a beginning of `value` (shorter
    than value: a whole one was replaced already), or 0."""
    first = value[:1]
    start = max(0, len(data) - len(value) + 1)
    at = data.find(first, start)
    while at != -1:
        if value.startswith(data[at:]):
            return len(data) - at
        at = data.find(first, at + 1)
    return 0


def read(names: tuple[str, ...] | list[str]) -> Values:
    """The values of `names`, read now; SecretError for the first that cannot be used."""
    return Values({name: read_one(name) for name in names})


def read_one(name: str) -> str:
    """One secret's value from the first place that holds it (the module's header)."""
    looked = []
    for directory, systemd in places():
        path = os.path.join(directory, name)
        try:
            return _value(name, _read_in(directory, name, systemd))
        except FileNotFoundError:
            looked.append(f"${CREDENTIALS}/{name} ({path})" if systemd else path)
    raise SecretError(name, "looked in " + " and ".join(looked) + ", found neither; put the "
                      "value in a file there, mode 600", "no such file or directory")


def _read_in(directory: str, name: str, systemd: bool) -> bytes:
    """The bytes of `name` in `directory` (the checks of the header); FileNotFoundError
    when the directory or the file is not there."""
    try:
        dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as e:
        if e.errno == errno.ENOENT:
            raise
        raise SecretError(name, *_os_words(e, directory, "directory")) from None
    try:
        _check(name, os.fstat(dfd), directory, systemd, True)
        path = os.path.join(directory, name)
        try:
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         dir_fd=dfd)
        except OSError as e:
            if e.errno == errno.ENOENT:
                raise
            raise SecretError(name, *_os_words(e, path, "file")) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise SecretError(name, f"{path} is not a regular file",
                                  "permission denied")
            _check(name, st, path, systemd, False)
            data = _read_bounded(fd, name, path)
        finally:
            os.close(fd)
    finally:
        os.close(dfd)
    return data


def _check(name: str, st: os.stat_result, path: str, systemd: bool, is_dir: bool) -> None:
    """Refuse a directory or file others could have written (or, at home, read)."""
    me = os.geteuid()
    owners = (me, 0) if systemd else (me,)
    if st.st_uid not in owners:
        whose = "the server's uid or root's" if systemd else "the server's uid"
        raise SecretError(name, f"{path} is owned by uid {st.st_uid}, not {whose} "
                          f"({me}); run chown {me} {path}", "permission denied")
    mode = stat.S_IMODE(st.st_mode)
    bad = mode & (0o022 if systemd else 0o077)
    if bad:
        who = " and ".join(w for w, bits in (("group", 0o070), ("others", 0o007))
                           if bad & bits)
        what = "written" if systemd else "read, written or searched"
        fix = f"chmod go-w {path}" if systemd else \
            f"chmod {'700' if is_dir else '600'} {path}"
        raise SecretError(name, f"{path} may be {what} by {who} (mode {mode:04o}); run "
                          f"{fix}", "permission denied")


def _read_bounded(fd: int, name: str, path: str) -> bytes:
    chunks, size = [], 0
    while size <= MAX_BYTES:
        chunk = os.read(fd, MAX_BYTES + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    if size > MAX_BYTES:
        raise SecretError(name, f"{path} holds over {MAX_BYTES} bytes (64 KiB), the bound "
                          "of a secret", "too long")
    return b"".join(chunks)


def _value(name: str, data: bytes) -> str:
    if data.endswith(b"\n"):
        data = data[:-1]
    if b"\0" in data:
        raise SecretError(name, "its value holds a NUL byte, which no environment can "
                          "carry", "invalid argument")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise SecretError(name, "its value is not UTF-8 text", "invalid argument") from None
    if len(data) < MIN_BYTES:
        raise SecretError(name, f"its value is {len(data)} bytes, fewer than {MIN_BYTES}: too "
                          "short to be told from the run's output and kept out of it",
                          "invalid argument")
    return text


def _os_words(e: OSError, path: str, what: str) -> tuple[str, str]:
    """An open's failure in 9pfuse's words: (the text, its errno word)."""
    if e.errno == errno.ENOTDIR and os.path.islink(path):   # O_DIRECTORY|O_NOFOLLOW's
        e.errno = errno.ELOOP      # answer to a link (the lstat: of the operator's path)
    if e.errno == errno.ELOOP:
        return (f"{path} is a symbolic link, not followed (make the {what} itself)",
                "permission denied")
    if e.errno == errno.ENOTDIR:
        return f"{path}", "not a directory"
    if e.errno in (errno.EACCES, errno.EPERM):
        return f"{path}", "permission denied"
    return f"{path}: {os.strerror(e.errno or 0).lower()}", "input/output error"
