"""Sessions, agents, loaded tools, cwd and sandbox survive a restart; a corrupt
state file is set aside and reported, never silently dropped."""
from __future__ import annotations

import glob
import json
import os
import shutil
import tempfile

from toolsrv.client import Client

from apphelpers import AppThread, add_tool, tools_dir


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
    from toolsrv import sessions
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

    from toolsrv.sessions import SessionStore

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
    save, saved = st.save, [False]

    def recorded(changed=None):
        saved[0] = save(changed)
        return saved[0]
    st.save = recorded
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
    from toolsrv.sessions import SessionStore
    odd = os.path.join(os.fsencode(tmp_path), b"caf\xe9")     # Latin-1, not UTF-8
    os.mkdir(odd)
    st = SessionStore(str(tmp_path / "state"), str(tmp_path / "work"))
    s = st.create("s")
    st.set_cwd(s, os.fsdecode(odd))                              # "caf\udce9"
    again = SessionStore(str(tmp_path / "state"), str(tmp_path / "work"))
    assert again.restore() == []
    assert os.fsencode(again.sessions["s"].cwd) == odd
