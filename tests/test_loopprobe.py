"""The loop-lag probe itself (tests/loopprobe.py): it passes a server that answers, and
fails one whose loop is held for longer than its limit."""
from __future__ import annotations

import time

import pytest

from apphelpers import AppThread, tools_dir
from loopprobe import LoopProbe, LoopStalled


@pytest.fixture
def srv():
    app = AppThread([tools_dir()]).start()
    yield app
    app.cleanup()


def test_a_serving_loop_passes(srv, loop_probe):
    with loop_probe(srv.addr) as p:
        end = time.monotonic() + 0.5
        while p.reads < 3 and time.monotonic() < end + 30:
            time.sleep(0.05)
    assert p.reads >= 3


def test_a_held_loop_fails_the_probe(srv):
    p = LoopProbe(srv.addr, limit=0.5).start()
    srv.call(lambda: time.sleep(1.5))      # the loop itself does 1.5 s of work
    with pytest.raises(LoopStalled, match="event loop was stalled"):
        p.stop()
