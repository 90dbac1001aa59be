"""Nothing lost, nothing left (issue 34): every change a client is told succeeded is on
disk when the reply leaves, or the reply is the error and the change is undone; a
SIGTERM whose final save fails exits 1 and says so; temp files of a save cut short by a
kill are swept at the next start.

The store-level tests make the disk "full" by patching the state file's write; the
server test puts the state directory on a real full tmpfs (as root) and restarts a real
server process, started outside the checkout.
"""
from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import subprocess
import tempfile

import pytest

from toolsrv.cli.client import Client, ClientError
from toolsrv.errors import P9Error
from toolsrv.tree.state.sessions import SessionStore

from apphelpers import AppThread
from serverhelpers import ServeProcess, stop_clean

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUNDLED = os.path.join(REPO, "data", "tools")
FULL = "input/output error: state not saved: No space left on device"


def _disk_full_from(monkeypatch, when: list[bool]) -> None:
    """The state file's write finds the disk full while when[0] is true."""
    import toolsrv.tree.state.sessions as S
    real = S._write_file

    def write(state_dir, path, data):
        if when[0]:
            return OSError(28, "No space left on device")
        return real(state_dir, path, data)
    monkeypatch.setattr(S, "_write_file", write)


def _saved(path) -> dict:
    return {s["name"]: s for s in json.loads(path.read_text())["sessions"]}


def test_an_unsaved_removal_is_refused_and_undone(tmp_path, monkeypatch):
    """rm of a session or an agent on a full disk: the error, and the session, its agent
    and its private directory are all still there (in the tree and on disk)."""
    full = [False]
    _disk_full_from(monkeypatch, full)
    path = tmp_path / "state" / "state.json"

    async def go():
        st = SessionStore(str(tmp_path / "state"), str(tmp_path / "work"))
        st.start_writer()
        s = await st.create("s")
        a = await st.create_agent(s, "a")
        full[0] = True
        for removal in (lambda: st.remove("s"), lambda: st.remove_agent(s, "a")):
            pending = removal()
            with pytest.raises(P9Error) as e:
                await pending
            assert e.value.ename == FULL
        assert st.sessions == {"s": s} and s.agents == {"a": a}
        assert s.alive and a.alive and os.path.isdir(s.cwd)
        assert list(_saved(path)) == ["s"]
        # while a removal is being saved its name is not free again
        full[0] = False
        going = st.remove("s")
        with pytest.raises(P9Error, match="resource busy: session s is being removed"):
            st.create("s")
        await going
        assert st.sessions == {} and not s.alive and not os.path.exists(s.cwd)
        assert _saved(path) == {}
        await st.create("s")                              # free once saved
        await st.stop_writer()
    asyncio.run(go())


def test_an_unsaved_removal_is_undone_without_a_writer(tmp_path, monkeypatch):
    full = [False]
    _disk_full_from(monkeypatch, full)
    st = SessionStore(str(tmp_path / "state"), str(tmp_path / "work"))
    s = st.create("s")
    full[0] = True
    with pytest.raises(P9Error) as e:
        st.remove("s")
    assert e.value.ename == FULL
    assert st.sessions == {"s": s} and os.path.isdir(s.cwd)


@pytest.fixture
def app(monkeypatch):
    full = [False]
    _disk_full_from(monkeypatch, full)
    a = AppThread([BUNDLED]).start()
    a.full = full
    yield a
    a.full[0] = False
    stop_clean(a)


