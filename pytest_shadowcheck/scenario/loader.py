"""Scenario loader: YAML with line numbers, JSON Schema, then semantic checks.

A scenario file holds optional ``defaults`` and a list of ``scenarios``. Each
scenario names the behaviour IDs it checks, the capabilities it needs, a
topology (inline, or the name of a shared file under ``topologies/``),
settings under their Exchange names, steps and expectations. See
``docs/scenario-format.md``.

Every problem is raised as one :class:`~pytest_shadowcheck.errors.ScenarioError`
pointing at the file and line where it is. The model the loader builds is in
:mod:`~pytest_shadowcheck.scenario.model` (re-exported here), the step checks in
:mod:`~pytest_shadowcheck.scenario.validation`.
"""

from __future__ import annotations

import dataclasses
import re
from functools import cache, lru_cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from pytest_shadowcheck.errors import ScenarioError, SourceRef
from pytest_shadowcheck.scenario.durations import parse_duration
from pytest_shadowcheck.scenario.marked_yaml import SAFE_LOADER, load_marked_yaml, locate
from pytest_shadowcheck.scenario.model import (
    CAPABILITIES,
    CAPABILITY_NEED,
    CHECK_CAPABILITY,
    DURATION_SETTINGS,
    MTA_CAPABILITIES,
    PROCESS_CAPABILITIES,
    SENDERS_SINK,
    SETTING_NAMES,
    STEP_CAPABILITY,
    NextHop,
    NodeSpec,
    Scenario,
    Step,
    Topology,
    plain,
)
from pytest_shadowcheck.scenario.schema import scenario_schema, topology_schema, validate
from pytest_shadowcheck.scenario.steps import DEFAULT_SENDER
from pytest_shadowcheck.scenario.validation import StepChecker

__all__ = [
    "CAPABILITIES",
    "CAPABILITY_NEED",
    "CHECK_CAPABILITY",
    "MTA_CAPABILITIES",
    "PROCESS_CAPABILITIES",
    "SETTING_NAMES",
    "STEP_CAPABILITY",
    "NextHop",
    "NodeSpec",
    "Scenario",
    "Step",
    "Topology",
    "load_behaviours",
    "load_scenario_file",
]


DEFAULT_TIMEOUT = 120.0
DEFAULT_SETTLE = 10.0
BUNDLED_TOPOLOGIES = "topologies"


@cache
def load_behaviours() -> dict[str, dict[str, str]]:
    """The behaviour catalogue shipped with the package: ID -> {summary, text, group}."""
    text = resources.files("pytest_shadowcheck").joinpath("behaviours.yaml")
    # libyaml: every pytest --shadowcheck run reads it, an in-process pytester run again
    data = yaml.load(text.read_text(encoding="utf-8"), Loader=SAFE_LOADER)
    return {entry["id"]: entry for entry in data["behaviours"]}


def _topology_dirs(path: Path) -> list[Path]:
    bundled = Path(str(resources.files("scenarios"))) / BUNDLED_TOPOLOGIES
    out = [path.parent / BUNDLED_TOPOLOGIES, path.parent.parent / BUNDLED_TOPOLOGIES, bundled]
    seen: list[Path] = []
    for candidate in out:
        if candidate not in seen:
            seen.append(candidate)
    return seen


@lru_cache(maxsize=64)
def _topology_file(path: Path, mtime_ns: int, size: int) -> Any:
    """A topology file, parsed and validated once per version of it: most scenarios of a
    library name one of a few topologies (only read, never changed, by the builder)."""
    data = load_marked_yaml(path)
    validate(data, topology_schema(), path)
    return data


def _load_topology(ref: Any, doc: Any, doc_path: list[Any], path: Path) -> Topology:
    line, column = locate(doc, doc_path)
    where = SourceRef(path, line, column)
    if isinstance(ref, str):
        dirs = _topology_dirs(path)
        for directory in dirs:
            candidate = directory / f"{ref}.yaml"
            if candidate.is_file():
                stat = candidate.stat()
                data = _topology_file(candidate, stat.st_mtime_ns, stat.st_size)
                return _build_topology(ref, data, candidate)
        known = sorted({p.stem for d in dirs if d.is_dir() for p in d.glob("*.yaml")})
        raise ScenarioError(
            f"unknown topology {ref!r}",
            where,
            f"an inline topology or one of {', '.join(known) or '(none found)'} "
            f"(files NAME.yaml in {', '.join(str(d) for d in dirs)})",
        )
    return _build_topology("inline", ref, path, doc=doc, doc_path=doc_path)


