"""Many hosts, one namespace (issue 30, section 2): a front imports other toolsrvs' tools
as NAME.TOOL and runs their calls there.  Every remote here is a real `toolsrv serve`
process with a home, tools and environment of its own, started outside the checkout; the
fronts are whole servers too."""
from __future__ import annotations

import json
import os
import threading

import pytest

from toolsrv.cli.client import Client, ClientError

from apphelpers import AppThread, add_tool, ranked, tools_dir
from serverhelpers import stop_clean
from hostshelpers import Server, wait_for

ECHO = ("#!/bin/sh\ncat\n", {"readOnly": True, "description": "echo the args back",
                             "keywords": ["parrot"]})
FAIL = ("#!/bin/sh\necho oops-remote >&2\nexit 3\n", {"description": "always fails"})
SLEEPY = ("#!/bin/sh\necho started\nexec sleep 300\n", {"description": "sleeps"})
# one .meta for both hosts: only a host with ONLY_ON_REMOTE set serves it
GPU = (None, {"description": "a tool for the gpu box", "cmd": "/bin/cat",
              "variants": [{"match": {"env": ["ONLY_ON_REMOTE"]},
                            "description": "the gpu box's cat"}]})


@pytest.fixture(scope="module")
def remote():
    s = Server({"echo": ECHO, "fail": FAIL, "sleepy": SLEEPY, "gpu": GPU},
               ONLY_ON_REMOTE="1").start()
    yield s
    s.cleanup()


@pytest.fixture(scope="module")
def front(remote):
    d = tools_dir()
    add_tool(d, "local", "#!/bin/sh\necho here\n")
    add_tool(d, "gpu", None, GPU[1])          # the same .meta: no match on this host
    a = AppThread([d], imports=[f"build={remote.addr}"]).start()
    c = Client.connect(a.addr)
    assert wait_for(lambda: b"build.echo" in c.read("tools/index")), c.read("tools/errors")
    yield a, c
    c.close()
    stop_clean(a)


def agent(c: Client, s: str, a: str, *tools: str) -> str:
    c.mkdir(f"session/{s}")
    c.mkdir(f"session/{s}/agent/{a}")
    base = f"session/{s}/agent/{a}"
    c.write(f"{base}/ctl", "".join(f"tool_load {t}\n" for t in tools).encode())
    return base


def test_remote_tools_are_served_as_the_remote_serves_them(front, remote):
    _, c = front
    index = c.read("tools/index").decode()
    assert "build.echo\thot\techo the args back\n" in index and "local\t" in index
    with Client.connect(remote.addr) as r:
        for f in ("meta", "schema", "prompt"):
            assert c.read(f"tools/build.echo/{f}") == r.read(f"tools/echo/{f}")
        assert b"build.gpu" in c.read("tools/index")     # its variant held over there
        assert b"the gpu box's cat" in r.read("tools/gpu/meta")
    assert "gpu\t" not in index.replace("build.gpu", "")  # and not here
    assert b"ONLY_ON_REMOTE" in c.read("tools/errors")
    assert b"build up 4 tools" in c.read("hosts/ctl").replace(
        remote.addr.encode() + b" ", b"")


def test_search_finds_remote_tools(front):
    _, c = front
    got = c.rdwr("tools/search", b"parrot\n")
    assert ranked(got)[0].startswith(b"build.echo\t"), got


def test_a_call_runs_on_the_remote_and_everything_comes_back(front, remote):
    _, c = front
    base = agent(c, "s1", "a1", "build.echo", "build.fail", "build.gpu")
    assert c.rdwr(f"{base}/tools/build.echo/call", b'{"x": "hi"}') == b'{"x": "hi"}'
    assert c.read(f"{base}/tools/build.echo/status").startswith(b"ok ")
    assert c.rdwr(f"{base}/tools/build.gpu/call", b'{"y": 2}') == b'{"y": 2}'
    with pytest.raises(ClientError, match=r"exit 3 \(input/output error\): oops-remote"):
        c.rdwr(f"{base}/tools/build.fail/call", b"{}")
    assert c.read(f"{base}/tools/build.fail/status").startswith(b"exit 3 ")
    assert c.read(f"{base}/tools/build.fail/err") == b"oops-remote\n"
    log = c.read(f"{base}/log").decode()
    assert "call build.echo -> ok" in log and "call build.fail -> exit 3" in log
    assert f"call build.echo -> on {remote.addr} as session/" in log     # names the host
    with Client.connect(remote.addr) as r:              # the remote's own session for it
        mine = [d.name for d in r.ls("session") if d.name.endswith("-s1")]
        assert len(mine) == 1
        assert b"echo" in r.read(f"session/{mine[0]}/agent/a1/ctl")
        assert "call echo" in r.read(f"session/{mine[0]}/agent/a1/log").decode()


