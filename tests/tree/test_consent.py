"""Consent a model cannot give itself, over 9P (issue 48.2; tree/policy/consent.py).

A tool whose .meta says `"confirm": true` runs only after an approval broker's yes: the
server's own (none here: every call is refused, naming the tool), or the one the
writer's connection named on /consent (the MCP face names itself).  Here the broker is a
small one of the test's, speaking run/elevation.py's protocol (a socket and its token in
a private directory), that records each request and answers as told:

- no broker, a broker's no: `permission denied`, naming the tool and the broker's reason;
- a broker's yes: the call runs, and the broker was shown the tool and its args;
- `"approved": true` in the args is an argument like any other: still asked, still no;
- a connection that named no broker is not covered by another's;
- a nested call from a running tool (client_9p, on its own connection) is asked of the
  server's broker, never of the parent's connection's, and the tool cannot name one;
- an elevated call of a confirm tool is asked once, by the runner, of the connection's
  broker, with what the run may reach outside the sandbox;
- only the operator names a broker, and a path that is not a broker is refused at once.
"""
from __future__ import annotations

import json
import os
import shutil
import socket
import tempfile
import threading

import pytest

from apphelpers import AppThread, add_tool, tools_dir
from bare9p import BARE_9P
from toolsrv.cli.client import Client, ClientError

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENT = os.path.join(REPO, "data", "tools", "client_9p")


