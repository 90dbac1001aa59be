"""What a newcomer's `toolsrv serve` says (issue 46, 7 and 13): a second server on an
address already served is told of the address clash first, with the pid and the fix (it
was refused over its state directory, with advice that then failed on the address); and
the log keeps `connected`, `attach` and `hung up` for -v (three lines per CLI command)."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from serverhelpers import ServeProcess
from toolsrv.cli.client import Client


@pytest.fixture
def home():
    h = tempfile.mkdtemp(prefix="serve-home.", dir="/tmp")
    yield h
    shutil.rmtree(h, ignore_errors=True)


def serve(home: str, *argv: str) -> subprocess.CompletedProcess:
    env = dict(os.environ, HOME=home, XDG_STATE_HOME=os.path.join(home, "xdg"))
    env.pop("OLLIE_TOOLS_PATH", None)
    return subprocess.run([sys.executable, "-m", "toolsrv", "serve", *argv], cwd=home,
                          env=env, capture_output=True, text=True, timeout=60)


def stopped(s: ServeProcess) -> str:
    s.p.terminate()
    s.p.wait(30)
    return s.output()


def test_a_second_server_on_a_served_address_is_told_the_clash_first(home):
    first = ServeProcess(home, ["--no-warm"], "first.log")
    try:
        for more in ([], ["--no-state"]):
            p = serve(home, "-a", first.addr, "--no-warm", *more)
            assert p.returncode == 1
            assert p.stderr.strip() == (
                f"toolsrv: {first.addr}: address already in use: pid {first.p.pid} (a "
                "toolsrv serve?) listens there; stop it, or serve this one at another "
                "address (-a unix!DIR/toolsrv, or another $NAMESPACE)"), p.stderr
        with Client.connect(first.addr) as c:     # the first one is untouched
            assert c.read("revision")
    finally:
        stopped(first)


@pytest.mark.parametrize("verbose", [False, True])
def test_connections_are_logged_under_v_only(home, verbose):
    s = ServeProcess(home, ["--no-warm", "--no-state"] + (["-v"] if verbose else []),
                     "serve.log")
    try:
        for _ in range(3):
            with Client.connect(s.addr) as c:
                c.read("revision")
    finally:
        out = stopped(s)
    seen = [w for w in (": connected: ", "attach: conn ", ": hung up") if w in out]
    assert seen == ([": connected: ", "attach: conn ", ": hung up"] if verbose else []), out


def test_a_tcp_address_served_already_is_said_first(home):
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    tcp = f"tcp!127.0.0.1!{port}"
    first = ServeProcess(home, ["--no-warm", "-a", tcp], "first.log")
    try:
        p = serve(home, "-a", tcp, "--no-warm")
        assert p.returncode == 1
        assert p.stderr.strip().splitlines()[-1] == (   # after the warning: no secret
            f"toolsrv: {tcp}: address already in use: a server listens there; stop it, or "
            "serve this one at another address (-a tcp!HOST!PORT)"), p.stderr
    finally:
        stopped(first)
