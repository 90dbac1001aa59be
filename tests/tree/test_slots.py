"""FairSlots (issue 25, section 3): caps per session and per agent, and a freed slot goes to
the waiting call of the session that holds the fewest, ahead of a hog's next call."""
from __future__ import annotations

import asyncio

import pytest

from toolsrv.tree.calls.slots import FairSlots, default_caps


def test_default_caps_are_half_and_half_again():
    assert default_caps(16, None, None) == (8, 4)
    assert default_caps(1, None, None) == (1, 1)
    assert default_caps(4, 10, 10) == (4, 4)           # never above the level above
    assert default_caps(16, 3, None) == (3, 1)


async def _hold(slots: FairSlots, s: str, a: str, started: list, gate: asyncio.Event) -> None:
    async with slots.hold(s, a):
        started.append((s, a))
        await gate.wait()


async def _settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def test_a_session_never_holds_more_than_its_share():
    async def main() -> None:
        slots, started = FairSlots(4), []
        gates = [asyncio.Event() for _ in range(8)]
        tasks = [asyncio.create_task(_hold(slots, "S1", f"a{i % 2}", started, gates[i]))
                 for i in range(8)]
        await _settle()
        assert len(started) == 2 and slots.held("S1") == 2   # per session: 2 of 4
        other = asyncio.Event()
        t = asyncio.create_task(_hold(slots, "S2", "b", started, other))
        await _settle()
        assert started[-1] == ("S2", "b")                    # at once: a slot was free
        other.set()
        for g in gates:
            g.set()
        await asyncio.gather(t, *tasks)
        assert slots.used == 0 and not slots.sessions and not slots.agents
    asyncio.run(main())


def test_a_freed_slot_goes_to_the_session_holding_fewest():
    async def main() -> None:
        slots, started = FairSlots(4, per_session=4, per_agent=4), []   # no caps: order alone
        gates = [asyncio.Event() for _ in range(8)]
        hog = [asyncio.create_task(_hold(slots, "S1", "a", started, gates[i]))
               for i in range(8)]
        await _settle()
        assert started == [("S1", "a")] * 4
        mine = asyncio.Event()
        t = asyncio.create_task(_hold(slots, "S2", "b", started, mine))
        await _settle()
        assert len(started) == 4                             # all four held: it waits
        gates[0].set()                                       # one run ends
        await _settle()
        assert started[4] == ("S2", "b") and len(started) == 5
        mine.set()
        for g in gates:
            g.set()
        await asyncio.gather(t, *hog)
        assert started.count(("S1", "a")) == 8 and slots.used == 0
    asyncio.run(main())


def test_agents_of_one_session_share_it_fairly():
    async def main() -> None:
        slots, started = FairSlots(2, per_session=2, per_agent=2), []
        gates = [asyncio.Event() for _ in range(4)]
        hog = [asyncio.create_task(_hold(slots, "S", "a", started, gates[i])) for i in range(4)]
        await _settle()
        mine = asyncio.Event()
        t = asyncio.create_task(_hold(slots, "S", "b", started, mine))
        await _settle()
        gates[0].set()
        await _settle()
        assert started[2] == ("S", "b")          # ahead of the hog's third call
        mine.set()
        for g in gates:
            g.set()
        await asyncio.gather(t, *hog)
    asyncio.run(main())


@pytest.mark.parametrize("granted_first", [False, True])
def test_a_cancelled_waiter_gives_back_what_it_got(granted_first):
    async def main() -> None:
        slots, started = FairSlots(1), []
        gate = asyncio.Event()
        first = asyncio.create_task(_hold(slots, "S1", "a", started, gate))
        await _settle()
        waiter = asyncio.create_task(_hold(slots, "S2", "b", started, asyncio.Event()))
        await _settle()
        if granted_first:
            gate.set()                           # the slot is granted to the waiter...
            await first
            waiter.cancel()                      # ...and the waiter cancelled at once
        else:
            waiter.cancel()
        with pytest.raises(asyncio.CancelledError):
            await waiter
        gate.set()
        await first
        assert slots.used == 0 and not slots.waiting and not slots.sessions
        async with slots.hold("S3", "c"):
            assert slots.used == 1
    asyncio.run(main())
