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
    "TrafficSpec",
    "WorkloadSpec",
    "load_workload",
    "nemesis_spec",
]

#: faults that take a node down (its copies are at risk); the others break a link
NODE_FAULTS = frozenset({"kill", "pause", "restart", "wipe", "power_cut"})


@dataclass(frozen=True)
class TrafficSpec:
    """What the messages look like (``traffic:``); "tidy" is the workload's historic
    traffic, "realistic" draws every message's shape (engine/traffic_model.py)."""

    profile: str = "tidy"
    #: sizes: log-normal around typical_size, a share ``large`` from 64 KB to max_size
    typical_size: int = 3000
    max_size: int = 2 * 1024 * 1024
    large: float = 0.02
    #: 1..max_recipients recipients over every next-hop domain; ``many_recipients``: the
    #: share with 10 or more
    max_recipients: int = 50
    many_recipients: float = 0.05
    #: shares of messages with 8-bit text, a UTF-8 Subject, a MIME attachment, lines
    #: starting with a dot, lines of 998 octets
    eight_bit: float = 0.3
    utf8_headers: float = 0.15
    mime: float = 0.2
    dot_lines: float = 0.2
    long_lines: float = 0.1
    #: mean transactions per session; share of transactions after an RSET
    transactions: int = 4
    rset: float = 0.1
    #: shares of messages sharing an earlier message's Message-ID, or with none
    duplicate_ids: float = 0.02
    missing_ids: float = 0.02
    #: share of messages sent in bursts of burst_size, all due in the same second
    bursts: float = 0.2
    burst_size: int = 20

    @property
    def realistic(self) -> bool:
        return self.profile == "realistic"


#: the ``traffic:`` mapping's keys and the kind of value each takes
_TRAFFIC_SHARES = (
    "large", "many_recipients", "eight_bit", "utf8_headers", "mime", "dot_lines",
    "long_lines", "rset", "duplicate_ids", "missing_ids", "bursts",
)  # fmt: skip
_TRAFFIC_COUNTS = ("max_recipients", "transactions", "burst_size")
_TRAFFIC_SIZES = ("typical_size", "max_size")
_SIZE_UNITS = {"": 1, "B": 1, "KB": 1024, "MB": 1024 * 1024}


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
    traffic: TrafficSpec = field(default_factory=TrafficSpec)


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
        traffic=load_traffic(arg.get("traffic", "tidy"), at),
    )


def load_traffic(raw: Any, at: Any) -> TrafficSpec:
    """``traffic: tidy``, ``traffic: realistic`` or a mapping of knobs (``profile``
    and any of TrafficSpec's fields); every value checked, with the key's place."""
    profiles = "tidy or realistic"
    if isinstance(raw, str):
        raw = {"profile": raw}
    if not isinstance(raw, dict):
        raise ScenarioError(
            "traffic: is a profile name or a mapping of knobs", at(["traffic"]),
            "traffic: realistic, or traffic: {profile: realistic, max_size: 512KB}",
        )  # fmt: skip
    values: dict[str, Any] = {"profile": "realistic" if raw else "tidy"}
    for key, value in raw.items():
        where = at(["traffic", key])
        if key == "profile":
            if value not in ("tidy", "realistic"):
                raise ScenarioError(f"unknown traffic profile {value!r}", where, profiles)
            values[key] = value
        elif key in _TRAFFIC_SHARES:
            number = isinstance(value, (int, float)) and not isinstance(value, bool)
            if not number or not 0 <= value <= 1:
                raise ScenarioError(
                    f"traffic {key} is a share of the messages", where, "a number from 0 to 1"
                )
            values[key] = float(value)
        elif key in _TRAFFIC_COUNTS:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ScenarioError(f"traffic {key} is a count", where, "a whole number, 1 or more")
            values[key] = value
        elif key in _TRAFFIC_SIZES:
            values[key] = _size(value, key, where)
        else:
            known = ", ".join(["profile", *_TRAFFIC_SHARES, *_TRAFFIC_COUNTS, *_TRAFFIC_SIZES])
            raise ScenarioError(f"unknown traffic knob {key!r}", where, f"one of {known}")
    spec = TrafficSpec(**values)
    if spec.typical_size > spec.max_size:
        raise ScenarioError(
            "traffic typical_size is above max_size", at(["traffic"]),
            "typical_size <= max_size, e.g. typical_size: 3KB, max_size: 2MB",
        )  # fmt: skip
    return spec


def _size(value: Any, key: str, where: SourceRef) -> int:
    """Bytes from 4000, "4000", "64KB" or "2MB"."""
    text = str(value).strip().upper().replace(" ", "")
    number = text.rstrip("KMB")
    unit = text[len(number) :]
    if isinstance(value, bool) or unit not in _SIZE_UNITS or not number.isdigit():
        raise ScenarioError(f"traffic {key} is a size in bytes", where, "e.g. 4000, 64KB or 2MB")
    size = int(number) * _SIZE_UNITS[unit]
    if size < 600:
        raise ScenarioError(f"traffic {key} below 600 bytes", where, "600 bytes or more")
    return size


def _default_recipients(topology: Topology) -> list[str]:
    """Three users in every domain the topology routes to a sink (the senders' own
    domain, where non-delivery reports go, excepted)."""
    domains = [d for d, hop in topology.next_hops.items() if hop.sink and hop.kind == "mailbox"]
    return [f"user{i}@{d}" for d in domains for i in (1, 2, 3)]
