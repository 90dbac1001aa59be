# toolsrv/run/warmpool.py — the idle warm inits, by kind, and what lets them go.
#
# Theory of operation.  A warm init (toolsrv/run/init/warm.py) serves only calls of its
# kind (warmplan.WarmKind: the interpreter, its start-up environment, uid, netns, mounts).
# Once it has reported it waits here, in its kind's pool, until the launcher hands it the
# next call of that kind (take: the most recently used, its pages warm).  Three things let
# one go:
#   time     its kind not called for WARM_IDLE seconds (a timer runs while any is idle);
#   a burst  over: beyond WARM_KEEP of a kind once the launcher's IDLE_TRIM has passed
#            without a spawn (trim);
#   memory   the budget, the launcher's limits["warm_memory"] (--max-warm-memory): past
#            it, the oldest init of the kind called longest ago goes first.  An init
#            counts its PSS with its standby child, read as it goes idle (at most every
#            RSS_EVERY seconds: a warm init does not grow between calls).
#
# Invariant.  Every init here is idle, alive as far as we know (one found dead when taken
# is counted lost), and filed under the kind it was made warm for.
from __future__ import annotations

import asyncio
import collections

from toolsrv.run.handle import Spare
from toolsrv.run.warmplan import WarmKind

WARM_KEEP = 2  # warm inits kept per kind once IDLE_TRIM has passed without a spawn
WARM_IDLE = 60.0  # seconds without a call of its kind: a kind's warm inits are let go
RSS_EVERY = 1.0  # seconds: an idle warm init's memory is read again at most this often


class WarmPool:
    """One launcher's idle warm inits, by kind (the module's header)."""

    def __init__(self, limits: dict, max_idle: int) -> None:
        self.idle: dict[WarmKind, collections.deque[Spare]] = {}
        self.used: dict[WarmKind, float] = {}  # when a kind was last called for
        self.started = 0  # inits turned warm
        self.lost = 0  # warm inits found dead while idle
        self.shed = 0  # idle warm inits let go for the memory budget
        self._limits = limits  # the launcher's: "warm_memory" is the budget
        self._max_idle = max_idle  # of one kind
        self._timer: asyncio.TimerHandle | None = None

    def take(self, kind: WarmKind, now: float) -> Spare | None:
        """The most recently used idle init of this kind, or None; either way the kind is
        called for now."""
        self.used[kind] = now
        pool = self.idle.get(kind)
        return pool.pop() if pool else None

    def made(self) -> None:
        """An idle cold init was made warm for a call."""
        self.started += 1
        self._timer_soon()

    def put(self, init: Spare, now: float) -> bool:
        """File an init of a kind that has reported (or close it, when its kind has no
        room); True when more than WARM_KEEP of its kind are idle now (the launcher's trim
        lets the rest go once the burst is over)."""
        assert init.kind is not None
        pool = self.idle.setdefault(init.kind, collections.deque())
        if len(pool) >= self._max_idle:
            init.close()
            return False
        pool.append(init)
        init.rss = init.measure(now, RSS_EVERY)
        self._bound()
        self._timer_soon()
        return len(pool) > WARM_KEEP

    def trim(self) -> None:
        """After a burst: WARM_KEEP of each kind are kept, the least recently used go."""
        for pool in self.idle.values():
            while len(pool) > WARM_KEEP:
                pool.popleft().close()

    def pids(self) -> list[tuple[WarmKind, int]]:
        """(kind, pid) of every idle warm init."""
        out = []
        for kind, pool in self.idle.items():
            for init in pool:
                pid = init.pid()
                if pid is not None:
                    out.append((kind, pid))
        return out

    def budget(self) -> int | None:
        """Bytes the idle warm inits may hold together (None: no bound)."""
        return self._limits.get("warm_memory")

    def held(self) -> int:
        """Bytes they hold, as last read (their PSS, standby children included)."""
        return sum(i.rss for pool in self.idle.values() for i in pool)

    def close(self) -> None:
        """Let every idle warm init go (the zygote died, or the launcher stops)."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        for pool in self.idle.values():
            while pool:
                pool.popleft().close()
        self.idle.clear()

    def _timer_soon(self) -> None:
        if self._timer is None:
            self._timer = asyncio.get_running_loop().call_later(WARM_IDLE / 4, self._expire)

    def _expire(self) -> None:
        """Let go the warm inits of a kind not called for WARM_IDLE seconds."""
        self._timer = None
        now = asyncio.get_running_loop().time()
        for kind in list(self.idle):
            if now - self.used.get(kind, 0.0) >= WARM_IDLE:
                for init in self.idle.pop(kind):
                    init.close()
                self.used.pop(kind, None)
        if self.idle:
            self._timer_soon()

    def _bound(self) -> None:
        """Idle warm inits over the memory budget: let go the least recently used (of the
        kind called longest ago) until they fit; time bounds them as well (_expire)."""
        budget = self.budget()
        if budget is None:
            return
        total = self.held()
        while total > budget:
            kinds = [k for k, pool in self.idle.items() if pool]
            if not kinds:
                break
            kind = min(kinds, key=lambda k: self.used.get(k, 0.0))
            init = self.idle[kind].popleft()
            total -= init.rss
            init.close()
            self.shed += 1
