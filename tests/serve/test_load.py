"""Load: many connections calling the echo tool with distinct args (bench/load_calls.py).

The default suite runs a short load (a few seconds); `make test-slow` runs issue 8's
64 connections x 1,000 calls, twice, and doc/reliability.md records its figures.
Pass or fail never depends on speed: only on every result being its own call's, on the
server's fds coming back to where they were, and on its memory not growing with calls.
"""
from __future__ import annotations

import pytest

from bench.load_calls import run_load

MiB = 1024  # rss figures are KiB


def check(res: dict, growth_kib: int) -> None:
    for r in res["runs"]:
        assert r["wrong_results"] == 0, res
        assert r["fds_after"] == res["fds_before"], res
    assert res["server_children_after"] == 1, res       # only the launcher, no stray runs
    rss = res["rss_kib"]
    assert rss[-1] - rss[1 if len(rss) > 2 else 0] < growth_kib, res


def test_short_load(capsys):
    res = run_load(conns=6, calls=15, runs=2)
    with capsys.disabled():
        print(f"\nshort load: {res}")
    check(res, growth_kib=16 * MiB)


@pytest.mark.slow
def test_long_load(request, capsys):
    expr = request.config.getoption("markexpr") or ""
    if "slow" not in expr.replace("not slow", ""):
        pytest.skip("slow: run with -m slow")
    res = run_load(conns=64, calls=1000, runs=2)
    with capsys.disabled():
        print(f"\nlong load: {res}")
    # growth from the end of run 1 to the end of run 2 (64,000 calls): a leak of even
    # 100 bytes per call would show as 6 MiB
    check(res, growth_kib=4 * MiB)
