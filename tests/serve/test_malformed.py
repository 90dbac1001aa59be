"""Frames sent raw over a real socket: a broken framing closes only that connection; a
sound frame with bad content (a name not UTF-8 or holding NUL, a wstat Dir whose size is
wrong), or a Twrite whose data does not fit the iounit, is one failed request, answered
with Rerror, and the connection serves on."""
from __future__ import annotations

import shutil
import socket
import struct

import pytest
from py9p import OREAD, Client

from toolsrv.proto import (
    DMDIR, IOHDRSZ, NOFID, OWRITE, Dir, Framer, Rattach, Rcreate, Rerror, Ropen,
    Rversion, Rwalk, Rwrite, Tattach, Tcreate, Topen, Tversion, Twalk, Twrite, encode,
    encode_dir,
)
from fakes import ThreadServer, make_fs, short_tmpdir


@pytest.fixture(scope="module")
def server():
    tmp = short_tmpdir()
    srv = ThreadServer(make_fs(tmp), [f"unix!{tmp}/ns/toolsrv"]).start()
    yield srv
    srv.stop()
    shutil.rmtree(tmp, ignore_errors=True)


def frame(type_: int, body: bytes, tag: int = 1, size: int | None = None) -> bytes:
    n = 7 + len(body) if size is None else size
    return struct.pack("<IBH", n, type_, tag) + body


def s(x: str | bytes) -> bytes:
    b = x.encode() if isinstance(x, str) else x
    return struct.pack("<H", len(b)) + b


MALFORMED = {
    "size below 7": struct.pack("<IBH", 6, 100, 0xFFFF),
    "size above msize": struct.pack("<IBH", 10_000_000, 100, 0xFFFF),
    "unknown type": frame(99, b""),
    "Terror type": frame(106, b""),
    "string past the frame": frame(100, struct.pack("<I", 8192) + struct.pack("<H", 50) + b"9P"),
    "trailing bytes": frame(108, struct.pack("<H", 1) + b"junk"),
    "17 walk names": frame(110, struct.pack("<IIH", 0, 1, 17) + b"".join(s("a") for _ in range(17))),
    "write count past the frame": frame(118, struct.pack("<IQI", 0, 0, 100) + b"abc"),
}


def negotiated_socket(path: str) -> socket.socket:
    sk = socket.socket(socket.AF_UNIX)
    sk.settimeout(10)
    sk.connect(path)
    sk.sendall(encode(Tversion(0xFFFF, 8192 + 24, "9P2000")))
    assert sk.recv(100)[4] == 101   # Rversion
    return sk


@pytest.mark.parametrize("name", list(MALFORMED))
def test_malformed_frame_closes_only_that_connection(server, name):
    path = server.addrs[0].path
    good = Client.connect_unix(path, msize=8192 + 24)
    good.negotiate()
    good.attach(0, uname="good")
    bad = negotiated_socket(path)
    bad.sendall(MALFORMED[name])
    assert bad.recv(100) == b"", "the server should hang up on a malformed frame"
    bad.close()
    # the other connection never noticed
    good.walk(0, 1, "revision")
    good.open(1, OREAD)
    assert good.read(1) == b"0\n"
    good.close()


ILLEGAL = {
    "walk name e9 74 e9": (frame(110, struct.pack("<IIH", 0, 1, 1) + s(b"\xe9t\xe9")),
                           "illegal file name"),
    "NUL in a walk name": (frame(110, struct.pack("<IIH", 0, 1, 2) + s("tools") + s(b"in\0dex")),
                           "illegal file name"),
    "NUL in a create name": (frame(114, struct.pack("<I", 0) + s(b"x\0y")
                                   + struct.pack("<IB", DMDIR | 0o755, 0)), "illegal file name"),
    "wstat inner size wrong": (frame(126, struct.pack("<I", 0) + s(struct.pack("<H", 48)
                                     + encode_dir(Dir.notouch())[2:])), "bad directory in wstat"),
    "attach uname not UTF-8": (frame(104, struct.pack("<II", 5, NOFID) + s(b"\xff") + s("")),
                               "illegal string: not UTF-8 or holds a NUL"),
}


def replies(sk: socket.socket, n: int) -> list:
    fr, out = Framer(8192 + 24), []
    while len(out) < n:
        data = sk.recv(65536)
        assert data, f"the server hung up after {out}"
        out += fr.feed(data)
    return out


@pytest.mark.parametrize("name", list(ILLEGAL))
def test_bad_content_is_an_rerror_and_the_connection_serves_on(server, name):
    """9pfuse passes the kernel's raw name bytes to Twalk: a stat of such a path must not
    drop every fid of everyone sharing the mount (lib9p answers Rerror too)."""
    data, ename = ILLEGAL[name]
    sk = negotiated_socket(server.addrs[0].path)
    sk.sendall(encode(Tattach(7, 0, NOFID, "u", "")))
    assert type(replies(sk, 1)[0]) is Rattach
    sk.sendall(data + encode(Twalk(2, 0, 1, ("revision",))))     # the next request, pipelined
    bad, walk = replies(sk, 2)
    assert bad == Rerror(1, ename)
    assert type(walk) is Rwalk and len(walk.wqid) == 1          # fid 0 survived
    sk.close()


def test_a_write_longer_than_the_iounit_is_refused_and_the_connection_serves_on(server):
    """At msize 1024 the iounit is 1000: a Twrite of 1,001 bytes fits the frame (1,024
    bytes) but not the iounit, and lib9p's srv.c caps count at msize - IOHDRSZ too."""
    sk = socket.socket(socket.AF_UNIX)
    sk.settimeout(10)
    sk.connect(server.addrs[0].path)
    sk.sendall(encode(Tversion(0xFFFF, 1024, "9P2000")))
    assert replies(sk, 1) == [Rversion(0xFFFF, 1024, "9P2000")]
    sk.sendall(encode(Tattach(1, 0, NOFID, "u", "")) +
               encode(Twalk(2, 0, 1, ("session",))) +
               encode(Tcreate(3, 1, "w", DMDIR | 0o755, OREAD)) +
               encode(Twalk(4, 0, 2, ("session", "w", "sandbox"))) + encode(Topen(5, 2, OWRITE)))
    got = replies(sk, 5)
    assert [type(m) for m in got] == [Rattach, Rwalk, Rcreate, Rwalk, Ropen]
    assert got[-1].iounit == 1024 - IOHDRSZ
    too_long = encode(Twrite(6, 2, 0, b"x" * 1001))
    assert len(too_long) == 1024
    full = encode(Twrite(7, 2, 0, b"default".ljust(1000)))      # the iounit exactly
    sk.sendall(too_long + full)
    assert replies(sk, 2) == [Rerror(6, "write count above the iounit (invalid argument)"),
                              Rwrite(7, 1000)]
    sk.close()


def test_half_frame_then_hangup_leaves_server_serving(server):
    path = server.addrs[0].path
    bad = negotiated_socket(path)
    bad.sendall(struct.pack("<IBH", 100, 116, 1) + b"\x00" * 10)   # 17 of 100 bytes
    bad.close()
    good = Client.connect_unix(path, msize=8192 + 24)
    good.negotiate()
    good.attach(0)
    assert good.walk(0, 1, "tools/index")
    good.close()
