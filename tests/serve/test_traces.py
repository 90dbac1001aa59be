"""Traces (serve/traces.py, doc/operations.md, Traces; the otel extra): a span per call
with `queue` and `run` children, in the SDK's in-memory exporter handed to the App in
process; its parent the traceparent of the call's `_meta`, or the call whose run wrote it
(a nested call); a call through a front to a remote host one trace; and OTLP/HTTP to a
receiver on loopback, read with OpenTelemetry's own protobuf messages."""
from __future__ import annotations

import http.server
import json
import os
import shutil
import threading

import pytest

from apphelpers import AppThread, add_tool, tools_dir
from serverhelpers import stop_clean, wait_for
from toolsrv.cli.client import Client

pytest.importorskip("opentelemetry.sdk", reason="the otel extra is not installed")
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import (  # noqa: E402
    ExportTraceServiceRequest)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import (  # noqa: E402
    InMemorySpanExporter)

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CLIENT = os.path.join(REPO, "data", "tools", "client_9p")
# calls echo through the connection its run was given: a nested call
OUTER = f"""#!/bin/sh
cat >/dev/null
printf '{{"op": "rdwr", "path": "session/%s/agent/%s/tools/echo/call", "data": "{{}}"}}' \\
  "$OLLIE_SESSION_ID" "$OLLIE_AGENT" | exec /usr/bin/python3 {CLIENT}
"""
GIVEN = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"


@pytest.fixture
def tools():
    d = tools_dir()
    add_tool(d, "echo", "#!/bin/sh\ncat\n", {"readOnly": True})
    add_tool(d, "tp", "#!/bin/sh\ncat >/dev/null\nprintf %s \"$TRACEPARENT\"\n")
    add_tool(d, "outer", OUTER, {"sandbox": "client9p"})
    yield d
    shutil.rmtree(d, ignore_errors=True)


def agent(c: Client, tools: str, s: str = "s") -> str:
    c.mkdir(f"session/{s}")
    c.mkdir(f"session/{s}/agent/a")
    c.rdwr(f"session/{s}/agent/a/ctl", f"tool_load {tools}".encode())
    return f"session/{s}/agent/a"


def by_name(spans) -> dict:
    out: dict = {}
    for s in spans:
        out.setdefault(s.name, []).append(s)
    return out


def traceparent(span) -> str:
    c = span.context
    return f"00-{c.trace_id:032x}-{c.span_id:016x}-01"


def test_a_call_is_one_span_with_its_queue_and_run(tools):
    spans = InMemorySpanExporter()
    app = AppThread([tools], span_exporter=spans).start()
    try:
        with Client.connect(app.addr) as c:
            a = agent(c, "echo")
            assert c.rdwr(f"{a}/tools/echo/call", b'{"x": 1}') == b'{"x": 1}'
        got = by_name(spans.get_finished_spans())
        [call], [queue], [run] = got["call echo"], got["queue"], got["run"]
        assert call.parent is None
        assert queue.parent.span_id == run.parent.span_id == call.context.span_id
        assert call.start_time == queue.start_time <= queue.end_time == run.start_time
        assert run.end_time == call.end_time
        at = call.attributes
        assert (at["toolsrv.tool"], at["toolsrv.session"], at["toolsrv.agent"],
                at["toolsrv.outcome"]) == ("echo", "s", "a", "ok")
        assert 0 < at["toolsrv.duration"] <= (call.end_time - call.start_time) / 1e9
    finally:
        stop_clean(app)


def test_the_traceparent_given_is_the_parent_and_the_run_gets_the_span_s(tools):
    spans = InMemorySpanExporter()
    app = AppThread([tools], span_exporter=spans).start()
    try:
        with Client.connect(app.addr) as c:
            a = agent(c, "tp")
            out = c.rdwr(f"{a}/tools/tp/call", json.dumps(
                {"_meta": {"traceparent": GIVEN}}).encode()).decode()
        [call] = by_name(spans.get_finished_spans())["call tp"]
        assert f"{call.context.trace_id:032x}" == GIVEN.split("-")[1]
        assert f"{call.parent.span_id:016x}" == GIVEN.split("-")[2]
        assert out == traceparent(call)       # $TRACEPARENT: the call's own span
    finally:
        stop_clean(app)