def test_invalid_args_are_refused_here_before_the_remote(front):
    _, c = front
    base = agent(c, "s2", "a2", "build.echo")
    with pytest.raises(ClientError, match="must be a JSON object"):
        c.rdwr(f"{base}/tools/build.echo/call", b"[1, 2]")


def test_cancel_kills_the_remote_run(front, remote):
    _, c = front
    base = agent(c, "s3", "a3", "build.sleepy")
    errs: list = []

    def call():
        try:
            c.rdwr(f"{base}/tools/build.sleepy/call", b"{}")
        except ClientError as e:
            errs.append(str(e))
    t = threading.Thread(target=call, daemon=True)
    t.start()
    r = Client.connect(remote.addr)
    try:
        def remote_status() -> bytes:
            s = [d.name for d in r.ls("session") if d.name.endswith("-s3")][0]
            return r.read(f"session/{s}/agent/a3/tools/sleepy/status")
        assert wait_for(lambda: remote_status().startswith(b"running"))
        c.write(f"{base}/ctl", b"cancel build.sleepy\n")
        t.join(60)
        assert not t.is_alive() and errs and "cancelled" in errs[0]
        assert wait_for(lambda: remote_status().startswith(b"killed")), remote_status()
        assert c.read(f"{base}/tools/build.sleepy/status").startswith(b"killed")
    finally:
        r.close()


def test_a_remote_change_moves_the_fronts_revision(front, remote):
    _, c = front
    rev = int(c.read("revision"))
    add_tool(remote.tools_dir, "fresh", "#!/bin/sh\ncat\n", {"description": "new there"})
    got = int(c.rdwr("revwait", f"{rev}\n".encode()))   # waits for the change
    assert got != rev
    assert wait_for(lambda: b"build.fresh\thot\tnew there" in c.read("tools/index"))
    os.unlink(os.path.join(remote.tools_dir, "fresh.meta"))
    assert wait_for(lambda: b"build.fresh" not in c.read("tools/index"))


def test_python_9p_reads_the_fronts_tree(front):
    import py9phelpers as p9
    a, _ = front
    c = p9.connect(a)
    try:
        meta = json.loads(p9.read(c, "tools/build.echo/meta"))
        assert meta["name"] == "echo" and meta["description"] == "echo the args back"
        p9.mkdir(c, "session/py")
        p9.mkdir(c, "session/py/agent/p")
        base = "session/py/agent/p"
        p9.rdwr(c, f"{base}/ctl", b"tool_load build.echo\n")
        assert p9.rdwr(c, f"{base}/tools/build.echo/call", b'{"via": "py9p"}') == \
            b'{"via": "py9p"}'
    finally:
        c.close()


def test_a_remote_killed_mid_call_restarted_and_back():
    remote = Server({"echo": ECHO, "sleepy": SLEEPY}).start()
    a = AppThread([tools_dir()], imports=[f"far={remote.addr}"]).start()
    c = Client.connect(a.addr)
    try:
        assert wait_for(lambda: b"far.sleepy" in c.read("tools/index"))
        base = agent(c, "k", "k", "far.sleepy", "far.echo")
        errs: list = []

        def call():
            try:
                c.rdwr(f"{base}/tools/far.sleepy/call", b"{}")
            except ClientError as e:
                errs.append(str(e))
        t = threading.Thread(target=call, daemon=True)
        t.start()
        assert wait_for(lambda: c.read(f"{base}/tools/far.sleepy/status").startswith(
            b"running"))
        remote.kill()
        t.join(60)
        assert not t.is_alive() and errs and "far" in errs[0], errs
        assert wait_for(lambda: b"far." not in c.read("tools/index"))
        errors = c.read("tools/errors").decode()
        assert f"far\tunreachable at {remote.addr}: " in errors, errors
        with pytest.raises(ClientError, match="unreachable at"):   # at once, with why
            c.rdwr(f"{base}/tools/far.echo/call", b"{}")
        assert b"far " in c.read("hosts/ctl") and b"down: " in c.read("hosts/ctl")
        remote.start()                                   # the same address again
        assert wait_for(lambda: b"far.echo" in c.read("tools/index"), 120)
        assert b"unreachable" not in c.read("tools/errors")
        assert c.rdwr(f"{base}/tools/far.echo/call", b'{"back": 1}') == b'{"back": 1}'
    finally:
        c.close()
        stop_clean(a)
        remote.cleanup()


