"""Every bundled tool called through the server, as an agent would: success and
failure, under the real sandbox (tools run as nobody under Landlock)."""
from __future__ import annotations

import json
import os
import shutil
import time

import pytest

from toolsrv.cli.client import Client, ClientError

from apphelpers import AppThread

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
TOOLS = ["file_read", "file_write", "file_edit", "file_glob", "file_grep", "memory_remember",
         "memory_recall", "json_value", "system_logs", "client_9p"]


BUNDLED = os.path.join(REPO, "data", "tools")
PYTHON_RESIDENT = ["file_read", "file_write", "file_edit", "file_glob", "file_grep"]  # issue 33


def cold_copy(dest: str) -> str:
    """A tools directory, first on the path, of the resident Python tools with no .meta
    resident: each of their calls a cold (or warm) run."""
    os.mkdir(dest)
    for name in PYTHON_RESIDENT:
        for f in (name, name + ".py", name + "_paths.py"):  # file_grep's cmd runs its
            # file_grep.py, which imports file_grep_paths.py from its directory
            if os.path.exists(os.path.join(BUNDLED, f)):
                shutil.copy2(os.path.join(BUNDLED, f), dest)
        with open(os.path.join(BUNDLED, name + ".meta")) as f:
            meta = json.load(f)
        found = [d.pop("resident") for d in [meta, *meta.get("variants", [])] if "resident" in d]
        assert found and all(r["protocol"] == "python" for r in found), name
        with open(os.path.join(dest, name + ".meta"), "w") as f:
            json.dump(meta, f)
    return dest


@pytest.fixture(scope="module", params=["resident", "cold"])
def agent(request, tmp_path_factory):
    """An agent with every bundled tool loaded: as shipped (the Python file tools resident),
    or with those run cold; every test below must hold for both."""
    tools = [BUNDLED] if request.param == "resident" else \
        [cold_copy(str(tmp_path_factory.mktemp("cold") / "tools")), BUNDLED]
    app = AppThread(tools).start()
    c = Client.connect(app.addr)
    c.resident = request.param == "resident"
    c.mkdir("session/b")
    c.mkdir("session/b/agent/a")
    c.rdwr("session/b/agent/a/ctl", ("tool_load " + " ".join(TOOLS)).encode())

    def call(tool: str, args: dict) -> str:
        return c.rdwr(f"session/b/agent/a/tools/{tool}/call", json.dumps(args).encode()).decode()

    yield call, c
    c.close()
    app.cleanup()


def test_all_bundled_tools_load(agent):
    _, c = agent
    assert c.read("session/b/agent/a/ctl").decode().split() == TOOLS
    errors = c.read("tools/errors").decode().splitlines()
    if c.resident:
        assert errors == []
    else:        # the cold copies, first on the path, hide the bundled ones: said, not an error
        assert len(errors) == len(PYTHON_RESIDENT) and all("shadow" in e for e in errors), errors


def test_file_tools(agent):
    call, _ = agent
    assert "notes.txt" in call("file_write", {"path": "notes.txt", "content": "one\ntwo\nthree\n"})
    assert call("file_read", {"path": "notes.txt", "offset": 2, "limit": 1}).startswith("     2\ttwo")
    assert "1" in call("file_edit", {"path": "notes.txt", "old_string": "two", "new_string": "TWO"})
    assert "TWO" in call("file_read", {"path": "notes.txt"})
    assert call("file_glob", {"pattern": "*.txt"}).split() == ["notes.txt"]
    assert "notes.txt:3:three" in call("file_grep", {"pattern": "^th"})
    with pytest.raises(ClientError, match=r"^exit \d+ \(input/output error\): .*not found"):
        call("file_edit", {"path": "notes.txt", "old_string": "absent", "new_string": "x"})
    with pytest.raises(ClientError, match=r"^exit 1 \(input/output error\): file_read: no such file: "
                                          r"gone.txt"):
        call("file_read", {"path": "gone.txt"})
    with pytest.raises(ClientError, match=r"^invalid args: 'pattern' is a required property"):
        call("file_glob", {})
    _, c = agent
    for name in PYTHON_RESIDENT:       # each ran in its resident process, or each cold
        status = c.read(f"session/b/agent/a/tools/{name}/status").decode()
        assert ("\nresident up " in status) is c.resident, (name, status)


