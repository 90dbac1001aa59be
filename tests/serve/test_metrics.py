"""The metrics (serve/metrics.py, doc/operations.md): the root's `metrics` file in the
Prometheus text format, read back with prometheus_client's own parser, its call counters
matching the calls made; the same over HTTP with serve --metrics; a real Prometheus
scrape where Debian's prometheus is installed."""
from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from toolsrv.cli.client import Client, ClientError

from apphelpers import AppThread, add_tool, tools_dir
from serverhelpers import stop_clean, wait_for


@pytest.fixture
def tools():
    d = tools_dir()
    add_tool(d, "echo", "#!/bin/sh\ncat\n", {"readOnly": True})
    add_tool(d, "fail", "#!/bin/sh\nexit 3\n")
    add_tool(d, "nap", "#!/bin/sh\nexec sleep 30\n")
    yield d
    shutil.rmtree(d, ignore_errors=True)


def samples(text: str) -> dict[tuple[str, tuple], float]:
    """(sample name, sorted labels) -> value, as Prometheus's parser reads them."""
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for fam in text_string_to_metric_families(text) for s in fam.samples}


def test_the_metrics_file_counts_the_calls_made(tools):
    app = AppThread([tools]).start()
    try:
        with Client.connect(app.addr) as c:
            for s in ("s1", "s2"):
                c.mkdir(f"session/{s}")
                c.mkdir(f"session/{s}/agent/a")
                c.rdwr(f"session/{s}/agent/a/ctl", b"tool_load echo fail")
            c.mkdir("session/s2/agent/b")
            for i in range(7):
                c.rdwr("session/s1/agent/a/tools/echo/call", json.dumps({"i": i}).encode())
            for _ in range(2):
                with pytest.raises(ClientError, match="exit 3"):
                    c.rdwr("session/s2/agent/a/tools/fail/call", b"{}")
            m = samples(c.read("metrics").decode())
        assert m[("toolsrv_calls_total", (("outcome", "ok"), ("tool", "echo")))] == 7
        assert m[("toolsrv_calls_total", (("outcome", "exit"), ("tool", "fail")))] == 2
        assert sum(v for (n, _), v in m.items() if n == "toolsrv_calls_total") == 9
        assert m[("toolsrv_call_duration_seconds_count", ())] == 9
        assert m[("toolsrv_call_duration_seconds_bucket", (("le", "+Inf"),))] == 9
        assert m[("toolsrv_sessions", ())] == 2 and m[("toolsrv_agents", ())] == 3
        assert m[("toolsrv_runs", (("state", "running"),))] == 0
        assert m[("toolsrv_runs", (("state", "queued"),))] == 0
        assert m[("toolsrv_connections", ())] >= 1
        assert m[("toolsrv_received_bytes_total", ())] > 0
        assert m[("toolsrv_sent_bytes_total", ())] > 0
        for name in ("toolsrv_warm_idle", "toolsrv_resident_processes",
                     "toolsrv_loop_lag_seconds", "toolsrv_loop_lag_worst_seconds",
                     "toolsrv_loop_stalls_total"):
            assert (name, ()) in m, name
    finally:
        stop_clean(app)


def test_serve_metrics_over_http(tools):
    app = AppThread([tools], metrics="127.0.0.1:0").start()
    try:
        with Client.connect(app.addr) as c:
            c.mkdir("session/s")
            c.mkdir("session/s/agent/a")
            c.rdwr("session/s/agent/a/ctl", b"tool_load echo")
            c.rdwr("session/s/agent/a/tools/echo/call", b"{}")
        url = f"http://127.0.0.1:{app.app.metrics_port}/metrics"
        m = samples(urllib.request.urlopen(url, timeout=10).read().decode())
        assert m[("toolsrv_calls_total", (("outcome", "ok"), ("tool", "echo")))] == 1
        assert m[("toolsrv_sessions", ())] == 1
    finally:
        stop_clean(app)


def test_a_running_call_is_counted_while_it_runs(tools):
    app = AppThread([tools], metrics="127.0.0.1:0").start()
    try:
        with Client.connect(app.addr) as c:
            c.mkdir("session/s")
            c.mkdir("session/s/agent/a")
            c.rdwr("session/s/agent/a/ctl", b"tool_load nap")
            c.write("session/s/agent/a/tools/nap/call", b"{}")
            assert wait_for(lambda: c.read("session/s/agent/a/tools/nap/status")
                            .startswith(b"running"))
            url = f"http://127.0.0.1:{app.app.metrics_port}/metrics"
            for text in (c.read("metrics").decode(),          # on the loop, and off it
                         urllib.request.urlopen(url, timeout=10).read().decode()):
                m = samples(text)
                assert m[("toolsrv_runs", (("state", "running"),))] == 1
                assert ("toolsrv_calls_total", (("outcome", "ok"), ("tool", "nap"))) not in m
            c.rdwr("session/s/agent/a/ctl", b"cancel nap")
            assert wait_for(lambda: samples(c.read("metrics").decode()).get(
                ("toolsrv_calls_total", (("outcome", "killed"), ("tool", "nap")))) == 1)
    finally:
        stop_clean(app)


def test_metrics_beyond_loopback_need_listen_any(tools):
    app = AppThread([tools], metrics="192.0.2.1:9464")
    with pytest.raises(ValueError, match="not a loopback address .*--listen-any"):
        app.start()
    app.cleanup()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_real_prometheus_scrapes_it(tools):
    prom = shutil.which("prometheus")
    if prom is None:
        pytest.skip("Debian's prometheus is not installed here (apt-get install "
                    "prometheus): prometheus_client's parser stands in for it above")
    port = free_port()
    app = AppThread([tools], metrics=f"127.0.0.1:{port}").start()
    work = tempfile.mkdtemp(prefix="prom.", dir="/tmp")
    with open(os.path.join(work, "prometheus.yml"), "w") as f:
        f.write("global: {scrape_interval: 1s}\nscrape_configs:\n- job_name: toolsrv\n"
                f"  static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n")
    web = free_port()
    p = subprocess.Popen([prom, f"--config.file={work}/prometheus.yml",
                          f"--storage.tsdb.path={work}/data",
                          f"--web.listen-address=127.0.0.1:{web}"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    def sessions() -> float | None:
        try:
            q = urllib.request.urlopen(f"http://127.0.0.1:{web}/api/v1/query?query="
                                       "toolsrv_sessions", timeout=5).read()
        except OSError:
            return None
        got = json.loads(q)["data"]["result"]
        return float(got[0]["value"][1]) if got else None
    try:
        with Client.connect(app.addr) as c:
            c.mkdir("session/seen")
        assert wait_for(lambda: sessions() == 1.0, 60), "prometheus never scraped it"
    finally:
        p.kill()
        p.wait()
        shutil.rmtree(work, ignore_errors=True)
        stop_clean(app)
