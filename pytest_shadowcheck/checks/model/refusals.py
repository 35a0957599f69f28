"""CR-10 at the next hop: what a transport owes each recipient a next hop answered.

Read from the node->sink sessions (each transaction: MAIL, the RCPT replies, the reply
to the final dot, and the message whose content it carried). The catalogue's fork is
"fully processed" only when every recipient is delivered or refused for good: a
recipient the next hop took is done (never sent again), one refused for good (5xx) is
done (a DSN, never a delivery), one refused for now (4xx) is retried until it is taken.
Each rule decides only with nothing else in the run to explain a second try (an outage
among the nodes, a fault on the link around the reply, a resubmission).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_shadowcheck.checks.model.expiry import expiry_governs
from pytest_shadowcheck.checks.model.rules import DELIVERY_ALLOWANCE
from pytest_shadowcheck.checks.model.scripted_refusals import ever_refused_for_good
from pytest_shadowcheck.checks.model.state import seconds

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.model.replay import Sent
    from pytest_shadowcheck.checks.model.rules import Judge
    from pytest_shadowcheck.history import History

__all__ = [
    "Transaction",
    "bounce_rule",
    "fork_rule",
    "kept_rule",
    "transactions",
]

_MAIL = re.compile(r"^MAIL FROM: ?<([^>]*)>", re.IGNORECASE)
_RCPT = re.compile(r"^RCPT TO: ?<([^>]*)>", re.IGNORECASE)
_CODE = re.compile(r"^([2-5]\d\d)( |$)")


@dataclass
class Transaction:
    """One MAIL..final-dot exchange of a node with a next hop."""

    t: float
    node: str
    sink: str
    sender: str
    #: recipient -> the code of the reply to its RCPT
    rcpts: dict[str, int] = field(default_factory=dict)
    #: the code of the reply to the final dot (None: no DATA, or no reply seen)
    eod: int | None = None
    #: when the reply to the final dot was seen
    t_eod: float | None = None
    #: the harness's message it carried (None: no content went)
    ref: str | None = None

    def outcome(self, rcpt: str) -> int | None:
        """The code that decided ``rcpt``: its RCPT refusal, else the final dot's."""
        code = self.rcpts.get(rcpt)
        if code is None or code >= 300:
            return code
        return self.eod


def transactions(j: Judge, history: History) -> list[Transaction]:
    """Every node->sink transaction of the run, in order."""
    nodes = set(j.tl.scenario.topology.nodes)
    out: list[Transaction] = []
    current: dict[tuple[str, int | None], Transaction] = {}
    waiting: dict[tuple[str, int | None], str] = {}
    for event in history.events():
        link = event.link or ""
        src, _, dst = link.partition("->")
        if src not in nodes or not dst or dst in nodes or src == "client":
            continue
        key = (link, event.conn)
        if event.kind == "data":
            txn = current.get(key)
            ref = _ref(j, event.data.get("trace"), event.data.get("message_id"))
            if txn is not None:
                txn.ref = ref
            continue
        if event.kind != "line":
            continue
        text = str(event.data.get("text", ""))
        if event.direction == "c2s":
            mail, rcpt = _MAIL.match(text), _RCPT.match(text)
            if mail:
                current[key] = Transaction(event.t, src, dst, mail.group(1).lower())
                out.append(current[key])
                waiting[key] = "MAIL"
            elif rcpt:
                waiting[key] = "RCPT " + rcpt.group(1).lower()
            elif text.upper().startswith("DATA"):
                waiting[key] = "DATA"
            elif key in waiting and waiting[key] == "354":
                continue
            else:
                waiting[key] = text.split(" ", 1)[0].upper()
            continue
        code = _CODE.match(text)
        txn = current.get(key)
        if not code or txn is None:
            continue
        what, value = waiting.get(key, ""), int(code.group(1))
        if what.startswith("RCPT "):
            txn.rcpts[what[5:]] = value
        elif what == "DATA" and value == 354:
            waiting[key] = "EOD"
            continue
        elif what == "EOD":
            txn.eod, txn.t_eod = value, event.t
        waiting[key] = ""
    return out


