"""Agents call tools through files, driven by the independent python-9p client.

The server is the whole thing (registry, Landlock runner, sessions) on a
thread; tools are real processes.  Nothing here asserts on timing: overlap
is shown by two calls meeting at a rendezvous, not by a stopwatch.
"""
from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from typing import Any, Iterator

import pytest
from py9p import OREAD, ORDWR, OWRITE, Client, RemoteError, Rflush, Rread, Tflush, Tread

from apphelpers import AppThread, add_tool, tools_dir
from py9phelpers import _fids, agent, connect, mkdir, rdwr, read

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "tools"))
from sandbox_support import processes_with  # noqa: E402

RENDEZVOUS = """\
#!/bin/sh
# writes <id>.started in the cwd, then waits for <peer>.started
input=$(cat)
id=$(echo "$input" | sed 's/.*"id": *"\\([^"]*\\)".*/\\1/')
peer=$(echo "$input" | sed 's/.*"peer": *"\\([^"]*\\)".*/\\1/')
: > "$id.started"
i=0
while [ $i -lt 15 ]; do
  [ -e "$peer.started" ] && { echo met; exit 0; }
  sleep 0.1; i=$((i+1))
done
echo alone
"""


@pytest.fixture(scope="module")
def srv():
    d = tools_dir()
    add_tool(d, "echo", "#!/bin/sh\ncat\n", {"readOnly": True})
    add_tool(d, "fail", "#!/bin/sh\necho partial\necho 'first problem' >&2\necho 'bad things happened' >&2\nexit 3\n")
    add_tool(d, "sleeper", "#!/bin/sh\nexec sleep \"$(sed 's/[^0-9.]//g')\"\n")
    # the same, warm (a fork of a warm python3): its sleep child carries the marker
    add_tool(d, "pysleeper", "#!/usr/bin/python3\nimport json, subprocess, sys, time\n"
             "t = json.load(sys.stdin)['t']\nsubprocess.Popen(['sleep', t])\n"
             "time.sleep(float(t))\n")
    add_tool(d, "typed", "#!/bin/sh\ncat\n", {"args": {
        "type": "object", "required": ["path"], "additionalProperties": False,
        "properties": {"path": {"type": "string"}, "n": {"type": "integer", "minimum": 1}}}})
    add_tool(d, "meet_ro", RENDEZVOUS, {"readOnly": True})
    add_tool(d, "meet_rw", RENDEZVOUS)
    app = AppThread([d], timeout=20).start()
    app.tools = d
    yield app
    app.cleanup()



def test_load_and_call_on_one_fid(srv):
    with connect(srv) as c:
        a = agent(c, "s1", "a", "echo")
        assert rdwr(c, a + "/tools/echo/call", b'{"x": [1, 2, "three"]}') == b'{"x": [1, 2, "three"]}'
        assert read(c, a + "/tools/echo/out") == b'{"x": [1, 2, "three"]}'
        assert read(c, a + "/tools/echo/status").startswith(b"ok ")
        schemas = json.loads(read(c, a + "/schemas"))
        assert [s["name"] for s in schemas] == ["echo"]
        assert schemas[0]["readOnly"] is True and schemas[0]["parameters"] == {"type": "object"}
        log = read(c, a + "/log").decode()
        assert "ctl tool_load echo -> ok" in log and "call echo" in log


def test_ctl_errors_name_what_is_wrong_and_apply_nothing(srv):
    with connect(srv) as c:
        a = agent(c, "s2", "a")
        with pytest.raises(RemoteError, match=r"^tool_load: no such tool: fiel_read$"):
            rdwr(c, a + "/ctl", b"tool_load echo fiel_read")
        with pytest.raises(RemoteError, match=r'^invalid command "tool_lod"; valid: tool_load, '
                                              r"tool_unload, cancel"):
            rdwr(c, a + "/ctl", b"tool_load echo\ntool_lod x\n")
        assert read(c, a + "/ctl") == b""            # nothing of those writes applied
        with pytest.raises(RemoteError, match="tool_unload: no such tool loaded: echo"):
            rdwr(c, a + "/ctl", b"tool_unload echo")
        with pytest.raises(RemoteError, match="missing tool name"):
            rdwr(c, a + "/ctl", b"tool_load")
        # several commands in one write, each line applied
        rdwr(c, a + "/ctl", b"tool_load echo fail\ntool_unload fail\n")
        assert read(c, a + "/ctl") == b"echo\n"
        assert "no such tool: fiel_read" in read(c, a + "/log").decode()


