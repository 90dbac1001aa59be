"""`toolsrv import-mcp` and the mcp protocol of resident tools (issue 17), against the real
`mcp-server-time` from PyPI (a test dependency) and a small SDK-less server
(tests/tools/fake_mcp.py) for what the real one cannot show: non-text content, a
cancelled call, a name toolsrv must map.  The imported tools are called through 9P under
a sandbox profile granting what import-mcp said the server needs, and nothing else.
"""
from __future__ import annotations

import re
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest
import yaml
from toolsrv.errors import defuse
from py9p import OWRITE, RemoteError

from apphelpers import AppThread, tools_dir
from py9phelpers import _fids, agent, connect, rdwr, read

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tools"))
from sandbox_support import default_dict, processes_with  # noqa: E402

HERE = Path(__file__).resolve().parents[1]
FAKE = str(HERE / "tools" / "fake_mcp.py")
TIME = shutil.which("mcp-server-time", path=os.path.dirname(sys.executable))
needs_time = pytest.mark.skipif(TIME is None, reason="mcp-server-time is not installed "
                                "(the test extra of setup.cfg installs it)")


HOME = tempfile.mkdtemp(prefix="import-home.", dir="/tmp")   # profiles go to its ~/.config


def import_mcp(*argv: str, home: str = HOME) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "toolsrv", "import-mcp", *argv],
                          capture_output=True, text=True, timeout=60,
                          env=dict(os.environ, HOME=home))


def granted(out: str) -> list[str]:
    lines = out.split("the sandbox profile must grant (rox) for this server to run:\n")
    return [ln.strip()[2:] for ln in lines[1].splitlines()] if len(lines) > 1 else []


# -------------------------------------------------------------- import-mcp alone

def test_import_writes_one_meta_per_tool_and_says_what_to_grant(tmp_path):
    p = import_mcp("--dir", str(tmp_path), "--prefix", "f.", "--no-profile", "--", FAKE)
    assert p.returncode == 0, p.stderr
    names = sorted(f.name for f in tmp_path.iterdir())
    assert names == ["f.echo.meta", "f.fail.meta", "f.image.meta", "f.sleep.meta",
                     "f.who_am_i.meta"]
    assert "note: tool 'who am/i' is named f.who_am_i" in p.stdout
    m = json.loads((tmp_path / "f.echo.meta").read_text())
    assert m["description"] == "Echo the text back."
    assert m["args"]["required"] == ["text"] and m["readOnly"] is True
    assert m["cmd"] == FAKE and m["resident"] == {"protocol": "mcp", "tool": "echo"}
    assert m["prompt"].startswith("## f.echo\n\nEcho the text back.\n\n**Args**\n- `text` "
                                  "(string, required)")
    assert json.loads((tmp_path / "f.who_am_i.meta").read_text())["resident"]["tool"] == \
        "who am/i"
    assert str(HERE / "tools") in granted(p.stdout)


def test_import_refuses_and_writes_nothing(tmp_path):
    assert import_mcp("--dir", str(tmp_path), "--", FAKE).returncode == 0
    before = {f.name: f.read_text() for f in tmp_path.iterdir()}
    (tmp_path / "echo.meta").write_text("{}")
    p = import_mcp("--dir", str(tmp_path), "--", FAKE)
    assert p.returncode == 1 and "file already exists (use --force" in p.stderr
    assert "nothing written" in p.stderr and (tmp_path / "echo.meta").read_text() == "{}"
    assert import_mcp("--dir", str(tmp_path), "--force", "--", FAKE).returncode == 0
    assert {f.name: f.read_text() for f in tmp_path.iterdir()} == before
    empty = tmp_path / "none"
    for argv, words in ((["sh", "-c", "echo hello; echo oops >&2"],
                         "is not an MCP server on stdio: not JSON-RPC: b'hello' "
                         "(its stderr: oops)"),
                        (["sh", "-c", "exit 3"], "is not an MCP server on stdio: EOF"),
                        (["/nonexistent/server"], "cannot start /nonexistent/server")):
        p = import_mcp("--dir", str(empty), "--timeout", "5", "--", *argv)
        assert p.returncode == 1 and words in p.stderr, p.stderr
        assert not empty.exists()


