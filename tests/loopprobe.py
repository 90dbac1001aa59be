"""The loop-lag probe: a second client that reads a small file every 50 ms while a hostile
test runs, and fails the test when any one read waited more than a second.

toolsrv serves everyone from one asyncio loop (issue 43): work whose cost someone else's
bytes set must never run on it.  A hostile test proves that by running under a probe:

    def test_something_hostile(srv, loop_probe):
        with loop_probe(srv.addr):
            ... the hostile client does its worst ...

or, without the fixture, `with LoopProbe(addr): ...`.  On leaving the block the probe
stops and asserts that every read was answered within LIMIT seconds; a read still in
flight counts for as long as it has waited.  The probe waits on events (each read's
answer), never on a fixed sleep for its verdict: a busy machine makes reads slower, but a
second of silence from an idle-looking server is a stalled loop, not a slow host.

The file read is `revision` by default: synthetic, a few bytes, answered from memory.
"""
from __future__ import annotations

import threading
import time
from typing import Any, Callable, Iterator

import pytest

from toolsrv.cli.client import Client

PERIOD = 0.05       # seconds between reads
LIMIT = 1.0         # the longest any read may wait


class LoopStalled(AssertionError):
    pass


class LoopProbe:
    """Reads `path` on its own connection every PERIOD seconds; `worst` is the longest
    wait seen.  Use as a context manager; leaving it asserts worst <= limit."""

    def __init__(self, addr: str, path: str = "revision", limit: float = LIMIT,
                 **connect: Any) -> None:
        self.addr, self.path, self.limit, self.connect = addr, path, limit, connect
        self.worst = 0.0
        self.reads = 0
        self.error: BaseException | None = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._inflight: float | None = None
        self._thread = threading.Thread(target=self._run, name="loop-probe", daemon=True)
        self._client: Client | None = None

    def _run(self) -> None:
        try:
            self._client = Client.connect(self.addr, timeout=30, **self.connect)
            self._client.read(self.path)
            self._ready.set()
            while not self._stop.is_set():
                t0 = time.monotonic()
                self._inflight = t0
                self._client.read(self.path)
                self._inflight = None
                self.worst = max(self.worst, time.monotonic() - t0)
                self.reads += 1
                self._stop.wait(PERIOD)
        except BaseException as e:     # noqa: BLE001 - reported by stop()
            self.error = e
            self._ready.set()

    def start(self) -> "LoopProbe":
        self._thread.start()
        assert self._ready.wait(60), f"the probe could not reach {self.addr}"
        if self.error is not None:
            raise AssertionError(f"the probe could not read {self.path}: {self.error}")
        return self

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(self.limit + 5)
        t0 = self._inflight
        if t0 is not None:              # a read never answered counts as long as it waited
            self.worst = max(self.worst, time.monotonic() - t0)
        if self._client is not None:
            try:
                self._client.close()
            except OSError:
                pass
        if self.error is not None and not isinstance(self.error, (OSError, EOFError)):
            raise AssertionError(f"the probe's read of {self.path} failed: {self.error}")
        if self.worst > self.limit:
            raise LoopStalled(f"another client waited {self.worst:.2f} s for {self.path} "
                              f"(limit {self.limit} s, {self.reads} reads): the event loop "
                              "was stalled")

    def __enter__(self) -> "LoopProbe":
        return self.start()

    def __exit__(self, typ: Any, *rest: Any) -> None:
        if typ is None:
            self.stop()
        else:                           # the test failed already: stop without masking it
            self._stop.set()
            self._thread.join(self.limit + 5)


@pytest.fixture
def loop_probe() -> Iterator[Callable[..., LoopProbe]]:
    """A factory of probes: `with loop_probe(addr): ...`; any probe left running at the
    test's end is stopped and checked."""
    made: list[LoopProbe] = []

    def make(addr: str, **kw: Any) -> LoopProbe:
        p = LoopProbe(addr, **kw)
        made.append(p)
        return p

    yield make
    for p in made:
        if p._thread.is_alive() and not p._stop.is_set():
            p.stop()
