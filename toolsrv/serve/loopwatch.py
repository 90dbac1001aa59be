"""The loop watches itself: how late the server's one event loop runs, and what held it.

Theory of operation.  Every client is served by one asyncio loop, so work on it that
someone else's bytes make long stalls everyone (issue 43).  Two watchers:

  tick     a task on the loop sleeps PERIOD and measures how late it woke: the lag now,
           and the worst of each second of the last WINDOW seconds (a ring of maxima).
           A lag past STALL is a stall: counted, and logged once, on the loop, when it
           ends, with its length, the CPU time the loop's thread used meanwhile (little:
           it waited, on a lock or a busy host; as much: it computed) and what the loop
           was running.
  thread   a daemon thread sleeps until the next tick is STALL late; when it is, the loop
           is stalled now, and the thread takes the loop thread's stack
           (sys._current_frames()) for the tick to log.  A loop that does not come back
           within HUNG seconds is logged by the thread itself, once.

Cost: ten wakes a second on the loop, three or four of the thread; nothing per request.
`/status` shows `status_line()` (doc/toolsrv.4.md).
"""
from __future__ import annotations

import asyncio
import logging
import os
import sys
import threading
import time
from typing import Any

log = logging.getLogger("toolsrv")

PERIOD = 0.1        # seconds the tick sleeps
STALL = 0.25        # a tick this late is a stall: logged, with what ran
WINDOW = 60         # seconds the worst lag is kept for
HUNG = 5.0          # a stall this long is logged by the thread, before it ends
FRAMES = 4          # frames of the loop's stack a stall's line shows, innermost first


def where(frame: Any) -> str:
    """A stack in one line: `fn (file.py:12) < caller (other.py:40) < ...`."""
    out: list[str] = []
    while frame is not None and len(out) < FRAMES:
        code = frame.f_code
        out.append(f"{code.co_name} ({os.path.basename(code.co_filename)}:{frame.f_lineno})")
        frame = frame.f_back
    return " < ".join(out) or "?"


class LoopWatch:
    """Start on the loop it watches (start()); stop() before the loop ends."""

    def __init__(self) -> None:
        self.due = time.monotonic() + PERIOD     # when the tick should wake next
        self.lag = 0.0                           # the last tick's lateness
        self.ring = [(0, 0.0)] * WINDOW          # (second, worst lag in it)
        self.stalls = 0
        self.last_stall: tuple[float, float, str] | None = None   # when, how long, where
        self.caught: tuple[float, str] = (0.0, "")   # (the due it was late for, the stack)
        self._loop_thread = 0
        self._task: asyncio.Task[None] | None = None
        self._stop = threading.Event()

    def start(self) -> "LoopWatch":
        self._loop_thread = threading.get_ident()
        self._task = asyncio.get_running_loop().create_task(self._tick())
        threading.Thread(target=self._watch, name="loop-watch", daemon=True).start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._task is not None:
            self._task.cancel()

    async def _tick(self) -> None:
        while True:
            self.due = time.monotonic() + PERIOD
            cpu = time.thread_time()
            await asyncio.sleep(PERIOD)
            now = time.monotonic()
            self.lag = lag = max(0.0, now - self.due)
            sec = int(now)
            was, worst = self.ring[sec % WINDOW]
            self.ring[sec % WINDOW] = (sec, max(worst, lag) if was == sec else lag)
            if lag > STALL:
                self._stalled(now, lag, time.thread_time() - cpu)

    def _stalled(self, now: float, lag: float, cpu: float) -> None:
        due, stack = self.caught
        ran = stack if due == self.due else "?"
        self.stalls += 1
        self.last_stall = (now, lag, ran)
        log.warning("event loop stalled %.2f s (every client waited; its thread used %.2f s "
                    "of CPU meanwhile): it was running %s", lag, cpu, ran)

    def _watch(self) -> None:
        said = 0.0
        while not self._stop.wait(self._nap()):
            due = self.due
            late = time.monotonic() - due
            if late < STALL:
                continue
            if self.caught[0] != due:
                frame = sys._current_frames().get(self._loop_thread)
                self.caught = (due, where(frame))
            elif late > HUNG and said != due:
                said = due
                log.warning("event loop stalled for %.0f s so far: it is running %s",
                            late, self.caught[1])

    def _nap(self) -> float:
        """Until the next tick would be STALL late; while the loop is stalled, a while."""
        due = self.due
        if self.caught[0] == due:
            return 0.05
        return max(0.01, due + STALL - time.monotonic())

    def worst(self) -> float:
        """The worst lag of the last WINDOW seconds."""
        now = int(time.monotonic())
        return max((lag for sec, lag in self.ring if now - sec < WINDOW), default=0.0)

    def status_line(self) -> str:
        line = (f"loop: lag {self.lag * 1000:.1f} ms now, worst {self.worst() * 1000:.1f} ms "
                f"in the last {WINDOW} s; {self.stalls} stall{'s' if self.stalls != 1 else ''}"
                f" past {STALL * 1000:.0f} ms since start")
        if self.last_stall is not None:
            when, lag, ran = self.last_stall
            line += (f", the last {time.monotonic() - when:.0f} s ago: {lag:.2f} s in "
                     f"{ran}")
        return line + "\n"
