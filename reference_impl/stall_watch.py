"""Did this node itself stand still? A watchdog on the node's own event loop.

A shadow that was frozen (SIGSTOP, a paused VM) or starved of CPU cannot tell a
primary that did not answer from its own silence: a heartbeat whose timer ran out
while the shadow stood still says nothing of the primary. The watchdog wakes every
TICK seconds; a wake-up later than TICK + SLACK means the loop stood still meanwhile,
and the shadow then measures the primary's unreachability from the end of that stall
(PR-1: a live primary's copies are never promoted because the shadow paused).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

#: how often the watchdog wakes up
TICK = 0.05
#: a wake-up this much later than due means the loop stood still (an ordinary busy
#: loop on a loaded machine lags far less)
SLACK = 0.5


class StallWatch:
    def __init__(self, now: Callable[[], float]) -> None:
        self._now = now
        #: when (on the node's clock) the latest stall ended; 0: never stood still
        self.last_stall_end = 0.0
        #: when the watchdog last woke (monotonic); None until it runs
        self._woke: float | None = None

    def stood_still_since(self, since: float) -> bool:
        """Whether the node stood still at some time after ``since`` (node clock).

        A stall that is only now ending counts too: when the loop resumes, a timer that
        ran out meanwhile (a heartbeat's) may be handled before the watchdog's own
        wake-up, and would otherwise count this node's stall against the primary."""
        self._note_overdue()
        return self.last_stall_end > since

    def _note_overdue(self) -> None:
        """Record a stall ending now if the watchdog woke too long ago."""
        if self._woke is not None and time.monotonic() - self._woke > TICK + SLACK:
            self.last_stall_end = self._now()

    async def run(self) -> None:
        self._woke = time.monotonic()
        while True:
            await asyncio.sleep(TICK)
            self._note_overdue()
            self._woke = time.monotonic()
