"""One build: ingest new files, compute every metric, write the outputs and the dashboard."""

from __future__ import annotations

import os
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

from pyspark.sql import DataFrame, SparkSession

from reports import aggregates, metrics
from reports.dashboard import TOP_DURATIONS, DashboardData, render
from reports.outputs import csv_text, write_csv_frame, write_text
from reports.progress import Progress
from reports.spark import configured_settings
from reports.table import Ingest, ingest, rejected_files

__all__ = ["OUTPUT_COLUMNS", "SMALL_TABLE_CASES", "BuildResult", "build"]

# Up to this many cases in cases/, every shuffle of the fold and the metrics holds a
# few thousand rows: one partition and no adaptive re-planning per query stage. On
# the README's report step (98 scenarios a run) that is ~35 fewer Spark jobs and
# 2 to 2.5 s of 15; larger tables keep the session's settings (eight partitions,
# AQE: what the million-case builds were measured with).
SMALL_TABLE_CASES = 100_000
#
# Nor is generated code worth compiling for a few thousand rows: Janino's compiling of
# each query's Java took a quarter of a build's JVM time, most of it in failed class
# lookups through every jar, and the compiled code filled the JIT's code cache in a
# long-lived session (tests): 8 builds in one session, 83 s with code generation,
# 64 s without.
_SMALL_TABLE_SETTINGS = {
    "spark.sql.shuffle.partitions": "1",
    "spark.sql.adaptive.enabled": "false",
    "spark.sql.codegen.wholeStage": "false",
    "spark.sql.codegen.factoryMode": "NO_CODEGEN",
}

# Column order of every CSV output; the first columns are the documented contract.
OUTPUT_COLUMNS: dict[str, list[str]] = {
    "matrix.csv": ["target", "target_version", "behaviour", "runs", "passed", "failed",
                   "skipped", "pass_rate", "errors", "outside"],
    "flaky.csv": ["target", "target_version", "scenario", "runs", "flips", "flip_rate",
                  "last_flip_run", "last_flip_at", "reruns", "classname"],
    "regressions.csv": ["target", "target_version", "scenario", "behaviour", "previous_run",
                        "latest_run", "change", "previous_version", "previous_outcome",
                        "latest_outcome", "classname"],
    "latest_matrix.csv": ["behaviour", "target", "target_version", "run_id", "started_at",
                          "status", "passed", "failed", "skipped", "pass_rate", "outside",
                          "inconclusive", "partial", "certification"],
    "trends.csv": ["target", "target_version", "run_id", "started_at", "passed", "failed",
                   "errors", "skipped", "pass_rate", "certification"],
    "durations.csv": ["target", "scenario", "classname", "date", "runs", "p50_s", "p95_s"],
}


@dataclass
class BuildResult:
    ingest: Ingest
    rows: int = 0
    runs: int = 0
    tables: dict[str, list[dict[str, Any]]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)


def _records(frame: DataFrame) -> list[dict[str, Any]]:
    return [row.asDict(recursive=True) for row in frame.collect()]


@contextmanager
def _session_settings(spark: SparkSession, settings: Mapping[str, str]) -> Iterator[None]:
    """SQL settings for the duration of one build, the session's own restored after
    (tests and the benchmark's warm build share one session between builds)."""
    before = {key: spark.conf.get(key, None) for key in settings}
    for key, value in settings.items():
        spark.conf.set(key, value)
    try:
        yield
    finally:
        for key, old in before.items():
            if old is None:
                spark.conf.unset(key)
            else:
                spark.conf.set(key, old)


def _small_table_settings(cases: int) -> dict[str, str]:
    """The settings for a table of ``cases`` rows; none a user chose are overridden."""
    if cases > SMALL_TABLE_CASES:
        return {}
    chosen = set(configured_settings())
    if "SHADOWCHECK_SHUFFLE" in os.environ:
        chosen.add("spark.sql.shuffle.partitions")
    return {k: v for k, v in _SMALL_TABLE_SETTINGS.items() if k not in chosen}


