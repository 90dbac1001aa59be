"""The steady-state tools/call (toolsrv/mcp/fast.py), answered beside the SDK's dispatch.

A connection's first call goes through the SDK (it makes the seat); the same call sent
again is the fast path's.  On the wire nothing tells them apart: each call is sent both
ways and the answers compared, for a result, an error result, content passed through,
content that is not MCP's, structured output, an outputSchema misfit, an unknown tool and
absent arguments, in two protocol versions.  A cancelled call is killed and never
answered; a call still running when stdin closes is killed with the face.  Which lines
the fast path takes is checked on `Calls.take` itself, beside a stub of the wiring."""
from __future__ import annotations

import asyncio
import json
import re
import subprocess
import tempfile
import uuid
from types import SimpleNamespace

import pytest

pytest.importorskip("mcp", reason="the MCP SDK is not installed (pip install 'toolsrv[mcp]')")

from apphelpers import add_tool  # noqa: E402
from mcphelpers import FACE, RAW_INIT, WAIT, env, raw_reply, raw_rpc  # noqa: E402
from tools.sandbox_support import processes_with  # noqa: E402
from toolsrv.mcp.fast import Calls  # noqa: E402

LOG_TIME = re.compile(r"log: \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d")
TOOK = re.compile(r" \d+\.\d+s\b")
STATS = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}


@pytest.fixture(scope="module")
def tools(tools):                   # conftest.py's, and these
    add_tool(tools, "stats", "#!/bin/sh\necho '{\"n\": 3}'\n", {"outputSchema": STATS})
    add_tool(tools, "badstats", "#!/bin/sh\necho '{\"n\": \"x\"}'\n", {"outputSchema": STATS})
    add_tool(tools, "bogus", "#!/bin/sh\nprintf '%s' '{\"content\": [{\"type\": \"nope\"}]}'\n")
    add_tool(tools, "uni", "#!/bin/sh\nprintf '%s' 'hé ✓ 😀'\n")
    return tools


def face(server):
    return subprocess.Popen([*FACE, "-a", server.addr], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env(),
                            cwd=tempfile.gettempdir())


def initialize(p, version):
    raw_rpc(p, {**RAW_INIT, "params": {**RAW_INIT["params"], "protocolVersion": version}})
    assert raw_reply(p, 1)["result"]["protocolVersion"] == version
    raw_rpc(p, {"jsonrpc": "2.0", "method": "notifications/initialized"})


def call(p, rid, name, args=None):
    params = {"name": name} if args is None else {"name": name, "arguments": args}
    raw_rpc(p, {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})
    got = raw_reply(p, rid)
    del got["id"]
    text = LOG_TIME.sub("log: TIME", json.dumps(got))       # the log line's clock
    return json.loads(TOOK.sub(" TOOK", text))              # and the run's duration


def close(p):
    p.stdin.close()
    assert p.wait(30) == 0
    p.stdout.close()


CASES = [("echo", {"a": [1, "two", None]}), ("fail", {"n": 1}), ("fail", {}),
         ("content", {}), ("bogus", {}), ("stats", {}), ("badstats", {}), ("uni", {}),
         ("echo", None), ("no-such-tool", {})]


@pytest.mark.parametrize("version", ["2025-06-18", "2024-11-05"])
def test_the_fast_answer_is_the_sdks(server, version):
    """Each case first on a fresh connection (its first call: the SDK's), then again on
    the connection whose seat is made (the fast path's): the same answer."""
    steady = face(server)
    firsts = [face(server) for _ in CASES]      # started together: each start is a second
    try:
        initialize(steady, version)
        assert "result" in call(steady, 2, "echo", {})          # the seat is made
        for i, ((name, args), first) in enumerate(zip(CASES, firsts)):
            initialize(first, version)
            sdk = call(first, 2, name, args)
            close(first)
            fast = call(steady, 10 + i, name, args)
            assert fast == sdk, (name, args)
            if name == "stats":
                assert fast["result"]["structuredContent"] == {"n": 3}
        assert fast["error"]["code"] == -32602 and "unknown tool: no-such-tool" in \
            fast["error"]["message"]
    finally:
        close(steady)
        for first in firsts:
            if first.poll() is None:        # a case failed before its face was closed
                first.kill()
                first.wait()


