"""The independent python-9p client (plan9port's C codec) against a real server,
over a Unix socket and over TCP loopback."""
from __future__ import annotations

import os
import shutil
import threading

import pytest
import py9p
from py9p import (DMDIR, OREAD, ORDWR, OTRUNC, OWRITE, Client, RemoteError, Rflush, Rread,
                  Tflush, Tread)

from fakes import FakeRegistry, ThreadServer, make_fs, short_tmpdir


@pytest.fixture(params=["unix", "tcp"])
def server(request):
    tmp = short_tmpdir()
    reg = FakeRegistry()
    fs = make_fs(tmp, reg, revwait_timeout=10)
    addr = f"unix!{tmp}/ns/toolsrv" if request.param == "unix" else "tcp!127.0.0.1!0"
    srv = ThreadServer(fs, [addr]).start()
    srv.registry = reg
    yield srv
    srv.stop()
    shutil.rmtree(tmp, ignore_errors=True)


def connect(srv) -> Client:
    a = srv.addrs[0]
    c = (Client.connect_unix(a.path, msize=8192 + 24) if a.kind == "unix"
         else Client.connect_tcp(a.host, a.port, timeout=10, msize=8192 + 24))
    assert c.negotiate().version == "9P2000"
    c.attach(0, uname="tester")
    return c


def test_browse_and_read(server):
    with connect(server) as c:
        c.walk(0, 1, "")
        c.open(1, OREAD)
        names = []
        data = c.read(1, offset=0)
        off = len(data)
        while data:
            while data:
                n = int.from_bytes(data[:2], "little") + 2
                names.append(py9p.decode_dir(data[:n]).name)
                data = data[n:]
            data = c.read(1, offset=off)
            off += len(data)
        assert names == ["revision", "revwait", "tools", "session"]
        c.clunk(1)
        qids = c.walk(0, 2, "tools/index")
        assert len(qids) == 2 and qids[0].type & 0x80
        c.open(2, OREAD)
        assert c.read(2) == b"echo\thot\ta fake tool\nfile_read\thot\ta fake tool\n"
        st = c.stat(2)
        assert st.length == len(b"echo\thot\ta fake tool\nfile_read\thot\ta fake tool\n")
        assert st.qid.path != 0
        c.clunk(2)


def test_mkdir_session_and_agent_write_cwd_wstat_remove(server, tmp_path):
    with connect(server) as c:
        c.walk(0, 1, "session")
        qid, _ = c.create(1, "s1", DMDIR | 0o755, OREAD)
        assert qid.type & 0x80
        c.clunk(1)
        c.walk(0, 2, "session/s1/agent")
        c.create(2, "a1", DMDIR | 0o755, OREAD)
        c.clunk(2)
        # wstat truncate on a walked, unopened fid, then write: what `echo > cwd` does
        c.walk(0, 3, "session/s1/cwd")
        raw = bytearray(py9p.encode_dir(py9p.Dir(name="", length=0)))
        dont_touch = py9p.encode_dir(py9p.Dir(type=0xFFFF, dev=0xFFFFFFFF,
                                              qid=py9p.Qid(0xFF, 0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF),
                                              mode=0xFFFFFFFF, atime=0xFFFFFFFF,
                                              mtime=0xFFFFFFFF, length=0))
        c.wstat(3, dont_touch)
        c.walk(3, 4, "")
        c.open(4, OWRITE | OTRUNC)
        d = str(tmp_path)
        assert c.write(4, (d + "\n").encode()) == len(d) + 1
        with pytest.raises(RemoteError, match="no such directory"):
            c.write(4, b"/definitely/not/here\n")
        c.clunk(4)
        c.open(3, OREAD)
        assert c.read(3) == (d + "\n").encode()
        c.clunk(3)
        c.walk(0, 5, "session/s1")
        c.remove(5)
        assert len(c.walk(0, 6, "session/s1")) == 1   # partial walk: s1 is gone
        with pytest.raises(RemoteError, match="bad file: unknown fid"):
            c.stat(6)                                   # and newfid was not bound
        del raw