def test_three_hosts_one_namespace():
    """A front imports two tool hosts, one of which imports a third: b.c.TOOL."""
    c_host = Server({"deep": ECHO}).start()
    b_host = Server({"mid": ECHO}, "--import", f"c={c_host.addr}").start()
    other = Server({"side": ECHO}).start()
    a = AppThread([tools_dir()], imports=[f"b={b_host.addr}", f"o={other.addr}"]).start()
    c = Client.connect(a.addr)
    try:
        assert wait_for(lambda: all(n in c.read("tools/index") for n in
                                    (b"b.mid", b"b.c.deep", b"o.side")), 120), \
            c.read("tools/errors")
        base = agent(c, "t", "t", "b.c.deep", "o.side")
        assert c.rdwr(f"{base}/tools/b.c.deep/call", b'{"hops": 2}') == b'{"hops": 2}'
        assert c.rdwr(f"{base}/tools/o.side/call", b'{"hops": 1}') == b'{"hops": 1}'
    finally:
        c.close()
        stop_clean(a)
        for s in (b_host, c_host, other):
            s.cleanup()


def test_hosts_ctl_imports_at_runtime_and_the_state_keeps_it():
    remote = Server({"echo": ECHO}).start()
    d = tools_dir()
    a = AppThread([d]).start()
    state = a.opts.state_dir
    try:
        with Client.connect(a.addr) as c:
            assert c.read("hosts/ctl") == b""
            for bad, word in ((b"import x.y unix!/nowhere\n", "bad import name"),
                              (b"import x nowhere!at!all!\n", "bad address"),
                              (b"frobnicate\n", "bad line"),
                              (b"unimport nothing\n", "not imported")):
                with pytest.raises(ClientError, match=word):
                    c.write("hosts/ctl", bad)
            c.write("hosts/ctl", f"import rt {remote.addr}\n".encode())
            with pytest.raises(ClientError, match="already"):
                c.write("hosts/ctl", f"import rt {remote.addr}\n".encode())
            assert wait_for(lambda: b"rt.echo" in c.read("tools/index"))
        a.stop()
        a2 = AppThread([d], state_dir=state).start()
        with Client.connect(a2.addr) as c:
            assert wait_for(lambda: b"rt.echo" in c.read("tools/index"))
            c.write("hosts/ctl", b"unimport rt\n")
            assert b"rt.echo" not in c.read("tools/index")
            assert c.read("hosts/ctl") == b""
        saved = json.load(open(os.path.join(state, "hosts.json")))
        assert saved["imports"] == {} and saved["front"]
        stop_clean(a2)
    finally:
        stop_clean(a)
        remote.cleanup()


def test_a_tools_scoped_connection_may_not_write_hosts_ctl(front):
    """client_9p's connection (scope.AgentScope) reads hosts/ctl but never imports."""
    from toolsrv.tree.scope import AgentScope
    from toolsrv.tree.node import Dir_
    a, _ = front
    hosts = a.app.fs.root.lookup("hosts")
    ctl = hosts.lookup("ctl") if isinstance(hosts, Dir_) else None
    assert ctl is not None
    with pytest.raises(Exception, match="outside this tool's scope"):
        AgentScope("s", "a")(ctl, "write")


def test_removing_the_local_agent_and_session_removes_them_there(front, remote):
    _, c = front
    base = agent(c, "gone", "g1", "build.echo")
    c.mkdir("session/gone/agent/g2")
    c.write("session/gone/agent/g2/ctl", b"tool_load build.echo\n")
    for b in (base, "session/gone/agent/g2"):
        c.rdwr(f"{b}/tools/build.echo/call", b"{}")
    with Client.connect(remote.addr) as r:
        there = [d.name for d in r.ls("session") if d.name.endswith("-gone")][0]
        assert sorted(d.name for d in r.ls(f"session/{there}/agent")) == ["g1", "g2"]
        c.rm(base)
        assert wait_for(lambda: [d.name for d in r.ls(f"session/{there}/agent")] == ["g2"])
        c.rm("session/gone")
        assert wait_for(lambda: there not in [d.name for d in r.ls("session")])


def test_a_remote_that_never_answers_cannot_stall_the_front(monkeypatch, tmp_path):
    """A socket that accepts and then says nothing: the front serves on, and the import is
    down with why once the dial's bound passes."""
    import socket as so
    from toolsrv.hosts import imports
    monkeypatch.setattr(imports, "DIAL_TIMEOUT", 2.0)
    mute = so.socket(so.AF_UNIX)
    path = str(tmp_path / "mute")
    mute.bind(path)
    mute.listen(8)
    a = AppThread([tools_dir()], imports=[f"mute=unix!{path}"]).start()
    try:
        with Client.connect(a.addr) as c:
            assert b"mute" in c.read("hosts/ctl")             # answered while it waits
            assert wait_for(lambda: "mute\tunreachable at unix!" in
                            c.read("tools/errors").decode())
            assert "no answer in time" in c.read("tools/errors").decode()
            assert c.read("tools/index") is not None
    finally:
        stop_clean(a)
        mute.close()
