"""The audit trail (tree/state/audit.py, doc/operations.md): one record per call, written
before its reply; sessions, agents, ctl commands and refused connections; the args' hash
and never the args unless asked; rotation; a full disk refuses the call; the records
survive a restart and a kill -9 of the server mid-call; `toolsrv audit` reads them."""
from __future__ import annotations

import errno
import hashlib
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

import pytest

from toolsrv.cli.client import Client, ClientError

from apphelpers import AppThread, add_tool, tools_dir
from serverhelpers import ServeProcess, stop_clean, wait_for


@pytest.fixture
def tools():
    d = tools_dir()
    add_tool(d, "echo", "#!/bin/sh\ncat\n", {"readOnly": True})
    add_tool(d, "fail", "#!/bin/sh\necho it broke >&2\nexit 3\n")
    add_tool(d, "nap", "#!/bin/sh\nexec sleep \"$(sed 's/[^0-9.]//g')\"\n")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def agent(c: Client, tools: str, s: str = "s", a: str = "a") -> str:
    c.mkdir(f"session/{s}")
    c.mkdir(f"session/{s}/agent/{a}")
    c.rdwr(f"session/{s}/agent/{a}/ctl", f"tool_load {tools}".encode())
    return f"session/{s}/agent/{a}/tools"


def trail(path: str) -> list[dict]:
    with open(path) as f:
        text = f.read()
    assert text == "" or text.endswith("\n"), "a half record at the end"
    return [json.loads(line) for line in text.splitlines()]


def calls(path: str) -> list[dict]:
    return [r for r in trail(path) if r["event"] == "call"]


def test_each_call_is_recorded_before_its_reply(tools):
    app = AppThread([tools]).start()
    try:
        path = app.app.audit.path
        assert path == os.path.join(app.opts.state_dir, "audit.jsonl")
        with Client.connect(app.addr) as c:
            t = agent(c, tools="echo fail")
            for i in range(5):
                args = json.dumps({"secret": f"hunter{i}"}).encode()
                assert c.rdwr(f"{t}/echo/call", args) == args
                rec = calls(path)[-1]            # there as soon as the reply is
                assert rec["outcome"] == "ok" and rec["tool"] == "echo"
                assert rec["args_sha256"] == hashlib.sha256(args).hexdigest()
                assert rec["args_bytes"] == len(args) and rec["out_bytes"] == len(args)
            with pytest.raises(ClientError, match="exit 3"):
                c.rdwr(f"{t}/fail/call", b"{}")
            rec = calls(path)[-1]
            assert (rec["outcome"], rec["exit"], rec["err_bytes"]) == ("exit", 3, 9)
            assert "it broke" in rec["reason"]
            with pytest.raises(ClientError, match="invalid args"):
                c.rdwr(f"{t}/echo/call", b"[1]")
            assert calls(path)[-1]["outcome"] == "invalid"
            c.rm("session/s/agent/a")
        recs = trail(path)
        assert "hunter" not in open(path).read(), "args are never written by default"
        assert len([r for r in recs if r["event"] == "call"]) == 7
        ok = [r for r in recs if r.get("outcome") == "ok"][0]
        assert ok["principal"]["uid"] == os.getuid() and ok["principal"]["kind"] == "unix"
        assert ok["principal"]["pid"] == os.getpid()
        assert (ok["session"], ok["agent"], ok["profile"], ok["elevated"]) == \
            ("s", "a", "default", False)
        assert len({r["id"] for r in recs if r.get("outcome") == "ok"}) == 5
        kinds = [(r["event"], r.get("op")) for r in recs if r["event"] != "call"]
        assert kinds == [("session", "made"), ("agent", "made"), ("ctl", "applied"),
                         ("agent", "removed")]
        assert recs[2]["command"] == "tool_load echo fail"
    finally:
        stop_clean(app)


