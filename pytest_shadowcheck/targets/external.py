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
applies the scenario's settings (PUT /settings). Without it, a scenario that
needs next hops or settings is UNTESTABLE.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from ..hookspecs import hookimpl
from ..scenario import MTA_CAPABILITIES, Scenario
from .base import ClusterPlan, NodeHandle, Target, TargetError

__all__ = ["ExternalTarget", "parse_external"]

#: the harness does not run these nodes: only what the MTA itself offers can be claimed
_ALLOWED = frozenset(MTA_CAPABILITIES)


def _addr(text: str, what: str) -> tuple[str, int]:
    host, _, port = str(text).strip().rpartition(":")
    if not host or not port.isdigit():
        raise TargetError(f"external target: {what} must be HOST:PORT, not {text!r}")
    return host, int(port)


def parse_external(
    argument: str | None,
) -> tuple[dict[str, NodeHandle], frozenset[str], str, str]:
    """Parse ``external:...``; return (handles, capabilities, version, label)."""
    if not argument:
        raise TargetError("external target needs nodes: external:mbx1=HOST:PORT,... or a YAML file")
    path = Path(argument)
    if argument.endswith((".yaml", ".yml")) or path.is_file():
        try:
            data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        except (OSError, yaml.YAMLError) as exc:
            raise TargetError(f"external target file {argument}: {exc}") from None
        handles = {}
        for name, spec in (data.get("nodes") or {}).items():
            spec = spec if isinstance(spec, dict) else {"smtp": spec}
            control = spec.get("control")
            handles[name] = NodeHandle(
                name=name,
                smtp=_addr(spec.get("smtp", ""), f"nodes.{name}.smtp"),
                control=_addr(control, f"nodes.{name}.control") if control else None,
            )
        declared = data.get("capabilities")
        version = str(data.get("version", "unknown"))
        label = str(data.get("name") or "external")
    else:
        handles = {}
        for part in argument.split(","):
            name, sep, address = part.partition("=")
            if not sep:
                raise TargetError(f"external target: expected NAME=HOST:PORT, got {part!r}")
            handles[name.strip()] = NodeHandle(name=name.strip(), smtp=_addr(address, name))
        declared = None
        version = "unknown"
        label = "external"
    if not handles:
        raise TargetError("external target: no nodes given")
    all_control = all(h.control for h in handles.values())
    if declared is None:
        capabilities = frozenset({"control_api", "set_settings"}) if all_control else frozenset()
    else:
        unknown = set(declared) - _ALLOWED
        if unknown:
            raise TargetError(
                f"external target cannot have {', '.join(sorted(unknown))}: "
                "the harness does not run its nodes"
            )
        capabilities = frozenset(declared) if all_control else frozenset()
    return handles, capabilities, version, label


class ExternalTarget(Target):
    name = "external"

    def __init__(self, argument: str | None) -> None:
        self.handles, self.capabilities, self._version, self._label = parse_external(argument)

    def version(self) -> str:
        return self._version

    @property
    def label(self) -> str:
        return self._label

    def describe(self) -> str:
        nodes = ", ".join(f"{n}={h.smtp[0]}:{h.smtp[1]}" for n, h in self.handles.items())
        return f"external nodes {nodes}"

    def cannot_run(self, scenario: Scenario) -> str | None:
        missing = [n for n in scenario.topology.nodes if n not in self.handles]
        if missing:
            return f"has no node {', '.join(missing)} (nodes: {', '.join(self.handles)})"
        if "control_api" not in self.capabilities:
            if scenario.topology.sinks() or len(scenario.topology.nodes) > 1:
                return (
                    "cannot route peers and next hops through the harness without "
                    "capability control_api"
                )
            if scenario.settings:
                return "cannot apply the scenario's settings without capability set_settings"
        return None

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
