"""The answers, each a Spark job over the derived tables of reports.aggregates.

Vocabulary: a *run* is (target, run_id), ordered by its earliest ``started_at``;
a *scenario* is (classname, scenario), keyed by its hash ``sid``; *executed* means
passed, failed or error (skipped says nothing about the transport). ``error``
counts as not passing. Only ``regressions`` reads ``cases/``, and only the two
latest runs of each target. The partitioned tables are read by month only: the
latest runs' months, and the durations of the last DURATION_DAYS days.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import date, timedelta

from pyspark.sql import Column, DataFrame, Row, SparkSession, Window
from pyspark.sql import functions as F

from reports import store
from reports.aggregates import State, keyed_cases, outcome_name, scenario_runs
from reports.dashboard import DURATION_DAYS
from reports.history import interesting_history
from reports.table import read_partitions
from reports.verdicts import REPORT_RANK, status_column, status_of_rank

__all__ = [
    "DURATION_DAYS",
    "MIN_FLIPS",
    "durations",
    "flaky",
    "latest_cases",
    "latest_matrix",
    "pass_matrix",
    "ranked_runs",
    "regressions",
    "scenario_history",
    "slowest_durations",
    "trends",
]

# One flip is a regression or a fix; flaky means it went back and forth.
MIN_FLIPS = 2

# durations.csv and the chart cover each target's last DURATION_DAYS days: one row per
# scenario and day of the whole history would make every build's cost grow with its
# length (1.25 million rows at 10,000,000 cases). The whole is in aggregates/durations.

_RUN_KEY = ["target", "run_id"]


def _pass_rate(passed: str, failed: str, errors: str) -> Column:
    executed = F.col(passed) + F.col(failed) + F.col(errors)
    return F.when(executed > 0, F.round(F.col(passed) / executed, 4))


def ranked_runs(state: State) -> DataFrame:
    """Every run with ``recency`` (1 = the target's latest run)."""
    newest_first = Window.partitionBy("target").orderBy(F.desc("started_at"), F.desc("run_id"))
    return state.runs.withColumn("recency", F.row_number().over(newest_first))


def _named(frame: DataFrame, state: State) -> DataFrame:
    names = state.names.withColumn("behaviours", F.concat_ws(",", "behaviours"))
    return frame.join(F.broadcast(names), ["target", "sid"])


def pass_matrix(state: State) -> DataFrame:
    """Pass rate per target x version x behaviour over the whole history."""
    key = ["target", "target_version", "behaviour"]
    return (
        state.behaviour_totals.withColumn("pass_rate", _pass_rate("passed", "failed", "errors"))
        .orderBy(*key)
    )


def flaky(state: State, min_flips: int = MIN_FLIPS) -> DataFrame:
    """Scenarios whose outcome flips between consecutive runs of one target and version.

    Also lists scenarios that passed only on a rerun (Surefire flaky elements).
    """
    found = state.flaky_state.where(
        (F.col("flips") >= min_flips) | (F.col("reruns") > 0)
    ).withColumn(
        "flip_rate",
        F.when(F.col("runs") > 1, F.round(F.col("flips") / (F.col("runs") - 1), 4)),
    )
    return (
        _named(found, state)
        .select(
            "target", "target_version", "scenario", "classname", "runs", "flips", "flip_rate",
            F.col("flip_run").alias("last_flip_run"),
            F.timestamp_micros("flip_us").alias("last_flip_at"), "reruns",
        )
        .orderBy(F.desc("flip_rate"), F.desc("flips"), "target", "scenario")
    )


def _two_latest(state: State) -> list[Row]:
    """Each target's two latest runs, one job for the three metrics that need them."""
    if "latest" not in state.collected:
        state.collected["latest"] = (
            ranked_runs(state)
            .where(F.col("recency") <= 2)
            .select(*_RUN_KEY, "recency", "started_at", "certification", "first_date",
                    "last_date")
            .collect()
        )
    return state.collected["latest"]


def _latest_runs(spark: SparkSession, out: str, state: State, runs: int) -> tuple:
    """The cases of each target's ``runs`` latest runs, and (target, run_id, recency)."""
    assert runs <= 2
    latest = [r for r in _two_latest(state) if r.recency <= runs]
    dates: dict[str, set[date]] = defaultdict(set)
    for run in latest:
        day = run.first_date
        while day <= run.last_date:
            dates[run.target].add(day)
            day += timedelta(days=1)
    recency = spark.createDataFrame(
        [(r.target, r.run_id, r.recency) for r in latest],
        "target string, run_id string, recency int",
    )
    return read_partitions(spark, out, dates).join(F.broadcast(recency), _RUN_KEY), recency


def latest_cases(spark: SparkSession, out: str, state: State) -> DataFrame:
    """Every row of each target's latest run with its status: the matrix's drill-down."""
    cases, _ = _latest_runs(spark, out, state, 1)
    return cases.select(
        "target", "run_id", "behaviour", "scenario", "classname",
        status_column("status", "outcome", "message").alias("status"),
        F.substring("message", 1, 300).alias("message"), "certification",
    ).orderBy("target", "behaviour", "scenario")


def scenario_history(state: State, limit: int = 300) -> DataFrame:
    """The last statuses of the scenarios worth a look (reports.history)."""
    chosen = interesting_history(state.scenario_history, limit)
    return _named(chosen, state).select(
        "target", "scenario", "classname", "changes", "alarming",
        F.transform(
            "h",
            lambda e: F.struct(
                e["run_id"].alias("run_id"), F.timestamp_micros(e["started_us"]).alias("at"),
                status_of_rank(e["rank"]).alias("status"), e["message"].alias("message"),
            ),
        ).alias("history"),
    )


def regressions(spark: SparkSession, out: str, state: State) -> DataFrame:
    """Per target: scenarios that passed in the previous run and not in the latest, and fixes."""
    cases, recency = _latest_runs(spark, out, state, 2)
    scenarios = (
        scenario_runs(keyed_cases(cases))
        .join(F.broadcast(recency), _RUN_KEY)
        .withColumn("outcome", outcome_name("worst"))
    )
    latest = scenarios.where(F.col("recency") == 1).select(
        "target", "sid", "target_version",
        F.col("run_id").alias("latest_run"), F.col("outcome").alias("latest_outcome"),
    )
    previous = scenarios.where(F.col("recency") == 2).select(
        "target", "sid",
        F.col("target_version").alias("previous_version"),
        F.col("run_id").alias("previous_run"), F.col("outcome").alias("previous_outcome"),
    )
    failing = F.col("latest_outcome").isin("failed", "error")
    was_failing = F.col("previous_outcome").isin("failed", "error")
    change = (
        F.when((F.col("previous_outcome") == "passed") & failing, "regression")
        .when(was_failing & (F.col("latest_outcome") == "passed"), "fix")
    )
    changed = (
        latest.join(previous, ["target", "sid"])
        .withColumn("change", change)
        .where(F.col("change").isNotNull())
    )
    return (
        _named(changed, state)
        .select(
            "target", "target_version", "scenario", "classname",
            F.col("behaviours").alias("behaviour"), "previous_run", "previous_version",
            "previous_outcome", "latest_run", "latest_outcome", "change",
        )
        .orderBy(F.desc("change"), "target", "scenario")
    )


def _recent_durations(state: State, days: int) -> DataFrame:
    """The duration rows of each target's last ``days`` days (up to its latest run's)."""
    if "last_dates" not in state.collected:  # durations.csv and the chart both need it
        state.collected["last_dates"] = (
            state.runs.groupBy("target").agg(F.max("last_date").alias("last")).collect()
        )
    last = state.collected["last_dates"]
    since = {r.target: r.last - timedelta(days=days - 1) for r in last}
    months: dict[str, set[str]] = defaultdict(set)
    for r in last:
        day = since[r.target]
        while day <= r.last:
            months[r.target].add(store.month_of(day))
            day = (day.replace(day=1) + timedelta(days=31)).replace(day=1)
    bounds = state.spark.createDataFrame(list(since.items()), "target string, since date")
    return (
        state.months("durations", months)
        .join(F.broadcast(bounds), "target")
        .where(F.col("date") >= F.col("since"))
        .drop("since", "month")
    )


def durations(state: State, days: int = DURATION_DAYS) -> DataFrame:
    """Duration p50/p95 (nearest rank) per target x scenario x day, the last ``days``."""
    return (
        _named(_recent_durations(state, days), state)
        .select("target", "scenario", "classname", "date", "runs", "p50_s", "p95_s")
        .orderBy("target", "scenario", "date")
    )


def slowest_durations(state: State, top: int, days: int = DURATION_DAYS) -> DataFrame:
    """The duration rows of the ``top`` scenarios with the highest p95 in the last ``days``
    (the dashboard's chart): a few hundred rows, where durations.csv has one per scenario
    and day."""
    recent = _recent_durations(state, days)
    worst = (
        recent.groupBy("target", "sid")
        .agg(F.max("p95_s").alias("worst"))
        .orderBy(F.desc("worst"), "target", "sid")
        .limit(top)
        .select("target", "sid")
    )
    chosen = recent.join(F.broadcast(worst), ["target", "sid"])
    return _named(chosen, state).select(
        "target", "scenario", "classname", "date", "runs", "p50_s", "p95_s"
    )


def trends(state: State) -> DataFrame:
    """Pass rate of every run, for the trend lines."""
    return (
        state.runs.select(
            "target", "target_version", "run_id", "started_at",
            "passed", "failed", "errors", "skipped", "certification",
        )
        .withColumn("pass_rate", _pass_rate("passed", "failed", "errors"))
        .orderBy("target", "started_at", "run_id")
    )


def latest_matrix(state: State) -> DataFrame:
    """The certification matrix: behaviour x target in each target's latest run."""
    rows = [r for r in _two_latest(state) if r.recency == 1]  # one per target
    months: dict[str, set[str]] = defaultdict(set)  # where their behaviour rows are
    for run in rows:
        months[run.target].add(store.month_of(run.first_date))
    latest = state.spark.createDataFrame(
        [(r.target, r.run_id, r.started_at, r.certification) for r in rows],
        "target string, run_id string, started_at timestamp, certification string",
    )
    behaviour_runs = state.months("behaviour_runs", months).drop("month")
    counted = behaviour_runs.join(F.broadcast(latest), _RUN_KEY).withColumn(
        "no_errors", F.lit(0)
    )
    # The strongest status of its rows, as the certification combines its scenarios;
    # a behaviour the run covered only partly is at least PARTIAL.
    partial = F.when(F.col("partial"), F.lit(REPORT_RANK["PARTIAL"])).otherwise(F.lit(0))
    status = status_of_rank(F.greatest(F.col("rank"), partial))
    return (
        counted.withColumn("status", status)
        .withColumn("pass_rate", _pass_rate("passed", "failed", "no_errors"))
        .select(
            "behaviour", "target", "target_version", "run_id", "started_at", "status",
            "passed", "failed", "skipped", "pass_rate", "outside",
            F.col("errors").alias("inconclusive"), "partial", "certification",
        )
        .orderBy("behaviour", "target")
    )
