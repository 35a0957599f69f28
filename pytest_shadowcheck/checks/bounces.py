"""Bounces: the non-delivery reports (DSN/NDR) the MTA sent the senders, and the
always-on invariant that no report says a delivered message failed.

Every topology routes the senders' domains to a recording sink (the loader sees to it:
``Topology.senders``), so every report the MTA sends lands where the harness sees it. A
delivery there is a report when it is ``multipart/report; report-type=delivery-status``
(RFC 3464), or has the null reverse-path and is not a message the harness sent. The
message a report is about is found by the harness's trace header
(``X-Shadowcheck-Trace``) in the returned headers (a ``message/rfc822`` or
``text/rfc822-headers`` part), else by the original Message-ID there, else by an
``X-Original-Message-ID`` header of the report; the recipients it reports failed are the
``Final-Recipient`` (or ``Original-Recipient``) of each ``Action: failed`` group, or for a
report without a delivery-status part, the message's recipients its text names.

The invariant FAILs for a report naming a recipient the message was in fact delivered
to: a delivered message produces no failure report (the sender would resend, or give up
on mail that arrived). In a scenario that resubmits from Safety Net, that is the rule
"Safety Net resubmissions never produce DSNs or NDRs" (SN-9). A copy another node
delivered after the reporting node was refused that recipient for good by a next hop and
then killed, paused, restarted, wiped or cut off its power, or cut off from that node,
does not count, whenever the report arrived: that is a shadow's promotion, which cannot
know what its primary was refused, and whose duplicates the catalogue allows (found by
exploration, seeds 2002, 3003 and 4004: a report sent before a wipe; a report deferred
by a busy sender's server and sent after a restart; the shadow's link to its primary
cut). Reports about recipients
never delivered are what the sender is owed, and the invariant says nothing of them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from email import message_from_bytes
from email.message import Message as EmailMessage
from email.policy import compat32
from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.checks.events import node_of
from pytest_shadowcheck.network.smtp_text import TRACE_HEADER, normalize_message_id
from pytest_shadowcheck.scenario.workload_spec import NODE_FAULTS
from pytest_shadowcheck.verdict import CheckResult, Status

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.view import RunView
    from pytest_shadowcheck.network.sink import Delivery

__all__ = ["INVARIANT", "SN9", "Report", "bounce_invariant", "reports"]

#: the pseudo-behaviour a passing bounce check evidences
INVARIANT = "bounces"
#: the rule a report caused by a Safety Net resubmission breaks
SN9 = "SN-9"

#: the first header line of a message returned inline in a plain-text bounce
_COPY_START = re.compile(
    r"^(return-path|received|from|to|subject|message-id|x-shadowcheck-trace):", re.I | re.M
)
_ADDRESS = re.compile(r"[A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9.-]+[A-Za-z0-9]")


@dataclass
class Report:
    """One non-delivery report a senders' sink received."""

    sink: str
    delivery: Delivery
    #: the scenario's message it is about (None: not one the harness can name)
    about: str | None
    #: the recipients it reports as failed (lower case)
    failed: list[str] = field(default_factory=list)
    #: how the message was recognised: "trace", "Message-ID", "X-Original-Message-ID"
    found_by: str = ""

    @property
    def by(self) -> str:
        return node_of(self.delivery.helo)


def _is_report(parsed: EmailMessage, delivery: Delivery, sent_ids: set[str]) -> bool:
    if parsed.get_content_type() == "multipart/report":
        return str(parsed.get_param("report-type") or "").lower() == "delivery-status"
    null_sender = delivery.mail_from.strip("<>") == ""
    return null_sender and delivery.message_id not in sent_ids


def _returned_headers(parsed: EmailMessage) -> EmailMessage | None:
    """The headers of the returned message (message/rfc822 or text/rfc822-headers)."""
    for part in parsed.walk():
        kind = part.get_content_type()
        if kind == "message/rfc822":
            inner = part.get_payload()
            if isinstance(inner, list) and inner and isinstance(inner[0], EmailMessage):
                return inner[0]
        if kind == "text/rfc822-headers":
            payload = part.get_payload(decode=True)
            if isinstance(payload, bytes):
                return message_from_bytes(payload, policy=compat32)
    return None


def _status_groups(parsed: EmailMessage) -> list[dict[str, str]] | None:
    """The per-recipient groups of the message/delivery-status part (None: none)."""
    for part in parsed.walk():
        if part.get_content_type() != "message/delivery-status":
            continue
        payload = part.get_payload()
        if isinstance(payload, list):  # the email package parses it into header blocks
            blocks = [
                {k.lower(): str(v) for k, v in p.items()}
                for p in payload
                if isinstance(p, EmailMessage)
            ]
        else:
            text = payload if isinstance(payload, str) else ""
            blocks = [
                {
                    k.strip().lower(): v.strip()
                    for line in block.splitlines()
                    if ":" in line
                    for k, _, v in [line.partition(":")]
                }
                for block in re.split(r"\r?\n\r?\n", text)
            ]
        return blocks[1:] if blocks else []
    return None


