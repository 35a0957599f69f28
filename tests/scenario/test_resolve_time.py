"""Moments in scenario steps (resubmission windows): epoch, now, relative, ISO 8601."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_shadowcheck.errors import ScenarioError, SourceRef
from pytest_shadowcheck.scenario.durations import resolve_time

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
