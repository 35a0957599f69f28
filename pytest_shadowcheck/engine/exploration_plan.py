"""An explored scenario's plan: its operations, and the scenario file built from any
subset of them.

engine/generator.py draws the operations (``plan()``); shrinking keeps a subset
(engine/shrink.py, ddmin over their numbers) and :class:`ExplorationPlan` rebuilds a
consistent scenario from it - snapshots only of nodes that are up, sends only through a
node that can answer, and an ending that heals whatever the kept operations left
broken, with time for every timer in force.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from pytest_shadowcheck.checks.model import MODEL_BEHAVIOURS
from pytest_shadowcheck.errors import SourceRef
from pytest_shadowcheck.scenario.durations import parse_duration
from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.scenario.marked_yaml import SAFE_LOADER
from pytest_shadowcheck.scenario.model import Scenario

__all__ = [
    "NEVER_EXPLORED",
    "ClusterState",
    "ExplorationPlan",
    "Operation",
    "behaviour_order",
    "explored_name",
    "parse_seconds",
    "seconds_text",
    "settle",
    "topology_data",
]

#: SafetyNetHoldTime when a scenario sets none (BEHAVIOURS' default: two days)
DEFAULT_HOLD = 2 * 86400.0
#: a Safety Net is swept of expired entries once a minute (SN-3)
SAFETY_NET_SWEEP = 60.0

#: behaviours exploration never exercises, on any target, and why
NEVER_EXPLORED = {
    "PR-4": "exploration keeps to one fault at a time: two copies failing together is "
    "outside the guarantee, judged by the hand-written scenarios",
}


def explored_name(seed: int, index: int) -> str:
    return f"explore_s{seed}_{index:03d}"


@dataclass(frozen=True)
class Operation:
    """One generated operation: its action steps (as a scenario file writes them) and
    what it does to the cluster's state (``effect``: kind and node, link or sink)."""

    label: str
    steps: tuple[dict[str, Any], ...]
    effect: tuple[str, str] = ("", "")
    #: behaviour IDs the operation exercises (the scenario names their union)
    behaviours: tuple[str, ...] = ()


@dataclass
class ClusterState:
    """What the drawn operations have done to the cluster so far: nodes down or paused,
    links cut, next hops scripted."""

    nodes: tuple[str, ...]
    down: set[str] = field(default_factory=set)
    paused: set[str] = field(default_factory=set)
    cut: set[str] = field(default_factory=set)
    scripted: set[str] = field(default_factory=set)

    def answering(self) -> list[str]:
        return [n for n in self.nodes if n not in self.down and n not in self.paused]

    def apply(self, effect: tuple[str, str]) -> None:
        kind, what = effect
        if kind == "down":
            self.down.add(what)
        elif kind == "up":
            self.down.discard(what)
            self.paused.discard(what)
        elif kind == "pause":
            self.paused.add(what)
        elif kind == "resume":
            self.paused.discard(what)
        elif kind == "cut":
            self.cut.add(what)
        elif kind == "heal":
            self.cut.discard(what)
        elif kind == "script":
            self.scripted.update(what.split(","))  # one operation may script two sinks
        elif kind == "unscript":
            self.scripted.discard(what)

    def quiet(self) -> bool:
        return not (self.down or self.paused or self.cut or self.scripted)

    def node_links(self) -> set[str]:
        return {link for link in self.cut if link.partition("->")[2] in self.nodes}

    def hop_links(self) -> set[str]:
        return self.cut - self.node_links()

    def faulted(self, category: str) -> bool:
        """Whether a fault of ``category`` (node, hop) is on."""
        if category == "node":
            return bool(self.down or self.paused or self.node_links())
        return bool(self.scripted or self.hop_links())


