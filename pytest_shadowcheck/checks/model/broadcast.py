"""Rules about the Shadow Safety Nets answering a resubmission request (SN-7, SN-8).

SN-7: a request whose primary's Safety Net does not answer (the primary down) waits
PrimarySafetyNetUnavailableTimeout (12 h) on the nodes' clock, then is broadcast to every
node, and a Shadow Safety Net holding the message resubmits it; nothing comes from a
Shadow Safety Net before. The wait survives a restart of the coordinating node.

SN-8: a primary whose queue database was created after the window's start answers for
the part it covers and broadcasts the part before its creation: a message it processed on
its old database comes back from a Shadow Safety Net at once; one it processed on the new
database comes back from itself, never from a shadow.

Only judged on a virtual clock (hours must pass), for a message the harness SAW in a
Shadow Safety Net (a ``snapshot`` of ``safetynet_shadow``) before the request: that a
shadow kept it is then an observation, not a guess, and its shadow queue no longer holds
a copy it could promote (PR-1). The shadow's entry is stamped when the shadow learnt of the
delivery, some time between the delivery and that snapshot: the rule decides only when the
whole span is inside (or outside) the window.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from pytest_shadowcheck.checks.model.resubmission import (
    _clock,
    _crossed,
    _database,
    _stamp,
)
from pytest_shadowcheck.checks.model.resubmission import (
    _window as _window_overlapping,
)
from pytest_shadowcheck.checks.model.rules import DELIVERY_ALLOWANCE
from pytest_shadowcheck.checks.model.state import seconds

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.model.replay import Delivery, Sent
    from pytest_shadowcheck.checks.model.rules import Judge
    from pytest_shadowcheck.checks.model.state import AppliedStep

__all__ = ["broadcast_rule"]

#: the catalogue's PrimarySafetyNetUnavailableTimeout when a scenario does not set it
UNAVAILABLE_DEFAULT = 12 * 3600.0


@dataclass(frozen=True)
class _Held:
    """A shadow seen holding the message in its Shadow Safety Net."""

    node: str
    #: the harness's look that saw it
    seen: float
    #: the nodes' clock when the entry may have been stamped: (least, most)
    stamped: tuple[float, float]


def _lost(j: Judge, node: str, since: float, until: float) -> bool:
    """Whether ``node``'s queue database may have gone in ``[since, until]``."""
    return any(
        s.step.kind in ("wipe", "power_cut") and s.step.arg.node == node and since <= s.t <= until
        for s in j.tl.steps
    )


def _held(j: Judge, m: Sent, first: Delivery, before: float) -> list[_Held]:
    """The shadows the harness saw holding ``m`` in their Shadow Safety Net between its
    delivery by the primary and ``before``."""
    out: dict[str, _Held] = {}
    for snap in j.obs.snapshots:
        if snap.queue != "safetynet_shadow" or snap.node == m.via or m.ref not in snap.refs:
            continue
        if first.t < snap.t < before and snap.node not in out:
            out[snap.node] = _Held(snap.node, snap.t, _clock(j, first.t, snap.t))
    return list(out.values())


def _window(j: Judge, applied: AppliedStep) -> tuple[tuple[float, float], tuple[float, float]]:
    """The request's window (start least/most, end least/most). The request is made (its
    ``now`` read) before the next step begins: an advance that is the next step is not
    in it."""
    narrowed = replace(applied, t_next=max(applied.t, applied.t_next - 1e-6))
    return _window_overlapping(j, narrowed)


def _kept(j: Judge, h: _Held, since: float, until: float) -> bool:
    """Whether ``h``'s entry is surely still within SafetyNetHoldTime at ``until``."""
    holds = j.tl.setting_range(h.node, "SafetyNetHoldTime", since, until)
    return holds is not None and h.stamped[0] + holds[0] > _clock(j, until, until)[1]


