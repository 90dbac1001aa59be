"""A remote call's cwd, stderr and bound through the front (issue 30): session/<id>/hosts/NAME
is the local session's cwd on host NAME (the remote session's, read and set over 9P), each
call's err is that call's, fetched in the call's own round trip, and a call the remote does
not answer within the front's bound ends there and is killed on the remote."""
from __future__ import annotations

import os

import pytest

from toolsrv.cli.client import Client, ClientError

from apphelpers import AppThread, tools_dir
from serverhelpers import stop_clean
from hostshelpers import Server, wait_for

PWD = ("#!/bin/sh\npwd\n", {"readOnly": True, "description": "where it runs"})
SLEEPY = ("#!/bin/sh\necho started\nexec sleep 300\n", {"description": "sleeps"})
NOISY = ('#!/bin/sh\nread a\necho "said $a" >&2\necho "$a"\n',
         {"readOnly": True, "description": "echoes, and says so on stderr"})


@pytest.fixture(scope="module")
def remote():
    s = Server({"pwd": PWD, "noisy": NOISY, "sleepy": SLEEPY}).start()
    yield s
    s.cleanup()


@pytest.fixture(scope="module")
def front(remote):
    a = AppThread([tools_dir()], imports=[f"far={remote.addr}"]).start()
    c = Client.connect(a.addr)
    assert wait_for(lambda: b"far.pwd" in c.read("tools/index")), c.read("tools/errors")
    yield a, c
    c.close()
    stop_clean(a)


def agent(c: Client, s: str, *tools: str) -> str:
    c.mkdir(f"session/{s}")
    c.mkdir(f"session/{s}/agent/a")
    c.write(f"session/{s}/agent/a/ctl", "".join(f"tool_load {t}\n" for t in tools).encode())
    return f"session/{s}/agent/a"


def remote_session(remote: Server, local: str) -> str:
    with Client.connect(remote.addr) as r:
        mine = [d.name for d in r.ls("session") if d.name.endswith(f"-{local}")]
    assert len(mine) == 1, mine
    return mine[0]


def test_every_err_is_its_own_calls(front):
    _, c = front
    base = agent(c, "e1", "far.noisy")
    for i in range(6):
        assert c.rdwr(f"{base}/tools/far.noisy/call", b'{"n": %d}\n' % i) == \
            b'{"n": %d}\n' % i
        assert c.read(f"{base}/tools/far.noisy/err") == b'said {"n": %d}\n' % i
        assert c.read(f"{base}/tools/far.noisy/status").startswith(b"ok ")


def test_a_sessions_remote_cwd_is_seen_and_set_through_the_local_tree(front, remote):
    _, c = front
    base = agent(c, "w1", "far.pwd")
    assert "hosts" in [d.name for d in c.ls("session/w1")]
    assert [d.name for d in c.ls("session/w1/hosts")] == ["far"]
    there = c.read("session/w1/hosts/far").decode().strip()
    rs = remote_session(remote, "w1")
    with Client.connect(remote.addr) as r:
        assert r.read(f"session/{rs}/cwd").decode().strip() == there   # the remote's own
    assert there != c.read("session/w1/cwd").decode().strip()           # not the local one
    assert c.rdwr(f"{base}/tools/far.pwd/call", b"{}").decode().strip() == there

    new = os.path.join(remote.home, "work-w1")        # a directory on the remote's host
    os.mkdir(new)
    os.chmod(new, 0o755)
    c.write("session/w1/hosts/far", new.encode() + b"\n")
    assert c.read("session/w1/hosts/far") == new.encode() + b"\n"
    assert c.rdwr(f"{base}/tools/far.pwd/call", b"{}").decode().strip() == new
    with Client.connect(remote.addr) as r:
        assert r.read(f"session/{rs}/cwd").decode().strip() == new


def test_a_bad_remote_cwd_is_the_remotes_error_naming_the_host(front, remote):
    _, c = front
    agent(c, "w2", "far.pwd")
    before = c.read("session/w2/hosts/far")
    with pytest.raises(ClientError, match=r"far: cwd: no such directory: /nonexistent/x"):
        c.write("session/w2/hosts/far", b"/nonexistent/x\n")
    assert c.read("session/w2/hosts/far") == before
    with pytest.raises(ClientError, match="not found|does not exist"):
        c.read("session/w2/hosts/nosuchhost")