def marked_running(p, rid):
    """A steady connection's call (id rid) of `marked`, its process up: its marker."""
    marker = f"600.{uuid.uuid4().int % 10**9:09d}"
    initialize(p, "2025-06-18")
    call(p, 2, "echo", {})
    raw_rpc(p, {"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                "params": {"name": "marked", "arguments": {"s": marker}}})
    wait_for(lambda: processes_with(marker))
    return marker


def test_a_cancelled_fast_call_is_killed_and_never_answered(server):
    p = face(server)
    try:
        marker = marked_running(p, 3)
        raw_rpc(p, {"jsonrpc": "2.0", "method": "notifications/cancelled",
                    "params": {"requestId": 3, "reason": "test"}})
        wait_for(lambda: not processes_with(marker))
        raw_rpc(p, {"jsonrpc": "2.0", "id": 4, "method": "ping"})
        line = p.stdout.readline()              # the next line: the ping's, not id 3's
        assert json.loads(line) == {"jsonrpc": "2.0", "id": 4, "result": {}}
        assert call(p, 5, "echo", {"after": "cancel"})["result"]["isError"] is False
    finally:
        close(p)


def test_a_fast_call_running_at_end_of_input_is_killed(server):
    p = face(server)
    try:
        marker = marked_running(p, 3)
    finally:
        close(p)
    wait_for(lambda: not processes_with(marker))


def test_a_call_after_one_the_sdk_holds_keeps_its_turn(server):
    """A call with `_meta` (progress) is the SDK's; a plain call right behind it must not
    overtake it through the fast path: the two tools are not readOnly, so toolsrv runs
    them in the order their writes arrive, and the answers come in that order."""
    p = face(server)
    try:
        initialize(p, "2025-06-18")
        call(p, 2, "echo", {})
        raw_rpc(p, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {
            "name": "marked", "arguments": {"s": "0.5"}, "_meta": {"progressToken": "t"}}})
        raw_rpc(p, {"jsonrpc": "2.0", "id": 4, "method": "tools/call",
                    "params": {"name": "fail", "arguments": {"n": 1}}})
        order = []
        while len(order) < 2:
            m = json.loads(p.stdout.readline())
            if m.get("id") in (3, 4):
                order.append(m["id"])
        assert order == [3, 4]
        assert call(p, 5, "fail", {"n": 1})["result"]["isError"] is True   # after: fast again
    finally:
        close(p)


def test_the_fast_path_says_so_once_in_the_verbose_log(server, tmp_path):
    err = open(tmp_path / "stderr", "wb")
    p = subprocess.Popen([*FACE, "-v", "-a", server.addr], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=err, env=env(),
                         cwd=tempfile.gettempdir())
    try:
        initialize(p, "2025-06-18")
        for rid in (2, 3, 4):
            assert call(p, rid, "echo", {"n": rid})["result"]["isError"] is False
    finally:
        close(p)
        err.close()
    text = (tmp_path / "stderr").read_text()
    assert text.count("answered beside the SDK") == 1, text[-2000:]


def wait_for(cond):
    import time
    end = time.monotonic() + WAIT
    while not cond():
        assert time.monotonic() < end, "never came"
        time.sleep(0.02)


# -- which lines are taken: Calls.take beside a stub of the wiring --

class Out:
    def __init__(self):
        self.lines = []

    async def write(self, text):
        self.lines.append(json.loads(text))

    async def flush(self):
        pass


def stub(version="2025-06-18", ready=True, conns=1):
    seat = SimpleNamespace(ready=ready)
    conn = SimpleNamespace(protocol_version=version)
    calls = []

    async def fcall(seat, name, args):
        calls.append((name, args))
        if name == "hang":
            await asyncio.Event().wait()
        return {"content": [{"type": "text", "text": name}], "isError": False}
    wiring = SimpleNamespace(conns={i: (conn, seat) for i in range(conns)}, http=False,
                             subscribed=set(), face=SimpleNamespace(call=fcall))
    return Calls(wiring, Out()), calls


def req(rid=7, **params):
    return json.dumps({"jsonrpc": "2.0", "id": rid, "method": "tools/call",
                       "params": params or {"name": "t", "arguments": {}}}) + "\n"


@pytest.mark.parametrize("line, why", [
    (req(_meta={"progressToken": 1}, name="t"), "progress is the SDK's"),
    (req(name="t", arguments={}, task={}), "params it does not know"),
    (req(name="t", arguments=[1]), "arguments not an object: the SDK's error"),
    (req(name=5), "a name not a string"),
    (req(rid=True), "an id that is not an int or a string"),
    (req(rid=None), "no id: a notification"),
    ('{"jsonrpc": "2.0", "id": 7, "method": "tools/call", "params": {"name": "t"}', "torn"),
    ('{"jsonrpc": "2.0", "id": 7, "method": "tools/list"}\n', "another method"),
    ('{"jsonrpc": "1.0", "id": 7, "method": "tools/call", "params": {"name": "t"}}\n',
     "not JSON-RPC 2.0"),
])
def test_lines_left_to_the_sdk(line, why):
    async def go():
        calls, _ = stub()
        return calls.take(line)
    assert asyncio.run(go()) is False, why


@pytest.mark.parametrize("conn, why", [
    ({"ready": False}, "the seat is not made: the first call makes it"),
    ({"version": "2026-07-28"}, "a 2026-era request"),
    ({"conns": 0}, "no handshake yet"),
    ({"conns": 2}, "not one connection"),
])
def test_connections_left_to_the_sdk(conn, why):
    async def go():
        calls, _ = stub(**conn)
        return calls.take(req())
    assert asyncio.run(go()) is False, why


def test_no_call_is_taken_while_the_sdk_holds_one():
    async def go():
        calls, _ = stub()
        seen = [calls.take(req(rid=1, name="t", _meta={"progressToken": 1}))]
        seen.append(calls.take(req(rid=2, name="t")))      # behind the SDK's: the SDK's
        calls.settled()
        calls.settled()
        seen.append(calls.take(req(rid=3, name="t")))      # none held: taken
        await asyncio.gather(*calls.running.values())
        return seen
    assert asyncio.run(go()) == [False, False, True]


def test_a_steady_call_is_taken_and_answered_once():
    async def go():
        calls, made = stub()
        assert calls.take(req(rid="8", name="t")) is True
        assert calls.take(req(rid=8, name="t")) is False     # "8" and 8: one id in flight
        await asyncio.gather(*calls.running.values())
        return calls.out.lines, made
    lines, made = asyncio.run(go())
    assert made == [("t", {})]
    assert lines == [{"jsonrpc": "2.0", "id": "8",
                      "result": {"content": [{"type": "text", "text": "t"}],
                                 "isError": False}}]


def test_a_cancel_of_a_taken_call_silences_it_and_is_passed_on():
    async def go():
        calls, _ = stub()
        assert calls.take(req(rid=9, name="hang")) is True
        task = calls.running[9]
        await asyncio.sleep(0)
        note = json.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled",
                           "params": {"requestId": "9"}})
        assert calls.take(note) is False            # the SDK sees it too
        await asyncio.gather(task, return_exceptions=True)
        return calls.out.lines, calls.running
    lines, running = asyncio.run(go())
    assert lines == [] and running == {}


def test_a_traced_face_leaves_every_call_to_the_sdk(monkeypatch):
    """With a tracer provider set, the SDK's middleware spans each request: none is taken."""
    from opentelemetry import trace

    class Provider(trace.TracerProvider):               # a provider that is not the no-op
        def get_tracer(self, *a, **k):
            return trace.NoOpTracer()
    monkeypatch.setattr(trace, "get_tracer_provider", lambda: Provider())

    async def go():
        calls, _ = stub()
        return calls.take(req())
    assert asyncio.run(go()) is False
