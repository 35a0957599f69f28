"""The scenario model: topology, steps, scenarios and the capabilities they need.

Plain data, built by :mod:`pytest_shadowcheck.scenario.loader` from a YAML file; the
engine runs a :class:`Scenario`, the checks read its :class:`Step` s.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from pytest_shadowcheck.errors import SourceRef
from pytest_shadowcheck.scenario.capabilities import (
    CAPABILITIES,
    CAPABILITY_NEED,
    CHECK_CAPABILITY,
    FAULT_KINDS,
    MTA_CAPABILITIES,
    PROCESS_CAPABILITIES,
    STEP_CAPABILITY,
    STORAGE_STEPS,
)
from pytest_shadowcheck.scenario.schema import scenario_schema

__all__ = [
    "CAPABILITIES",
    "CAPABILITY_NEED",
    "CHECK_CAPABILITY",
    "DURATION_SETTINGS",
    "MTA_CAPABILITIES",
    "PROCESS_CAPABILITIES",
    "SENDERS_SINK",
    "SETTING_NAMES",
    "STEP_CAPABILITY",
    "NextHop",
    "NodeSpec",
    "Scenario",
    "Step",
    "Topology",
    "needs_lazy_storage",
    "plain",
]

#: the sink the loader routes the senders' domains to when a topology does not: every
#: bounce (DSN/NDR) the MTA sends lands where the harness sees it
SENDERS_SINK = "senders"

#: every setting a scenario may give (Exchange names), and those that are durations
SETTING_NAMES = frozenset(scenario_schema()["$defs"]["settings"]["properties"])
DURATION_SETTINGS = frozenset(
    name
    for name, spec in scenario_schema()["$defs"]["settings"]["properties"].items()
    if spec == {"$ref": "#/$defs/duration"}
)


@dataclass(frozen=True)
class NextHop:
    """Where a node sends mail for one domain: a harness sink or another node."""

    domain: str
    sink: str | None = None
    kind: str = "mailbox"
    node: str | None = None


@dataclass
class NodeSpec:
    name: str
    site: str = "site-a"
    dag: str | None = None
    profile: str | None = None
    next_hops: dict[str, NextHop] = field(default_factory=dict)


@dataclass
class Topology:
    """Nodes of one boundary, their next hops and the recipient directory."""

    name: str
    nodes: dict[str, NodeSpec]
    next_hops: dict[str, NextHop] = field(default_factory=dict)
    boundary: str = "dag1"
    profile: str = "2013"
    clock: str = "real"
    directory: dict[str, Any] = field(default_factory=dict)
    description: str = ""
    #: the senders' domains (where a bounce goes) and the sink each is routed to: the
    #: topology's own next hop, or one the loader added (SENDERS_SINK, a boundary)
    senders: dict[str, str] = field(default_factory=dict)
    #: the domains whose next hop the loader added, not the topology file: a target
    #: that must be told each route may lack them (a bounce then goes unseen)
    added_hops: tuple[str, ...] = ()

    def sinks(self) -> list[str]:
        names = {hop.sink for hop in self.next_hops.values() if hop.sink}
        for node in self.nodes.values():
            names |= {hop.sink for hop in node.next_hops.values() if hop.sink}
        return sorted(names)

    def own_sinks(self) -> list[str]:
        """The sinks the topology itself routes to (not the senders' sink the loader
        added): a target that cannot reach the harness may still run without the rest."""
        names = {h.sink for d, h in self.next_hops.items() if h.sink and d not in self.added_hops}
        for node in self.nodes.values():
            names |= {hop.sink for hop in node.next_hops.values() if hop.sink}
        return sorted(names)

    def hops_of(self, node: str) -> dict[str, NextHop]:
        return {**self.next_hops, **self.nodes[node].next_hops}

    def links(self) -> list[str]:
        """Every link the harness proxies: client->N, N->M, N->SINK.

        Every node gets a link to every sink, not only to those its next hops
        name: a ``route`` step may give it one at run time."""
        out = [f"client->{n}" for n in self.nodes]
        out += [f"{a}->{b}" for a in self.nodes for b in self.nodes if a != b]
        out += [f"{node}->{sink}" for node in self.nodes for sink in self.sinks()]
        return out


@dataclass
class Step:
    kind: str
    #: an action step's arguments as its typed spec (scenario/steps.py: ACTION_SPECS); an
    #: expectation's as a mapping, durations parsed (the checks read it)
    arg: Any
    where: SourceRef
    #: for a check: the behaviour IDs it evidences (empty: all the scenario's)
    behaviours: list[str] = field(default_factory=list)
    #: for a check: an event that must have happened for the check to apply; when it
    #: did not, the check is NOT-APPLICABLE (the behaviour that required the event is
    #: judged by a check of its own)
    given: dict[str, Any] | None = None
    #: for a check: the scenario's premise (a message accepted, delivered), evidence of
    #: nothing; when it fails the check's behaviours are NOT-APPLICABLE, not failed
    precondition: bool = False

    def capability(self) -> str | None:
        """The capability a check needs to look (the control API for a queue), or None."""
        return CHECK_CAPABILITY.get(self.kind)


@dataclass
class Scenario:
    """One runnable scenario: a pytest item."""

    name: str
    title: str
    behaviours: list[str]
    requires: list[str]
    topology: Topology
    settings: dict[str, Any]
    steps: list[Step]
    expect: list[Step]
    timeout: float
    settle: float
    where: SourceRef
    #: settings of single nodes, over ``settings``
    node_settings: dict[str, dict[str, Any]] = field(default_factory=dict)
    #: the nodes must refuse to start, for a reason matching this regex (TO-3 on a
    #: black box: a configuration it must reject is given at start)
    start_refused: str | None = None
    #: header fields the transport may add to a message beyond the trace fields
    #: (the integrity invariant)
    permitted_headers: list[str] = field(default_factory=list)
    #: the event every behaviour of the scenario presupposes (a shadow copy made): when
    #: it never happened, the scenario's checks are NOT-APPLICABLE, and the behaviour
    #: that required the event is judged in scenarios of its own
    given: dict[str, Any] | None = None
    #: settings the scenario's windows are counted from (``within: RetryInterval + 3s``),
    #: with how many windows count on each: a target that has one compiled in at another
    #: value runs the scenario stretched to it, or cannot run it (targets/fit.py)
    timer_settings: dict[str, int] = field(default_factory=dict)
    #: settings that must reach the MTA for the scenario to mean anything (a warning
    #: about a configuration is only owed by an MTA that was given it)
    needs_settings: tuple[str, ...] = ()
    #: a behaviour is evidenced only by the checks that name it (``evidence: named``: an
    #: explored scenario, whose behaviours are all its model may judge)
    named_evidence: bool = False

    def node_setting(self, node: str, name: str, default: Any = None) -> Any:
        """The value ``node`` starts with for ``name``: its own, else the scenario's."""
        return self.node_settings.get(node, {}).get(name, self.settings.get(name, default))

    def setting_values(self, name: str) -> list[Any]:
        """Every value the scenario gives ``name``: at start, per node, in set_settings."""
        values = [self.settings[name]] if name in self.settings else []
        values += [s[name] for s in self.node_settings.values() if name in s]
        for step in self.steps:
            changed = getattr(step.arg, "values", None) if step.kind == "set_settings" else None
            if isinstance(changed, dict) and name in changed:
                values.append(changed[name])
        return values

    @staticmethod
    def _nemesis_faults(step: Step) -> list[str]:
        nemesis = getattr(step.arg, "nemesis", None) if step.kind == "workload" else None
        return list(nemesis.get("faults") or []) if isinstance(nemesis, dict) else []

    def required_capabilities(self) -> list[str]:
        """Declared capabilities plus those the steps imply: without them the scenario
        cannot run. A check that needs a capability to look (a queue through the control
        API) is not among them: without it that check alone is UNTESTABLE, and the wire
        evidence of the others still decides."""
        needed = set(self.requires)
        for step in self.steps:
            if step.kind in STEP_CAPABILITY:
                needed.add(STEP_CAPABILITY[step.kind])
            # a nemesis that names its faults needs what they need: one that cannot cut
            # power is no power-cut test (a nemesis naming none plays what the target can)
            for fault in self._nemesis_faults(step):
                needed.update(FAULT_KINDS.get(fault, ()))
        if self.topology.clock == "virtual":
            needed.add("virtual_clock")
        return [c for c in CAPABILITIES if c in needed]


def needs_lazy_storage(scenario: Scenario) -> bool:
    """Whether the nodes' queue directories must be on a lazy filesystem: the scenario
    cuts power or fails a disk, in a step or through a workload's nemesis."""
    return any(
        step.kind in STORAGE_STEPS or STORAGE_STEPS & set(Scenario._nemesis_faults(step))
        for step in scenario.steps
    )


def plain(value: Any) -> Any:
    """A YAML value with its line marks stripped: plain dicts and lists."""
    if isinstance(value, dict):
        return {k: plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [plain(v) for v in value]
    return value
