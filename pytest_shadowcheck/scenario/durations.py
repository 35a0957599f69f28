"""Durations (``500ms``, ``2s``, ``ShadowResubmitTimeSpan + 1s``) and moments on a node's
clock (``now``, ``-2h``, ISO 8601) as scenarios write them."""

from __future__ import annotations

import datetime as dt
import math
import re
from dataclasses import dataclass
from typing import Any

from pytest_shadowcheck.errors import ScenarioError, SourceRef

__all__ = ["Moment", "format_duration", "moment", "parse_duration", "resolve_time"]

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


@dataclass(frozen=True)
class Moment:
    """A moment on a node's clock as a step gives it: fixed (``at``, epoch seconds), or
    ``offset`` seconds from the node's ``now`` when the step runs."""

    #: as the scenario wrote it
    written: str
    at: float | None = None
    offset: float = 0.0

    def on(self, now: float) -> float:
        """The moment on a clock that reads ``now``."""
        return self.at if self.at is not None else now + self.offset

    def __str__(self) -> str:
        return self.written


def moment(value: Any, where: SourceRef) -> Moment:
    """A moment from epoch seconds, ``now``, ``-2h`` / ``+5m`` from ``now``, or ISO 8601
    (UTC when it has no offset)."""
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return Moment(str(value), at=float(value))
    text = str(value).strip()
    if text == "now":
        return Moment(str(value))
    if text[:1] in ("+", "-"):
        seconds = parse_duration(text[1:], where)
        return Moment(str(value), offset=seconds if text[0] == "+" else -seconds)
    try:
        parsed = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        raise ScenarioError(
            f"bad time {text!r}", where, "now, -2h, +5m, epoch seconds or ISO 8601"
        ) from None
    if parsed.tzinfo is None:
        parsed = parsed.replace(tzinfo=dt.UTC)
    return Moment(str(value), at=parsed.timestamp())


def resolve_time(value: Any, now: float, where: SourceRef) -> float:
    """A moment on a node's clock: epoch seconds, ``now``, ``-2h`` / ``+5m`` from
    ``now``, or ISO 8601 (UTC when it has no offset)."""
    return moment(value, where).on(now)


#: units a duration is shown in when it is a whole number of them, largest first
_WHOLE_UNITS = (("d", 86400.0), ("h", 3600.0), ("m", 60.0))


def format_duration(seconds: float) -> str:
    """A duration as a scenario would write it: ``3d``, ``2h``, ``5m``, ``90s``,
    ``1.5s``, ``300ms`` (``never`` for an infinite one, which an MTA may report)."""
    if math.isinf(seconds):
        return "never" if seconds > 0 else "-never"
    for unit, size in _WHOLE_UNITS:
        count = seconds / size
        if count >= 1 and abs(count - round(count)) < 1e-9:
            return f"{round(count)}{unit}"
    millis = seconds * 1000
    if 0 < seconds < 1 and abs(millis - round(millis)) < 1e-6:
        return f"{round(millis)}ms"
    return f"{seconds:g}s"