def _ref(j: Judge, trace: object, message_id: object) -> str | None:
    for value in (trace, message_id):
        if isinstance(value, str) and value:
            bare = value.strip("<>").split("@", 1)[0]
            ref = bare.rsplit(".", 1)[0] if "." in bare else bare
            if ref in j.obs.sent:
                return ref
    return None


def fork_rule(j: Judge, history: History) -> None:
    """CR-10: a recipient the next hop took is never sent again, one refused for good is
    never delivered, one only ever refused for now is retried until it is delivered."""
    txns = transactions(j, history)
    for m in j.obs.sent.values():
        mine = [t for t in txns if t.ref == m.ref]
        if not m.accepted or not mine:
            continue
        _taken_once(j, m, mine)
        _refused_for_good(j, m, mine)
        _refused_for_now(j, m, mine)


def _explained(j: Judge, node: str, sink: str, a: float, b: float) -> bool:
    """Whether something other than the node's own retry may send ``[a, b]``'s message
    again: an outage or settings change among the nodes, a fault on the link to the next
    hop around the first exchange, a resubmission."""
    nodes = set(j.tl.scenario.topology.nodes)
    if j.tl.changed(a - j.slack, b, nodes, hops=False):
        return True
    if j.tl.link_states(f"{node}->{sink}", a - j.slack, a + j.slack) != {"ok"}:
        return True
    return any(s.step.kind in ("resubmit", "wipe", "power_cut") and s.t <= b for s in j.tl.steps)


def _taken_once(j: Judge, m: Sent, mine: list[Transaction]) -> None:
    for txn in mine:
        if txn.eod is None or txn.eod >= 300 or txn.t_eod is None:
            continue
        taken = {r for r, code in txn.rcpts.items() if code < 300}
        later = [
            d
            for d in m.deliveries
            if d.t > txn.t_eod + 0.01 and d.by == txn.node and taken & set(d.recipients)
        ]
        if not later and not _explained(j, txn.node, txn.sink, txn.t, j.tl.end):
            j.exercised["CR-10"] += 1
        if not later:
            continue
        again = later[0]
        if _explained(j, txn.node, txn.sink, txn.t, again.t):
            continue
        j.exercised["CR-10"] += 1
        who = ", ".join(sorted(taken & set(again.recipients)))
        j.diverged(
            "CR-10",
            f"{txn.sink} took {m.ref} for {who} at {j.when(txn.t_eod)} (250 to its final "
            f"dot); that fork is done: {txn.node} retries only the recipients it refused",
            f"{txn.node} delivered {m.ref} to {who} again at {j.when(again.t)}",
            again.t,
        )
        return


def _refused_for_good(j: Judge, m: Sent, mine: list[Transaction]) -> None:
    for txn in mine:
        refused = {r for r in txn.rcpts if (txn.outcome(r) or 0) >= 500}
        if not refused:
            continue
        later = [
            d
            for d in m.deliveries
            if d.t > txn.t and d.by == txn.node and refused & set(d.recipients)
        ]
        j.exercised["CR-10"] += 1
        _dsn_missing(j, m, txn, refused)
        if not later or _explained(j, txn.node, txn.sink, txn.t, later[0].t):
            continue
        d = later[0]
        who = ", ".join(sorted(refused & set(d.recipients)))
        j.diverged(
            "CR-10",
            f"{txn.sink} refused {m.ref} for {who} for good (5xx) at {j.when(txn.t)}; that "
            f"fork has failed: {txn.node} sends the sender a DSN and does not try again",
            f"{txn.node} tried again and delivered {m.ref} to {who} at {j.when(d.t)}",
            d.t,
        )
        return