@needs_time
def test_import_of_the_real_time_server(tmp_path):
    p = import_mcp("--dir", str(tmp_path), "--prefix", "time.", "--no-profile", "--", TIME,
                   "--local-timezone", "UTC")
    assert p.returncode == 0, p.stderr
    assert "MCP server mcp-time" in p.stdout
    m = json.loads((tmp_path / "time.get_current_time.meta").read_text())
    assert m["cmd"] == f"exec {TIME} --local-timezone UTC"
    assert m["resident"] == {"protocol": "mcp", "tool": "get_current_time"}
    assert "timezone" in m["args"]["properties"]
    # the server's own annotations and outputSchema are kept (issue 29, items 6 and 7)
    assert (m["readOnly"], m["destructive"], m["idempotent"]) == (True, False, True)
    assert m["outputSchema"]["type"] == "object" and "datetime" in m["outputSchema"][
        "properties"]
    assert (tmp_path / "time.convert_time.meta").exists()
    assert os.path.dirname(os.path.dirname(TIME)) in granted(p.stdout)   # the virtualenv


# ------------------------------------------------------- through 9P, sandboxed

@pytest.fixture(scope="module")
def srv():
    d = tools_dir()
    grants: list[str] = []
    for argv in ([TIME, "--local-timezone", "UTC"] if TIME else None, [FAKE]):
        if argv is None:
            continue
        p = import_mcp("--dir", d, "--prefix", "time." if argv[0] == TIME else "",
                       "--no-profile", "--", *argv)
        assert p.returncode == 0, p.stderr
        grants += granted(p.stdout)
    home = tempfile.mkdtemp(prefix="home.", dir="/tmp")
    prof = default_dict()
    prof["filesystem"].setdefault("rox", []).extend(grants)
    prof["filesystem"].setdefault("rw", []).append(home + "/cancels")
    os.makedirs(home + "/cancels")
    os.chmod(home, 0o755)
    os.chmod(home + "/cancels", 0o777)
    prof.setdefault("env", []).append("FAKE_MCP_LOG")
    os.makedirs(f"{home}/.config/ollie/sandbox")
    with open(f"{home}/.config/ollie/sandbox/mcptest.yaml", "w") as f:
        yaml.safe_dump(prof, f)
    old = {k: os.environ.get(k) for k in ("HOME", "FAKE_MCP_LOG")}
    os.environ.update(HOME=home, FAKE_MCP_LOG=home + "/cancels/log")
    app = AppThread([d], timeout=10).start()
    app.home, app.tools = home, d
    yield app
    app.cleanup()
    for k, v in old.items():
        if v is None:
            os.environ.pop(k, None)
        else:
            os.environ[k] = v
    shutil.rmtree(home, ignore_errors=True)
    shutil.rmtree(d, ignore_errors=True)


def sandboxed(c, s: str, *tools: str) -> str:
    a = agent(c, s, "a", *tools)
    rdwr(c, f"session/{s}/sandbox", b"mcptest")
    return a


def call(c, a: str, tool: str, args: dict) -> bytes:
    return rdwr(c, f"{a}/tools/{tool}/call", json.dumps(args).encode())


def servers(path: str) -> list[int]:
    return processes_with(path)


@needs_time
def test_the_real_time_server_answers_through_9p_under_the_sandbox(srv):
    with connect(srv) as c:
        a = sandboxed(c, "t1", "time.get_current_time", "time.convert_time")
        out = json.loads(call(c, a, "time.get_current_time", {"timezone": "Europe/Paris"}))
        assert out["timezone"] == "Europe/Paris" and "datetime" in out
        conv = json.loads(call(c, a, "time.convert_time", {
            "source_timezone": "UTC", "time": "12:00", "target_timezone": "Asia/Tokyo"}))
        assert conv["target"]["datetime"].startswith(conv["source"]["datetime"][:10])
        assert "T21:00:00" in conv["target"]["datetime"]
        with pytest.raises(RemoteError, match="Invalid timezone"):
            call(c, a, "time.get_current_time", {"timezone": "Nowhere/Atlantis"})
        assert read(c, a + "/tools/time.get_current_time/status").startswith(b"error ")
        # the two .meta files name one command: one server process for the agent
        assert len(servers(f"{TIME}\0")) == 1
        status = read(c, a + "/tools/time.convert_time/status").decode().splitlines()
        assert status[1].startswith("resident up ") and status[1].endswith("3 calls")
        rdwr(c, a + "/ctl", b"tool_unload time.get_current_time time.convert_time")
        end = time.monotonic() + 15
        while servers(f"{TIME}\0") and time.monotonic() < end:
            time.sleep(0.02)
        assert not servers(f"{TIME}\0")