def _fold_and_compute(
    spark: SparkSession, out: str, result: BuildResult, progress: Progress, small: bool
) -> None:
    """Fold the new runs into aggregates/, then compute every table from them.

    ``small``: a table of at most SMALL_TABLE_CASES; durations.csv is then collected
    like the others instead of written by Spark's CSV writer (one job fewer).
    """
    done = result.ingest
    written = aggregates.update(spark, out, done.runs, progress, earlier_rows=done.earlier_rows)
    state = aggregates.load(spark, out, written)
    if state is None:
        result.tables.update(
            {name: [] for name in [*OUTPUT_COLUMNS, "latest_cases", "history", "durations"]}
        )
    else:
        frames = {
            "matrix.csv": metrics.pass_matrix(state),
            "flaky.csv": metrics.flaky(state),
            "regressions.csv": metrics.regressions(spark, out, state),
            "latest_matrix.csv": metrics.latest_matrix(state),
            "trends.csv": metrics.trends(state),
            # for the dashboard only: the matrix's drill-down, the scenario histories,
            # the slowest scenarios' durations (durations.csv is written by Spark)
            "durations": metrics.slowest_durations(state, TOP_DURATIONS),
            "latest_cases": metrics.latest_cases(spark, out, state),
            "history": metrics.scenario_history(state),
        }
        if small:
            frames["durations.csv"] = metrics.durations(state)
        # Independent jobs submitted together: one's planning and code generation
        # overlaps another's tasks, which on two cores is most of the gain there is.
        with (
            progress.watch(spark.sparkContext, "computing metrics"),
            ThreadPoolExecutor(max_workers=len(frames) + 1) as pool,
        ):
            futures = {name: pool.submit(_records, frame) for name, frame in frames.items()}
            name = "durations.csv"
            durations = None if small else pool.submit(
                write_csv_frame, spark, metrics.durations(state), out, name, OUTPUT_COLUMNS[name]
            )
            for name, future in futures.items():
                result.tables[name] = future.result()
            if durations is not None:
                result.files["durations.csv"] = durations.result()


def build(
    spark: SparkSession,
    inputs: Sequence[str],
    out: str,
    *,
    run_id: str | None = None,
    target: str | None = None,
    target_version: str | None = None,
    progress: Progress | None = None,
) -> BuildResult:
    progress = progress or Progress(enabled=False)
    result = BuildResult(
        ingest(
            spark,
            inputs,
            out,
            run_id=run_id,
            target=target,
            target_version=target_version,
            progress=progress,
        )
    )
    done = result.ingest
    progress.say(
        f"added {done.rows_added} rows from {done.accepted} files; "
        f"{len(done.rejected)} rejected, {done.duplicates} duplicate content, "
        f"{len(done.rejected_cases)} test cases rejected"
    )
    small = done.earlier_rows + done.rows_added <= SMALL_TABLE_CASES
    with _session_settings(spark, _small_table_settings(done.earlier_rows + done.rows_added)):
        _fold_and_compute(spark, out, result, progress, small)
    result.rows = sum(r["passed"] + r["failed"] + r["errors"] + r["skipped"]
                      for r in result.tables["trends.csv"])
    result.runs = len(result.tables["trends.csv"])

    rejected = [{"file": f, "reason": r, "testcase": c} for f, r, c in rejected_files(done)]
    result.tables["rejected.csv"] = rejected
    for name, rows in result.tables.items():
        if not name.endswith(".csv"):
            continue
        columns = OUTPUT_COLUMNS.get(name, ["file", "reason", "testcase"])
        text = csv_text(columns, ([row.get(c) for c in columns] for row in rows))
        result.files[name] = write_text(spark, out, name, text)

    targets = sorted({r["target"] for r in result.tables["trends.csv"]})
    page = render(
        DashboardData(
            latest_matrix=result.tables["latest_matrix.csv"],
            trends=result.tables["trends.csv"],
            flaky=result.tables["flaky.csv"],
            regressions=result.tables["regressions.csv"],
            durations=result.tables["durations"],
            rejected=rejected,
            latest_cases=result.tables["latest_cases"],
            history=result.tables["history"],
            summary={
                "targets": len(targets),
                "runs": result.runs,
                "scenario results": result.rows,
                "rejected files and test cases": len(rejected),
            },
        )
    )
    result.files["dashboard.html"] = write_text(spark, out, "dashboard.html", page)
    progress.say(f"wrote {', '.join(sorted(result.files))} to {out}")
    return result
