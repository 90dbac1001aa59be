"""Sessions, agents, loaded tools, cwd and sandbox survive a restart; a corrupt
state file is set aside and reported, never silently dropped."""
from __future__ import annotations

import glob
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

from outside import OUTSIDE

from toolsrv.cli.client import Client

from apphelpers import AppThread, add_tool, tools_dir


def test_a_cwd_inside_the_private_one_is_not_removed_with_it():
    """Moving a session's cwd into a directory of its own private cwd keeps that directory
    (it used to be removed as the old private cwd, new cwd and all)."""
    a = AppThread([tools_dir()], persist=False).start()
    try:
        with Client.connect(a.addr) as c:
            c.mkdir("session/s")
            private = c.read("session/s/cwd").decode().strip()
            sub = os.path.join(private, "project")
            os.mkdir(sub)
            with open(os.path.join(sub, "keep.txt"), "w") as f:
                f.write("kept\n")
            c.write("session/s/cwd", sub.encode())
            assert c.read("session/s/cwd") == f"{sub}\n".encode()
            assert open(os.path.join(sub, "keep.txt")).read() == "kept\n"
    finally:
        a.cleanup()


def test_restart_restores_state(tmp_path):
    d = tools_dir()
    add_tool(d, "echo", "#!/bin/sh\ncat\n")
    state = tempfile.mkdtemp(prefix="state.", dir="/tmp")
    cwd = tempfile.mkdtemp(prefix="cwd.", dir="/tmp")
    os.chmod(cwd, 0o777)                             # tools run as nobody
    try:
        a = AppThread([d], state_dir=state).start()
        c = Client.connect(a.addr)
        c.mkdir("session/keep")
        c.mkdir("session/keep/agent/bot")
        c.rdwr("session/keep/agent/bot/ctl", b"tool_load echo")
        c.write("session/keep/cwd", cwd.encode())
        c.mkdir("session/gone")
        private = c.read("session/gone/cwd").decode().strip()
        c.rm("session/gone")
        assert not os.path.exists(private)           # a private cwd goes with its session
        c.close()
        a.cleanup()
        b = AppThread([d], state_dir=state).start()
        try:
            c = Client.connect(b.addr)
            assert sorted(x.name for x in c.ls("session")) == ["keep"]
            assert c.read("session/keep/agent/bot/ctl") == b"echo\n"
            assert c.read("session/keep/cwd") == f"{os.path.realpath(cwd)}\n".encode()
            assert c.read("session/keep/sandbox") == b"default\n"
            assert c.rdwr("session/keep/agent/bot/tools/echo/call", b'{"a": 1}') == b'{"a": 1}'
            c.close()
        finally:
            b.cleanup()
    finally:
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(cwd, ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)


def test_corrupt_state_is_set_aside_and_reported(capfd):
    d = tools_dir()
    state = tempfile.mkdtemp(prefix="state.", dir="/tmp")
    try:
        with open(os.path.join(state, "state.json"), "w") as f:
            f.write('{"version": 1, "sessions": [')
        a = AppThread([d], state_dir=state).start()
        try:
            err = capfd.readouterr().err
            assert "state.json is corrupt" in err and "moved aside" in err
            aside = glob.glob(os.path.join(state, "state.json.corrupt-*"))
            assert len(aside) == 1 and open(aside[0]).read().startswith('{"version": 1')
            c = Client.connect(a.addr)
            c.mkdir("session/fresh")                 # the server serves, and saves anew
            c.close()
            saved = json.load(open(os.path.join(state, "state.json")))
            assert [s["name"] for s in saved["sessions"]] == ["fresh"]
        finally:
            a.cleanup()
    finally:
        shutil.rmtree(state, ignore_errors=True)
        shutil.rmtree(d, ignore_errors=True)


def test_no_state_leaves_no_private_directories():
    d = tools_dir()
    a = AppThread([d], persist=False).start()
    try:
        c = Client.connect(a.addr)
        c.mkdir("session/tmp1")
        private = c.read("session/tmp1/cwd").decode().strip()
        assert os.path.isdir(private)
        c.close()
    finally:
        a.cleanup()
        shutil.rmtree(d, ignore_errors=True)
    assert not os.path.exists(private)