def test_args_are_written_only_when_asked(tools):
    app = AppThread([tools], audit_args=True).start()
    try:
        with Client.connect(app.addr) as c:
            t = agent(c, tools="echo")
            c.rdwr(f"{t}/echo/call", b'{"q": "hunter2"}')
        assert json.loads(calls(app.app.audit.path)[-1]["args"]) == {"q": "hunter2"}
    finally:
        stop_clean(app)


def test_a_timeout_and_a_refused_connection(tools):
    app = AppThread([tools], timeout=0.5, max_conns_per_peer=1).start()
    try:
        path = app.app.audit.path
        with Client.connect(app.addr) as c:
            t = agent(c, tools="nap")
            with pytest.raises(ClientError, match="timeout"):
                c.rdwr(f"{t}/nap/call", b'{"s": "30"}')
            assert calls(path)[-1]["outcome"] == "timeout"
            with pytest.raises((OSError, ClientError)):
                Client.connect(app.addr).close()      # one connection per peer: refused
            assert wait_for(lambda: any(r["event"] == "connection" for r in trail(path)))
        refused = [r for r in trail(path) if r["event"] == "connection"][0]
        assert refused["op"] == "refused" and "too many connections" in refused["reason"]
        assert refused["principal"]["uid"] == os.getuid()
    finally:
        stop_clean(app)


def test_rotation_keeps_n_files_of_whole_records(tools):
    app = AppThread([tools], audit_max_size=2000, audit_keep=2).start()
    try:
        path = app.app.audit.path
        with Client.connect(app.addr) as c:
            t = agent(c, tools="echo")
            for i in range(30):
                c.rdwr(f"{t}/echo/call", json.dumps({"i": i}).encode())
        assert os.path.exists(path + ".1") and os.path.exists(path + ".2")
        assert not os.path.exists(path + ".3")
        for p in (path, path + ".1", path + ".2"):
            assert os.path.getsize(p) <= 2000
            trail(p)                              # every line whole JSON
        out = subprocess.run([sys.executable, "-m", "toolsrv", "audit", "--audit", path,
                              "--json", "--tool", "echo"], capture_output=True, text=True)
        ids = [json.loads(ln)["id"] for ln in out.stdout.splitlines()]
        assert ids == sorted(ids, key=lambda i: int(i.rsplit("-", 1)[1])), \
            "oldest first, across the rotated files"
        assert ids[-1].endswith("-30")
    finally:
        stop_clean(app)


@pytest.fixture
def tiny_fs():
    d = tempfile.mkdtemp(prefix="full.", dir="/tmp")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=256k,mode=0700", "tmpfs", d],
                       capture_output=True)
    if r.returncode != 0:
        os.rmdir(d)
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode().strip()}")
    yield d
    subprocess.run(["umount", "-l", d], check=False)
    os.rmdir(d)


def fill(path: str) -> None:
    fd = os.open(os.path.join(path, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 512)
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)


def test_a_full_disk_refuses_the_call(tools, tiny_fs):
    path = os.path.join(tiny_fs, "audit.jsonl")
    app = AppThread([tools], audit=path).start()
    try:
        with Client.connect(app.addr) as c:
            t = agent(c, tools="echo")
            assert c.rdwr(f"{t}/echo/call", b'{"before": 1}') == b'{"before": 1}'
            fill(tiny_fs)
            for i in range(200):       # the file's last page may hold a few more records
                try:
                    c.rdwr(f"{t}/echo/call", json.dumps({"during": i}).encode())
                except ClientError as e:
                    assert "audit record not written: No space left on device; the call " \
                        "ran, its result is withheld" in str(e)
                    break
            else:
                pytest.fail("no call was refused on a full disk")
            assert f'"during": {i}'.encode() not in c.read(f"{t}/echo/out"), "withheld"
            whole = open(path).read()
            with pytest.raises(ClientError, match="audit trail not writable: No space left "
                                                  "on device .*nothing was done"):
                c.rdwr(f"{t}/echo/call", b'{"during": -1}')
            after = trail(path)[len(whole.splitlines()):]    # whole lines only
            assert [r["outcome"] for r in after] in ([], ["invalid"]), after
            os.unlink(os.path.join(tiny_fs, "filler"))
            assert c.rdwr(f"{t}/echo/call", b'{"after": 1}') == b'{"after": 1}'
        recs = [r for r in calls(path) if r["outcome"] != "invalid"]
        assert [r["outcome"] for r in recs] == ["ok"] * (i + 2), "only what was answered"
        assert recs[-1]["args_sha256"] == hashlib.sha256(b'{"after": 1}').hexdigest()
    finally:
        stop_clean(app)