def test_file_read_refuses_a_fifo_in_the_cwd_at_once(agent):
    """Issue 20: file_read on a FIFO waited for a writer until the call's timeout."""
    call, c = agent
    fifo = os.path.join(c.read("session/b/cwd").decode().strip(), "fifo.p")
    os.mkfifo(fifo)
    try:
        t0 = time.monotonic()
        with pytest.raises(ClientError, match=r"^exit 1 \(input/output error\): file_read: not "
                                              r"a regular file: fifo\.p is a FIFO"):
            call("file_read", {"path": "fifo.p"})
        assert time.monotonic() - t0 < 10
    finally:
        os.unlink(fifo)


def test_file_tools_cannot_leave_the_sandbox(agent):
    call, _ = agent
    with pytest.raises(ClientError, match=r"^exit \d+ \(input/output error\): .*(ermission|denied)"):
        call("file_write", {"path": "/etc/toolsrv-escape", "content": "x"})
    with pytest.raises(ClientError, match=r"^exit \d+ \(input/output error\): "):
        call("file_read", {"path": "/root/.bashrc"})
    # a directory it may not list is said so, never "No files match"
    with pytest.raises(ClientError, match=r"^exit 1 \(input/output error\): file_glob: "
                                          r"permission denied: /etc \(outside the grants: "
                                          r"toolsrv sandbox check\)$"):
        call("file_glob", {"pattern": "/etc/*"})
    with pytest.raises(ClientError, match=r"file_glob: permission denied: \.\. \("):
        call("file_glob", {"pattern": "*", "path": ".."})


def test_memory_tools(agent):
    call, _ = agent
    assert call("memory_remember", {"note": "the build uses make", "tags": ["build"]})
    call("memory_remember", {"note": "deploys happen on fridays"})
    out = call("memory_recall", {"query": "build"})
    assert "the build uses make" in out and "fridays" not in out
    with pytest.raises(ClientError, match="invalid args"):
        call("memory_remember", {"note": ""})


def test_json_value(agent):
    call, _ = agent
    assert call("json_value", {"json": '{"items": [{"name": "a"}, {"name": "b"}]}',
                               "path": ".items[1].name"}).strip() == "b"
    with pytest.raises(ClientError, match=r"^exit \d+ \(input/output error\): "):
        call("json_value", {"json": "{not json", "path": ".a"})


def test_system_logs_answers_or_says_why(agent):
    call, _ = agent
    try:
        out = call("system_logs", {"lines": 5})
        assert isinstance(out, str)
    except ClientError as e:          # the default profile cannot read the journal here
        assert str(e).startswith("exit ") and "(input/output error)" in str(e)
        assert "journal" in str(e) or "syslog" in str(e) or "log" in str(e)
    with pytest.raises(ClientError, match="invalid args"):
        call("system_logs", {"lines": 0})


def test_client_9p_loads_a_tool_through_its_own_server(agent):
    call, c = agent
    index = call("client_9p", {"op": "read", "path": "tools/index"})
    assert index == c.read("tools/index").decode()
    out = call("client_9p", {"op": "rdwr", "path": "session/b/agent/a/ctl",
                             "data": "tool_unload json_value"})
    assert "json_value" not in out.split() and "file_read" in out.split()
    assert b"json_value" not in c.read("session/b/agent/a/ctl")
    with pytest.raises(ClientError, match=r"^exit 1 \(input/output error\): client_9p: rdwr "
                                          r"session/b/agent/a/ctl: tool_load: no such tool: nope"):
        call("client_9p", {"op": "rdwr", "path": "session/b/agent/a/ctl",
                           "data": "tool_load nope"})
    with pytest.raises(ClientError, match="invalid args"):
        call("client_9p", {"op": "chmod", "path": "x"})
    # its scope lets it wait for the registry: revwait read (at once), and written to
    rev = c.read("revision").decode()
    assert call("client_9p", {"op": "read", "path": "revwait"}) == rev
    assert call("client_9p", {"op": "rdwr", "path": "revwait", "data": "0"}) == rev
    with pytest.raises(ClientError, match="session/b/cwd is outside this tool's scope"):
        call("client_9p", {"op": "write", "path": "session/b/cwd", "data": "/"})
    c.rdwr("session/b/agent/a/ctl", b"tool_load json_value")
