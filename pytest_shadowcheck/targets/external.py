"""The ``external`` target: nodes that are already running somewhere.

The harness cannot kill, pause or restart them: only proxy faults (cut,
blackhole, delay, ...) on the links it can see. Forms:

* ``--shadowcheck-target external:mbx1=127.0.0.1:2525,mbx2=127.0.0.1:2526``
  (SMTP addresses only: the client->node links are observed);
* ``--shadowcheck-target external:nodes.yaml`` with::

      name: mymta                 # the label reports use (default: external)
      version: "MyMTA 4.2"
      nodes:
        mbx1: {smtp: "127.0.0.1:2525", control: "127.0.0.1:8025"}
        mbx2: {smtp: "127.0.0.1:2526", control: "127.0.0.1:8026"}
      capabilities: [control_api, set_settings]   # optional

With a control API on every node (contracts.md section 2), the target also
has ``control_api`` and ``set_settings``: it points each node's peers and next
hops at the harness proxies (PUT /topology/peers, PUT /topology/next_hops) and
applies the scenario's settings (PUT /settings).

Without one, the MTA is a black box whose routes are configured once, by its
admin: each node declares where it relays each next-hop domain (``relays``) and
where it reaches each peer (``peers``), and the harness listens exactly there
with its proxies and sinks; the MTA's settings are declared too (``settings``,
Exchange names; ``n/a`` for a knob it does not have), and a scenario runs only
where they agree with its own::

      nodes:
        mbx1:
          smtp: "127.0.0.1:2525"
          relays: {corp.test: "127.0.0.1:10025"}
          peers: {mbx2: "127.0.0.1:10027"}
      settings: {TransientFailureRetryInterval: 1s, ShadowHeartbeatFrequency: n/a}
      added_headers: [X-Categorized-By]   # fields it adds beyond trace fields

``--shadowcheck-target external:nodes.yaml --collect-only`` then lists which
scenarios run and, for the others, the relay, peer or setting they need.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from pytest_shadowcheck.errors import ScenarioError, SourceRef
from pytest_shadowcheck.scenario.durations import parse_duration
from pytest_shadowcheck.scenario.loader import (
    DURATION_SETTINGS,
    MTA_CAPABILITIES,
    SETTING_NAMES,
    Scenario,
    Topology,
)
from pytest_shadowcheck.targets.base import ClusterPlan, NodeHandle, Target, TargetError
from pytest_shadowcheck.targets.hookspecs import hookimpl

__all__ = ["ExternalNodes", "ExternalTarget", "parse_external"]

#: the harness does not run these nodes: only what the MTA itself offers can be claimed
_ALLOWED = frozenset(MTA_CAPABILITIES)


def _addr(text: str, what: str) -> tuple[str, int]:
    host, _, port = str(text).strip().rpartition(":")
    if not host or not port.isdigit():
        raise TargetError(f"external target: {what} must be HOST:PORT, not {text!r}")
    return host, int(port)


@dataclass
class ExternalNodes:
    """What ``external:...`` says about the running nodes."""

    handles: dict[str, NodeHandle]
    capabilities: frozenset[str]
    version: str = "unknown"
    label: str = "external"
    source: str = ""
    #: node -> next-hop domain -> where the node relays it (the harness listens there)
    relays: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)
    #: node -> peer -> where the node reaches that peer (the harness listens there)
    peers: dict[str, dict[str, tuple[str, int]]] = field(default_factory=dict)
    #: the settings the MTA runs with (seconds for durations); None: it has no such knob
    settings: dict[str, Any] = field(default_factory=dict)
    #: header fields the MTA adds to what it relays, beyond trace fields (integrity)
    added_headers: frozenset[str] = frozenset()


def _addresses(spec: Any, what: str) -> dict[str, tuple[str, int]]:
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise TargetError(f"external target: {what} must map names to HOST:PORT")
    return {str(k): _addr(v, f"{what}.{k}") for k, v in spec.items()}


def _declared_settings(spec: Any, source: str) -> dict[str, Any]:
    if spec is None:
        return {}
    if not isinstance(spec, dict):
        raise TargetError(f"external target {source}: settings must map Exchange names to values")
    out: dict[str, Any] = {}
    for name, value in spec.items():
        if name not in SETTING_NAMES:
            raise TargetError(
                f"external target {source}: unknown setting {name!r} "
                f"(known: {', '.join(sorted(SETTING_NAMES))})"
            )
        if value == "n/a":
            out[name] = None
        elif name in DURATION_SETTINGS:
            try:
                out[name] = parse_duration(value, SourceRef(Path(source)))
            except ScenarioError as exc:
                raise TargetError(f"external target: settings.{name}: {exc}") from None
        else:
            out[name] = value
    return out


def parse_external(argument: str | None) -> ExternalNodes:
    """Parse ``external:...``."""
    if not argument:
        raise TargetError("external target needs nodes: external:mbx1=HOST:PORT,... or a YAML file")
    path = Path(argument)
    if argument.endswith((".yaml", ".yml")) or path.is_file():
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise TargetError(f"external target file {argument}: {exc}") from None
        found = ExternalNodes(
            {},
            frozenset(),
            str(data.get("version", "unknown")),
            str(data.get("name") or "external"),
            argument,
        )
        for name, spec in (data.get("nodes") or {}).items():
            spec = spec if isinstance(spec, dict) else {"smtp": spec}
            control = spec.get("control")
            found.handles[name] = NodeHandle(
                name=name,
                smtp=_addr(spec.get("smtp", ""), f"nodes.{name}.smtp"),
                control=_addr(control, f"nodes.{name}.control") if control else None,
            )
            found.relays[name] = _addresses(spec.get("relays"), f"nodes.{name}.relays")
            found.peers[name] = _addresses(spec.get("peers"), f"nodes.{name}.peers")
        found.settings = _declared_settings(data.get("settings"), argument)
        added = data.get("added_headers") or []
        if not isinstance(added, list) or not all(isinstance(h, str) for h in added):
            raise TargetError(f"external target {argument}: added_headers must list field names")
        found.added_headers = frozenset(added)
        declared = data.get("capabilities")
    else:
        found = ExternalNodes({}, frozenset())
        for part in argument.split(","):
            name, sep, address = part.partition("=")
            if not sep:
                raise TargetError(f"external target: expected NAME=HOST:PORT, got {part!r}")
            found.handles[name.strip()] = NodeHandle(name=name.strip(), smtp=_addr(address, name))
        declared = None
    if not found.handles:
        raise TargetError("external target: no nodes given")
    all_control = all(h.control for h in found.handles.values())
    if declared is None:
        found.capabilities = (
            frozenset({"control_api", "set_settings"}) if all_control else frozenset()
        )
    else:
        unknown = set(declared) - _ALLOWED
        if unknown:
            raise TargetError(
                f"external target cannot have {', '.join(sorted(unknown))}: "
                "the harness does not run its nodes"
            )
        found.capabilities = frozenset(declared) if all_control else frozenset()
    return found


class ExternalTarget(Target):
    name = "external"

    def __init__(self, argument: str | None) -> None:
        self.nodes = parse_external(argument)
        self.handles = self.nodes.handles
        self.capabilities = self.nodes.capabilities
        self.added_headers = self.nodes.added_headers

    def version(self) -> str:
        return self.nodes.version

    @property
    def label(self) -> str:
        return self.nodes.label

    def describe(self) -> str:
        nodes = ", ".join(f"{n}={h.smtp[0]}:{h.smtp[1]}" for n, h in self.handles.items())
        return f"external nodes {nodes}"

    def cannot_run(self, scenario: Scenario) -> str | None:
        missing = [n for n in scenario.topology.nodes if n not in self.handles]
        if missing:
            return f"has no node {', '.join(missing)} (nodes: {', '.join(self.handles)})"
        if "control_api" in self.capabilities:
            return None
        topo = scenario.topology
        if (topo.own_sinks() or len(topo.nodes) > 1) and not self._declares_routes():
            return (
                "cannot route peers and next hops through the harness: give each node "
                "`relays` and `peers` in a nodes.yaml (docs/targets.md), or a control API"
            )
        return self._missing_route(topo) or self._settings_disagree(scenario)

    def _declares_routes(self) -> bool:
        return any(self.nodes.relays.values()) or any(self.nodes.peers.values())

    def _missing_route(self, topo: Topology) -> str | None:
        source = self.nodes.source
        for node in topo.nodes:
            relays = self.nodes.relays.get(node, {})
            for domain in topo.hops_of(node):
                # the senders' sink the loader added is optional: bounces go unseen
                if domain not in relays and domain not in topo.added_hops:
                    return (
                        f"{node} relays no {domain} to the harness: add "
                        f"`relays: {{{domain}: HOST:PORT}}` to nodes.{node} in {source}"
                    )
            for peer in topo.nodes:
                if peer != node and peer not in self.nodes.peers.get(node, {}):
                    return (
                        f"{node} has no address for its peer {peer}: add "
                        f"`peers: {{{peer}: HOST:PORT}}` to nodes.{node} in {source}"
                    )
        for link in topo.links():
            wanted = self._link_addresses(link, topo)
            if len(wanted) > 1:
                shown = ", ".join(f"{h}:{p}" for h, p in sorted(wanted))
                return f"link {link} would need one address, {source} gives {shown}"
        return None

    def _settings_disagree(self, scenario: Scenario) -> str | None:
        declared = self.nodes.settings
        differ = []
        for name, wanted in scenario.settings.items():
            if name in declared and declared[name] is None:
                continue  # no such knob on this MTA: the scenario runs without it
            if name not in declared:
                differ.append(f"{name}={wanted} (not declared)")
            elif declared[name] != wanted:
                differ.append(f"{name}={wanted} (the MTA runs with {declared[name]})")
        if not differ:
            return None
        return (
            "cannot change the MTA's settings; the scenario needs "
            + ", ".join(differ)
            + f" - declare them under settings in {self.nodes.source or 'a nodes.yaml'} "
            "(n/a for a knob the MTA does not have)"
        )

    def _link_addresses(self, link: str, topo: Topology) -> set[tuple[str, int]]:
        src, _, dst = link.partition("->")
        if src == "client":
            return set()
        wanted = {
            self.nodes.relays[src][domain]
            for domain, hop in topo.hops_of(src).items()
            if (hop.sink or hop.node) == dst and domain in self.nodes.relays.get(src, {})
        }
        peer = self.nodes.peers.get(src, {}).get(dst)
        return wanted | ({peer} if peer else set())

    def link_address(self, link: str, topology: Topology) -> tuple[str, int] | None:
        if "control_api" in self.capabilities:
            return None
        wanted = self._link_addresses(link, topology)
        return next(iter(wanted)) if len(wanted) == 1 else None

    def handle(self, node: str) -> NodeHandle:
        try:
            return self.handles[node]
        except KeyError:
            raise TargetError(f"external target has no node {node!r}") from None

    async def start(self, plan: ClusterPlan) -> dict[str, NodeHandle]:
        nodes = list(plan.topology.nodes)
        if "control_api" in self.capabilities:
            for node in nodes:
                if plan.peers.get(node):
                    await self.control(node, "PUT", "/topology/peers", plan.peers[node])
                if plan.next_hops.get(node):
                    await self.control(node, "PUT", "/topology/next_hops", plan.next_hops[node])
                if plan.settings:
                    await self.set_settings(node, plan.settings)
        return {node: self.handles[node] for node in nodes}

    async def stop(self) -> None:
        return None


@hookimpl
def shadowcheck_describe_targets() -> list[tuple[str, str]]:
    return [
        ("external", "nodes already running: external:NAME=HOST:PORT,... or external:FILE.yaml")
    ]


@hookimpl
def shadowcheck_make_target(
    name: str, argument: str | None, options: dict[str, Any]
) -> Target | None:
    if name != "external":
        return None
    return ExternalTarget(argument)