def _build_topology(
    name: str, data: Any, path: Path, doc: Any = None, doc_path: list[Any] | None = None
) -> Topology:
    doc = data if doc is None else doc
    base = doc_path or []

    def where(*parts: Any) -> SourceRef:
        line, column = locate(doc, [*base, *parts])
        return SourceRef(path, line, column)

    nodes = {
        n: NodeSpec(
            name=n,
            site=spec.get("site", "site-a"),
            dag=spec["dag"] if "dag" in spec else data.get("boundary", "dag1"),
            profile=spec.get("profile"),
            next_hops={
                d: NextHop(d, h.get("sink"), h.get("kind", "mailbox"), h.get("node"))
                for d, h in spec.get("next_hops", {}).items()
            },
        )
        for n, spec in data["nodes"].items()
    }
    hops = {
        d: NextHop(d, h.get("sink"), h.get("kind", "mailbox"), h.get("node"))
        for d, h in data.get("next_hops", {}).items()
    }
    for domain, hop in hops.items():
        if hop.node and hop.node not in nodes:
            raise ScenarioError(
                f"next hop {domain!r} names unknown node {hop.node!r}",
                where("next_hops", domain),
                f"one of {', '.join(nodes)}",
            )
    return Topology(
        name=name,
        nodes=nodes,
        next_hops=hops,
        boundary=data.get("boundary", "dag1"),
        profile=data.get("profile", "2013"),
        clock=data.get("clock", "real"),
        directory=plain(data.get("directory", {})),
        description=data.get("description", ""),
    )


_MAIL_FROM = re.compile(r"\s*MAIL\s+FROM:\s*<([^>]*)>", re.I)


def sender_domains(steps: list[Any]) -> list[str]:
    """The domains of every envelope sender the scenario's steps use: the default
    sender's (send steps and workloads), each ``from``, each session's MAIL FROM."""
    senders = [DEFAULT_SENDER]
    for step in steps:
        if not isinstance(step, dict):
            continue
        send = step.get("send")
        if isinstance(send, dict) and send.get("from"):
            senders.append(str(send["from"]))
        session = step.get("session")
        for item in session.get("say", []) if isinstance(session, dict) else []:
            line = item.get("send") if isinstance(item, dict) else item
            found = _MAIL_FROM.match(line) if isinstance(line, str) else None
            if found:
                senders.append(found.group(1))
    domains = [s.rpartition("@")[2].lower() for s in senders if "@" in s]
    return list(dict.fromkeys(d for d in domains if d))


def with_senders_sink(topology: Topology, domains: list[str]) -> Topology:
    """The topology with every senders' domain routed to a sink: its own next hop when
    it has one (for every node), else the harness's SENDERS_SINK (a boundary), so that a
    bounce the MTA sends always lands where the harness records it. A topology with no
    next hop at all is left as it is."""
    if not topology.next_hops and not any(n.next_hops for n in topology.nodes.values()):
        # no mail leaves these nodes: the harness observes no delivery at all there (the
        # no-loss invariant is not judged), and a sink of its own would change that
        return topology
    hops = dict(topology.next_hops)
    senders: dict[str, str] = {}
    added: list[str] = []
    taken = set(topology.sinks())
    for domain in domains:
        own = hops.get(domain)
        if own is not None and own.sink:
            senders[domain] = own.sink
            continue
        if own is not None or any(domain in n.next_hops for n in topology.nodes.values()):
            continue  # routed to a node, or by some nodes only: the topology's own choice
        name = SENDERS_SINK if SENDERS_SINK not in taken - set(senders.values()) else None
        if name is None:
            continue  # a sink of the topology already has the name: route nothing
        hops[domain] = NextHop(domain, name, "boundary")
        senders[domain] = name
        added.append(domain)
    return dataclasses.replace(topology, next_hops=hops, senders=senders, added_hops=tuple(added))


