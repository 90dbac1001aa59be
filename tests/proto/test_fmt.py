"""The one-line text form: plan9port-like output, hand-written input, exact inverse."""
from __future__ import annotations

import pytest
from hypothesis import given, strategies as st

from toolsrv.proto import (
    DMAPPEND, DMDIR, DMEXCL, DMTMP, NOFID, NOTAG, QTAUTH, QTDIR, QTMOUNT, QTTMP, Dir, Qid,
    Rerror, Ropen, Rread, Rstat, Rversion, Rwalk, Tattach, Tcreate, Topen, Tread, Tversion,
    Twalk, Twrite, Twstat, format_msg, parse_msg,
)
from toolsrv.proto.fmt import format_dir
from test_codec import FAST, SAMPLES

EXAMPLES = [
    (Tversion(NOTAG, 8192, "9P2000"), "Tversion tag 65535 msize 8192 version 9P2000"),
    (Twalk(1, 0, 1, ("tools", "index")), "Twalk tag 1 fid 0 newfid 1 nwname 2 0:tools 1:index"),
    (Twalk(1, 0, 1, ()), "Twalk tag 1 fid 0 newfid 1 nwname 0"),
    (Rwalk(1, (Qid(QTDIR, 0, 1), Qid(0, 0, 2))),
     "Rwalk tag 1 nwqid 2 0:(0000000000000001 0 d) 1:(0000000000000002 0 )"),
    (Ropen(1, Qid(0, 0, 3), 0), "Ropen tag 1 qid (0000000000000003 0 ) iounit 0"),
    (Tread(1, 2, 0, 8192), "Tread tag 1 fid 2 offset 0 count 8192"),
    (Rread(1, b"hi\n"), "Rread tag 1 count 3 'hi\\n'"),
    (Twrite(1, 2, 0, b"hi\n"), "Twrite tag 1 fid 2 offset 0 count 3 'hi\\n'"),
    (Rerror(1, "file not found"), "Rerror tag 1 ename file not found"),
    (Tcreate(1, 1, "foo", DMDIR | 0o755, 0),
     "Tcreate tag 1 fid 1 name foo perm d-rwxr-xr-x mode 0"),
    (Tattach(0, 0, NOFID, "glenda", ""), "Tattach tag 0 fid 0 afid -1 uname glenda aname ''"),
    (Rstat(1, Dir(0, 0, Qid(QTDIR, 2, 0x1F), DMDIR | 0o755, 5, 6, 0, "tools", "u", "g", "")),
     "Rstat tag 1 stat 'tools' 'u' 'g' '' q (000000000000001f 2 d) m 020000000755 at 5 mt 6 "
     "l 0 t 0 d 0"),
    (Twstat(1, 2, Dir.notouch(length=0)),
     "Twstat tag 1 fid 2 stat '' '' '' '' q (ffffffffffffffff 4294967295 0xff) m -1 at -1 "
     "mt -1 l 0 t -1 d -1"),
]


@pytest.mark.parametrize("msg, line", EXAMPLES, ids=lambda x: str(x)[:30])
def test_examples(msg, line) -> None:
    assert format_msg(msg) == line
    assert parse_msg(line) == msg


@pytest.mark.parametrize("msg", SAMPLES, ids=lambda m: format_msg(m, 16)[:60])
def test_samples_round_trip(msg) -> None:
    line = format_msg(msg)
    assert "\n" not in line and parse_msg(line) == msg


