"""The partitioned aggregates on real Spark: an increment rewrites only the months it
touches, and its outputs equal a cold build of the same files.

``behaviour_runs`` and ``durations`` are partitioned by target and month; a build
that appends runs stages and swaps those runs' months only.
"""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from reports_junit_helpers import Case, write_junit
from test_reports_incremental import results

from reports.build import build
from reports.metrics import DURATION_DAYS

pytestmark = pytest.mark.spark

PARTITIONED = ("behaviour_runs", "durations")
JAN = datetime(2025, 1, 10, 9, tzinfo=UTC)


def run(folder: Path, run_id: str, target: str, started: datetime, seed: int) -> Path:
    """One run of four scenarios whose outcomes and times vary with ``seed``."""
    cases = [
        Case(f"s.{target}", f"test_{n}", "failed" if (seed + n) % 4 == 0 else "passed",
             time=round(0.5 + (seed * 7 + n * 3) % 11 / 4, 2), behaviours=f"CR-{n + 1}")
        for n in range(4)
    ]
    return write_junit(folder / f"{run_id}.xml", run_id=run_id, target=target, version="1",
                       started=started, cases=cases)


def history(folder: Path) -> None:
    """Two targets, runs every ten days from January to March (three months each)."""
    for index in range(8):
        for target in ("alpha", "beta"):
            run(folder, f"{target}-{index}", target, JAN + timedelta(days=10 * index), index)


def partitions(out: Path) -> dict[str, dict[str, list[str]]]:
    """Per partitioned table: partition directory -> names of its Parquet files."""
    found = {}
    for name in PARTITIONED:
        root = out / "aggregates" / name
        found[name] = {
            str(part.relative_to(root)): sorted(p.name for p in part.glob("*.parquet"))
            for part in sorted(root.glob("target=*/month=*"))
        }
    return found


def table_rows(spark, out: Path) -> dict[str, list[tuple]]:
    """Every aggregate table's rows, sorted (arrays made tuples), to compare two --out."""
    from reports import store
    from reports.aggregates import TABLES

    def plain(value):  # type: ignore[no-untyped-def]
        if isinstance(value, list):
            return tuple(plain(v) for v in value)
        if hasattr(value, "asDict"):
            return tuple(sorted((k, plain(v)) for k, v in value.asDict().items()))
        return value

    found = {}
    for name in TABLES:
        reader = spark.read
        if name in store.PARTITIONED:
            reader = reader.schema(store.PARTITIONED[name])
        frame = reader.parquet(str(out / "aggregates" / name))
        found[name] = sorted(
            (tuple(plain(v) for v in row) for row in frame.collect()), key=repr
        )
    return found