def test_call_errors(srv):
    with connect(srv) as c:
        a = agent(c, "s3", "a", "typed", "fail")
        with pytest.raises(RemoteError, match=r"^invalid args: 'path' is a required property"):
            rdwr(c, a + "/tools/typed/call", b"{}")
        with pytest.raises(RemoteError, match=r"^invalid args: n: 0 is less than the minimum of 1"):
            rdwr(c, a + "/tools/typed/call", b'{"path": "x", "n": 0}')
        with pytest.raises(RemoteError, match=r"^invalid args: line 1 column 2: Expecting"):
            rdwr(c, a + "/tools/typed/call", b"{]")
        with pytest.raises(RemoteError, match=r"^invalid args: must be a JSON object"):
            rdwr(c, a + "/tools/typed/call", b"[1]")
        assert read(c, a + "/tools/typed/status").startswith(b"invalid: invalid args: must be")
        with pytest.raises(RemoteError, match=r"^exit 3 \(input/output error\): bad things happened$"):
            rdwr(c, a + "/tools/fail/call", b"{}")
        assert read(c, a + "/tools/fail/out") == b"partial\n"
        assert read(c, a + "/tools/fail/err") == b"first problem\nbad things happened\n"
        assert read(c, a + "/tools/fail/status").startswith(b"exit 3 ")


def test_json_accumulates_across_writes_and_one_call_per_fid(srv):
    with connect(srv) as c:
        a = agent(c, "s4", "a", "typed")
        f = next(_fids)
        c.walk(0, f, a + "/tools/typed/call")
        c.open(f, ORDWR)
        assert c.read(f) == b""                  # 9p rdwr reads first: end of file at once
        assert c.write(f, b'{"pa', offset=0) == 4
        assert c.write(f, b'th": "a', offset=999) == 7   # offsets are ignored
        assert c.write(f, b'b"}') == 3
        assert c.read(f) == b'{"path": "ab"}'
        with pytest.raises(RemoteError, match="open call again"):
            c.write(f, b'{"path": "again"}')
        c.clunk(f)


def test_writer_hangs_up_result_still_reaches_out(srv):
    with connect(srv) as c:
        a = agent(c, "s5", "a", "sleeper")
    c = connect(srv)
    f = next(_fids)
    c.walk(0, f, a + "/tools/sleeper/call")
    c.open(f, OWRITE)
    c.write(f, b'{"t": "0.3"}')
    c.close()                                    # hang up at once, like `9p write`
    with connect(srv) as c2:
        assert read(c2, a + "/tools/sleeper/out") == b""   # waits for the end, then empty
        assert read(c2, a + "/tools/sleeper/status").startswith(b"ok ")


def _procs(marker: str) -> list[int]:
    return processes_with(marker)


def _wait_for(pred, what: str, limit: float = 15.0) -> None:
    end = time.monotonic() + limit
    while time.monotonic() < end:
        if pred():
            return
        time.sleep(0.02)
    raise AssertionError(f"gave up waiting for {what}")


@pytest.mark.parametrize("tool", ["sleeper", "pysleeper"])
def test_flush_of_the_read_kills_the_run(srv, tool):
    with connect(srv) as c:
        a = agent(c, f"s6{tool}", "a", tool)
        f = next(_fids)
        c.walk(0, f, a + f"/tools/{tool}/call")
        c.open(f, ORDWR)
        c.write(f, b'{"t": "61.125"}')
        _wait_for(lambda: _procs("61.125"), "the tool to start")
        box: dict = {}

        def blocked() -> None:
            try:
                box["r"] = c.rpc(Tread(fid=f, offset=0, count=100), Rread, tag=77)
            except RemoteError as e:
                box["e"] = str(e)

        t = threading.Thread(target=blocked)
        t.start()
        c.stat(f)
        assert isinstance(c.rpc(Tflush(oldtag=77), Rflush), Rflush)
        t.join(10)
        assert box == {"e": "interrupted"}
        _wait_for(lambda: not _procs("61.125"), "the run to die")
        _wait_for(lambda: read(c, a + f"/tools/{tool}/status").startswith(b"killed"), "status")