def _dsn_missing(j: Judge, m: Sent, txn: Transaction, refused: set[str]) -> bool:
    """A fork that failed whole in one exchange (every other recipient taken) makes its
    DSN at once: a report from the node reaches the sender's next hop within
    TransientFailureRetryInterval + 2 x slack + 1s, when that hop takes it. True when it
    diverged."""
    if txn.eod is None or txn.eod >= 300 or txn.sender in ("", "<>"):
        return False  # a fork still pending, or a bounce (no report about a report)
    hop = j.tl.scenario.topology.hops_of(txn.node).get(txn.sender.rsplit("@", 1)[-1])
    retry = j.tl.setting(txn.node, "TransientFailureRetryInterval", txn.t, j.tl.end)
    if hop is None or hop.sink is None or not all(isinstance(r, int | float) for r in retry):
        return False
    deadline = txn.t + max(retry) + 2 * j.slack + DELIVERY_ALLOWANCE
    if deadline > j.tl.end or j.tl.timer_elapsed(txn.t, deadline)[0] < max(retry):
        return False
    if j.tl.node_states(txn.node, txn.t, deadline) != {"up"}:
        return False
    if j.tl.sink_states(hop.sink, txn.t, deadline) != {"accepting"} or j.tl.link_states(
        f"{txn.node}->{hop.sink}", txn.t, deadline
    ) != {"ok"}:
        return False
    if any(txn.t <= t <= deadline and by == txn.node for t, _, by in j.obs.bounces):
        return False
    who = ", ".join(sorted(refused))
    j.diverged(
        "CR-10",
        f"{txn.sink} refused {m.ref} for {who} for good (5xx) at {j.when(txn.t)} and took "
        f"the rest: {txn.node} sends the sender a DSN ({hop.sink} accepting), by "
        f"{j.when(deadline)}",
        f"no report from {txn.node} reached {hop.sink} by then",
        deadline,
    )
    return True


def _refused_for_now(j: Judge, m: Sent, mine: list[Transaction]) -> None:
    """A recipient only ever refused 4xx is delivered once the next hop takes it: judged
    at the run's end, when every node, link and next hop has surely been well for a
    retry interval (exploration's ending)."""
    deferred = {
        r for t in mine for r in t.rcpts if 400 <= (t.outcome(r) or 0) < 500
    } - ever_refused_for_good(j)
    deferred -= {r for d in m.deliveries for r in d.recipients}
    if not deferred or m.t_reply is None:
        return
    if any(s.step.kind in ("resubmit", "wipe", "power_cut") for s in j.tl.steps):
        return
    retry = j.tl.setting(m.via, "TransientFailureRetryInterval", m.t_send, j.tl.end)
    if not all(isinstance(r, int | float) for r in retry):
        return
    states = (*j.tl.links.values(), *j.tl.sinks.values(), *j.tl.nodes.values())
    changes = [c.hi for cs in states for c in cs]
    # a return to service is surely noticed by its change's end (state.py adds the slack)
    since = max([*changes, *(t.t for t in mine)])
    deadline = since + max(retry) + j.slack + DELIVERY_ALLOWANCE
    nodes = list(j.tl.scenario.topology.nodes)
    sinks = j.sink_of(m)
    if deadline > j.tl.end or not sinks or len(sinks) != 1:
        return
    if j.tl.timer_elapsed(since, deadline)[0] < max(retry):
        return
    if not all(j.can_deliver(n, m, since, deadline) for n in nodes):
        return
    j.exercised["CR-10"] += 1
    who = ", ".join(sorted(deferred))
    (sink,) = sinks
    j.diverged(
        "CR-10",
        f"{sink} refused {m.ref} for {who} for now (4xx) only; the fork is retried until "
        f"the next hop takes it: every node and {sink} were well from {j.when(since)}, so it "
        f"is delivered within TransientFailureRetryInterval ({seconds(max(retry))}), by "
        f"{j.when(deadline)}",
        f"{m.ref} never reached {who}",
        deadline,
    )


def bounce_rule(j: Judge) -> None:
    """CR-1: a message from outside the boundary is taken and copied whatever its sender,
    a bounce (the null reverse path) too: never refused for good for being one."""
    for applied in j.tl.steps:
        if applied.step.kind != "send" or applied.step.arg.sender not in ("", "<>"):
            continue
        m = j.obs.sent.get(applied.step.arg.id)
        if m is None or m.code is None:
            continue
        hops = j.tl.scenario.topology.hops_of(m.via)
        if any(hops.get(r.rpartition("@")[2].lower()) is None for r in m.to):
            continue  # a domain the node has no route for: refused as a relay, rightly
        j.exercised["CR-1"] += 1
        if m.code < 500:
            continue
        j.diverged(
            "CR-1",
            f"{m.via} takes the bounce {m.ref} (MAIL FROM:<>) like any message from "
            "outside its boundary: a 250 once a shadow has its copy, or a 451 4.4.0",
            f"{m.via} refused it with `{m.code} {m.text}` at {j.when(m.t_reply or m.t_send)}",
            m.t_reply or m.t_send,
        )


