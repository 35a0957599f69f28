"""A ``workload`` step's arguments: checked against the topology when the scenario loads,
with ``file:line`` in every error, and turned into a :class:`WorkloadSpec` (and its
nemesis into a :class:`NemesisSpec`) that the engine runs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.errors import ScenarioError, SourceRef
from pytest_shadowcheck.scenario.capabilities import DEFAULT_FAULTS, FAULT_KINDS
from pytest_shadowcheck.scenario.durations import parse_duration

if TYPE_CHECKING:
    from pytest_shadowcheck.scenario.model import Topology

__all__ = [
    "DEFAULT_FAULTS",
    "FAULT_KINDS",
    "NODE_FAULTS",
    "NemesisSpec",
    "WorkloadSpec",
    "load_workload",
    "nemesis_spec",
]

#: faults that take a node down (its copies are at risk); the others break a link
NODE_FAULTS = frozenset({"kill", "pause", "restart", "wipe", "power_cut"})


@dataclass(frozen=True)
class WorkloadSpec:
    """A workload step's arguments, validated and with defaults (see docs/scenario-format.md)."""

    name: str
    messages: int
    sessions: int = 4
    #: messages per second in all; 0: as fast as the target takes them
    rate: float = 0.0
    via: tuple[str, ...] = ()
    to: tuple[str, ...] = ()
    #: (min, max) bytes, drawn log-uniformly
    sizes: tuple[int, int] = (400, 4000)
    #: share of messages with 2..max_recipients recipients
    multi_recipient: float = 0.2
    max_recipients: int = 3
    #: share of messages with the null reverse-path MAIL FROM:<>
    null_sender: float = 0.1
    #: transactions per session before it is closed and a new one opened
    per_session: int = 10
    timeout: float = 10.0
    seed: int = 1
    #: how long to wait for acknowledged messages once the workload and the nemesis are done
    settle: float = 20.0
    #: every acknowledged message must be delivered within the settle (false: the scenario
    #: keeps some from their next hop on purpose)
    all_delivered: bool = True
    behaviours: tuple[str, ...] = ()
    nemesis: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class NemesisSpec:
    faults: tuple[str, ...]
    nodes: tuple[str, ...]
    #: mean quiet time between faults, and mean fault length (each drawn in [x/2, 3x/2])
    interval: float = 2.0
    duration: float = 1.0
    overlap: bool = False
    seed: int = 1


def nemesis_spec(
    raw: dict[str, Any], topology: Topology, seed: int, where: SourceRef
) -> NemesisSpec:
    """The step's ``nemesis`` mapping, checked against the topology."""
    nodes = tuple(raw.get("nodes") or topology.nodes)
    for node in nodes:
        if node not in topology.nodes:
            raise ScenarioError(
                f"nemesis names unknown node {node!r}", where, f"one of {', '.join(topology.nodes)}"
            )
    overlap = bool(raw.get("overlap", False))
    if overlap and len(nodes) < 2:
        raise ScenarioError(
            "overlap: true needs two nodes to fail together", where, "nodes: [A, B, ...]"
        )
    return NemesisSpec(
        faults=tuple(raw.get("faults") or DEFAULT_FAULTS),
        nodes=nodes,
        interval=float(raw.get("interval", 2.0)),
        duration=float(raw.get("duration", 1.0)),
        overlap=overlap,
        seed=int(raw.get("seed", seed)),
    )


def load_workload(
    arg: dict[str, Any], topology: Topology, at: Any, behaviours: list[str]
) -> WorkloadSpec:
    """The step's arguments as a spec; ``at(path)`` gives the SourceRef of a key."""
    nodes = list(topology.nodes)
    via = arg.get("via") or nodes
    for i, node in enumerate(via):
        if node not in topology.nodes:
            raise ScenarioError(
                f"workload sends via unknown node {node!r}", at(["via", i]), f"one of {nodes}"
            )
    to = arg.get("to") or _default_recipients(topology)
    if not to:
        raise ScenarioError(
            "workload has no recipients: the topology has no next hop to a sink",
            at([]),
            "to: [user@DOMAIN, ...] with domains the topology routes to a sink",
        )
    sizes = arg.get("sizes", [400, 4000])
    if sizes[0] > sizes[1]:
        raise ScenarioError("sizes: [min, max] with min <= max", at(["sizes"]), "e.g. [400, 20000]")
    durations = {
        key: parse_duration(arg[key], at([key])) for key in ("timeout", "settle") if key in arg
    }
    seed = int(arg.get("seed", 1))
    nemesis = dict(arg.get("nemesis") or {})
    if nemesis:
        for key in ("interval", "duration"):
            if key in nemesis:
                nemesis[key] = parse_duration(nemesis[key], at(["nemesis", key]))
        nemesis_spec(nemesis, topology, seed, at(["nemesis"]))  # checked here, built at run
    return WorkloadSpec(
        name=str(arg.get("name", "w")),
        messages=int(arg["messages"]),
        sessions=int(arg.get("sessions", 4)),
        rate=float(arg.get("rate", 0.0)),
        via=tuple(via),
        to=tuple(to),
        sizes=(int(sizes[0]), int(sizes[1])),
        multi_recipient=float(arg.get("multi_recipient", 0.2)),
        max_recipients=int(arg.get("max_recipients", 3)),
        null_sender=float(arg.get("null_sender", 0.1)),
        per_session=int(arg.get("per_session", 10)),
        timeout=durations.get("timeout", 10.0),
        settle=durations.get("settle", 20.0),
        all_delivered=bool(arg.get("all_delivered", True)),
        seed=seed,
        behaviours=tuple(behaviours),
        nemesis=nemesis,
    )


def _default_recipients(topology: Topology) -> list[str]:
    """Three users in every domain the topology routes to a sink (the senders' own
    domain, where non-delivery reports go, excepted)."""
    domains = [d for d, hop in topology.next_hops.items() if hop.sink and hop.kind == "mailbox"]
    return [f"user{i}@{d}" for d in domains for i in (1, 2, 3)]