@pytest.mark.parametrize("tool", ["sleeper", "pysleeper"])
@pytest.mark.parametrize("how", ["cancel", "unload", "rm-agent", "rm-session"])
def test_cancel_unload_and_removal_kill_the_run(srv, how, tool):
    marker = {"cancel": "62.1", "unload": "62.2", "rm-agent": "62.3", "rm-session": "62.4"}[how]
    marker += "1" if tool == "pysleeper" else ""
    with connect(srv) as c:
        s = f"k{how}{tool}"
        a = agent(c, s, "a", tool)
        f = next(_fids)
        c.walk(0, f, a + f"/tools/{tool}/call")
        c.open(f, OWRITE)
        c.write(f, json.dumps({"t": marker + "25"}).encode())
        c.clunk(f)
        _wait_for(lambda: _procs(marker + "25"), "the tool to start")
        if how == "cancel":
            rdwr(c, a + "/ctl", f"cancel {tool}".encode())
        elif how == "unload":
            rdwr(c, a + "/ctl", f"tool_unload {tool}".encode())
        else:
            g = next(_fids)
            c.walk(0, g, a if how == "rm-agent" else f"session/{s}")
            c.remove(g)
        _wait_for(lambda: not _procs(marker + "25"), "the run to die")


@pytest.mark.parametrize("how", ["cancel", "unload", "rm-agent"])
def test_a_call_ended_by_cancel_reads_as_a_final_error_not_an_interruption(srv, how):
    """Issue 21: the reader of a cancelled call was answered `interrupted`, EINTR through
    9pfuse, which cat retries for ever.  A cancelled call is over: every read of its fid
    (the one waiting, and each retry) fails with an error 9pfuse maps to EIO."""
    import errno

    from toolsrv.errors import errno_for
    marker = {"cancel": "64.1", "unload": "64.2", "rm-agent": "64.3"}[how]
    with connect(srv) as c:
        s = f"final{how}"
        a = agent(c, s, "a", "sleeper")
        f = next(_fids)
        c.walk(0, f, a + "/tools/sleeper/call")
        c.open(f, ORDWR)
        c.write(f, json.dumps({"t": marker + "25"}).encode())
        _wait_for(lambda: _procs(marker + "25"), "the tool to start")
        box: dict = {}

        def blocked() -> None:
            try:
                box["r"] = c.rpc(Tread(fid=f, offset=0, count=100), Rread, tag=78)
            except RemoteError as e:
                box["e"] = str(e)

        t = threading.Thread(target=blocked)
        t.start()
        c.stat(f)                                  # the read is in flight
        with connect(srv) as c2:
            if how == "cancel":
                rdwr(c2, a + "/ctl", b"cancel sleeper")
            elif how == "unload":
                rdwr(c2, a + "/ctl", b"tool_unload sleeper")
            else:
                g = next(_fids)
                c2.walk(0, g, a)
                c2.remove(g)
        t.join(10)
        assert "e" in box, box
        assert errno_for(box["e"]) == errno.EIO, box["e"]
        for _ in range(2):                         # a retry gets the same final answer
            with pytest.raises(RemoteError) as e:
                c.read(f, offset=0)
            assert errno_for(str(e.value)) == errno.EIO, str(e.value)
        _wait_for(lambda: not _procs(marker + "25"), "the run to die")


def test_readonly_calls_overlap(srv):
    with connect(srv) as c:
        a = agent(c, "ro", "a", "meet_ro")
        res = _both(c, [(a, "meet_ro", "1", "2"), (a, "meet_ro", "2", "1")])
        assert res == [b"met\n", b"met\n"]


def test_calls_of_one_agent_run_one_at_a_time_in_order(srv):
    with connect(srv) as c:
        a = agent(c, "rw", "a", "meet_rw")
        res = _both(c, [(a, "meet_rw", "1", "2"), (a, "meet_rw", "2", "1")])
        # the first never saw the second start; the second found the first's mark
        assert res == [b"alone\n", b"met\n"]


