"""The JSON Schemas of scenario and topology files (shipped as data next to this module),
and validation that reports the first problem at its file and line."""

from __future__ import annotations

import json
import re
from functools import cache
from importlib import resources
from pathlib import Path
from typing import Any

import jsonschema

from pytest_shadowcheck.errors import ScenarioError, SourceRef
from pytest_shadowcheck.scenario.marked_yaml import locate

__all__ = ["scenario_schema", "topology_schema", "validate"]


@cache
def scenario_schema() -> dict[str, Any]:
    """The JSON Schema every scenario file is validated against (shipped in the package)."""
    text = resources.files("pytest_shadowcheck.scenario.schema").joinpath("scenario.schema.json")
    schema: dict[str, Any] = json.loads(text.read_text(encoding="utf-8"))
    return schema


@cache
def topology_schema() -> dict[str, Any]:
    text = resources.files("pytest_shadowcheck.scenario.schema").joinpath("topology.schema.json")
    schema: dict[str, Any] = json.loads(text.read_text(encoding="utf-8"))
    return schema


def _describe_path(path: list[Any]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else str(part))
    return out or "the file"


def _schema_message(error: jsonschema.ValidationError) -> tuple[str, str | None, list[Any], bool]:
    """Turn one schema error into (message, expected, path, point-at-key)."""
    path = list(error.absolute_path)
    where = _describe_path(path)
    schema = error.schema if isinstance(error.schema, dict) else {}
    validator = error.validator
    if validator == "additionalProperties":
        allowed = sorted(schema.get("properties", {}))
        extra = [k for k in error.instance if k not in schema.get("properties", {})]
        name = extra[0] if extra else "?"
        what = "key"
        desc = schema.get("description", "")
        if "step" in desc:
            what = "step"
        elif "expectation" in desc:
            what = "expectation"
        expected = f"one of {', '.join(allowed)}" if allowed else None
        return f"unknown {what} {name!r} in {where}", expected, [*path, name], True
    if validator == "required":
        missing = re.findall(r"'([^']+)' is a required property", error.message)
        return (
            f"missing key {missing[0] if missing else '?'!r} in {where}",
            f"a mapping with {', '.join(schema.get('required', []))}",
            path,
            False,
        )
    if validator in ("minProperties", "maxProperties") and "exactly one" in schema.get(
        "description", ""
    ):
        keys = ", ".join(map(str, error.instance)) or "none"
        return f"{where} must have exactly one key, has: {keys}", schema["description"], path, False
    if validator == "enum":
        options = ", ".join(map(str, error.validator_value))
        return f"{error.instance!r} is not allowed for {where}", f"one of {options}", path, False
    if validator == "const":
        return (
            f"{error.instance!r} is not allowed for {where}",
            repr(error.validator_value),
            path,
            False,
        )
    if validator == "type":
        kinds = error.validator_value
        kinds = " or ".join(kinds) if isinstance(kinds, list) else kinds
        names = {dict: "a mapping", list: "a list", str: "text", bool: "true/false"}
        got = next((v for k, v in names.items() if isinstance(error.instance, k)), "a number")
        if error.instance is None:
            got = "nothing"
        return f"{where} is {got}", str(kinds), path, False
    if validator == "pattern":
        return (
            f"{error.instance!r} is not a valid value for {where}",
            schema.get("description") or f"text matching {error.validator_value}",
            path,
            False,
        )
    if validator == "oneOf" and error.context:
        # The branch for the instance's own type explains best: drop "wrong type" errors.
        relevant = [e for e in error.context if e.validator not in ("type", "const")]
        best = jsonschema.exceptions.best_match(relevant or error.context)
        if best is not None:
            return _schema_message(best)
    return f"{where}: {error.message}", None, path, False


def validate(data: Any, schema: dict[str, Any], path: Path) -> None:
    validator = jsonschema.Draft202012Validator(schema)
    found = []
    for error in validator.iter_errors(data):
        message, expected, where, at_key = _schema_message(error)
        line, column = locate(data, where, key=at_key)
        found.append((line, column, message, expected))
    if not found:
        return
    found.sort(key=lambda item: (item[0], item[1]))
    line, column, message, expected = found[0]
    more = len(found) - 1
    if more:
        message += f" ({more} more problem{'s' if more > 1 else ''} in this file)"
    raise ScenarioError(message, SourceRef(path, line, column), expected)