def test_private_directory_of_an_earlier_server_with_our_pid_is_not_reused(tmp_path,
                                                                          monkeypatch):
    """Session directories are <name>.<pid>.<serial>: a server that had our pid before
    (as root, pids are reused) may have left some behind; creation takes the next name."""
    import itertools
    from toolsrv.tree.state import sessions
    monkeypatch.setattr(sessions, "_serials", itertools.count(1))
    work = tmp_path / "work"
    work.mkdir()
    for n in (1, 2, 3):
        (work / f"s.{os.getpid()}.{n}").mkdir()
        (work / f"s.{os.getpid()}.{n}" / "theirs").write_text("x")
    store = sessions.SessionStore(None, str(work))
    s = store.create("s")
    assert s.cwd == str(work / f"s.{os.getpid()}.4") and os.listdir(s.cwd) == []
    assert all((work / f"s.{os.getpid()}.{n}" / "theirs").exists() for n in (1, 2, 3))


def test_saved_file_is_always_the_whole_state(tmp_path, monkeypatch):
    """Each save re-encodes only the session it changed (SessionStore._encode): after any
    sequence of changes, failed saves and undone changes among them, the file holds exactly
    what a full encoding of the state would, and a new store restores the same state."""
    import random

    from toolsrv.tree.state.sessions import SessionStore

    def full(store):
        return json.loads(json.dumps(store.snapshot()))

    st = SessionStore(str(tmp_path / "state"), str(tmp_path / "work"))
    path = tmp_path / "state" / "state.json"
    rng = random.Random(7)
    real_fsync, fail = os.fsync, [False]

    def fsync(fd):
        if fail[0]:
            raise OSError(28, "No space left on device")
        real_fsync(fd)
    monkeypatch.setattr(os, "fsync", fsync)
    written, saved = st._written, [False]

    def recorded(path, err):            # every write goes through here: was it saved?
        r = written(path, err)
        saved[0] = r is None
        return r
    st._written = recorded
    for step in range(400):
        fail[0], saved[0] = rng.random() < 0.1, False
        names = list(st.sessions)
        op = rng.choice(["mk", "mk", "rm", "agent", "rmagent", "load", "cwd", "sandbox"])
        try:
            if op == "mk" or not names:
                st.create(f"s{rng.randrange(12)}")
            elif op == "rm":
                st.remove(rng.choice(names))
            else:
                s = st.sessions[rng.choice(names)]
                if op == "agent":
                    st.create_agent(s, f"a{rng.randrange(4)}")
                elif op == "rmagent" and s.agents:
                    st.remove_agent(s, rng.choice(list(s.agents)))
                elif op == "load" and s.agents:
                    a = rng.choice(list(s.agents.values()))
                    a.loaded.append(f"t{step}")        # what ctl's tool_load does, then saves
                    st.save(s)
                elif op == "cwd":
                    st.set_cwd(s, str(tmp_path))
                elif op == "sandbox":
                    st.set_sandbox(s, rng.choice(["default", "net"]))
        except Exception as e:
            assert "not saved" in str(e) or "exists" in str(e) or "not found" in str(e), e
        if saved[0]:
            assert json.loads(path.read_text()) == full(st), f"step {step}: {op}"
    fail[0] = False
    st.save(next(iter(st.sessions.values()), None))
    assert json.loads(path.read_text()) == full(st)
    again = SessionStore(str(tmp_path / "state"), str(tmp_path / "work"))
    assert again.restore() == []
    assert full(again) == full(st)


def test_a_cwd_with_undecodable_bytes_is_saved_and_restored(tmp_path):
    from toolsrv.tree.state.sessions import SessionStore
    odd = os.path.join(os.fsencode(tmp_path), b"caf\xe9")     # Latin-1, not UTF-8
    os.mkdir(odd)
    st = SessionStore(str(tmp_path / "state"), str(tmp_path / "work"))
    s = st.create("s")
    st.set_cwd(s, os.fsdecode(odd))                              # "caf\udce9"
    again = SessionStore(str(tmp_path / "state"), str(tmp_path / "work"))
    assert again.restore() == []
    assert os.fsencode(again.sessions["s"].cwd) == odd