def test_two_agents_do_not_wait_for_each_other(srv):
    with connect(srv) as c:
        a = agent(c, "two", "a", "meet_rw")
        mkdir(c, "session/two/agent/b")
        rdwr(c, "session/two/agent/b/ctl", b"tool_load meet_rw")
        b = "session/two/agent/b"
        assert _both(c, [(a, "meet_rw", "1", "2"), (b, "meet_rw", "2", "1")]) == [b"met\n", b"met\n"]


def _both(c: Client, calls: list) -> list[bytes]:
    """Write every call first (in order), then read each result on its fid."""
    fids = []
    for base, tool, me, peer in calls:
        f = next(_fids)
        c.walk(0, f, f"{base}/tools/{tool}/call")
        c.open(f, ORDWR)
        c.write(f, json.dumps({"id": me, "peer": peer}).encode())
        fids.append(f)
    out = [c.read(f) for f in fids]
    for f in fids:
        c.clunk(f)
    return out


def test_registry_change_follows_loaded_tools(srv):
    with connect(srv) as c:
        a = agent(c, "reg", "a", "typed")
        p = os.path.join(srv.tools, "typed.meta")
        old = open(p).read()
        try:
            m = json.loads(old)
            m["args"]["required"] = ["path", "n"]
            seen = int(read(c, "revision"))
            with open(p + ".tmp", "w") as f:
                json.dump(m, f)
            os.rename(p + ".tmp", p)
            _wait_for(lambda: int(read(c, "revision")) > seen, "the registry to reload")
            with pytest.raises(RemoteError, match="'n' is a required property"):
                rdwr(c, a + "/tools/typed/call", b'{"path": "x"}')
            os.unlink(p)
            _wait_for(lambda: b"typed" not in read(c, "tools/index"), "the tool to go")
            assert json.loads(read(c, a + "/schemas")) == []
            assert len(c.walk(0, next(_fids), a + "/tools/typed")) == 5   # partial: gone
            assert read(c, a + "/ctl") == b"typed\n"                     # still remembered
        finally:
            with open(p, "w") as f:
                f.write(old)
        _wait_for(lambda: b"typed" in read(c, "tools/index"), "the tool to return")
        assert [s["name"] for s in json.loads(read(c, a + "/schemas"))] == ["typed"]


def test_what_9pfuse_does_on_one_descriptor(srv):
    """Found with the real 9pfuse: reads on a written fd come at the kernel's
    offset; `tail -f log` reads past its snapshot; rm -r removes every file."""
    with connect(srv) as c:
        a = agent(c, "fuse", "a", "echo")
        # exec 3<>call; echo '{"k": 1}' >&3; cat <&3 -- the read comes at offset 9
        f = next(_fids)
        c.walk(0, f, a + "/tools/echo/call")
        c.open(f, ORDWR)
        assert c.write(f, b'{"k": 1}\n', offset=0) == 9
        assert c.read(f, offset=9) == b'{"k": 1}'
        assert c.read(f, offset=17) == b""
        c.clunk(f)
        # the same for ctl
        f = next(_fids)
        c.walk(0, f, a + "/ctl")
        c.open(f, ORDWR)
        c.write(f, b"tool_load fail\n", offset=0)
        assert c.read(f, offset=15) == b"echo\nfail\n"
        c.clunk(f)
        # tail -f log: a read past the snapshot looks again
        g = next(_fids)
        c.walk(0, g, a + "/log")
        c.open(g, OREAD)
        first = c.read(g, offset=0)
        assert c.read(g, offset=len(first)) == b""
        rdwr(c, a + "/ctl", b"tool_unload fail")
        assert c.read(g, offset=len(first)).endswith(b"ctl tool_unload fail -> ok\n")
        c.clunk(g)
        # JSON left incomplete at close is reported in status and log
        f = next(_fids)
        c.walk(0, f, a + "/tools/echo/call")
        c.open(f, OWRITE)
        c.write(f, b'{"path":')
        c.clunk(f)
        assert read(c, a + "/tools/echo/status").startswith(
            b"invalid: invalid args: incomplete JSON discarded at close")
        # rm -r: every file and directory inside accepts Tremove, then the session goes
        for p in ["log", "schemas", "ctl", "tools/echo/status", "tools/echo/call",
                  "tools/echo/out", "tools/echo/err", "tools/echo", "tools"]:
            g = next(_fids)
            c.walk(0, g, f"{a}/{p}")
            c.remove(g)
        g = next(_fids)
        c.walk(0, g, "session/fuse")
        c.remove(g)
        assert len(c.walk(0, next(_fids), "session/fuse")) == 1


