"""The answers, each one Spark job over the report table (see reports.table.CASES_SCHEMA).

Vocabulary: a *run* is (target, run_id), ordered by its earliest ``started_at``;
a *scenario* is (classname, scenario); *executed* means passed, failed or error
(skipped says nothing about the transport). ``error`` counts as not passing.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame, Window
from pyspark.sql import functions as F

__all__ = [
    "MIN_FLIPS",
    "behaviour_runs",
    "durations",
    "flaky",
    "latest_matrix",
    "pass_matrix",
    "regressions",
    "runs",
    "scenario_names",
    "scenario_runs",
    "trends",
]

# One flip is a regression or a fix; flaky means it went back and forth.
MIN_FLIPS = 2

_OUTCOME_RANK = {"skipped": 0, "passed": 1, "failed": 2, "error": 3}
_RUN_KEY = ["target", "run_id"]
# Scenarios are grouped by a 64-bit hash of (classname, scenario): shuffling and
# sorting a long instead of two long strings; names are joined back at the end.
_SCENARIO_KEY = ["sid"]


def _count_where(condition: Column) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0)).cast("long")


def _pass_rate(passed: str, failed: str, errors: str) -> Column:
    executed = F.col(passed) + F.col(failed) + F.col(errors)
    return F.when(executed > 0, F.round(F.col(passed) / executed, 4))


def _outcome_rank() -> Column:
    return F.coalesce(
        *[F.when(F.col("outcome") == name, F.lit(value)) for name, value in _OUTCOME_RANK.items()]
    )


def scenario_runs(cases: DataFrame) -> DataFrame:
    """One row per run x scenario (``sid``) with its worst outcome.

    ``recency`` (1 = the target's latest run) comes from a run table small enough
    to broadcast, so ordering runs costs no shuffle of the big side.
    """
    by_rank = {value: name for name, value in _OUTCOME_RANK.items()}
    outcome = F.coalesce(
        *[F.when(F.col("worst") == value, F.lit(name)) for value, name in by_rank.items()]
    )
    grouped = _keyed(cases).groupBy(*_RUN_KEY, *_SCENARIO_KEY).agg(
        F.max("target_version").alias("target_version"),
        F.max(_outcome_rank()).alias("worst"),
        F.max("duration_s").alias("duration_s"),
        F.max("reruns").alias("reruns"),
    )
    per_run = cases.groupBy(*_RUN_KEY).agg(F.min("started_at").alias("started_at"))
    newest_first = Window.partitionBy("target").orderBy(F.desc("started_at"), F.desc("run_id"))
    order = per_run.withColumn("recency", F.row_number().over(newest_first))
    return (
        grouped.withColumn("outcome", outcome)
        .drop("worst")
        .join(F.broadcast(order), _RUN_KEY)
    )


def _keyed(cases: DataFrame) -> DataFrame:
    return cases.withColumn("sid", F.xxhash64("classname", "scenario"))


def scenario_names(cases: DataFrame) -> DataFrame:
    """Per target and scenario hash: classname, scenario and every behaviour it was tagged with.

    A table of its own because collect_set over a million groups falls back to
    sort-based aggregation; here it runs over distinct names only.
    """
    return (
        _keyed(cases)
        .select("target", "sid", "classname", "scenario", "behaviour")
        .distinct()
        .groupBy("target", "sid")
        .agg(
            F.first("classname").alias("classname"),
            F.first("scenario").alias("scenario"),
            F.concat_ws(",", F.array_sort(F.collect_set("behaviour"))).alias("behaviours"),
        )
    )


def _named(frame: DataFrame, names: DataFrame) -> DataFrame:
    return frame.join(F.broadcast(names), ["target", "sid"])


def runs(scenarios: DataFrame) -> DataFrame:
    """One row per run (target, run_id, target_version, started_at, recency)."""
    return scenarios.select(*_RUN_KEY, "target_version", "started_at", "recency").dropDuplicates(
        _RUN_KEY
    )


def behaviour_runs(cases: DataFrame) -> DataFrame:
    """Outcome counts per run x behaviour: small, and all both matrices need."""
    outcome = F.col("outcome")
    return (
        cases.where(F.col("behaviour").isNotNull())
        .groupBy("target", "target_version", "run_id", "behaviour")
        .agg(
            _count_where(outcome == "passed").alias("passed"),
            _count_where(outcome == "failed").alias("failed"),
            _count_where(outcome == "error").alias("errors"),
            _count_where(outcome == "skipped").alias("skipped"),
        )
    )


def pass_matrix(behaviours: DataFrame) -> DataFrame:
    """Pass rate per target x version x behaviour over the whole history."""
    key = ["target", "target_version", "behaviour"]
    return (
        behaviours.groupBy(*key)
        .agg(
            F.count(F.lit(1)).alias("runs"),
            *[F.sum(c).cast("long").alias(c) for c in ("passed", "failed", "errors", "skipped")],
        )
        .withColumn("pass_rate", _pass_rate("passed", "failed", "errors"))
        .orderBy(*key)
    )


def flaky(scenarios: DataFrame, names: DataFrame, min_flips: int = MIN_FLIPS) -> DataFrame:
    """Scenarios whose outcome flips between consecutive runs of one target and version.

    Also lists scenarios that passed only on a rerun (Surefire flaky elements).
    Each history is sorted inside its group (an array per scenario) rather than
    by a window, which would sort the whole table.
    """
    key = ["target", "target_version", *_SCENARIO_KEY]
    history = (
        scenarios.where(F.col("outcome") != "skipped")
        .groupBy(*key)
        .agg(
            F.array_sort(
                F.collect_list(
                    F.struct("started_at", "run_id", (F.col("outcome") == "passed").alias("ok"))
                )
            ).alias("h"),
            F.sum("reruns").cast("long").alias("reruns"),
        )
    )
    flipped = F.expr(
        "filter(transform(sequence(1, greatest(size(h) - 1, 1)), "
        "i -> if(i < size(h) and h[i].ok != h[i - 1].ok, h[i], null)), x -> x is not null)"
    )
    summary = (
        history.withColumn("flipped", flipped)
        .withColumn("runs", F.size("h").cast("long"))
        .withColumn("flips", F.size("flipped").cast("long"))
        .withColumn("last_flip", F.try_element_at("flipped", F.lit(-1)))
    )
    flaky_ones = summary.withColumn(
        "flip_rate",
        F.when(F.col("runs") > 1, F.round(F.col("flips") / (F.col("runs") - 1), 4)),
    ).where((F.col("flips") >= min_flips) | (F.col("reruns") > 0))
    return (
        _named(flaky_ones, names)
        .select(
            "target", "target_version", "scenario", "classname", "runs", "flips", "flip_rate",
            F.col("last_flip.run_id").alias("last_flip_run"),
            F.col("last_flip.started_at").alias("last_flip_at"), "reruns",
        )
        .orderBy(F.desc("flip_rate"), F.desc("flips"), "target", "scenario")
    )


def regressions(scenarios: DataFrame, names: DataFrame) -> DataFrame:
    """Per target: scenarios that passed in the previous run and not in the latest, and fixes."""
    latest = scenarios.where(F.col("recency") == 1).select(
        "target",
        *_SCENARIO_KEY,
        "target_version",
        F.col("run_id").alias("latest_run"),
        F.col("outcome").alias("latest_outcome"),
    )
    previous = scenarios.where(F.col("recency") == 2).select(
        "target",
        *_SCENARIO_KEY,
        F.col("target_version").alias("previous_version"),
        F.col("run_id").alias("previous_run"),
        F.col("outcome").alias("previous_outcome"),
    )
    failing = F.col("latest_outcome").isin("failed", "error")
    was_failing = F.col("previous_outcome").isin("failed", "error")
    change = (
        F.when((F.col("previous_outcome") == "passed") & failing, "regression")
        .when(was_failing & (F.col("latest_outcome") == "passed"), "fix")
    )
    changed = (
        latest.join(previous, ["target", *_SCENARIO_KEY])
        .withColumn("change", change)
        .where(F.col("change").isNotNull())
    )
    return (
        _named(changed, names)
        .select(
            "target", "target_version", "scenario", "classname",
            F.col("behaviours").alias("behaviour"), "previous_run", "previous_version",
            "previous_outcome", "latest_run", "latest_outcome", "change",
        )
        .orderBy(F.desc("change"), "target", "scenario")
    )


def durations(scenarios: DataFrame, names: DataFrame) -> DataFrame:
    """Duration p50/p95 (nearest rank) per target x scenario x day."""
    sorted_times = F.array_sort(F.collect_list("duration_s"))

    def rank(q: float) -> Column:
        return F.element_at("t", F.greatest(F.ceil(F.size("t") * q).cast("int"), F.lit(1)))

    per_day = (
        scenarios.withColumn("date", F.to_date("started_at"))
        .groupBy("target", *_SCENARIO_KEY, "date")
        .agg(sorted_times.alias("t"))
    )
    return (
        _named(per_day, names)
        .select(
            "target", "scenario", "classname", "date", F.size("t").cast("long").alias("runs"),
            rank(0.5).alias("p50_s"), rank(0.95).alias("p95_s"),
        )
        .orderBy("target", "scenario", "date")
    )


def trends(scenarios: DataFrame) -> DataFrame:
    """Pass rate of every run, for the trend lines."""
    outcome = F.col("outcome")
    return (
        scenarios.groupBy("target", "target_version", "run_id", "started_at")
        .agg(
            _count_where(outcome == "passed").alias("passed"),
            _count_where(outcome == "failed").alias("failed"),
            _count_where(outcome == "error").alias("errors"),
            _count_where(outcome == "skipped").alias("skipped"),
        )
        .withColumn("pass_rate", _pass_rate("passed", "failed", "errors"))
        .orderBy("target", "started_at", "run_id")
    )


def latest_matrix(behaviours: DataFrame, scenarios: DataFrame) -> DataFrame:
    """The certification matrix: behaviour x target in each target's latest run."""
    latest = (
        runs(scenarios)
        .where(F.col("recency") == 1)
        .select(*_RUN_KEY, "started_at")
    )
    counted = (
        behaviours.join(F.broadcast(latest), _RUN_KEY)
        .withColumn("failed", F.col("failed") + F.col("errors"))
        .withColumn("no_errors", F.lit(0))
    )
    status = (
        F.when(F.col("failed") > 0, "FAIL").when(F.col("passed") > 0, "PASS").otherwise("SKIPPED")
    )
    return (
        counted.withColumn("status", status)
        .withColumn("pass_rate", _pass_rate("passed", "failed", "no_errors"))
        .select(
            "behaviour", "target", "target_version", "run_id", "started_at", "status",
            "passed", "failed", "skipped", "pass_rate",
        )
        .orderBy("behaviour", "target")
    )
