"""What a shell user sees of an error, through 9pfuse, and what the log keeps.

9pfuse gives a shell only an errno, chosen by the words of the Rerror
(`errors.errno_for` is its table), and loses the errors of a clunk.  So a call
must fail on a Twrite where it can, with toolsrv's own word deciding the errno,
and the agent's log must hold the whole reason.  Driven by the independent
python-9p client against the whole server; the tools are real processes.
"""
from __future__ import annotations

import errno
import json
import re

import pytest
from py9p import ORDWR, OWRITE, RemoteError

from apphelpers import AppThread, add_tool, tools_dir
from py9phelpers import _fids, agent, connect, read, rdwr
from toolsrv.errors import defuse, errno_for

COMPLAIN = """\
#!/usr/bin/env python3
import json, sys
sys.stderr.write("warming up\\n" + json.load(sys.stdin)["say"] + "\\n")
sys.exit(1)
"""


@pytest.fixture(scope="module")
def srv():
    d = tools_dir()
    add_tool(d, "complain", COMPLAIN)
    add_tool(d, "echo", "#!/bin/sh\nexec cat\n", {"readOnly": True})
    add_tool(d, "short", "#!/bin/sh\nexec cat\n", {"args": {
        "type": "object", "properties": {"path": {"type": "string", "maxLength": 5}}}})
    app = AppThread([d], timeout=20).start()
    yield app
    app.cleanup()


def last_log_line(c, a: str) -> str:
    return read(c, a + "/log").decode().splitlines()[-1]


def full_log(c, a: str) -> str:
    f = next(_fids)
    c.walk(0, f, a + "/log")
    c.open(f, 0)
    try:
        out, off = b"", 0
        while chunk := c.read(f, offset=off):
            out, off = out + chunk, off + len(chunk)
        return out.decode()
    finally:
        c.clunk(f)


SAYINGS = ["file_read: no such file: nope.txt", "cat: /etc/shadow: Permission denied",
           "mkdir: out: File exists", "grep: pattern not found", "Operation not permitted",
           "Access denied", "feature not implemented", "the file does not exist"]


def test_a_failing_tools_words_do_not_choose_the_errno(srv):
    """Item 7 of issue 21: the tool said "no such file" and the shell got ENOENT, where
    toolsrv(4) documents EIO for a failed run.  9pfuse takes the first entry of its table
    found anywhere in the string (not the first word of the string), so toolsrv's word
    first is not enough: the tool's words that would outrank "input/output" are
    hyphenated in the Rerror, and stay as written in err and log."""
    with connect(srv) as c:
        a = agent(c, "words", "a", "complain")
        for say in SAYINGS:
            with pytest.raises(RemoteError) as e:
                rdwr(c, a + "/tools/complain/call", json.dumps({"say": say}).encode())
            msg = str(e.value.args[0] if e.value.args else e.value)
            assert msg.startswith("exit 1 (input/output error): "), msg
            assert errno_for(msg) == errno.EIO, (say, msg, errno.errorcode[errno_for(msg)])
            assert read(c, a + "/tools/complain/err").decode().endswith(say + "\n")
            assert last_log_line(c, a).endswith(f"exit 1 (input/output error): {say}")
        with pytest.raises(RemoteError, match=r"^exit 1 \(input/output error\): file_read: "
                                              + re.escape(defuse("no such file: nope.txt"))
                                              + "$"):
            rdwr(c, a + "/tools/complain/call", json.dumps({"say": SAYINGS[0]}).encode())


