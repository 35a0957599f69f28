"""The harness's own lateness, recorded in the history while a scenario runs.

The fault proxies, the sinks and the clients all run on the scenario's event loop. On
an overloaded machine (two suites at once on two cores, a CI neighbour) that loop
wakes late, and every line the harness relays, every reply its sinks give and every
time it stamps is late with it. A timing check must not blame the MTA for a delay the
harness made: it reads these ``lag`` events (``History.lag``) and refuses to judge a
miss the harness's own delay could explain.

A task sleeps one :data:`PERIOD` at a time and records how much later than asked it
woke, beyond :data:`NOISE` (a timer's rounding: a quiet machine records nothing), once
that reaches :data:`THRESHOLD`: smaller lateness is carried to the next probes, so a
loaded machine that wakes the loop 5 ms late at every probe is recorded, not ignored.

The MTA's own processes are starved on such a machine too: ready to run, they wait in
the kernel's run queue, and a timer the MTA set fires late for no fault of its design.
At each of its wakings the same task reads how long each node's processes waited so
(``/proc/PID/task/*/schedstat``, its second field, for the nodes whose pid the target
reports, and for every process below each: workers, delivery processes) and records
``wait`` events from :data:`THRESHOLD` up (a smaller wait is carried to the next
reading). Where the kernel keeps no such figure (no ``/proc``, a container's pid not
given) nothing is recorded and the checks grant the harness's lateness alone.

A ``wait`` event also says how long the node's processes ran on a CPU over the same
interval (``ran``, schedstat's first field): a node silent on every link while it
neither ran nor waited was blocked (its disk, a lock, a stop signal not yet lifted),
one that ran was busy with work of its own. No check reads it; it is there for the
reader of a history who must tell the two apart (sessions 25-34's "no fault"
promotions in durability_pause could not).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Callable, Mapping

from pytest_shadowcheck.history import History

__all__ = ["PERIOD", "THRESHOLD", "scheduler_times", "watching_lag"]

#: how often the loop is probed: short enough that a stall of a tenth of a second shows
PERIOD = 0.05
#: lateness is recorded once it adds up to this (a record every probe would be noise)
THRESHOLD = 0.01
#: how late a probe wakes on a quiet machine (epoll rounds its timeout up to the
#: millisecond, and the wake-up itself takes a little): not counted as load
NOISE = 0.002
#: the nodes' pids by node name, asked afresh each time (a restarted node has a new one)
Pids = Callable[[], Mapping[str, "int | None"]]


#: seconds a process's threads have (run on a CPU, waited for one), since it started
Times = tuple[float, float]


def scheduler_times(pid: int) -> dict[int, Times] | None:
    """Seconds the threads of process ``pid`` and of each of its descendants (an MTA's
    workers, its delivery processes) have spent on a CPU and ready to run but waiting
    for one, by pid, since each started; None when the kernel does not say (or ``pid``
    is gone, or no process of it ever waited)."""
    # plain os calls: pathlib's objects made a reading 1.5x the CPU (20 a second a node)
    times: dict[int, Times] = {}
    todo = [pid]
    while todo:
        current = todo.pop()
        tasks = f"/proc/{current}/task/"
        try:
            threads = os.listdir(tasks)
        except OSError:
            if current == pid:
                return None
            continue  # a descendant that ended meanwhile
        ran = waited = 0
        for thread in threads:
            with contextlib.suppress(OSError, IndexError, ValueError):
                fields = _read(f"{tasks}{thread}/schedstat").split()
                ran, waited = ran + int(fields[0]), waited + int(fields[1])
            with contextlib.suppress(OSError, ValueError):
                todo += [int(c) for c in _read(f"{tasks}{thread}/children").split()]
        times[current] = (ran / 1e9, waited / 1e9)
    return times if any(w for _, w in times.values()) else None


def _read(path: str) -> bytes:
    with open(path, "rb") as file:
        return file.read()


class _NodeWaits:
    """The run-queue wait of each node's processes, recorded once it reaches a threshold.

    A wait under :data:`THRESHOLD` is not recorded but not forgotten either: it is kept
    pending and added to the next readings' until the sum reaches the threshold, so a
    node waiting 8 ms in every 50 ms reading (a loaded machine) is recorded as 16 ms
    every other reading instead of not at all. The time the node ran on a CPU is
    gathered over the same interval. ``reader`` is :func:`scheduler_times` (the tests
    give readings)."""

    def __init__(
        self,
        pids: Pids,
        reader: Callable[[int], dict[int, Times] | None] = scheduler_times,
    ) -> None:
        self._pids = pids
        self._reader = reader
        #: node -> its pid, each process's times so far by pid, the wait and the run
        #: not yet recorded, and the time they began to gather
        self._last: dict[str, tuple[int, dict[int, Times], Times, float]] = {}

    def read(self, history: History) -> None:
        for node, pid in self._pids().items():
            now = self._reader(pid) if pid else None
            if pid is None or now is None:
                self._last.pop(node, None)
                continue
            last = self._last.get(node)
            at = history.now()
            if last is None or last[0] != pid:
                self._last[node] = (pid, now, (0.0, 0.0), at)
                continue  # a first reading, or a new process: nothing to compare
            _, before, (ran, pending), since = last
            # a process born since the last reading ran and waited all its life in the
            # interval; one that ended took its figures with it (what it did since the
            # last reading is not counted); a pid the kernel gave a new process counts
            # from the new one's figures
            for p, (r, w) in now.items():
                r0, w0 = before.get(p, (0.0, 0.0))
                ran, pending = ran + max(0.0, r - r0), pending + max(0.0, w - w0)
            if pending < THRESHOLD:
                self._last[node] = (pid, now, (ran, pending), since)
                continue
            self._last[node] = (pid, now, (0.0, 0.0), at)
            # over: the interval the wait gathered in (a late loop reads less often)
            history.record(
                "wait", node=node, waited=round(pending, 4), over=round(at - since, 4),
                ran=round(ran, 4),
            )  # fmt: skip


class _LoopLag:
    """The loop's lateness at each probe, recorded once it adds up to :data:`THRESHOLD`
    (as :class:`_NodeWaits` carries small waits); a probe's lateness under the threshold
    counts beyond :data:`NOISE` only."""

    def __init__(self) -> None:
        self.pending = 0.0
        #: when the lateness not yet recorded began to gather
        self.since: float | None = None

    def add(self, late: float, history: History) -> None:
        if late >= THRESHOLD and self.pending == 0.0:
            history.record("lag", late=round(late, 4))  # a stall alone, as it came
            return
        # only small lateness pays the noise; a stall joins what was gathering
        self.pending += late if late >= THRESHOLD else max(0.0, late - NOISE)
        if self.pending > 0.0 and self.since is None:
            self.since = history.now() - late
        if self.pending >= THRESHOLD:
            over = history.now() - (self.since if self.since is not None else history.now())
            history.record("lag", late=round(self.pending, 4), over=round(over, 4))
            self.pending, self.since = 0.0, None


async def _watch(history: History, pids: Pids | None) -> None:
    loop = asyncio.get_running_loop()
    nodes = _NodeWaits(pids) if pids is not None else None
    lag = _LoopLag()
    while True:
        asked = loop.time() + PERIOD
        await asyncio.sleep(PERIOD)
        if nodes is not None:
            nodes.read(history)  # ~0.1 ms a node (its threads' and children's files)
        # the reading blocks the loop too: on a starved machine it once took 1.2 s
        # (session 41), in which no line was relayed and the lateness was not counted
        lag.add(loop.time() - asked, history)


@contextlib.asynccontextmanager
async def watching_lag(history: History, pids: Pids | None = None) -> AsyncIterator[None]:
    """Record the loop's lateness into ``history`` for as long as the block runs, and,
    given ``pids``, how long the nodes' processes waited for a CPU."""
    task = asyncio.create_task(_watch(history, pids), name="shadowcheck-lag")
    try:
        yield
    finally:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