def _slow_writes(monkeypatch, fail_from: int | None = None, fail_to: int = 1 << 30):
    """Patch the state writer's file write: each takes 50 ms (in its thread) and is
    recorded; writes number `fail_from` to `fail_to` find the disk full."""
    import time

    import toolsrv.tree.state.sessions as S
    real, writes = S._write_file, []

    def write(state_dir, path, data):
        time.sleep(0.05)
        writes.append(json.loads(data))
        if fail_from is not None and fail_from <= len(writes) <= fail_to:
            return OSError(28, "No space left on device")
        return real(state_dir, path, data)
    monkeypatch.setattr(S, "_write_file", write)
    return writes


def test_changes_made_during_a_write_share_the_next_one_and_the_loop_runs_on(tmp_path,
                                                                             monkeypatch):
    import asyncio

    from toolsrv.tree.state.sessions import SessionStore
    writes = _slow_writes(monkeypatch)
    path = tmp_path / "state" / "state.json"

    async def go():
        st = SessionStore(str(tmp_path / "state"), str(tmp_path / "work"))
        st.start_writer()
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                ticks += 1
                await asyncio.sleep(0.001)
        t = asyncio.create_task(ticker())
        first = st.create("first")                      # its write starts next turn
        await asyncio.sleep(0.01)                        # ... and is under way now
        rest = [st.create(f"s{i}") for i in range(10)]   # made at once, saved together
        assert sorted(st.sessions) == sorted(["first"] + [f"s{i}" for i in range(10)])
        made = await asyncio.gather(first, *rest)
        assert [s.name for s in made] == ["first"] + [f"s{i}" for i in range(10)]
        # every reply came after its session was on disk, and 11 changes took 2 writes
        assert len(writes) == 2
        assert [s["name"] for s in writes[1]["sessions"]] == [s.name for s in made]
        assert json.loads(path.read_text()) == json.loads(json.dumps(st.snapshot()))
        assert ticks >= 5                                # the loop was not held by the writes
        t.cancel()
        await st.stop_writer()
    asyncio.run(go())


def test_a_failed_grouped_write_undoes_every_creation_in_it(tmp_path, monkeypatch):
    import asyncio

    from toolsrv.errors import P9Error
    from toolsrv.tree.state.sessions import SessionStore
    _slow_writes(monkeypatch, fail_from=2)
    path = tmp_path / "state" / "state.json"

    async def go():
        st = SessionStore(str(tmp_path / "state"), str(tmp_path / "work"))
        st.start_writer()
        keep = await st.create("keep")
        doomed = [st.create("s0"), st.create_agent(keep, "bot")]
        cwd = st.sessions["s0"].cwd
        results = await asyncio.gather(*doomed, return_exceptions=True)
        for r in results:
            assert isinstance(r, P9Error), r
            assert r.ename == ("input/output error: state not saved: "
                               "No space left on device")
        assert sorted(st.sessions) == ["keep"] and keep.agents == {}
        assert not os.path.exists(cwd)                   # the undone session's directory
        assert [s["name"] for s in json.loads(path.read_text())["sessions"]] == ["keep"]
        await st.stop_writer()
    asyncio.run(go())


def test_a_change_undone_after_a_failed_write_never_reaches_the_next_one(tmp_path,
                                                                        monkeypatch):
    import asyncio

    from toolsrv.errors import P9Error
    from toolsrv.tree.state.sessions import SessionStore
    writes = _slow_writes(monkeypatch, fail_from=2, fail_to=2)

    async def go():
        st = SessionStore(str(tmp_path / "state"), str(tmp_path / "work"))
        st.start_writer()
        await st.create("keep")                          # write 1
        doomed = st.create("doomed")                     # write 2: the disk is full
        await asyncio.sleep(0.01)
        later = st.create("later")                       # write 3, asked for meanwhile
        with pytest.raises(P9Error):
            await doomed
        await later
        assert [[s["name"] for s in w["sessions"]] for w in writes] == [
            ["keep"], ["keep", "doomed"], ["keep", "later"]]
        await st.stop_writer()
    asyncio.run(go())