def test_the_log_holds_the_whole_reason_the_rerror_cuts(srv):
    """Item 4 of issue 21: the log held the Rerror's 128-byte cut."""
    with connect(srv) as c:
        a = agent(c, "whole", "a", "complain", "short")
        say = "client_9p: read session/x/sandbox: " + "very " * 60 + "outside this scope"
        with pytest.raises(RemoteError) as e:
            rdwr(c, a + "/tools/complain/call", json.dumps({"say": say}).encode())
        assert last_log_line(c, a).endswith(f": {say}")
        msg = str(e.value)
        assert len(msg.encode()) < 128 and " ... " in msg, msg      # its middle taken out
        assert msg.endswith(" scope") and "session/x/sandbox" in msg
        long = "y" * 300
        # "too long" defused in the Rerror (errors.defuse): "(invalid argument)" decides, EINVAL
        with pytest.raises(RemoteError, match=r"^invalid args: path: 'yyy.*\.\.\.yyy.*' is too "
                                              "\u2060long \\(invalid argument\\)$"):
            rdwr(c, a + "/tools/short/call", json.dumps({"path": long}).encode())
        assert f"-> invalid args: path: '{long}' is too long (invalid argument)" in \
            last_log_line(c, a)
        name = "x" * 120                              # a legal name, too long for ERRMAX
        with pytest.raises(RemoteError, match=r"^tool_load: no such tool: xxx+\.\.\.x+$"):
            rdwr(c, a + "/ctl", f"tool_load {name}".encode())
        assert last_log_line(c, a).endswith(f"-> error: tool_load: no such tool: {name}")


def test_a_second_write_on_a_used_call_fid_is_logged(srv):
    """Item 4 of issue 21: the EBUSY of a second write left no line in the log."""
    with connect(srv) as c:
        a = agent(c, "again", "a", "echo")
        f = next(_fids)
        c.walk(0, f, a + "/tools/echo/call")
        c.open(f, ORDWR)
        c.write(f, b'{"n": 1}')
        assert c.read(f) == b'{"n": 1}'
        with pytest.raises(RemoteError, match=r"\(in use\)$") as e:
            c.write(f, b'{"n": 2}')
        assert errno_for(str(e.value)) == errno.EBUSY
        c.clunk(f)
        assert last_log_line(c, a).endswith(
            "call echo -> call: already made on this open file; open call again (in use)")
        assert read(c, a + "/tools/echo/status").startswith(b"ok ")   # still that call's


def test_echo_of_half_a_value_fails_on_its_write(srv):
    """Item 5 of issue 21: `echo '{"a": ' > call` returned 0 and the error reached only
    status and log (9pfuse drops the clunk's error).  A Twrite that ends a line and is
    shorter than 9pfuse's 4 KiB pieces is a whole write(2): the value cannot continue."""
    with connect(srv) as c:
        a = agent(c, "half", "a", "echo")
        f = next(_fids)
        c.walk(0, f, a + "/tools/echo/call")
        c.open(f, OWRITE | 0x10)                      # 9pfuse's open for echo >: OTRUNC
        want = "invalid args: incomplete JSON at end of line: '{\"a\": \\n' (invalid argument)"
        with pytest.raises(RemoteError, match=f"^{re.escape(want)}$") as e:
            c.write(f, b'{"a": \n')
        assert errno_for(str(e.value)) == errno.EINVAL
        c.clunk(f)
        assert read(c, a + "/tools/echo/status").startswith(
            b"invalid: invalid args: incomplete JSON at end of line")
        log = full_log(c, a)
        assert "call echo -> invalid args: incomplete JSON at end of line" in log
        assert "discarded at close" not in log        # reported once, on the write


def test_values_in_several_writes_still_arrive(srv):
    """The rule leaves alone what can continue: a piece of 4 KiB (9pfuse's largest, so
    maybe not the last of its write(2)) that ends in a newline, pieces without one, and a
    value completed on a line's end."""
    with connect(srv) as c:
        a = agent(c, "pieces", "a", "echo")
        value = "{" + " " * 4094 + "\n" + '"a": [1,\n2]}\n'      # 4 KiB first, then a tail
        f = next(_fids)
        c.walk(0, f, a + "/tools/echo/call")
        c.open(f, ORDWR)
        assert c.write(f, value[:4096].encode()) == 4096
        assert c.write(f, value[4096:].encode()) == len(value) - 4096
        assert json.loads(c.read(f)) == {"a": [1, 2]}
        c.clunk(f)
        f = next(_fids)
        c.walk(0, f, a + "/tools/echo/call")
        c.open(f, ORDWR)
        for piece in (b'{"b"', b": ", b'"c', b'"}\n'):
            c.write(f, piece)
        assert c.read(f) == b'{"b": "c"}'
        c.clunk(f)
