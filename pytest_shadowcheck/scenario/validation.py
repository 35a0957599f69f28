"""Semantic checks of a scenario's steps and expectations against its topology.

The JSON Schema has already checked each step's shape; what it cannot know is
whether a node, link, sink or message a step names exists at that point, and
whether the values fit together. Every problem is one ScenarioError at the
file and line of the offending value. An action step comes out with its arguments as
a typed spec (:mod:`.steps`), defaults applied; an expectation with its arguments as a
mapping, durations parsed.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pytest_shadowcheck.errors import ScenarioError, SourceRef
from pytest_shadowcheck.scenario.capabilities import POINT_FAULTS
from pytest_shadowcheck.scenario.durations import moment, parse_duration
from pytest_shadowcheck.scenario.marked_yaml import locate
from pytest_shadowcheck.scenario.model import DURATION_SETTINGS, Step, Topology, plain
from pytest_shadowcheck.scenario.sink_spec import build_sink_spec
from pytest_shadowcheck.scenario.steps import (
    DEFAULT_SENDER,
    REPLY_TIMEOUT,
    SEND_TIMEOUT,
    AdvanceSpec,
    CheckSpec,
    DirectorySpec,
    DiskFullSpec,
    FaultSpec,
    HealSpec,
    NodeActionSpec,
    NoteSpec,
    ResubmitSpec,
    RouteSpec,
    SayItem,
    SendSpec,
    SessionSpec,
    SettingsSpec,
    SinkSpec,
    SnapshotSpec,
    WaitSpec,
    default_body,
    fault_point,
)
from pytest_shadowcheck.scenario.workload_spec import WorkloadSpec, load_workload

__all__ = ["StepChecker"]


class StepChecker:
    """Semantic checks of steps and expectations against the scenario's topology."""

    def __init__(
        self,
        path: Path,
        doc: Any,
        topology: Topology,
        settings: dict[str, Any],
        behaviours: list[str],
        *,
        scenario: str,
    ):
        self.path = path
        #: the scenario's name (a send step's subject and body name it)
        self.scenario = scenario
        self.doc = doc
        self.topology = topology
        self.settings = settings
        self.behaviours = behaviours
        self.sent: list[str] = []
        self.sent_all = False
        #: settings the scenario's windows and waits are counted from: how often each is
        self.timer_settings: dict[str, int] = {}

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
        seconds = parse_duration(value, self.at(doc_path), self.settings if timers else None)
        if timers and isinstance(value, str):
            # a window counted from a setting: a target whose timer for it is compiled in
            # at another value cannot keep the window (targets/fit.py)
            terms = re.split(r"\s*[+-]\s*", value.strip())
            for term in terms:
                if term in self.settings:
                    self.timer_settings[term] = self.timer_settings.get(term, 0) + 1
        return seconds

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
        """An action step, checked, with its arguments as a spec (scenario/steps.py)."""
        kind = next(iter(raw))
        if kind == "check":
            check = self.check(raw[kind], [*doc_path, kind])
            where = self.at(doc_path)
            tags = (check.behaviours, check.given, check.precondition)
            inner = Step(check.kind, check.arg, where, *tags)
            return Step(kind, CheckSpec(inner), where, *tags)
        spec = _BUILDERS[kind](self, plain(raw[kind]), [*doc_path, kind])
        return Step(kind, spec, self.at(doc_path))

    def send(self, arg: dict[str, Any], p: list[Any]) -> SendSpec:
        ref = arg["id"]
        if ref in self.sent:
            raise ScenarioError(f"duplicate message id {ref!r}", self.at([*p, "id"]), "unique ids")
        via = self.node(arg["via"], [*p, "via"])
        timeout = SEND_TIMEOUT
        if "timeout" in arg:
            timeout = self.duration(arg["timeout"], [*p, "timeout"])
        self.sent.append(ref)
        return SendSpec(
            id=ref,
            via=via,
            sender=arg.get("from", DEFAULT_SENDER),
            to=tuple(arg["to"]),
            message_id=arg.get("message_id") or None,
            subject=arg.get("subject", f"shadowcheck {self.scenario} {ref}"),
            body=arg.get("body", default_body(self.scenario, ref)),
            size=arg.get("size"),
            timeout=timeout,
            background=bool(arg.get("background", False)),
        )

    def fault(self, arg: dict[str, Any], p: list[Any]) -> FaultSpec:
        link = self.link(arg["link"], [*p, "link"])
        seconds = 0.0
        if "seconds" in arg:
            seconds = self.duration(arg["seconds"], [*p, "seconds"])
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
        at_point = arg["kind"] in POINT_FAULTS
        if at_point != ("point" in arg):
            raise ScenarioError(
                f"fault {arg['kind']!r} " + ("needs a 'point'" if at_point else "takes no 'point'"),
                self.at(p),
                "point: {after: EOD} with kind cut_at or stall_at",
            )
        return FaultSpec.of(
            link, arg["kind"], seconds, arg.get("direction"), int(arg.get("bytes", 0)),
            point=fault_point(arg["point"], self.at([*p, "point"])) if at_point else ("", ""),
            occurrence=int(arg.get("occurrence", 1)), connection=arg.get("connection"),
        )  # fmt: skip

    def wait(self, arg: Any, p: list[Any]) -> WaitSpec:
        if not isinstance(arg, dict):
            return WaitSpec(timeout=self.duration(arg, p, timers=True))
        timeout = self.duration(arg["timeout"], [*p, "timeout"], timers=True)
        for ref in ("delivered", "reply"):
            if ref in arg:
                self.message(arg[ref], [*p, ref])
        if "to" in arg:
            self.sink(arg["to"], [*p, "to"])
        waits_for = [key for key in ("delivered", "reply", "until") if key in arg]
        if len(waits_for) != 1:
            raise ScenarioError(
                "a wait with a timeout waits for one thing: a message delivered, a reply,"
                " or the cluster to be quiet"
                + (f" (this one names {' and '.join(waits_for)})" if waits_for else ""),
                self.at(p),
                "{delivered: M, timeout: 10s}, {reply: M, timeout: 10s},"
                " {until: quiet, timeout: 10s}, or wait: 10s",
            )
        refs = {key: arg.get(key) for key in ("delivered", "reply", "to", "until")}
        return WaitSpec(**refs, timeout=timeout)

    def set_settings(self, arg: dict[str, Any], p: list[Any]) -> SettingsSpec:
        nodes = [self.node(node, [*p, "nodes", i]) for i, node in enumerate(arg.get("nodes", []))]
        values = {
            key: self.duration(value, [*p, "values", key]) if key in DURATION_SETTINGS else value
            for key, value in arg["values"].items()
        }
        return SettingsSpec(values=values, nodes=tuple(nodes), result=arg.get("result"))

    def resubmit(self, arg: dict[str, Any], p: list[Any]) -> ResubmitSpec:
        node = self.node(arg["node"], [*p, "node"])
        start = moment(arg["start"], self.at([*p, "start"]))
        end = moment(arg["end"], self.at([*p, "end"]))
        return ResubmitSpec(node=node, database=arg["database"], start=start, end=end)

    def directory(self, arg: dict[str, Any], p: list[Any]) -> DirectorySpec:
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
        return DirectorySpec(
            group=arg.get("group"),
            members=tuple(arg.get("members", [])),
            recipient=arg.get("recipient"),
            database=arg.get("database"),
        )

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

    def session(self, arg: dict[str, Any], doc_path: list[Any]) -> SessionSpec:
        """Check a session step; its items each one of send, auth_as or message."""
        via = self.node(arg["via"], [*doc_path, "via"])
        behaviours = self.evidenced(arg.get("behaviours", []), doc_path)
        durations = {
            key: self.duration(arg[key], [*doc_path, key], timers=True)
            for key in ("timeout", "idle", "keepalive")
            if key in arg
        }
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
            if "reply" in item and item.get("refused"):
                raise ScenarioError(
                    "a line has either reply (what the reply must match) or refused: true",
                    self.at([*at, "refused"]),
                    "refused: true accepts any 4xx or 5xx reply or the end of the session",
                )
            if "reply" in item:
                try:
                    re.compile(item["reply"])
                except re.error as exc:
                    raise ScenarioError(
                        f"bad regular expression: {exc}", self.at([*at, "reply"]), "a Python regex"
                    ) from None
            items.append(SayItem(**item, where=self.at(at)))
        if "control" in arg:
            self.control(arg["control"], items, [*doc_path, "control"])
        return SessionSpec(
            via=via,
            say=tuple(items),
            timeout=durations.get("timeout", REPLY_TIMEOUT),
            idle=durations.get("idle", 0.0),
            keepalive=durations.get("keepalive"),
            control=dict(arg.get("control", {})),
            behaviours=tuple(behaviours),
        )

    def control(self, control: dict[str, str], items: list[SayItem], doc_path: list[Any]) -> None:
        """A control session replays the lines with stand-in verbs, so it must not
        send messages, and each verb must be said and replaced by a different one."""
        if any(item.message is not None for item in items):
            raise ScenarioError(
                "a session with control cannot send a message: the control session "
                "would send it a second time",
                self.at(doc_path),
                "put the message in a session of its own",
            )
        said = {item.send.partition(" ")[0].upper() for item in items if item.send is not None}
        for verb, stand_in in control.items():
            if verb.upper() not in said or stand_in.upper() in said | {verb.upper()}:
                raise ScenarioError(
                    f"control {verb}: {stand_in} must replace a verb the session says "
                    "with one it does not say",
                    self.at([*doc_path, verb]),
                    "e.g. control: {XQDISCARD: XQNOSUCH}",
                )

    def route(self, arg: dict[str, Any], doc_path: list[Any]) -> RouteSpec:
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
        nodes = [self.node(n, [*doc_path, "nodes", i]) for i, n in enumerate(arg.get("nodes", []))]
        return RouteSpec(
            domain=arg["domain"],
            sink=arg.get("sink"),
            kind=arg.get("kind", "mailbox"),
            node=arg.get("node"),
            nodes=tuple(nodes),
        )

    def matcher(self, arg: dict[str, Any], doc_path: list[Any]) -> None:
        for group in ("any_of", "last_of"):
            if group not in arg:
                continue
            if len(arg) > 1:
                raise ScenarioError(
                    f"'{group}' takes no other key: put them in its matchers",
                    self.at([*doc_path, group]),
                    f"e.g. {{{group}: [{{link: mbx1->mbx2, opened: true}}, {{reply: m1}}]}}",
                )
            for i, each in enumerate(arg[group]):
                self.matcher(each, [*doc_path, group, i])
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
        if "last_before" in arg:
            if not {"link", "line"} <= set(arg) or {"closed", "opened"} & set(arg):
                raise ScenarioError(
                    "'last_before' picks the last line on a link before another event: "
                    "it needs link and line, and takes no closed or opened",
                    self.at([*doc_path, "last_before"]),
                    "e.g. {link: mbx2->mbx1, direction: s2c, line: '^221', "
                    "last_before: {step: '^kill mbx1'}}",
                )
            self.matcher(arg["last_before"], [*doc_path, "last_before"])
        if "first_after" in arg:
            if not {"link", "line"} <= set(arg) or {"closed", "opened"} & set(arg):
                raise ScenarioError(
                    "'first_after' picks the first line on a link after another event: "
                    "it needs link and line, and takes no closed or opened",
                    self.at([*doc_path, "first_after"]),
                    "e.g. {link: chicago->newyork, direction: c2s, line: '^XSHADOW', "
                    "first_after: {step: '^newyork back'}}",
                )
            self.matcher(arg["first_after"], [*doc_path, "first_after"])
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
        arg = plain(raw[kind])
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
        if kind == "fates":
            seen: dict[str, str] = {}
            for key in ("delivered", "retried", "bounced"):
                for i, rcpt in enumerate(arg.get(key, [])):
                    if rcpt.lower() in seen:
                        raise ScenarioError(
                            f"{rcpt} is given two fates: {seen[rcpt.lower()]} and {key}",
                            self.at([*p, key, i]),
                            "each recipient in one of delivered, retried, bounced",
                        )
                    seen[rcpt.lower()] = key
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
        if kind == "model" and "slack" in arg:
            arg["slack"] = self.duration(arg["slack"], [*p, "slack"])
        for key in ("within", "for", "at_least", "at_most", "tolerance"):
            if key in arg:
                arg[key] = self.duration(arg[key], [*p, key], timers=True)
        if kind in ("order", "timing"):
            first, then = ("first", "then") if kind == "order" else ("from", "to")
            self.matcher(arg[first], [*p, first])
            self.matcher(arg[then], [*p, then])
        return Step(kind, arg, self.at(doc_path), behaviours, given, precondition)