def test_a_remote_session_made_for_its_cwd_alone_goes_with_the_local_one(front, remote):
    _, c = front
    agent(c, "w3")                                     # no call: no agent made there
    c.read("session/w3/hosts/far")                     # makes the remote session
    rs = remote_session(remote, "w3")
    c.rm("session/w3")
    with Client.connect(remote.addr) as r:
        assert wait_for(lambda: rs not in [d.name for d in r.ls("session")])


def test_a_remote_session_of_a_local_session_without_agents_goes_with_it(front, remote):
    _, c = front
    c.mkdir("session/w4")                              # a session, no agent at all
    c.read("session/w4/hosts/far")                     # makes the remote session
    rs = remote_session(remote, "w4")
    with Client.connect(remote.addr) as r:
        assert rs in [d.name for d in r.ls("session")]
        c.rm("session/w4")
        assert wait_for(lambda: rs not in [d.name for d in r.ls("session")])


def test_without_imports_a_session_has_no_hosts_directory():
    a = AppThread([tools_dir()]).start()
    try:
        with Client.connect(a.addr) as c:
            c.mkdir("session/plain")
            assert [d.name for d in c.ls("session/plain")] == ["cwd", "sandbox", "agent"]
    finally:
        stop_clean(a)


def test_a_call_past_the_fronts_bound_times_out_and_is_killed_there(monkeypatch, remote):
    from toolsrv.hosts import imports
    monkeypatch.setattr(imports, "CALL_BOUND", 1.0)
    a = AppThread([tools_dir()], imports=[f"far={remote.addr}"]).start()
    try:
        with Client.connect(a.addr) as c:
            assert wait_for(lambda: b"far.sleepy" in c.read("tools/index"))
            base = agent(c, "b1", "far.sleepy")
            with pytest.raises(ClientError, match="timeout after 1s: far did not answer"):
                c.rdwr(f"{base}/tools/far.sleepy/call", b"{}")
            assert c.read(f"{base}/tools/far.sleepy/status").startswith(b"timeout")
            rs = remote_session(remote, "b1")
            with Client.connect(remote.addr) as r:      # the flush killed the run there
                assert wait_for(lambda: r.read(
                    f"session/{rs}/agent/a/tools/sleepy/status").startswith(b"killed"))
    finally:
        stop_clean(a)


def test_a_tools_scoped_connection_may_not_set_a_remote_cwd(front):
    """client_9p's connection (fs.AgentScope) is refused the write, as the local cwd's."""
    from toolsrv.tree.scope import AgentScope
    a, c = front
    agent(c, "sc", "far.pwd")
    node = a.app.fs.root.lookup("session").lookup("sc").lookup("hosts").lookup("far")
    assert node is not None
    with pytest.raises(Exception, match="outside this tool's scope"):
        AgentScope("sc", "a")(node, "write")


def test_a_remote_that_stops_answering_fails_its_call_at_the_heartbeat(monkeypatch):
    """A remote stopped mid-call (SIGSTOP: a host frozen, a network cut) no longer holds
    the agent's call for CALL_BOUND (an hour): the front asks it its revision while calls
    are forwarded, hangs up when that goes unanswered, and the call fails saying so."""
    import signal
    import threading
    from toolsrv.hosts import imports
    monkeypatch.setattr(imports, "HEARTBEAT", 0.2)
    monkeypatch.setattr(imports, "HEARTBEAT_WAIT", 1.0)
    far = Server({"sleepy": SLEEPY}).start()
    a = AppThread([tools_dir()], imports=[f"far={far.addr}"]).start()
    stopped = False
    try:
        with Client.connect(a.addr) as c:
            assert wait_for(lambda: b"far.sleepy" in c.read("tools/index"))
            base = agent(c, "hb", "far.sleepy")
            got: list[str] = []

            def call() -> None:
                with Client.connect(a.addr) as c2:
                    try:
                        c2.rdwr(f"{base}/tools/far.sleepy/call", b"{}")
                        got.append("answered")
                    except ClientError as e:
                        got.append(str(e))
            t = threading.Thread(target=call)
            t.start()
            with Client.connect(far.addr) as r:    # the run is going there: stop the host
                assert wait_for(lambda: any(
                    r.read(f"session/{d.name}/agent/a/tools/sleepy/status").startswith(
                        b"running") for d in r.ls("session") if d.name.endswith("-hb")))
            os.kill(far.p.pid, signal.SIGSTOP)
            stopped = True
            t.join(60)
            assert got and "far at " in got[0] and "did not answer for 1s (stopped, or cut " \
                "off)" in got[0], got
    finally:
        if stopped:
            os.kill(far.p.pid, signal.SIGCONT)
        stop_clean(a)
        far.cleanup()
