"""Rules about where an accepted message is and when it reaches its next hop: the shadow
copy (CR-1, CR-6), promotion (PR-1, PR-2, PR-3), discard (DI-2), Safety Net (SN-1..3),
and what may be lost or doubled (PR-4). Every window closing at T is judged at T + slack.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_shadowcheck.checks.model.expiry import expiry_governs
from pytest_shadowcheck.checks.model.rules import DELIVERY_ALLOWANCE
from pytest_shadowcheck.checks.model.scripted_refusals import may_be_refused
from pytest_shadowcheck.checks.model.state import seconds

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.model.replay import Delivery, Sent, Snapshot
    from pytest_shadowcheck.checks.model.rules import Judge

#: how often a transport may sweep its Safety Net for expired entries (the suite's
#: scenarios allow one sweep a minute, as the reference does)
SWEEP = 60.0

__all__ = [
    "SWEEP",
    "copy_rule",
    "discard_rule",
    "duplicate_rule",
    "loss_rule",
    "promotion_rule",
    "restart_rule",
    "safety_net_rule",
    "wipe_rule",
]


def _shown(snap: Snapshot) -> str:
    if not snap.shown:
        return "it was empty"
    more = f" and {len(snap.shown) - 5} more" if len(snap.shown) > 5 else ""
    return "it held " + ", ".join(snap.shown[:5]) + more


def _delivered_before(m: Sent, t: float) -> bool:
    return any(d.t <= t for d in m.deliveries)


def copy_rule(j: Judge, m: Sent) -> None:
    """CR-1: an accepted message has a copy in a shadow queue from its 250 on, until its
    delivery is discarded; CR-6: none when redundancy is off."""
    if may_be_refused(j, m):
        return  # CR-10: its fate may be a DSN
    if not m.accepted or m.t_reply is None:
        return
    redundant = j.redundant(m)
    shadows = j.candidates(m.via, m.t_send, m.t_reply)
    looks = [s for s in j.obs.snapshots if s.queue == "shadow" and s.t > m.t_reply]
    if redundant == {False} and j.tl.setting(
        m.via, "ShadowRedundancyEnabled", m.t_send, m.t_reply
    ) == {False}:
        for snap in looks:
            j.exercised["CR-6"] += 1
            if m.ref in snap.refs:
                j.diverged(
                    "CR-6",
                    f"no shadow copy of {m.ref}: ShadowRedundancyEnabled was false when "
                    f"{m.via} accepted it",
                    f"the shadow queue of {snap.node} held {m.ref} at {j.when(snap.t)}",
                    snap.t,
                )
                return
        return
    if redundant != {True} or not shadows:
        return
    missed: dict[str, Snapshot] = {}
    for snap in looks:
        if snap.node not in shadows:
            continue
        if m.ref in snap.refs:
            j.exercised["CR-1"] += 1
            return
        quiet = not j.tl.changed(m.t_send, snap.t, {m.via, *shadows}, hops=False)
        if not quiet or _delivered_before(m, snap.t + j.slack):
            break  # from here the copy may rightly have moved
        j.exercised["CR-1"] += 1
        missed.setdefault(snap.node, snap)
        if set(missed) == shadows:
            where = " and ".join(f"{n} ({_shown(s)})" for n, s in sorted(missed.items()))
            j.diverged(
                "CR-1",
                f"a shadow copy of {m.ref} in the shadow queue of {' or '.join(sorted(shadows))} "
                f"from {m.via}'s 250 at {j.when(m.t_reply)} on, while it is not yet delivered",
                f"no shadow queue held it when the harness looked: {where}",
                snap.t,
            )
            return


def duplicate_rule(j: Judge, m: Sent) -> None:
    """Exactly once per recipient, unless something let two copies go (PR-1 promotion
    after an outage, PR-3 a primary back with its queue, a delivery cut mid-way)."""
    if not j.sink_of(m):
        return  # relayed through another node: its path is not modelled
    for rcpt in m.to:
        got = [d for d in m.deliveries if rcpt.lower() in d.recipients]
        if len(got) < 2:
            continue
        second = got[1]
        nodes = {m.via, *j.candidates(m.via, m.t_send, second.t)}
        if j.tl.changed(m.t_send - j.slack, second.t, nodes) or _resubmitted(j, second.t):
            if any(s.step.kind == "restart" and s.t < second.t for s in j.tl.steps):
                j.exercised["PR-3"] += 1
            if _twice_by_one_shadow(j, m, rcpt, got):
                return
            continue
        j.exercised["PR-1"] += 1
        by = ", ".join(f"{d.by} at {j.when(d.t)}" for d in got)
        j.diverged(
            "PR-1",
            f"{rcpt} gets {m.ref} once: nothing stopped {m.via} from reaching its shadow or "
            f"its next hop, so no shadow had cause to promote its copy",
            f"{rcpt} got {m.ref} {len(got)} times: by {by}",
            second.t,
        )
        return


def _twice_by_one_shadow(j: Judge, m: Sent, rcpt: str, got: list[Delivery]) -> bool:
    """PR-1: a shadow promotes its copy once. Two deliveries to ``rcpt`` by one node
    other than the primary, which held one copy (one copy's content on the wire to it),
    with nothing between them to make it deliver again (it stayed up on one queue
    database, its link to the next hop healthy, the next hop accepting, no resubmission),
    is a copy promoted twice. True when it diverged."""
    if _resubmitted(j, got[-1].t):
        return False
    for i, first in enumerate(got):
        for again in got[i + 1 :]:
            by = first.by
            if again.by != by or by == m.via or again.sink != first.sink:
                continue
            copies = [c for c in j.obs.contents if c[3] == m.ref and c[1] == f"{m.via}->{by}"]
            if len(copies) != 1:
                continue  # two copies made (a lost acknowledgement): each may be promoted
            a, b = first.t - j.slack, again.t
            if j.tl.node_states(by, a, b) != {"up"} or len(j.tl.database_ids(by, a, b)) > 1:
                continue
            if j.tl.link_states(f"{by}->{first.sink}", a, b) != {"ok"}:
                continue
            if j.tl.sink_states(first.sink, a, b) != {"accepting"}:
                continue
            if any(
                s.step.kind in ("kill", "power_cut", "restart", "wipe")
                and s.step.arg.node == by
                and a <= s.t <= b
                for s in j.tl.steps
            ):
                continue
            j.exercised["PR-1"] += 1
            j.diverged(
                "PR-1",
                f"{by}, promoting its shadow copy of {m.ref}, delivers it to {rcpt} once: it "
                f"held one copy, and nothing made it deliver again",
                f"{rcpt} got {m.ref} from {by} at {j.when(first.t)} and again at "
                f"{j.when(again.t)}, {by} up throughout, its link to {first.sink} healthy",
                again.t,
            )
            return True
    return False


def _resubmitted(j: Judge, t: float) -> bool:
    return any(s.step.kind == "resubmit" and s.t <= t for s in j.tl.steps)


def _since_resubmission(j: Judge, m: Sent, t: float) -> float:
    """From when a copy resubmitted before ``t`` is surely out of the way: the last
    request's end plus a delivery, or its redelivery, whichever is later."""
    last = max(s.t_next for s in j.tl.steps if s.step.kind == "resubmit" and s.t <= t)
    again = [d.t for d in m.deliveries if last <= d.t <= t]
    return max([last + j.slack + DELIVERY_ALLOWANCE, *again])


def promotion_rule(j: Judge, m: Sent) -> None:
    """PR-1: a shadow promotes only after it could not reach the primary for
    ShadowResubmitTimeSpan, and then does; the promoted copy goes to the next hop."""
    if may_be_refused(j, m):
        return  # CR-10: its fate may be a DSN
    if j.redundant(m) != {True} or m.t_reply is None or not j.sink_of(m):
        return  # (a message relayed through another node is delivered by that node)
    shadows = j.holders(m)
    early = [d for d in m.deliveries if d.by != m.via and d.by in shadows]
    if early:
        _not_early(j, m, early[0].t, early[0].by)
    for applied in j.tl.steps:
        if applied.step.kind not in _OUTAGES or applied.step.arg.node != m.via:
            continue
        if applied.t < m.t_reply or _delivered_before(m, applied.t):
            continue
        _promoted_in_time(j, m, applied.t, applied.t_next, shadows, _OUTAGES[applied.step.kind])


#: the node faults after which a shadow cannot open a session to the primary, and the
#: state the primary is in meanwhile
_OUTAGES = {"kill": "down", "power_cut": "down", "pause": "paused"}


def _not_early(j: Judge, m: Sent, t: float, by: str) -> None:
    """A delivery by a shadow needs an outage of the primary of about the span before it
    (or a new queue database, or a resubmission)."""
    bounds = j.span_bounds(by, m.t_send, t)
    if bounds is None or j.tl.scenario.topology.clock == "virtual" or _resubmitted(j, t):
        return
    if len(j.tl.database_ids(m.via, m.t_send, t)) > 1:
        return  # PR-2: a new database is promoted at once
    least = bounds[0] - j.slack
    # the longest stretch before t in which the shadow may have failed to reach the primary
    start, longest = None, 0.0
    probe = m.t_send
    step = 0.05
    while probe <= t:
        lost = False in j.tl.reachable(by, m.via, probe, probe + step)
        if lost and start is None:
            start = probe
        if not lost:
            start = None
        if start is not None:
            longest = max(longest, probe + step - start)
        probe += step
    j.exercised["PR-1"] += 1
    if longest >= least:
        return
    j.diverged(
        "PR-1",
        f"{by} keeps its shadow copy of {m.ref} until it has failed to reach {m.via} for "
        f"ShadowResubmitTimeSpan: {least:.1f}s at the least, granting a heartbeat and "
        f"{j.slack:.1f}s for a loaded machine",
        f"{by} delivered {m.ref} at {j.when(t)}, though {m.via} was out of its reach for "
        f"{longest:.1f}s at most before",
        t,
    )


def _promoted_in_time(
    j: Judge, m: Sent, lo: float, hi: float, shadows: set[str], outage: str
) -> None:
    bounds = j.span_bounds(next(iter(shadows)), lo, hi) if shadows else None
    if bounds is None or j.tl.scenario.topology.clock == "virtual" or len(shadows) != 1:
        return
    (shadow,) = shadows
    deadline = hi + bounds[1] + j.slack + DELIVERY_ALLOWANCE
    if outage == "paused":
        # a frozen primary still takes the connection: the heartbeat fails only when the
        # shadow gives up waiting for its greeting (TO-4)
        give_up = j.tl.setting(shadow, "SendConnectionInactivityTimeout", lo, deadline)
        if not give_up or not all(isinstance(v, int | float) for v in give_up):
            return
        deadline += float(max(give_up))
    if deadline > j.tl.end:
        return  # the run ended before the window closed
    if j.tl.node_states(m.via, hi, deadline) != {outage}:
        return  # back before the window closed: PR-3 / PR-2 territory
    if not j.can_deliver(shadow, m, lo, deadline) or j.span_bounds(shadow, lo, deadline) != bounds:
        return
    if not j.copy_kept(m, shadow, deadline):
        return
    j.exercised["PR-1"] += 1
    got = m.first_delivery(lo)
    if got is not None and got.t <= deadline:
        return
    seen = f"it arrived at {j.when(got.t)} (by {got.by})" if got else "it never arrived"
    j.missed_deadline(
        "PR-1",
        f"{m.via} {'went down' if outage == 'down' else 'froze'} at {j.when(lo)} holding "
        f"{m.ref}; {shadow}, holding its shadow copy, promotes it within "
        f"ShadowResubmitTimeSpan + ShadowHeartbeatFrequency ({seconds(bounds[1])}"
        + (" and the heartbeat's SendConnectionInactivityTimeout" if outage == "paused" else "")
        + f") and delivers it by {j.when(deadline)}",
        f"{m.ref} was not delivered by then: {seen}",
        deadline,
        got.t if got else None,
    )


def wipe_rule(j: Judge, m: Sent) -> None:
    """PR-2: the primary back on a new queue database: its shadow promotes at once and
    the message goes out within ShadowHeartbeatFrequency of the primary's return."""
    if may_be_refused(j, m):
        return  # CR-10: its fate may be a DSN
    if j.redundant(m) != {True} or m.t_reply is None:
        return
    shadows = j.holders(m)
    for applied in j.tl.steps:
        if applied.step.kind != "wipe" or applied.step.arg.node != m.via:
            continue
        if applied.t < m.t_reply or _delivered_before(m, applied.t) or len(shadows) != 1:
            continue
        (shadow,) = shadows
        back = min((t for t in j.tl.returns.get(m.via, []) if t >= applied.t), default=None)
        beats = j.tl.setting(shadow, "ShadowHeartbeatFrequency", applied.t, j.tl.end)
        if back is None or not all(isinstance(b, int | float) for b in beats):
            continue
        deadline = back + max(beats) + j.slack + DELIVERY_ALLOWANCE
        if deadline > j.tl.end or j.tl.scenario.topology.clock == "virtual":
            continue
        if j.tl.reachable(shadow, m.via, back + j.slack, deadline) != {True}:
            continue
        # a copy taken before an admin switched shadow redundancy off is still promoted
        # (CR-6 stops new copies, not the promotion of those made: scenarios/outages.yaml
        # pr2_copies_made_before_redundancy_was_disabled_are_promoted)
        if not j.can_deliver(shadow, m, applied.t, deadline) or not j.copy_kept(
            m, shadow, deadline, while_switched_off=True
        ):
            continue
        j.exercised["PR-2"] += 1
        got = m.first_delivery(applied.t)
        if got is not None and got.t <= deadline:
            continue
        seen = f"it arrived at {j.when(got.t)} (by {got.by})" if got else "it never arrived"
        j.missed_deadline(
            "PR-2",
            f"{m.via} came back at {j.when(back)} on a new queue database; {shadow}, holding "
            f"the shadow copy of {m.ref}, promotes it at once and it is delivered within "
            f"ShadowHeartbeatFrequency ({seconds(max(beats))}), by {j.when(deadline)}",
            f"{m.ref} was not delivered by then: {seen}",
            deadline,
            got.t if got else None,
        )
        return


def loss_rule(j: Judge, m: Sent) -> None:
    """No accepted message is lost, unless its primary and every copy failed together
    (PR-4: outside the guarantee). Judged on the harness's last look at every node."""
    if not m.accepted or m.t_reply is None or m.deliveries:
        return
    topo = j.tl.scenario.topology
    last: dict[tuple[str, str], Snapshot] = {}
    for snap in j.obs.snapshots:
        last[(snap.node, snap.queue)] = snap
    needed = [(n, q) for n in topo.nodes for q in ("active", "shadow")]
    if not all(k in last for k in needed):
        return
    first = min(last[k].t for k in needed)
    if first <= m.t_reply or any(
        j.tl.node_states(n, first, j.tl.end) != {"up"} for n in topo.nodes
    ):
        return
    held = [k for k in needed if m.ref in last[k].refs]
    if held:
        _kept_after_restart(j, m, {n for n, q in held if q == "active"}, first)
        return
    if any(st.step.kind == "sink" and st.t <= first for st in j.tl.steps):
        return  # a next hop told to refuse may have bounced it
    failed = {
        s.step.arg.node
        for s in j.tl.steps
        if s.step.kind in ("wipe", "power_cut") and s.t >= m.t_send
    }
    shadows = j.candidates(m.via, m.t_send, m.t_reply)
    if m.via in failed and (j.redundant(m) != {True} or shadows & failed):
        j.exercised["PR-4"] += 1
        return  # both copies gone: an allowed loss
    behaviour = "PR-2" if m.via in failed else "PR-4"
    j.exercised[behaviour] += 1
    j.diverged(
        behaviour,
        f"{m.ref}, accepted by {m.via} at {j.when(m.t_reply)}, is delivered or still queued: "
        + (
            f"{m.via}'s queue database was lost, but the shadow copy on "
            f"{' or '.join(sorted(shadows))} survived to be promoted"
            if behaviour == "PR-2"
            else "a message may be lost only when its primary and its shadow fail together"
        ),
        f"it was never delivered, and at the harness's last look ({j.when(first)}) no "
        f"active or shadow queue of any node held it",
        first,
    )


def discard_rule(j: Judge, m: Sent) -> None:
    """DI-1/DI-2/DI-4: once delivered, the shadow learns of it within a heartbeat and its
    copy leaves the shadow queue."""
    done = m.fully_delivered_at()
    if done is None or j.redundant(m) != {True} or j.tl.scenario.topology.clock == "virtual":
        return
    if any(d.by != m.via for d in m.deliveries):
        return  # promoted: the shadow delivered it itself
    for snap in j.obs.snapshots:
        if snap.queue != "shadow" or snap.t <= done or snap.node == m.via:
            continue
        if snap.node not in j.candidates(m.via, m.t_send, m.t_reply or m.t_send):
            continue
        # the longest heartbeat that may govern the shadow's asking after the delivery:
        # a live change may or may not cut short a wait already begun (Timeline.wait_range)
        beats = j.tl.wait_range(snap.node, "ShadowHeartbeatFrequency", done, snap.t)
        if beats is None or snap.t < done + beats[1] + j.slack:
            continue
        beat = beats[1]
        # a resubmitted copy is queued, copied and delivered anew: judge it a heartbeat on
        if _resubmitted(j, snap.t) and snap.t < _since_resubmission(j, m, snap.t) + beat + j.slack:
            continue
        if j.tl.reachable(snap.node, m.via, done, snap.t) != {True}:
            continue
        if j.tl.node_states(snap.node, done, snap.t) != {"up"}:
            continue
        if not j.copy_kept(m, snap.node, snap.t):
            continue
        if _copy_never_acknowledged(j, m, snap.node):
            continue  # the primary never learnt this node holds a copy: no discard owed
        j.exercised["DI-2"] += 1
        if m.ref not in snap.refs:
            continue
        j.diverged(
            "DI-2",
            f"{m.ref} was delivered by {m.via} at {j.when(done)}; {snap.node} asks {m.via} for "
            f"discard status at least every ShadowHeartbeatFrequency ({seconds(beat)}), is "
            f"told, and moves its copy out of its shadow queue by {j.when(done + beat + j.slack)}",
            f"the shadow queue of {snap.node} still held {m.ref} at {j.when(snap.t)}",
            snap.t,
        )
        return


def _copy_never_acknowledged(j: Judge, m: Sent, shadow: str) -> bool:
    """Whether every copy of ``m`` the primary sent ``shadow`` went unanswered: the session
    ended after the copy's content with no 250 (a reply lost, a link cut after the final
    dot). The primary then counts no copy there and owes that node no discard
    notification; the copy it holds is an orphan, which ShadowMessageAutoDiscardInterval
    ends (DI-6). Found by exploration (seed 3003: a cut after the copy's final dot)."""
    link = f"{m.via}->{shadow}"
    sent = [(t, conn) for t, at, conn, ref in j.obs.contents if at == link and ref == m.ref]
    if not sent:
        return False
    for t, conn in sent:
        lines = j.obs.sessions.get((link, conn), [])
        reply = next((text for at, way, text in lines if at >= t and way == "s2c"), None)
        if reply is not None and reply.startswith("250"):
            return False
    return True


def safety_net_rule(j: Judge, m: Sent) -> None:
    """SN-1 / SN-2: a delivered message is kept in the primary's Safety Net and its
    shadow's Shadow Safety Net; SN-3: until SafetyNetHoldTime, then no longer."""
    done = m.fully_delivered_at()
    if done is None or any(d.by != m.via for d in m.deliveries):
        return
    holders = j.holders(m)  # read once: it scans the snapshots and the wire
    for snap in j.obs.snapshots:
        if snap.t <= done + j.slack:
            continue
        heartbeat = 0.0
        if snap.queue == "safetynet_primary" and snap.node == m.via:
            behaviour, after = "SN-1", done + j.slack
        elif (
            snap.queue == "safetynet_shadow"
            and holders == {snap.node}  # of two possible holders, either may have it
            and j.redundant(m) == {True}
        ):
            beats = j.tl.wait_range(snap.node, "ShadowHeartbeatFrequency", done, snap.t)
            if beats is None or j.tl.reachable(snap.node, m.via, done, snap.t) != {True}:
                continue
            beat = beats[1]  # the longest: the entry dates from the heartbeat that told it
            if not j.copy_kept(m, snap.node, snap.t):
                continue
            if expiry_governs(j, m, snap.node, done):
                # the copy may have expired before the discard could move it (SN-4):
                # then there is nothing to keep (seed 2027: a week-long cut, then a
                # look at the Shadow Safety Net)
                continue
            # the shadow learns of the delivery at its next heartbeat, on the nodes' clock:
            # a virtual one must have moved a heartbeat's worth (seed 11, scenario 31: 15 s
            # of real time without an advance, and rightly no query)
            if j.tl.timer_elapsed(done, snap.t - j.slack)[0] < beat:
                continue
            behaviour, after = "SN-2", done + beat + j.slack
            heartbeat = float(beat)
        else:
            continue
        if snap.t < after or len(j.tl.database_ids(snap.node, done, snap.t)) > 1:
            continue
        holds = j.tl.setting_range(snap.node, "SafetyNetHoldTime", done, snap.t)
        if holds is None:
            continue
        # changed live: kept while the shortest hold in force has not passed, gone once
        # the longest has (the catalogue does not say which an entry already held keeps)
        hold, longest_hold = holds
        # a resubmitted copy may enter the Safety Net again when it is delivered again
        # (the catalogue does not say): it must stay for SafetyNetHoldTime from its first
        # delivery, and may stay for as long from its last (seed 11, scenario 27: the
        # reference keeps no resubmitted copy)
        latest = max(d.t for d in m.deliveries if d.t <= snap.t - j.slack)
        if behaviour == "SN-2":
            # the shadow's entry dates from the heartbeat that told it
            latest = j.tl.timer_fired_after(latest, heartbeat)
        least, _ = j.tl.timer_elapsed(latest, snap.t - j.slack)
        # the most the node's clock can have moved by the look counts every advance
        # begun before it: the node may have applied one at once (seed 9009, scenario
        # 95: a day's advance 2.7 s before the look, a 3.1 s slack on a loaded machine)
        _, most = j.tl.timer_elapsed(done, snap.t)
        if _resubmitted(j, snap.t):
            # the copy may have entered again later, never earlier: a shadow's entry
            # still dates from the heartbeat that told it (seed 2028, scenario 295: a
            # resubmission before the send, the heartbeat 570 s of clock later)
            since = _since_resubmission(j, m, snap.t)
            if behaviour == "SN-2":
                since = j.tl.timer_fired_after(since, heartbeat)
            least = min(least, j.tl.timer_elapsed(since, snap.t - j.slack)[0])
        if most < hold:
            j.exercised[behaviour] += 1
            if m.ref not in snap.refs:
                where = "Safety Net" if behaviour == "SN-1" else "Shadow Safety Net"
                j.diverged(
                    behaviour,
                    f"{m.ref}, delivered at {j.when(done)}, stays in the {where} of {snap.node} "
                    f"for SafetyNetHoldTime ({seconds(hold)})",
                    f"the {where} of {snap.node} did not hold it at {j.when(snap.t)}: "
                    + _shown(snap),
                    snap.t,
                )
                return
        elif least >= longest_hold + SWEEP + j.slack:
            j.exercised["SN-3"] += 1
            if m.ref in snap.refs:
                j.diverged(
                    "SN-3",
                    f"{m.ref} leaves the Safety Net of {snap.node} once SafetyNetHoldTime "
                    f"({seconds(longest_hold)}) has passed since its delivery (one sweep a "
                    f"minute)",
                    f"the nodes' clock had moved {seconds(least)} since, and {snap.node} still "
                    f"held it at {j.when(snap.t)}",
                    snap.t,
                )
                return


def _kept_after_restart(j: Judge, m: Sent, active: set[str], first: float) -> None:
    """PR-3: a primary back on its own queue database still has the message to deliver:
    when it is held only as a shadow copy while its primary is up, it is lost to the
    primary and no shadow has cause to promote it."""
    if active or m.t_reply is None:
        return
    restarts = [s for s in j.tl.steps if s.step.kind == "restart" and s.step.arg.node == m.via]
    failed = any(
        s.step.kind in ("wipe", "power_cut") and s.step.arg.node == m.via and s.t >= m.t_send
        for s in j.tl.steps
    )
    if failed or not any(s.t > m.t_reply for s in restarts):
        return
    j.exercised["PR-3"] += 1
    j.diverged(
        "PR-3",
        f"{m.via}, back on the same queue database, still holds {m.ref} (accepted at "
        f"{j.when(m.t_reply)}, not yet delivered) and delivers it",
        f"at the harness's last look ({j.when(first)}) {m.via}'s active queue did not hold it; "
        f"only a shadow copy was left, which no shadow promotes while {m.via} is up",
        first,
    )


def restart_rule(j: Judge, m: Sent) -> None:
    """PR-3: a primary back on the same queue database delivers its own queue: once it
    can reach the next hop again, the message goes out within a retry interval."""
    if may_be_refused(j, m):
        return  # CR-10: its fate may be a DSN
    if not m.accepted or m.t_reply is None:
        return
    for applied in j.tl.steps:
        if applied.step.kind != "restart" or applied.step.arg.node != m.via:
            continue
        if applied.t < m.t_reply or _delivered_before(m, applied.t):
            continue
        back = min((t for t in j.tl.returns.get(m.via, []) if t >= applied.t), default=None)
        retry = j.tl.setting(m.via, "TransientFailureRetryInterval", applied.t, j.tl.end)
        if back is None or not all(isinstance(r, int | float) for r in retry):
            continue
        window = max(retry) + j.slack + DELIVERY_ALLOWANCE
        # the first moment from which the primary surely could deliver it
        moments = sorted(
            {back + j.slack}
            | {
                c.hi
                for changes in (*j.tl.links.values(), *j.tl.sinks.values(), *j.tl.nodes.values())
                for c in changes
                if c.hi > back
            }
        )
        start = next(
            (
                t
                for t in moments
                if t + window <= j.tl.end and j.can_deliver(m.via, m, t, t + window)
            ),
            None,
        )
        # the queue database that took the message, from its 250 to the deadline: a wipe
        # before this restart left the primary nothing of it to deliver
        if start is None or len(j.tl.database_ids(m.via, m.t_reply, start + window)) > 1:
            continue
        deadline = start + window
        if j.tl.timer_elapsed(start, deadline)[0] < max(retry):
            # a virtual clock that stood still: the node's retry timer never ran out
            continue
        j.exercised["PR-3"] += 1
        got = m.first_delivery(applied.t)
        if got is not None and got.t <= deadline:
            continue
        seen = f"it arrived at {j.when(got.t)} (by {got.by})" if got else "it never arrived"
        j.missed_deadline(
            "PR-3",
            f"{m.via} came back at {j.when(back)} on the same queue database holding {m.ref}; "
            f"from {j.when(start)} it could reach the next hop, so it delivers its own queue "
            f"within TransientFailureRetryInterval ({seconds(max(retry))}), by {j.when(deadline)}",
            f"{m.ref} was not delivered by then: {seen}",
            deadline,
            got.t if got else None,
        )
        return
