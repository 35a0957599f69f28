"""Writes JUnit files for the reports tests (metrics need many runs, written from data)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from xml.sax.saxutils import quoteattr


@dataclass(frozen=True)
class Case:
    classname: str
    name: str
    outcome: str  # passed | failed | error | skipped
    time: float = 0.1
    behaviours: str | None = None


def write_junit(
    path: Path,
    *,
    run_id: str,
    target: str,
    version: str,
    started: datetime,
    cases: Sequence[Case],
) -> Path:
    """A pytest-xunit1 style file as the shadowcheck plugin writes it."""
    body = []
    for case in cases:
        inner = ""
        if case.behaviours is not None:
            inner += (
                "<properties><property name=\"shadowcheck.behaviours\" "
                f"value={quoteattr(case.behaviours)}/></properties>"
            )
        if case.outcome == "failed":
            inner += '<failure message="assertion failed">trace</failure>'
        elif case.outcome == "error":
            inner += '<error message="setup crashed">trace</error>'
        elif case.outcome == "skipped":
            inner += '<skipped message="UNTESTABLE"/>'
        body.append(
            f"<testcase classname={quoteattr(case.classname)} name={quoteattr(case.name)} "
            f'time="{case.time}">{inner}</testcase>'
        )
    props = "".join(
        f'<property name="shadowcheck.{key}" value={quoteattr(value)}/>'
        for key, value in (("run_id", run_id), ("target", target), ("target_version", version))
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites>'
        f'<testsuite name="pytest" errors="0" failures="0" skipped="0" tests="{len(cases)}" '
        f'timestamp="{started.isoformat()}"><properties>{props}</properties>'
        f"{''.join(body)}</testsuite></testsuites>"
    )
    return path
