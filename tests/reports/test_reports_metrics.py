"""Metrics on real Spark against a history whose answers the test computes itself."""

from __future__ import annotations

import csv
from collections import defaultdict
from pathlib import Path

import pytest
from reports_junit_helpers import ALPHA, BETA, E, F, P, S

from pytest_shadowcheck.statuses import Status, strongest

pytestmark = pytest.mark.spark


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def expected_pass_rates() -> dict[tuple[str, str, str], tuple[int, int, float | None]]:
    """(target, version, behaviour) -> (runs, passed, pass rate), computed from the data."""
    tally: dict[tuple[str, str, str], list] = defaultdict(lambda: [set(), 0, 0])
    rows = []
    for tags, outcomes in ALPHA.values():
        rows += [("alpha", "1.0", f"a{i}", tags, o) for i, o in enumerate(outcomes)]
    for tags, runs in BETA.values():
        rows += [("beta", v, f"b{i}", tags, o) for i, (v, o) in enumerate(runs)]
    for target, version, run, tags, outcome in rows:
        for behaviour in tags.split(","):
            cell = tally[(target, version, behaviour)]
            cell[0].add(run)
            cell[1] += outcome == P
            cell[2] += outcome in (P, F, E)
    return {
        key: (len(r), p, round(p / n, 4) if n else None) for key, (r, p, n) in tally.items()
    }


def test_pass_rates_match_an_independent_count(history: Path) -> None:
    matrix = read_csv(history / "matrix.csv")
    got = {
        (r["target"], r["target_version"], r["behaviour"]): (
            int(r["runs"]), int(r["passed"]), float(r["pass_rate"]) if r["pass_rate"] else None
        )
        for r in matrix
    }
    assert got == expected_pass_rates()


def test_known_flaky_pattern_is_found(history: Path) -> None:
    flaky = {(r["target"], r["target_version"], r["scenario"]): r
             for r in read_csv(history / "flaky.csv")}
    alpha = flaky[("alpha", "1.0", "test_flappy")]
    # P F P E P F: five flips in six runs, the last one into run a5.
    assert (int(alpha["runs"]), int(alpha["flips"])) == (6, 5)
    assert float(alpha["flip_rate"]) == pytest.approx(1.0)
    assert alpha["last_flip_run"] == "a5"
    beta = flaky[("beta", "2.0", "test_flappy")]
    assert (int(beta["runs"]), int(beta["flips"]), beta["last_flip_run"]) == (3, 2, "b4")
    # One flip is a regression or a fix, not flakiness; never-run is not flaky either.
    for scenario in ("test_steady", "test_once", "test_breaks", "test_heals", "test_untestable"):
        assert ("alpha", "1.0", scenario) not in flaky
    assert ("beta", "1.0", "test_flappy") not in flaky


def test_known_regression_and_fix_are_found(history: Path) -> None:
    changes = {(r["target"], r["scenario"]): r for r in read_csv(history / "regressions.csv")}
    expected = {}
    for target, data in (("alpha", ALPHA), ("beta", BETA)):
        for name, (_, runs) in data.items():
            before, last = [r if isinstance(r, str) else r[1] for r in runs[-2:]]
            if before == P and last in (F, E):
                expected[(target, name)] = "regression"
            elif before in (F, E) and last == P:
                expected[(target, name)] = "fix"
    assert {key: row["change"] for key, row in changes.items()} == expected
    breaks = changes[("alpha", "test_breaks")]
    assert (breaks["change"], breaks["previous_run"], breaks["latest_run"]) == (
        "regression", "a4", "a5"
    )
    assert breaks["behaviour"] == "DI-3,SN-1"
    assert changes[("alpha", "test_heals")]["change"] == "fix"
    assert changes[("beta", "test_steady")]["latest_outcome"] == "error"
    assert changes[("beta", "test_steady")]["change"] == "regression"


