"""Suite-wide rules.

Tests marked `slow` (the long fuzz and load runs) run only when `-m slow`
selects them (make test-slow); a plain `pytest` skips them, saying how to run them.
"""
from __future__ import annotations

import pytest


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("slow"):
        expr = item.config.getoption("markexpr") or ""
        if "slow" not in expr.replace("not slow", ""):
            pytest.skip("slow: run with -m slow")
