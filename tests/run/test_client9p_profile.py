"""Only a tool under a profile with `general.toolsrv: true` reaches the server:
it gets a connected socket as fd 3; the default profile gets nothing, and cannot
dial the server's socket either: as root the tools' uid cannot open it (0600); an ordinary
user's tools can (their uid is the server's), and the server turns them away (a peer that
descends from the launcher)."""
from __future__ import annotations

import shutil

import pytest

from toolsrv.cli.client import Client

from apphelpers import AppThread, add_tool, tools_dir

PROBE = """#!/usr/bin/python3
import os, socket, sys
fd = os.environ.get("TOOLSRV_FD")
print("fd", fd)
if fd:
    s = socket.socket(fileno=int(fd))
    s.sendall(bytes.fromhex("13000000" "64" "ffff" "00200000" "0600") + b"9P2000")
    print("reply", s.recv(100)[4])
addr = os.environ.get("TOOLSRV_ADDR", "")
s = socket.socket(socket.AF_UNIX)
try:
    s.connect(addr.split("!", 1)[1])
    s.sendall(bytes.fromhex("13000000" "64" "ffff" "00200000" "0600") + b"9P2000")
    reply = s.recv(100)
    print("dial refused" if not reply or reply[4] == 107 else "dialled", "by the server")
except OSError as e:
    print("dial refused", e.errno)
"""


@pytest.fixture(scope="module")
def app():
    d = tools_dir()
    add_tool(d, "probe_default", PROBE)
    add_tool(d, "probe_client", PROBE, {"sandbox": "client9p"})
    a = AppThread([d]).start()
    yield a
    a.cleanup()
    shutil.rmtree(d, ignore_errors=True)


def test_profiles(app):
    c = Client.connect(app.addr)
    c.mkdir("session/p")
    c.mkdir("session/p/agent/a")
    c.rdwr("session/p/agent/a/ctl", b"tool_load probe_default probe_client")
    out = c.rdwr("session/p/agent/a/tools/probe_default/call", b"{}").decode().splitlines()
    assert out[0] == "fd None"
    assert out[1].startswith("dial refused")           # EACCES: 0600 socket, 0700 dir
    out = c.rdwr("session/p/agent/a/tools/probe_client/call", b"{}").decode().splitlines()
    assert out[0] == "fd 3"
    assert out[1] == "reply 101"                        # Rversion from this very server
    assert out[2].startswith("dial refused")            # still no way to dial the socket
    c.close()
