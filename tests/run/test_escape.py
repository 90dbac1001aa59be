"""The sandbox escape suite, run through the server: real tools, real Landlock, real uids.

Each tool below tries one escape and prints ESCAPED if it worked.  The server runs
as root and its tools as `nobody` under the shipped default profile (or, where a
test needs an allowed port or a read-only directory of programs, a profile
written for it).  Targets are made reachable by Unix permissions (world-readable
files, world-writable directories, a process of uid nobody), so that what stops
each attempt is the sandbox, not the file modes.  Every attempt must fail, and
the caller must see why: the Rerror of the call names the tool's own error
(`exit 1 (input/output error): read_outside: /tmp/...: Per-mission denied`, its
words defused so the errno stays EIO; the log has them as the tool wrote them).
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import stat
import subprocess
import tempfile
import textwrap
import threading
import uuid

import pytest

from toolsrv.cli.client import Client, ClientError
from toolsrv.run.sandbox import landlock_status

from apphelpers import AppThread, add_tool, tools_dir
from serverhelpers import stop_clean

pytestmark = pytest.mark.skipif(os.geteuid() != 0 or landlock_status().abi < 6,
                                reason="needs root (tools run as nobody) and Landlock ABI >= 6")
NOBODY = 65534

PRELUDE = """\
#!/usr/bin/env python3
import json, os, socket, struct, sys
a = json.load(sys.stdin)
NAME = os.path.basename(sys.argv[0])
def escaped(what):
    print("ESCAPED: " + str(what)); sys.exit(0)
def failed(e):
    where = getattr(e, "filename", None)
    why = (e.strerror if isinstance(e, OSError) else None) or e
    sys.exit(f"{NAME}: {where}: {why}" if where else f"{NAME}: {why}")
