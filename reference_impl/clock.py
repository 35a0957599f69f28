"""The node's clock: real time, or a virtual time moved only by the control API.

Every transport timer (heartbeats, promotion, retries, expiry, Safety Net
hold, the 12-hour broadcast) waits on this clock, so a harness can run
day-long windows exactly and in milliseconds. Socket timeouts are not
transport timers: they always use real time.
"""

from __future__ import annotations

import asyncio
import heapq
import itertools
import time


class Clock:
    """Interface shared by both clocks."""

    mode = "real"

    def now(self) -> float:
        raise NotImplementedError

    async def sleep_until(self, deadline: float) -> None:
        raise NotImplementedError

    async def sleep(self, seconds: float) -> None:
        await self.sleep_until(self.now() + seconds)

    async def wait(self, event: asyncio.Event, timeout: float | None) -> bool:
        """Wait for ``event`` or ``timeout`` clock seconds; True when the event fired."""
        if event.is_set():
            return True
        if timeout is None:
            await event.wait()
            return True
        # The deadline is taken now: a task starts on a later turn of the loop, and a
        # clock advanced in between would otherwise push the deadline on by as much.
        deadline = self.now() + timeout
        waiter = asyncio.ensure_future(event.wait())
        sleeper = asyncio.ensure_future(self.sleep_until(deadline))
        try:
            await asyncio.wait({waiter, sleeper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (waiter, sleeper):
                task.cancel()
        return event.is_set()


class RealClock(Clock):
    mode = "real"

    def now(self) -> float:
        return time.time()

    async def sleep_until(self, deadline: float) -> None:
        delay = deadline - time.time()
        if delay > 0:
            await asyncio.sleep(delay)


class VirtualClock(Clock):
    """Time stands still until :meth:`advance` or :meth:`set` moves it."""

    mode = "virtual"

    def __init__(self, start: float) -> None:
        self._now = start
        self._sleepers: list[tuple[float, int, asyncio.Future[None]]] = []
        self._order = itertools.count()

    def now(self) -> float:
        return self._now

    async def sleep_until(self, deadline: float) -> None:
        if deadline <= self._now:
            # Yield anyway so that loops over a frozen clock cannot starve the loop.
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        heapq.heappush(self._sleepers, (deadline, next(self._order), future))
        await future

    def advance(self, seconds: float) -> float:
        if seconds < 0:
            raise ValueError("a clock cannot go backwards")
        return self.set(self._now + seconds)

    def set(self, moment: float) -> float:
        if moment < self._now:
            raise ValueError("a clock cannot go backwards")
        self._now = moment
        while self._sleepers and self._sleepers[0][0] <= moment:
            _, _, future = heapq.heappop(self._sleepers)
            if not future.done():
                future.set_result(None)
        return self._now
