"""SN-4: an unacknowledged shadow copy expires after SafetyNetHoldTime +
MessageExpirationTimeout (the shadow's settings), not before.

The rule judges the copy's staying: a shadow the harness saw holding a copy, looked at
again before that sum had surely passed on the nodes' clock since the copy arrived
(the send), with nothing else that may move it (a delivery and its discard, an outage
or setting change among the primary and its shadows, a resubmission), must still hold
it. Where the copy may rightly have expired, the other rules that expect copies (CR-1,
PR-2, PR-4, SN-3) are not judged (``_TOUCHES`` in ``__init__``): a scenario naming
MessageExpirationTimeout is judged by this rule alone on that matter.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_shadowcheck.checks.model.scripted_refusals import partly_refused
from pytest_shadowcheck.checks.model.state import seconds

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.model.replay import Sent
    from pytest_shadowcheck.checks.model.rules import Judge

__all__ = ["EXPIRATION_DEFAULT", "expiry_governs", "unacknowledged_expiry_rule"]

#: the catalogue's MessageExpirationTimeout when a scenario does not set it (2 days)
EXPIRATION_DEFAULT = 2 * 86400.0


def _one(j: Judge, node: str, name: str, a: float, b: float, default: float) -> float | None:
    values = j.tl.setting(node, name, a, b)
    if len(values) != 1:
        return None
    value = next(iter(values))
    if value is None:
        return default
    return float(value) if isinstance(value, int | float) else None


def unacknowledged_expiry_rule(j: Judge, m: Sent) -> None:
    """SN-4 for ``m``'s copy in each shadow that was seen holding it."""
    if not m.accepted or m.t_reply is None:
        return
    seen: set[str] = set()
    for snap in j.obs.snapshots:
        if snap.queue != "shadow" or snap.t <= m.t_reply:
            continue
        if snap.node not in seen:
            if m.ref in snap.refs:
                seen.add(snap.node)
            continue
        times = _owed(j, m, snap.node, snap.t)
        if times is None:
            return  # from here the copy may rightly have gone
        hold, expiration, most = times
        if m.ref in snap.refs:
            if most >= hold:
                j.exercised["SN-4"] += 1  # kept past the plain hold time, as it must be
            continue
        j.exercised["SN-4"] += 1
        j.diverged(
            "SN-4",
            f"{snap.node} keeps its copy of {m.ref} (not yet acknowledged: {m.via} still holds "
            f"it) until SafetyNetHoldTime + MessageExpirationTimeout ({seconds(hold)} + "
            f"{seconds(expiration)}) has passed since it arrived; at most {seconds(most)} had",
            f"the shadow queue of {snap.node} did not hold {m.ref} at {j.when(snap.t)}",
            snap.t,
        )
        return


def expiry_governs(j: Judge, m: Sent, shadow: str, t: float) -> bool:
    """Whether by ``t`` ``shadow``'s copy of ``m`` may be older than the shadow's
    SafetyNetHoldTime: from then on its staying is this module's question (SN-4: kept
    until hold + expiration, then rightly gone), not that of the rules that expect a
    copy to stay while its message is undelivered."""
    hold = _one(j, shadow, "SafetyNetHoldTime", m.t_send, t, 2 * 86400.0)
    if hold is None:
        return True
    _, most = j.tl.timer_elapsed(m.t_send, t)
    return most >= hold


def _owed(j: Judge, m: Sent, shadow: str, t: float) -> tuple[float, float, float] | None:
    """(hold, expiration, most time passed) when ``shadow`` surely still owes ``m``'s
    copy at ``t``; None when the copy may rightly have gone."""
    hold = _one(j, shadow, "SafetyNetHoldTime", m.t_send, t, 2 * 86400.0)
    expiration = _one(j, shadow, "MessageExpirationTimeout", m.t_send, t, EXPIRATION_DEFAULT)
    own = _one(j, m.via, "MessageExpirationTimeout", m.t_send, t, EXPIRATION_DEFAULT)
    if hold is None or expiration is None or own is None:
        return None  # a change meanwhile: the copy's time is not known
    if any(d.t <= t + j.slack for d in m.deliveries):
        return None  # delivered: its discard may have moved the copy (DI-2)
    if partly_refused(j, m):
        # a recipient a next hop may refuse for good: its primary may have failed the
        # message (a DSN, its fork done), and that discard may have moved the copy too
        return None
    if any(s.step.kind == "resubmit" and s.t <= t for s in j.tl.steps):
        return None
    if j.tl.changed(m.t_send - j.slack, t, {m.via, shadow}, hops=False):
        return None
    _, most = j.tl.timer_elapsed(m.t_send, t)
    if most >= min(hold + expiration, own):
        return None  # it may rightly have expired, here or at its primary
    return hold, expiration, most
