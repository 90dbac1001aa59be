"""Who gets in, and how far: sockets, peer uids, TCP and its shared secret, attach names,
and a served tree that never reaches the host filesystem.

Another uid is played by a real process running as `nobody` (the tests run as
root).  To test SO_PEERCRED itself, a test first relaxes the file permissions
that normally stop such a process before it can even connect.
"""
from __future__ import annotations

import asyncio
import logging
import os
import pwd
import shutil
import socket
import stat
import struct
import subprocess
import tempfile

import pytest

from toolsrv.proto import DMDIR, Rerror, Tclunk, Tcreate, Twalk
from toolsrv.serve import auth, dial
from toolsrv.app import App, Options
from toolsrv.serve.peers import descends_from
from toolsrv.cli.client import Client, ClientError
from toolsrv.errors import defuse
from toolsrv.registry.names import valid_name

from apphelpers import AppThread, add_tool, tools_dir
from serverhelpers import Raw, stop_clean

NOBODY = 65534
SYSTEM_PYTHON = "/usr/bin/python3"

# a 9P client as another uid: prints the reply to Tversion (type and, for Rerror, text)
AS_NOBODY = r"""
import socket, struct, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(10); s.connect(sys.argv[1])
s.sendall(struct.pack("<IBHIH", 19, 100, 65535, 8216, 6) + b"9P2000")
data = b""
while True:
    chunk = s.recv(4096)
    if not chunk:
        break
    data += chunk
    if len(data) >= 4 and len(data) >= struct.unpack_from("<I", data)[0]:
        break
n = struct.unpack_from("<H", data, 7)[0]
print("Rversion" if data[4] == 101 else "Rerror " + data[9:9 + n].decode())
"""


@pytest.fixture(scope="module")
def tools():
    d = tools_dir()
    add_tool(d, "echo", "#!/bin/sh\ncat\n", {"readOnly": True})
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def app_with(tools):
    made: list[AppThread] = []

    def start(**opts) -> AppThread:
        a = AppThread([tools], **opts).start()
        made.append(a)
        return a
    yield start
    for a in made:
        stop_clean(a)


def as_nobody(path: str) -> str:
    r = subprocess.run([SYSTEM_PYTHON, "-I", "-c", AS_NOBODY, path], user=NOBODY, group=NOBODY,
                       capture_output=True, text=True, timeout=30)
    return (r.stdout + r.stderr).strip()


def open_up(app: AppThread) -> str:
    """Let other uids reach the socket (tests only), so SO_PEERCRED is what decides."""
    path = app.addr[len("unix!"):]
    os.chmod(app.tmp, 0o711)
    os.chmod(os.path.dirname(path), 0o711)
    os.chmod(path, 0o666)
    return path


# ------------------------------------------------------------------ the Unix socket

ROOT_ONLY = pytest.mark.skipif(os.geteuid() != 0,
                               reason="needs another uid to act as (root's setuid/chown)")


def test_socket_and_its_directory_are_private(app_with):
    app = app_with()
    path = app.addr[len("unix!"):]
    d = os.lstat(os.path.dirname(path))
    s = os.lstat(path)
    assert stat.S_ISDIR(d.st_mode) and stat.S_IMODE(d.st_mode) == 0o700
    assert stat.S_ISSOCK(s.st_mode) and stat.S_IMODE(s.st_mode) == 0o600
    assert d.st_uid == s.st_uid == os.getuid()
    if os.geteuid() == 0:
        assert "Permission denied" in as_nobody(path)      # the first wall: file modes


@ROOT_ONLY
def test_namespace_dir_owned_by_another_uid_is_refused():
    tmp = tempfile.mkdtemp(prefix="ns.", dir="/tmp")
    try:
        os.chown(tmp, NOBODY, NOBODY)
        with pytest.raises(ValueError, match="owned by uid 65534"):
            dial.ensure_private_dir(tmp)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


@ROOT_ONLY
def test_peercred_refuses_other_uids_with_a_reason(app_with):
    app = app_with()
    path = open_up(app)
    assert as_nobody(path) == ("Rerror permission denied: uid 65534 may not connect "
                               "(see --allow-uid)")
    with Client.connect(app.addr) as c:                    # our own uid still gets in
        assert c.read("revision").strip().isdigit()


@ROOT_ONLY
def test_allow_uid_lets_that_uid_in(app_with):
    app = app_with(allow_uids=[NOBODY])
    assert as_nobody(open_up(app)) == "Rversion"