@pytest.mark.parametrize("line, msg", [
    ("  Twalk\ttag 0x1 fid 0 newfid 1  nwname 2 0:tools 1:'index'  \r\n",
     Twalk(1, 0, 1, ("tools", "index"))),
    ("Tversion tag -1 msize 0x2000 version '9P2000'", Tversion(NOTAG, 8192, "9P2000")),
    ("Tcreate tag 1 fid 1 name foo perm 0644 mode 0x11", Tcreate(1, 1, "foo", 0o644, 0x11)),
    ("Tcreate tag 1 fid 1 name foo perm 0o644 mode 1", Tcreate(1, 1, "foo", 0o644, 1)),
    ("Tcreate tag 1 fid 1 name foo perm 0x80000000 mode 0", Tcreate(1, 1, "foo", DMDIR, 0)),
    ("Ropen tag 1 qid (3 0) iounit 0", Ropen(1, Qid(0, 0, 3), 0)),
    ("Ropen tag 1 qid (0x3 0 ad) iounit 0", Ropen(1, Qid(QTDIR | 0x40, 0, 3), 0)),
    ("Ropen tag 1 qid (3 0 0x82) iounit 0", Ropen(1, Qid(0x82, 0, 3), 0)),
    ("Rread tag 7 count 0", Rread(7, b"")),
    ("Rread tag 7 count 2 '\\x00\\xFF'", Rread(7, b"\0\xff")),
    ("Rread tag 7 count 4 'é\\\\\\''", Rread(7, "é\\'".encode())),
    ("Rerror tag 1 ename it's gone:  really", Rerror(1, "it's gone:  really")),
    ("Rerror tag 1 ename", Rerror(1, "")),
    ("Topen tag 1 fid -2 mode -1", Topen(1, NOFID - 1, 0xFF)),
    ("Twstat tag 1 fid 2 stat x u g m q (1 0 ) m d-rwxr-xr-x at 0 mt 0 l -1 t 0 d 0",
     Twstat(1, 2, Dir(0, 0, Qid(0, 0, 1), DMDIR | 0o755, 0, 0, 2**64 - 1, "x", "u", "g", "m"))),
])
def test_hand_written(line, msg) -> None:
    assert parse_msg(line) == msg


@pytest.mark.parametrize("line", [
    "", "Terror tag 1", "Tfoo tag 1", "tversion tag 1 msize 1 version x",
    "Tversion tag 1 msize 1", "Tversion msize 1 tag 1 version x",
    "Tversion tag 1 msize 1 version x extra", "Tversion tag 65536 msize 1 version x",
    "Tversion tag 1 msize 08 version x", "Tversion tag 1 msize 1_000 version x",
    "Tversion tag 1 msize ١ version x", "Tversion tag -32769 msize 1 version x",
    "Tversion tag 1 msize 1 version 'x", "Tversion tag 1 msize 1 version 'x\\q'",
    "Tversion tag 1 msize 1 version 'x\\x4'", "Tversion tag 1 msize 1 version '\\xff'",
    "Tversion tag 1 msize 1 version 'a'b", "Tclunk tag 1 fid",
    "Twalk tag 1 fid 0 newfid 1 nwname 2 0:a", "Twalk tag 1 fid 0 newfid 1 nwname 2 0:a 2:b",
    "Twalk tag 1 fid 0 newfid 1 nwname 1 a",
    "Twalk tag 1 fid 0 newfid 1 nwname 17 " + " ".join(f"{i}:a" for i in range(17)),
    "Rread tag 1 count 3 'hi'", "Rread tag 1 count 2 hi", "Rread tag 1 count 2 'hi'...",
    "Rread tag 1 count 1", "Ropen tag 1 qid (3) iounit 0", "Ropen tag 1 qid (3 0 x) iounit 0",
    "Ropen tag 1 qid (3 0 dd) iounit 0", "Ropen tag 1 qid (3 0 d iounit 0",
    "Ropen tag 1 qid (10000000000000000 0 ) iounit 0", "Ropen tag 1 qid (g 0 ) iounit 0",
    "Tcreate tag 1 fid 1 name foo perm drwxr-xr-x mode 0",
    "Rstat tag 1 stat 'a' 'b' 'c' q (1 0 ) m 0 at 0 mt 0 l 0 t 0 d 0",
])
def test_bad_lines(line) -> None:
    with pytest.raises(ValueError):
        parse_msg(line)


def test_error_names_the_column() -> None:
    with pytest.raises(ValueError, match="column"):
        parse_msg("Tclunk tag 1 fid x")


