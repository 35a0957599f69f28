"""PR-5: a shadow copy with no route of its own waits for one - judged on the queues of
a shadow that has no next hop for any of the message's recipients.

Such a copy stays in the shadow queue and is not resubmitted (promoted into the active
queue) until a route exists: seen in that node's active queue, it was promoted without
one. Decided while no ``route`` step or resubmission could have given it a way out.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_shadowcheck.checks.model.state import seconds

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.model.replay import Sent
    from pytest_shadowcheck.checks.model.rules import Judge

__all__ = ["no_route_rule", "routeless"]


def routeless(j: Judge, node: str, m: Sent) -> bool:
    """Whether ``node`` has no next hop for any recipient of ``m`` (the topology's)."""
    hops = j.tl.scenario.topology.hops_of(node)
    return bool(m.to) and all(r.rsplit("@", 1)[-1].lower() not in hops for r in m.to)


def no_route_rule(j: Judge, m: Sent) -> None:
    """PR-5: a copy without a route is not promoted into its shadow's active queue."""
    if not m.accepted or m.t_reply is None or j.redundant(m) != {True}:
        return
    if any(s.step.kind in ("route", "resubmit") for s in j.tl.steps):
        return
    for snap in j.obs.snapshots:
        if snap.t <= m.t_reply or snap.node == m.via or not routeless(j, snap.node, m):
            continue
        if snap.queue == "shadow" and m.ref in snap.refs:
            # a copy held while the primary was surely out of reach past the span
            bounds = j.span_bounds(snap.node, m.t_reply, snap.t)
            down = [
                s.t_next
                for s in j.tl.steps
                if s.step.kind in ("kill", "pause")
                and s.step.arg.node == m.via
                and m.t_reply <= s.t < snap.t
            ]
            if (
                bounds
                and down
                and snap.t - down[0] >= bounds[1] + j.slack
                and j.tl.reachable(snap.node, m.via, down[0], snap.t) == {False}
            ):
                j.exercised["PR-5"] += 1
            continue
        if snap.queue != "active" or m.ref not in snap.refs:
            continue
        j.exercised["PR-5"] += 1
        span = j.tl.one_setting(snap.node, "ShadowResubmitTimeSpan", m.t_send, snap.t)
        after = f" after ShadowResubmitTimeSpan ({seconds(span)})" if span else ""
        j.diverged(
            "PR-5",
            f"{snap.node} has no route for {', '.join(m.to)}: its shadow copy of {m.ref} "
            f"stays in its shadow queue{after}, not resubmitted, until a route exists",
            f"the active queue of {snap.node} held {m.ref} at {j.when(snap.t)}",
            snap.t,
        )
        return
