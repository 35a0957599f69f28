"""Rules about resubmission from Safety Net (the ``resubmit`` step): SN-5 (every message
of the database inside the window is delivered again, once, none outside), SN-12 (never one
that crossed the boundary) and SN-9 (no DSN from a resubmission).

The window is on the nodes' clock and half-open, ``[start, end)``: it takes what was
processed (delivered by its primary) from ``start`` on and before ``end``, so adjacent
windows never resubmit a message twice. When the moment a message was processed is
uncertain against an edge (an advance of the virtual clock just after its delivery, the
harness's and the node's real clocks apart), the rule does not decide for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from pytest_shadowcheck.checks.model.rules import DELIVERY_ALLOWANCE
from pytest_shadowcheck.checks.model.scripted_refusals import partly_refused

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.model.replay import Delivery, Sent
    from pytest_shadowcheck.checks.model.rules import Judge
    from pytest_shadowcheck.checks.model.state import AppliedStep

__all__ = ["VIRTUAL_START", "dsn_rule", "resubmission_rule"]

#: where the harness starts a virtual clock (2026-01-01T00:00:00Z)
VIRTUAL_START = 1767225600.0

#: how long after the sink's acknowledgement the primary may note the message processed
#: (on a virtual clock an advance begun in that time may fall before it)
_PROCESSING = 0.5


def _clock(j: Judge, a: float, b: float) -> tuple[float, float]:
    """What the nodes' clock may have read at some moment of ``[a, b]``: (least, most)."""
    if j.tl.scenario.topology.clock == "virtual":
        least, _ = j.tl.virtual_elapsed(float("-inf"), a)
        _, most = j.tl.virtual_elapsed(float("-inf"), b)
        return VIRTUAL_START + least, VIRTUAL_START + most
    return j.tl.wall0 + a - j.slack, j.tl.wall0 + b + j.slack


def _window(j: Judge, applied: AppliedStep) -> tuple[tuple[float, float], tuple[float, float]]:
    """(start least, start most), (end least, end most) of a resubmit step's window."""
    spec = applied.step.arg
    now = _clock(j, applied.t, applied.t_next)
    start = tuple(spec.start.on(n) for n in now)
    end = tuple(spec.end.on(n) for n in now)
    return (start[0], start[1]), (end[0], end[1])


def _stamp(value: float) -> str:
    import datetime as dt

    return dt.datetime.fromtimestamp(value, dt.UTC).strftime("%Y-%m-%d %H:%M:%S")


def _database(j: Judge, rcpt: str) -> str | None:
    recipients = (j.tl.scenario.topology.directory or {}).get("recipients") or {}
    found = {str(k).lower(): v for k, v in recipients.items()}.get(rcpt.lower())
    return str(found) if found is not None else None


def _crossed(j: Judge, m: Sent, rcpt: str) -> bool:
    """Whether ``rcpt``'s next hop is outside the boundary (SN-12)."""
    hop = j.tl.scenario.topology.hops_of(m.via).get(rcpt.rsplit("@", 1)[-1].lower())
    return hop is not None and hop.kind == "boundary"


def _placed(
    j: Judge, applied: AppliedStep, first: Delivery
) -> tuple[str, tuple[float, float]] | None:
    """Whether the message processed by ``first`` is inside the step's window: ("in" |
    "out", its processed moment least/most), None when it may be either."""
    p = _clock(j, first.t, first.t + _PROCESSING)
    (s_lo, s_hi), (e_lo, e_hi) = _window(j, applied)
    if p[0] >= s_hi and p[1] < e_lo:
        return "in", p
    if p[1] < s_lo or p[0] >= e_hi:
        return "out", p
    return None


def _kept(j: Judge, m: Sent, since: float, until: float) -> bool:
    """Whether the primary surely still has ``m`` in its Safety Net and serves requests
    over ``[since, until]``: up, on the queue database it processed it on, not yet past
    SafetyNetHoldTime."""
    if j.tl.node_states(m.via, since, until) != {"up"}:
        return False
    if partly_refused(j, m):
        return False  # CR-10: a fork failed in part may not be kept whole
    if len(j.tl.database_ids(m.via, m.t_send, until)) > 1:
        return False
    if any(s.step.kind == "power_cut" and s.step.arg.node == m.via for s in j.tl.steps):
        return False
    holds = j.tl.setting_range(m.via, "SafetyNetHoldTime", m.t_send, until)
    if holds is None:
        return False
    _, most = j.tl.timer_elapsed(since, until)
    return most < holds[0]  # surely kept: within the shortest hold in force