class Broker:
    """An approval broker (run/elevation.py's protocol): answers `yes` as set, and keeps
    every request it was sent."""

    def __init__(self, yes: bool) -> None:
        self.yes = yes
        self.asked: list[dict] = []
        self.dir = tempfile.mkdtemp(prefix="consent-broker.")
        os.chmod(self.dir, 0o700)
        self.path = os.path.join(self.dir, "approve.sock")
        self.token = os.urandom(16).hex()
        fd = os.open(self.path + ".token", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        os.write(fd, self.token.encode())
        os.close(fd)
        self.sock = socket.socket(socket.AF_UNIX)
        self.sock.bind(self.path)
        self.sock.listen(8)
        threading.Thread(target=self._serve, daemon=True).start()

    def _serve(self) -> None:
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            with conn:
                req = json.loads(conn.makefile().readline())
                ok = req.pop("token", None) == self.token and self.yes
                self.asked.append(req)
                conn.sendall(json.dumps({"approve": ok, "reason": "the test's broker said "
                                         + ("yes" if ok else "no")}).encode() + b"\n")

    def close(self) -> None:
        self.sock.close()
        shutil.rmtree(self.dir, ignore_errors=True)


NESTED = f"""#!/usr/bin/python3
import json, os, subprocess, sys
args = json.load(sys.stdin)
def c9(op, path, data):
    p = subprocess.run(["/usr/bin/python3", "{CLIENT}"], pass_fds=(3,), text=True,
                       capture_output=True,
                       input=json.dumps({{"op": op, "path": path, "data": data}}))
    return (p.stdout + p.stderr).strip()
if args.get("broker"):       # name a broker on its own connection
    print(c9("write", "consent", "broker " + args["broker"]))
else:                        # call a confirm tool, "approved": true in its args
    base = "session/%s/agent/%s" % (os.environ["OLLIE_SESSION_ID"], os.environ["OLLIE_AGENT"])
    print(c9("rdwr", base + "/tools/guarded/call", json.dumps({{"approved": True}})))
"""


@pytest.fixture(scope="module")
def app():
    d = tools_dir()
    add_tool(d, "guarded", "#!/bin/sh\necho ran; cat\n", {"confirm": True, "readOnly": True})
    add_tool(d, "plain", "#!/bin/sh\ncat\n", {"readOnly": True})
    add_tool(d, "nester", NESTED, {"sandbox": "client9p"})
    a = AppThread([os.path.join(REPO, "data", "tools"), d], timeout=10).start()
    a.call(lambda: setattr(a.app.policy, "broker", None))     # the server has no broker
    yield a
    a.cleanup()
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture
def yes():
    b = Broker(True)
    yield b
    b.close()


@pytest.fixture
def no():
    b = Broker(False)
    yield b
    b.close()


def agent(c: Client, s: str, load: str = "guarded plain") -> str:
    c.mkdir(f"session/{s}")
    c.mkdir(f"session/{s}/agent/a")
    c.rdwr(f"session/{s}/agent/a/ctl", f"tool_load {load}".encode())
    return f"session/{s}/agent/a"


def test_the_operators_broker_says_why_it_is_asked():
    from toolsrv.cli.approve import format_request
    text = format_request({"tool": "guarded", "session": "s", "agent": "a", "cwd": "/w",
                           "args": {"approved": True}, "confirm": "confirm",
                           "principal": "uid:1000", "reach": "it runs in its sandbox"})
    assert text.startswith("confirmation request (the tool's .meta confirm, for uid:1000)")
    assert '"approved": true' in text and "if approved: it runs in its sandbox" in text


def test_the_meta_field_is_served_and_checked():
    from toolsrv.registry.metafile import MetaError, parse_meta
    assert parse_meta(b'{"confirm": true}').fields["confirm"] is True
    with pytest.raises(MetaError, match="confirm: must be a boolean, not a string"):
        parse_meta(b'{"confirm": "yes"}')


def test_without_a_broker_a_confirm_tool_never_runs(app):
    with Client.connect(app.addr) as c:
        d = agent(c, "c0")
        assert json.loads(c.read("tools/guarded/meta"))["confirm"] is True
        for args in (b"{}", b'{"approved": true}', b'{"_meta": {"principal": "x"}}'):
            with pytest.raises(ClientError) as e:
                c.rdwr(f"{d}/tools/guarded/call", args)
            assert e.value.ename.startswith("permission denied: confirm: guarded needs a "
                                            "person's yes: "), e.value.ename
        assert "ran" not in c.read(f"{d}/log").decode()
        assert c.rdwr(f"{d}/tools/plain/call", b'{"x": 1}') == b'{"x": 1}'
        assert c.read("consent") == b"broker none\n"


def test_the_connections_broker_says_yes_or_no(app, yes, no):
    with Client.connect(app.addr) as c, Client.connect(app.addr) as other:
        d = agent(c, "c1")
        c.write("consent", f"broker {no.path}".encode())
        with pytest.raises(ClientError) as e:
            c.rdwr(f"{d}/tools/guarded/call", b'{"approved": true}')
        assert "the test's broker said no" in e.value.ename
        assert no.asked[-1]["tool"] == "guarded"
        assert no.asked[-1]["args"] == {"approved": True}     # shown, and no yes

        c.write("consent", f"broker {yes.path}".encode())
        assert c.read("consent") == f"broker {yes.path}\n".encode()
        assert c.rdwr(f"{d}/tools/guarded/call", b'{"n": 7}') == b'ran\n{"n": 7}'
        asked = yes.asked[-1]
        assert (asked["tool"], asked["args"], asked["confirm"]) == ("guarded", {"n": 7},
                                                                   "confirm")
        assert "runs in its sandbox" in asked["reach"]
        n = len(yes.asked)
        assert c.rdwr(f"{d}/tools/plain/call", b"{}") == b"{}"      # not asked
        assert len(yes.asked) == n

        o = agent(other, "c1b")     # another connection: the server's broker (none)
        with pytest.raises(ClientError) as e:
            other.rdwr(f"{o}/tools/guarded/call", b"{}")
        assert e.value.ename.startswith("permission denied: confirm: guarded")
        c.write("consent", b"broker none")
        with pytest.raises(ClientError):
            c.rdwr(f"{d}/tools/guarded/call", b"{}")


def test_a_nested_call_is_not_confirmed_by_its_parents_broker(app, yes):
    with Client.connect(app.addr) as c:
        d = agent(c, "c2", "guarded nester client_9p")
        c.write("consent", f"broker {yes.path}".encode())
        n = len(yes.asked)
        out = c.rdwr(f"{d}/tools/nester/call", b"{}").decode()
        assert "permission denied: confirm: guarded needs a person's yes" in out, out
        out = c.rdwr(f"{d}/tools/nester/call",
                     json.dumps({"broker": yes.path}).encode()).decode()
        assert "permission denied: consent is outside this tool's scope" in out, out
        assert c.read("consent") == f"broker {yes.path}\n".encode()
        assert all(r["tool"] != "guarded" for r in yes.asked[n:])
        assert 'call guarded {"approved": true} -> permission denied: confirm' in \
            c.read(f"{d}/log").decode()


def test_an_elevated_confirm_call_is_asked_once_by_the_runner(app, no):
    with Client.connect(app.addr) as c:
        d = agent(c, "c3")
        c.write("consent", f"broker {no.path}".encode())
        with pytest.raises(ClientError) as e:
            c.rdwr(f"{d}/tools/guarded/call", b'{"elevated": true}')
        assert e.value.ename.startswith("elevation denied (permission denied): the test's "
                                        "broker said no"), e.value.ename
        assert len(no.asked) == 1 and "leaves Landlock" in no.asked[0]["reach"]


def test_only_a_broker_is_named_and_only_by_the_operator(app):
    short = tempfile.mkdtemp(prefix="c.", dir="/tmp")      # the reason fits the Rerror
    with Client.connect(app.addr) as c:
        for word, want in ((b"broker relative.sock", "not an absolute path"),
                           (f"broker {short}/b".encode(), "b.token: no such file"),
                           (b"hello", "say broker PATH")):
            with pytest.raises(ClientError) as e:
                c.write("consent", word)
            assert want in e.value.ename, e.value.ename
        assert c.read("consent") == b"broker none\n"
    os.rmdir(short)


NOBODY = 65534
AS_NOBODY = BARE_9P + r"""
rpc(110, struct.pack("<IIH", 1, 2, 1) + s("consent"))
try:
    rpc(112, struct.pack("<IB", 2, 1))
    data = ("broker " + sys.argv[2]).encode()
    rpc(118, struct.pack("<IQI", 2, 0, len(data)) + data)
    print("ok")
except RuntimeError as e:
    print(e)
"""


@pytest.mark.skipif(os.geteuid() != 0, reason="needs another uid to act as (root's setuid)")
def test_another_uid_may_not_name_a_broker(tools_for_nobody, yes):
    import subprocess
    app = tools_for_nobody
    r = subprocess.run(["/usr/bin/python3", "-I", "-c", AS_NOBODY, app.addr[len("unix!"):],
                        yes.path], user=NOBODY, group=NOBODY, capture_output=True,
                       text=True, timeout=60, cwd="/")
    assert r.stdout.startswith("permission denied: consent: only the server's own uid"), \
        (r.stdout, r.stderr)


@pytest.fixture
def tools_for_nobody():
    d = tools_dir()
    add_tool(d, "guarded", "#!/bin/sh\ncat\n", {"confirm": True})
    a = AppThread([d], allow_uids=[NOBODY]).start()
    path = a.addr[len("unix!"):]
    os.chmod(a.tmp, 0o711)
    os.chmod(os.path.dirname(path), 0o711)
    os.chmod(path, 0o666)
    yield a
    a.cleanup()
    shutil.rmtree(d, ignore_errors=True)
