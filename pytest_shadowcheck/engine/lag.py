"""The harness's own lateness, recorded in the history while a scenario runs.

The fault proxies, the sinks and the clients all run on the scenario's event loop. On
an overloaded machine (two suites at once on two cores, a CI neighbour) that loop
wakes late, and every line the harness relays, every reply its sinks give and every
time it stamps is late with it. A timing check must not blame the MTA for a delay the
harness made: it reads these ``lag`` events (``History.lag``) and refuses to judge a
miss the harness's own delay could explain.

A task sleeps one :data:`PERIOD` at a time and records how much later than asked it
woke, when that is at least :data:`THRESHOLD` (a quiet machine records nothing).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from pytest_shadowcheck.history import History

__all__ = ["PERIOD", "THRESHOLD", "watching_lag"]

#: how often the loop is probed: short enough that a stall of a tenth of a second shows
PERIOD = 0.05
#: lateness below this is timer noise, not load
THRESHOLD = 0.01


async def _watch(history: History) -> None:
    loop = asyncio.get_running_loop()
    while True:
        asked = loop.time() + PERIOD
        await asyncio.sleep(PERIOD)
        late = loop.time() - asked
        if late >= THRESHOLD:
            history.record("lag", late=round(late, 4))


@contextlib.asynccontextmanager
async def watching_lag(history: History) -> AsyncIterator[None]:
    """Record the loop's lateness into ``history`` for as long as the block runs."""
    task = asyncio.create_task(_watch(history), name="shadowcheck-lag")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
