"""The verdict statuses as the reports read them (pure Python: also runs in Spark workers).

The vocabulary itself (words, colours, meanings, strength) is
``pytest_shadowcheck.statuses``, shared with the certification page. The reports
add one word: ``SKIPPED``, a skip that carries no shadowcheck verdict (a foreign
tool's skip, a plain ``pytest.skip``, an xfail that is not OUTSIDE-GUARANTEE). It
says nothing about the transport, so it is the weakest status and grey-brown,
apart from UNTESTABLE (the target lacks a capability) and UNTESTED.

A row's status comes from the test case property ``shadowcheck.verdicts`` when the
file has it; otherwise from the JUnit outcome and the message's prefix (files
written before the per-behaviour verdicts, and files of other tools).
"""

from __future__ import annotations

import re

from pyspark.sql import Column
from pyspark.sql import functions as F

from pytest_shadowcheck.statuses import LEGEND, RANK, VERDICTS_PROPERTY, Status, parse_verdicts

__all__ = [
    "COLOURS",
    "MEANINGS",
    "ORDER",
    "PARTIAL_PROPERTY",
    "REPORT_RANK",
    "SKIPPED",
    "VERDICTS_PROPERTY",
    "fallback_status",
    "parse_verdicts",
    "rank_column",
    "rank_name",
    "status_column",
    "status_of_rank",
]

SKIPPED = "SKIPPED"
PARTIAL_PROPERTY = "shadowcheck.partial"
CERTIFICATION_PROPERTY = "shadowcheck.certification"

# Weakest first; SKIPPED below everything the plugin can say.
REPORT_RANK: dict[str, int] = {SKIPPED: 0, **{str(s): rank + 1 for s, rank in RANK.items()}}
#: the legend's order: strongest first, as the certification page lists them
ORDER: list[str] = sorted(REPORT_RANK, key=lambda s: -REPORT_RANK[s])
COLOURS: dict[str, str] = {str(s): info.colour for s, info in LEGEND.items()} | {
    SKIPPED: "#d7ccc8"
}
MEANINGS: dict[str, str] = {str(s): info.meaning for s, info in LEGEND.items()} | {
    SKIPPED: "skipped without a shadowcheck verdict (another tool's skip, a plain "
    "pytest.skip or xfail): says nothing about the transport"
}

# Skip messages the plugin writes: "UNTESTABLE: no control API", "NOT-APPLICABLE: ...".
_SKIP_PREFIX = re.compile(r"\s*(NOT-APPLICABLE|UNTESTABLE|OUTSIDE-GUARANTEE)(?![A-Za-z0-9-])")
SKIP_PREFIX_PATTERN = _SKIP_PREFIX.pattern  # the same test in Spark SQL (rlike)


def fallback_status(outcome: str, message: str | None) -> str:
    """A row's status without a verdicts property: the outcome, refined by the message.

    Every JUnit error is INCONCLUSIVE: the plugin writes errors only for a target
    or harness that broke, and a foreign tool's error is no verdict on an MTA either.
    """
    if outcome == "passed":
        return str(Status.PASS)
    if outcome == "failed":
        return str(Status.FAIL)
    if outcome == "error":
        return str(Status.INCONCLUSIVE)
    found = _SKIP_PREFIX.match(message or "")
    return found.group(1) if found else SKIPPED


def rank_name(rank: int | None) -> str | None:
    """The status of a REPORT_RANK value."""
    for name, value in REPORT_RANK.items():
        if value == rank:
            return name
    return None


def status_column(status: str, outcome: str, message: str) -> Column:
    """The row's status in Spark: the column when the file had one, else fallback_status."""
    prefix = F.regexp_extract(F.coalesce(F.col(message), F.lit("")), f"^{SKIP_PREFIX_PATTERN}", 1)
    fallback = (
        F.when(F.col(outcome) == "passed", str(Status.PASS))
        .when(F.col(outcome) == "failed", str(Status.FAIL))
        .when(F.col(outcome) == "error", str(Status.INCONCLUSIVE))
        .when(prefix != "", prefix)
        .otherwise(SKIPPED)
    )
    return F.coalesce(F.col(status), fallback)


def rank_column(status: Column) -> Column:
    """REPORT_RANK of a status column (an unknown word ranks as SKIPPED)."""
    return F.coalesce(
        *[F.when(status == name, F.lit(rank)) for name, rank in REPORT_RANK.items()], F.lit(0)
    ).cast("byte")


def status_of_rank(rank: Column) -> Column:
    """The inverse of rank_column."""
    return F.coalesce(*[F.when(rank == value, F.lit(name)) for name, value in REPORT_RANK.items()])


assert all(str(s) in COLOURS and str(s) in MEANINGS for s in Status)