def _node_action(checker: StepChecker, arg: Any, p: list[Any]) -> NodeActionSpec:
    return NodeActionSpec(checker.node(arg, p))


def _disk_full(checker: StepChecker, arg: Any, p: list[Any]) -> DiskFullSpec:
    if isinstance(arg, dict):
        return DiskFullSpec(checker.node(arg["node"], [*p, "node"]), int(arg.get("after", 0)))
    return DiskFullSpec(checker.node(arg, p))


def _snapshot(checker: StepChecker, arg: dict[str, Any], p: list[Any]) -> SnapshotSpec:
    return SnapshotSpec(node=checker.node(arg["node"], [*p, "node"]), queue=arg["queue"])


def _sink(checker: StepChecker, arg: dict[str, Any], p: list[Any]) -> SinkSpec:
    return build_sink_spec(
        arg,
        checker.sink(arg["name"], [*p, "name"]),
        lambda sub: checker.at([*p, *sub]),
        lambda value, sub: checker.duration(value, [*p, *sub], timers=True),
    )


def _workload(checker: StepChecker, arg: dict[str, Any], p: list[Any]) -> WorkloadSpec:
    behaviours = checker.evidenced(arg.get("behaviours", []), p) or checker.behaviours
    return load_workload(arg, checker.topology, lambda sub: checker.at([*p, *sub]), behaviours)


#: kind -> what checks an action step and builds its spec (``check`` is StepChecker.step's)
_BUILDERS: dict[str, Callable[[StepChecker, Any, list[Any]], Any]] = {
    "send": StepChecker.send,
    "fault": StepChecker.fault,
    "heal": lambda c, arg, p: HealSpec(None if arg == "all" else c.link(arg, p)),
    "kill": _node_action,
    "pause": _node_action,
    "resume": _node_action,
    "restart": _node_action,
    "wipe": _node_action,
    "power_cut": _node_action,
    "disk_full": _disk_full,
    "disk_error": _node_action,
    "disk_ok": _node_action,
    "wait": StepChecker.wait,
    "advance": lambda c, arg, p: AdvanceSpec(c.duration(arg, p, timers=True)),
    "set_settings": StepChecker.set_settings,
    "resubmit": StepChecker.resubmit,
    "directory": StepChecker.directory,
    "route": StepChecker.route,
    "snapshot": _snapshot,
    "sink": _sink,
    "note": lambda c, arg, p: NoteSpec(str(arg)),
    "session": StepChecker.session,
    "workload": _workload,
}
