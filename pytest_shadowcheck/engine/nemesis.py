"""A seeded nemesis: faults drawn from what the target can do, while a workload runs.

:func:`iter_faults` draws the schedule from the seed alone (kinds, nodes, links, gaps,
durations), so the same seed gives the same faults in the same order; only where they
land in the workload depends on how fast the target is. :func:`run_nemesis` plays the
schedule through the engine's own steps (kill, restart, wipe, pause, resume, fault,
heal), so the history records them exactly as a hand-written scenario's, and marks each
fault's window with ``note`` events (``nemesis``: "start"/"end") for the checker. A
workload gives it a horizon (a multiple of its planned sending time) past which no fault
starts: faults slow the sending, so without one a slow machine gets ever more of them.

A ``protocol`` fault breaks one of the node's links at a protocol point drawn from the
seed (:data:`NEMESIS_POINTS`: where, which command, cut or held, the how-manieth time):
the session fails where real ones do (the reply to the final dot lost, a cut right
after XSHADOW's reply), not at a random byte.

One node at a time by default: a fault ends (the node back, the link healed) before the
next begins. ``overlap: true`` lets two fail together: each fault takes two nodes at
once, which is outside the guarantee (PR-4) when both held a message.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import itertools
import random
from collections.abc import Awaitable, Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING

from pytest_shadowcheck.errors import SourceRef
from pytest_shadowcheck.scenario.capabilities import LINK_FAULTS
from pytest_shadowcheck.scenario.model import Step
from pytest_shadowcheck.scenario.steps import (
    ActionSpec,
    DiskFullSpec,
    FaultSpec,
    HealSpec,
    NodeActionSpec,
)
from pytest_shadowcheck.scenario.workload_spec import FAULT_KINDS, NemesisSpec

if TYPE_CHECKING:
    from pytest_shadowcheck.engine.context import StepContext
    from pytest_shadowcheck.scenario.model import Topology
    from pytest_shadowcheck.verdict import Verdict

__all__ = [
    "NEMESIS_POINTS",
    "Fault",
    "iter_faults",
    "plan_faults",
    "planned_starts",
    "run_nemesis",
    "usable_kinds",
]

#: the protocol points a ``protocol`` fault draws from: (place, command), as a fault
#: step's ``point`` (scenario/capabilities.py POINT_PLACES); the shadow verbs only on a
#: link between two nodes, where they are spoken
NEMESIS_POINTS: dict[str, tuple[tuple[str, str], ...]] = {
    "smtp": (
        ("after", "MAIL"),
        ("after", "RCPT"),
        ("before_reply", "DATA"),
        ("after", "EOD"),
        ("before_reply", "EOD"),
        ("inside_reply", "EOD"),
        ("after_reply", "EOD"),
    ),
    "peer": (
        ("after_reply", "XSHADOW"),
        ("before_reply", "XSHADOWCOPY"),
        ("before_reply", "XQDISCARD"),
        ("inside_reply", "XQDISCARD"),
    ),
}
#: a protocol fault strikes at the 1st..Nth time its point is reached while it lasts
_MAX_OCCURRENCE = 3

#: carries out one step of the given kind with the given spec
Act = Callable[[str, ActionSpec], Awaitable[None]]


@dataclass(frozen=True)
class Fault:
    index: int
    kind: str
    nodes: tuple[str, ...]
    #: for a link fault: the link broken (one per node)
    links: tuple[str, ...]
    #: quiet time before it starts, how long it lasts
    gap: float
    duration: float
    #: for delay: seconds added to each chunk
    delay: float = 0.0
    #: for protocol: cut_at or stall_at, at (place, command), the Nth time it is reached
    action: str = ""
    point: tuple[str, str] = ("", "")
    occurrence: int = 1

    def describe(self) -> str:
        what = ", ".join(self.links) if self.links else ", ".join(self.nodes)
        extra = f" +{self.delay:.2f}s" if self.kind == "delay" else ""
        if self.kind == "protocol":
            nth = {1: "1st", 2: "2nd", 3: "3rd"}.get(self.occurrence, f"{self.occurrence}th")
            extra = f" {self.action} {self.point[0]} {self.point[1]}, {nth} time,"
        return f"#{self.index} {self.kind}{extra} {what} for {self.duration:.2f}s"


def usable_kinds(spec: NemesisSpec, capabilities: frozenset[str]) -> tuple[str, ...]:
    """The spec's fault kinds the target can carry out."""
    return tuple(k for k in spec.faults if set(FAULT_KINDS[k]) <= capabilities)


def iter_faults(
    spec: NemesisSpec, kinds: tuple[str, ...], topology: Topology
) -> Iterator[Fault]:
    """The schedule, fault after fault, for as long as it is read: a function of the
    spec's seed only. Drawn as the nemesis plays it (a workload plays a handful; the
    10,000 planned ahead before were an eighth of a workload's CPU in the harness)."""
    rng = random.Random(f"nemesis:{spec.seed}")
    for index in itertools.count():
        kind = rng.choice(kinds)
        nodes = tuple(sorted(rng.sample(spec.nodes, 2 if spec.overlap else 1)))
        links = (
            tuple(_link_of(rng, node, topology) for node in nodes)
            if kind in LINK_FAULTS
            else ()
        )
        gap = rng.uniform(spec.interval / 2, spec.interval * 1.5)
        duration = rng.uniform(spec.duration / 2, spec.duration * 1.5)
        delay = rng.uniform(0.2, 1.0) if kind == "delay" else 0.0
        fault = Fault(index, kind, nodes, links, gap, duration, delay)
        if kind == "protocol":
            # drawn after the rest, and only for this kind: other schedules stay as they were
            fault = _at_point(rng, fault, topology)
        yield fault


