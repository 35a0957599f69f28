"""DI-6: a discard event no shadow asked for is deleted by its primary once
ShadowMessageAutoDiscardInterval has passed on the primary's clock, and not before.

Judged from the primary's ``discard_events`` queue as the harness looked at it
(``snapshot``), for a message the primary copied to a shadow (its content on the
primary->shadow link before the sender's 250) and then delivered to every recipient, while
that shadow was down from before the delivery to the look: the shadow surely never asked.
The event is recorded when the next hop acknowledges (DI-1), so it is at most as old as the
time passed since the send and at least as old as the time passed since the delivery.
While the interval has surely not passed it must be there; once the interval and one
sweep of the primary (:data:`SWEEP`) have surely passed, it must be gone. A shadow that
may have asked is not judged: what a primary keeps of notifications it handed out is not
the catalogue's concern.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_shadowcheck.checks.model.state import seconds

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.model.replay import Sent, Snapshot
    from pytest_shadowcheck.checks.model.rules import Judge

__all__ = ["AUTO_DISCARD_DEFAULT", "SWEEP", "discard_expiry_rule", "sweep"]

#: the catalogue's ShadowMessageAutoDiscardInterval when a scenario does not set it (2 days)
AUTO_DISCARD_DEFAULT = 2 * 86400.0
#: the catalogue names no period for the primary's clean-up: a minute of its clock at most,
#: half the interval for a short one, as the hand-written scenarios allow
#: (di6_unqueried_discard_events_expire: 2 days and a minute; ..._on_the_wire: 2 s and 1 s)
SWEEP = 60.0


def sweep(interval: float) -> float:
    """How long after the interval the primary may take to delete the event."""
    return min(SWEEP, interval / 2)


def _interval(j: Judge, node: str, a: float, b: float) -> float | None:
    values = j.tl.setting(node, "ShadowMessageAutoDiscardInterval", a, b)
    if len(values) != 1:
        return None
    value = next(iter(values))
    if value is None:
        return AUTO_DISCARD_DEFAULT
    return float(value) if isinstance(value, int | float) else None


def _shadow(j: Judge, m: Sent) -> str | None:
    """The node ``m``'s primary copied it to before its sender's 250 (one only)."""
    assert m.t_reply is not None
    shadows = {
        link.partition("->")[2]
        for t, link, _conn, ref in j.obs.contents
        if ref == m.ref and link.startswith(f"{m.via}->") and m.t_send <= t <= m.t_reply
    }
    return next(iter(shadows)) if len(shadows) == 1 else None


def discard_expiry_rule(j: Judge, m: Sent) -> None:
    """DI-6 for ``m``'s discard event on its primary, at each look at that queue."""
    if not m.accepted or m.t_reply is None:
        return
    done = m.fully_delivered_at()
    shadow = _shadow(j, m)
    if done is None or shadow is None:
        return
    for snap in j.obs.snapshots:
        if snap.node != m.via or snap.queue != "discard_events" or snap.t < done + j.slack:
            continue
        if not _unasked(j, m, shadow, done, snap.t):
            return
        interval = _interval(j, m.via, m.t_send, snap.t)
        if interval is None:
            return
        _, most = j.tl.timer_elapsed(m.t_send, snap.t)
        least, _ = j.tl.timer_elapsed(done + j.slack, snap.t - j.slack)
        if most < interval:
            j.exercised["DI-6"] += 1
            if m.ref not in snap.refs:
                _diverged(j, m, snap, shadow, interval, most, kept=True)
                return
        elif least >= interval + sweep(interval):
            j.exercised["DI-6"] += 1
            if m.ref in snap.refs:
                _diverged(j, m, snap, shadow, interval, least, kept=False)
                return


def _unasked(j: Judge, m: Sent, shadow: str, done: float, t: float) -> bool:
    """Whether ``shadow`` surely never asked for ``m``'s discard status by ``t`` (down
    from the delivery on: the event exists only once the next hop acknowledged), with the
    primary up on one queue database throughout."""
    tl = j.tl
    return (
        tl.node_states(shadow, done, t) <= {"down", "paused"}
        and tl.node_states(m.via, m.t_send, t) == {"up"}
        and len(tl.database_ids(m.via, m.t_send, t)) == 1
    )


def _diverged(
    j: Judge, m: Sent, snap: Snapshot, shadow: str, interval: float, passed: float, *, kept: bool
) -> None:
    when = j.when(snap.t)
    name = f"ShadowMessageAutoDiscardInterval ({seconds(interval)})"
    if kept:
        expected = (
            f"{m.via} keeps the discard event of {m.ref} (delivered; {shadow}, out of "
            f"service, never asked for it) until {name} has passed; at most "
            f"{seconds(round(passed, 1))} had"
        )
        observed = f"the discard events of {m.via} did not list {m.ref} at {when}"
    else:
        expected = (
            f"{m.via} deletes the discard event of {m.ref} that {shadow} (out of service) "
            f"never asked for once {name} has passed, within {seconds(sweep(interval))} more "
            f"of its clock; at least {seconds(round(passed, 1))} had"
        )
        observed = f"the discard events of {m.via} still listed {m.ref} at {when}"
    j.diverged("DI-6", expected, observed, snap.t)
