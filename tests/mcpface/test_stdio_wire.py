"""The face's stdio wire (toolsrv/mcp/stdio.py): the SDK's transport given the event loop's
own pipes instead of worker threads (issue 33 item 3).  What the SDK's transport promised
must still hold: a frame split across reads, a message far larger than a pipe, a stray
write to fd 1 never tearing a frame, end of file ending the face; and stdin that the loop
cannot watch (a regular file) falls back to the SDK's own transport."""
from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import tempfile

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

from mcphelpers import FACE, RAW_INIT, env, raw_initialize, raw_reply, raw_rpc  # noqa: E402
from toolsrv.mcp.stdio import LinesIn  # noqa: E402



def test_lines_are_whole_however_the_bytes_arrive():
    async def go():
        r = asyncio.StreamReader(limit=1 << 20)
        for chunk in (b'{"a"', b': 1}\n{"b": 2', b"}\n", b'{"c": 3}'):   # last: no newline
            r.feed_data(chunk)
        r.feed_eof()
        return [line async for line in LinesIn(r)]
    assert asyncio.run(go()) == ['{"a": 1}\n', '{"b": 2}\n', '{"c": 3}']


def test_a_line_past_the_limit_ends_the_stream():
    async def go():
        r = asyncio.StreamReader(limit=16)
        r.feed_data(b"x" * 64)
        return [line async for line in LinesIn(r)]
    assert asyncio.run(go()) == []


def face(server, stdin):
    return subprocess.Popen([*FACE, "-a", server.addr], stdin=stdin, stdout=subprocess.PIPE,
                            stderr=subprocess.DEVNULL, env=env(), cwd=tempfile.gettempdir())


def test_a_large_message_through_the_pipes(server):
    p = face(server, subprocess.PIPE)
    try:
        raw_initialize(p)
        big = "é" * 300_000                  # 600 KB of UTF-8: many pipe buffers each way
        raw_rpc(p, {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "echo", "arguments": {"big": big}}})
        r = raw_reply(p, 2)
        assert r["result"]["isError"] is False
        assert json.loads(r["result"]["content"][0]["text"]) == {"big": big}
    finally:
        p.stdin.close()
        assert p.wait(30) == 0                    # end of file on stdin ends the face
        p.stdout.close()


def test_fd_0_and_1_point_away_from_the_wire_while_it_serves(server, tmp_path):
    """A stray write to fd 1 (a handler's print, a child's output) lands in stderr's file and
    a read of fd 0 gets end of file: only frames are on the pipes."""
    err = open(tmp_path / "stderr", "wb")
    p = subprocess.Popen([*FACE, "-a", server.addr], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=err, env=env(),
                         cwd=tempfile.gettempdir())
    try:
        raw_initialize(p)
        fds = {n: os.readlink(f"/proc/{p.pid}/fd/{n}") for n in (0, 1, 2)}
        assert fds[0] == "/dev/null" and fds[1] == fds[2] == str(tmp_path / "stderr"), fds
        raw_rpc(p, {"jsonrpc": "2.0", "id": 3, "method": "tools/list"})
        assert "tools" in raw_reply(p, 3)["result"]
    finally:
        p.stdin.close()
        p.wait(30)
        p.stdout.close()
        err.close()


def test_a_file_as_stdin_falls_back_to_the_sdks_transport(server, tmp_path):
    """The loop cannot watch a regular file: the SDK's own transport reads it, and the face
    answers (what follows end of file is the SDK's: calls still open are closed)."""
    requests = tmp_path / "requests.jsonl"
    requests.write_text(json.dumps(RAW_INIT) + "\n")
    with open(requests, "rb") as f:
        p = face(server, f)
        try:
            assert raw_reply(p, 1)["result"]["serverInfo"]["name"]
        finally:
            assert p.wait(30) == 0
            p.stdout.close()


def test_dev_null_as_stdin_ends_the_face_at_once_and_quietly(server):
    """/dev/null is a character device that epoll refuses (EPERM): the loop's pipe
    transport would only log that and leave the face waiting forever, so it goes to the
    SDK's transport, which reads end of file at once.  Nothing on stderr but the face's
    own words: no traceback, and no warning of the SDK's (the roots capability it warns
    about is deprecated in the 2026 era only)."""
    p = subprocess.Popen([*FACE, "-a", server.addr], stdin=subprocess.DEVNULL,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env(),
                         cwd=tempfile.gettempdir())
    try:
        out, err = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, err = p.communicate()
        raise AssertionError(f"the face did not end at end of file: {err.decode()!r}")
    assert p.returncode == 0, err.decode()
    assert out == b""
    assert b"Traceback" not in err and b"Warning" not in err, err.decode()


def test_watchable_asks_the_kernel():
    from toolsrv.mcp.stdio import _watchable
    r, w = os.pipe()
    fd = os.open(os.devnull, os.O_RDONLY)
    try:
        assert _watchable(r) and _watchable(w)
        assert not _watchable(fd)                     # a character device epoll refuses
        with tempfile.TemporaryFile() as f:
            assert not _watchable(f.fileno())         # a regular file
    finally:
        for x in (r, w, fd):
            os.close(x)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_ends_the_face_while_the_client_keeps_stdin_open(server, sig):
    """The transport's stdin reader waits for a line the client never sends: a signal
    cancels it along with the face, which ends with status 0 (it waited for ever)."""
    p = subprocess.Popen([*FACE, "-a", server.addr], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env(),
                         cwd=tempfile.gettempdir())
    try:
        raw_initialize(p)                  # serving: its signal handler is in place
        p.send_signal(sig)
        assert p.wait(60) == 0
        assert b"Traceback" not in p.stderr.read()
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
        p.stdin.close()
        p.stdout.close()
        p.stderr.close()


def test_a_tools_name_no_tool_has_is_said_on_stderr(server):
    """--tools ehco (a typo) listed nothing, and said nothing: the face now says which
    name matches no tool, and the closest ones; a name that matches says nothing."""
    p = subprocess.run([*FACE, "-a", server.addr, "--tools", "ehco,echo"],
                       stdin=subprocess.DEVNULL, capture_output=True, env=env(),
                       cwd=tempfile.gettempdir(), timeout=60)
    err = p.stderr.decode()
    assert p.returncode == 0, err
    assert "toolsrv mcp: --tools ehco: no such tool in the registry" in err, err
    assert "the closest: echo" in err and "--tools echo:" not in err, err