def plan_faults(
    spec: NemesisSpec, kinds: tuple[str, ...], topology: Topology, count: int
) -> list[Fault]:
    """The first ``count`` faults of the schedule."""
    return list(itertools.islice(iter_faults(spec, kinds, topology), count))


def planned_starts(faults: list[Fault]) -> list[float]:
    """Seconds into the workload at which each fault starts if nothing runs late: the
    gaps and the faults' durations in turn, as ``run_nemesis`` plays them (a restart
    has no duration)."""
    starts, clock = [], 0.0
    for fault in faults:
        clock += fault.gap
        starts.append(clock)
        if fault.kind != "restart":
            clock += fault.duration
    return starts


def _at_point(rng: random.Random, fault: Fault, topology: Topology) -> Fault:
    """The protocol fault's point, action and occurrence, drawn from the seed."""
    peers = all(link.split("->")[1] in topology.nodes for link in fault.links)
    pool = NEMESIS_POINTS["smtp"] + (NEMESIS_POINTS["peer"] if peers else ())
    point = rng.choice(pool)
    action = rng.choice(("cut_at", "stall_at"))
    occurrence = rng.randint(1, _MAX_OCCURRENCE)
    return dataclasses.replace(fault, action=action, point=point, occurrence=occurrence)


def _link_of(rng: random.Random, node: str, topology: Topology) -> str:
    """A link the node depends on: to or from a peer, or to a next hop."""
    peers = [n for n in topology.nodes if n != node]
    links = [f"{node}->{p}" for p in peers] + [f"{p}->{node}" for p in peers]
    # the topology's own next hops: the senders' sink the loader adds is no link the
    # nemesis breaks (and adding it would change every seed's schedule)
    links += [f"{node}->{s}" for s in topology.own_sinks()]
    return rng.choice(links)


async def run_nemesis(
    run: StepContext,
    faults: Iterable[Fault],
    stop: asyncio.Event,
    verdict: Verdict,
    horizon: float | None = None,
) -> int:
    """Play ``faults`` until ``stop`` is set, or until ``horizon`` seconds have passed
    when one is given (no fault starts after it); every fault is ended (node back, link
    healed) before returning. ``run``: the engine's Run (its ``do`` carries out each
    action). Returns how many faults were played."""
    where = SourceRef(run.scenario.where.path, run.scenario.where.line)
    loop = asyncio.get_running_loop()
    until = None if horizon is None else loop.time() + horizon

    async def act(kind: str, spec: ActionSpec) -> None:
        await run.do(Step(kind, spec, where), verdict)

    played = 0
    for fault in faults:
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(stop.wait(), fault.gap)
        if stop.is_set():
            break
        if until is not None and loop.time() > until:
            # (no "nemesis" key: the checkers read those notes as a fault's start or end)
            run.history.record(
                "note", text=f"nemesis: no fault starts {horizon:.1f}s into the workload or "
                "later, a horizon its planned sending time sets (the sending ran long)",
                nemesis_horizon=horizon,
            )  # fmt: skip
            break
        run.history.record(
            "note", text=f"nemesis {fault.describe()}", nemesis="start", fault=fault.kind,
            index=fault.index, nodes=list(fault.nodes), links=list(fault.links),
        )  # fmt: skip
        await asyncio.gather(*(_begin(act, fault, i) for i in range(len(fault.nodes))))
        if fault.kind != "restart":
            # a fault runs its course even when the workload ends meanwhile
            await asyncio.sleep(fault.duration)
        await asyncio.gather(*(_end(act, fault, i) for i in range(len(fault.nodes))))
        run.history.record(
            "note", text=f"nemesis #{fault.index} over", nemesis="end", fault=fault.kind,
            index=fault.index, nodes=list(fault.nodes),
        )  # fmt: skip
        played += 1
    return played


async def _begin(act: Act, fault: Fault, i: int) -> None:
    node = NodeActionSpec(fault.nodes[i])
    if fault.kind in ("kill", "wipe"):
        await act("kill", node)
    elif fault.kind == "pause":
        await act("pause", node)
    elif fault.kind == "restart":
        await act("restart", node)
    elif fault.kind == "power_cut":
        await act("power_cut", node)
    elif fault.kind == "disk_full":
        await act("disk_full", DiskFullSpec(node.node))
    elif fault.kind == "disk_error":
        await act("disk_error", node)
    elif fault.kind == "delay":
        await act("fault", FaultSpec.of(fault.links[i], "delay", seconds=fault.delay))
    elif fault.kind == "protocol":
        spec = FaultSpec.of(
            fault.links[i], fault.action, point=fault.point, occurrence=fault.occurrence
        )
        await act("fault", spec)
    else:
        await act("fault", FaultSpec.of(fault.links[i], fault.kind))


async def _end(act: Act, fault: Fault, i: int) -> None:
    node = NodeActionSpec(fault.nodes[i])
    if fault.kind in ("kill", "power_cut"):
        await act("restart", node)
    elif fault.kind == "wipe":
        await act("wipe", node)
    elif fault.kind == "pause":
        await act("resume", node)
    elif fault.kind in ("disk_full", "disk_error"):
        await act("disk_ok", node)
    elif fault.kind in LINK_FAULTS:
        await act("heal", HealSpec(fault.links[i]))
