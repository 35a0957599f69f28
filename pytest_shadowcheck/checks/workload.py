"""The history checker: a workload's history in, every message's fate and a verdict out.

In the spirit of Jepsen's checkers, it reads only the recorded history - the ``attempt``
events of one workload, the sinks' ``delivery`` events, the nemesis' fault windows and
the last queue snapshots - in one pass, and says for every message:

* ``delivered``: acknowledged, every recipient delivered once;
* ``duplicated``: some recipient delivered more than once, with the cause when the history
  shows it (a promotion after a fault of the primary, a redelivery by the same node after
  it was restarted or its next-hop link broke, or after a reply to its first delivery
  that it may never have read: the connection closed before any reply, or the harness
  itself ran late answering and the node dropped the session); an unexplained duplicate
  is a FAIL;
* ``lost``: acknowledged and some recipient never delivered nor still queued: FAIL, or
  OUTSIDE-GUARANTEE (PR-4) when two nodes were down together during its life, or when
  every node that held a copy was wiped after it got it (one failure after the other);
* ``queued``: acknowledged, not delivered, still in a live node's queue after the settle;
* ``unlisted``: acknowledged, not delivered, and a node that held it could not list its
  queues at the end (down, paused, not answering): whether it is lost is not known, and
  the loss check says so (INCONCLUSIVE) instead of counting it as lost;
* ``unacked-delivered``: never acknowledged yet delivered (allowed, counted);
* ``unacked``: never acknowledged, never delivered.

Figures: ack and end-to-end latency percentiles, availability (share of 1-second buckets
with at least one 250), 4xx replies, and per fault the time from its end to the next 250
through the node it hit.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from math import inf
from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.checks.duplicate_causes import (
    cause_kind,
    duplicate_cause,
    unanswered_connection,
    unread_reply,
)
from pytest_shadowcheck.checks.lateness import overloaded, said
from pytest_shadowcheck.checks.workload_records import Entry, Fate, Window
from pytest_shadowcheck.scenario.workload_spec import NODE_FAULTS
from pytest_shadowcheck.statuses import Status
from pytest_shadowcheck.verdict import CheckResult

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from pytest_shadowcheck.history import Event, History, Lateness

__all__ = ["FATES", "Fate", "Settled", "WorkloadReport", "check_workload", "results"]


@dataclass(frozen=True)
class Settled:
    """How the workload's settle went: the seconds the engine lengthened it by for the
    machine's lateness (``granted``, at most another settle) and the machine's lateness
    over the whole of it (``late``)."""

    granted: float
    late: Lateness

FATES = (
    "delivered",
    "duplicated",
    "lost",
    "lost-outside",
    "queued",
    "unlisted",
    "unacked-delivered",
    "unacked",
)
#: how many message refs a result lists before it says "and N more"
LISTED = 20


@dataclass
class WorkloadReport:
    workload: str
    seed: int
    fates: dict[str, Fate]
    counts: Counter[str]
    duplicate_causes: Counter[str]
    ack_latency: dict[str, float]
    end_to_end: dict[str, float]
    availability: float
    temporary_failures: int
    recoveries: list[tuple[str, float | None]]
    faults: int
    #: the nemesis's faults, in order (what a loss is blamed on)
    windows: list[Window] = field(default_factory=list)
    #: whether the target could list its queues (else "in no queue" is not known)
    queues_seen: bool = True
    #: the nodes whose queues could not be listed at the end, and why
    unlisted: dict[str, str] = field(default_factory=dict)

    def of(self, fate: str) -> list[Fate]:
        return [f for f in self.fates.values() if f.fate == fate]

    def summary(self) -> dict[str, Any]:
        """JSON-friendly figures (recorded in the history, shown in the results)."""
        attempted = len(self.fates)
        acked = attempted - self.counts["unacked"] - self.counts["unacked-delivered"]
        return {
            "workload": self.workload,
            "seed": self.seed,
            "attempted": attempted,
            "acknowledged": acked,
            "fates": dict(self.counts),
            "duplicate_rate": round(self.counts["duplicated"] / acked, 5) if acked else 0.0,
            "duplicate_causes": dict(self.duplicate_causes),
            "lost": sorted(f.ref for f in self.of("lost")),
            "ack_latency_s": self.ack_latency,
            "end_to_end_s": self.end_to_end,
            "availability": round(self.availability, 4),
            "temporary_failures": self.temporary_failures,
            "faults": self.faults,
            "recovery_s": [[what, r] for what, r in self.recoveries],
        }

    def figures(self) -> str:
        s = self.summary()
        rec = [r for _, r in self.recoveries if r is not None]
        fates = ", ".join(f"{v} {FATE_WORDS.get(k, k)}" for k, v in sorted(self.counts.items()))
        return (
            f"{s['attempted']} attempted, {s['acknowledged']} acknowledged; fates: {fates}; "
            f"duplicate rate {s['duplicate_rate']:.3%}; ack latency p50/p99 "
            f"{self.ack_latency.get('p50', 0):.3f}/{self.ack_latency.get('p99', 0):.3f}s, "
            f"end-to-end p50/p99 {self.end_to_end.get('p50', 0):.3f}/"
            f"{self.end_to_end.get('p99', 0):.3f}s; availability {self.availability:.1%}; "
            f"{self.temporary_failures} 4xx replies; {self.faults} "
            f"fault{'s' if self.faults != 1 else ''}, recovery "
            + (f"at most {max(rec):.2f}s" if rec else "n/a")
            + f"; seed {self.seed}"
        )

    @property
    def acknowledged(self) -> int:
        return int(self.summary()["acknowledged"])


#: the fates as a sentence says them
FATE_WORDS = {
    "delivered": "delivered",
    "duplicated": "duplicated",
    "lost": "lost",
    "lost-outside": "lost outside the guarantee",
    "queued": "still queued",
    "unlisted": "undelivered on a node whose queues could not be listed",
    "unacked-delivered": "delivered unacknowledged",
    "unacked": "unacknowledged",
}


def check_workload(
    history: History,
    workload: str,
    seed: int,
    since: float = 0.0,
    nodes: frozenset[str] = frozenset(),
    send_timeouts: Mapping[str, float] | None = None,
) -> WorkloadReport:
    """Judge the workload named ``workload`` from the events recorded after ``since``;
    ``nodes`` (the topology's) tells node-to-node links, where shadow copies travel;
    ``send_timeouts`` each node's SendConnectionInactivityTimeout, where the scenario
    sets it (a reply that comes as it runs out may go unread)."""
    fates: dict[str, Fate] = {}
    rcpts: dict[str, list[str]] = {}
    windows: dict[int, Window] = {}
    entries: list[Entry] = []
    unlisted: dict[str, str] = {}  # node: why its queues are not known
    temporary = 0
    acks: list[float] = []
    deliveries: list[Event] = []
    copies: list[Event] = []
    handed: list[Event] = []  # contents a node sent to a next hop that is no node
    events: list[Event] = history.events(since=since)
    for event in events:
        data = event.data
        if event.kind == "attempt" and data.get("workload") == workload:
            code = data.get("code")
            acked = code == 250 and data.get("command") == "EOD"
            fate = Fate(
                data["ref"], data.get("message_id") or "", data["via"], "unacked",
                float(data["sent"]), event.t if acked else None, trace=data.get("trace") or "",
            )  # fmt: skip
            fates[fate.ref] = fate
            # owed to the recipients the server took: a 550 at RCPT told the sender
            refused = {r.lower() for r in data.get("refused_rcpts", [])}
            rcpts[fate.ref] = [
                r.lower() for r in data.get("rcpt_tos", []) if r.lower() not in refused
            ]
            if acked:
                acks.append(event.t)
            elif isinstance(code, int) and 400 <= code < 500:
                temporary += 1
        elif event.kind == "delivery":
            deliveries.append(event)
        elif event.kind == "data" and event.link and event.link.partition("->")[2] in nodes:
            copies.append(event)
        elif event.kind == "data" and event.link and event.link.partition("->")[0] in nodes:
            handed.append(event)
        elif event.kind == "note" and "nemesis" in data:
            index = int(data["index"])
            if data["nemesis"] == "start":
                windows[index] = Window(
                    index, data["fault"], list(data["nodes"]), list(data.get("links", [])),
                    event.t, None,
                )  # fmt: skip
            elif index in windows:
                windows[index].end = event.t
        elif event.kind == "snapshot" and data.get("workload") == workload:
            if data.get("unlisted"):
                unlisted.setdefault(str(data.get("node")), str(data["unlisted"]))
            entries += [
                Entry(str(data.get("node")), str(data.get("queue")), event.t,
                      str(e.get("message_id") or ""), str(e.get("trace") or ""),
                      str(e.get("primary_node") or ""), str(e.get("id") or ""))
                for e in _entries(data.get("answer"))
            ]  # fmt: skip
    identify = _identifier(fates)
    # a fast next hop can record its delivery before the client records the 250
    for event in deliveries:
        found = identify(event.data)
        if found is not None:
            helo = str(event.data.get("helo"))
            for rcpt in event.data.get("rcpt_tos", []):
                found.deliveries.append((event.t, helo, str(rcpt).lower()))
    for event in copies:
        found = identify(event.data)
        if found is not None and event.link and not event.link.startswith("client->"):
            node = event.link.partition("->")[2]
            found.copied_to.add(node)
            found.copied_at[node] = max(event.t, found.copied_at.get(node, event.t))
            if event.link.partition("->")[0] == found.via:
                found.offered.setdefault(node, []).append(event.t)
    # every hand-off of a message by a node: a node splits its recipients over several
    # sessions (by domain, by batch), and any of them but the last may be the one whose
    # reply it did not read before it delivered that session's recipients again
    handed_by: dict[tuple[str, str], list[Event]] = defaultdict(list)
    for event in handed:
        found = identify(event.data)
        if found is not None and event.link:
            handed_by[(found.ref, event.link.partition("->")[0])].append(event)

    def unread(fate: Fate, node: str) -> str | None:
        timeout = (send_timeouts or {}).get(node)
        earlier = handed_by.get((fate.ref, node), [])[:-1] or handed_by.get((fate.ref, node), [])
        return next(
            (why for sent in earlier if (why := unread_reply(history, sent, timeout))), None
        )

    def unanswered(fate: Fate, shadow: str) -> str | None:
        first = min(t for t, helo, _ in fate.deliveries if helo.split(".")[0] == shadow)
        timeout = (send_timeouts or {}).get(shadow)

        def shadow_down(t: float) -> bool:
            return any(
                w.kind in NODE_FAULTS and shadow in w.nodes and w.meets(t, t) for w in faults
            )

        link = f"{shadow}->{fate.via}"
        return unanswered_connection(history, link, fate.sent, first, timeout, shadow_down)

    faults = sorted(windows.values(), key=lambda w: w.start)
    causes: Counter[str] = Counter()
    down = {n for w in faults if w.end is None and w.kind in NODE_FAULTS for n in w.nodes}
    held = _held(fates, rcpts, entries, down | ({"?"} if down else set()))
    for fate in fates.values():
        _judge(fate, rcpts[fate.ref], faults, held, unread, unanswered)
        if fate.fate == "lost" and {fate.via, *fate.copied_to} & unlisted.keys():
            fate.fate = "unlisted"
        if fate.fate == "duplicated":
            causes[cause_kind(fate.cause)] += 1
    return WorkloadReport(
        workload=workload,
        seed=seed,
        fates=fates,
        counts=Counter(f.fate for f in fates.values()),
        duplicate_causes=causes,
        ack_latency=_percentiles([f.acked_t - f.sent for f in fates.values() if f.acked_t]),
        end_to_end=_percentiles(
            [
                max(t for t, _, _ in f.deliveries) - f.sent
                for f in fates.values()
                if f.acked_t is not None and f.deliveries
            ]
        ),
        availability=_availability(fates, acks),
        temporary_failures=temporary,
        recoveries=_recoveries(faults, fates),
        windows=faults,
        faults=len(faults),
        unlisted=unlisted,
    )


def _identifier(fates: dict[str, Fate]) -> Callable[[dict[str, Any]], Fate | None]:
    """Which workload message a recorded content (a delivery, a relayed copy) is: by
    the harness's trace; a copy that lost it, by a Message-ID no other message shares
    (a sender's Message-ID is not an identity: resends and some mailers reuse one)."""
    by_trace = {f.trace: f for f in fates.values() if f.trace}
    shared = Counter(f.message_id for f in fates.values())
    by_id = {f.message_id: f for f in fates.values() if f.message_id and shared[f.message_id] == 1}

    def identify(data: dict[str, Any]) -> Fate | None:
        trace = data.get("trace")
        if trace:
            return by_trace.get(str(trace))
        return by_id.get(str(data.get("message_id") or ""))

    return identify


def _held(
    fates: dict[str, Fate], rcpts: dict[str, list[str]], entries: list[Entry], down: set[str]
) -> set[str]:
    """The refs of undelivered messages a queue entry still holds.

    An entry names its message by the trace when the listing shows it, else by its
    Message-ID; messages sharing one Message-ID (or carrying none, which the MTA may
    replace by its own) are held as many as the entries that could be theirs. ``down``:
    the nodes still down when the snapshot was taken ("?" when one is and a shadow
    entry does not name its primary)."""
    # a shadow copy on a live node whose primary is up, without the message, is
    # delivered by no rule of the catalogue (promotion needs the primary unreachable,
    # PR-1, or back on a new queue database, PR-2): it holds nothing
    entries = [e for e in entries if e.queue != "shadow" or (e.primary or "?") in down]
    traced = {e.trace for e in entries if e.trace}
    ids = {f.message_id for f in fates.values() if f.message_id}
    by_id: Counter[str] = Counter()
    # one entry a message: two messages sharing a Message-ID in one queue are two entries
    for entry in {(e.node, e.queue, e.id or e.message_id, e.message_id) for e in entries}:
        by_id[entry[3] if entry[3] in ids else ""] += 1
    undelivered: dict[str, list[Fate]] = defaultdict(list)
    held: set[str] = set()
    where: dict[str, list[str]] = defaultdict(list)
    for e in entries:
        label = f"{e.node}'s {e.queue} queue"
        for key in (e.trace, e.message_id if e.message_id in ids else ""):
            if label not in where[key]:
                where[key].append(label)
    for fate in fates.values():
        got = {r for _, _, r in fate.deliveries}
        if fate.acked_t is None or all(r in got for r in rcpts[fate.ref]):
            continue  # (an unacknowledged message is owed nothing: it claims no entry)
        if fate.trace in traced:
            held.add(fate.ref)
            fate.held_on = where[fate.trace]
        else:
            undelivered[fate.message_id].append(fate)
    for message_id, waiting in undelivered.items():
        # a Message-ID only one of them carries names it; a shared one, up to as many
        if len(waiting) <= by_id[message_id]:
            held |= {f.ref for f in waiting}
            for fate in waiting:
                fate.held_on = where[message_id]
    return held


def _judge(
    fate: Fate,
    rcpts: list[str],
    faults: list[Window],
    held: set[str],
    unread: Callable[[Fate, str], str | None],
    unanswered: Callable[[Fate, str], str | None],
) -> None:
    per_rcpt = Counter(r for _, _, r in fate.deliveries)
    missing = [r for r in rcpts if per_rcpt[r] == 0]
    fate.missing, fate.recipients = missing, len(rcpts)
    duplicated = any(n > 1 for n in per_rcpt.values())
    if fate.acked_t is None:
        fate.fate = "unacked-delivered" if fate.deliveries else "unacked"
    elif missing:
        if fate.ref in held:
            fate.fate = "queued"
        elif _overlapped(fate, faults) or _every_copy_wiped(fate, faults):
            fate.fate = "lost-outside"
        else:
            fate.fate = "lost"
    elif duplicated:
        fate.fate = "duplicated"
        fate.cause = duplicate_cause(fate, faults, unread, unanswered)
    else:
        fate.fate = "delivered"


def _overlapped(fate: Fate, faults: list[Window]) -> bool:
    """Two nodes, one of them the primary, down together after the message was sent."""
    down = [w for w in faults if w.kind in NODE_FAULTS and w.meets(fate.sent, float("inf"))]
    for w in down:
        if len(w.nodes) > 1 and fate.via in w.nodes:
            return True
    for a in down:
        for b in down:
            others = set(b.nodes) - set(a.nodes)
            a_end = a.end if a.end is not None else float("inf")
            if a is not b and fate.via in a.nodes and others and b.meets(a.start, a_end):
                return True
    return False


def _every_copy_wiped(fate: Fate, faults: list[Window]) -> bool:
    """The primary and every node the message was copied to lost their queue database
    after they got it: both copies are gone, one failure after the other. No rule of the
    catalogue has a primary make a new copy when its shadow loses one, so this is the
    primary and its shadow failing (PR-4), however far apart; a copy made again after a
    wipe is one the wipe did not take."""
    if not fate.copied_to:
        return False  # a single copy lost to one failure is the MTA's fault
    made = {node: fate.copied_at.get(node, fate.sent) for node in fate.copied_to}
    made[fate.via] = fate.sent
    wipes = [w for w in faults if w.kind == "wipe"]
    return all(any(node in w.nodes and w.start >= t for w in wipes) for node, t in made.items())


def _percentiles(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    ordered = sorted(values)

    def at(q: float) -> float:
        return round(ordered[min(len(ordered) - 1, int(q * len(ordered)))], 4)

    return {"p50": at(0.5), "p90": at(0.9), "p99": at(0.99), "max": round(ordered[-1], 4)}


def _availability(fates: dict[str, Fate], acks: list[float]) -> float:
    """Share of the workload's 1-second buckets holding at least one 250."""
    if not fates:
        return 0.0
    start = min(f.sent for f in fates.values())
    end = max([f.sent for f in fates.values()] + acks)
    buckets = int(end - start) + 1
    return len({int(t - start) for t in acks}) / buckets


def _recoveries(faults: list[Window], fates: dict[str, Fate]) -> list[tuple[str, float | None]]:
    """Per fault: seconds from its end to the next 250 through a node it hit."""
    acks: dict[str, list[float]] = defaultdict(list)
    for fate in fates.values():
        if fate.acked_t is not None:
            acks[fate.via].append(fate.acked_t)
    for times in acks.values():
        times.sort()
    out: list[tuple[str, float | None]] = []
    for w in faults:
        label = f"#{w.index} {w.kind} {','.join(w.links or w.nodes)}"
        if w.end is None:
            out.append((label, None))
            continue
        after = [t for node in w.nodes for t in acks.get(node, []) if t >= w.end]
        out.append((label, round(min(after) - w.end, 3) if after else None))
    return out


def _entries(answer: Any) -> list[dict[str, Any]]:
    """Queue entries in a control-API answer, however nested (as checks.queue_entries)."""
    if isinstance(answer, dict):
        return [e for value in answer.values() for e in _entries(value)]
    if isinstance(answer, list):
        return [e for e in answer if isinstance(e, dict)]
    return []


def _blamed(lost: list[Fate], faults: list[Window], behaviours: list[str]) -> list[str]:
    """The behaviours a loss evidences: those of the faults that hit the lost messages'
    primaries (a wipe is PR-2's promise, a kill and restart PR-3's, a pause or a broken
    link PR-1's), among the workload's; all of them when no fault explains it."""
    blamed = set()
    for fate in lost:
        kinds = {w.kind for w in faults if w.touches(fate.via) and w.meets(fate.sent, inf)}
        # the fault that can destroy a queue first: a wipe, then a kill, then the rest
        if "wipe" in kinds:
            blamed.add("PR-2")
        elif kinds & {"kill", "restart"}:
            blamed.add("PR-3")
        elif kinds:
            blamed.add("PR-1")
    chosen = [b for b in behaviours if b in blamed]
    return chosen or behaviours


def _listed(fates: list[Fate]) -> str:
    """The messages by where they were sent and copied, each ref once: "mixed-00295,
    mixed-00298 (sent through mbx1, no copy seen on another node)"; a Message-ID is
    named once when each is the ref's own (``<REF.token@domain>``), else beside its ref."""
    shown = fates[:LISTED]
    groups: dict[tuple[str, tuple[str, ...]], list[Fate]] = {}
    for fate in shown:
        groups.setdefault((fate.via, tuple(sorted(fate.copied_to))), []).append(fate)
    own = {f.message_id.replace(f"<{f.ref}.", "<REF.", 1) for f in shown}
    named_once = len(shown) > 1 and len(own) == 1 and next(iter(own)).startswith("<REF.")
    parts = []
    for (via, copied), members in groups.items():
        refs = ", ".join(
            (f.ref if named_once else f"{f.ref} {f.message_id or '(no Message-ID)'}")
            + _partly(f)
            + (f" (held on {', '.join(f.held_on)})" if f.fate == "queued" and f.held_on else "")
            for f in members
        )
        where = f"copied to {', '.join(copied)}" if copied else "no copy seen on another node"
        parts.append(f"{refs} (sent through {via}, {where})")
    more = len(fates) - LISTED
    text = "; ".join(parts) + (f"; and {more} more" if more > 0 else "")
    if named_once:
        text += f" (Message-IDs {own.pop()})"
    return text


def _partly(fate: Fate) -> str:
    """" (not delivered to carol@corp.test, 1 of its 3 recipients)" when only some of a
    message's recipients are missing."""
    if not fate.missing or len(fate.missing) >= fate.recipients:
        return ""
    shown = ", ".join(fate.missing[:3]) + (" and more" if len(fate.missing) > 3 else "")
    return f" (not delivered to {shown}, {len(fate.missing)} of its {fate.recipients} recipients)"


def results(
    report: WorkloadReport,
    behaviours: list[str],
    where: str,
    excerpt: str = "",
    outside: str | None = None,
    all_delivered: bool = True,
    evidence: str = "",
    settle: float = 0.0,
    retry: tuple[float, float] | None = None,
    unmet: str = "",
    settled: Settled | None = None,
) -> list[CheckResult]:
    """The report as CheckResults: no loss, duplicates explained and, with
    ``all_delivered``, nothing acknowledged still queued after the settle (all evidence
    ``behaviours``; a loss outside the guarantee evidences ``outside`` when given).

    What is still queued at the end of the settle is never a loss: it is a liveness
    question, UNTESTABLE when the MTA's retry ``retry`` (shortest, longest seconds) is
    compiled in longer than the ``settle``, INCONCLUSIVE when the machine ran later
    during it than the engine could lengthen it by (``settled``). With ``unmet`` (why
    the scenario's given never happened) every result is NOT-APPLICABLE, its figures
    kept."""
    out = _results(report, behaviours, where, excerpt, outside, all_delivered, evidence)
    if all_delivered:
        out.append(_liveness(report, behaviours, where, settle, retry, settled))
    _uncopied(report, out, where)
    if unmet:
        for found in out:
            found.observed = f"{unmet}, so this is not judged here: {found.observed}"
            found.status = Status.NOT_APPLICABLE
    return out


#: behaviours only a shadow copy can act on (the catalogue: the shadow promotes itself,
#: PR-1; promotes at once on a new queue database, PR-2; copy and primary fail together,
#: PR-4): a workload in which no message was copied to another node cannot pass them
PROMOTIONS = ("PR-1", "PR-2", "PR-4")


def _uncopied(report: WorkloadReport, out: list[CheckResult], where: str) -> None:
    """With no message copied to another node, a passing result evidences no promotion:
    those behaviours are NOT-APPLICABLE here (a loss still FAILs whom it is blamed on)."""
    if any(f.copied_to for f in report.fates.values()):
        return
    dropped: list[str] = []
    for found in out:
        if found.status != Status.PASS:
            continue
        kept = [b for b in found.behaviours if b not in PROMOTIONS]
        dropped += [b for b in found.behaviours if b in PROMOTIONS and b not in dropped]
        found.behaviours = kept
        if not kept:
            found.status = Status.NOT_APPLICABLE
    if dropped:
        out.append(
            CheckResult(
                f"workload {report.workload}: a shadow copy for {', '.join(dropped)} to act on",
                Status.NOT_APPLICABLE,
                "messages copied to another node, which a promotion could deliver",
                f"no message of the workload was copied to another node (no shadow copy was "
                f"made), so there was nothing for {', '.join(dropped)} to promote",
                where=where,
                behaviours=dropped,
            )
        )


def _liveness(
    report: WorkloadReport,
    behaviours: list[str],
    where: str,
    settle: float,
    retry: tuple[float, float] | None,
    settled: Settled | None = None,
) -> CheckResult:
    """Acknowledged, the faults over, and still not delivered when the settle ended
    (queued, or on a node whose queues could not be listed: undelivered either way)."""
    queued = report.of("queued") + report.of("unlisted")
    acked = report.acknowledged
    name = f"workload {report.workload}: every acknowledged message delivered once faults ended"
    expected = (
        f"once the last fault has healed, every acknowledged message delivered within the "
        f"workload's settle of {settle:g}s (a question of liveness: nothing still queued is lost)"
    )
    if not queued:
        return CheckResult(
            name, Status.PASS, expected,
            f"all {acked} acknowledged messages delivered; seed {report.seed}",
            where=where, behaviours=behaviours,
        )  # fmt: skip
    held = (
        f"{len(queued)} of {acked} acknowledged messages still queued on a live node when the "
        f"settle ended, none of them lost: {_listed(queued)}"
        if not report.of("unlisted")
        else f"{len(queued)} of {acked} acknowledged messages not delivered when the settle "
        f"ended: {_listed(queued)}"
    )
    if retry is not None and retry[1] > settle:
        low, high = (f"{t:g}s" for t in retry)
        schedule = low if retry[0] == retry[1] else f"{low} to {high}"
        return CheckResult(
            name, Status.UNTESTABLE, expected,
            f"{held}. The MTA retries on a compiled-in schedule (TransientFailureRetryInterval "
            f"{schedule}, its description's timers), longer than the settle, so delivery "
            f"within it cannot be asked of it; seed {report.seed}",
            where=where, behaviours=behaviours,
        )  # fmt: skip
    granted = settled.granted if settled is not None else 0.0
    if settled is not None and overloaded(settled.late.total - granted, settle):
        return CheckResult(
            name, Status.INCONCLUSIVE, expected,
            f"{held}; the settle was lengthened by {granted:.3f}s for the machine's "
            f"lateness, and the machine ran later still: over the settle "
            f"{said(settled.late)} (an overloaded machine): no verdict on the MTA; seed "
            f"{report.seed}",
            where=where, behaviours=behaviours, harness_late=True,
        )  # fmt: skip
    lengthened = f" (lengthened by {granted:.3f}s: the machine ran late)" if granted else ""
    return CheckResult(
        name, Status.FAIL, expected,
        f"not delivered in time (liveness): {held}; the nemesis's faults were over during "
        f"the settle{lengthened}; seed {report.seed}",
        where=where, behaviours=behaviours,
    )  # fmt: skip


def _results(
    report: WorkloadReport,
    behaviours: list[str],
    where: str,
    excerpt: str,
    outside: str | None,
    all_delivered: bool,
    evidence: str,
) -> list[CheckResult]:
    """No loss and every duplicate explained."""
    figures = report.figures()
    acked = report.acknowledged
    lost, outside_lost = report.of("lost"), report.of("lost-outside")
    name = f"workload {report.workload}: no acknowledged message lost"
    expected = "every acknowledged message delivered to every recipient (or still queued)"
    if lost:
        blamed = _blamed(lost, report.windows, behaviours)
        loss = CheckResult(
            name, Status.FAIL, expected,
            f"{len(lost)} of {acked} acknowledged messages lost ("
            + ("never delivered, in no queue" if report.queues_seen else "never delivered; "
               "the target lists no queues, so whether a live node still holds them is not "
               "known")
            + f"): {_listed(lost)}. " + (f"{evidence}. " if evidence else "")
            + f"Figures: {figures}",
            where=where, excerpt=excerpt, behaviours=blamed,
        )  # fmt: skip
    elif report.of("unlisted"):
        unknown = report.of("unlisted")
        holders = {n for f in unknown for n in (f.via, *f.copied_to)}
        why = "; ".join(report.unlisted[n] for n in sorted(holders & report.unlisted.keys()))
        loss = CheckResult(
            name, Status.INCONCLUSIVE, expected,
            f"{len(unknown)} of {acked} acknowledged messages were not delivered, and whether "
            f"they are lost is not known: a node that held them could not list its queues "
            f"when the settle ended ({why}): {_listed(unknown)}. Figures: {figures}",
            where=where, excerpt=excerpt, behaviours=behaviours,
        )  # fmt: skip
    elif outside_lost:
        loss = CheckResult(
            name, Status.OUTSIDE_GUARANTEE, expected,
            f"0 of {acked} acknowledged messages lost within the guarantee; "
            f"{len(outside_lost)} lost after the primary and the node holding its copy "
            "both failed (down together, or each wiped in turn: outside the guarantee): "
            f"{_listed(outside_lost)}. Figures: {figures}",
            where=where, excerpt=excerpt, behaviours=[outside] if outside else behaviours,
        )  # fmt: skip
    else:
        loss = CheckResult(
            name, Status.PASS, expected,
            f"0 of {acked} acknowledged messages lost. Figures: {figures}",
            where=where, behaviours=behaviours,
        )  # fmt: skip
    dups = report.of("duplicated")
    unexplained = [f for f in dups if "with no fault" in f.cause]
    causes = "; ".join(f"{c}: {n}" for c, n in report.duplicate_causes.most_common()) or "none"
    dup = CheckResult(
        f"workload {report.workload}: every duplicate has a cause in the history",
        Status.FAIL if unexplained else Status.PASS,
        "a message delivered twice only after a fault of a node that held it, or after a "
        "reply to its first delivery the node may not have read",
        f"{len(dups)} of {acked} acknowledged messages delivered more than once "
        f"({report.summary()['duplicate_rate']:.3%}); causes: {causes}; "
        + (
            f"{len(unexplained)} with no fault to explain it: {_listed(unexplained)}"
            if unexplained
            else "0 unexplained"
        )
        + f"; seed {report.seed}",
        where=where,
        behaviours=behaviours,
    )
    return [loss, dup]