@cache
def topology_data(name: str) -> dict[str, Any]:
    path = Path(str(resources.files("scenarios"))) / "topologies" / f"{name}.yaml"
    data: dict[str, Any] = yaml.load(path.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
    return data


def settle(seconds: float) -> dict[str, Any]:
    """A wait after a fault ended: until the cluster holds nothing (promoted, delivered,
    discarded), ``seconds`` at most - the time all of that may take. A cluster that is
    done sooner changes no more, so what the model judges after it is the same."""
    return {"wait": {"until": "quiet", "timeout": seconds_text(seconds)}}


def seconds_text(value: float) -> str:
    return f"{value:g}s"


@dataclass
class ExplorationPlan:
    """The operations of one explored scenario, and how to build it from any subset."""

    seed: int
    index: int
    topology: str
    settings: dict[str, Any]
    operations: list[Operation]
    capabilities: frozenset[str]

    @property
    def name(self) -> str:
        return explored_name(self.seed, self.index)

    def _set(self, kept: Sequence[Operation], name: str) -> list[float]:
        """``name``'s values in seconds: the start's, then the one each operation leaves
        in force (a drill that sets a timer for itself and puts it back waits for its own
        value; the operations after it need only the one it restored)."""
        values = [parse_seconds(self.settings[name])] if name in self.settings else []
        for op in kept:
            left = None
            for step in op.steps:
                if name in (changed := step.get("set_settings", {}).get("values", {})):
                    left = parse_seconds(changed[name])
            if left is not None:
                values.append(left)
        return values

    def _timers(self, kept: Sequence[Operation]) -> tuple[float, float]:
        """The longest ShadowResubmitTimeSpan and ShadowHeartbeatFrequency in force."""
        return (
            max(self._set(kept, "ShadowResubmitTimeSpan")),
            max(self._set(kept, "ShadowHeartbeatFrequency")),
        )

    def _hold(self, kept: Sequence[Operation]) -> float:
        """SafetyNetHoldTime at the end: the start's, or the last one an operation set."""
        return (self._set(kept, "SafetyNetHoldTime") or [DEFAULT_HOLD])[-1]

    def recovery(self, kept: Sequence[Operation]) -> float:
        """How long the cluster needs after a fault ends: a promotion, two heartbeats,
        a retry of the delivery and a margin for a loaded machine."""
        span, beat = self._timers(kept)
        retry = float(self.settings["TransientFailureRetryInterval"])
        return span + 2 * beat + retry + 2.0

    def document(
        self, keep: Sequence[int] | None = None, name: str | None = None
    ) -> dict[str, Any]:
        """The scenario's entry of a scenario file, built from the operations numbered
        ``keep`` (None: all)."""
        chosen = range(len(self.operations)) if keep is None else sorted(set(keep))
        kept = [self.operations[i] for i in chosen]
        data = topology_data(self.topology)
        state = ClusterState(tuple(data["nodes"]))
        snapshots = "control_api" in self.capabilities
        steps: list[dict[str, Any]] = []
        waited = 0.0

        def look(queues: tuple[str, ...] = ("active", "shadow")) -> None:
            if snapshots:
                for node in state.answering():
                    steps.extend({"snapshot": {"node": node, "queue": q}} for q in queues)

        for op in kept:
            for drawn in op.steps:
                routed = "send" in drawn or "session" in drawn
                step = self._routed(drawn, state) if routed else drawn
                if step is None or step.get("snapshot", {}).get("node", "") in (
                    set(state.nodes) - set(state.answering())
                ):
                    continue  # a kept subset may have the drill's node down
                if "wait" in step:
                    wait = step["wait"]
                    waited += parse_seconds(wait["timeout"] if isinstance(wait, dict) else wait)
                steps.append(step)
            state.apply(op.effect)
            look()
        # the ending: every fault healed, every node back, time for every timer
        ending: list[dict[str, Any]] = []
        if state.cut:
            ending.append({"heal": "all"})
        ending += [{"sink": {"name": s, "reply": "accept"}} for s in sorted(state.scripted)]
        ending += [{"resume": n} for n in state.nodes if n in state.paused]
        ending += [{"restart": n} for n in state.nodes if n in state.down]
        if topology_data(self.topology).get("clock") == "virtual":
            # a retry is due on the nodes' clock: move it past TransientFailureRetryInterval
            # (not past ShadowResubmitTimeSpan), twice, or a refused delivery waits forever
            ending += [{"advance": "1s"}, {"wait": "1s"}, {"advance": "1s"}]
        final = self.recovery(kept) + 2.0
        ending.append(settle(final))
        steps += ending
        state = ClusterState(state.nodes)
        # once quiet, every delivered message is in its primary's Safety Net and in the
        # Shadow Safety Net of each shadow told to discard it (SN-1, SN-2): a shadow
        # that deletes a discarded copy shows only here
        look(("active", "shadow", "safetynet_primary", "safetynet_shadow"))
        if snapshots and topology_data(self.topology).get("clock") == "virtual":
            # the Safety Nets' hold time, on the nodes' clock: half a minute short of it
            # the latest deliveries are still held (SN-1, SN-2), a sweep past it nothing
            # delivered is (SN-3)
            hold = self._hold(kept)
            for advance in (hold - 30.0, 30.0 + SAFETY_NET_SWEEP + 60.0):
                # the model reads a look as made up to its slack (2 s) earlier: the clock
                # moved before that
                steps += [{"advance": seconds_text(advance)}, {"wait": "2.5s"}]
                look(("safetynet_primary", "safetynet_shadow"))
        # every ID the model judges: its FAIL names the one whose prediction failed
        judged = set(MODEL_BEHAVIOURS) - set(NEVER_EXPLORED)
        behaviours = sorted({b for op in kept for b in op.behaviours} | judged, key=behaviour_order)
        doc: dict[str, Any] = {
            "name": name or self.name,
            "title": f"explored from seed {self.seed}, scenario {self.index}: "
            + (", ".join(op.label for op in kept) or "no operation"),
            "behaviours": behaviours,
            # the behaviours are all the model may judge: only a check naming one (the
            # model's own) evidences it; an invariant's or a step's FAIL fails the scenario
            "evidence": "named",
            "topology": self.topology,
            "settings": {
                k: seconds_text(v) if isinstance(v, float) else v for k, v in self.settings.items()
            },
            # the waits, a few seconds a step on a loaded machine, and the ending
            "timeout": seconds_text(round(waited + final + 2 * len(steps) + 60)),
            # the no-loss invariant stops waiting once everything arrived
            "settle": "20s",
            "steps": steps,
            "expect": [{"model": {}}],
        }
        return doc

    def _routed(self, step: dict[str, Any], state: ClusterState) -> dict[str, Any] | None:
        """A send (or a harness session) through a node that answers: its own when it
        can, else the first that can (a kept subset may have the drawn one down); None
        when none can."""
        key = "send" if "send" in step else "session"
        send = dict(step[key])
        answering = state.answering()
        if not answering:
            return None
        if send["via"] not in answering:
            send["via"] = answering[0]
        return {key: send}

    def scenario(
        self, keep: Sequence[int] | None = None, directory: Path | None = None, name: str = ""
    ) -> Scenario:
        """The scenario of the operations ``keep`` (None: all), written to ``directory``
        (default: a per-user temporary one) and loaded back as the suite loads a file."""
        (scenario,) = load_scenario_file(self.write(keep, directory, name))
        return scenario

    def write(
        self,
        keep: Sequence[int] | None = None,
        directory: Path | None = None,
        name: str = "",
        text: str | None = None,
    ) -> Path:
        """Write the scenario file of the operations ``keep`` (see :meth:`scenario`)
        without loading it: the collection will. ``text``: its :meth:`yaml`, already
        made."""
        text = self.yaml(keep, name=name) if text is None else text
        where = directory or _default_directory()
        where.mkdir(parents=True, exist_ok=True)
        path = where / f"{name or self.name}.yaml"
        temporary = path.with_suffix(f".{os.getpid()}.tmp")
        temporary.write_text(text, encoding="utf-8")
        os.replace(temporary, path)
        return path

    def yaml(self, keep: Sequence[int] | None = None, name: str = "") -> str:
        doc = self.document(keep, name or None)
        ops = len(self.operations) if keep is None else len(set(keep))
        head = (
            f"Explored scenario: seed {self.seed}, index {self.index}, {ops} operation(s) "
            f"of {len(self.operations)}; generated by pytest-shadowcheck's exploration"
        )
        return "".join(f"# {line}\n" for line in head.splitlines()) + yaml.dump(
            {"scenarios": [doc]},
            Dumper=_DUMPER,
            sort_keys=False,
            default_flow_style=None,
            width=88,
        )


#: libyaml's emitter when PyYAML has it: a deep exploration writes hundreds of files
_DUMPER: type[yaml.SafeDumper] = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def _default_directory() -> Path:
    return Path(tempfile.gettempdir()) / f"shadowcheck-explore-{os.getuid()}"


def behaviour_order(bid: str) -> tuple[str, int]:
    family, _, number = bid.partition("-")
    return family, int(number)


def parse_seconds(value: Any) -> float:
    """A duration the generator wrote ("0.5s", "1d", "11h50m", a number), in seconds."""
    return parse_duration(value, SourceRef(Path("<explored scenario>")))
