"""The verdict vocabulary, defined once for the plugin, the certification and the reports.

A *check* evidences behaviours; a behaviour's status in one scenario combines
the checks that evidence it; its status in a certification combines its
scenarios. The same words, colours and meanings are used by the certification
page and the dashboard (``LEGEND``), and by docs/verdicts.md.

How a scenario (one pytest test case) shows in pytest and in JUnit: the
strongest status over its behaviours decides the outcome; the per-behaviour
statuses travel in the test case property ``shadowcheck.verdicts``
(``CR-1=FAIL;TO-2=NOT-APPLICABLE``), as a ``<property>`` for the xunit1 family
and as a Jenkins ``[[PROPERTY|name=value]]`` line in ``system-out`` for xunit2.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

__all__ = [
    "LEGEND",
    "RANK",
    "VERDICTS_PROPERTY",
    "Status",
    "StatusInfo",
    "format_verdicts",
    "parse_verdicts",
    "strongest",
]

#: the test case property carrying per-behaviour statuses
VERDICTS_PROPERTY = "shadowcheck.verdicts"


class Status(StrEnum):
    PASS = "PASS"
    FAIL = "FAIL"
    NOT_APPLICABLE = "NOT-APPLICABLE"
    UNTESTABLE = "UNTESTABLE"
    OUTSIDE_GUARANTEE = "OUTSIDE-GUARANTEE"
    INCONCLUSIVE = "INCONCLUSIVE"
    PARTIAL = "PARTIAL"
    UNTESTED = "UNTESTED"


@dataclass(frozen=True)
class StatusInfo:
    colour: str
    meaning: str
    pytest_outcome: str
    junit: str


#: Strength when combining, weakest first: a FAIL anywhere is a FAIL; a target
#: error leaves a behaviour INCONCLUSIVE unless some scenario already failed it;
#: evidence (PASS) beats "did not apply" and "could not look".
RANK: dict[Status, int] = {
    Status.UNTESTED: 0,
    Status.UNTESTABLE: 1,
    Status.NOT_APPLICABLE: 2,
    Status.PASS: 3,
    Status.PARTIAL: 4,
    Status.OUTSIDE_GUARANTEE: 5,
    Status.INCONCLUSIVE: 6,
    Status.FAIL: 7,
}

LEGEND: dict[Status, StatusInfo] = {
    Status.PASS: StatusInfo(
        "#2e7d32",
        "every check that evidences the behaviour held",
        "passed",
        "a plain <testcase>",
    ),
    Status.FAIL: StatusInfo(
        "#c62828",
        "a check that evidences the behaviour saw the target break it",
        "failed",
        "<failure message='FAIL: ...'>",
    ),
    Status.NOT_APPLICABLE: StatusInfo(
        "#90a4ae",
        "the event the behaviour describes never happened (e.g. no shadow session was "
        "opened), so nothing here could prove or break it; the behaviour that required "
        "the event is judged on its own",
        "skipped",
        "<skipped message='NOT-APPLICABLE: ...'> when every behaviour of the scenario is",
    ),
    Status.UNTESTABLE: StatusInfo(
        "#bdbdbd",
        "the target cannot show the internal state the check needs (a capability it lacks)",
        "skipped",
        "<skipped message='UNTESTABLE: ...'>",
    ),
    Status.OUTSIDE_GUARANTEE: StatusInfo(
        "#ef6c00",
        "a message was lost, but the scenario's own faults put it outside what shadow "
        "redundancy promises (PR-4): never a pass",
        "xfailed",
        "<skipped type='pytest.xfail' message='OUTSIDE-GUARANTEE: ...'>",
    ),
    Status.INCONCLUSIVE: StatusInfo(
        "#6a1b9a",
        "the target or the harness broke before the behaviour could be judged (a node "
        "that never started, a bad image or description, a port that could not be "
        "bound), or a time was missed by no more than the harness itself ran late: not "
        "a verdict on the MTA",
        "error",
        "<error message='INCONCLUSIVE: ...'>",
    ),
    Status.PARTIAL: StatusInfo(
        "#f9a825",
        "only some of the behaviour's scenarios were run (-k, -m, a scenarios "
        "directory): what ran passed, but the certification is incomplete",
        "(certification only)",
        "testsuite property shadowcheck.partial",
    ),
    Status.UNTESTED: StatusInfo(
        "#eeeeee",
        "no scenario for the behaviour ran",
        "(certification only)",
        "absent",
    ),
}


def strongest(statuses: list[Status] | list[str], default: Status = Status.UNTESTED) -> Status:
    """The status that wins when several are combined (see RANK); ``default`` when none."""
    if not statuses:
        return default
    return max((Status(s) for s in statuses), key=RANK.__getitem__)


def format_verdicts(verdicts: dict[str, Status]) -> str:
    """``{"CR-1": FAIL, "TO-2": NOT-APPLICABLE}`` -> ``CR-1=FAIL;TO-2=NOT-APPLICABLE``."""
    return ";".join(f"{bid}={status}" for bid, status in verdicts.items())


def parse_verdicts(text: str) -> dict[str, Status]:
    """The inverse of format_verdicts; unknown statuses raise ValueError."""
    out: dict[str, Status] = {}
    for part in text.split(";"):
        part = part.strip()
        if not part:
            continue
        bid, sep, status = part.partition("=")
        if not sep:
            raise ValueError(f"{part!r} is not BEHAVIOUR=STATUS")
        out[bid.strip()] = Status(status.strip())
    return out
