"""Durations (``500ms``, ``2s``, ``ShadowResubmitTimeSpan + 1s``) and moments on a node's
clock (``now``, ``-2h``, ISO 8601) as scenarios write them."""

from __future__ import annotations

import datetime as dt
import re
from typing import Any

from pytest_shadowcheck.errors import ScenarioError, SourceRef

__all__ = ["parse_duration", "resolve_time"]

_UNITS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}
_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*$")


def parse_duration(value: Any, where: SourceRef, timers: dict[str, Any] | None = None) -> float:
    """Seconds from ``2``, ``1.5``, ``"500ms"``, ``"2s"``, ``"5m"``, ``"3h"``, ``"2d"``.

    With ``timers`` (the scenario's settings), setting names and sums such as
    ``"ShadowResubmitTimeSpan + 2s"`` are accepted too.
    """
    expected = "a duration: seconds or a number with ms, s, m, h or d (e.g. 500ms, 2s, 3h)"
    if timers is not None:
        expected += ", setting names and + / - allowed"
    if isinstance(value, bool):
        raise ScenarioError(f"bad duration {value!r}", where, expected)
    if isinstance(value, (int, float)):
        if value < 0:
            raise ScenarioError(f"bad duration {value!r}: negative", where, expected)
        return float(value)
    if not isinstance(value, str):
        raise ScenarioError(f"bad duration {value!r}", where, expected)
    terms = re.split(r"\s*([+-])\s*", value.strip()) if timers is not None else [value]
    total = 0.0
    sign = 1.0
    for term in terms:
        if term == "+":
            sign = 1.0
            continue
        if term == "-":
            sign = -1.0
            continue
        if timers is not None and term in timers:
            timer = timers[term]
            if not isinstance(timer, (int, float)) or isinstance(timer, bool):
                raise ScenarioError(f"{term} is not a timer", where, expected)
            total += sign * float(timer)
            continue
        match = _DURATION.match(term)
        if not match or match.group(2) not in ("", *_UNITS):
            hint = ""
            if timers is not None and re.fullmatch(r"[A-Z]\w+", term):
                hint = f" ({term} is not set in this scenario's settings)"
            raise ScenarioError(f"bad duration {value!r}{hint}", where, expected)
        total += sign * float(match.group(1)) * _UNITS.get(match.group(2), 1.0)
    if total < 0:
        raise ScenarioError(f"bad duration {value!r}: negative", where, expected)
    return total


def resolve_time(value: Any, now: float, where: SourceRef) -> float:
    """A moment on a node's clock: epoch seconds, ``now``, ``-2h`` / ``+5m`` from
    ``now``, or ISO 8601 (UTC when it has no offset)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value)
    text = str(value).strip()
    if text == "now":
        return now
    if text[:1] in ("+", "-"):
        seconds = parse_duration(text[1:], where)
        return now + seconds if text[0] == "+" else now - seconds
    try:
        moment = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ScenarioError(
            f"bad time {text!r}", where, "now, -2h, +5m, epoch seconds or ISO 8601"
        ) from None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=dt.UTC)
    return moment.timestamp()
