"""The loop watches itself (issue 43, toolsrv/serve/loopwatch.py): a forced stall of the
server's event loop shows in /status's worst lag and, once, in the server's log with the
function that ran; an idle loop shows no stall."""
from __future__ import annotations

import logging
import re
import time

from apphelpers import AppThread, tools_dir
from serverhelpers import stop_clean, wait_for
from toolsrv.cli.client import Client
from toolsrv.serve.loopwatch import where


def status(addr: str) -> str:
    with Client.connect(addr) as c:
        return c.read("status").decode()


def loop_line(text: str) -> str:
    return next(line for line in text.splitlines() if line.startswith("loop: "))


def hold_the_loop() -> None:
    time.sleep(0.6)              # the forced stall: what the log must name


def test_a_stall_shows_in_status_and_once_in_the_log(caplog):
    app = AppThread([tools_dir()]).start()
    try:
        line = loop_line(status(app.addr))
        m = re.fullmatch(r"loop: lag [\d.]+ ms now, worst [\d.]+ ms in the last 60 s; "
                         r"(\d+) stalls? past 250 ms since start(, the last .*)?", line)
        assert m, line
        before = int(m.group(1))        # a start-up on a busy host may have stalled too
        with caplog.at_level(logging.WARNING, logger="toolsrv"):
            app.call(hold_the_loop)
            assert wait_for(lambda: f"; {before + 1} stall" in loop_line(status(app.addr)), 30)
        line = loop_line(status(app.addr))
        worst = float(re.search(r"worst ([\d.]+) ms", line).group(1))
        assert worst > 250, line
        assert "hold_the_loop (test_loopwatch.py:" in line, line
        said = [r.getMessage() for r in caplog.records if "hold_the_loop" in r.getMessage()]
        assert len(said) == 1, said
        assert re.match(r"event loop stalled 0\.\d\d s \(every client waited; its thread "
                        r"used 0\.\d\d s of CPU meanwhile\): it was running hold_the_loop "
                        r"\(test_loopwatch\.py:\d+\) < ", said[0]), said
    finally:
        stop_clean(app)


def test_where_is_the_innermost_frames_first():
    def inner():
        import sys
        return where(sys._getframe())
    got = inner()
    assert got.startswith("inner (test_loopwatch.py:")
    assert " < test_where_is_the_innermost_frames_first (test_loopwatch.py:" in got
    assert got.count(" < ") == 3            # FRAMES: four frames at most
