"""Suite-wide rules.

Tests marked `slow` (the long fuzz and load runs) run only when `-m slow`
selects them (make test-slow); a plain `pytest` skips them, saying how to run them.

The tests live in folders that mirror the package's (tests/serve/, tests/tree/, ...);
the helpers they share (apphelpers.py, fakes.py, shellhelpers.py) stay here, in tests/,
which is put on sys.path for them.  The sandbox's helpers are in tests/tools/, which
the tests that use them add themselves.

Every test runs with its working directory outside the checkout (tests/outside.py), so
each server a test starts, in process or not, starts where users start it.
"""
from __future__ import annotations

import os
import sys

import pytest

_HERE = os.path.dirname(os.path.abspath(__file__))
if _HERE not in sys.path:
    sys.path.insert(0, _HERE)


from outside import OUTSIDE  # noqa: E402


@pytest.fixture(autouse=True, scope="session")
def _outside_the_checkout():
    """The test process works in OUTSIDE for the session: servers start from there."""
    before = os.getcwd()
    os.chdir(OUTSIDE)
    yield OUTSIDE
    os.chdir(before)


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("slow"):
        expr = item.config.getoption("markexpr") or ""
        if "slow" not in expr.replace("not slow", ""):
            pytest.skip("slow: run with -m slow")


from loopprobe import loop_probe  # noqa: E402,F401  (the loop-lag probe: tests/loopprobe.py)