def test_latest_matrix_and_durations(history: Path) -> None:
    latest = {(r["behaviour"], r["target"]): r for r in read_csv(history / "latest_matrix.csv")}
    assert {r["run_id"] for r in latest.values()} == {"a5", "b4"}
    for (behaviour, target), row in latest.items():
        data = ALPHA if target == "alpha" else BETA
        outcomes = [
            (runs[-1] if target == "alpha" else runs[-1][1])
            for tags, runs in data.values() if behaviour in tags.split(",")
        ]
        # The plugin's own combination: an error is INCONCLUSIVE, the helper's skips
        # say UNTESTABLE.
        meaning = {P: Status.PASS, F: Status.FAIL, E: Status.INCONCLUSIVE, S: Status.UNTESTABLE}
        assert row["status"] == strongest([meaning[o] for o in outcomes]), (behaviour, target)
    durations = [r for r in read_csv(history / "durations.csv")
                 if r["target"] == "alpha" and r["scenario"] == "test_steady"]
    assert [float(r["p95_s"]) for r in durations] == pytest.approx(
        [0.1 * (run + 1) for run in range(6)]
    )
    trends = [r for r in read_csv(history / "trends.csv") if r["target"] == "alpha"]
    assert [r["run_id"] for r in trends] == [f"a{i}" for i in range(6)]
    for i, row in enumerate(trends):
        outcomes = [runs[i] for _, runs in ALPHA.values()]
        executed = [o for o in outcomes if o != S]
        assert float(row["pass_rate"]) == pytest.approx(executed.count(P) / len(executed), abs=1e-4)


def test_statuses_without_verdicts_come_from_outcome_and_message(
    spark, tmp_path: Path
) -> None:
    from reports_junit_helpers import DAY0, Case, write_junit

    from reports.build import build

    cases = [
        Case("s.omega", "test_lost_together", "outside", behaviours="PR-4"),
        Case("s.omega", "test_untestable", "skipped", behaviours="SN-7"),
        Case("s.omega", "test_shadowed", "passed", behaviours="PR-4,CR-1"),
        Case("s.omega", "test_both_lost", "outside", behaviours="PR-5"),
        Case("s.omega", "test_no_docker", "skip", behaviours="DI-1"),
        Case("s.omega", "test_no_session", "not-applicable", behaviours="TO-2"),
        Case("s.omega", "test_node_died", "inconclusive", behaviours="SN-2"),
        Case("s.omega", "test_node_died_2", "error", behaviours="SN-3"),
    ]
    write_junit(tmp_path / "in" / "o1.xml", run_id="o1", target="omega", version="1",
                started=DAY0, cases=cases)
    result = build(spark, [str(tmp_path / "in")], str(tmp_path / "out"))
    latest = {r["behaviour"]: r for r in read_csv(tmp_path / "out" / "latest_matrix.csv")}
    # Combined as the certification combines them (statuses.RANK): OUTSIDE-GUARANTEE
    # beats PASS; a skip without a verdict prefix is SKIPPED; every error INCONCLUSIVE.
    assert {b: (r["status"], r["outside"]) for b, r in latest.items()} == {
        "PR-4": ("OUTSIDE-GUARANTEE", "1"), "CR-1": ("PASS", "0"),
        "PR-5": ("OUTSIDE-GUARANTEE", "1"), "SN-7": ("UNTESTABLE", "0"),
        "DI-1": ("SKIPPED", "0"), "TO-2": ("NOT-APPLICABLE", "0"),
        "SN-2": ("INCONCLUSIVE", "0"), "SN-3": ("INCONCLUSIVE", "0"),
    }
    matrix = {r["behaviour"]: r for r in read_csv(tmp_path / "out" / "matrix.csv")}
    assert (matrix["PR-5"]["skipped"], matrix["PR-5"]["outside"], matrix["PR-5"]["pass_rate"]) == (
        "1", "1", ""
    )
    page = (tmp_path / "out" / "dashboard.html").read_text()
    assert "OUTSIDE-GUARANTEE" in page and "#ef6c00" in page
    assert result.rows == 8
