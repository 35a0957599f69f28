"""The watchdog that tells a shadow it stood still itself (reference_impl/stall_watch.py)."""

from __future__ import annotations

import asyncio
import time

from reference_impl.stall_watch import SLACK, TICK, StallWatch


def test_a_blocked_loop_is_seen_and_an_ordinary_one_is_not() -> None:
    async def main() -> tuple[bool, bool, bool]:
        watch = StallWatch(time.time)
        task = asyncio.create_task(watch.run())
        start = time.time()
        await asyncio.sleep(10 * TICK)
        # a loop that only waits has not stood still
        ordinary = watch.stood_still_since(start)
        before = time.time()
        time.sleep(SLACK + 0.3)  # the whole loop stands still, as under SIGSTOP
        await asyncio.sleep(3 * TICK)
        seen = watch.stood_still_since(before)
        # the stall ended after ``before`` and before now: nothing since now
        later = watch.stood_still_since(time.time())
        task.cancel()
        return ordinary, seen, later

    ordinary, seen, later = asyncio.run(main())
    assert not ordinary
    assert seen
    assert not later


def test_a_stall_ending_now_is_seen_before_the_watchdog_wakes() -> None:
    """On resuming, a timer that ran out during the stall may be handled first: asked
    then, before the watchdog's own wake-up, the watch already knows."""

    async def main() -> tuple[bool, bool]:
        watch = StallWatch(time.time)
        task = asyncio.create_task(watch.run())
        await asyncio.sleep(3 * TICK)
        before = time.time()
        time.sleep(SLACK + 0.3)  # the loop stands still; nothing else has run since
        seen = watch.stood_still_since(before)  # asked at once, as a timeout handler
        await asyncio.sleep(3 * TICK)
        later = watch.stood_still_since(time.time())
        task.cancel()
        return seen, later

    seen, later = asyncio.run(main())
    assert seen
    assert not later
