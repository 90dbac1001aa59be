"""Faults: vanishing clients, a killed or stopped server, a full disk, a tools directory
that goes away, a .meta replaced while it is being read.

Servers that get killed run as real `toolsrv serve` processes; the rest run on a
thread (AppThread) so the test can look inside.  Tool processes are found by a
unique marker in their command line, so "no orphan left" is checked on the
real process table.
"""
from __future__ import annotations

import asyncio
import errno
import glob
import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import uuid

import pytest

from outside import OUTSIDE

from toolsrv.proto import ORDWR, Topen, Tread, Twalk, Twrite
from toolsrv.dirs import trusted
from toolsrv.cli.client import Client, ClientError
from toolsrv.run.scratch import default_tmp_base

from apphelpers import AppThread, add_tool, tools_dir
from serverhelpers import Raw, stop_clean, wait_for
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tools"))
from sandbox_support import processes_with  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def marked(marker: str) -> list[int]:
    """Pids whose command line holds marker."""
    return processes_with(marker)


def children(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if name.isdigit():
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    if int(f.read().rsplit(b")", 1)[1].split()[1]) == pid:
                        out.append(int(name))
            except (OSError, ValueError):
                pass
    return out


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except OSError:
        return False


class ServerProc:
    """`toolsrv serve` as its own process, on a private socket."""

    def __init__(self, tools: str, state: str, *extra: str) -> None:
        self.tmp = tempfile.mkdtemp(prefix="sp.", dir="/tmp")
        self.addr = f"unix!{self.tmp}/ns/toolsrv"
        self.path = self.addr[len("unix!"):]
        self.log = open(os.path.join(self.tmp, "stderr"), "w+")
        env = {k: v for k, v in os.environ.items() if k != "OLLIE_TOOLS_PATH"}
        self.p = subprocess.Popen(
            [sys.executable, "-m", "toolsrv", "serve", "-a", self.addr, "--tools", tools,
             "--state", state, *extra], cwd=OUTSIDE, env=env, stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL, stderr=self.log)
        if not wait_for(self._up, 30):
            self.stop()
            raise RuntimeError(f"server did not start: {self.stderr()}")

    def _up(self) -> bool:
        if self.p.poll() is not None:
            raise RuntimeError(f"server exited {self.p.returncode}: {self.stderr()}")
        try:
            Client.connect(self.addr).close()
            return True
        except (OSError, ClientError):
            return False

    def stderr(self) -> str:
        self.log.flush()
        with open(self.log.name) as f:
            return f.read()

    def stop(self) -> None:
        if self.p.poll() is None:
            self.p.kill()
        self.p.wait(30)
        self.log.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
        for d in glob.glob(f"{default_tmp_base()}/{self.p.pid}.*"):
            trusted.remove_path(d)    # a killed server cannot remove its own (nor its lock)


def remove_private_cwds(state: str) -> None:
    try:
        saved = json.load(open(os.path.join(state, "state.json")))
    except (OSError, ValueError):
        return
    for s in saved["sessions"]:
        if s.get("private_cwd"):
            shutil.rmtree(s["cwd"], ignore_errors=True)


@pytest.fixture
def tools():
    d = tools_dir()
    add_tool(d, "echo", "#!/bin/sh\ncat\n", {"readOnly": True})
    add_tool(d, "slow", "#!/bin/sh\nsleep 0.5\necho slow done\n")
    add_tool(d, "marked", "#!/bin/sh\n# sleeps for the seconds given, with a marker in argv\n"
             "exec sleep \"$(sed 's/[^0-9.]//g')\"\n")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def state():
    d = tempfile.mkdtemp(prefix="st.", dir="/tmp")
    yield d
    remove_private_cwds(d)
    shutil.rmtree(d, ignore_errors=True)


def marker() -> str:
    """A unique sleep length, so `sleep 600.<n>` marks this test's tool processes."""
    return f"600.{uuid.uuid4().int % 10**9:09d}"


def agent(c: Client, tool: str, s: str = "s", a: str = "a") -> str:
    c.mkdir(f"session/{s}")
    c.mkdir(f"session/{s}/agent/{a}")
    c.rdwr(f"session/{s}/agent/{a}/ctl", f"tool_load {tool}".encode())
    return f"session/{s}/agent/{a}/tools/{tool}"


# ------------------------------------------------------------------ a vanishing client

def fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def test_client_gone_mid_call_the_run_still_ends_into_out(tools):
    """Gone after writing: the run finishes into out.  Gone while reading the result: as
    with any hang-up, 9P flushes that read, and a flushed read kills its run (toolsrv(4)),
    which ends as `killed`.  Either way the call ends, and nothing is left behind."""
    app = AppThread([tools]).start()
    try:
        with Client.connect(app.addr) as c:                 # warm up: zygote, profile cache
            base = agent(c, "slow")
            assert c.rdwr(base + "/call", b"{}") == b"slow done\n"
        tasks0 = app.call(lambda: len(asyncio.all_tasks()))
        fds0 = fds()
        for round_, reading in enumerate([False, True, False, True]):
            raw = Raw(app.addr)
            raw.ok(Twalk(1, 0, 1, tuple(base.split("/")) + ("call",)))
            raw.ok(Topen(1, 1, ORDWR))
            raw.ok(Twrite(1, 1, 0, b'{"round": %d}' % round_))
            if reading:
                raw.send(Tread(2, 1, 0, 4096))               # blocks on the run
                assert wait_for(lambda: app.call(lambda: sum(
                    len(p.conn.inflight) for p in app.app.conns)) == 1)
            raw.close()                                      # the client is gone
            with Client.connect(app.addr) as c:
                want = b"killed " if reading else b"ok "
                assert wait_for(lambda: c.read(base + "/status").startswith(want)), \
                    c.read(base + "/status")
                assert c.read(base + "/out") == (b"" if reading else b"slow done\n")
        assert wait_for(lambda: app.call(lambda: len(app.app.conns)) == 0)
        assert wait_for(lambda: app.call(lambda: len(asyncio.all_tasks())) <= tasks0)
        assert wait_for(lambda: fds() <= fds0), f"fds {fds0} -> {fds()}"
        assert app.call(lambda: len(app.app.calls.sched.live)) == 0
    finally:
        stop_clean(app)


def test_call_cancelled_before_it_starts_still_ends(tools):
    """Regression (found by test_fuzz_server): a call whose agent is removed before its
    task ever ran left its reader blocked and counted as queued forever."""
    app = AppThread([tools], max_queued=4).start()
    try:
        with Client.connect(app.addr) as c:
            for i in range(10):                              # more than max_queued
                base = agent(c, "echo", s=f"s{i}")
                fid = c.open(base + "/call", ORDWR)
                c.write_fid(fid, b"{}")
                c.rm(f"session/s{i}")                       # kills it, maybe before it ran
                try:
                    c.read_fid(fid)
                except ClientError as e:
                    assert "cancelled (input/output error)" in str(e) or "not found" in str(e)
                c.clunk(fid)
            assert wait_for(lambda: app.call(lambda: len(app.app.calls.sched.live)) == 0)
            base = agent(c, "echo", s="after")
            assert c.rdwr(base + "/call", b'{"still": "works"}') == b'{"still": "works"}'
    finally:
        stop_clean(app)


# ------------------------------------------------------------------ SIGKILL and SIGTERM

def test_sigkill_mid_call_leaves_no_orphans_and_state_survives(tools, state):
    mark = marker()
    srv = ServerProc(tools, state)
    try:
        with Client.connect(srv.addr) as c:
            base = agent(c, "marked")
            c.write(base + "/call", json.dumps({"seconds": mark}).encode())
            assert wait_for(lambda: marked(mark), 20), "the tool never started"
        kids = children(srv.p.pid)
        assert kids, "the launcher should be a child of the server"
        srv.p.send_signal(signal.SIGKILL)
        srv.p.wait(10)
        assert wait_for(lambda: not marked(mark), 20), f"orphans: {marked(mark)}"
        assert wait_for(lambda: not any(alive(k) for k in kids), 20)
    finally:
        srv.stop()
    again = ServerProc(tools, state)
    try:
        with Client.connect(again.addr) as c:
            assert [d.name for d in c.ls("session")] == ["s"]
            assert c.read("session/s/agent/a/ctl") == b"marked\n"
            c.rdwr("session/s/agent/a/ctl", b"tool_load echo")
            assert c.rdwr("session/s/agent/a/tools/echo/call", b"{}") == b"{}"
    finally:
        again.stop()


def test_sigterm_is_graceful(tools, state):
    mark = marker()
    srv = ServerProc(tools, state)
    try:
        with Client.connect(srv.addr) as c:
            base = agent(c, "marked")
            c.write(base + "/call", json.dumps({"seconds": mark}).encode())
            assert wait_for(lambda: marked(mark), 20)
            srv.p.send_signal(signal.SIGTERM)
            assert srv.p.wait(30) == 0, srv.stderr()
        assert not os.path.exists(srv.path), "the socket should be removed"
        with pytest.raises(OSError):
            Client.connect(srv.addr)                          # nobody answers any more
        assert wait_for(lambda: not marked(mark), 10), "runs must be killed"
        saved = json.load(open(os.path.join(state, "state.json")))
        assert [s["name"] for s in saved["sessions"]] == ["s"]
        assert saved["sessions"][0]["agents"][0]["loaded"] == ["marked"]
        assert "Traceback" not in srv.stderr(), srv.stderr()
    finally:
        srv.stop()


# ------------------------------------------------------------------ a full disk

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
    """Write until the filesystem is full."""
    fd = os.open(os.path.join(path, "filler"), os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        while True:
            os.write(fd, b"\0" * 4096)
    except OSError as e:
        assert e.errno == errno.ENOSPC
    finally:
        os.close(fd)


def test_full_disk_keeps_the_old_state(tools, tiny_fs):
    state = os.path.join(tiny_fs, "state")
    app = AppThread([tools], state_dir=state, audit=None).start()   # the audit trail's own
    #                                      full disk: tests/tree/test_audit.py
    try:
        with Client.connect(app.addr) as c:
            agent(c, "echo", s="before")
            good = open(os.path.join(state, "state.json")).read()
            fill(tiny_fs)
            with pytest.raises(ClientError, match="input/output error: state not saved: "
                                                  "No space left on device"):
                c.mkdir("session/during")
            assert [d.name for d in c.ls("session")] == ["before"]   # not half-made
            with pytest.raises(ClientError, match="state not saved"):
                c.mkdir("session/before/agent/b")
            with pytest.raises(ClientError, match="state not saved"):
                c.write("session/before/sandbox", b"default")
            assert open(os.path.join(state, "state.json")).read() == good
            assert not [f for f in os.listdir(state) if f not in ("state.json", "lock")], \
                "temp file left"
            assert c.rdwr("session/before/agent/a/tools/echo/call", b"{}") == b"{}"
            os.unlink(os.path.join(tiny_fs, "filler"))
            c.mkdir("session/during")                          # room again: saved
        saved = json.load(open(os.path.join(state, "state.json")))
        assert sorted(s["name"] for s in saved["sessions"]) == ["before", "during"]
    finally:
        stop_clean(app)


# ------------------------------------------------------------------ the tools directory

def test_tools_directory_vanishes_and_returns(tools):
    app = AppThread([tools]).start()
    away = tools + ".away"
    try:
        with Client.connect(app.addr) as c:
            base = agent(c, "echo")
            rev = int(c.read("revision"))
            os.rename(tools, away)
            assert wait_for(lambda: int(c.read("revision")) > rev, 30)
            assert b"echo" not in c.read("tools/index")
            with pytest.raises(ClientError, match="not found|no such"):
                c.rdwr(base + "/call", b"{}")
            assert c.read("session/s/agent/a/ctl") == b"echo\n"   # still loaded, by name
            rev = int(c.read("revision"))
            os.rename(away, tools)
            assert wait_for(lambda: b"echo" in c.read("tools/index"), 30)
            assert int(c.read("revision")) > rev
            assert c.rdwr(base + "/call", b'{"back": 1}') == b'{"back": 1}'
    finally:
        if os.path.exists(away):
            os.rename(away, tools)
        stop_clean(app)


def test_meta_replaced_mid_read(tools):
    """A reader sees one version whole; the next read from offset 0 sees the new one; a
    .meta rewritten in place (a moment of invalid JSON) never takes the server down."""
    app = AppThread([tools]).start()
    meta = os.path.join(tools, "echo.meta")
    try:
        with Client.connect(app.addr) as c:
            old = json.loads(c.read("tools/echo/meta"))
            rev = int(c.read("revision"))
            fid = c.open("tools/echo/meta")
            head = c.rpc(Tread(0, fid, 0, 10)).data
            new = {"description": "replaced " + "x" * 300, "args": {"type": "object"},
                   "readOnly": True}
            with open(meta + ".tmp", "w") as f:
                json.dump(new, f)
            os.rename(meta + ".tmp", meta)
            assert wait_for(lambda: int(c.read("revision")) > rev, 30)
            rest, off = b"", len(head)
            while True:
                chunk = c.rpc(Tread(0, fid, off, 7)).data
                if not chunk:
                    break
                rest += chunk
                off += len(chunk)
            assert json.loads(head + rest) == old                 # one version, whole
            c.clunk(fid)
            assert json.loads(c.read("tools/echo/meta"))["description"] == new["description"]
            for _ in range(20):                                   # in-place rewrites
                with open(meta, "w") as f:
                    f.write('{"description": "half')
                    f.flush()
                    time.sleep(0.01)
                    f.write(' written", "args": {"type": "object"}}')
            def settled() -> bool:        # while half written, the tool may be gone
                try:
                    return json.loads(c.read("tools/echo/meta"))["description"] == \
                        "half written"
                except (ClientError, ValueError):
                    return False
            assert wait_for(settled, 30)
            assert b"echo.meta" not in c.read("tools/errors")
            base = agent(c, "echo")
            assert c.rdwr(base + "/call", b"{}") == b"{}"
    finally:
        stop_clean(app)