def load_scenario_file(path: Path, timers: dict[str, float] | None = None) -> list[Scenario]:
    """Load, validate and check one scenario file; raise ScenarioError on any problem.

    ``timers`` (setting -> seconds) replaces those settings wherever the file sets them,
    before any window is counted from them: the scenarios as they run on an MTA that has
    those timers compiled in (targets/fit.py stretches a scenario so)."""
    path = Path(path)
    doc = load_marked_yaml(path)
    if not isinstance(doc, dict):
        raise ScenarioError(
            "a scenario file must be a mapping with a 'scenarios' list",
            SourceRef(path, 1),
            "scenarios: [...] (and optionally defaults: {...})",
        )
    validate(doc, scenario_schema(), path)
    defaults = doc.get("defaults", {})
    catalogue = load_behaviours()
    out: list[Scenario] = []
    names: set[str] = set()
    for index, raw in enumerate(doc["scenarios"]):
        base = ["scenarios", index]

        def where(*parts: Any, _base: list[Any] = base) -> SourceRef:
            line, column = locate(doc, [*_base, *parts])
            return SourceRef(path, line, column)

        name = raw["name"]
        if name in names:
            raise ScenarioError(f"duplicate scenario name {name!r}", where("name"), "unique names")
        names.add(name)
        merged: dict[str, Any] = {**defaults, **raw}
        merged["settings"] = {**defaults.get("settings", {}), **raw.get("settings", {})}
        merged["requires"] = list(
            dict.fromkeys([*defaults.get("requires", []), *raw.get("requires", [])])
        )
        topo_path = [*base, "topology"] if "topology" in raw else ["defaults", "topology"]
        if "topology" not in merged:
            raise ScenarioError(
                f"scenario {name!r} has no topology", where(), "topology: NAME or a mapping"
            )
        for i, bid in enumerate(merged["behaviours"]):
            if bid not in catalogue:
                bpath = ["behaviours", i] if "behaviours" in raw else None
                at = where(*bpath) if bpath else SourceRef(path, *locate(doc, ["defaults"]))
                raise ScenarioError(
                    f"unknown behaviour ID {bid!r}", at, "an ID of the catalogue (CR-1 .. TO-4)"
                )
        topology = with_senders_sink(
            _load_topology(merged["topology"], doc, topo_path, path),
            sender_domains(raw.get("steps", [])),
        )
        settings: dict[str, Any] = {}
        for key, value in merged["settings"].items():
            in_raw = key in raw.get("settings", {})
            spath = [*base, "settings", key] if in_raw else ["defaults", "settings", key]
            at = SourceRef(path, *locate(doc, spath))
            settings[key] = parse_duration(value, at) if key in DURATION_SETTINGS else value
            if timers and key in timers:
                settings[key] = timers[key]
        node_settings: dict[str, dict[str, Any]] = {}
        for node, values in raw.get("node_settings", {}).items():
            if node not in topology.nodes:
                raise ScenarioError(
                    f"node_settings for unknown node {node!r}",
                    where("node_settings", node),
                    f"a node of topology {topology.name!r}: {', '.join(topology.nodes)}",
                )
            node_settings[node] = {
                key: parse_duration(value, where("node_settings", node, key))
                if key in DURATION_SETTINGS
                else value
                for key, value in values.items()
            }
            for key in set(node_settings[node]) & set(timers or {}):
                node_settings[node][key] = (timers or {})[key]
        context = StepChecker(
            path, doc, topology, settings, list(merged["behaviours"]), scenario=name
        )
        steps = [
            context.step(step, [*base, "steps", i]) for i, step in enumerate(raw.get("steps", []))
        ]
        context.sent_all = True
        for i, needed in enumerate(raw.get("needs_settings", [])):
            if needed not in settings and not any(needed in v for v in node_settings.values()):
                raise ScenarioError(
                    f"needs_settings names {needed!r}, which the scenario does not set",
                    where("needs_settings", i),
                    "a setting of the scenario's settings or node_settings",
                )
        scenario_given = raw.get("given")
        if scenario_given is not None:
            scenario_given = plain(scenario_given)
            context.matcher(scenario_given, [*base, "given"])
        expect = [
            context.check(check, [*base, "expect", i])
            for i, check in enumerate(merged.get("expect", []))
        ]
        timeout = DEFAULT_TIMEOUT
        if "timeout" in merged:
            timeout = parse_duration(merged["timeout"], where("timeout"))
        settle = DEFAULT_SETTLE
        if "settle" in merged:
            settle = parse_duration(merged["settle"], where("settle"))
        out.append(
            Scenario(
                name=name,
                title=raw.get("title", name),
                behaviours=list(merged["behaviours"]),
                requires=merged["requires"],
                topology=topology,
                settings=settings,
                steps=steps,
                expect=expect,
                timeout=timeout,
                settle=settle,
                where=where(),
                node_settings=node_settings,
                start_refused=raw.get("start", {}).get("refused"),
                permitted_headers=list(merged.get("permitted_headers", [])),
                given=scenario_given,
                timer_settings=dict(context.timer_settings),
                needs_settings=tuple(raw.get("needs_settings", ())),
                named_evidence=raw.get("evidence", "scenario") == "named",
            )
        )
    return out