def resubmission_rule(j: Judge, m: Sent) -> None:
    """SN-5 / SN-12: after a resubmission request, every Safety Net message of its
    database inside its window reaches its recipients again; none outside it, none that
    crossed the boundary."""
    if not m.accepted or not j.sink_of(m) or any(d.by != m.via for d in m.deliveries):
        return  # promoted or relayed: which Safety Net holds it is not modelled
    requests = [s for s in j.tl.steps if s.step.kind == "resubmit"]
    for rcpt in m.to:
        got = [d for d in m.deliveries if rcpt.lower() in d.recipients]
        if not got:
            continue
        database = _database(j, rcpt)
        for applied in requests:
            if got[0].t < applied.t:
                _owed_again(j, m, rcpt, database, applied, got)
        _not_again(j, m, rcpt, database, requests, got)
        _once_per_request(j, m, rcpt, database, requests, got)


def _owed_again(
    j: Judge, m: Sent, rcpt: str, database: str | None, applied: AppliedStep, got: list[Delivery]
) -> None:
    spec = applied.step.arg
    if database != spec.database:
        return
    placed = _placed(j, applied, got[0])
    if placed is None or placed[0] != "in":
        return
    if _crossed(j, m, rcpt):
        j.exercised["SN-12"] += 1  # inside the request, and owed nothing (judged below)
        return
    deadline = applied.t_next + j.slack + DELIVERY_ALLOWANCE
    if deadline > j.tl.end or not _kept(j, m, got[0].t, deadline):
        return
    if spec.node != m.via and (
        j.tl.node_states(spec.node, applied.t, applied.t_next) != {"up"}
        or j.tl.reachable(spec.node, m.via, applied.t, applied.t_next) != {True}
    ):
        return
    if not j.can_deliver(m.via, m, applied.t, deadline):
        return
    j.exercised["SN-5"] += 1
    if any(applied.t <= d.t <= deadline for d in got):
        return
    (s_lo, _), (_, e_hi) = _window(j, applied)
    j.diverged(
        "SN-5",
        f"the request at {j.when(applied.t)} for {spec.database}, {_stamp(s_lo)} to "
        f"{_stamp(e_hi)}, takes {m.ref} (processed by {m.via} at {_stamp(placed[1][0])}, for "
        f"{rcpt} in {spec.database}): it is delivered to {rcpt} again, by {j.when(deadline)}",
        f"{rcpt} got {m.ref} only once, at {j.when(got[0].t)}: it was not resubmitted",
        deadline,
    )


def _not_again(
    j: Judge,
    m: Sent,
    rcpt: str,
    database: str | None,
    requests: list[AppliedStep],
    got: list[Delivery],
) -> None:
    """A second delivery after a request that surely did not take the message, with
    nothing else that could have sent it twice (an outage, a restart, a promotion)."""
    if len(got) < 2 or not requests:
        return
    again = got[1]
    before = [a for a in requests if got[0].t < a.t <= again.t]
    if not before:
        return
    if j.tl.changed(m.t_send - j.slack, again.t, {m.via, *j.candidates(m.via, m.t_send, again.t)}):
        return
    if j.tl.node_states(m.via, got[0].t, again.t) != {"up"} or any(
        a.t < got[0].t for a in requests
    ):
        return
    reasons: list[tuple[str, str]] = []
    for applied in before:
        spec = applied.step.arg
        if database is None:
            return
        if database != spec.database:
            reasons.append(("SN-5", f"{rcpt} is in {database}, the request at "
                            f"{j.when(applied.t)} named {spec.database}"))  # fmt: skip
            continue
        placed = _placed(j, applied, got[0])
        if placed is None:
            return
        if placed[0] == "out":
            (s_lo, _), (_, e_hi) = _window(j, applied)
            reasons.append(
                (
                    "SN-5",
                    f"{m.via} processed it at {_stamp(placed[1][0])}, outside the window "
                    f"{_stamp(s_lo)} to {_stamp(e_hi)} (its end excluded) of the request at "
                    f"{j.when(applied.t)}",
                )
            )
        elif _crossed(j, m, rcpt):
            reasons.append(("SN-12", f"{rcpt} is outside the boundary: it crossed it"))
        else:
            return  # taken by that request: SN-5 owed it
    behaviour = "SN-12" if any(b == "SN-12" for b, _ in reasons) else "SN-5"
    j.exercised[behaviour] += 1
    j.diverged(
        behaviour,
        f"{rcpt} gets {m.ref} once: no resubmission takes it ("
        + "; ".join(r for _, r in reasons)
        + ")",
        f"{rcpt} got {m.ref} again at {j.when(again.t)} (by {again.by}), after it was "
        f"delivered at {j.when(got[0].t)}",
        again.t,
    )