def _address_of(value: str) -> str:
    found = _ADDRESS.search(value.partition(";")[2] or value)
    return found.group(0).lower() if found else ""


def _failed_recipients(parsed: EmailMessage, raw: bytes, candidates: list[str]) -> list[str]:
    groups = _status_groups(parsed)
    if groups is not None:
        failed = []
        for group in groups:
            if group.get("action", "failed").lower() != "failed":
                continue  # "delayed", "delivered", "relayed", "expanded": no failure
            address = _address_of(group.get("final-recipient") or "") or _address_of(
                group.get("original-recipient") or ""
            )
            if address:
                failed.append(address)
        return failed
    # a plain-text bounce: the message's recipients its own text names, in its body
    # above the returned copy (whose To: names every recipient)
    text = raw.decode("utf-8", "replace")
    body = text.split("\r\n\r\n", 1)[-1]
    copy = _COPY_START.search(body)
    named = {a.lower() for a in _ADDRESS.findall(body[: copy.start() if copy else None])}
    return [r for r in candidates if r in named]


def _about(
    parsed: EmailMessage,
    raw: bytes,
    run: RunView,
    by_trace: dict[str, str],
    by_id: dict[str, str],
) -> tuple[str | None, str]:
    returned = _returned_headers(parsed)
    if returned is not None:
        trace = (returned.get(TRACE_HEADER) or "").strip()
        if trace and trace in by_trace:
            return by_trace[trace], "trace"
        ref = trace.partition(".")[0]
        if trace and ref in run.messages:
            return ref, "trace"
        original = normalize_message_id(returned.get("Message-ID"))
        if original in by_id:
            return by_id[original], "Message-ID"
    original = normalize_message_id(parsed.get("X-Original-Message-ID"))
    if original in by_id:
        return by_id[original], "X-Original-Message-ID"
    # a bounce that returns the message inline, as text: its trace or Message-ID there
    text = raw.decode("utf-8", "replace")
    for trace, ref in by_trace.items():
        if trace in text:
            return ref, "trace"
    for message_id, ref in by_id.items():
        if message_id in text and message_id != normalize_message_id(parsed.get("Message-ID")):
            return ref, "Message-ID"
    return None, ""


def _trace_of(content: bytes) -> str | None:
    head = content.split(b"\r\n\r\n", 1)[0]
    for line in head.split(b"\r\n"):
        name, _, value = line.partition(b":")
        if name.strip().lower() == TRACE_HEADER.lower().encode():
            return value.strip().decode("ascii", "replace")
    return None


def reports(run: RunView) -> list[Report]:
    """Every non-delivery report the senders' sinks received, in order of arrival."""
    sinks = sorted(set(run.scenario.topology.senders.values()))
    by_trace: dict[str, str] = {}
    by_id: dict[str, str] = {}
    for ref, message in run.messages.items():
        by_id.setdefault(message.message_id, ref)
        trace = _trace_of(message.content) if message.content else None
        if trace:
            by_trace[trace] = ref
    sent_ids = set(by_id)
    found: list[Report] = []
    for name in sinks:
        sink = run.sinks.get(name)
        for delivery in sink.deliveries if sink is not None else []:
            parsed = message_from_bytes(delivery.raw, policy=compat32)
            if not _is_report(parsed, delivery, sent_ids):
                continue
            about, how = _about(parsed, delivery.raw, run, by_trace, by_id)
            candidates = [r.lower() for r in run.messages[about].rcpt_to] if about else []
            failed = _failed_recipients(parsed, delivery.raw, candidates)
            found.append(Report(name, delivery, about, failed, how))
    return sorted(found, key=lambda r: r.delivery.t)


def _delivered_to(run: RunView, ref: str, report: Report) -> dict[str, tuple[str, Delivery]]:
    """recipient -> (sink, first delivery) of the message, at any sink but the senders',
    that the report contradicts: not a copy another node promoted after a fault of the
    reporting node that followed the next hop's refusal it reports (a shadow cannot know
    what its primary was refused; the catalogue allows a promoted copy's duplicates, and
    the report was true when it was made, whenever it arrived)."""
    senders = set(run.scenario.topology.senders.values())
    message = run.messages[ref]
    out: dict[str, tuple[str, Delivery]] = {}
    for name, sink in run.sinks.items():
        if name in senders and ref not in _own_senders_mail(run, name):
            continue
        for delivery in sink.deliveries_for(message.message_id):
            for rcpt in delivery.rcpt_tos:
                if not _promoted_after_refusal(run, report.by, rcpt.lower(), delivery):
                    out.setdefault(rcpt.lower(), (name, delivery))
    return out