def test_errors(server):
    with connect(server) as c:
        with pytest.raises(RemoteError, match="file not found"):
            c.walk(0, 1, "nope")
        with pytest.raises(RemoteError, match="create prohibited"):
            c.walk(0, 1, "tools")
            c.create(1, "x", 0o644, OWRITE)
        with pytest.raises(RemoteError, match="unknown fid"):
            c.clunk(77)
        c.walk(0, 2, "revision")
        with pytest.raises(RemoteError, match="permission denied"):
            c.open(2, ORDWR)
        with pytest.raises(RemoteError, match="fid in use"):
            c.walk(0, 2, "")


def test_flush_cancels_blocking_revwait(server):
    with connect(server) as c:
        c.walk(0, 1, "revwait")
        c.open(1, ORDWR)
        assert c.read(1, offset=0) == b"0\n"              # a plain read does not wait
        c.write(1, b"0")                                   # wait for a change from 0
        result: dict = {}

        def blocked() -> None:
            try:
                result["r"] = c.rpc(Tread(fid=1, offset=0, count=100), Rread, tag=50)
            except RemoteError as e:
                result["e"] = str(e)

        t = threading.Thread(target=blocked)
        t.start()
        # make sure the read is in flight before flushing it: a stat round trip
        # on the same connection is answered only after the read was received
        c.stat(1)
        r = c.rpc(Tflush(oldtag=50), Rflush)
        t.join(10)
        assert isinstance(r, Rflush)
        assert result == {"e": "interrupted"}


def test_revwait_returns_next_revision(server):
    with connect(server) as c:
        c.walk(0, 1, "revwait")
        c.open(1, ORDWR)
        c.write(1, b"0\n")
        out: dict = {}
        t = threading.Thread(target=lambda: out.setdefault("d", c.read(1)))
        t.start()
        c.stat(1)
        server.call(server.registry.bump)
        t.join(10)
        assert out["d"] == b"1\n"
        c.walk(0, 2, "revision")
        assert c.stat(2).qid.vers == 1


def test_eight_threads_share_one_connection(server):
    with connect(server) as c:
        errors: list = []
        fids = iter(range(100, 100000))
        lock = threading.Lock()

        def work(k: int) -> None:
            try:
                for i in range(50):
                    with lock:
                        f = next(fids)
                    c.walk(0, f, "tools/index" if (i + k) % 2 else "revision")
                    c.open(f, OREAD)
                    data = c.read(f)
                    want = b"0\n" if (i + k) % 2 == 0 else b"echo\thot"
                    assert data.startswith(want), data
                    c.clunk(f)
            except BaseException as e:
                errors.append(e)

        ts = [threading.Thread(target=work, args=(k,)) for k in range(8)]
        for t in ts:
            t.start()
        for t in ts:
            t.join(60)
        assert not errors, errors[:3]


def test_socket_is_private_stale_replaced_live_refused():
    from toolsrv.serve.transport import AddressInUse
    tmp = short_tmpdir()
    path = f"{tmp}/ns/toolsrv"
    srv = ThreadServer(make_fs(tmp), [f"unix!{path}"]).start()
    try:
        assert os.stat(path).st_mode & 0o777 == 0o600
        assert os.stat(os.path.dirname(path)).st_mode & 0o777 == 0o700
        with pytest.raises(AddressInUse, match="address already in use: .*listens there"):
            ThreadServer(make_fs(tmp), [f"unix!{path}"]).start()
    finally:
        srv.stop()
    assert os.path.exists(path)          # the dead server's socket file is stale now
    srv2 = ThreadServer(make_fs(tmp), [f"unix!{path}"]).start()
    try:
        with connect(srv2) as c:
            c.walk(0, 1, "revision")
    finally:
        srv2.stop()
        shutil.rmtree(tmp, ignore_errors=True)
