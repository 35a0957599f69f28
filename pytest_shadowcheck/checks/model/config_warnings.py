"""SN-6: a configuration with ReplayLagTime beyond SafetyNetHoldTime is flagged - judged
on the configuration warnings a node lists when the harness looks (a ``snapshot`` of
``config_warnings``: the control API's ``/config/warnings``).

A lagged database copy older than the Safety Net cannot be made whole by a resubmission,
so a node given such a setting must flag it; one whose settings keep the lag within the
hold time has nothing to flag about it. Decided only when every value that may have been
in force at the look (a live change is uncertain for ``slack``) gives one answer, and
only where the scenario gives ReplayLagTime: a node told nothing of lagged copies owes
no warning about them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.checks.inside import queue_entries
from pytest_shadowcheck.checks.model.state import seconds

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.model.rules import Judge
    from pytest_shadowcheck.history import History

__all__ = ["KNOWN_SETTINGS", "WARNINGS", "replay_lag_rule"]

#: the settings this rule reads; they change nothing else the model predicts
KNOWN_SETTINGS = frozenset({"ReplayLagTime"})

#: the snapshot "queue" that lists a node's configuration warnings
WARNINGS = "config_warnings"


def _about_lag(entry: dict[str, Any]) -> bool:
    """Whether a listed warning is SN-6's: its code, or a message naming the setting."""
    code = str(entry.get("code", "")).strip().upper()
    return code == "SN-6" or "replaylagtime" in str(entry.get("message", "")).lower()


def replay_lag_rule(j: Judge, history: History) -> None:
    """SN-6: at each look at a node's configuration warnings, one about ReplayLagTime
    exactly when the ReplayLagTime in force exceeds the SafetyNetHoldTime in force."""
    for event in history.events():
        if event.kind != "snapshot" or event.data.get("queue") != WARNINGS:
            continue
        if "answer" not in event.data:
            continue  # the node did not answer: nothing seen
        node, t = str(event.data.get("node")), event.t
        lags = j.tl.setting(node, "ReplayLagTime", t - j.slack, t)
        holds = j.tl.setting(node, "SafetyNetHoldTime", t - j.slack, t)
        if not all(isinstance(v, int | float) for v in lags | holds):
            continue  # no ReplayLagTime given (or not a duration): nothing owed
        owed = {lag > hold for lag in lags for hold in holds}
        if len(owed) != 1:
            continue  # a change near the look: either answer is allowed
        flagged = [e for e in queue_entries(event.data["answer"]) if _about_lag(e)]
        lag, hold = (max(lags), min(holds)) if owed == {True} else (min(lags), max(holds))
        j.exercised["SN-6"] += 1
        if owed == {True} and not flagged:
            j.diverged(
                "SN-6",
                f"{node} flags its configuration: ReplayLagTime ({seconds(lag)}) exceeds "
                f"SafetyNetHoldTime ({seconds(hold)}), so a lagged database copy older than "
                "the Safety Net could not be made whole",
                f"at {j.when(t)} {node} listed {_listed(event.data['answer'])}",
                t,
            )
            return
        if owed == {False} and flagged:
            j.diverged(
                "SN-6",
                f"{node} flags nothing about ReplayLagTime: it ({seconds(lag)}) is within "
                f"SafetyNetHoldTime ({seconds(hold)})",
                f"at {j.when(t)} {node} listed {_listed(event.data['answer'])}",
                t,
            )
            return


def _listed(answer: Any) -> str:
    entries = queue_entries(answer)
    if not entries:
        return "no configuration warning"
    said = "; ".join(f"{e.get('code', '?')}: {e.get('message', '')}".strip() for e in entries)
    return f"the configuration warnings {said}"