try:
"""

ATTEMPTS = {
    # the file system outside the allowed paths
    "read_outside": "escaped(open(a['path']).read())",
    "list_outside": "escaped(os.listdir(a['path']))",
    "write_outside": "open(a['path'], 'w').write('pwned'); escaped(a['path'])",
    "symlink_out": "os.symlink(a['path'], 'link'); escaped(open('link').read())",
    "read_planted_link": "escaped(open(a['link']).read())",
    "hardlink_out": "os.link(a['path'], 'hard'); escaped(open('hard').read())",
    "proc_root": "escaped(open('/proc/self/root' + a['path']).read())",
    "proc_server": "escaped(open(f\"/proc/{a['pid']}/environ\").read())",
    "exec_nonexec": "os.execv(a['path'], [a['path']])",
    # the network and other processes
    "tcp_connect": ("s = socket.create_connection(('127.0.0.1', a['port']), timeout=5)\n"
                    "escaped(s.recv(100))"),
    "abstract_unix": ("s = socket.socket(socket.AF_UNIX); s.connect(a['name'])\n"
                      "escaped(a['name'])"),
    "signal_outside": "os.kill(a['pid'], 15); escaped(a['pid'])",
    # the server's own things
    "write_tools_dir": ("open(os.path.join(os.path.dirname(os.path.realpath(sys.argv[0])), "
                        "'evil.meta'), 'w').write('{}'); escaped('evil.meta')"),
    "rewrite_self": "open(os.path.realpath(sys.argv[0]), 'a').write('#'); escaped('self')",
    "read_state": "escaped(open(a['path']).read())",
    "connect_back": ("s = socket.socket(socket.AF_UNIX); s.settimeout(10)\n"
                     "s.connect(os.environ['TOOLSRV_ADDR'][5:])\n"
                     "s.sendall(struct.pack('<IBHIH', 19, 100, 65535, 8216, 6) + b'9P2000')\n"
                     "r = s.recv(4096)\n"
                     "if r[4] != 101: sys.exit(NAME + ': ' + r[9:].decode())\n"
                     "escaped('attached')"),
    "other_session": "escaped(os.listdir(a['path']) + [open(a['path'] + '/mine').read()])",
    # a helper, not an escape: writes into its own session's cwd
    "leave_mark": "open('mine', 'w').write('private'); print(os.getcwd())",
}
ENDING = "\nexcept (OSError, ValueError) as e:\n    failed(e)\n"


def tool_script(body: str) -> str:
    return PRELUDE + textwrap.indent(body, "    ") + ENDING


@pytest.fixture(scope="module")
def world():
    """Things outside the sandbox that Unix permissions would let nobody reach."""
    out = tempfile.mkdtemp(prefix="esc.", dir="/tmp")
    os.chmod(out, 0o755)
    with open(os.path.join(out, "secret"), "w") as f:
        f.write("TOP SECRET\n")
    os.chmod(os.path.join(out, "secret"), 0o644)
    drop = os.path.join(out, "drop")
    os.mkdir(drop)
    os.chmod(drop, 0o777)
    prog = os.path.join(out, "ro", "mytrue")
    os.mkdir(os.path.dirname(prog), 0o755)
    shutil.copy("/bin/true", prog)
    os.chmod(prog, 0o755)
    home = os.path.join(out, "home")                 # the server's HOME: profiles live here
    prof = os.path.join(home, ".config", "ollie", "sandbox")
    os.makedirs(prof)
    from toolsrv.dirs.bundled import PROFILES
    with open(os.path.join(PROFILES, "default.yaml")) as f:
        default = f.read()
    yield {"dir": out, "secret": os.path.join(out, "secret"), "drop": drop, "prog": prog,
           "profiles": prof, "home": home, "default": default}
    shutil.rmtree(out, ignore_errors=True)


@pytest.fixture(scope="module")
def listeners():
    """Two TCP listeners on loopback that greet whoever connects: one a profile allows,
    one it does not."""
    socks = []

    def greet(s: socket.socket) -> None:
        while True:
            try:
                conn, _ = s.accept()
            except OSError:
                return
            conn.sendall(b"hello")
            conn.close()
    for _ in range(2):
        s = socket.socket()
        s.bind(("127.0.0.1", 0))
        s.listen(8)
        socks.append(s)
        threading.Thread(target=greet, args=(s,), daemon=True).start()
    yield [s.getsockname()[1] for s in socks]
    for s in socks:
        s.shutdown(socket.SHUT_RDWR)
        s.close()


@pytest.fixture(scope="module", params=["cold", "resident"])
def srv(world, listeners, request):
    """The server; its attempts run cold, or (param resident) each in a resident process of
    protocol python, which must be confined as a cold run is (issue 33)."""
    allowed = listeners[0]
    with open(os.path.join(world["profiles"], "netone.yaml"), "w") as f:
        f.write(world["default"].replace("network:\n  enabled: false",
                                         f"network:\n  enabled: true\n  connect_tcp: [{allowed}]"))
    with open(os.path.join(world["profiles"], "rodir.yaml"), "w") as f:
        f.write(world["default"].replace("  ro:\n", f"  ro:\n    - {world['dir']}/ro\n", 1))
    d = tools_dir()
    resident = request.param == "resident"
    for name, body in ATTEMPTS.items():
        if resident:
            add_tool(d, name, "#!/usr/bin/env python3\n" + tool_script(body),
                     {"resident": {"protocol": "python"}})
        else:
            add_tool(d, name, tool_script(body))
    old_home = os.environ.get("HOME")
    os.environ["HOME"] = world["home"]
    app = AppThread([d]).start()
    app.tools = d
    app.resident = resident
    try:
        yield app
    finally:
        stop_clean(app)
        if old_home is None:
            del os.environ["HOME"]
        else:
            os.environ["HOME"] = old_home
        shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def c(srv):
    """A client with a fresh session whose agent has every attempt loaded."""
    with Client.connect(srv.addr) as c:
        s = "e" + uuid.uuid4().hex[:8]
        c.mkdir(f"session/{s}")
        c.mkdir(f"session/{s}/agent/a")
        c.rdwr(f"session/{s}/agent/a/ctl", ("tool_load " + " ".join(ATTEMPTS)).encode())
        c.base = f"session/{s}/agent/a"
        c.session = s
        c.server_app = srv
        yield c
        c.rm(f"session/{s}")


def attempt(c, tool: str, why: str, **args) -> str:
    """Call the tool; it must fail, and the caller's error must say why."""
    with pytest.raises(ClientError) as e:
        out = c.rdwr(f"{c.base}/tools/{tool}/call", json.dumps(args).encode())
        pytest.fail(f"{tool} escaped: {out!r}")
    msg = str(e.value)
    assert msg.startswith(f"exit 1 (input/output error): {tool}: "), msg
    assert why in msg, msg     # as the tool wrote it: the Rerror's defuse undone
    status = c.read(f"{c.base}/tools/{tool}/status")
    assert status.startswith(b"exit 1 "), status
    if hasattr(c, "server_app"):     # a session of the fixture: cold, or resident
        assert (b"\nresident up " in status) is c.server_app.resident, status
    assert why.encode() in c.read(f"{c.base}/tools/{tool}/err")
    return msg