def _promoted_after_refusal(run: RunView, reporter: str, rcpt: str, delivery: Delivery) -> bool:
    """Whether ``delivery`` to ``rcpt`` came from a node other than ``reporter``, after
    ``reporter`` was refused ``rcpt`` for good by a next hop and then killed, paused,
    restarted, wiped or cut off its power, or while the delivering node's link to it was
    broken (a shadow that cannot reach its primary promotes its copy)."""
    if node_of(delivery.helo) == reporter:
        return False
    refused = [
        e.t
        for e in run.history.events(kind="note", until=delivery.t)
        if str(e.data.get("reply", ""))[:1] == "5"
        and node_of(e.data.get("helo")) == reporter
        and rcpt in _named(e.data)
    ]
    if not refused:
        return False
    for event in run.history.events(kind="step", since=min(refused), until=delivery.t):
        words = str(event.data.get("text", "")).split()
        if len(words) >= 2 and words[0] in NODE_FAULTS and words[1] == reporter:
            return True
    return _cut_off(run, f"{node_of(delivery.helo)}->{reporter}", min(refused), delivery.t)


def _cut_off(run: RunView, link: str, since: float, until: float) -> bool:
    """Whether ``link`` (a shadow's to its primary) was broken at some time between
    ``since`` and ``until``: the shadow could not reach its primary, and promotes (PR-1)."""
    broken: float | None = None
    for event in run.history.events(kind="fault", link=link, until=until):
        if event.data.get("on") and broken is None:
            broken = event.t
        elif not event.data.get("on") and broken is not None:
            if event.t >= since:
                return True
            broken = None
    return broken is not None


def _named(note: dict[str, Any]) -> list[str]:
    """The recipients a sink's scripted answer concerned: its RCPT's, or the message's at
    the end of DATA."""
    if note.get("stage") == "RCPT":
        return [str(note.get("rcpt_to", "")).lower()]
    if note.get("stage") == "DATA":
        return [str(r).lower() for r in note.get("rcpt_tos") or []]
    return []


def _own_senders_mail(run: RunView, sink: str) -> set[str]:
    """The messages the scenario itself addressed to a senders' sink's domains."""
    domains = {d for d, s in run.scenario.topology.senders.items() if s == sink}
    return {
        ref
        for ref, m in run.messages.items()
        if any(r.rpartition("@")[2].lower() in domains for r in m.rcpt_to)
    }


def _resubmitted_before(run: RunView, t: float) -> bool:
    """Whether a Safety Net resubmission step ran before ``t``."""
    return any(
        str(e.data.get("text", "")).startswith("resubmit ")
        for e in run.history.events(kind="step")
        if e.t <= t
    )


def bounce_invariant(run: RunView) -> list[CheckResult]:
    """One result per report about a message the scenario sent: FAIL when it reports a
    recipient the message was delivered to; nothing when no report came."""
    results = []
    for report in reports(run):
        if report.about is None:
            continue
        ref, delivery = report.about, report.delivery
        message = run.messages[ref]
        sender = (message.mail_from or "").strip("<>") or "the sender"
        delivered = _delivered_to(run, ref, report)
        wrong = [r for r in report.failed if r in delivered]
        name = f"no bounce for delivered {ref}"
        expected = (
            f"a non-delivery report to {sender} about {ref} names only recipients it was "
            "never delivered to (a delivered message produces no failure report)"
        )
        said = (
            f"{report.by} sent {sender} a non-delivery report about {ref} at "
            f"+{delivery.t:.2f}s ({report.sink}), naming "
            + (", ".join(report.failed) or "no recipient")
        )
        if not wrong:
            results.append(
                CheckResult(
                    name,
                    Status.PASS,
                    expected,
                    said + ", none of whom got the message",
                    behaviours=[INVARIANT],
                )
            )
            continue
        facts = "; ".join(
            f"{r} got it at +{d.t:.2f}s ({node_of(d.helo)} delivered it to {s})"
            for r in wrong
            for s, d in [delivered[r]]
        )
        blamed: list[str] = []
        if _resubmitted_before(run, delivery.t):
            rule = (
                "Safety Net resubmissions never produce DSNs or NDRs (SN-9): this report "
                "followed a resubmission of a message that had been delivered"
            )
            blamed = [SN9] if SN9 in run.scenario.behaviours else []
        else:
            rule = (
                "a delivered message produces no failure report: the sender is told the "
                "mail failed although it arrived, and may send it again (a duplicate) or "
                "give up on it"
            )
        results.append(
            CheckResult(
                name,
                Status.FAIL,
                expected,
                f"{rule}. {said}; yet {facts}",
                excerpt=run.excerpt(delivery.t, message.links(all_nodes=True)),
                where=str(run.scenario.where),
                behaviours=blamed,
            )
        )
    return results
