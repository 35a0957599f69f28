"""Incremental builds on real Spark: folding runs build by build gives what one build gives.

Each test ingests the same JUnit files in two ways, in several builds into one
``--out`` and in a single build into another, and compares every CSV output.
"""

from __future__ import annotations

import csv
import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from reports_junit_helpers import DAY0, Case, write_history, write_junit

from reports.build import build

pytestmark = pytest.mark.spark

RESULTS = [
    "matrix.csv", "flaky.csv", "regressions.csv", "latest_matrix.csv", "trends.csv",
    "durations.csv", "rejected.csv",
]


def results(out: Path) -> dict[str, list[tuple[str, ...]]]:
    """Every CSV output as sorted rows (ties may come out in either order)."""
    found = {}
    for name in RESULTS:
        with (out / name).open(newline="") as handle:
            rows = list(csv.reader(handle))
        found[name] = [tuple(rows[0]), *sorted(tuple(r) for r in rows[1:])]
    return found


def split_history(root: Path, first: list[str]) -> tuple[Path, Path]:
    """The history files in two directories: the names in ``first`` and the rest."""
    write_history(root / "all")
    a, b = root / "a", root / "b"
    a.mkdir()
    b.mkdir()
    for path in sorted((root / "all").iterdir()):
        shutil.copy2(path, (a if path.name in first else b) / path.name)
    return a, b