def test_a_nested_call_s_span_is_the_child_of_its_parent_s(tools):
    spans = InMemorySpanExporter()
    app = AppThread([tools], span_exporter=spans).start()
    try:
        with Client.connect(app.addr) as c:
            a = agent(c, "outer echo")
            c.rdwr(f"{a}/tools/outer/call", b"{}")
        got = by_name(spans.get_finished_spans())
        [outer], [echo] = got["call outer"], got["call echo"]
        assert echo.parent.span_id == outer.context.span_id
        assert echo.context.trace_id == outer.context.trace_id
        assert outer.attributes["toolsrv.outcome"] == "ok"
        assert outer.start_time < echo.start_time and echo.end_time < outer.end_time
    finally:
        stop_clean(app)


def test_a_call_through_a_front_is_one_trace_with_its_remote(tools):
    spans = InMemorySpanExporter()            # shared: both hosts' spans in one place
    remote = AppThread([tools], span_exporter=spans).start()
    front = AppThread([tools_dir()], imports=[f"far={remote.addr}"],
                      span_exporter=spans).start()
    try:
        with Client.connect(front.addr) as c:
            assert wait_for(lambda: b"far.tp" in c.read("tools/index")), \
                c.read("tools/errors")
            a = agent(c, "far.tp")
            out = c.rdwr(f"{a}/tools/far.tp/call", json.dumps(
                {"_meta": {"traceparent": GIVEN}}).encode()).decode()
        got = by_name(spans.get_finished_spans())
        [there], [here] = got["call tp"], got["call far.tp"]
        assert f"{here.parent.span_id:016x}" == GIVEN.split("-")[2]
        assert there.parent.span_id == here.context.span_id
        assert {f"{s.context.trace_id:032x}" for s in (here, there)} == {GIVEN.split("-")[1]}
        assert out == traceparent(there)      # the remote's run: its own span's context
    finally:
        stop_clean(front)
        stop_clean(remote)


class Receiver(http.server.BaseHTTPRequestHandler):
    """An OTLP/HTTP collector's /v1/traces, protobuf: it counts the spans it is sent."""
    names: list[str] = []
    got = threading.Event()

    def do_POST(self) -> None:
        body = self.rfile.read(int(self.headers["Content-Length"]))
        req = ExportTraceServiceRequest()
        req.ParseFromString(body)
        ok = self.path == "/v1/traces" and \
            self.headers["Content-Type"] == "application/x-protobuf"
        if ok:
            Receiver.names += [s.name for r in req.resource_spans
                               for ss in r.scope_spans for s in ss.spans]
            Receiver.got.set()
        self.send_response(200 if ok else 404)
        self.send_header("Content-Type", "application/x-protobuf")
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *_: object) -> None:
        pass


def test_spans_are_sent_by_otlp_to_the_endpoint(tools):
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}"
    app = AppThread([tools], otlp_endpoint=url).start()
    try:
        assert app.app.traces.where == f"by OTLP/HTTP to {url}/v1/traces"
        with Client.connect(app.addr) as c:
            a = agent(c, "echo")
            for i in range(3):
                c.rdwr(f"{a}/tools/echo/call", b"{}")
    finally:
        stop_clean(app)          # the batch is sent as the server stops
        srv.shutdown()
    assert Receiver.got.is_set()
    assert sorted(Receiver.names) == ["call echo"] * 3 + ["queue"] * 3 + ["run"] * 3


def test_otel_traces_exporter_console_writes_each_span_as_json(tools, monkeypatch, capfd):
    """OTEL_TRACES_EXPORTER=console: each span as JSON on standard output, batched off the
    loop and flushed as the server stops."""
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console")
    app = AppThread([tools]).start()
    try:
        assert app.app.traces.where == "as JSON on standard output"
        with Client.connect(app.addr) as c:
            a = agent(c, "echo")
            c.rdwr(f"{a}/tools/echo/call", b"{}")
    finally:
        stop_clean(app)
    out = capfd.readouterr().out
    spans = json.loads("[" + out.replace("}\n{", "},\n{") + "]")
    assert sorted(s["name"] for s in spans) == ["call echo", "queue", "run"]
    call = next(s for s in spans if s["name"] == "call echo")
    assert call["attributes"]["toolsrv.tool"] == "echo", call["attributes"]


def test_otlp_and_console_together_and_an_unknown_exporter_refused(monkeypatch):
    from toolsrv.serve.traces import Traces, exporter_names
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "console, otlp")
    assert exporter_names(None) == ["console", "otlp"]
    t = Traces("http://127.0.0.1:9")
    assert t.where == "as JSON on standard output and by OTLP/HTTP to http://127.0.0.1:9/v1/traces"
    t.provider.shutdown()
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert exporter_names(None) == [] and exporter_names("http://h:1") == ["otlp"]
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "zipkin")
    with pytest.raises(ValueError, match="zipkin is not an exporter toolsrv has .*otlp, "
                                         "console, none"):
        exporter_names(None)
