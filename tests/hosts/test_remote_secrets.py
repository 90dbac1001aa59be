"""A remote host's tools use the remote's secrets, never the front's (issue 50.1): the
front reads no secret for a remote tool and sends no value; the remote reads its own for
its run, and its output comes back redacted there.  The remote is a real `toolsrv serve`
with a home of its own; the front a whole server holding a value of the same name."""
from __future__ import annotations

import json
import os
import tempfile

import pytest

from toolsrv.cli.client import Client, ClientError

from apphelpers import AppThread, add_tool, tools_dir
from serverhelpers import stop_clean
from hostshelpers import Server, wait_for

FRONT_VALUE = "front-" + os.urandom(8).hex()
REMOTE_VALUE = "remote-" + os.urandom(8).hex()
SHOW = ("""#!/bin/sh
echo "plain: $HOST_TOKEN reversed: $(printf '%s' "$HOST_TOKEN" | rev)"
""", {"secrets": ["HOST_TOKEN"], "description": "shows its token"})
LACKS = ("#!/bin/sh\necho never\n", {"secrets": ["ONLY_FRONT"], "description": "needs one"})


def put(home: str, name: str, value: str) -> str:
    d = os.path.join(home, ".config", "ollie", "secrets")
    os.makedirs(d, mode=0o700, exist_ok=True)
    os.chmod(d, 0o700)
    p = os.path.join(d, name)
    with open(p, "w") as f:
        f.write(value + "\n")
    os.chmod(p, 0o600)
    return d


@pytest.fixture(scope="module")
def hosts():
    remote = Server({"show": SHOW, "lacks": LACKS})
    put(remote.home, "HOST_TOKEN", REMOTE_VALUE)
    remote.start()
    home = tempfile.mkdtemp(prefix="fronthome.", dir="/tmp")
    old = os.environ.get("HOME")
    os.environ["HOME"] = home
    front_dir = put(home, "HOST_TOKEN", FRONT_VALUE)
    put(home, "ONLY_FRONT", FRONT_VALUE)
    d = tools_dir()
    add_tool(d, "local", SHOW[0], SHOW[1])
    front = AppThread([d], imports=[f"far={remote.addr}"]).start()
    c = Client.connect(front.addr)
    assert wait_for(lambda: b"far.show" in c.read("tools/index")), c.read("tools/errors")
    yield c, remote, front_dir
    c.close()
    stop_clean(front)
    remote.cleanup()
    os.environ["HOME"] = old or "/root"


def test_the_remote_run_has_the_remotes_value_and_the_front_sends_none(hosts):
    c, remote, front_dir = hosts
    c.mkdir("session/rs")
    c.mkdir("session/rs/agent/a")
    base = "session/rs/agent/a"
    c.write(f"{base}/ctl", b"tool_load far.show far.lacks local\n")
    got = c.rdwr(f"{base}/tools/far.show/call", b"{}")
    assert got == f"plain: [secret HOST_TOKEN] reversed: {REMOTE_VALUE[::-1]}\n".encode()
    here = c.rdwr(f"{base}/tools/local/call", b"{}")      # the same tool run here
    assert here == f"plain: [secret HOST_TOKEN] reversed: {FRONT_VALUE[::-1]}\n".encode()
    with pytest.raises(ClientError) as e:      # a secret only the front has: not sent
        c.rdwr(f"{base}/tools/far.lacks/call", b"{}")
    log = c.read(f"{base}/log").decode()
    assert "secret ONLY_FRONT" in str(e.value) and "no such file or directory" in str(e.value)
    assert front_dir not in log and os.path.join(remote.home, ".config") in log, log
    everything = log + got.decode() + c.read(f"{base}/tools/far.show/out").decode()
    for v in (FRONT_VALUE, FRONT_VALUE[::-1], REMOTE_VALUE):
        assert v not in everything
    meta = json.loads(c.read("tools/far.show/meta"))
    assert "secrets" not in meta.get("extra", {})