def kept_rule(j: Judge, history: History) -> None:
    """CR-10: the shadow copy is not released until every fork is fully processed - while
    a recipient has not been delivered (and was never refused for good), or a refusal
    for good's DSN has not left (no report delivered since), the shadow that was seen
    holding the copy still holds it. Judged only while nothing among the nodes changed
    since the send (an outage or promotion moves copies), with no resubmission."""
    # a resubmission, wipe or power cut moves copies: judge only the looks before one
    cutoff = min(
        (s.t for s in j.tl.steps if s.step.kind in ("resubmit", "wipe", "power_cut")),
        default=float("inf"),
    )
    txns = transactions(j, history)
    never = ever_refused_for_good(j)
    nodes = set(j.tl.scenario.topology.nodes)
    for m in j.obs.sent.values():
        if not m.accepted or m.t_reply is None or j.redundant(m) != {True}:
            continue
        looks = [s for s in j.obs.snapshots if s.queue == "shadow" and s.t > m.t_reply]
        holder = next((s.node for s in looks if m.ref in s.refs and s.node != m.via), None)
        shadows = j.candidates(m.via, m.t_send, m.t_reply)
        seen = holder is not None
        if holder is None and len(shadows) == 1:
            (holder,) = shadows  # the one place its copy can be (CR-1)
        if holder is None:
            continue
        failed = [
            t for t in txns if t.ref == m.ref and any((t.outcome(r) or 0) >= 500 for r in t.rcpts)
        ]
        for snap in looks:
            if snap.node != holder:
                continue
            if snap.t >= cutoff:
                break
            if j.tl.changed(m.t_send, snap.t, nodes, hops=False) or not j.copy_kept(
                m, holder, snap.t
            ):
                break
            if expiry_governs(j, m, holder, snap.t):
                break  # past the hold time: its staying is SN-4's question
            why = _pending(m, snap.t, never, failed, j)
            if not why or not (seen or any(d.t <= snap.t for d in m.deliveries)):
                continue  # a copy never seen and no fork done: CR-1's question
            j.exercised["CR-10"] += 1
            if m.ref in snap.refs:
                continue
            j.diverged(
                "CR-10",
                f"{holder} keeps its shadow copy of {m.ref} until every fork is fully "
                f"processed: {why}",
                f"the shadow queue of {holder} no longer held it at {j.when(snap.t)}: "
                + (", ".join(snap.shown[:5]) or "it was empty"),
                snap.t,
            )
            return


def _pending(m: Sent, t: float, never: set[str], failed: list[Transaction], j: Judge) -> str:
    """Why ``m``'s forks are surely not all processed at ``t`` ("" when they may be)."""
    got = {r for d in m.deliveries if d.t <= t for r in d.recipients}
    waiting = sorted(r.lower() for r in m.to if r.lower() not in got and r.lower() not in never)
    if waiting:
        return f"{', '.join(waiting)} had not been delivered by then"
    refused = [f for f in failed if f.t < t]
    if refused and not any(refused[0].t <= b < t for b, _, _ in j.obs.bounces):
        return (
            f"{refused[0].sink} refused it for good at {j.when(refused[0].t)}, and no "
            "DSN had been delivered since"
        )
    # a recipient a next hop refuses for good, in an exchange that carried no content:
    # its DSN is a fork too (any report since the send counts: reports are not tied)
    unsure = sorted(r.lower() for r in m.to if r.lower() in never and r.lower() not in got)
    if unsure and not any(m.t_send <= b < t for b, _, by in j.obs.bounces if by == m.via):
        return f"{', '.join(unsure)} may have been refused for good, and no DSN had left since"
    return ""
