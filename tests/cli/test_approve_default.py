"""`elevated: true` meets a broker without being told where (issue 46, 11): `toolsrv serve`
and `toolsrv approve` follow one rule for the broker's socket ($OLLIE_BYPASS_SOCKET, else
the seeds' $OLLIE_ELEVATE_SOCKET, else $NAMESPACE/approve.sock); the two variables naming
different sockets is refused loudly by both; with no broker there, the error names
`toolsrv approve`."""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest

from apphelpers import AppThread, add_tool, tools_dir
from toolsrv.cli.client import Client, ClientError
from toolsrv.run.elevation import broker_socket


def test_one_rule_for_the_socket():
    assert broker_socket({}, "/ns") == "/ns/approve.sock"
    assert broker_socket({"OLLIE_ELEVATE_SOCKET": "/s/e.sock"}, "/ns") == "/s/e.sock"
    assert broker_socket({"OLLIE_BYPASS_SOCKET": "/s/b.sock"}, "/ns") == "/s/b.sock"
    assert broker_socket({"OLLIE_BYPASS_SOCKET": "/s/b.sock",
                          "OLLIE_ELEVATE_SOCKET": "/s/b.sock"}, "/ns") == "/s/b.sock"
    with pytest.raises(ValueError, match=r"^OLLIE_BYPASS_SOCKET=/s/b.sock and "
                       r"OLLIE_ELEVATE_SOCKET=/s/e.sock name two approval brokers' sockets"):
        broker_socket({"OLLIE_BYPASS_SOCKET": "/s/b.sock",
                       "OLLIE_ELEVATE_SOCKET": "/s/e.sock"}, "/ns")


@pytest.fixture
def place(monkeypatch):
    ns = tempfile.mkdtemp(prefix="ns.", dir="/tmp")
    d = tools_dir()
    add_tool(d, "up", "#!/bin/sh\necho up\n")
    for v in ("OLLIE_BYPASS_SOCKET", "OLLIE_ELEVATE_SOCKET", "TOOLSRV_ADDR"):
        monkeypatch.delenv(v, raising=False)
    monkeypatch.setenv("NAMESPACE", ns)
    yield ns, d
    shutil.rmtree(ns, ignore_errors=True)
    shutil.rmtree(d, ignore_errors=True)


def approve(*argv: str) -> subprocess.Popen:
    """`toolsrv approve ARGS` in this environment, once it says it listens."""
    p = subprocess.Popen([sys.executable, "-m", "toolsrv", "approve", *argv],
                         stderr=subprocess.PIPE, text=True, cwd="/")
    assert p.stderr is not None and "listening" in p.stderr.readline()
    return p


def elevated_up(app: AppThread) -> bytes:
    with Client.connect(app.addr) as c:
        c.mkdir("session/el")
        c.mkdir("session/el/agent/a")
        c.rdwr("session/el/agent/a/ctl", b"tool_load up")
        return c.rdwr("session/el/agent/a/tools/up/call", b'{"elevated": true}')


def stop(p: subprocess.Popen) -> None:
    p.terminate()
    p.wait(10)


@pytest.mark.parametrize("how", ["default", "seeds"])
def test_serve_and_approve_meet(place, monkeypatch, how):
    ns, d = place
    broker = approve("--allow", "up") if how == "default" else \
        approve("--allow", "up", "--socket", os.path.join(ns, "elsewhere", "b.sock"))
    if how == "seeds":      # the seeds' name for the variable is honoured
        monkeypatch.setenv("OLLIE_ELEVATE_SOCKET", os.path.join(ns, "elsewhere", "b.sock"))
    try:
        app = AppThread([d]).start()
        try:
            assert elevated_up(app) == b"up\n"
        finally:
            app.cleanup()
    finally:
        stop(broker)


def test_no_broker_names_toolsrv_approve(place):
    ns, d = place
    app = AppThread([d]).start()
    try:
        with pytest.raises(ClientError) as e:
            elevated_up(app)
        assert str(e.value).startswith("elevation denied (permission denied): ")
        assert "toolsrv approve" in str(e.value) and f"{ns}/approve.sock" in str(e.value)
    finally:
        app.cleanup()


def test_the_two_variables_disagreeing_is_refused_by_both(place, monkeypatch):
    ns, d = place
    monkeypatch.setenv("OLLIE_BYPASS_SOCKET", os.path.join(ns, "b.sock"))
    monkeypatch.setenv("OLLIE_ELEVATE_SOCKET", os.path.join(ns, "e.sock"))
    p = subprocess.run([sys.executable, "-m", "toolsrv", "approve"], capture_output=True,
                       text=True, timeout=30, cwd="/")
    assert p.returncode == 1 and p.stderr.startswith(
        f"toolsrv approve: OLLIE_BYPASS_SOCKET={ns}/b.sock and OLLIE_ELEVATE_SOCKET="
        f"{ns}/e.sock name two approval brokers' sockets"), p.stderr
    with pytest.raises(ValueError, match="name two approval brokers' sockets"):
        AppThread([d]).start()
