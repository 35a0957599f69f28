"""A :class:`~.model.Scenario` written back as a scenario file of the suite's own format.

The inverse of :func:`~.loader.load_scenario_file` for what a generated scenario uses
(a bundled topology by name, settings, action steps, checks and expectations): the text
:func:`scenario_yaml` returns loads back into an equal scenario. Exploration writes a
shrunk divergence so (engine/generator.py, plugin/exploration.py): the reproduction is a
scenario an admin can read, keep and add to ``scenarios/``.

Values are written as an author would: durations as ``2s`` or ``500ms``, fields left at
their defaults omitted, a send's subject and body only when they are not the defaults.
"""

from __future__ import annotations

from dataclasses import fields
from typing import Any

import yaml

from pytest_shadowcheck.scenario.durations import format_duration
from pytest_shadowcheck.scenario.model import DURATION_SETTINGS, Scenario, Step
from pytest_shadowcheck.scenario.steps import (
    DEFAULT_SENDER,
    FAULT_DIRECTION,
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
    SendSpec,
    SessionSpec,
    SettingsSpec,
    SinkRule,
    SinkSpec,
    SnapshotSpec,
    WaitSpec,
    default_body,
)

__all__ = ["WriterError", "scenario_document", "scenario_yaml"]

#: an expectation's arguments that the loader parses as durations
_CHECK_DURATIONS = ("within", "for", "at_least", "at_most", "tolerance")
_DEFAULT_TIMEOUT = 120.0
_DEFAULT_SETTLE = 10.0


class WriterError(ValueError):
    """A scenario holds something the writer cannot write (a workload step)."""


def _duration(seconds: float) -> str:
    return format_duration(float(seconds))


def _settings(values: dict[str, Any]) -> dict[str, Any]:
    return {
        k: _duration(v) if k in DURATION_SETTINGS and not isinstance(v, bool) else v
        for k, v in values.items()
    }


def _send(spec: SendSpec, scenario: str) -> dict[str, Any]:
    out: dict[str, Any] = {"id": spec.id, "via": spec.via}
    if spec.sender != DEFAULT_SENDER:
        out["from"] = spec.sender
    out["to"] = list(spec.to)
    if spec.message_id:
        out["message_id"] = spec.message_id
    if spec.subject != f"shadowcheck {scenario} {spec.id}":
        out["subject"] = spec.subject
    if spec.body != default_body(scenario, spec.id):
        out["body"] = spec.body
    if spec.size is not None:
        out["size"] = spec.size
    if spec.timeout != SEND_TIMEOUT:
        out["timeout"] = _duration(spec.timeout)
    if spec.background:
        out["background"] = True
    return out


def _fault(spec: FaultSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"link": spec.link, "kind": spec.kind}
    if spec.seconds:
        out["seconds"] = _duration(spec.seconds)
    if spec.direction != FAULT_DIRECTION.get(spec.kind, "both"):
        out["direction"] = spec.direction
    if spec.bytes:
        out["bytes"] = spec.bytes
    if spec.point:
        out["point"] = {spec.point: spec.verb}
    if spec.occurrence != 1:
        out["occurrence"] = spec.occurrence
    if spec.connection is not None:
        out["connection"] = spec.connection
    return out


def _wait(spec: WaitSpec) -> Any:
    if spec.delivered is None and spec.reply is None and spec.until is None:
        return _duration(spec.timeout)
    keys = ("delivered", "reply", "to", "until")
    out = {k: v for k in keys if (v := getattr(spec, k)) is not None}
    return {**out, "timeout": _duration(spec.timeout)}


def _sink_rule(rule: SinkRule) -> Any:
    if rule.times is None and not rule.delay:
        return rule.reply
    out: dict[str, Any] = {"reply": rule.reply}
    if rule.times is not None:
        out["times"] = rule.times
    if rule.delay:
        out["delay"] = _duration(rule.delay)
    return out


def _sink(spec: SinkSpec) -> dict[str, Any]:
    out: dict[str, Any] = {"name": spec.name}
    if spec.reply is not None:
        out["reply"] = spec.reply
    for rule in spec.rules:
        if rule.stage == "RCPT":
            out.setdefault("rcpt", {})[rule.match] = _sink_rule(rule)
        else:
            out[rule.stage.lower()] = _sink_rule(rule)
    return out


def _keyed(spec: Any, durations: tuple[str, ...] = ()) -> dict[str, Any]:
    """A spec's fields not at their defaults (tuples as lists, durations written)."""
    out: dict[str, Any] = {}
    for f in fields(spec):
        value = getattr(spec, f.name)
        if value is None or value == () or value == f.default:
            continue
        out[f.name] = (
            _duration(value)
            if f.name in durations
            else (list(value) if isinstance(value, tuple) else value)
        )
    return out