def _inside(j: Judge, applied: AppliedStep, stamped: tuple[float, float]) -> bool | None:
    (s_lo, s_hi), (e_lo, e_hi) = _window(j, applied)
    if stamped[0] >= s_hi and stamped[1] < e_lo:
        return True
    if stamped[1] < s_lo or stamped[0] >= e_hi:
        return False
    return None


def _reached(j: Judge, since: float, timeout: float, *, surely: bool) -> float | None:
    """The first moment of the run when the virtual clock surely (``surely``) or possibly
    moved ``timeout`` since ``since``; None if it never did."""
    for applied in j.tl.steps:
        if applied.step.kind != "advance" or applied.t < since:
            continue
        least, most = j.tl.virtual_elapsed(since, applied.t_next)
        if surely and least >= timeout:
            return applied.t_next
        if not surely and most >= timeout:
            return applied.t
    return None


def broadcast_rule(j: Judge, m: Sent) -> None:
    """SN-7 and SN-8 for each recipient of ``m`` delivered by its primary."""
    if j.tl.scenario.topology.clock != "virtual" or not m.accepted or not j.sink_of(m):
        return
    requests = [s for s in j.tl.steps if s.step.kind == "resubmit"]
    for rcpt in m.to:
        got = [d for d in m.deliveries if rcpt.lower() in d.recipients]
        if not got or got[0].by != m.via or _crossed(j, m, rcpt):
            continue
        database = _database(j, rcpt)
        for applied in requests:
            if applied.t <= got[0].t or applied.step.arg.database != database:
                continue
            if any(r.t < applied.t and r is not applied and r.t > got[0].t for r in requests):
                break  # an earlier request may have taken it: one request at a time
            later = [r.t for r in requests if r.t > applied.t]
            until = min(later, default=j.tl.end)
            if j.tl.node_states(m.via, applied.t, applied.t_next) == {"down"}:
                _unavailable(j, m, rcpt, applied, got, until)
            else:
                _recreated(j, m, rcpt, applied, got, until)
            break