def test_records_survive_a_restart_and_a_kill_9_mid_call(tools):
    home = tempfile.mkdtemp(prefix="aud.", dir="/tmp")
    try:
        srv = ServeProcess(home, ["--tools", tools], "log")
        with Client.connect(srv.addr) as c:
            t = agent(c, tools="echo nap")
            c.rdwr(f"{t}/echo/call", b'{"n": 1}')
        srv.p.send_signal(signal.SIGTERM)
        assert srv.p.wait(30) == 0, srv.output()
        srv = ServeProcess(home, ["--tools", tools], "log")       # a restart
        with Client.connect(srv.addr) as c:
            c.rdwr(f"{t}/echo/call", b'{"n": 2}')
            c.write(f"{t}/nap/call", b'{"s": "600"}')          # running when killed
            assert wait_for(lambda: "running" in c.read(f"{t}/nap/status").decode())
            srv.p.send_signal(signal.SIGKILL)
            srv.p.wait(30)
        env = {**os.environ, "XDG_STATE_HOME": os.path.join(home, "xdg")}
        out = subprocess.run([sys.executable, "-m", "toolsrv", "audit", "-a", srv.addr,
                              "--json"], capture_output=True, text=True, env=env, cwd=home)
        assert out.returncode == 0, out.stderr
        recs = [json.loads(ln) for ln in out.stdout.splitlines()]
        done = [r for r in recs if r["event"] == "call"]
        assert [(r["tool"], r["outcome"]) for r in done] == [("echo", "ok"), ("echo", "ok")]
        assert done[0]["args_sha256"] == hashlib.sha256(b'{"n": 1}').hexdigest()
        assert done[1]["args_sha256"] == hashlib.sha256(b'{"n": 2}').hexdigest()
        table = subprocess.run([sys.executable, "-m", "toolsrv", "audit", "-a", srv.addr,
                                "--agent", "s/a", "--tool", "echo"], capture_output=True,
                               text=True, env=env, cwd=home).stdout.splitlines()
        assert table[0].split("\t") == ["TIME", "WHO", "SESSION/AGENT", "WHAT", "OUTCOME",
                                        "SECONDS", "OUT"]
        assert [ln.split("\t")[1:5] for ln in table[1:]] == \
            [[f"uid {os.getuid()}", "s/a", "echo", "ok"]] * 2
        srv = ServeProcess(home, ["--tools", tools], "log")       # after the kill -9
        with Client.connect(srv.addr) as c:
            c.rdwr(f"{t}/echo/call", b'{"n": 3}')
        srv.p.send_signal(signal.SIGTERM)
        srv.p.wait(30)
        out = subprocess.run([sys.executable, "-m", "toolsrv", "audit", "-a", srv.addr,
                              "--json", "--tool", "echo"], capture_output=True, text=True,
                             env=env, cwd=home)
        assert [json.loads(ln)["outcome"] for ln in out.stdout.splitlines()] == ["ok"] * 3
    finally:
        if srv.p.poll() is None:
            srv.p.kill()
        shutil.rmtree(home, ignore_errors=True)