def _session(spec: SessionSpec) -> dict[str, Any]:
    """A ``session`` step: each line a plain string unless it carries a check."""
    say: list[Any] = []
    for item in spec.say:
        if item.send is not None and item.reply is None and not item.refused:
            say.append(item.send)
            continue
        said: dict[str, Any] = {
            k: v
            for k, v in (("send", item.send), ("auth_as", item.auth_as), ("message", item.message))
            if v is not None
        }
        if item.reply is not None:
            said["reply"] = item.reply
        if item.refused:
            said["refused"] = True
        say.append(said)
    out: dict[str, Any] = {"via": spec.via, "say": say}
    out |= _keyed(spec, durations=("timeout", "idle", "keepalive"))
    out["say"] = say
    if out.get("control") == {}:
        out.pop("control")
    return out


def _check(step: Step) -> dict[str, Any]:
    arg = {
        k: _duration(v) if k in _CHECK_DURATIONS and isinstance(v, (int, float)) else v
        for k, v in dict(step.arg).items()
    }
    if step.kind == "connections":
        # counts of connections, not durations (the loader reads them as numbers)
        arg |= {k: int(v) for k, v in step.arg.items() if k in ("count", "at_least", "at_most")}
    if step.behaviours:
        arg["behaviours"] = list(step.behaviours)
    if step.given is not None:
        arg["given"] = step.given
    if step.precondition:
        arg["precondition"] = True
    return {step.kind: arg}


def _action(step: Step, scenario: str) -> dict[str, Any]:
    spec = step.arg
    value: Any
    if isinstance(spec, SendSpec):
        value = _send(spec, scenario)
    elif isinstance(spec, FaultSpec):
        value = _fault(spec)
    elif isinstance(spec, HealSpec):
        value = spec.link or "all"
    elif isinstance(spec, NodeActionSpec):
        value = spec.node
    elif isinstance(spec, DiskFullSpec):
        value = {"node": spec.node, "after": spec.after} if spec.after else spec.node
    elif isinstance(spec, WaitSpec):
        value = _wait(spec)
    elif isinstance(spec, AdvanceSpec):
        value = _duration(spec.seconds)
    elif isinstance(spec, SettingsSpec):
        value = {"values": _settings(spec.values)}
        if spec.nodes:
            value["nodes"] = list(spec.nodes)
        if spec.result is not None:
            value["result"] = spec.result
    elif isinstance(spec, ResubmitSpec):
        value = {
            "node": spec.node, "database": spec.database,
            "start": spec.start.written, "end": spec.end.written,
        }  # fmt: skip
    elif isinstance(spec, (SnapshotSpec, DirectorySpec, RouteSpec)):
        value = _keyed(spec)
        if isinstance(spec, RouteSpec) and spec.node is not None:
            value.pop("kind", None)
    elif isinstance(spec, SinkSpec):
        value = _sink(spec)
    elif isinstance(spec, NoteSpec):
        value = spec.text
    elif isinstance(spec, SessionSpec):
        value = _session(spec)
    elif isinstance(spec, CheckSpec):
        return {"check": _check(spec.expectation)}
    else:
        raise WriterError(f"a {step.kind} step cannot be written back as YAML ({step.where})")
    return {step.kind: value}


def scenario_document(scenario: Scenario) -> dict[str, Any]:
    """The scenario as the mapping one entry of a file's ``scenarios:`` list holds."""
    if scenario.topology.name == "inline":
        raise WriterError(f"{scenario.name}: an inline topology cannot be written by name")
    doc: dict[str, Any] = {
        "name": scenario.name,
        "title": scenario.title,
        "behaviours": list(scenario.behaviours),
    }
    if scenario.requires:
        doc["requires"] = list(scenario.requires)
    doc["topology"] = scenario.topology.name
    if scenario.settings:
        doc["settings"] = _settings(scenario.settings)
    if scenario.node_settings:
        doc["node_settings"] = {n: _settings(v) for n, v in scenario.node_settings.items()}
    if scenario.needs_settings:
        doc["needs_settings"] = list(scenario.needs_settings)
    if scenario.named_evidence:
        doc["evidence"] = "named"
    if scenario.given is not None:
        doc["given"] = scenario.given
    if scenario.permitted_headers:
        doc["permitted_headers"] = list(scenario.permitted_headers)
    if scenario.start_refused is not None:
        doc["start"] = {"refused": scenario.start_refused}
    if scenario.timeout != _DEFAULT_TIMEOUT:
        doc["timeout"] = _duration(scenario.timeout)
    if scenario.settle != _DEFAULT_SETTLE:
        doc["settle"] = _duration(scenario.settle)
    doc["steps"] = [_action(step, scenario.name) for step in scenario.steps]
    doc["expect"] = [_check(step) for step in scenario.expect]
    return doc


class _Dumper(yaml.SafeDumper):
    """Block style, keys in the order written, long text folded as an author would."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def scenario_yaml(scenario: Scenario, comment: str = "") -> str:
    """A scenario file holding ``scenario`` alone; ``comment`` (lines) heads it."""
    head = "".join(f"# {line}\n" if line else "#\n" for line in comment.splitlines())
    body = yaml.dump(
        {"scenarios": [scenario_document(scenario)]},
        Dumper=_Dumper,
        sort_keys=False,
        allow_unicode=True,
        width=88,
        default_flow_style=None,
    )
    return head + body
