"""Moments in scenario steps (resubmission windows): epoch, now, relative, ISO 8601; and
durations as a user reads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_shadowcheck.errors import ScenarioError, SourceRef
from pytest_shadowcheck.scenario.durations import Moment, format_duration, moment, resolve_time

DAY0 = 1767225600.0  # 2026-01-01T00:00:00Z
WHERE = SourceRef(Path("s.yaml"), 3)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (DAY0 + 5, DAY0 + 5),
        ("now", DAY0 + 3600),
        ("-2h", DAY0 - 3600),
        ("+30m", DAY0 + 5400),
        ("2026-01-01T07:00:00Z", DAY0 + 7 * 3600),
        ("2026-01-01T07:00:00+02:00", DAY0 + 5 * 3600),
        # no offset: UTC, like the virtual clock's start, whatever the machine's zone
        ("2026-01-01T07:00:00", DAY0 + 7 * 3600),
    ],
)
def test_moments(value: object, expected: float) -> None:
    assert resolve_time(value, DAY0 + 3600, WHERE) == expected


def test_bad_moment_names_the_place() -> None:
    with pytest.raises(ScenarioError, match="bad time 'tomorrow'"):
        resolve_time("tomorrow", DAY0, WHERE)


def test_a_moment_is_fixed_or_an_offset_from_the_nodes_now() -> None:
    assert moment("2026-01-01T01:00:00Z", WHERE) == Moment("2026-01-01T01:00:00Z", at=DAY0 + 3600)
    assert moment(DAY0, WHERE) == Moment(str(DAY0), at=DAY0)
    assert moment("now", WHERE) == Moment("now")
    assert moment("-2h", WHERE) == Moment("-2h", offset=-7200.0)
    assert moment("+30m", WHERE).on(DAY0) == DAY0 + 1800
    assert str(moment("-2h", WHERE)) == "-2h"


@pytest.mark.parametrize(
    ("seconds", "shown"),
    [(5.0, "5s"), (0.3, "300ms"), (259200.0, "3d"), (3600.0, "1h"), (120.0, "2m"),
     (90.0, "90s"), (1.5, "1.5s"), (0.0, "0s"), (0.0005, "0.0005s"),
     (float("inf"), "never")],
)  # fmt: skip
def test_durations_are_shown_as_a_scenario_writes_them(seconds: float, shown: str) -> None:
    assert format_duration(seconds) == shown