@pytest.fixture(scope="module")
def built_history(spark, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("partitioned")
    history(root / "history")
    build(spark, [str(root / "history")], str(root / "out"))
    return root / "history", root / "out"


@pytest.fixture
def history_build(built_history: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    """(inputs, out): history()'s files, to be read only, and a private copy of their
    build (built once per module)."""
    inputs, out = built_history
    shutil.copytree(out, tmp_path / "two")
    return inputs, tmp_path / "two"


def test_an_increment_rewrites_only_its_month(
    spark, history_build: tuple[Path, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from reports import build as build_module

    inputs, out = history_build
    before = partitions(out)
    assert sorted(before["durations"]) == [
        f"target={t}/month=2025-0{m}" for t in ("alpha", "beta") for m in (1, 2, 3)
    ]
    # The next alpha run: ten days after the last one, still in March.
    run(tmp_path / "new", "alpha-8", "alpha", JAN + timedelta(days=80), 8)
    build(spark, [str(inputs), str(tmp_path / "new")], str(out))
    after = partitions(out)
    for name in PARTITIONED:
        changed = sorted(p for p in after[name] if after[name][p] != before[name].get(p))
        assert changed == ["target=alpha/month=2025-03"], name
    assert not list((out / "aggregates").glob("*.next-*"))
    assert not list((out / "aggregates").glob("_swapping-*"))

    cold = tmp_path / "one"
    # with the session's own settings, as past SMALL_TABLE_CASES: the same tables
    monkeypatch.setattr(build_module, "SMALL_TABLE_CASES", 0)
    build(spark, [str(inputs), str(tmp_path / "new")], str(cold))
    assert results(out) == results(cold)
    assert table_rows(spark, out) == table_rows(spark, cold)


def test_a_new_month_adds_a_partition_and_a_late_run_rebuilds_one_target(
    spark, history_build: tuple[Path, Path], tmp_path: Path
) -> None:
    inputs, out = history_build
    first = partitions(out)
    run(tmp_path / "april", "beta-9", "beta", JAN + timedelta(days=85), 9)  # April
    build(spark, [str(inputs), str(tmp_path / "april")], str(out))
    second = partitions(out)
    for name in PARTITIONED:
        assert set(second[name]) - set(first[name]) == {"target=beta/month=2025-04"}
        assert {p: f for p, f in second[name].items() if p in first[name]} == first[name]

    # A run older than alpha's latest: alpha is rebuilt (all its months), beta untouched.
    run(tmp_path / "late", "alpha-late", "alpha", JAN + timedelta(days=25), 5)
    every = [str(inputs), str(tmp_path / "april"), str(tmp_path / "late")]
    build(spark, every, str(out))
    third = partitions(out)
    for name in PARTITIONED:
        for part, files in third[name].items():
            if part.startswith("target=beta/"):
                assert files == second[name][part], (name, part)
            else:
                assert files != second[name].get(part), (name, part)

    cold = tmp_path / "one"
    build(spark, every, str(cold))
    assert results(out) == results(cold)
    assert table_rows(spark, out) == table_rows(spark, cold)


def test_a_partition_swap_cut_short_is_finished_by_the_next_build(
    spark, history_build: tuple[Path, Path]
) -> None:
    inputs, out = history_build
    before, rows = results(out), table_rows(spark, out)
    folder = out / "aggregates"
    # The state a crash leaves mid-swap: marker written, durations of alpha's March
    # staged and the old copy already moved aside, February staged and not yet moved.
    for month in ("02", "03"):
        part = f"target=alpha/month=2025-{month}"
        shutil.copytree(folder / "durations" / part, folder / "durations.next-dead" / part)
    moved = folder / "durations.old-dead" / "target=alpha" / "month=2025-03"
    moved.parent.mkdir(parents=True)
    (folder / "durations" / "target=alpha" / "month=2025-03").rename(moved)
    (folder / "_swapping-dead").write_text(json.dumps({"partitioned": {"durations": []}}))
    # ...and partitions staged by a build that died before its marker.
    lost = folder / "behaviour_runs.next-lost" / "target=beta" / "month=2025-01"
    lost.mkdir(parents=True)
    (lost / "garbage.parquet").write_bytes(b"not parquet")

    again = build(spark, [str(inputs)], str(out))
    assert again.ingest.parsed == 0
    assert sorted(p.name for p in folder.iterdir()) == [
        "behaviour_runs", "behaviour_totals", "durations", "flaky_state", "names", "runs",
        "scenario_history",
    ]
    assert results(out) == before
    assert table_rows(spark, out) == rows


def test_durations_csv_keeps_the_last_days_and_the_table_keeps_all(
    spark, tmp_path: Path
) -> None:
    # One run a week for 20 weeks: 140 days, more than the window.
    for week in range(20):
        run(tmp_path / ("a" if week < 15 else "b"), f"w{week:02d}", "gamma",
            JAN + timedelta(weeks=week), week)
    out = tmp_path / "two"
    build(spark, [str(tmp_path / "a")], str(out))
    build(spark, [str(tmp_path / "a"), str(tmp_path / "b")], str(out))
    cold = tmp_path / "one"
    build(spark, [str(tmp_path / "a"), str(tmp_path / "b")], str(cold))
    assert results(out) == results(cold)

    last = (JAN + timedelta(weeks=19)).date()
    days = sorted({r[3] for r in results(out)["durations.csv"][1:]})
    expected = [(JAN + timedelta(weeks=w)).date() for w in range(20)]
    assert days == [d.isoformat() for d in expected if (last - d).days < DURATION_DAYS]
    assert len(days) < 20
    stored = spark.read.parquet(str(out / "aggregates" / "durations")).select("date").distinct()
    assert len(stored.collect()) == 20