def test_builds_in_order_equal_one_build(
    spark, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reports import build as build_module

    session = {k: spark.conf.get(k) for k in build_module._SMALL_TABLE_SETTINGS}
    early = [f"alpha-{i}.xml" for i in range(3)] + [f"beta-{i}.xml" for i in range(2)]
    a, b = split_history(tmp_path, early)
    build(spark, [str(a)], str(tmp_path / "two"))
    second = build(spark, [str(a), str(b)], str(tmp_path / "two"))
    assert (second.ingest.parsed, second.ingest.skipped_known) == (6, 5)
    # small-table builds leave the session's settings as they found them
    assert {k: spark.conf.get(k) for k in session} == session != build_module._SMALL_TABLE_SETTINGS
    # The one build with the session's own settings (eight shuffle partitions, AQE),
    # as a table past SMALL_TABLE_CASES gets: the same answers as the small-table ones.
    monkeypatch.setattr(build_module, "SMALL_TABLE_CASES", 0)
    build(spark, [str(a), str(b)], str(tmp_path / "one"))
    assert results(tmp_path / "two") == results(tmp_path / "one")
    # the history's known answers survive the fold
    flaky = {(r[0], r[1], r[2]): r for r in results(tmp_path / "two")["flaky.csv"][1:]}
    assert flaky[("alpha", "1.0", "test_flappy")][4] == "5"  # flips


def test_an_older_run_arriving_late_rebuilds_its_target(spark, tmp_path: Path) -> None:
    late = [f"alpha-{i}.xml" for i in (3, 4, 5)] + [f"beta-{i}.xml" for i in (0, 1, 2, 3, 4)]
    newer, older = split_history(tmp_path, late)
    build(spark, [str(newer)], str(tmp_path / "two"))
    build(spark, [str(older)], str(tmp_path / "two"))
    build(spark, [str(newer), str(older)], str(tmp_path / "one"))
    assert results(tmp_path / "two") == results(tmp_path / "one")


def test_one_run_in_two_files_over_two_builds(spark, tmp_path: Path) -> None:
    """A run extended by a later file: worst outcome wins, durations see both days' runs."""

    def run(path: Path, run_id: str, hours: int, cases: list[Case]) -> Path:
        return write_junit(path, run_id=run_id, target="gamma", version="1.0",
                           started=DAY0 + timedelta(hours=hours), cases=cases)

    def case(name: str, outcome: str, time: float) -> Case:
        return Case("scenarios.gamma", name, outcome, time=time, behaviours="CR-1")

    first, second = tmp_path / "first", tmp_path / "second"
    run(first / "g1.xml", "g1", 0, [case("test_a", "passed", 1.0), case("test_b", "passed", 1.0)])
    run(first / "g2-shard1.xml", "g2", 2, [case("test_a", "passed", 2.0)])
    # same day as g1 and g2, so that day's durations must be recomputed with all three
    run(second / "g2-shard2.xml", "g2", 3, [case("test_a", "failed", 3.0),
                                           case("test_b", "failed", 3.0)])
    run(second / "g3.xml", "g3", 4, [case("test_a", "passed", 4.0), case("test_b", "passed", 4.0)])

    build(spark, [str(first)], str(tmp_path / "two"))
    build(spark, [str(first), str(second)], str(tmp_path / "two"))
    build(spark, [str(first), str(second)], str(tmp_path / "one"))
    assert results(tmp_path / "two") == results(tmp_path / "one")

    found = results(tmp_path / "two")
    trends = {r[2]: r for r in found["trends.csv"][1:]}
    assert (trends["g2"][4], trends["g2"][5]) == ("0", "2")  # passed, failed: worst wins
    durations = {r[1]: r for r in found["durations.csv"][1:]}
    assert durations["test_a"][4:] == ("3", "3.0", "4.0")  # runs, p50, p95 of 1, 3, 4
    flaky = {r[2]: r for r in found["flaky.csv"][1:]}
    assert (flaky["test_a"][4], flaky["test_a"][6]) == ("2", "g3")  # P F P, last flip g3


def test_reingesting_leaves_the_aggregates_alone(
    spark, history_copy: tuple[Path, Path], tmp_path: Path
) -> None:
    inputs, out = history_copy
    before = results(out)
    tables = sorted(p.name for p in (out / "aggregates").iterdir())
    assert tables == ["behaviour_runs", "behaviour_totals", "durations", "flaky_state", "names",
                      "runs", "scenario_history"]

    again = build(spark, [str(inputs)], str(out))
    assert (again.ingest.parsed, again.ingest.rows_added, again.ingest.runs) == (0, 0, {})
    copy = tmp_path / "more" / "copy-of-alpha-5.xml"
    copy.parent.mkdir()
    copy.write_bytes((inputs / "alpha-5.xml").read_bytes())
    duplicate = build(spark, [str(inputs), str(copy.parent)], str(out))
    assert (duplicate.ingest.duplicates, duplicate.ingest.rows_added) == (1, 0)
    assert results(out) == before


def test_a_later_run_on_the_same_day_appends_and_redoes_that_day(spark, tmp_path: Path) -> None:
    def run(path: Path, run_id: str, hours: int, time: float, outcome: str) -> None:
        write_junit(path, run_id=run_id, target="delta", version="2", started=DAY0
                    + timedelta(hours=hours), cases=[Case("s.delta", "test_x", outcome, time=time)])

    run(tmp_path / "a" / "d1.xml", "d1", 0, 1.0, "passed")
    run(tmp_path / "a" / "d2.xml", "d2", 1, 2.0, "failed")
    run(tmp_path / "b" / "d3.xml", "d3", 2, 9.0, "passed")
    run(tmp_path / "b" / "d4.xml", "d4", 30, 5.0, "passed")  # the next day
    build(spark, [str(tmp_path / "a")], str(tmp_path / "two"))
    build(spark, [str(tmp_path / "b")], str(tmp_path / "two"))
    build(spark, [str(tmp_path / "a"), str(tmp_path / "b")], str(tmp_path / "one"))
    assert results(tmp_path / "two") == results(tmp_path / "one")
    days = [r[3:] for r in results(tmp_path / "two")["durations.csv"][1:]]
    assert days == [("2025-04-01", "3", "2.0", "9.0"), ("2025-04-02", "1", "5.0", "5.0")]
    regressions = results(tmp_path / "two")["regressions.csv"][1:]
    assert regressions == []  # d3 -> d4: passed twice


def test_deleted_aggregates_are_folded_again_from_cases(
    spark, history_copy: tuple[Path, Path]
) -> None:
    """Also what an --out written before aggregates/ existed gets on its next build."""
    inputs, out = history_copy
    before = results(out)
    shutil.rmtree(out / "aggregates" / "flaky_state")
    again = build(spark, [str(inputs)], str(out))
    assert again.ingest.parsed == 0
    assert results(out) == before


def test_a_swap_cut_short_is_finished_by_the_next_build(
    spark, history_copy: tuple[Path, Path]
) -> None:
    inputs, out = history_copy
    before = results(out)
    folder = out / "aggregates"
    # The state a crash leaves mid-swap: marker written, every table staged, "runs"
    # already swapped, "behaviour_runs" moved aside but not yet replaced...
    for name in ("behaviour_runs", "names", "flaky_state", "durations", "scenario_history"):
        shutil.copytree(folder / name, folder / f"{name}.next-dead")
    (folder / "runs.old-dead").mkdir()
    (folder / "behaviour_runs").rename(folder / "behaviour_runs.old-dead")
    (folder / "_swapping-dead").touch()
    # ...and a table staged by a build that died before its marker.
    (folder / "names.next-lost").mkdir()
    (folder / "names.next-lost" / "garbage.parquet").write_bytes(b"not parquet")

    again = build(spark, [str(inputs)], str(out))
    assert again.ingest.parsed == 0
    tables = sorted(p.name for p in folder.iterdir())
    assert tables == ["behaviour_runs", "behaviour_totals", "durations", "flaky_state", "names",
                      "runs", "scenario_history"]
    assert results(out) == before


def test_the_manifest_is_compacted_without_losing_a_file(
    spark, history_copy: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reports import table

    # Three files are enough to cross the threshold; the real one (8) took 10 builds.
    compact_at = 3
    assert compact_at < table.MANIFEST_COMPACT_AT
    monkeypatch.setattr(table, "MANIFEST_COMPACT_AT", compact_at)
    inputs, out = history_copy
    before = results(out)
    assert len(list((out / "manifest").glob("*.parquet"))) == 1
    for index in range(compact_at):
        extra = tmp_path / "more" / f"bad-{index}.xml"
        extra.parent.mkdir(exist_ok=True)
        extra.write_text("<testsuite><testcase name='cut")  # each build: one rejected file
        done = build(spark, [str(inputs), str(tmp_path / "more")], str(out))
        assert done.ingest.parsed == 1
        files = list((out / "manifest").glob("*.parquet"))
        # one more file per build, until one more would pass the threshold
        assert len(files) == (index + 2 if index + 2 <= compact_at else 1), index
    rejected = results(out)["rejected.csv"][1:]
    expected = [f"bad-{index}.xml" for index in range(compact_at)]
    assert [Path(r[0]).name for r in rejected] == expected
    assert all(r[1].startswith("malformed XML") for r in rejected)
    unchanged = {k: v for k, v in results(out).items() if k != "rejected.csv"}
    assert unchanged == {k: v for k, v in before.items() if k != "rejected.csv"}
    again = build(spark, [str(inputs), str(tmp_path / "more")], str(out))
    assert (again.ingest.parsed, again.ingest.rows_added) == (0, 0)


@pytest.mark.parametrize("in_driver", [False, True], ids=["workers", "driver"])
def test_same_content_is_ingested_once_whoever_hashes_and_parses_it(
    spark, history: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, in_driver: bool
) -> None:
    from reports import table

    if not in_driver:  # 0 bytes: the Python workers hash and parse every file
        monkeypatch.setattr(table, "DRIVER_HASH_BYTES", 0)
        monkeypatch.setattr(table, "DRIVER_PARSE_BYTES", 0)
    inputs = history.parent / "in"
    if in_driver:
        assert sum(p.stat().st_size for p in inputs.iterdir()) < table.DRIVER_PARSE_BYTES
    alone = build(spark, [str(inputs)], str(tmp_path / "alone"))
    assert results(tmp_path / "alone") == results(history)  # the shared build: in the driver
    copy = tmp_path / "more" / "copy-of-alpha-5.xml"
    copy.parent.mkdir()
    copy.write_bytes((inputs / "alpha-5.xml").read_bytes())
    both = build(spark, [str(inputs), str(copy.parent)], str(tmp_path / "both"))
    assert (both.ingest.duplicates, both.ingest.rows_added) == (1, alone.ingest.rows_added)
    assert results(tmp_path / "both") == results(tmp_path / "alone")


def _history_rows(spark, out: Path) -> list[tuple]:
    frame = spark.read.parquet(str(out / "aggregates" / "scenario_history"))
    return sorted((r.target, r.sid, [tuple(e) for e in r.h]) for r in frame.collect())


def test_scenario_history_keeps_the_last_runs_build_by_build(spark, tmp_path: Path) -> None:
    from reports.history import HISTORY_RUNS

    runs = HISTORY_RUNS + 5
    outcomes = ["passed" if i % 3 else "failed" for i in range(runs)]
    for i, outcome in enumerate(outcomes):
        half = "a" if i < runs // 2 else "b"
        write_junit(tmp_path / half / f"h{i:02d}.xml", run_id=f"h{i:02d}", target="long",
                    version="1", started=DAY0 + timedelta(hours=i),
                    cases=[Case("s", "test_x", outcome, behaviours="CR-1")])
    build(spark, [str(tmp_path / "a")], str(tmp_path / "two"))
    build(spark, [str(tmp_path / "a"), str(tmp_path / "b")], str(tmp_path / "two"))
    build(spark, [str(tmp_path / "a"), str(tmp_path / "b")], str(tmp_path / "one"))
    folded = _history_rows(spark, tmp_path / "two")
    assert folded == _history_rows(spark, tmp_path / "one")
    [(_, _, entries)] = folded
    assert [e[1] for e in entries] == [f"h{i:02d}" for i in range(runs - HISTORY_RUNS, runs)]
    fail, passed = 8, 4  # reports.verdicts.REPORT_RANK of FAIL and PASS
    assert [e[2] for e in entries] == [
        fail if o == "failed" else passed for o in outcomes[-HISTORY_RUNS:]
    ]


def test_aggregates_of_an_older_version_are_folded_again(spark, tmp_path: Path) -> None:
    """Tables written before the statuses (no rank, no certification, no history)."""
    early = [f"alpha-{i}.xml" for i in range(3)] + [f"beta-{i}.xml" for i in range(2)]
    a, b = split_history(tmp_path, early)
    out = tmp_path / "two"
    build(spark, [str(a)], str(out))
    aggregates = out / "aggregates"
    for name, dropped in (("behaviour_runs", ["rank", "partial"]), ("runs", ["certification"])):
        old = spark.read.parquet(str(aggregates / name)).drop(*dropped)
        old.write.parquet(str(aggregates / f"{name}.old-format"))
        shutil.rmtree(aggregates / name)
        (aggregates / f"{name}.old-format").rename(aggregates / name)
    shutil.rmtree(aggregates / "scenario_history")
    build(spark, [str(a), str(b)], str(out))
    build(spark, [str(a), str(b)], str(tmp_path / "one"))
    assert results(out) == results(tmp_path / "one")
    assert _history_rows(spark, out) == _history_rows(spark, tmp_path / "one")
