"""Per-scenario history: the last HISTORY_RUNS statuses of each target x scenario.

The aggregate ``scenario_history`` holds, per (target, sid), an array of
(started_us, run_id, rank, message) for the scenario's latest runs, oldest first:
the dashboard's row of coloured squares. Like the flaky history it is a fold:
old entries plus the new runs' entries, sorted, cut to the last HISTORY_RUNS. The
cut is what keeps it small whatever the history's length.
"""

from __future__ import annotations

from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from reports.verdicts import REPORT_RANK

__all__ = ["HISTORY_RUNS", "history_segment", "interesting_history", "merge_history"]

HISTORY_RUNS = 20
HISTORY_MESSAGE = 200  # characters of a reason kept per square (hover text)
_KEY = ["target", "sid"]
# Statuses that are news in a latest run: a verdict against the target or no verdict.
_ALARMING = [REPORT_RANK[s] for s in ("FAIL", "INCONCLUSIVE", "OUTSIDE-GUARANTEE")]


def _last(entries: Column) -> Column:
    return F.slice(entries, F.greatest(F.size(entries) - HISTORY_RUNS + 1, F.lit(1)), HISTORY_RUNS)


def history_segment(timed: DataFrame) -> DataFrame:
    """The new runs' entries per target x scenario (``timed``: scenario runs with a start)."""
    entry = F.struct(
        "started_us", "run_id", F.col("srank").alias("rank"),
        F.substring("smessage", 1, HISTORY_MESSAGE).alias("message"),
    )
    return timed.groupBy(*_KEY).agg(_last(F.array_sort(F.collect_list(entry))).alias("h"))


def merge_history(old: DataFrame | None, segment: DataFrame) -> DataFrame:
    """Old entries then the segment's, the last HISTORY_RUNS kept (runs sort by start)."""
    if old is None:
        return segment
    both = old.unionByName(segment)
    return both.groupBy(*_KEY).agg(
        _last(F.array_sort(F.flatten(F.collect_list("h")))).alias("h")
    )


def interesting_history(history: DataFrame, limit: int) -> DataFrame:
    """The rows worth a look, most alarming first: a latest status that is a FAIL,
    INCONCLUSIVE or OUTSIDE-GUARANTEE, or any change of status in the window."""
    changes = F.expr(
        "size(filter(sequence(1, greatest(size(h) - 1, 1)), "
        "i -> i < size(h) and h[i].rank != h[i - 1].rank))"
    )
    last_rank = F.element_at("h", -1)["rank"]
    alarming = last_rank.isin(_ALARMING)
    return (
        history.withColumn("changes", changes)
        .withColumn("alarming", alarming)
        .where(F.col("alarming") | (F.col("changes") > 0))
        .orderBy(F.desc("alarming"), F.desc("changes"), "target", "sid")
        .limit(limit)
    )