def _once_per_request(
    j: Judge,
    m: Sent,
    rcpt: str,
    database: str | None,
    requests: list[AppliedStep],
    got: list[Delivery],
) -> None:
    """A request resubmits a message once: more deliveries after the first than requests
    that took it, with nothing else that could send it again, are a request served more
    than once (a coordinator asking its primary again after the primary answered)."""
    if len(got) < 3 or database is None or any(a.t < got[0].t for a in requests):
        return
    last = got[-1]
    if j.tl.node_states(m.via, got[0].t, last.t) != {"up"}:
        return
    if j.tl.changed(m.t_send - j.slack, last.t, {m.via, *j.candidates(m.via, m.t_send, last.t)}):
        return
    taking = 0
    for applied in requests:
        if applied.t > last.t or applied.step.arg.database != database:
            continue
        placed = _placed(j, applied, got[0])
        if placed is None:
            return
        taking += placed[0] == "in"
    if len(got) - 1 <= taking:
        return
    j.exercised["SN-5"] += 1
    extra = got[taking + 1]
    j.diverged(
        "SN-5",
        f"a resubmission request takes a message once: {rcpt} gets {m.ref} again "
        f"{taking} time{'s' * (taking != 1)} after its delivery, one for each request that "
        f"takes it",
        f"{rcpt} got {m.ref} {len(got)} times, at "
        + ", ".join(j.when(d.t) for d in got)
        + f"; the delivery at {j.when(extra.t)} (by {extra.by}) answers no request",
        extra.t,
    )


def dsn_rule(j: Judge) -> None:
    """SN-9: a resubmitted copy refused for good produces no DSN: after a resubmission,
    no bounce (empty reverse path) reaches a next hop, unless a message sent in the run
    could have bounced for its own sake (a next hop told to refuse before its delivery)."""
    requests = [s for s in j.tl.steps if s.step.kind == "resubmit"]
    if not requests:
        return
    first = min(s.t for s in requests)
    refused = [s.t for s in j.tl.steps if s.step.kind == "sink"]
    # messages the model does not follow (sent before a queue disk fault ended, or
    # sharing a Message-ID) are not in obs.sent: any of them may bounce for its own sake
    unfollowed = [
        s.t for s in j.tl.steps if s.step.kind == "send" and s.step.arg.id in j.obs.left_out
    ]

    def excused(t: float) -> bool:
        if any(sent < t for sent in unfollowed):
            return True
        # a message not yet at all its recipients, or met by a refusal, may bounce itself
        for m in j.obs.sent.values():
            done = m.fully_delivered_at()
            late = done is None or any(r < done for r in refused)
            if m.accepted and m.t_send < t and late:
                return True
        return False

    for t, sink, by in j.obs.bounces:
        if t < first:
            continue
        if excused(t):
            return
        j.exercised["SN-9"] += 1
        j.diverged(
            "SN-9",
            f"no DSN or NDR from a resubmission: the copies resubmitted from "
            f"{j.when(first)} on are the only mail that could be refused then",
            f"{by} sent a bounce (an empty reverse path) to {sink} at {j.when(t)}",
            t,
        )
        return
    if refused and not excused(j.tl.end):
        j.exercised["SN-9"] += 1