def _unavailable(
    j: Judge, m: Sent, rcpt: str, applied: AppliedStep, got: list[Delivery], until: float
) -> None:
    """SN-7: the primary is down when the request is made."""
    spec = applied.step.arg
    coordinator = spec.node
    if coordinator == m.via:
        return
    timeouts = j.tl.setting_range(
        coordinator, "PrimarySafetyNetUnavailableTimeout", applied.t, until
    )
    if timeouts is None:
        return
    # changed live: too early before the shortest timeout in force, owed after the longest
    timeout, longest = timeouts
    held = [h for h in _held(j, m, got[0], applied.t) if _inside(j, applied, h.stamped)]
    if not held:
        return
    others = [d for d in got if d.t > applied.t and d.by != m.via and d.t <= until]
    # nothing from a Shadow Safety Net before the 12 hours, while the primary stays down
    possible = _reached(j, applied.t, timeout, surely=False)
    early = [d for d in others if possible is None or d.t < possible]
    if early and j.tl.node_states(m.via, applied.t, early[0].t) == {"down"}:
        j.exercised["SN-7"] += 1
        j.diverged(
            "SN-7",
            f"the request at {j.when(applied.t)} for {spec.database} waits for {m.via}'s "
            f"Primary Safety Net: no Shadow Safety Net resubmits {m.ref} before "
            f"PrimarySafetyNetUnavailableTimeout ({seconds(timeout)}) has passed on the "
            f"nodes' clock",
            f"{rcpt} got {m.ref} again at {j.when(early[0].t)} from {early[0].by}, "
            f"{seconds(j.tl.virtual_elapsed(applied.t, early[0].t)[1])} of the nodes' clock "
            f"after the request",
            early[0].t,
        )
        return
    sure = _reached(j, applied.t, longest, surely=True)
    if sure is None:
        return
    beat = j.tl.setting(coordinator, "ShadowHeartbeatFrequency", applied.t, until)
    if not all(isinstance(v, int | float) for v in beat):
        return
    # the coordinator asks again each heartbeat; a dead primary's refusal, then the
    # broadcast over a session of its own
    deadline = sure + max(beat) + 2 * j.slack + DELIVERY_ALLOWANCE
    if deadline > min(until, j.tl.end) or j.tl.node_states(m.via, applied.t, deadline) != {"down"}:
        return
    if _lost(j, coordinator, applied.t, deadline):
        return
    if j.tl.node_states(coordinator, sure, deadline) != {"up"}:
        return
    able = []
    for h in held:
        if _lost(j, h.node, h.seen, deadline):
            continue
        if not _kept(j, h, got[0].t, deadline):
            continue  # its entry may have expired first (SN-3)
        reach = h.node == coordinator or j.tl.reachable(coordinator, h.node, sure, deadline) == {
            True
        }
        if reach and j.can_deliver(h.node, m, sure, deadline):
            able.append(h.node)
    if not able:
        return
    # a delivery attempt that failed (its next hop's reply came after the node's
    # inactivity timeout: a harness stalled 1 s, seed 9009 scenario 95) is retried after
    # TransientFailureRetryInterval on the nodes' clock, which a virtual one runs only
    # when the harness moves it
    deadline = _after_retries(j, m, able, sure - j.slack, deadline)
    if deadline > min(until, j.tl.end):
        return
    j.exercised["SN-7"] += 1
    # a resubmission once the shortest timeout in force had possibly passed is no early one
    lo = sure - j.slack if possible is None else min(possible, sure - j.slack)
    if any(lo <= d.t <= deadline for d in others):
        return
    j.diverged(
        "SN-7",
        f"{m.via} was down from the request at {j.when(applied.t)} ({spec.database}, made to "
        f"{coordinator}) on; once PrimarySafetyNetUnavailableTimeout ({seconds(longest)}) "
        f"had passed on the nodes' clock (by {j.when(sure)}) the request is broadcast and the "
        f"Shadow Safety Net of {' or '.join(able)} (the harness saw {m.ref} there) resubmits "
        f"it: {rcpt} gets it again by {j.when(deadline)}",
        f"{rcpt} got {m.ref} only from {m.via} at {j.when(got[0].t)}: no Shadow Safety Net "
        f"resubmitted it",
        deadline,
    )


def _after_retries(j: Judge, m: Sent, nodes: list[str], since: float, deadline: float) -> float:
    """``deadline``, or, when one of ``nodes`` tried ``m``'s next hop in ``[since,
    deadline]`` and the session ended without a message taken, the same allowance counted
    from the retry: TransientFailureRetryInterval later on the nodes' clock."""
    failed = [
        t
        for node in nodes
        for sink in j.sink_of(m)
        if (t := _failed_attempt(j, f"{node}->{sink}", since, deadline)) is not None
    ]
    if not failed:
        return deadline
    retries = [j.tl.setting(n, "TransientFailureRetryInterval", since, j.tl.end) for n in nodes]
    values = [r for rs in retries for r in rs]
    if not values or not all(isinstance(r, int | float) for r in values):
        return j.tl.end + 1.0  # the retry cannot be placed: no decision
    retried = j.tl.timer_fired_after(max(failed), float(max(values)))
    return max(deadline, retried + 2 * j.slack + DELIVERY_ALLOWANCE)


def _failed_attempt(j: Judge, link: str, a: float, b: float) -> float | None:
    """When the last session on ``link`` that began in ``[a, b]`` ended without its
    next hop taking a message (no ``250`` after the message's ``DATA``), or None."""
    last = None
    for (at, _conn), lines in j.obs.hop_sessions.items():
        if at != link or not lines or not a <= lines[0][0] <= b:
            continue
        taken = after_data = False
        for _t, direction, text in lines:
            if direction == "c2s":
                after_data = text.strip().upper() == "DATA"
            elif after_data and text.startswith("250"):
                taken = True
        if not taken:
            last = lines[-1][0] if last is None else max(last, lines[-1][0])
    return last


