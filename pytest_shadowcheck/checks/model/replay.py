"""The observations the model judges, read from a run's history: each sent message with
the reply its sender got, its deliveries (when, by which node, to whom), and the queues
the harness looked at (``snapshot`` events) with the messages they held.

A message is known by the harness's identity: the trace a delivery carries
(``REF.TOKEN``), or its Message-ID (``<REF.TOKEN@...>``, or the one its send step gave).
Two kinds of message are left out, their fates judged by the invariant checks (which go
by the trace): those whose send steps give them one Message-ID, as a queue listing names a
message by its Message-ID only, so no look could tell which of them a queue holds; and
those sent before a node's queue disk, full or failing, was freed (plus the slack), as
the catalogue says nothing of what a transport that cannot write does with them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.checks.inside import queue_entries

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.model.state import Timeline
    from pytest_shadowcheck.history import Event, History

__all__ = ["COPY_LINE", "DISK_FAULTS", "Delivery", "Observations", "Sent", "Snapshot", "observe"]

#: the steps that start or end a queue disk fault
DISK_FAULTS = frozenset({"disk_full", "disk_error", "disk_ok"})


#: a primary's copy command on a shadow session, naming its own message id (docs/protocol.md)
COPY_LINE = re.compile(r"^XSHADOWCOPY\s+(\S+)", re.IGNORECASE)


@dataclass
class Delivery:
    t: float
    by: str
    sink: str
    recipients: tuple[str, ...]
    #: the nodes its X-Categorized-By stamps name (None: the sink did not record them)
    categorised: tuple[str, ...] | None = None


@dataclass
class Sent:
    """One send step's message and what became of it."""

    ref: str
    via: str
    #: the recipients the message has: those the send step named, less any the primary
    #: refused at RCPT (the sender was told; no rule owes them anything)
    to: tuple[str, ...]
    t_send: float
    t_next: float
    code: int | None = None
    enhanced: str | None = None
    text: str = ""
    t_reply: float | None = None
    deliveries: list[Delivery] = field(default_factory=list)

    @property
    def accepted(self) -> bool:
        return self.code == 250

    def first_delivery(self, since: float = float("-inf")) -> Delivery | None:
        return next((d for d in self.deliveries if d.t >= since), None)

    def fully_delivered_at(self) -> float | None:
        """When the last of its recipients first got it; None while one has not."""
        times = []
        for rcpt in self.to:
            got = [d.t for d in self.deliveries if rcpt.lower() in d.recipients]
            if not got:
                return None
            times.append(min(got))
        return max(times) if times else None


@dataclass
class Snapshot:
    t: float
    node: str
    queue: str
    refs: set[str]
    shown: list[str]


@dataclass
class Observations:
    sent: dict[str, Sent] = field(default_factory=dict)
    snapshots: list[Snapshot] = field(default_factory=list)
    #: node->node lines: (t, link, direction, text, when their session began)
    peer_lines: list[tuple[float, str, str, str, float]] = field(default_factory=list)
    #: bounces (an empty reverse path) at a sink: (t, sink, node that sent it)
    bounces: list[tuple[float, str, str]] = field(default_factory=list)
    #: every session's lines, node->node and client->node: (link, conn) -> (t, direction,
    #: text), in order
    sessions: dict[tuple[str, int | None], list[tuple[float, str, str]]] = field(
        default_factory=dict
    )
    #: every node->next hop session's lines, the same way (a delivery attempt)
    hop_sessions: dict[tuple[str, int | None], list[tuple[float, str, str]]] = field(
        default_factory=dict
    )
    #: message contents carried node->node (a copy, a relay): (t of its final dot, link,
    #: conn, ref)
    contents: list[tuple[float, str, int | None, str]] = field(default_factory=list)
    #: messages left out: their send steps share a Message-ID with another's, or they
    #: were sent before a queue disk fault ended
    left_out: set[str] = field(default_factory=set)


def _ref_of(value: Any, by_id: dict[str, str], token: str | None = None) -> str | None:
    """The ref of a message from its trace (``REF.TOKEN``) or Message-ID; with the run's
    ``token`` known, None for another run's message of the same ref (a node left over
    from an earlier run, delivering into a port this run now listens on)."""
    if not isinstance(value, str) or not value:
        return None
    if value in by_id:
        return by_id[value]
    bare = value.strip("<>").split("@", 1)[0]
    if "." not in bare:
        return None
    ref, _, theirs = bare.rpartition(".")
    return ref if token is None or theirs == token else None


def _run_token(events: list[Event], sent: dict[str, Sent]) -> str | None:
    """This run's token, from the trace of a message the harness sent (its content on a
    ``client->`` link): every message of one run carries the same."""
    for event in events:
        if event.kind == "data" and event.link and event.link.startswith("client->"):
            trace = event.data.get("trace")
            if isinstance(trace, str) and "." in trace:
                ref, _, token = trace.rpartition(".")
                if ref in sent:
                    return token
    return None