@pytest.mark.parametrize("perm, text", [
    (0o644, "--rw-r--r--"), (DMDIR | 0o755, "d-rwxr-xr-x"), (DMAPPEND | 0o222, "a--w--w--w-"),
    (DMEXCL | 0o600, "-lrw-------"), (0, "-----------"), (DMDIR | DMTMP | 0o700, "020400000700"),
    (DMDIR | DMAPPEND, "030000000000"), (0xFFFFFFFF, "037777777777"),
])
def test_perm(perm, text) -> None:
    msg = Tcreate(1, 2, "f", perm, 0)
    assert format_msg(msg) == f"Tcreate tag 1 fid 2 name f perm {text} mode 0"
    assert parse_msg(format_msg(msg)) == msg


@pytest.mark.parametrize("qtype, text", [
    (0, ""), (QTDIR, "d"), (QTDIR | QTTMP, "dt"), (QTAUTH, "A"), (QTMOUNT, "M"),
    (0xFC, "dalMAt"), (0x02, "0x2"), (0xFF, "0xff"),
])
def test_qid_types(qtype, text) -> None:
    msg = Ropen(1, Qid(qtype, 3, 4), 0)
    assert format_msg(msg) == f"Ropen tag 1 qid (0000000000000004 3 {text}) iounit 0"
    assert parse_msg(format_msg(msg)) == msg


@pytest.mark.parametrize("text, shown", [
    ("tools", "tools"), ("", "''"), ("a b", "'a b'"), ("it's", "it's"), ("'x", "'''x'"),
    ("a\nb", "'a\\nb'"), ("tab\there", "'tab\\there'"), ("back\\slash", "'back\\\\slash'"),
    ("日本", "日本"), ("\x7f", "'\\x7f'"), ("\u200b", "'\\xe2\\x80\\x8b'"), ("\0", "'\\x00'"),
    ("\u00a0", "'\\xc2\\xa0'"),
])
def test_string_quoting(text, shown) -> None:
    msg = Rversion(1, 8192, text)
    assert format_msg(msg) == f"Rversion tag 1 msize 8192 version {shown}"
    assert parse_msg(format_msg(msg)) == msg


@pytest.mark.parametrize("ename, shown", [
    ("file not found", "file not found"), ("", "''"), (" lead", "' lead'"),
    ("trail ", "'trail '"), ("'q' x", "'''q'' x'"), ("two\nlines", "'two\\nlines'"),
])
def test_ename_quoting(ename, shown) -> None:
    assert format_msg(Rerror(1, ename)) == f"Rerror tag 1 ename {shown}"
    assert parse_msg(format_msg(Rerror(1, ename))) == Rerror(1, ename)


def test_data_shows_utf8_and_escapes_the_rest() -> None:
    data = "é{}\n".encode() + b"\xff\xed\xa0\x80'\\\t\r\0"
    line = format_msg(Rread(1, data))
    assert line == f"Rread tag 1 count {len(data)} 'é{{}}\\n\\xff\\xed\\xa0\\x80''\\\\\\t\\r\\x00'"
    assert parse_msg(line) == Rread(1, data)


def test_maxdata_truncates_for_traces() -> None:
    line = format_msg(Rread(1, b"x" * 100), maxdata=4)
    assert line == "Rread tag 1 count 100 'xxxx'..."
    assert format_msg(Rread(1, b"x" * 4), maxdata=4) == "Rread tag 1 count 4 'xxxx'"
    with pytest.raises(ValueError):
        parse_msg(line)


def test_format_dir() -> None:
    d = Dir(0, 0, Qid(0, 1, 2), 0o644, 0, 0, 3, "x", "glenda", "sys", "")
    assert format_dir(d) == ("'x' 'glenda' 'sys' '' q (0000000000000002 1 ) m 0644 at 0 "
                             "mt 0 l 3 t 0 d 0")


@FAST
@given(st.text(st.characters(blacklist_categories=("Cs",)), max_size=40),
       st.binary(max_size=100), st.text(st.characters(blacklist_categories=("Cs",)), max_size=40))
def test_property_any_text_and_bytes(text, data, ename) -> None:
    for msg in (Twalk(1, 2, 3, (text, text + "x")), Twrite(1, 2, 3, data), Rerror(4, ename),
                Rstat(1, Dir(name=text, uid=ename))):
        line = format_msg(msg)
        assert "\n" not in line and "\r" not in line
        assert parse_msg(line) == msg