def test_unsaved_ctl_writes_and_removals_are_errors_and_undone(app):
    """tool_load, tool_unload and rm, over 9P, with the disk full: each answers the
    error and is undone; the state file still holds what was there before."""
    c = Client.connect(app.addr)
    c.mkdir("session/s")
    c.mkdir("session/s/agent/a")
    c.rdwr("session/s/agent/a/ctl", b"tool_load file_read")
    state = os.path.join(app.tmp, "state", "state.json")
    before = open(state, "rb").read()
    app.full[0] = True
    for path, data in (("session/s/agent/a/ctl", b"tool_load file_glob"),
                       ("session/s/agent/a/ctl", b"tool_unload file_read"),
                       ("session/s/agent/a/ctl", b"tool_load shell\ntool_unload file_read")):
        with pytest.raises(ClientError) as e:
            c.rdwr(path, data)
        assert FULL in str(e.value)
        assert c.read("session/s/agent/a/ctl").decode().split() == ["file_read"]
    for path in ("session/s/agent/a", "session/s"):
        with pytest.raises(ClientError) as e:
            c.rm(path)
        assert FULL in str(e.value)
    assert [d.name for d in c.ls("session")] == ["s"]
    assert [d.name for d in c.ls("session/s/agent")] == ["a"]
    assert "undone: state not saved" in c.read("session/s/agent/a/log").decode()
    assert open(state, "rb").read() == before
    # and the tool still runs: nothing was unloaded under it
    cwd = c.read("session/s/cwd").decode().strip()
    with open(os.path.join(cwd, "hello.txt"), "w") as f:
        f.write("hello\n")
    os.chmod(os.path.join(cwd, "hello.txt"), 0o644)
    got = c.rdwr("session/s/agent/a/tools/file_read/call", b'{"path": "hello.txt"}')
    assert b"hello" in got
    app.full[0] = False
    c.rdwr("session/s/agent/a/ctl", b"tool_load file_glob")
    assert _saved_file(state)["s"]["agents"][0]["loaded"] == ["file_read", "file_glob"]
    c.rm("session/s")
    assert _saved_file(state) == {}
    assert not os.path.exists(cwd)
    c.close()


def _saved_file(path: str) -> dict:
    with open(path) as f:
        return {s["name"]: s for s in json.load(f)["sessions"]}