def srv_pidns(c) -> bool:
    return c.server_app.call(lambda: c.server_app.app.runner.launcher.pidns)


def use_profile(c, name: str) -> None:
    c.write(f"session/{c.session}/sandbox", name.encode())


# ------------------------------------------------------------------ the file system

def test_read_and_list_outside(c, world):
    attempt(c, "read_outside", "Permission denied", path=world["secret"])
    attempt(c, "list_outside", "Permission denied", path=world["dir"])
    attempt(c, "read_outside", "Permission denied", path="/etc/shadow")
    attempt(c, "list_outside", "Permission denied", path="/root")


def test_write_outside_cwd_and_tmpdir(c, world):
    target = os.path.join(world["drop"], "pwned")
    attempt(c, "write_outside", "Permission denied", path=target)
    attempt(c, "write_outside", "Permission denied", path=f"/tmp/pwned.{uuid.uuid4().hex}")
    attempt(c, "write_outside", "Permission denied", path="/var/tmp/pwned")
    assert not os.path.exists(target)


def test_symlinks_out(c, world, srv):
    attempt(c, "symlink_out", "Permission denied", path=world["secret"])
    cwd = c.read(f"session/{c.session}/cwd").decode().strip()
    os.symlink(world["secret"], os.path.join(cwd, "planted"))   # made outside the sandbox
    attempt(c, "read_planted_link", "Permission denied", link="planted")
    attempt(c, "hardlink_out", "", path=world["secret"])


def test_proc_tricks(c, world):
    attempt(c, "proc_root", "Permission denied", path=world["secret"])
    attempt(c, "proc_server", "Permission denied", pid=os.getpid())
    attempt(c, "proc_server", "Permission denied", pid=1)


def test_exec_from_a_directory_without_execute(c, world):
    use_profile(c, "rodir")
    attempt(c, "exec_nonexec", "Permission denied", path=world["prog"])


# ------------------------------------------------------------------ network, processes

def test_tcp_only_to_the_allowed_port(c, listeners):
    allowed, other = listeners
    attempt(c, "tcp_connect", "Permission denied", port=allowed)   # default: no network
    use_profile(c, "netone")
    attempt(c, "tcp_connect", "Permission denied", port=other)
    # the allowed port is reachable: the denial above is the rule, not broken wiring
    out = c.rdwr(f"{c.base}/tools/tcp_connect/call", json.dumps({"port": allowed}).encode())
    assert out == b"ESCAPED: b'hello'\n"


def test_abstract_unix_socket_outside(c):
    """Default profile: the tool's empty network namespace has no such name ("Connection
    refused"); a profile with network: Landlock's abstract-socket scope ("Operation not
    permitted")."""
    name = f"\0toolsrv-esc-{uuid.uuid4().hex}"
    s = socket.socket(socket.AF_UNIX)
    s.bind(name)
    s.listen(1)
    try:
        attempt(c, "abstract_unix", "Connection refused", name=name)
        use_profile(c, "netone")
        attempt(c, "abstract_unix", "Operation not permitted", name=name)
    finally:
        s.close()


def test_signal_to_an_outside_process(c):
    """Two walls: a tool's own PID namespace (outside pids do not exist there: "No such
    process") and, without one, Landlock's signal scope ("Operation not permitted")."""
    victim = subprocess.Popen(["sleep", "300"], user=NOBODY, group=NOBODY)  # same uid as tools
    why = "No such process" if srv_pidns(c) else "Operation not permitted"
    try:
        attempt(c, "signal_outside", why, pid=victim.pid)
        attempt(c, "signal_outside", why, pid=os.getpid())
        assert victim.poll() is None, "the outside process was signalled"
    finally:
        victim.kill()
        victim.wait()


# ------------------------------------------------------------------ the server's own things