def test_tool_processes_may_not_connect_back(app_with, tools):
    """Even with the server's own uid (tools not switched to nobody), a descendant of the
    launcher is refused.  The other walls are shown in test_escape.py."""
    add_tool(tools, "dialback", r"""#!/usr/bin/env python3
import os, socket, struct, sys
s = socket.socket(socket.AF_UNIX); s.settimeout(10)
s.connect(os.environ["TOOLSRV_ADDR"][len("unix!"):])
s.sendall(struct.pack("<IBHIH", 19, 100, 65535, 8216, 6) + b"9P2000")
data = s.recv(4096)
if data[4] == 101:
    print("connected back"); sys.exit(0)
sys.exit("refused: " + data[9:].decode())
""")
    app = app_with(run_as=None)                            # tools run as root, like us
    with Client.connect(app.addr) as c:
        c.mkdir("session/s")
        c.mkdir("session/s/agent/a")
        c.rdwr("session/s/agent/a/ctl", b"tool_load dialback")
        with pytest.raises(ClientError) as e:
            c.rdwr("session/s/agent/a/tools/dialback/call", b"{}")
    # the tool's words, defused in the Rerror so that the errno stays EIO (errors.defuse),
    # and given back as the tool wrote them by the client (errors.words)
    assert defuse("refused: permission denied: a tool may not connect back to its server") \
        in e.value.ename
    assert "refused: permission denied: a tool may not connect back to its server" \
        in str(e.value)


def test_descends_from():
    me = os.getpid()
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert descends_from(child.pid, me)
        assert descends_from(me, me)
        assert not descends_from(me, child.pid)
        assert not descends_from(1, me)
    finally:
        child.kill()
        child.wait()


# ------------------------------------------------------------------ TCP

def secret_file(tmp: str, mode: int = 0o600, data: bytes = b"s3cret-s3cret-s3cret") -> str:
    p = os.path.join(tmp, "secret")
    with open(p, "wb") as f:
        f.write(data + b"\n")
    os.chmod(p, mode)
    return p


def tcp_port(app: AppThread) -> int:
    return app.call(lambda: [s.sockets[0].getsockname()[1] for s in app.app.servers
                             if s.sockets[0].family == socket.AF_INET][0])


def test_tcp_must_be_loopback_unless_listen_any(tools):
    opts = Options(addrs=["tcp!0.0.0.0!0"], tools=[tools], persist=False)
    with pytest.raises(ValueError, match="needs --listen-any and --auth-secret"):
        asyncio.run(App(opts).start())


def test_listen_any_needs_a_secret_and_a_private_secret_file(tools):
    tmp = tempfile.mkdtemp(prefix="sec.", dir="/tmp")
    try:
        opts = Options(addrs=["tcp!0.0.0.0!0"], tools=[tools], listen_any=True, persist=False)
        with pytest.raises(ValueError, match="auth-secret"):
            asyncio.run(App(opts).start())
        opts.auth_secret = secret_file(tmp, 0o644)
        with pytest.raises(ValueError, match="must not be readable by group or others"):
            asyncio.run(App(opts).start())
        opts.auth_secret = secret_file(tmp, 0o600, b"short")
        with pytest.raises(ValueError, match="shorter than 16 bytes"):
            asyncio.run(App(opts).start())
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _tcp_app(tools, path: str) -> AppThread:
    a = AppThread([tools], auth_secret=path)
    a.opts.addrs.append("tcp!127.0.0.1!0")
    return a.start()


def test_tcp_with_secret_requires_tauth(tools, caplog):
    caplog.set_level(logging.WARNING, logger="toolsrv")
    tmp = tempfile.mkdtemp(prefix="sec.", dir="/tmp")
    path = secret_file(tmp)
    app = _tcp_app(tools, path)
    try:
        port = tcp_port(app)
        addr = f"tcp!127.0.0.1!{port}"
        with pytest.raises(ClientError, match="permission denied: authentication required"):
            Client.connect(addr)
        with pytest.raises(ClientError, match="permission denied: authentication failed"):
            Client.connect(addr, secret=b"not-the-secret-at-all")
        refused = [r.getMessage() for r in caplog.records if " refused: " in r.getMessage()]
        me = pwd.getpwuid(os.getuid()).pw_name              # the client's default uname
        assert len(refused) == 2 and f"attach refused: uname '{me}'" in refused[0] \
            and "authentication required" in refused[0] and f"auth refused: uname '{me}'" \
            in refused[1] and "wrong answer" in refused[1], refused   # turned away, and logged
        with Client.connect(addr, secret=auth.load_secret(path), uname="alice") as c:
            assert c.read("revision").strip().isdigit()
        os.environ["TOOLSRV_SECRET_FILE"] = path            # what the CLI verbs use
        try:
            with Client.connect(addr) as c:
                assert b"echo\t" in c.read("tools/index")
        finally:
            del os.environ["TOOLSRV_SECRET_FILE"]
        with Client.connect(app.addr) as c:                 # the Unix socket needs no secret
            assert c.read("revision").strip().isdigit()
    finally:
        stop_clean(app)
        shutil.rmtree(tmp, ignore_errors=True)