def observe(timeline: Timeline, history: History) -> Observations:
    obs = Observations()
    by_id: dict[str, str] = {}
    for applied in timeline.steps:
        if applied.step.kind != "send":
            continue
        spec = applied.step.arg
        obs.sent[spec.id] = Sent(spec.id, spec.via, tuple(spec.to), applied.t, applied.t_next)
        if spec.message_id:
            by_id[spec.message_id] = spec.id
    events = history.events()
    token = _run_token(events, obs.sent)
    _replies(obs, events, timeline)
    nodes = set(timeline.scenario.topology.nodes)
    began: dict[tuple[str, int | None], float] = {}
    for event in events:
        if event.kind == "delivery":
            ref = _ref_of(event.data.get("trace"), {}, token) or _ref_of(
                event.data.get("message_id"), by_id, token
            )
            sent = obs.sent.get(ref or "")
            if sent is None and event.data.get("mail_from") in ("", "<>"):
                # a transport's own report; a bounce the harness sent in is its message
                by = str(event.data.get("helo") or "?").split(".")[0]
                obs.bounces.append((event.t, str(event.data.get("sink")), by))
            elif sent is not None:
                # the node named itself in EHLO (its first label), as checks/events.node_of
                by = str(event.data.get("helo") or "?").split(".")[0]
                rcpts = tuple(str(r).lower() for r in event.data.get("rcpt_tos") or ())
                stamps = event.data.get("categorised")
                categorised = None if stamps is None else tuple(str(n) for n in stamps)
                sink = str(event.data.get("sink"))
                sent.deliveries.append(Delivery(event.t, by, sink, rcpts, categorised))
        elif event.kind == "snapshot" and ("answer" in event.data or "entries" in event.data):
            if "answer" in event.data:
                entries = queue_entries(event.data["answer"])
                shown = [str(e.get("message_id")) for e in entries]
            else:  # a queue check's last look: the refs (or Message-IDs) it held
                shown = [str(x) for x in event.data["entries"] or ()]
            refs = {r for x in shown if (r := x if x in obs.sent else _ref_of(x, by_id, token))}
            node, queue = str(event.data.get("node")), str(event.data.get("queue"))
            obs.snapshots.append(Snapshot(event.t, node, queue, refs, shown))
        elif event.kind == "data" and event.link:
            src, _, dst = event.link.partition("->")
            ref = _ref_of(event.data.get("trace"), {}, token) or _ref_of(
                event.data.get("message_id"), by_id, token
            )
            if src in nodes and dst in nodes and ref in obs.sent:
                obs.contents.append((event.t, event.link, event.conn, str(ref)))
        elif event.kind == "line" and event.link:
            src, _, dst = event.link.partition("->")
            if dst in nodes and (src in nodes or src == "client"):
                text = str(event.data.get("text", ""))
                said = (event.t, event.direction or "", text)
                obs.sessions.setdefault((event.link, event.conn), []).append(said)
            elif src in nodes:
                said = (event.t, event.direction or "", str(event.data.get("text", "")))
                obs.hop_sessions.setdefault((event.link, event.conn), []).append(said)
            if src in nodes and dst in nodes:
                text = str(event.data.get("text", ""))
                start = began.setdefault((event.link, event.conn), event.t)
                obs.peer_lines.append((event.t, event.link, event.direction or "", text, start))
    _leave_out(obs, timeline)
    return obs


def _leave_out(obs: Observations, timeline: Timeline) -> None:
    """Drop the messages whose send steps share a Message-ID, and those sent before the
    last queue disk fault ended (after their replies were matched, so that no other
    message's reply is taken for theirs)."""
    refs: dict[str, list[str]] = {}
    freed = None
    for applied in timeline.steps:
        if applied.step.kind == "send" and applied.step.arg.message_id:
            refs.setdefault(applied.step.arg.message_id, []).append(applied.step.arg.id)
        elif applied.step.kind in DISK_FAULTS:
            # a fault left on to the end lasts to the end
            freed = timeline.end if applied.step.kind != "disk_ok" else applied.t_next
    obs.left_out = {ref for shared in refs.values() if len(shared) > 1 for ref in shared}
    if freed is not None:
        obs.left_out |= {r for r, m in obs.sent.items() if m.t_send <= freed + timeline.slack}
    if not obs.left_out:
        return
    for ref in obs.left_out:
        obs.sent.pop(ref, None)
    for snap in obs.snapshots:
        snap.refs -= obs.left_out
    obs.contents = [c for c in obs.contents if c[3] not in obs.left_out]


def _replies(obs: Observations, events: list[Event], timeline: Timeline) -> None:
    """Each send's deciding reply: on its ``client->VIA`` link, the first connection
    opened after the send step began (and, unless sent in the background, before the
    next step): its reply to the content, or the refusal that ended it."""
    conns: dict[tuple[str, int], list[Event]] = {}
    for event in events:
        if event.kind == "reply" and event.link and event.conn is not None:
            conns.setdefault((event.link, event.conn), []).append(event)
    taken: set[tuple[str, int]] = set()
    order = sorted(obs.sent.values(), key=lambda s: s.t_send)
    for sent in order:
        link = f"client->{sent.via}"
        background = next(
            (a.step.arg.background for a in timeline.steps if a.t == sent.t_send), False
        )
        until = float("inf") if background else sent.t_next
        candidates = [
            (replies[0].t, key)
            for key, replies in conns.items()
            if key[0] == link and key not in taken and sent.t_send <= replies[0].t <= until
        ]
        if not candidates:
            continue
        _, key = min(candidates)
        taken.add(key)
        rcpts = [r for r in conns[key] if r.data.get("command") == "RCPT"]
        if len(rcpts) == len(sent.to):  # one reply per RCPT, in the order they were sent
            sent.to = tuple(
                rcpt
                for rcpt, reply in zip(sent.to, rcpts, strict=True)
                if int(reply.data.get("code") or 0) < 400
            )
        deciding = [r for r in conns[key] if r.data.get("command") == "EOD"]
        refusals = [r for r in conns[key] if int(r.data.get("code") or 0) >= 400]
        chosen = deciding[0] if deciding else (refusals[0] if refusals else None)
        if chosen is not None:
            sent.code = int(chosen.data.get("code") or 0) or None
            sent.enhanced = chosen.data.get("enhanced")
            sent.text = str(chosen.data.get("text", ""))
            sent.t_reply = chosen.t