def test_tools_directory_is_read_only(c, srv):
    os.chmod(srv.tools, 0o777)                     # even when the modes would allow it
    os.chmod(os.path.join(srv.tools, "rewrite_self"), 0o777)
    try:
        attempt(c, "write_tools_dir", "Permission denied")
        attempt(c, "rewrite_self", "Permission denied")
    finally:
        os.chmod(srv.tools, 0o755)
        os.chmod(os.path.join(srv.tools, "rewrite_self"), 0o755)
    assert not os.path.exists(os.path.join(srv.tools, "evil.meta"))
    assert b"evil" not in c.read("tools/index")


def test_state_directory_is_out_of_reach(c, srv):
    state = srv.opts.state_dir
    path = os.path.join(state, "state.json")
    attempt(c, "read_state", "Permission denied", path=path)
    modes = os.stat(state).st_mode, os.stat(path).st_mode
    os.chmod(state, 0o755)                          # even when the modes would allow it
    os.chmod(path, 0o644)
    try:
        attempt(c, "read_state", "Permission denied", path=path)
    finally:
        os.chmod(state, stat.S_IMODE(modes[0]))
        os.chmod(path, stat.S_IMODE(modes[1]))


def test_connecting_back_to_the_server(c, srv):
    attempt(c, "connect_back", "Permission denied")                   # the socket's modes
    path = srv.addr[len("unix!"):]
    saved = [(p, stat.S_IMODE(os.stat(p).st_mode)) for p in (srv.tmp, os.path.dirname(path),
                                                             path)]
    for p, _ in saved:
        os.chmod(p, 0o777)                         # even when the modes would allow it
    try:
        attempt(c, "connect_back", "permission denied: uid 65534 may not connect")
    finally:
        for p, m in saved:
            os.chmod(p, m)


def test_another_sessions_cwd(c, srv):
    with Client.connect(srv.addr) as other:
        other.mkdir("session/neighbour")
        other.mkdir("session/neighbour/agent/b")
        other.rdwr("session/neighbour/agent/b/ctl", b"tool_load leave_mark")
        cwd = other.rdwr("session/neighbour/agent/b/tools/leave_mark/call", b"{}").decode()
        cwd = cwd.strip()
        assert open(os.path.join(cwd, "mine")).read() == "private"
        st = os.stat(cwd)
        assert st.st_uid == NOBODY                  # same uid as every tool: only the
        try:                                        # sandbox keeps sessions apart
            attempt(c, "other_session", "Permission denied", path=cwd)
        finally:
            other.rm("session/neighbour")


# ------------------------------------------------------------------ through client_9p

def test_client_9p_cannot_widen_its_own_sandbox(world):
    """A model calling client_9p must not reach more than its session's profile allows:
    not repoint its session's cwd, not switch its profile, not see or end other sessions,
    not see its session's other agents."""
    from toolsrv.wiring import BUNDLED_TOOLS
    d = tools_dir()
    add_tool(d, "read_outside", tool_script(ATTEMPTS["read_outside"]))
    app = AppThread([d, str(BUNDLED_TOOLS)]).start()
    try:
        with Client.connect(app.addr) as c:
            for s in ("s", "other"):
                c.mkdir(f"session/{s}")
                c.mkdir(f"session/{s}/agent/a")
            c.mkdir("session/s/agent/b")
            c.rdwr("session/s/agent/a/ctl", b"tool_load client_9p read_outside")
            base = "session/s/agent/a/tools"

            def model(op: str, path: str, data: str = "") -> bytes:
                return c.rdwr(f"{base}/client_9p/call",
                              json.dumps({"op": op, "path": path, "data": data}).encode())
            for op, path, data in [("write", "session/s/cwd", world["dir"]),
                                   ("write", "session/s/sandbox", "client9p"),
                                   ("ls", "session/other", ""), ("rm", "session/other", "")]:
                with pytest.raises(ClientError, match="permission denied"):
                    model(op, path, data)
            # listings through the scoped connection show its own session and agent only
            assert model("ls", "session") == b"s/\n"
            assert model("ls", "session/s/agent") == b"a/\n"
            assert model("ls", "session/s") == b"agent/\ncwd\nsandbox\n"
            assert b"tools/" in model("ls", "")
            c.base = "session/s/agent/a"
            attempt(c, "read_outside", "Permission denied", path=world["secret"])
            assert "other" in [e.name for e in c.ls("session")]
    finally:
        stop_clean(app)
        shutil.rmtree(d, ignore_errors=True)
