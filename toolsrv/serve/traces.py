"""A call's OpenTelemetry span (the otel extra; doc/operations.md, Traces): off unless
`serve --otlp-endpoint URL`, OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_TRACES_EXPORTER says where
spans go.  This module is imported only then, and imports the SDK itself.

The scheduler's two hooks (tree/calls/scheduler.py):
  call_started  at the call file's write: the call's span begins, its parent the span of
                the call whose run wrote it (a nested call), else the `traceparent` the
                call's `_meta` carried (an MCP face's, a front's); `call.trace` is its own
                traceparent, passed on as the run's $TRACEPARENT and to a remote host
  call_ended    before its readers are woken: children `queue` (arrival to the run's start:
                the agent's turn and a run slot) and `run`, then the span ends, with the
                tool, session, agent, outcome and duration

Exporters.  OTEL_TRACES_EXPORTER names them, comma-separated: `otlp` (the default, and
what --otlp-endpoint means), `console` (each span as JSON on standard output), `none`;
another is refused at start.  Spans are batched off the loop (BatchSpanProcessor's
thread) for each, so neither a slow collector nor a stdout nobody reads holds a call; a
given exporter (the tests' in-memory one) is handed each span as it ends.
"""
from __future__ import annotations

import os
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

from ..tree.calls.states import State


def traces_url(endpoint: str | None) -> str:
    """Where OTLP/HTTP spans are posted: an endpoint given as a base URL gets /v1/traces,
    as OTEL_EXPORTER_OTLP_ENDPOINT does; without one, OpenTelemetry's variables."""
    if endpoint:
        if urlsplit(endpoint).path.rstrip("/") in ("", "/"):
            return endpoint.rstrip("/") + "/v1/traces"
        return endpoint
    url = os.environ.get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
    if url:
        return url
    base = os.environ.get("OTEL_EXPORTER_OTLP_ENDPOINT", "http://localhost:4318")
    return base.rstrip("/") + "/v1/traces"


KNOWN = ("otlp", "console", "none")


def exporter_names(endpoint: str | None) -> list[str]:
    """The exporters OTEL_TRACES_EXPORTER names (otlp when it is unset, or when
    --otlp-endpoint is given and it names none); ValueError for one not known."""
    said = [k.strip().lower() for k in os.environ.get("OTEL_TRACES_EXPORTER", "").split(",")
            if k.strip()]
    bad = [k for k in said if k not in KNOWN]
    if bad:
        raise ValueError(f"OTEL_TRACES_EXPORTER={os.environ['OTEL_TRACES_EXPORTER']}: "
                         f"{bad[0]} is not an exporter toolsrv has (it has "
                         f"{', '.join(KNOWN)}): set one of those, comma-separated")
    names = [k for k in dict.fromkeys(said) if k != "none"]
    if endpoint and "otlp" not in names:
        names.insert(0, "otlp")
    return names or ([] if said else ["otlp"])


class Traces:
    """The App's tracer: the scheduler's `traces` hook."""

    def __init__(self, endpoint: str | None = None, exporter: Any = None) -> None:
        self.provider = TracerProvider(resource=Resource.create(
            {"service.name": os.environ.get("OTEL_SERVICE_NAME", "toolsrv")}))
        if exporter is not None:
            self.where = f"to {type(exporter).__name__}"
            self.provider.add_span_processor(SimpleSpanProcessor(exporter))
        else:
            wheres = []
            for name in exporter_names(endpoint):
                if name == "console":
                    from opentelemetry.sdk.trace.export import ConsoleSpanExporter
                    out: Any = ConsoleSpanExporter(out=sys.stdout)
                    wheres.append("as JSON on standard output")
                else:
                    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
                        OTLPSpanExporter)
                    url = traces_url(endpoint)
                    out = OTLPSpanExporter(endpoint=url)
                    wheres.append(f"by OTLP/HTTP to {url}")
                self.provider.add_span_processor(BatchSpanProcessor(out))
            self.where = " and ".join(wheres)
        self.tracer = self.provider.get_tracer("toolsrv")

    def call_started(self, call: Any) -> None:
        parent = call.parent.span if call.parent is not None else None
        given = call.meta.get("traceparent")      # checked already: jsonargs.take_meta
        if parent is None and given:
            _, trace_id, span_id, flags = given.split("-")
            parent = trace.NonRecordingSpan(trace.SpanContext(
                int(trace_id, 16), int(span_id, 16), is_remote=True,
                trace_flags=trace.TraceFlags(int(flags, 16))))
        span = call.span = self.tracer.start_span(
            f"call {call.tool}", trace.set_span_in_context(parent) if parent else None,
            kind=trace.SpanKind.SERVER)
        c = span.get_span_context()
        call.trace = f"00-{c.trace_id:032x}-{c.span_id:016x}-{c.trace_flags:02x}"

    def call_ended(self, call: Any) -> None:
        span = call.span
        now_ns, now = time.time_ns(), time.monotonic()

        def wall(t: float) -> int:
            return now_ns - int((now - t) * 1e9)
        ctx = trace.set_span_in_context(span)
        ran = call.started > call.arrived         # its run began (started was reset)
        queued_until = wall(call.started) if ran else now_ns
        self.tracer.start_span("queue", ctx, start_time=span.start_time).end(queued_until)
        if ran:
            self.tracer.start_span("run", ctx, start_time=queued_until).end(now_ns)
        a = call.agent
        span.set_attributes({"toolsrv.tool": call.tool, "toolsrv.session": a.session.name,
                             "toolsrv.agent": a.name, "toolsrv.outcome": call.state,
                             "toolsrv.duration": call.duration or 0.0})
        if call.state != State.OK:
            span.set_status(trace.StatusCode.ERROR, call.detail or call.reason or call.state)
        span.end(now_ns)

    def close(self) -> None:
        """Sends what is batched (a thread's work: off the loop)."""
        self.provider.shutdown()
