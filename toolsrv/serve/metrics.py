"""The server's metrics, in the Prometheus text format: the root's `metrics` file, and
`serve --metrics HOST:PORT` over HTTP (doc/operations.md).

Theory of operation.  Two kinds of figure:

  counted   as each call ends (the scheduler's `metrics` hook, before its readers are
            woken): toolsrv_calls_total by tool and outcome, and the call's seconds in
            toolsrv_call_duration_seconds, a histogram.  A few microseconds a call.
  read      at each scrape, from the live objects (Live.collect): runs running and queued,
            idle warm interpreters, resident processes, connections, sessions, agents,
            the loop's lag and stalls (loopwatch.py), bytes read and written by every
            connection (transport.Gate).  Nothing a call does pays for them.

Each App has its own CollectorRegistry (several servers share one test process); the HTTP
listener is prometheus_client's own, on a thread, which reads the registry as the file
does (figures read there come from the loop's objects without its lock: a scrape may see
a count one call stale, never a torn one).
"""
from __future__ import annotations

import asyncio
import threading
from typing import Any, Iterator

from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
           30.0, 60.0, 300.0)


class Live:
    """The figures read at a scrape, from the App's objects, on the loop: a scrape from
    the HTTP thread asks the loop for them."""

    def __init__(self, app: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.app = app
        self.loop = loop
        self.thread = threading.get_ident()      # the loop's

    def figures(self) -> dict[str, Any]:
        app = self.app
        live = list(app.calls.sched.live) if app.calls is not None else []
        sessions = list(app.store.sessions.values())
        launcher = getattr(app.runner, "launcher", None)
        watch = app.watch
        return {"running": sum(1 for c in live if c.state == "running"),
                "queued": sum(1 for c in live if c.state == "queued"),
                "warm": len(launcher.warm_pids()) if launcher is not None else 0,
                "residents": sum(1 for e in app.calls.sched.residents.live
                                 if e.proc is not None and e.proc.alive)
                if app.calls is not None else 0,
                "conns": len(app.conns), "sessions": len(sessions),
                "agents": sum(len(s.agents) for s in sessions),
                "lag": watch.lag if watch else 0.0, "worst": watch.worst() if watch else 0.0,
                "stalls": watch.stalls if watch else 0,
                "in": app.gate.bytes_in, "out": app.gate.bytes_out}

    async def _figures(self) -> dict[str, Any]:
        return self.figures()

    def collect(self) -> Iterator[Any]:
        f = self.figures() if threading.get_ident() == self.thread else \
            asyncio.run_coroutine_threadsafe(self._figures(), self.loop).result(10)
        runs = GaugeMetricFamily("toolsrv_runs", "calls running, and queued for a run "
                                 "slot or their agent's turn", labels=["state"])
        runs.add_metric(["running"], f["running"])
        runs.add_metric(["queued"], f["queued"])
        yield runs
        for name, key, what in [
                ("toolsrv_warm_idle", "warm", "idle warm interpreters, ready for a Python "
                 "tool's call"),
                ("toolsrv_resident_processes", "residents", "resident tools' processes up"),
                ("toolsrv_connections", "conns", "9P connections open"),
                ("toolsrv_sessions", "sessions", "sessions"),
                ("toolsrv_agents", "agents", "agents, of every session"),
                ("toolsrv_loop_lag_seconds", "lag", "how late the event loop's last tick "
                 "woke (serve/loopwatch.py)"),
                ("toolsrv_loop_lag_worst_seconds", "worst", "the event loop's worst lag in "
                 "the last 60 s")]:
            yield GaugeMetricFamily(name, what, value=f[key])
        for name, key, what in [
                ("toolsrv_loop_stalls", "stalls", "ticks of the event loop late past 0.25 s"),
                ("toolsrv_received_bytes", "in", "bytes read from 9P connections"),
                ("toolsrv_sent_bytes", "out", "bytes of 9P replies written")]:
            yield CounterMetricFamily(name, what, value=f[key])


class Metrics:
    """The App's metrics: `call_ended` is the scheduler's hook, `text` the file's body."""

    def __init__(self, app: Any) -> None:
        self.registry = CollectorRegistry()
        self.calls = Counter("toolsrv_calls", "calls ended, by tool and outcome (ok, exit, "
                             "timeout, killed, refused, failed)", ["tool", "outcome"],
                             registry=self.registry)
        self.seconds = Histogram("toolsrv_call_duration_seconds", "a call's time from its "
                                 "run's start (its making, for one that never ran) to "
                                 "its end",
                                 buckets=BUCKETS, registry=self.registry)
        self.registry.register(Live(app, asyncio.get_running_loop()))  # type: ignore
        self.server: Any = None

    def call_ended(self, call: Any) -> None:
        self.calls.labels(call.tool, call.state).inc()
        self.seconds.observe(call.duration)

    def text(self) -> bytes:
        return generate_latest(self.registry)

    def serve_http(self, host: str, port: int) -> int:
        """prometheus_client's HTTP server on a thread; the port it listens on."""
        from prometheus_client import start_http_server
        self.server, _ = start_http_server(port, host, registry=self.registry)
        return int(self.server.server_address[1])

    def close(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def parse_listen(text: str) -> tuple[str, int]:
    """HOST:PORT (HOST may be [v6]); ValueError when it is not one."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not host:
        raise ValueError(f"--metrics {text!r}: say HOST:PORT, e.g. 127.0.0.1:9464")
    return host.strip("[]"), int(port)
