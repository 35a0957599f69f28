"""Scenario model and loader: YAML with line numbers, JSON Schema, semantic checks.

A scenario file holds optional ``defaults`` and a list of ``scenarios``. Each
scenario names the behaviour IDs it checks, the capabilities it needs, a
topology (inline, or the name of a shared file under ``topologies/``),
settings under their Exchange names, steps and expectations. See
``docs/scenario-format.md``.

Every problem is raised as one :class:`~pytest_shadowcheck.errors.ScenarioError`
pointing at the file and line where it is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import yaml

from .durations import parse_duration, resolve_time
from .errors import ScenarioError, SourceRef
from .marked_yaml import load_marked_yaml, locate
from .schema import scenario_schema, topology_schema, validate
from .workload_step import load_workload

__all__ = [
    "CAPABILITIES",
    "CAPABILITY_NEED",
    "MTA_CAPABILITIES",
    "PROCESS_CAPABILITIES",
    "NextHop",
    "Scenario",
    "Step",
    "Topology",
    "load_behaviours",
    "load_scenario_file",
]

#: what whoever runs the node processes can do to them (a target's own means)
PROCESS_CAPABILITIES = ("kill", "pause", "restart", "wipe_queue_db")
#: what only the MTA itself can offer; a docker or external target claims them
MTA_CAPABILITIES = (
    "control_api",
    "virtual_clock",
    "set_settings",
    # the MTA marks each categorisation in the message (X-Categorized-By: NODE; DATE),
    # the only outside view of SN-11's "full categorisation on resubmission"
    "categoriser_stamp",
)
CAPABILITIES = PROCESS_CAPABILITIES + MTA_CAPABILITIES

#: what each capability lets the harness do or see that the wire does not show; an
#: UNTESTABLE reason quotes it so an admin knows what their MTA would have to expose
CAPABILITY_NEED = {
    "kill": "kill a node abruptly (SIGKILL)",
    "pause": "freeze and thaw a node (SIGSTOP/SIGCONT)",
    "restart": "restart a node on the same queue database",
    "wipe_queue_db": "restart a node on a new, empty queue database",
    "control_api": "the MTA's internal state through a control API (queues, Safety Net "
    "contents, discard events, resubmission requests, directory, routes)",
    "virtual_clock": "a clock the harness can move by hours (hold times, expiry, the "
    "12-hour broadcast), internal time a black box does not expose",
    "set_settings": "change the MTA's settings while it runs",
    "categoriser_stamp": "a stamp in each message naming who categorised it, the only "
    "outside view of categorisation",
}

#: capability a step or expectation needs, derived so authors cannot forget one
STEP_CAPABILITY = {
    "kill": "kill",
    "pause": "pause",
    "resume": "pause",
    "restart": "restart",
    "wipe": "wipe_queue_db",
    "advance": "virtual_clock",
    "set_settings": "set_settings",
    "resubmit": "control_api",
    "directory": "control_api",
    "route": "control_api",
    "snapshot": "control_api",
}
CHECK_CAPABILITY = {"queue": "control_api", "config_warning": "control_api"}

DEFAULT_TIMEOUT = 120.0
DEFAULT_SETTLE = 10.0
BUNDLED_TOPOLOGIES = "topologies"


@cache
def load_behaviours() -> dict[str, dict[str, str]]:
    """The behaviour catalogue shipped with the package: ID -> {summary, text, group}."""
    text = resources.files("pytest_shadowcheck").joinpath("behaviours.yaml")
    data = yaml.safe_load(text.read_text(encoding="utf-8"))
    return {entry["id"]: entry for entry in data["behaviours"]}


# --------------------------------------------------------------------------- model


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

    def sinks(self) -> list[str]:
        names = {hop.sink for hop in self.next_hops.values() if hop.sink}
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

    def required_capabilities(self) -> list[str]:
        """Declared capabilities plus those the steps imply: without them the scenario
        cannot run. A check that needs a capability to look (a queue through the control
        API) is not among them: without it that check alone is UNTESTABLE, and the wire
        evidence of the others still decides."""
        needed = set(self.requires)
        for step in self.steps:
            if step.kind in STEP_CAPABILITY:
                needed.add(STEP_CAPABILITY[step.kind])
        if self.topology.clock == "virtual":
            needed.add("virtual_clock")
        return [c for c in CAPABILITIES if c in needed]


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


# --------------------------------------------------------------------------- loading

#: every setting a scenario may give (Exchange names), and those that are durations
SETTING_NAMES = frozenset(scenario_schema()["$defs"]["settings"]["properties"])
DURATION_SETTINGS = frozenset(
    name
    for name, spec in scenario_schema()["$defs"]["settings"]["properties"].items()
    if spec == {"$ref": "#/$defs/duration"}
)


def _topology_dirs(path: Path) -> list[Path]:
    bundled = Path(str(resources.files("scenarios"))) / BUNDLED_TOPOLOGIES
    out = [path.parent / BUNDLED_TOPOLOGIES, path.parent.parent / BUNDLED_TOPOLOGIES, bundled]
    seen: list[Path] = []
    for candidate in out:
        if candidate not in seen:
            seen.append(candidate)
    return seen


def _load_topology(ref: Any, doc: Any, doc_path: list[Any], path: Path) -> Topology:
    line, column = locate(doc, doc_path)
    where = SourceRef(path, line, column)
    if isinstance(ref, str):
        dirs = _topology_dirs(path)
        for directory in dirs:
            candidate = directory / f"{ref}.yaml"
            if candidate.is_file():
                data = load_marked_yaml(candidate)
                validate(data, topology_schema(), candidate)
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
        directory=_plain(data.get("directory", {})),
        description=data.get("description", ""),
    )


def load_scenario_file(path: Path) -> list[Scenario]:
    """Load, validate and check one scenario file; raise ScenarioError on any problem."""
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
        topology = _load_topology(merged["topology"], doc, topo_path, path)
        settings: dict[str, Any] = {}
        for key, value in merged["settings"].items():
            in_raw = key in raw.get("settings", {})
            spath = [*base, "settings", key] if in_raw else ["defaults", "settings", key]
            at = SourceRef(path, *locate(doc, spath))
            settings[key] = parse_duration(value, at) if key in DURATION_SETTINGS else value
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
        context = _Context(path, doc, topology, settings, list(merged["behaviours"]))
        steps = [
            context.step(step, [*base, "steps", i]) for i, step in enumerate(raw.get("steps", []))
        ]
        context.sent_all = True
        scenario_given = raw.get("given")
        if scenario_given is not None:
            scenario_given = _plain(scenario_given)
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
            )
        )
    return out


class _Context:
    """Semantic checks of steps and expectations against the scenario's topology."""

    def __init__(
        self,
        path: Path,
        doc: Any,
        topology: Topology,
        settings: dict[str, Any],
        behaviours: list[str],
    ):
        self.path = path
        self.doc = doc
        self.topology = topology
        self.settings = settings
        self.behaviours = behaviours
        self.sent: list[str] = []
        self.sent_all = False

    def at(self, doc_path: list[Any]) -> SourceRef:
        return SourceRef(self.path, *locate(self.doc, doc_path))

    def node(self, name: Any, doc_path: list[Any]) -> str:
        if name not in self.topology.nodes:
            raise ScenarioError(
                f"unknown node {name!r}",
                self.at(doc_path),
                f"a node of topology {self.topology.name!r}: {', '.join(self.topology.nodes)}",
            )
        return str(name)

    def sink(self, name: Any, doc_path: list[Any]) -> str:
        if name not in self.topology.sinks():
            raise ScenarioError(
                f"unknown sink {name!r}",
                self.at(doc_path),
                f"a sink named in the topology's next_hops: {', '.join(self.topology.sinks())}",
            )
        return str(name)

    def link(self, name: str, doc_path: list[Any]) -> str:
        links = self.topology.links()
        if name not in links:
            raise ScenarioError(
                f"unknown link {name!r}", self.at(doc_path), f"one of {', '.join(links)}"
            )
        return name

    def message(self, ref: Any, doc_path: list[Any]) -> str:
        if ref not in self.sent:
            raise ScenarioError(
                f"unknown message {ref!r}"
                + ("" if self.sent_all else " (not sent before this point)"),
                self.at(doc_path),
                f"the id of a send step: {', '.join(self.sent) or '(no send step yet)'}",
            )
        return str(ref)

    def duration(self, value: Any, doc_path: list[Any], timers: bool = False) -> float:
        return parse_duration(value, self.at(doc_path), self.settings if timers else None)

    def count(self, value: Any, doc_path: list[Any]) -> int:
        """A whole number, or the name of a whole-number setting of the scenario."""
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        setting = self.settings.get(value)
        if isinstance(setting, int) and not isinstance(setting, bool):
            return setting
        hint = "" if setting is None else f" (it is {setting!r}, not a whole number)"
        raise ScenarioError(
            f"{value!r} is not a whole-number setting of this scenario{hint}",
            self.at(doc_path),
            "a number, or a setting the scenario sets, e.g. MaxRetriesForLocalSiteShadow",
        )

    def step(self, raw: Any, doc_path: list[Any]) -> Step:
        kind = next(iter(raw))
        arg = _plain(raw[kind])
        p = [*doc_path, kind]
        if kind == "send":
            if arg["id"] in self.sent:
                raise ScenarioError(
                    f"duplicate message id {arg['id']!r}", self.at([*p, "id"]), "unique ids"
                )
            self.node(arg["via"], [*p, "via"])
            if "timeout" in arg:
                arg["timeout"] = self.duration(arg["timeout"], [*p, "timeout"])
            self.sent.append(arg["id"])
        elif kind == "fault":
            self.link(arg["link"], [*p, "link"])
            if "seconds" in arg:
                arg["seconds"] = self.duration(arg["seconds"], [*p, "seconds"])
            needs = {
                "delay": "seconds",
                "slow_accept": "seconds",
                "slow_greeting": "seconds",
                "drop_after": "bytes",
            }.get(arg["kind"])
            if needs and needs not in arg:
                raise ScenarioError(
                    f"fault {arg['kind']!r} needs {needs!r}", self.at(p), f"{needs}: ..."
                )
        elif kind == "heal":
            if arg != "all":
                self.link(arg, p)
        elif kind in ("kill", "pause", "resume", "restart", "wipe"):
            self.node(arg, p)
        elif kind == "wait":
            if isinstance(arg, dict):
                arg["timeout"] = self.duration(arg["timeout"], [*p, "timeout"], timers=True)
                for ref in ("delivered", "reply"):
                    if ref in arg:
                        self.message(arg[ref], [*p, ref])
                if "to" in arg:
                    self.sink(arg["to"], [*p, "to"])
            else:
                arg = self.duration(arg, p, timers=True)
        elif kind == "advance":
            arg = self.duration(arg, p, timers=True)
        elif kind == "set_settings":
            for i, node in enumerate(arg.get("nodes", [])):
                self.node(node, [*p, "nodes", i])
            for key, value in list(arg["values"].items()):
                if key in DURATION_SETTINGS:
                    arg["values"][key] = self.duration(value, [*p, "values", key])
        elif kind in ("resubmit", "snapshot"):
            self.node(arg["node"], [*p, "node"])
            for key in ("start", "end") if kind == "resubmit" else ():
                resolve_time(arg[key], 0.0, self.at([*p, key]))
        elif kind == "directory":
            group, recipient = "group" in arg, "recipient" in arg
            if (
                group == recipient
                or ("members" in arg and not group)
                or ("database" in arg and not recipient)
            ):
                raise ScenarioError(
                    "a directory step changes one group or one recipient",
                    self.at(p),
                    "{group, members} or {recipient, database}",
                )
        elif kind == "route":
            self.route(arg, p)
        elif kind == "sink":
            self.sink(arg["name"], [*p, "name"])
        elif kind == "session":
            self.session(arg, p)
        elif kind == "workload":
            arg = load_workload(
                arg,
                self.topology,
                lambda sub: self.at([*p, *sub]),
                self.evidenced(arg.get("behaviours", []), p) or self.behaviours,
            )
        elif kind == "check":
            check = self.check(raw[kind], p)
            arg = {"kind": check.kind, **check.arg}
            return Step(
                kind, arg, self.at(doc_path), check.behaviours, check.given, check.precondition
            )
        return Step(kind, arg, self.at(doc_path))

    def evidenced(self, behaviours: list[str], doc_path: list[Any]) -> list[str]:
        """The behaviour IDs a check says it evidences: each must be one the scenario names."""
        for i, bid in enumerate(behaviours):
            if bid not in self.behaviours:
                raise ScenarioError(
                    f"this check evidences {bid}, which the scenario does not name",
                    self.at([*doc_path, "behaviours", i]),
                    f"one of the scenario's behaviours ({', '.join(self.behaviours)}), "
                    "or add it to the scenario's behaviours",
                )
        return list(behaviours)

    def session(self, arg: dict[str, Any], doc_path: list[Any]) -> None:
        """Check a session step and normalise its items to {send|message, reply?}."""
        self.node(arg["via"], [*doc_path, "via"])
        self.evidenced(arg.get("behaviours", []), doc_path)
        for key in ("timeout", "idle", "keepalive"):
            if key in arg:
                arg[key] = self.duration(arg[key], [*doc_path, key], timers=True)
        if "keepalive" in arg and "idle" not in arg:
            raise ScenarioError(
                "keepalive needs idle: how long to keep the session open",
                self.at([*doc_path, "keepalive"]),
                "e.g. {idle: ReceiveConnectionTimeout + 2s, keepalive: 300ms}",
            )
        items = []
        for i, item in enumerate(arg["say"]):
            item = {"send": item} if isinstance(item, str) else item
            at = [*doc_path, "say", i]
            if "auth_as" in item:
                self.node(item["auth_as"], [*at, "auth_as"])
            if "message" in item:
                if item["message"] in self.sent:
                    raise ScenarioError(
                        f"duplicate message id {item['message']!r}",
                        self.at([*at, "message"]),
                        "unique ids",
                    )
                self.sent.append(item["message"])
            if "reply" in item:
                try:
                    re.compile(item["reply"])
                except re.error as exc:
                    raise ScenarioError(
                        f"bad regular expression: {exc}", self.at([*at, "reply"]), "a Python regex"
                    ) from None
            items.append({**item, "where": str(self.at(at))})
        arg["say"] = items
        if "control" in arg:
            self.control(arg["control"], items, [*doc_path, "control"])

    def control(
        self, control: dict[str, str], items: list[dict[str, Any]], doc_path: list[Any]
    ) -> None:
        """A control session replays the lines with stand-in verbs, so it must not
        send messages, and each verb must be said and replaced by a different one."""
        if any("message" in item for item in items):
            raise ScenarioError(
                "a session with control cannot send a message: the control session "
                "would send it a second time",
                self.at(doc_path),
                "put the message in a session of its own",
            )
        said = {item["send"].partition(" ")[0].upper() for item in items if "send" in item}
        for verb, stand_in in control.items():
            if verb.upper() not in said or stand_in.upper() in said | {verb.upper()}:
                raise ScenarioError(
                    f"control {verb}: {stand_in} must replace a verb the session says "
                    "with one it does not say",
                    self.at([*doc_path, verb]),
                    "e.g. control: {XQDISCARD: XQNOSUCH}",
                )

    def route(self, arg: dict[str, Any], doc_path: list[Any]) -> None:
        if ("sink" in arg) == ("node" in arg):
            raise ScenarioError(
                "a route step needs exactly one of sink and node",
                self.at(doc_path),
                "{domain: D, sink: SINK} or {domain: D, node: NODE}",
            )
        if "sink" in arg:
            self.sink(arg["sink"], [*doc_path, "sink"])
        else:
            self.node(arg["node"], [*doc_path, "node"])
            if "kind" in arg:
                raise ScenarioError(
                    "kind applies to a route to a sink only", self.at([*doc_path, "kind"])
                )
        for i, node in enumerate(arg.get("nodes", [])):
            self.node(node, [*doc_path, "nodes", i])

    def matcher(self, arg: dict[str, Any], doc_path: list[Any]) -> None:
        if "any_of" in arg:
            if len(arg) > 1:
                raise ScenarioError(
                    "'any_of' takes no other key: put them in its matchers",
                    self.at([*doc_path, "any_of"]),
                    "e.g. {any_of: [{link: mbx1->mbx2, opened: true}, {reply: m1}]}",
                )
            for i, each in enumerate(arg["any_of"]):
                self.matcher(each, [*doc_path, "any_of", i])
            return
        if "opened" in arg and not ({"link"} <= set(arg) <= {"link", "opened"}):
            raise ScenarioError(
                "'opened' matches the opening of a connection on a link: it needs link, "
                "and takes nothing else",
                self.at([*doc_path, "opened"]),
                "e.g. {link: mbx1->mbx2, opened: true}",
            )
        if "link" in arg:
            self.link(arg["link"], [*doc_path, "link"])
        for ref in ("message", "reply", "delivered"):
            if ref in arg:
                self.message(arg[ref], [*doc_path, ref])
        if "to" in arg:
            self.sink(arg["to"], [*doc_path, "to"])
        if "line" in arg:
            try:
                re.compile(arg["line"])
            except re.error as exc:
                raise ScenarioError(
                    f"bad regular expression: {exc}", self.at([*doc_path, "line"]), "a Python regex"
                ) from None
        if "closed" in arg and ("link" not in arg or "line" in arg or "direction" in arg):
            raise ScenarioError(
                "'closed' matches the close of a connection on a link: it needs link, "
                "and takes no line or direction",
                self.at([*doc_path, "closed"]),
                "e.g. {link: mbx1->mailbox, closed: any, message: m1}",
            )
        if not {"link", "reply", "delivered", "step"} & set(arg):
            raise ScenarioError(
                "an event matcher needs link, reply, delivered or step",
                self.at(doc_path),
                "e.g. {link: mbx1->mbx2, line: '^250', message: m1} or {reply: m1}",
            )

    def check(self, raw: Any, doc_path: list[Any]) -> Step:
        kind = next(iter(raw))
        arg = _plain(raw[kind])
        p = [*doc_path, kind]
        behaviours = self.evidenced(arg.pop("behaviours", []), p)
        given = arg.pop("given", None)
        if given is not None:
            self.matcher(given, [*p, "given"])
        precondition = bool(arg.pop("precondition", False))
        if "message" in arg and kind != "order":
            self.message(arg["message"], [*p, "message"])
        for key in ("contains", "absent"):
            if kind == "queue" and key in arg:
                for i, ref in enumerate(arg[key]):
                    self.message(ref, [*p, key, i])
        if "node" in arg:
            self.node(arg["node"], [*p, "node"])
        if kind in ("delivered", "not_delivered") and "to" in arg:
            self.sink(arg["to"], [*p, "to"])
        if kind in ("delivered", "not_delivered") and "by" in arg:
            self.node(arg["by"], [*p, "by"])
        if kind == "delivered" and "count" in arg and "duplicates" in arg:
            raise ScenarioError(
                "'count' says exactly how many copies arrive: it takes no 'duplicates'",
                self.at([*p, "duplicates"]),
                "delivered: {message: m1, count: 2}",
            )
        if kind in ("lines", "connections"):
            self.link(arg["link"], [*p, "link"])
        if kind == "lines" and arg.get("unique") and "contains" not in arg:
            raise ScenarioError(
                "'unique' says which lines must not repeat: it needs 'contains'",
                self.at([*p, "unique"]),
                "lines: {link, contains: REGEX, unique: true}",
            )
        if kind == "connections":
            for key in ("count", "at_least", "at_most"):
                if key in arg:
                    arg[key] = self.count(arg[key], [*p, key])
            for key in ("from", "to"):
                if key in arg:
                    self.matcher(arg[key], [*p, key])
        for key in ("within", "for", "at_least", "at_most", "tolerance"):
            if key in arg:
                arg[key] = self.duration(arg[key], [*p, key], timers=True)
        if kind in ("order", "timing"):
            first, then = ("first", "then") if kind == "order" else ("from", "to")
            self.matcher(arg[first], [*p, first])
            self.matcher(arg[then], [*p, then])
        return Step(kind, arg, self.at(doc_path), behaviours, given, precondition)
