"""The policy's counters: calls in the last minute, calls under way, sessions made.

Calls per minute.  A sliding window, exact and O(1) a call: a principal allowed N calls a
minute keeps a ring of the times of its last N calls allowed.  A call is allowed when
the oldest of them (the one it would overwrite) is a minute old or more, so no 60 s span
ever holds more than N; the refusal says when that oldest one leaves the window (retry
in Ns).  Memory: N floats a principal that has called (N is at most rules.MAX_RATE).

Runs.  Calls under way (queued or running) a principal holds: taken as a call starts,
given back by the call's end (scheduler.Call.waiters, which every end runs once).

Sessions.  The sessions a principal made that are still alive (those restored from the
state at start are nobody's: made before this server could tell).

Everything runs on the event loop's thread; `clock` is time.monotonic (a test's may be
another).
"""
from __future__ import annotations

import time
from array import array
from typing import Any, Callable

WINDOW = 60.0


class Window:
    """The times of one principal's last `n` calls allowed, in a ring."""

    __slots__ = ("times", "at")

    def __init__(self, n: int) -> None:
        self.times = array("d", [float("-inf")]) * n
        self.at = 0

    def take(self, now: float) -> float:
        """0 when a call is allowed now (and counted), else the seconds until one is."""
        oldest = self.times[self.at]
        if now - oldest < WINDOW:
            return oldest + WINDOW - now
        self.times[self.at] = now
        self.at = (self.at + 1) % len(self.times)
        return 0.0


class Counters:
    """Every principal's window, calls under way and sessions."""

    def __init__(self, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.windows: dict[tuple[str, int], Window] = {}
        self.runs: dict[str, int] = {}
        self.sessions: dict[str, list[Any]] = {}

    def take_call(self, who: str, n: int) -> float:
        """Count a call of `who` against `n` a minute: 0, or seconds to wait."""
        w = self.windows.get((who, n))
        if w is None:
            if n == 0:
                return WINDOW
            w = self.windows[(who, n)] = Window(n)    # a new limit: a fresh window
        return w.take(self.clock())

    def running(self, who: str) -> int:
        return self.runs.get(who, 0)

    def run_started(self, who: str) -> Callable[[], None]:
        """Count a call under way; the function that gives it back (once)."""
        self.runs[who] = self.runs.get(who, 0) + 1
        done = [False]

        def ended() -> None:
            if not done[0]:
                done[0] = True
                left = self.runs.get(who, 1) - 1
                if left:
                    self.runs[who] = left
                else:
                    self.runs.pop(who, None)
        return ended

    def alive_sessions(self, who: str) -> int:
        live = [s for s in self.sessions.get(who, ()) if getattr(s, "alive", False)]
        if live:
            self.sessions[who] = live
        else:
            self.sessions.pop(who, None)
        return len(live)

    def session_made(self, who: str, s: Any) -> None:
        self.sessions.setdefault(who, []).append(s)