# -- one server per state directory (statedir.py), real server processes --

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Served:
    """`toolsrv serve ARGS` in env, its banner read (or its exit, when it refuses)."""

    def __init__(self, env: dict, *args: str) -> None:
        self.p = subprocess.Popen([sys.executable, "-m", "toolsrv", "serve", *args], env=env,
                                  cwd=OUTSIDE, stderr=subprocess.PIPE, text=True)
        self.banner = ""
        for line in self.p.stderr:
            self.banner += line
            if "agent/me/log" in line:        # the banner's last line
                break

    def ready(self, addr: str) -> None:
        """A round trip: the server is in App.run(), its SIGTERM handler installed."""
        with Client.connect(addr) as c:
            c.read("revision")

    def state(self) -> str:
        return self.banner.split("toolsrv: state in ", 1)[1].split(" (kept", 1)[0]

    def stop(self, sig: int = 15) -> int:
        if self.p.poll() is None:
            self.p.send_signal(sig)
        rc = self.p.wait(20)
        self.p.stderr.close()
        return rc


@pytest.fixture
def home():
    """A home, state home and plan9port identity of our own: the default namespace is
    /tmp/ns.<user>.:77, which no other server uses."""
    h = tempfile.mkdtemp(prefix="home.", dir="/tmp")
    user = f"tsrv{os.getpid()}"
    env = {k: v for k, v in os.environ.items()
           if k not in ("OLLIE_TOOLS_PATH", "TOOLSRV_ADDR", "NAMESPACE")}
    env.update(HOME=h, USER=user, DISPLAY=":77", XDG_STATE_HOME=os.path.join(h, "state"))
    yield h, env
    shutil.rmtree(h, ignore_errors=True)
    shutil.rmtree(f"/tmp/ns.{user}.:77", ignore_errors=True)


def test_a_second_server_on_a_state_directory_is_refused_naming_the_first(home):
    h, env = home
    state = os.path.join(h, "st")
    first = Served(env, "-a", f"unix!{h}/a/toolsrv", "--state", state)
    try:
        assert first.p.poll() is None, first.banner
        second = Served(env, "-a", f"unix!{h}/b/toolsrv", "--state", state)
        assert second.stop() == 1
        assert second.banner.strip() == (
            f"toolsrv: state directory {state} is in use by toolsrv pid {first.p.pid} "
            f"serving unix!{h}/a/toolsrv; give this server its own with --state DIR, or "
            "keep no state with --no-state")
        assert not os.path.exists(f"{h}/b/toolsrv")          # it never listened
        with Client.connect(f"unix!{h}/a/toolsrv") as c:     # the first serves on
            c.mkdir("session/mine")
        third = Served(env, "-a", f"unix!{h}/b/toolsrv", "--no-state")
        assert third.p.poll() is None and "no state kept" in third.banner
        third.ready(f"unix!{h}/b/toolsrv")
        assert third.stop() == 0
    finally:
        assert first.stop() == 0
    saved = json.load(open(os.path.join(state, "state.json")))
    assert [s["name"] for s in saved["sessions"]] == ["mine"]


def test_the_default_state_directory_follows_the_address_and_survives_restarts(home):
    h, env = home
    top = os.path.join(h, "state", "toolsrv")
    default = f"unix!/tmp/ns.{env['USER']}.:77/toolsrv"
    first = Served(env)                                     # plan9port's default address
    other_env = dict(env, NAMESPACE=os.path.join(h, "ns2"))
    try:
        with Client.connect(default) as c:
            c.mkdir("session/kept")
        other = Served(other_env)                           # another address, at once
        try:
            assert other.p.poll() is None, other.banner
            with Client.connect(f"unix!{h}/ns2/toolsrv") as c:
                assert c.ls("session") == []                 # none of the other's sessions
                c.mkdir("session/theirs")
            sub = other.state()
            assert os.path.dirname(sub) == top
            # the address with each run of other characters one "_" (a mkdtemp name may
            # end in "_" itself: then the run is "__", written as one)
            want = re.sub(r"[^A-Za-z0-9.-]+", "_", f"unix!{h}/ns2/toolsrv").strip("_")
            assert os.path.basename(sub).startswith(want + "-"), (sub, want)
        finally:
            assert other.stop() == 0
        assert first.state() == top
    finally:
        assert first.stop() == 0
    again = Served(env, "-a", default)                      # the same address, spelt out
    try:
        assert again.state() == top
        with Client.connect(default) as c:
            assert [d.name for d in c.ls("session")] == ["kept"]
    finally:
        assert again.stop() == 0


