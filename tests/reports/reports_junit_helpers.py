"""Writes JUnit files for the reports tests (metrics need many runs, written from data)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from xml.sax.saxutils import quoteattr


@dataclass(frozen=True)
class Case:
    classname: str
    name: str
    # passed | failed | error | skipped (UNTESTABLE) | outside (an OUTSIDE-GUARANTEE xfail)
    # | not-applicable | inconclusive (the plugin's error) | skip (a plain pytest.skip)
    outcome: str
    time: float = 0.1
    behaviours: str | None = None
    verdicts: str | None = None  # the shadowcheck.verdicts property


def write_junit(
    path: Path,
    *,
    run_id: str,
    target: str,
    version: str,
    started: datetime,
    cases: Sequence[Case],
    suite_properties: dict[str, str] | None = None,
) -> Path:
    """A pytest-xunit1 style file as the shadowcheck plugin writes it."""
    body = []
    for case in cases:
        inner = ""
        case_props = [("shadowcheck.behaviours", case.behaviours),
                      ("shadowcheck.verdicts", case.verdicts)]
        listed = "".join(f"<property name={quoteattr(k)} value={quoteattr(v)}/>"
                         for k, v in case_props if v is not None)
        if listed:
            inner += f"<properties>{listed}</properties>"
        if case.outcome == "failed":
            inner += '<failure message="assertion failed">trace</failure>'
        elif case.outcome == "error":
            inner += '<error message="setup crashed">trace</error>'
        elif case.outcome == "skipped":
            inner += '<skipped message="UNTESTABLE"/>'
        elif case.outcome == "not-applicable":
            inner += '<skipped message="NOT-APPLICABLE: no shadow session was ever opened"/>'
        elif case.outcome == "inconclusive":
            inner += '<error message="INCONCLUSIVE: node n1 exited before it was ready"/>'
        elif case.outcome == "skip":
            inner += '<skipped type="pytest.skip" message="docker is not installed"/>'
        elif case.outcome == "outside":
            inner += (
                '<skipped type="pytest.xfail" '
                'message="OUTSIDE-GUARANTEE: primary and shadow lost together"/>'
            )
        body.append(
            f"<testcase classname={quoteattr(case.classname)} name={quoteattr(case.name)} "
            f'time="{case.time}">{inner}</testcase>'
        )
    props = "".join(
        f'<property name="shadowcheck.{key}" value={quoteattr(value)}/>'
        for key, value in (("run_id", run_id), ("target", target), ("target_version", version))
    ) + "".join(
        f"<property name={quoteattr(key)} value={quoteattr(value)}/>"
        for key, value in (suite_properties or {}).items()
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites>'
        f'<testsuite name="pytest" errors="0" failures="0" skipped="0" tests="{len(cases)}" '
        f'timestamp="{started.isoformat()}"><properties>{props}</properties>'
        f"{''.join(body)}</testsuite></testsuites>"
    )
    return path


DAY0 = datetime(2025, 4, 1, 9, 0, tzinfo=UTC)
P, F, E, S = "passed", "failed", "error", "skipped"

# scenario -> (behaviours, outcomes of runs 1..6 of target alpha 1.0)
ALPHA = {
    "test_flappy": ("CR-2", [P, F, P, E, P, F]),
    "test_steady": ("CR-1", [P, P, P, P, P, P]),
    "test_breaks": ("DI-3,SN-1", [P, P, P, P, P, F]),
    "test_heals": ("PR-1", [F, F, F, F, F, P]),
    "test_untestable": ("SN-7", [S, S, S, S, S, S]),
    "test_once": ("CR-1", [P, F, F, F, F, F]),
}
# beta has two versions; its flaky scenario only flips inside version 2.0
BETA = {
    "test_flappy": ("CR-2", [("1.0", P), ("1.0", P), ("2.0", F), ("2.0", P), ("2.0", F)]),
    "test_steady": ("CR-1", [("1.0", P), ("1.0", P), ("2.0", P), ("2.0", P), ("2.0", E)]),
}


def write_history(root: Path) -> None:
    """Six runs of target alpha and five of beta (two versions), from ALPHA and BETA."""
    for run in range(6):
        cases = [
            Case("scenarios.alpha", name, outcomes[run], time=0.1 * (run + 1), behaviours=tags)
            for name, (tags, outcomes) in ALPHA.items()
        ]
        write_junit(root / f"alpha-{run}.xml", run_id=f"a{run}", target="alpha", version="1.0",
                    started=DAY0 + timedelta(days=run), cases=cases)
    for run in range(5):
        version = BETA["test_flappy"][1][run][0]
        cases = [
            Case("scenarios.beta", name, runs[run][1], behaviours=tags)
            for name, (tags, runs) in BETA.items()
        ]
        write_junit(root / f"beta-{run}.xml", run_id=f"b{run}", target="beta", version=version,
                    started=DAY0 + timedelta(days=run, hours=3), cases=cases)