def test_without_state_there_is_no_trail_unless_named(tools):
    app = AppThread([tools], persist=False).start()
    try:
        assert app.app.audit is None
    finally:
        stop_clean(app)
    path = os.path.join(tempfile.mkdtemp(prefix="aud.", dir="/tmp"), "trail")
    app = AppThread([tools], persist=False, audit=path).start()
    try:
        with Client.connect(app.addr) as c:
            t = agent(c, tools="echo")
            c.rdwr(f"{t}/echo/call", b"{}")
        assert [r["outcome"] for r in calls(path)] == ["ok"]
    finally:
        stop_clean(app)
        shutil.rmtree(os.path.dirname(path), ignore_errors=True)
    app = AppThread([tools], audit=None).start()
    try:
        assert app.app.audit is None
        assert not os.path.exists(os.path.join(app.opts.state_dir, "audit.jsonl"))
    finally:
        stop_clean(app)


def test_audit_follows_and_filters(tools):
    app = AppThread([tools]).start()
    follower = None
    try:
        path = app.app.audit.path
        with Client.connect(app.addr) as c:
            t = agent(c, tools="echo")
            c.rdwr(f"{t}/echo/call", b'{"n": 1}')
            follower = subprocess.Popen([sys.executable, "-m", "toolsrv", "audit", "--audit",
                                         path, "-f", "--json", "--tool", "echo"],
                                        stdout=subprocess.PIPE, text=True)
            first = json.loads(follower.stdout.readline())
            assert first["args_sha256"] == hashlib.sha256(b'{"n": 1}').hexdigest()
            c.rdwr(f"{t}/echo/call", b'{"n": 2}')
            later = json.loads(follower.stdout.readline())     # written after it started
            assert later["args_sha256"] == hashlib.sha256(b'{"n": 2}').hexdigest()

        def run(*args: str) -> list[str]:
            r = subprocess.run([sys.executable, "-m", "toolsrv", "audit", "--audit", path,
                                *args], capture_output=True, text=True)
            return r.stdout.splitlines() if r.returncode == 0 else [r.stderr]
        assert len(run("--json", "--since", "1h")) == 5      # session, agent, ctl, 2 calls
        assert run("--json", "--since", "2999-01-01") == []
        assert len(run("--json", "--agent", "s/a")) == 4 and run("--json", "--agent", "x") == []
        assert "not a time" in run("--since", "yesterday")[0]
    finally:
        if follower is not None:
            follower.kill()
            follower.wait()
        stop_clean(app)


def test_refused_attach_and_auth_answers_are_in_the_trail(tools, tmp_path):
    """A Tattach without the shared secret's proof, and a wrong answer to its challenge,
    are each a refused connection in the trail, naming the peer and the reason."""
    import socket
    secret = tmp_path / "secret"
    secret.write_bytes(b"s3cret-s3cret-s3cret\n")
    secret.chmod(0o600)
    app = AppThread([tools], auth_secret=str(secret))
    app.opts.addrs.append("tcp!127.0.0.1!0")
    app.start()
    try:
        path = app.app.audit.path
        port = app.call(lambda: [s.sockets[0].getsockname()[1] for s in app.app.servers
                                 if s.sockets[0].family == socket.AF_INET][0])
        addr = f"tcp!127.0.0.1!{port}"
        with pytest.raises(ClientError, match="authentication required"):
            Client.connect(addr, uname="mallory")
        with pytest.raises(ClientError, match="authentication failed"):
            Client.connect(addr, secret=b"not-the-secret-at-all", uname="eve")
        assert wait_for(lambda: len([r for r in trail(path)
                                     if r["event"] == "connection"]) >= 2)
        refused = [r for r in trail(path) if r["event"] == "connection"]
        assert [r["op"] for r in refused] == ["refused", "refused"], refused
        assert "attach refused: uname 'mallory'" in refused[0]["reason"] \
            and "authentication required" in refused[0]["reason"], refused[0]
        assert "auth refused: uname 'eve'" in refused[1]["reason"] \
            and "wrong answer" in refused[1]["reason"], refused[1]
        assert all(r["principal"]["kind"] == "tcp" and r["principal"]["host"] == "127.0.0.1"
                   for r in refused), refused
    finally:
        stop_clean(app)
