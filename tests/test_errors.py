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
    E.EINTERNAL: errno.EIO, E.EBUSY: errno.EBUSY, E.ETIMEOUT: errno.ETIMEDOUT,
}


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
    assert len(e.ename.encode()) < E.ERRMAX and e.ename.endswith("...")
    assert "\n" not in E.P9Error("a\nb").ename
