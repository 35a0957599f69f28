"""Derived tables kept next to ``cases/``, folded build by build: what the metrics read.

``out/aggregates/``:

* ``runs``: one row per run (target, run_id): version, start, date span of its rows,
  scenario outcome counts (the trend line);
* ``behaviour_runs``: outcome counts per run x behaviour (the latest matrix), partitioned
  by target and month of the run;
* ``behaviour_totals``: those counts summed per target x version x behaviour (matrix.csv);
* ``names``: per target x scenario hash (``sid``): classname, scenario, behaviours;
* ``flaky_state``: per target x version x scenario, its executed history folded to
  runs, flips, first and last run, last flip and reruns;
* ``durations``: per target x scenario x day, p50 / p95, partitioned by target and month;
* ``scenario_history``: per target x scenario, its last statuses (reports.history).

Statuses (reports.verdicts) travel as ranks: a row's own status when its file had
per-behaviour verdicts, else the one its outcome and message give.

A build reads only the cases of the runs it touched (partition-pruned by target and
date) and folds them in. Runs that arrive after everything a target already has are
*appended*: the flaky history is extended from its last run, and only their days'
durations are recomputed. Anything else (a run extended by a later file, a run older
than the target's latest) *rebuilds* that target from its cases. The two tables that
grow with the history are partitioned by target and month, and a build rewrites only
the partitions its runs fall in (every partition of a rebuilt target); the others are
small and rewritten whole. Everything is staged beside and swapped in under a marker
file (reports.store), so a build that crashes mid-swap is finished by the next one.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Iterable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from datetime import UTC, date, datetime, timedelta

from pyspark.sql import Column, DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql import types as T

from reports import store
from reports.history import history_segment, merge_history
from reports.progress import Progress
from reports.table import NewRun, all_runs, read_partitions
from reports.verdicts import REPORT_RANK, rank_column, status_column

__all__ = [
    "OUTCOME_RANK",
    "OUTSIDE_GUARANTEE",
    "TABLES",
    "State",
    "keyed_cases",
    "load",
    "outcome_name",
    "scenario_runs",
    "update",
]

TABLES = ("runs", "behaviour_runs", "behaviour_totals", "names", "flaky_state", "durations",
          "scenario_history")
_WHOLE = [name for name in TABLES if name not in store.PARTITIONED]
# Columns a table written by an older version lacks: such tables are folded again.
_NEWEST_COLUMNS = {"runs": "certification"}

# Worst outcome wins when a scenario appears more than once in a run.
OUTCOME_RANK = {"skipped": 0, "passed": 1, "failed": 2, "error": 3}
# pytest's xfail for a message lost outside what shadow redundancy promises: a
# skipped result whose message starts so (the plugin's verdict, not a skip).
OUTSIDE_GUARANTEE = "OUTSIDE-GUARANTEE:"
_RUN_KEY = ["target", "run_id"]
_FLAKY_KEY = ["target", "target_version", "sid"]
_MATRIX_KEY = ["target", "target_version", "behaviour"]
_COUNTS = ["passed", "failed", "errors", "skipped", "outside"]


@dataclass
class State:
    """The derived tables as read back after a build; the partitioned ones by month."""

    spark: SparkSession
    out: str
    runs: DataFrame
    behaviour_totals: DataFrame
    names: DataFrame
    flaky_state: DataFrame
    scenario_history: DataFrame
    # Small answers several metrics need (reports.metrics): collected once per build.
    collected: dict[str, list] = field(default_factory=dict)

    def months(self, name: str, months: dict[str, set[str]]) -> DataFrame:
        """Some (target, month) partitions of ``behaviour_runs`` or ``durations``."""
        return store.read_months(self.spark, self.out, name, months)


def _outcome_rank() -> Column:
    return F.coalesce(
        *[F.when(F.col("outcome") == name, F.lit(value)) for name, value in OUTCOME_RANK.items()]
    ).cast("byte")


def outcome_name(rank: str) -> Column:
    """A ``worst`` rank back to its outcome name."""
    return F.coalesce(
        *[F.when(F.col(rank) == value, F.lit(name)) for name, value in OUTCOME_RANK.items()]
    )


def _count_where(condition: Column) -> Column:
    return F.sum(F.when(condition, 1).otherwise(0)).cast("long")


def keyed_cases(cases: DataFrame, *extra: str) -> DataFrame:
    """The columns the aggregates need, scenarios keyed by a 64-bit hash ``sid``.

    Shuffling and sorting a long instead of two long strings; names are joined back
    from ``names`` at the end.
    """
    status = status_column("status", "outcome", "message")
    return cases.select(
        "target", "run_id", "target_version", "started_at", "date",
        F.xxhash64("classname", "scenario").alias("sid"), "classname", "scenario",
        "behaviour", "outcome", (status == "OUTSIDE-GUARANTEE").alias("outside"),
        rank_column(status).alias("rank"), F.coalesce("partial", F.lit(False)).alias("partial"),
        "certification", "message", "duration_s", "reruns", *extra,
    )


def scenario_runs(keyed: DataFrame) -> DataFrame:
    """One row per run x scenario: worst outcome (as a rank), longest duration, reruns,
    strongest status (``srank``) and the message that goes with it."""
    return keyed.groupBy(*_RUN_KEY, "sid").agg(
        F.max("target_version").alias("target_version"),
        F.max(_outcome_rank()).alias("worst"),
        F.max("duration_s").alias("duration_s"),
        F.max("reruns").alias("reruns"),
        F.max("rank").alias("srank"),
        F.max_by("message", "rank").alias("smessage"),
    )


def _run_rows(keyed: DataFrame, scenarios: DataFrame) -> DataFrame:
    per_run = keyed.groupBy(*_RUN_KEY).agg(
        F.max("target_version").alias("target_version"),
        F.min("started_at").alias("started_at"),
        F.min("date").alias("first_date"),
        F.max("date").alias("last_date"),
        F.max("certification").alias("certification"),
    )
    worst = F.col("worst")
    counts = scenarios.groupBy(*_RUN_KEY).agg(
        _count_where(worst == OUTCOME_RANK["passed"]).alias("passed"),
        _count_where(worst == OUTCOME_RANK["failed"]).alias("failed"),
        _count_where(worst == OUTCOME_RANK["error"]).alias("errors"),
        _count_where(worst == OUTCOME_RANK["skipped"]).alias("skipped"),
    )
    return per_run.join(counts, _RUN_KEY).withColumn(
        "started_us", F.unix_micros("started_at")
    )


def _behaviour_rows(keyed: DataFrame) -> DataFrame:
    """Per run x behaviour: counts by status (errors = INCONCLUSIVE, skipped = every
    status that is no verdict), the strongest status and whether the run was partial."""
    rank = F.col("rank")
    verdicts = [REPORT_RANK[s] for s in ("PASS", "FAIL", "INCONCLUSIVE")]
    return (
        keyed.where(F.col("behaviour").isNotNull())
        .groupBy("target", "target_version", "run_id", "behaviour")
        .agg(
            _count_where(rank == REPORT_RANK["PASS"]).alias("passed"),
            _count_where(rank == REPORT_RANK["FAIL"]).alias("failed"),
            _count_where(rank == REPORT_RANK["INCONCLUSIVE"]).alias("errors"),
            _count_where(~rank.isin(verdicts)).alias("skipped"),
            _count_where(F.col("outside")).alias("outside"),
            F.max("rank").alias("rank"),
            F.max("partial").alias("partial"),
        )
    )


def _name_rows(keyed: DataFrame) -> DataFrame:
    # distinct first: collect_set over a million rows falls back to sorting.
    return (
        keyed.select("target", "sid", "classname", "scenario", "behaviour")
        .distinct()
        .groupBy("target", "sid")
        .agg(
            F.first("classname").alias("classname"),
            F.first("scenario").alias("scenario"),
            F.collect_set("behaviour").alias("behaviours"),
        )
    )


def _merge_names(frames: Iterable[DataFrame]) -> DataFrame:
    union = None
    for frame in frames:
        union = frame if union is None else union.unionByName(frame)
    assert union is not None
    return union.groupBy("target", "sid").agg(
        F.first("classname").alias("classname"),
        F.first("scenario").alias("scenario"),
        F.array_sort(F.array_distinct(F.flatten(F.collect_list("behaviours")))).alias(
            "behaviours"
        ),
    )


def _flaky_segment(scenarios: DataFrame) -> DataFrame:
    """The executed history of each target x version x scenario in these runs, folded.

    Sorted inside each group (an array per scenario) rather than by a window, which
    would sort the whole input.
    """
    history = (
        scenarios.where(F.col("worst") > OUTCOME_RANK["skipped"])
        .groupBy(*_FLAKY_KEY)
        .agg(
            F.array_sort(
                F.collect_list(
                    F.struct(
                        "started_us", "run_id",
                        (F.col("worst") == OUTCOME_RANK["passed"]).alias("ok"),
                    )
                )
            ).alias("h"),
            F.sum("reruns").cast("long").alias("reruns"),
        )
    )
    flips = F.expr(
        "filter(transform(sequence(1, greatest(size(h) - 1, 1)), "
        "i -> if(i < size(h) and h[i].ok != h[i - 1].ok, h[i], null)), x -> x is not null)"
    )
    folded = history.withColumn("f", flips)
    first, last, flip = F.col("h")[0], F.element_at("h", -1), F.try_element_at("f", F.lit(-1))
    return folded.select(
        *_FLAKY_KEY,
        F.size("h").cast("long").alias("runs"),
        F.size("f").cast("long").alias("flips"),
        "reruns",
        first["started_us"].alias("first_us"), first["run_id"].alias("first_run"),
        first["ok"].alias("first_ok"),
        last["started_us"].alias("last_us"), last["run_id"].alias("last_run"),
        last["ok"].alias("last_ok"),
        flip["started_us"].alias("flip_us"), flip["run_id"].alias("flip_run"),
    )


def _merge_flaky(old: DataFrame, new: DataFrame) -> DataFrame:
    """Old history followed by a segment whose runs all come after it (a monoid fold)."""
    o, n = old.alias("o"), new.alias("n")
    joined = o.join(n, _FLAKY_KEY, "full_outer")
    has_old, has_new = F.col("o.runs").isNotNull(), F.col("n.runs").isNotNull()
    edge = has_old & has_new & (F.col("o.last_ok") != F.col("n.first_ok"))

    def pick(column: str, prefer_new: bool) -> Column:
        first, second = ("n", "o") if prefer_new else ("o", "n")
        take_first = has_new if prefer_new else has_old
        return F.when(take_first, F.col(f"{first}.{column}")).otherwise(
            F.col(f"{second}.{column}")
        ).alias(column)

    def flip(column: str, from_first: str) -> Column:
        return (
            F.when(F.col(f"n.{column}").isNotNull(), F.col(f"n.{column}"))
            .when(edge, F.col(f"n.{from_first}"))
            .otherwise(F.col(f"o.{column}"))
            .alias(column)
        )

    def total(column: str) -> Column:
        return (
            F.coalesce(F.col(f"o.{column}"), F.lit(0)) + F.coalesce(F.col(f"n.{column}"), F.lit(0))
        )

    return joined.select(
        *_FLAKY_KEY,
        total("runs").cast("long").alias("runs"),
        (total("flips") + edge.cast("long")).cast("long").alias("flips"),
        total("reruns").cast("long").alias("reruns"),
        pick("first_us", False), pick("first_run", False), pick("first_ok", False),
        pick("last_us", True), pick("last_run", True), pick("last_ok", True),
        flip("flip_us", "first_us"), flip("flip_run", "first_run"),
    )


def _duration_rows(scenarios: DataFrame) -> DataFrame:
    """p50 / p95 (nearest rank) per target x scenario x day of the run."""

    def rank(q: float) -> Column:
        return F.element_at("t", F.greatest(F.ceil(F.size("t") * q).cast("int"), F.lit(1)))

    return (
        scenarios.groupBy("target", "sid", "day")
        .agg(F.array_sort(F.collect_list("duration_s")).alias("t"))
        .select(
            "target", "sid", F.col("day").alias("date"), F.size("t").cast("long").alias("runs"),
            rank(0.5).alias("p50_s"), rank(0.95).alias("p95_s"),
        )
    )


def _day(started_us: int) -> date:
    return (datetime(1970, 1, 1, tzinfo=UTC) + timedelta(microseconds=started_us)).date()


@dataclass
class _Plan:
    """Which runs to read, which to fold into the flaky history, which days to recompute."""

    rebuild: set[str] = field(default_factory=set)
    selected: list[tuple[str, str, bool]] = field(default_factory=list)  # target, run, new
    dates: dict[str, set[date]] = field(default_factory=lambda: defaultdict(set))
    days: list[tuple[str, date]] = field(default_factory=list)

    def months(self) -> dict[str, set[str]]:
        """The partitions appended targets touch (the months of their recomputed days)."""
        found: dict[str, set[str]] = defaultdict(set)
        for target, day in self.days:
            if target not in self.rebuild:
                found[target].add(store.month_of(day))
        return found


def _plan(old_runs: list, new_runs: dict[tuple[str, str], NewRun]) -> _Plan:
    plan = _Plan()
    old_by_target: dict[str, list] = defaultdict(list)
    for row in old_runs:
        old_by_target[row.target].append(row)
    new_by_target: dict[str, dict[str, NewRun]] = defaultdict(dict)
    for (target, run_id), run in new_runs.items():
        new_by_target[target][run_id] = run
    for target, runs in new_by_target.items():
        olds = old_by_target.get(target, [])
        latest = max(((r.started_us, r.run_id) for r in olds), default=None)
        appends = latest is None or all(
            (run.started_us, run_id) > latest and run_id not in {r.run_id for r in olds}
            for run_id, run in runs.items()
        )
        days: set[date] = {_day(run.started_us) for run in runs.values()}
        for run_id, run in runs.items():
            plan.selected.append((target, run_id, True))
            plan.dates[target] |= run.dates
        if not appends:
            plan.rebuild.add(target)
        new_ids = set(runs)
        for row in olds:
            if row.run_id in new_ids:
                continue
            run_day = _day(row.started_us)
            if appends and run_day not in days:
                continue
            # Rebuild: every old run is read and re-folded; append: same-day runs only,
            # for that day's durations.
            plan.selected.append((target, row.run_id, not appends))
            span = row.first_date
            while span <= row.last_date:
                plan.dates[target].add(span)
                span += timedelta(days=1)
            days.add(run_day)
        plan.days += [(target, day) for day in sorted(days)]
    return plan


_SELECTED = T.StructType(
    [
        T.StructField("target", T.StringType()),
        T.StructField("run_id", T.StringType()),
        T.StructField("segment", T.BooleanType()),
    ]
)
_DAYS = T.StructType([T.StructField("target", T.StringType()), T.StructField("day", T.DateType())])


def update(
    spark: SparkSession,
    out: str,
    new_runs: dict[tuple[str, str], NewRun],
    progress: Progress | None = None,
    earlier_rows: int = 0,
) -> dict[str, T.StructType] | None:
    """Fold the cases of ``new_runs`` (already appended to ``out/cases``) into the tables.

    ``earlier_rows`` (rows earlier builds added) with no tables at all means they
    were deleted, or written by a version without them: every run is folded again.
    Returns the schemas of the tables it wrote (for ``load``), None if it wrote none.
    """
    progress = progress or Progress(enabled=False)
    store.recover(spark, out)
    # Each read infers its schema from a Parquet footer, a Spark job: run together.
    with ThreadPoolExecutor(max_workers=len(_WHOLE)) as pool:
        old = dict(zip(_WHOLE, pool.map(lambda name: store.read(spark, out, name), _WHOLE),
                       strict=True))
    # Partitioned tables are never read whole: only whether they are in this layout.
    current = {name: store.is_partitioned(spark, out, name) for name in store.PARTITIONED}
    outdated = any(
        column not in frame.columns
        for name, column in _NEWEST_COLUMNS.items()
        if (frame := old[name]) is not None
    )
    missing = any(frame is None for frame in old.values()) or not all(current.values())
    if earlier_rows and (outdated or missing):
        progress.say("aggregates/ missing or incomplete: folding every run of cases/ again")
        old = dict.fromkeys(_WHOLE)
        current = dict.fromkeys(store.PARTITIONED, False)
        new_runs = all_runs(spark, out)
    if not new_runs:
        return None
    old_runs = old["runs"].select(
        "target", "run_id", "started_us", "first_date", "last_date"
    ).collect() if old["runs"] is not None else []
    plan = _plan(old_runs, new_runs)
    if plan.rebuild:
        progress.say(f"rebuilding the aggregates of {', '.join(sorted(plan.rebuild))}")

    selected = F.broadcast(spark.createDataFrame(plan.selected, _SELECTED))
    cases = read_partitions(spark, out, plan.dates).join(selected.drop("segment"), _RUN_KEY)
    # Hashed by (target, sid) once: the run x scenario, flaky, duration and name
    # aggregations all group by keys that contain it, so none shuffles again
    # (a cold build's fold: 15 s instead of 21 to 28 on a million cases).
    keyed = keyed_cases(cases).repartition("target", "sid").cache()
    try:
        return _fold(spark, out, old, current, plan, keyed, selected, progress)
    finally:
        keyed.unpersist()


def _month(column: str) -> Column:
    return F.date_format(column, "yyyy-MM")


def _totals(rows: DataFrame) -> DataFrame:
    """Per target x version x behaviour: how many runs, and their counts summed."""
    return rows.groupBy(*_MATRIX_KEY).agg(
        F.count(F.lit(1)).cast("long").alias("runs"),
        *[F.sum(c).cast("long").alias(c) for c in _COUNTS],
    )


def _fold(
    spark: SparkSession,
    out: str,
    old: dict[str, DataFrame | None],
    current: dict[str, bool],
    plan: _Plan,
    keyed: DataFrame,
    selected: DataFrame,
    progress: Progress,
) -> dict[str, T.StructType]:
    # The run x scenario table is the costly aggregation: computed once, used four times.
    scenarios = scenario_runs(keyed).cache()
    runs_new = _run_rows(keyed, scenarios).cache()
    timed = scenarios.join(
        F.broadcast(runs_new.select(*_RUN_KEY, "started_us", "started_at")), _RUN_KEY
    ).join(selected, _RUN_KEY)
    try:
        selected_runs = runs_new.select(*_RUN_KEY)
        rebuild = sorted(plan.rebuild)
        keep = ~F.col("target").isin(rebuild) if rebuild else F.lit(True)
        # Partitions the appended targets touch: read back, their re-folded rows replaced.
        touched = plan.months()

        tables: dict[str, DataFrame] = {
            "runs": runs_new if old["runs"] is None else old["runs"].where(keep).join(
                F.broadcast(selected_runs), _RUN_KEY, "left_anti"
            ).unionByName(runs_new),
        }
        # A run's behaviour rows live in the month it started in.
        behaviour_new = _behaviour_rows(keyed).join(
            F.broadcast(runs_new.select(*_RUN_KEY, _month("first_date").alias("month"))),
            _RUN_KEY,
        )
        tables["behaviour_runs"] = behaviour_new if not current["behaviour_runs"] else (
            store.read_months(spark, out, "behaviour_runs", touched)
            .join(F.broadcast(selected_runs), _RUN_KEY, "left_anti")
            .unionByName(behaviour_new)
        )
        # matrix.csv's sums: only runs new to the history are added (a rebuilt target's
        # runs are all new to it: its old totals are dropped).
        added = _totals(behaviour_new.join(selected.where("segment"), _RUN_KEY, "left_semi"))
        tables["behaviour_totals"] = added if old["behaviour_totals"] is None else _totals_sum(
            old["behaviour_totals"].where(keep).unionByName(added)
        )
        names_new = _name_rows(keyed)
        tables["names"] = (
            names_new if old["names"] is None
            else _merge_names([old["names"].where(keep), names_new])
        )
        segment = _flaky_segment(timed.where("segment"))
        tables["flaky_state"] = (
            segment if old["flaky_state"] is None
            else _merge_flaky(old["flaky_state"].where(keep), segment)
        )
        days = F.broadcast(spark.createDataFrame(plan.days, _DAYS))
        dated = timed.withColumn("day", F.to_date("started_at"))
        durations_new = _duration_rows(dated.join(days, ["target", "day"], "left_semi"))
        durations_new = durations_new.withColumn("month", _month("date"))
        tables["durations"] = durations_new if not current["durations"] else (
            store.read_months(spark, out, "durations", touched)
            .join(days.withColumnRenamed("day", "date"), ["target", "date"], "left_anti")
            .unionByName(durations_new)
        )
        tables["scenario_history"] = merge_history(
            None if old["scenario_history"] is None else old["scenario_history"].where(keep),
            history_segment(timed.where("segment")),
        )
        # Per partitioned table: the targets replaced whole, or None to replace the table.
        partitioned = {
            name: [f"target={store.escape(spark, t)}" for t in rebuild]
            for name in store.PARTITIONED if current[name]
        }
        with progress.watch(spark.sparkContext, "folding the new runs into aggregates/"):
            _write_all(spark, out, tables, partitioned)
        return {
            name: store.PARTITIONED.get(name, frame.schema) for name, frame in tables.items()
        }
    finally:
        scenarios.unpersist()
        runs_new.unpersist()


def _totals_sum(rows: DataFrame) -> DataFrame:
    return rows.groupBy(*_MATRIX_KEY).agg(
        *[F.sum(c).cast("long").alias(c) for c in ["runs", *_COUNTS]]
    )


def _write_all(
    spark: SparkSession, out: str, tables: dict[str, DataFrame], partitioned: dict[str, list]
) -> None:
    """Stage every table beside the old one, then swap them in (reports.store)."""
    tag = uuid.uuid4().hex[:8]

    def write(name: str) -> None:
        staged = f"{store.path(out, name)}.next-{tag}"
        schema = store.PARTITIONED.get(name)
        if schema is None:
            # One file per table: they are small, and one file reads faster than many.
            # repartition, not coalesce: coalesce(1) would run the whole aggregation
            # feeding the table in one task (3.8 s instead of 1 for durations).
            tables[name].repartition(1).write.parquet(staged)
            return
        # One file per partition, the columns in the order the schema reads them.
        frame = tables[name].select(*[F.col(f.name).cast(f.dataType) for f in schema])
        frame.repartition(*store.PARTITION_COLUMNS).write.partitionBy(
            *store.PARTITION_COLUMNS
        ).parquet(staged)

    # Independent jobs submitted together overlap one's planning with another's tasks.
    with ThreadPoolExecutor(max_workers=len(tables)) as pool:
        for done in [pool.submit(write, name) for name in tables]:
            done.result()
    store.start_swap(spark, out, tag, partitioned)


def load(
    spark: SparkSession, out: str, schemas: dict[str, T.StructType] | None = None
) -> State | None:
    """The tables after the last build, or None before any row was ingested.

    ``schemas``: what ``update`` returned, when this build wrote the tables.
    """
    schemas = schemas or {}
    frames = {name: store.read(spark, out, name, schemas.get(name)) for name in _WHOLE}
    if any(frame is None for frame in frames.values()) or not all(
        store.exists(spark, store.path(out, name)) for name in store.PARTITIONED
    ):
        return None
    return State(spark, out, **frames)  # type: ignore[arg-type]
