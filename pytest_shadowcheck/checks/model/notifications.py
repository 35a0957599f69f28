"""Discard notifications across a restart of the primary (DI-5): they are kept on disk,
so a primary back on the same queue database still hands them out, and the shadow
copy of a message delivered before the restart leaves the shadow queue after it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_shadowcheck.checks.model.state import seconds

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.model.replay import Sent
    from pytest_shadowcheck.checks.model.rules import Judge

__all__ = ["restart_discard_rule"]

#: what ends a primary's process but keeps its queue database (a wipe makes a new one;
#: a power cut may lose what was not yet on disk)
_RESTARTS = ("kill", "restart")


def _reached_from(j: Judge, shadow: str, primary: str, since: float, until: float) -> float | None:
    """The first moment from ``since`` on after which ``shadow`` is surely up and able to
    reach ``primary`` until ``until``, or None."""
    moments = {since} | {
        c.hi
        for changes in (*j.tl.nodes.values(), *j.tl.links.values())
        for c in changes
        if since < c.hi < until
    }
    for t in sorted(moments):
        if j.tl.node_states(shadow, t, until) == {"up"} and j.tl.reachable(
            shadow, primary, t, until
        ) == {True}:
            return t
    return None


def restart_discard_rule(j: Judge, m: Sent) -> None:
    """DI-5: the primary restarted on its queue database after delivering ``m`` still
    hands out its discard notification: once the shadow can reach it again, the copy
    leaves the shadow queue within ShadowHeartbeatFrequency (and the slack)."""
    done = m.fully_delivered_at()
    if done is None or j.redundant(m) != {True} or j.tl.scenario.topology.clock == "virtual":
        return
    if any(d.by != m.via for d in m.deliveries):
        return  # promoted: the shadow delivered it itself
    last = max(d.t for d in m.deliveries)
    # a restart the slack after the last delivery: the primary had noted it on disk
    downs = [
        s
        for s in j.tl.steps
        if s.step.kind in _RESTARTS and s.step.arg.node == m.via and s.t >= last + j.slack
    ]
    if not downs:
        return
    first = downs[0]
    back = min((t for t in j.tl.returns.get(m.via, []) if t >= first.t), default=None)
    if back is None:
        return
    shadows = j.candidates(m.via, m.t_send, m.t_reply or m.t_send)
    for snap in j.obs.snapshots:
        if snap.queue != "shadow" or snap.node not in shadows or snap.t <= back:
            continue
        # a new or damaged queue database, or a copy resubmitted anew: not this rule's
        lost = any(
            done <= s.t <= snap.t
            and (
                s.step.kind == "resubmit"
                or (s.step.kind in ("wipe", "power_cut") and s.step.arg.node == m.via)
            )
            for s in j.tl.steps
        )
        if lost or len(j.tl.database_ids(m.via, done, snap.t)) > 1:
            return
        # the longest heartbeat that may be running since the send: whichever the shadow
        # was waiting out when an admin changed it, it asks within that (with only the one
        # value accepted, a look after a live change decided nothing, and a drill that
        # changed the heartbeat left its first look alone to judge - INCONCLUSIVE once
        # the harness's lateness widened that look's window past it, CI session 45)
        beats = j.tl.wait_range(snap.node, "ShadowHeartbeatFrequency", m.t_send, snap.t)
        if beats is None:
            continue
        beat = beats[1]
        since = _reached_from(j, snap.node, m.via, back + j.slack, snap.t)
        if since is None or snap.t < since + beat + j.slack:
            continue
        if not j.copy_kept(m, snap.node, snap.t):
            continue
        # told before the restart (a whole heartbeat with both up and linked): DI-2's case
        before = j.tl.reachable(snap.node, m.via, done, first.t) == {True} and (
            j.tl.node_states(snap.node, done, first.t) == {"up"}
            and first.t >= done + beat + j.slack
        )
        behaviour = "DI-2" if before else "DI-5"
        j.exercised[behaviour] += 1
        if m.ref not in snap.refs:
            continue
        j.diverged(
            behaviour,
            f"{m.ref} was delivered by {m.via} at {j.when(done)}, before {m.via} was "
            f"restarted on the same queue database (back at {j.when(back)}); {m.via} still "
            f"hands {snap.node} the discard notification, and {snap.node}, able to reach it "
            f"from {j.when(since)}, moves its copy out of its shadow queue within "
            f"ShadowHeartbeatFrequency ({seconds(beat)}), by {j.when(since + beat + j.slack)}",
            f"the shadow queue of {snap.node} still held {m.ref} at {j.when(snap.t)}",
            snap.t,
        )
        return