# ------------------------------------------------------------------ attach names

def test_attach_names_and_peers_are_logged(app_with, caplog):
    app = app_with()
    with caplog.at_level(logging.DEBUG, logger="toolsrv"):     # serve -v: issue 46, 13
        with Client.connect(app.addr, uname="alice", aname="../../etc") as c:
            assert c.read("revision").strip().isdigit()    # aname leads nowhere else
            with pytest.raises(ClientError, match="not found"):
                c.read("passwd")
    text = caplog.text
    assert "uname 'alice' aname '../../etc'" in text
    assert f"unix peer uid {os.getuid()} pid {os.getpid()}" in text
    assert any(u == "alice" for _, u, _ in app.call(lambda: list(app.app.fs.attaches)))


# ------------------------------------------------------------------ the tree stays inside

def test_no_walk_leaves_the_tree(app_with):
    app = app_with()
    raw = Raw(app.addr)
    root = raw.ok(Twalk(1, 0, 1, ())).wqid
    r = raw.ok(Twalk(1, 0, 2, ("..", "..", "..")))
    assert r.wqid[-1] == raw.ok(Twalk(1, 0, 3, ("tools", ".."))).wqid[-1]
    assert root == ()
    for names in [("..", "etc", "passwd"), ("/",), ("/etc",), ("etc",), (".",),
                  ("tools/../..",), ("n" * 255,), ("x" * 8000,), ("tools", "..", "..", "root"),
                  ("session", "..", "..", "tmp")]:
        r = raw.rpc(Twalk(1, 0, 9, names))
        assert type(r) is Rerror or len(r.wqid) < len(names), (names, r)
    for name in ["..", ".", "a/b", "/", "", "x" * 300, "\t", "é"]:
        raw.ok(Twalk(1, 0, 10, ("session",)))
        r = raw.rpc(Tcreate(1, 10, name, DMDIR | 0o755, 0))
        assert type(r) is Rerror and r.ename.startswith(
            "illegal file name: use letters, digits"), (name, r)
        raw.ok(Tclunk(1, 10))
    # NUL, or bytes that are not UTF-8, cannot even be encoded by our client: sent raw,
    # the request fails and the connection serves on (test_malformed.py)
    for bad in (b"a\0b", b"\xe9t\xe9"):
        body = struct.pack("<IIH", 0, 11, 1) + struct.pack("<H", len(bad)) + bad
        raw.sk.sendall(struct.pack("<IBH", 7 + len(body), 110, 1) + body)
        assert raw.recv()[0] == Rerror(1, "illegal file name")
    assert len(raw.ok(Twalk(1, 0, 11, ("tools",))).wqid) == 1
    raw.close()


def test_every_served_name_is_plain_and_no_file_is_a_link(app_with):
    """Walk the whole tree: names are plain, modes are plain files and directories."""
    app = app_with()
    with Client.connect(app.addr) as c:
        c.mkdir("session/s")
        c.mkdir("session/s/agent/a")
        c.rdwr("session/s/agent/a/ctl", b"tool_load echo")
        seen, todo = 0, [""]
        while todo:
            d = todo.pop()
            for e in c.ls(d or "."):
                seen += 1
                assert valid_name(e.name), e.name
                assert e.mode & ~(DMDIR | 0o777) == 0, (d, e.name, oct(e.mode))
                assert e.qid.path != 0
                if e.mode & DMDIR:
                    todo.append(f"{d}/{e.name}".lstrip("/"))
        assert seen > 20


def test_session_names_cannot_name_host_paths(app_with):
    app = app_with()
    with Client.connect(app.addr) as c:
        for bad in ["..", "a b", "x" * 129, "a;b", "~root"]:
            with pytest.raises(ClientError):
                c.mkdir(f"session/{bad}")
        c.mkdir("session/ok")
        cwd = c.read("session/ok/cwd").decode().strip()
        assert os.path.basename(cwd).startswith("ok.")      # a private dir, ours, 0700
        st = os.lstat(cwd)
        assert stat.S_IMODE(st.st_mode) == 0o700
        with pytest.raises(ClientError, match="no such directory"):
            c.write("session/ok/cwd", b"relative/path")


def test_no_write_through_secret_files_in_state(app_with):
    """The state file is written 0600 in a 0700 directory."""
    app = app_with()
    with Client.connect(app.addr) as c:
        c.mkdir("session/s")
    state = app.opts.state_dir
    assert stat.S_IMODE(os.lstat(state).st_mode) == 0o700
    assert stat.S_IMODE(os.lstat(os.path.join(state, "state.json")).st_mode) == 0o600