def test_text_other_content_errors_and_stderr(srv):
    with connect(srv) as c:
        a = sandboxed(c, "t2", "echo", "image", "fail", "who_am_i")
        text, token = call(c, a, "echo", {"text": "hi"}).split(b"\n")
        assert text == b"hi"
        assert call(c, a, "echo", {"text": "again"}).split(b"\n")[1] == token   # kept up
        assert read(c, a + "/tools/echo/err") == b"calling echo\n"
        assert json.loads(call(c, a, "image", {})) == {"content": [
            {"type": "image", "data": "aGk=", "mimeType": "image/png"}]}
        with pytest.raises(RemoteError, match="^" + re.escape(defuse("no such record: 42"))
                           + r" \(input/output error\)"):
            call(c, a, "fail", {})
        with pytest.raises(RemoteError, match="mcp error -32602: unknown tool who am/i"):
            call(c, a, "who_am_i", {})          # the fake server knows no such tool: an error
        with pytest.raises(RemoteError, match=r"invalid args: 'text' is a required"):
            call(c, a, "echo", {})              # the .meta's schema, checked by toolsrv


def test_a_calls_traceparent_reaches_the_imported_server(srv):
    """A call's `_meta.traceparent` (toolsrv(4)) is sent in the tools/call's `_meta` to
    the resident MCP server, which started once and has no $TRACEPARENT of the call."""
    tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
    with connect(srv) as c:
        a = sandboxed(c, "t4", "echo")
        out = call(c, a, "echo", {"text": "hi", "_meta": {"traceparent": tp}})
        assert out.split(b"\n")[-1] == f"trace {tp}".encode()
        assert len(call(c, a, "echo", {"text": "hi"}).split(b"\n")) == 2


def test_cancel_sends_notifications_cancelled_then_kills(srv):
    logf = srv.home + "/cancels/log"
    with connect(srv) as c:
        a = sandboxed(c, "t3", "sleep")
        others = set(servers(f"{FAKE}\0"))
        call(c, a, "sleep", {"t": 0})
        mine = set(servers(f"{FAKE}\0")) - others
        assert len(mine) == 1
        f = next(_fids)
        c.walk(0, f, a + "/tools/sleep/call")
        c.open(f, OWRITE)
        c.write(f, b'{"t": 3600}')
        c.clunk(f)
        end = time.monotonic() + 15
        while time.monotonic() < end and not read(c, a + "/tools/sleep/status").startswith(
                b"running"):
            time.sleep(0.02)
        rdwr(c, a + "/ctl", b"cancel sleep")
        while time.monotonic() < end and not os.path.exists(logf):
            time.sleep(0.02)
        got = [json.loads(ln) for ln in open(logf)]
        assert got and got[-1]["requestId"] == 3 and "cancel" in got[-1]["reason"]
        while time.monotonic() < end and any(os.path.exists(f"/proc/{p}") for p in mine):
            time.sleep(0.02)
        assert not any(os.path.exists(f"/proc/{p}") for p in mine)
        assert read(c, a + "/tools/sleep/status").startswith(b"killed")


HOSTILE = str(HERE / "tools" / "hostile_mcp.py")


def test_import_writes_only_what_the_registry_takes_and_says_why(tmp_path):
    """A description longer than a .meta may hold is cut (and said); a tool whose .meta
    would be refused (over 1 MiB) is not written, and the note says why; the others are;
    a server line past 16 MiB is refused by name, not read into memory without end."""
    out = tmp_path / "tools"
    p = subprocess.run([sys.executable, "-m", "toolsrv", "import-mcp", "--dir", str(out),
                        "--no-profile", "--", sys.executable, HOSTILE], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, HOME=HOME, MODE="big"))
    assert p.returncode == 0, p.stderr
    assert sorted(f.name for f in out.iterdir()) == ["fine.meta", "wordy.meta"]
    assert "note: tool 'wordy': its description is cut to 8192 of 100000 characters" \
        in p.stdout
    assert re.search(r"note: tool 'huge': not written: its \.meta would be refused "
                     r"\(too large: \d+ bytes, at most 1048576\)", p.stdout), p.stdout
    assert len(json.loads((out / "wordy.meta").read_text())["description"]) == 8192
    from toolsrv.registry.metafile import parse_meta
    for f in out.iterdir():
        parse_meta(f.read_bytes())           # the registry takes every file written
    p = subprocess.run([sys.executable, "-m", "toolsrv", "import-mcp", "--dir",
                        str(tmp_path / "none"), "--no-profile", "--", sys.executable,
                        HOSTILE], capture_output=True, text=True, timeout=60,
                       env=dict(os.environ, HOME=HOME, MODE="big", BIG_LINE=str(17 << 20)))
    assert p.returncode == 1 and "it sent a line longer than 16 MiB" in p.stderr, p.stderr
    assert not (tmp_path / "none").exists()
