"""Every declared error string maps, through 9pfuse's errstr table, to a
fitting errno — never to its ERANGE fallback — and fits in ERRMAX."""
from __future__ import annotations

import errno

import pytest

from toolsrv import errors as E

EXPECTED = {
    E.ENOTFOUND: errno.ENOENT, E.EPERM: errno.EACCES, E.EISDIR: errno.EISDIR,
    E.ENOTDIR: errno.ENOTDIR, E.EFIDINUSE: errno.EBUSY, E.EUNKFID: errno.EBADF,
    E.EINTR: errno.EINTR, E.ECREATE: errno.EACCES, E.EREMOVE: errno.EACCES,
    E.EWSTAT: errno.EACCES, E.EOFFSET: errno.EINVAL, E.EDIRCOUNT: errno.EINVAL,
    E.EOPEN: errno.EBADF, E.ENOTOPEN: errno.EBADF, E.EWALKOPEN: errno.EBADF,
    E.EBADNAME: errno.EINVAL, E.EEXIST: errno.EEXIST, E.ENOAUTH: errno.EACCES,
    E.EDUPTAG: errno.EBUSY, E.ENOVERSION: errno.EINVAL, E.EBADMODE: errno.EINVAL,
    E.EINTERNAL: errno.EIO, E.ETIMEOUT: errno.ETIMEDOUT,
    E.ECANCELLED: errno.EIO, E.EREVWAIT: errno.EINVAL,
    E.EBADDIR: errno.ENOTDIR, E.EBADSTRING: errno.EINVAL, E.EBADTYPE: errno.EINVAL,
    E.EMSIZE: errno.EINVAL, E.EWCOUNT: errno.EINVAL,
}


# the constructors, with the words their callers give them
MADE = {
    E.busy("too many fids", 4096): errno.EBUSY,
    E.busy("session s is being removed", then="try again"): errno.EBUSY,
    E.too_long("ctl", 65536, "line"): errno.E2BIG,
    E.too_long("invalid args", 1 << 20): errno.E2BIG,
    E.fit("cwd: no such directory: ", "/x" * 200, ""): errno.ENOENT,
    E.fit("invalid args: ", "x: " + "y" * 300): errno.EINVAL,
}


@pytest.mark.parametrize("ename", sorted(MADE))
def test_each_constructor_says_its_errno_word(ename):
    assert E.errno_for(ename) == MADE[ename], (ename, errno.errorcode[E.errno_for(ename)])
    assert len(ename.encode()) < E.ERRMAX


def test_busy_and_too_long_read_as_before():
    assert E.busy("too many fids", 9) == "resource busy: too many fids (limit 9)"
    assert E.busy("agent a is being removed", then="try again") == \
        "resource busy: agent a is being removed (try again)"
    assert E.too_long("search", 8, "need") == "search: need longer than 8 bytes: too long"
    assert E.too_long("invalid args", 8) == "invalid args: longer than 8 bytes: too long"


def test_fit_keeps_a_path_whole_and_the_whole_text_for_the_log():
    path = "/very/long/" + "d" * 150 + "/file"
    made = E.fit("cwd: no such directory: ", path, "")
    assert len(made.encode()) < E.ERRMAX and made.full.endswith(path)
    assert made.startswith("cwd: no such directory: ")


def test_every_declared_string_has_an_expectation():
    assert sorted(E.DECLARED) == sorted(EXPECTED)


@pytest.mark.parametrize("ename", sorted(EXPECTED))
def test_maps_to_fitting_errno(ename):
    got = E.errno_for(ename)
    assert got != errno.ERANGE
    assert got == EXPECTED[ename], (ename, errno.errorcode[got])
    assert len(ename.encode()) < E.ERRMAX


def test_table_quirks():
    # lib9p's own words that fall through to ERANGE: why we reworded them
    for raw in ("create prohibited", "bad offset", "unknown fid", "wstat prohibited"):
        assert E.errno_for(raw) == errno.ERANGE
    assert E.errno_for("x is a directory") == errno.EISDIR   # before "directory"
    assert E.errno_for("file exists") == errno.EEXIST        # before "exist"


def test_long_errors_are_cut_to_errmax():
    e = E.P9Error("exit 1: " + "x" * 500)
    assert len(e.ename.encode()) < E.ERRMAX and "..." in e.ename    # its middle out
    assert "\n" not in E.P9Error("a\nb").ename


def test_control_characters_from_clients_are_escaped_so_every_error_encodes():
    """The long fuzz found it: a cwd or ctl word with a NUL became an Rerror that could
    not be encoded (a 9P string holds no NUL).  Every control character is written out."""
    from toolsrv.proto import Rerror, encode
    for raw in ("cwd: no such directory: /\0x", 'invalid command "tool_lo\0ad"', "a\x01b\x7f"):
        e = E.P9Error(raw)
        assert e.ename.isprintable() and "\0" not in e.ename, e.ename
        encode(Rerror(1, e.ename))
    assert E.P9Error("cwd: no such directory: /\0x").ename == "cwd: no such directory: /\\x00x"
    assert E.P9Error("é ok").ename == "é ok"


def test_a_reply_that_cannot_be_encoded_becomes_an_internal_error(caplog):
    """Defence in depth behind the escaping above: the client gets an answer for its tag,
    the log gets the reason, the connection lives on."""
    from toolsrv.proto import Rerror, decode
    from toolsrv.serve.transport import NinePProtocol

    class Transport:
        out: list = []

        def write(self, data: bytes) -> None:
            self.out.append(data)

        def is_closing(self) -> bool:
            return False

    p = NinePProtocol.__new__(NinePProtocol)
    p.batch, p.transport, p.conn, p.gate = None, Transport(), None, None
    p._send(Rerror(3, "bad\0"))
    assert decode(p.transport.out[0])[0] == Rerror(3, E.EINTERNAL)
    assert "reply cannot be encoded" in caplog.text