def test_a_lock_left_by_a_dead_server_blocks_nothing(home):
    h, env = home
    state = os.path.join(h, "st")
    addr = f"unix!{h}/a/toolsrv"
    os.makedirs(state)
    with open(os.path.join(state, "lock"), "w") as f:
        f.write("999999999 unix!/gone\n")                   # no such process, no flock
    first = Served(env, "-a", addr, "--state", state)
    assert first.p.poll() is None, first.banner
    assert open(os.path.join(state, "lock")).read() == f"{first.p.pid} {addr}\n"
    assert first.stop(9) == -9                              # killed: no clean-up at all
    again = Served(env, "-a", addr, "--state", state)
    try:
        assert again.p.poll() is None, again.banner
        again.ready(addr)
    finally:
        assert again.stop() == 0
    assert open(os.path.join(state, "lock")).read() == ""    # released on a clean exit


def test_serve_help_shows_the_default_address_and_state_directory(home):
    h, env = home
    r = subprocess.run([sys.executable, "-m", "toolsrv", "serve", "-h"], cwd=REPO,
                       env=dict(env, COLUMNS="300"),   # argparse cuts long words to fit
                       capture_output=True, text=True, timeout=60)
    text = " ".join(r.stdout.split())
    assert r.returncode == 0
    assert f"default unix!$NAMESPACE/toolsrv, here unix!/tmp/ns.{env['USER']}.:77/toolsrv" in text
    assert f"default {h}/state/toolsrv; with another first -a, a subdirectory" in text
    assert "kept across restarts, locked while serving" in text


def test_a_temporary_session_is_never_saved_and_has_a_limit_of_its_own(tmp_path):
    """A session made with DMTMP in its Tcreate's perm (the MCP face's) is not in
    state.json, is gone after a restart, and counts against its own limit: temporary
    sessions up to the limit never refuse another client's ordinary mkdir."""
    from toolsrv.proto import DMTMP
    d = tools_dir()
    add_tool(d, "echo", "#!/bin/sh\ncat\n")
    state = str(tmp_path / "state")
    try:
        a = AppThread([d], state_dir=state, max_sessions=3).start()
        with Client.connect(a.addr) as c:
            for n in range(3):
                c.mkdir(f"session/tmp{n}", DMTMP | 0o755)
                c.mkdir(f"session/tmp{n}/agent/bot")
            with pytest.raises(Exception, match="too many temporary sessions"):
                c.mkdir("session/tmp3", DMTMP | 0o755)
            c.mkdir("session/keep")                    # the temporary ones block nothing
            c.mkdir("session/keep/agent/bot")
            saved = json.loads(open(os.path.join(state, "state.json")).read())
            assert [s["name"] for s in saved["sessions"]] == ["keep"]
            c.rm("session/tmp0")
            c.mkdir("session/tmp3", DMTMP | 0o755)    # room again once one is removed
            c.rdwr("session/tmp3/cwd", b"/tmp")        # a change of it saves nothing of it
            saved = json.loads(open(os.path.join(state, "state.json")).read())
            assert [s["name"] for s in saved["sessions"]] == ["keep"]
        a.cleanup()
        b = AppThread([d], state_dir=state).start()
        try:
            with Client.connect(b.addr) as c:
                assert sorted(x.name for x in c.ls("session")) == ["keep"]
        finally:
            b.cleanup()
    finally:
        shutil.rmtree(d, ignore_errors=True)
