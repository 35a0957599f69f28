"""The ``fates`` check: what became of each recipient of one message when a next hop
refused some of them - delivered (exactly once), retried after a temporary refusal and
then delivered, or bounced: never delivered, and a non-delivery report to the sender
names it. The sink's scripted answers (``note`` events with the envelope) say what the
next hop refused; the senders' sinks hold the reports (:mod:`.bounces`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.checks.bounces import reports
from pytest_shadowcheck.checks.events import node_of, poll, result, times

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.view import RunView as Run
    from pytest_shadowcheck.network.sink import Delivery
    from pytest_shadowcheck.scenario.model import Step
    from pytest_shadowcheck.verdict import CheckResult

__all__ = ["check_fates", "next_hop_refusals", "reported_failures"]


def _copies(run: Run, ref: str) -> dict[str, list[tuple[str, Delivery]]]:
    """recipient -> every copy delivered to it (sink, delivery), senders' sinks aside
    unless the recipient is in a senders' domain."""
    message = run.messages[ref]
    senders = run.scenario.topology.senders
    out: dict[str, list[tuple[str, Delivery]]] = {}
    for name, sink in run.sinks.items():
        for delivery in sink.deliveries_for(message.message_id):
            for rcpt in delivery.rcpt_tos:
                if name in senders.values() and rcpt.rpartition("@")[2].lower() not in senders:
                    continue
                out.setdefault(rcpt.lower(), []).append((name, delivery))
    return out


def next_hop_refusals(run: Run, ref: str) -> dict[str, list[tuple[float, str, str]]]:
    """recipient -> the next hops' scripted refusals that concerned it, in order: of its
    RCPT, of a MAIL FROM of the message's sender, of an end of DATA of the message (a
    session closed or held there counts: the sender learns nothing, and must retry);
    (time, sink, what the sink did)."""
    message = run.messages[ref]
    wanted = [r.lower() for r in message.rcpt_to]
    sender = (message.mail_from or "").strip("<>")
    out: dict[str, list[tuple[float, str, str]]] = {}
    for event in run.history.events(kind="note"):
        data = event.data
        stage, reply = data.get("stage"), str(data.get("reply", ""))
        if reply == "close":
            reply = "closed the session after the final dot"
        elif reply == "hang":
            reply = "held its answer"
        elif reply[:1] not in ("4", "5"):
            continue
        if stage == "RCPT":
            named = [str(data.get("rcpt_to", "")).lower()]
        elif stage == "MAIL" and data.get("mail_from") == sender:
            named = wanted
        elif stage == "DATA" and data.get("message_id") == message.message_id:
            named = [str(r).lower() for r in data.get("rcpt_tos") or []]
        else:
            continue
        for rcpt in named:
            if rcpt in wanted:
                out.setdefault(rcpt, []).append((event.t, str(data["sink"]), reply))
    return out


def reported_failures(run: Run, ref: str) -> dict[str, list[Any]]:
    """recipient -> the reports about ``ref`` that name it as failed."""
    out: dict[str, list[Any]] = {}
    for report in reports(run):
        if report.about == ref:
            for rcpt in report.failed:
                out.setdefault(rcpt, []).append(report)
    return out


async def check_fates(run: Run, step: Step) -> CheckResult:
    arg = step.arg
    ref = arg["message"]
    within = arg.get("within", run.scenario.settle)
    delivered = [r.lower() for r in arg.get("delivered", [])]
    retried = [r.lower() for r in arg.get("retried", [])]
    bounced = [r.lower() for r in arg.get("bounced", [])]
    run.progress.waiting(within, f"for each recipient of {ref} to meet its fate")

    async def settled() -> bool:
        copies, reported = _copies(run, ref), reported_failures(run, ref)
        return all(r in copies for r in delivered + retried) and all(r in reported for r in bounced)

    await poll(settled, within)
    copies, refused = _copies(run, ref), next_hop_refusals(run, ref)
    reported = reported_failures(run, ref)
    sender = (run.messages[ref].mail_from or "").strip("<>") or "the sender"
    wanted: list[str] = []
    problems: list[str] = []
    facts: list[str] = []

    def got(rcpt: str) -> str:
        found = copies.get(rcpt, [])
        if not found:
            return f"{rcpt} never got it"
        return (
            f"{rcpt} got it {times(len(found))} ("
            + "; ".join(f"{node_of(d.helo)} delivered it to {s} at +{d.t:.2f}s" for s, d in found)
            + ")"
        )

    def refusals_of(rcpt: str) -> str:
        return ", ".join(
            f"{s} {'' if reply[:1].isalpha() else 'answered '}{reply} at +{t:.2f}s"
            for t, s, reply in refused[rcpt]
        )

    for rcpt in delivered:
        wanted.append(f"{rcpt} delivered once")
        facts.append(got(rcpt))
        if len(copies.get(rcpt, [])) != 1:
            problems.append(got(rcpt))
    for rcpt in retried:
        wanted.append(f"{rcpt} retried after a temporary refusal, then delivered once")
        temporary = [x for x in refused.get(rcpt, []) if not x[2].startswith("5")]
        found = copies.get(rcpt, [])
        fact = got(rcpt)
        if refused.get(rcpt):
            fact = f"{refusals_of(rcpt)}; then {fact}"
        facts.append(fact)
        if not temporary:
            problems.append(
                f"the next hop never refused {rcpt} for now (no 4xx, nor a session ended "
                "with no answer): there was nothing to retry"
            )
        elif len(found) != 1 or found[0][1].t < temporary[0][0]:
            problems.append(fact)
    for rcpt in bounced:
        wanted.append(f"{rcpt} never delivered and named in a non-delivery report to {sender}")
        named = reported.get(rcpt, [])
        why = f" after {refusals_of(rcpt)}" if refused.get(rcpt) else ""
        if copies.get(rcpt):
            problems.append(got(rcpt) + f", though it was to bounce{why}")
        if not named:
            problems.append(f"{sender} got no non-delivery report naming {rcpt}{why}")
        else:
            first = named[0]
            facts.append(
                f"{first.by} reported {rcpt} failed to {sender} at +{first.delivery.t:.2f}s" + why
            )
    for rcpt in delivered + retried:
        if rcpt in copies:
            though = "though it was delivered"
        elif rcpt in retried:
            though = "though the next hop had only refused it for now (a 4xx: retry later)"
        else:
            though = "though the next hop took it"
        for report in reported.get(rcpt, []):
            problems.append(
                f"{report.by} told {sender} at +{report.delivery.t:.2f}s that {rcpt} failed, "
                + though
            )
    expected = f"for {ref} within {within:g}s: " + "; ".join(wanted)
    observed = "; ".join(problems) if problems else "; ".join(facts)
    message = run.messages[ref]
    return result(
        step,
        f"fates of {ref}",
        not problems,
        expected,
        observed,
        run.excerpt(run.history.now(), message.links(all_nodes=True), before=within + 3),
    )