def test_cancel_keeps_what_the_run_printed(srv):
    add_tool(srv.tools, "chatty", "#!/bin/sh\necho start\necho warming >&2\nexec sleep 63.5\n")
    with connect(srv) as c:
        _wait_for(lambda: b"chatty" in read(c, "tools/index"), "the new tool")
        a = agent(c, "partial", "a", "chatty")
        f = next(_fids)
        c.walk(0, f, a + "/tools/chatty/call")
        c.open(f, OWRITE)
        c.write(f, b"{}")
        c.clunk(f)
        _wait_for(lambda: _procs("63.5"), "the tool to start")
        rdwr(c, a + "/ctl", b"cancel chatty")
        assert read(c, a + "/tools/chatty/out") == b"start\n"
        assert read(c, a + "/tools/chatty/err") == b"warming\n"
        assert read(c, a + "/tools/chatty/status").startswith(b"killed ")
        assert not _procs("63.5")
        assert "-> killed" in read(c, a + "/log").decode()
        assert "cancelled (input/output error)" in read(c, a + "/log").decode()


@contextlib.contextmanager
def _agent_client(tools: dict[str, str]) -> Iterator[Any]:
    """A traced server with these read-only tools, and a toolsrv.cli.client connected to it at
    msize 8 KiB, with session/s/agent/a made and every tool loaded."""
    from toolsrv.cli.client import Client as TsClient
    from toolsrv.proto import IOHDRSZ
    d = tools_dir()
    for name, script in tools.items():
        add_tool(d, name, script, {"readOnly": True})
    app = AppThread([d], trace=True).start()
    try:
        with TsClient.connect(app.addr, msize=8192 + IOHDRSZ) as c:
            c.mkdir("session/s")
            c.mkdir("session/s/agent/a")
            c.rdwr("session/s/agent/a/ctl", ("tool_load " + " ".join(tools)).encode())
            yield c
    finally:
        app.stop()
        app.cleanup()


def test_client_rdwr_stops_at_a_short_read_and_reads_on_after_a_full_one(capfd):
    """toolsrv.cli.client's rdwr: a first read shorter than asked is the whole answer (no
    second Tread); a full one is followed by reads to end of file, and nothing is lost."""
    with _agent_client({"small": "#!/bin/sh\nexec cat\n",
                        "big": "#!/bin/sh\nexec head -c 50000 /dev/zero\n"}) as c:
        capfd.readouterr()
        assert c.rdwr("session/s/agent/a/tools/small/call", b'{"x": 1}') == b'{"x": 1}'
        treads = capfd.readouterr().err.count("<- Tread")
        assert treads == 1, treads
        out = c.rdwr("session/s/agent/a/tools/big/call", b"{}")
        treads = capfd.readouterr().err.count("<- Tread")
        assert out == b"\0" * 50000
        assert treads == 50000 // 8192 + 2, treads   # 6 full, 1 short, 1 empty


def test_client_rdwr_does_not_wait_for_the_clunk_and_reuses_fids_only_after_it(capfd):
    """toolsrv.cli.client's rdwr returns when the result is in; its Tclunk goes out unanswered
    and the reader frees the tag and the fid when Rclunk comes.  Many calls in a row reuse
    a few fids, each only once its clunk was answered, and leak no tag."""
    with _agent_client({"small": "#!/bin/sh\nexec cat\n"}) as c:
        c.stat("session/s")                # the ctl's Rclunk is in by now
        tags = len(c._free_tags)
        capfd.readouterr()
        for i in range(30):
            assert c.rdwr("session/s/agent/a/tools/small/call", b'{"i": %d}' % i) == \
                b'{"i": %d}' % i
        c.stat("session/s")                # a round trip: every Rclunk is in by now
        trace = capfd.readouterr().err
        n = trace.count("<- Tclunk")          # the 30 calls', stat's (and the ctl's)
        assert n >= 31 and trace.count("-> Rclunk") == n
        assert "unknown fid" not in trace and "fid in use" not in trace
        assert len(c._free_tags) == tags   # every tag back
        assert c._next_fid <= 4            # fids reused, not one per call
