"""The server's metrics, in the Prometheus text format: the root's `metrics` file, and
`serve --metrics HOST:PORT` over HTTP (doc/operations.md).

Theory of operation.  Two kinds of figure:

  counted   as each call ends (the scheduler's `metrics` hook, before its readers are
            woken): calls by tool and outcome, and the call's seconds in histogram
            buckets; plain integers here, a dict entry and a bisect a call.
  read      at each scrape, from the live objects (Live.figures): runs running and queued,
            idle warm interpreters, resident processes, connections, sessions, agents,
            the loop's lag and stalls (loopwatch.py), bytes read and written by every
            connection (transport.Gate).  Nothing a call does pays for them.

prometheus_client writes the exposition (a custom collector yields its metric families
from those figures) and serves --metrics (its own HTTP server, on a thread).  It is
imported at the first scrape, or at start with --metrics, not at every start: its import
(http.server, email, ...) took 50-150 ms.  Each App has its own registry (several servers
share one test process).  A scrape from the HTTP thread takes the figures on the event
loop, so they are never torn.
"""
from __future__ import annotations

import asyncio
import bisect
import threading
from typing import Any, Iterator

BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0,
           30.0, 60.0, 300.0)


class Metrics:
    """The App's metrics: `call_ended` is the scheduler's hook, `text` the file's body."""

    def __init__(self, app: Any, loop: asyncio.AbstractEventLoop) -> None:
        self.app = app
        self.loop = loop
        self.thread = threading.get_ident()      # the loop's
        self.calls: dict[tuple[str, str], int] = {}       # (tool, outcome) -> calls ended
        self.buckets = [0] * (len(BUCKETS) + 1)           # the last: past 300 s
        self.seconds = 0.0
        self.server: Any = None
        self._registry: Any = None

    def call_ended(self, call: Any) -> None:
        key = (call.tool, call.state)
        self.calls[key] = self.calls.get(key, 0) + 1
        self.buckets[bisect.bisect_left(BUCKETS, call.duration)] += 1
        self.seconds += call.duration

    def figures(self) -> dict[str, Any]:
        """Everything a scrape shows, read now (on the loop)."""
        from ..tree.calls.states import State
        app = self.app
        live = list(app.calls.sched.live) if app.calls is not None else []
        sessions = list(app.store.sessions.values())
        launcher = getattr(app.runner, "launcher", None)
        watch = app.watch
        return {"calls": dict(self.calls), "buckets": list(self.buckets),
                "seconds": self.seconds,
                "running": sum(1 for c in live if c.state == State.RUNNING),
                "queued": sum(1 for c in live if c.state == State.QUEUED),
                "warm": len(launcher.warm.pids()) if launcher is not None else 0,
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
        """prometheus_client's collector protocol: the metric families, from the figures."""
        from prometheus_client.core import (CounterMetricFamily, GaugeMetricFamily,
                                            HistogramMetricFamily)
        f = self.figures() if threading.get_ident() == self.thread else \
            asyncio.run_coroutine_threadsafe(self._figures(), self.loop).result(10)
        calls = CounterMetricFamily("toolsrv_calls", "calls ended, by tool and outcome (ok, "
                                    "exit, timeout, killed, refused, failed)",
                                    labels=["tool", "outcome"])
        for (tool, outcome), n in sorted(f["calls"].items()):
            calls.add_metric([tool, outcome], n)
        yield calls
        total, cumulative = 0, []
        for le, n in zip([*map(str, BUCKETS), "+Inf"], f["buckets"]):
            total += n
            cumulative.append((le, total))
        yield HistogramMetricFamily("toolsrv_call_duration_seconds", "a call's time from "
                                    "its run's start (its making, for one that never ran) "
                                    "to its end", buckets=cumulative, sum_value=f["seconds"])
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

    def registry(self) -> Any:
        if self._registry is None:
            from prometheus_client import CollectorRegistry
            self._registry = CollectorRegistry()
            self._registry.register(self)
        return self._registry

    def text(self) -> bytes:
        from prometheus_client import generate_latest
        return bytes(generate_latest(self.registry()))

    def serve_http(self, host: str, port: int) -> int:
        """prometheus_client's HTTP server on a thread; the port it listens on."""
        from prometheus_client import start_http_server
        self.server, _ = start_http_server(port, host, registry=self.registry())
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