def test_stale_temp_files_are_swept_at_start(tmp_path):
    """A kill during a save leaves state.json.tmp.<pid>: the next server removes it (and
    only in its own, locked, state directory)."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700)
    (state / "state.json.tmp.999999").write_bytes(b"x" * 10000)
    (state / "state.json.tmp.1").write_bytes(b"")
    other = tmp_path / "elsewhere"
    other.mkdir()
    (other / "state.json.tmp.999999").write_bytes(b"not ours")
    a = AppThread([BUNDLED], state_dir=str(state)).start()
    try:
        assert sorted(p.name for p in state.iterdir() if ".tmp" in p.name) == []
        assert (other / "state.json.tmp.999999").exists()
    finally:
        stop_clean(a)


# -- a real server, its state on a real full tmpfs (root) --

def _mount_small_tmpfs() -> str:
    if os.geteuid() != 0:
        pytest.skip("needs root: mounts a 256 KiB tmpfs for the state directory")
    mnt = tempfile.mkdtemp(prefix="full.", dir="/tmp")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", mnt],
                       capture_output=True, text=True)
    if r.returncode != 0:
        os.rmdir(mnt)
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.strip()}")
    return mnt


def _fill(mnt: str) -> None:
    fd = os.open(os.path.join(mnt, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError:
        pass
    finally:
        os.close(fd)
    try:                                                  # the inodes too
        for i in range(100000):
            os.mkdir(os.path.join(mnt, f"d{i}"))
    except OSError:
        pass


class Server(ServeProcess):
    """`toolsrv serve` as a process of its own, started outside the checkout."""

    def __init__(self, home: str, state: str) -> None:
        super().__init__(home, ["--state", state, "--tools", BUNDLED], "server.log")

    def stop(self, sig: int = signal.SIGTERM) -> int:
        self.p.send_signal(sig)
        try:
            return self.p.wait(60)
        finally:
            self.log.flush()


def _view(c: Client) -> dict:
    out = {}
    for s in sorted(d.name for d in c.ls("session")):
        out[s] = {"cwd": c.read(f"session/{s}/cwd").decode().strip(),
                  "sandbox": c.read(f"session/{s}/sandbox").decode().strip(),
                  "agents": {a.name: c.read(f"session/{s}/agent/{a.name}/ctl").decode().split()
                             for a in c.ls(f"session/{s}/agent")}}
    return out


def test_every_change_on_a_full_disk_is_refused_and_a_restart_restores_what_was_told():
    mnt = _mount_small_tmpfs()
    home = tempfile.mkdtemp(prefix="home.", dir="/tmp")
    os.chmod(home, 0o755)
    d0, d1 = os.path.join(home, "d0"), os.path.join(home, "d1")
    os.mkdir(d0)
    os.mkdir(d1)
    state = os.path.join(mnt, "state")
    srv = None
    try:
        srv = Server(home, state)
        with Client.connect(srv.addr) as c:
            c.mkdir("session/s1")
            c.mkdir("session/s1/agent/a")
            c.mkdir("session/s1/agent/b")
            c.rdwr("session/s1/agent/a/ctl", b"tool_load file_read shell")
            c.write("session/s1/cwd", d0.encode())
            c.mkdir("session/s2")
            c.mkdir("session/s2/agent/a")
            before = _view(c)
            s2_cwd = before["s2"]["cwd"]
            _fill(mnt)
            changes = [
                ("mkdir session", lambda: c.mkdir("session/s3")),
                ("mkdir agent", lambda: c.mkdir("session/s1/agent/c")),
                ("cwd", lambda: c.write("session/s1/cwd", d1.encode())),
                ("sandbox", lambda: c.write("session/s1/sandbox", b"client9p")),
                ("tool_load", lambda: c.rdwr("session/s1/agent/b/ctl", b"tool_load file_glob")),
                ("tool_unload", lambda: c.rdwr("session/s1/agent/a/ctl", b"tool_unload shell")),
                ("rm agent", lambda: c.rm("session/s1/agent/b")),
                ("rm session", lambda: c.rm("session/s2")),
            ]
            for what, change in changes:
                with pytest.raises(ClientError) as e:
                    change()
                assert "state not saved: No space left on device" in str(e.value), what
                assert _view(c) == before, what               # undone at once
            assert os.path.isdir(s2_cwd)                      # not removed with the rm
            assert [n for n in os.listdir(state) if ".tmp" in n] == []
        assert srv.stop(signal.SIGKILL) == -signal.SIGKILL
        srv = Server(home, state)                             # the disk still full
        with Client.connect(srv.addr) as c:
            assert _view(c) == before
            assert c.read("session/s2/cwd").decode().strip() == s2_cwd   # the same dir
        rc = srv.stop()
        srv = None
        assert rc == 1
        assert "toolsrv: state not saved at stop: No space left on device" in \
            open(os.path.join(home, "server.log")).read()
        # the disk freed: the same changes are saved, and a restart shows them
        os.unlink(os.path.join(mnt, "filler"))
        for n in os.listdir(mnt):
            if n.startswith("d") and n[1:].isdigit():
                os.rmdir(os.path.join(mnt, n))
        srv = Server(home, state)
        with Client.connect(srv.addr) as c:
            for _, change in changes:
                change()
            after = _view(c)
        assert sorted(after) == ["s1", "s3"] and not os.path.exists(s2_cwd)
        assert after["s1"]["agents"] == {"a": ["file_read"], "c": []}
        assert after["s1"]["cwd"] == d1 and after["s1"]["sandbox"] == "client9p"
        assert srv.stop(signal.SIGKILL) == -signal.SIGKILL
        srv = Server(home, state)
        with Client.connect(srv.addr) as c:
            assert _view(c) == after
        assert srv.stop() == 0
        srv = None
    finally:
        if srv is not None and srv.p.poll() is None:
            srv.p.kill()
            srv.p.wait()
        subprocess.run(["umount", mnt])
        os.rmdir(mnt)
        shutil.rmtree(home, ignore_errors=True)


def test_a_stop_whose_final_save_fails_says_so(monkeypatch, capfd):
    """(Any uid; the exit status of a real server is checked on the full tmpfs above.)"""
    full = [False]
    _disk_full_from(monkeypatch, full)
    a = AppThread([BUNDLED]).start()
    try:
        with Client.connect(a.addr) as c:
            c.mkdir("session/s")
            cwd = c.read("session/s/cwd").decode().strip()
        full[0] = True
        a.stop()
        shutil.rmtree(cwd, ignore_errors=True)
        assert a.app.stop_error == ("state not saved at stop: No space left on device "
                                    "(the state saved before it is kept)")
        assert "toolsrv: state not saved at stop: No space left on device" in capfd.readouterr().err
    finally:
        full[0] = False
        stop_clean(a)