def _recreated(
    j: Judge, m: Sent, rcpt: str, applied: AppliedStep, got: list[Delivery], until: float
) -> None:
    """SN-8: the primary answers, on a queue database created after the message's
    processing (wiped in between), or on the one it processed it on."""
    spec = applied.step.arg
    wipes = [
        s
        for s in j.tl.steps
        if s.step.kind == "wipe" and s.step.arg.node == m.via and s.t < applied.t
    ]
    if len(wipes) != 1 or any(
        s.step.kind in ("kill", "power_cut", "pause", "wipe", "restart")
        and s.step.arg.node == m.via
        and wipes[0].t_next < s.t < until
        for s in j.tl.steps
    ):
        return
    wipe = wipes[0]
    # the new database's creation, on the nodes' clock
    created = _clock(j, wipe.t, wipe.t_next + j.slack)
    (s_lo, s_hi), _ = _window(j, applied)
    if not s_hi < created[0]:
        return  # the window may start after the creation: nothing is broadcast
    held = _held(j, m, got[0], applied.t)
    stamp = [h for h in held if _inside(j, applied, h.stamped)]
    deadline = applied.t_next + 2 * j.slack + DELIVERY_ALLOWANCE
    if deadline > min(until, j.tl.end):
        return
    others = [d for d in got if applied.t < d.t <= until and d.by != m.via]
    if spec.node != m.via and j.tl.reachable(spec.node, m.via, applied.t, applied.t_next) != {True}:
        return
    if j.tl.node_states(m.via, applied.t, deadline) != {"up"}:
        return
    able = [
        h.node
        for h in stamp
        if h.stamped[1] < created[0]
        and not _lost(j, h.node, h.seen, deadline)
        and (h.node == m.via or j.tl.reachable(m.via, h.node, applied.t, deadline) == {True})
        and j.can_deliver(h.node, m, applied.t, deadline)
        and _kept(j, h, got[0].t, deadline)
    ]
    processed = _clock(j, got[0].t, got[0].t + 0.5)
    if got[0].t < wipe.t and processed[1] < created[0] and able:
        # on the old database: only a Shadow Safety Net still has it
        j.exercised["SN-8"] += 1
        if any(d.t <= deadline for d in others):
            return
        j.diverged(
            "SN-8",
            f"{m.via}'s queue database was created anew at {_stamp(created[0])} or later, after "
            f"the window's start ({_stamp(s_lo)}): {m.via} broadcasts the part of the request "
            f"at {j.when(applied.t)} before its creation, and the Shadow Safety Net of "
            f"{' or '.join(able)} (the harness saw {m.ref} there) resubmits {m.ref}: {rcpt} "
            f"gets it again by {j.when(deadline)}",
            f"{rcpt} got {m.ref} only from {m.via} at {j.when(got[0].t)}: nothing resubmitted "
            f"it from a Shadow Safety Net",
            deadline,
        )
        return
    late = [h for h in held if h.stamped[0] > created[1] + j.slack]
    if m.t_send > wipe.t_next and processed[0] > created[1] and late:
        # on the new database: the primary answers for it; a shadow's entry is stamped
        # after the creation, outside the part broadcast. Judged up to the request's
        # deadline (a broadcast answered is resubmitted by then): what happens to the
        # nodes later in the scenario is no excuse (seed 11, scenario 27)
        if j.tl.changed(m.t_send - j.slack, deadline, {m.via, *(h.node for h in held)}):
            return
        j.exercised["SN-8"] += 1
        others = [d for d in others if d.t <= deadline]
        if not others:
            return
        j.diverged(
            "SN-8",
            f"{m.via} processed {m.ref} at {_stamp(processed[0])}, on the queue database it "
            f"created at {_stamp(created[0])} or later: it answers for it itself and "
            f"broadcasts only the part of the window before that creation, which the Shadow "
            f"Safety Net's entry of {m.ref} is not in",
            f"{rcpt} got {m.ref} again at {j.when(others[0].t)} from {others[0].by}",
            others[0].t,
        )
