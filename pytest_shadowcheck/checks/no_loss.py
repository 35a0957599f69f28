"""The always-on invariants' shared rules: no acknowledged message is lost, and what
their results mean when the scenario's premise never happened. (Every delivered copy
being what was sent is the integrity invariant, in :mod:`.integrity`.)
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.checks.events import (
    deliveries,
    describe_deliveries,
    find_event,
    matcher_phrase,
    poll,
    why_not,
)
from pytest_shadowcheck.checks.fates import next_hop_refusals, reported_failures
from pytest_shadowcheck.checks.model.expiry import EXPIRATION_DEFAULT
from pytest_shadowcheck.checks.model.state import build_timeline
from pytest_shadowcheck.checks.storage import power_cut_evidence
from pytest_shadowcheck.checks.workload import PROMOTIONS
from pytest_shadowcheck.scenario.capabilities import QUEUE_PATHS
from pytest_shadowcheck.scenario.durations import format_duration
from pytest_shadowcheck.verdict import CheckResult, Status

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.view import RunView as Run

__all__ = ["INVARIANT", "no_loss_invariant", "premise_missing", "scenario_given_unmet"]

#: the pseudo-behaviour a passing no-loss check evidences (no behaviour of the catalogue)
INVARIANT = "no-loss"
#: how far a step's effect may lag its stamp when the timeline is read (the model's)
_SLACK = 2.0


def premise_missing(run: Run, results: list[CheckResult]) -> list[CheckResult]:
    """The invariants' results when the scenario's ``given`` event never happened: a loss
    there is the failure of the behaviour that required the event (no shadow copy: CR-1),
    judged in its own scenarios; here it is NOT-APPLICABLE, with the loss named."""
    unmet = scenario_given_unmet(run)
    if not unmet:
        return results
    for result in results:
        if result.status not in (Status.PASS, Status.NOT_APPLICABLE):
            result.observed = (
                f"{unmet}, which every behaviour "
                f"of this scenario presupposes, so this is not judged here: {result.observed}"
            )
            result.status = Status.NOT_APPLICABLE
    return results


def refused_and_reported(run: Run, ref: str) -> str | None:
    """Why an acknowledged message owes no delivery, when that is so: every recipient it
    has (those its primary took at RCPT) was refused for good (a 5xx) by a next hop, and
    a report to the sender names each of them failed. Its fate is the bounce, which the
    bounce invariant judges; one refused and never reported is lost."""
    owed = _refused_for_good(run, ref)
    reported = reported_failures(run, ref)
    if not owed or not all(r in reported for r in owed):
        return None
    by = sorted({report.by for r in owed for report in reported[r]})
    return (
        f"every recipient {run.messages[ref].via} took ({', '.join(owed)}) was refused for "
        f"good by its next hop, and {' and '.join(by)} reported it failed to the sender"
    )


def _owed(run: Run, ref: str) -> list[str]:
    """The recipients of ``ref`` its primary took at RCPT (lower case, as sent)."""
    msg = run.messages[ref]
    refused_at_rcpt = {r.lower() for r in (msg.result.refused_recipients if msg.result else [])}
    return [r.lower() for r in msg.rcpt_to if r.lower() not in refused_at_rcpt]


def _taken(run: Run, ref: str) -> list[str]:
    """The recipients of ``ref`` its primary answered RCPT with a 2xx, from the replies
    to the harness's own client; [] when they are not known one by one (a message of a
    raw ``session`` step, whose replies are judged by its own lines)."""
    msg = run.messages[ref]
    replies = [r for r in (msg.result.replies if msg.result else []) if r.command == "RCPT"]
    if not msg.rcpt_to or len(replies) != len(msg.rcpt_to):
        return []
    return _owed(run, ref)


def _for_good(run: Run, ref: str) -> set[str]:
    """The recipients of ``ref`` a next hop refused for good (a 5xx)."""
    return {
        rcpt
        for rcpt, refusals in next_hop_refusals(run, ref).items()
        if any(reply[:1] == "5" for _, _, reply in refusals)
    }


def _refused_for_good(run: Run, ref: str) -> list[str]:
    """The recipients of ``ref`` its primary took at RCPT, when a next hop refused every
    one of them for good (a 5xx); else none."""
    owed, for_good = _owed(run, ref), _for_good(run, ref)
    return owed if all(r in for_good for r in owed) else []


def unaccounted(run: Run, ref: str) -> list[str]:
    """The recipients of acknowledged ``ref`` that no delivered copy reached and that no
    report to the sender names failed after a next hop refused them for good: what is
    still owed a delivery ([] when every recipient is accounted for). A message is lost
    for each recipient it never reached, not only when no copy arrived at all. Copies
    addressed to recipients it was not sent to (a group or an alias expanded) are
    counted for the message as a whole: any copy accounts for it, as for a message whose
    recipients' RCPT replies are not known one by one."""
    found = deliveries(run, ref, exact=True)
    owed = _taken(run, ref)
    got = {r.lower() for _, d in found for r in d.rcpt_tos}
    if not owed or (found and got - set(owed)):
        # the message as a whole: any copy, or every recipient refused and reported
        if found or refused_and_reported(run, ref):
            return []
        return owed or _owed(run, ref) or ["(every recipient)"]
    reported = reported_failures(run, ref)
    for_good = _for_good(run, ref)
    return [r for r in owed if r not in got and not (r in for_good and r in reported)]


async def no_loss_invariant(run: Run) -> list[CheckResult]:
    """Every acknowledged message is delivered (or still held by a live node), unless
    every node holding a copy failed: then it is OUTSIDE-GUARANTEE (PR-4).

    A loss is blamed on every behaviour of the scenario; a message that arrived proves
    none of them (it would make an idle-timeout behaviour PASS where nothing was timed),
    so a pass evidences only the invariant itself."""
    acknowledged = [ref for ref, m in run.messages.items() if m.code is not None and m.code < 300]
    if not acknowledged or not run.sinks:
        # without next hops the harness sees, deliveries cannot be observed
        return []
    settle = run.scenario.settle

    async def all_delivered() -> bool:
        return not any(unaccounted(run, ref) for ref in acknowledged)

    if not await all_delivered():
        run.progress.waiting(settle, "for acknowledged messages to be delivered (no-loss check)")
        await delivered_or_quiet(run, all_delivered, settle)
    results = []
    for ref in acknowledged:
        msg = run.messages[ref]
        found = deliveries(run, ref, exact=True)
        missing = unaccounted(run, ref)
        name = f"no loss of {ref}"
        expected = (
            f"acknowledged message {ref} is delivered to each recipient "
            f"{msg.via} took (or still queued on a live node)"
        )
        if not missing:
            said = describe_deliveries(found) if found else refused_and_reported(run, ref)
            results.append(
                CheckResult(name, Status.PASS, expected, said or "", behaviours=[INVARIANT])
            )
            continue
        held = await run.still_held(ref)
        if held:
            results.append(
                CheckResult(
                    name, Status.PASS, expected, f"still queued on {held}", behaviours=[INVARIANT]
                )
            )
            continue
        holders = run.copy_holders(ref)
        failed = {node: why for node in holders if (why := run.copy_lost(node, msg.sent_t))}
        expired = (
            expired_copies(run, ref, [n for n in holders if n not in failed])
            if msg.via in failed
            else {}
        )
        excerpt = run.excerpt(run.history.now(), msg.links(all_nodes=True), before=settle + 5)
        if holders and len(failed) + len(expired) == len(holders):
            why = ", ".join(f"{n} {w}" for n, w in (failed | expired).items())
            # with a shadow copy this is PR-4's case, blamed on every behaviour; with none,
            # whether one was owed is CR-1's question, judged apart, and the loss evidences
            # no behaviour that only a copy can act on (a promotion)
            blamed: list[str] = []
            if expired:
                said = (
                    f"{ref} lost, but no copy was left to take over when its primary failed "
                    f"({why}): a shadow lets an unacknowledged copy go by that rule (SN-4), "
                    "and a primary failing after that is outside the guarantee"
                )
            elif len(holders) > 1:
                said = (
                    f"{ref} lost, but every node holding a copy failed ({why}): primary and "
                    "shadow failing together is outside the guarantee (PR-4)"
                )
            else:
                blamed = [] if run.scenario.named_evidence else run.scenario.behaviours
                blamed = [b for b in blamed if b not in PROMOTIONS] or [INVARIANT]
                said = (
                    f"{ref} lost with the only node that held it ({why}); no other node was "
                    "seen holding a copy, and no transport keeps what the one node holding "
                    "it lost"
                )
            results.append(
                CheckResult(
                    name,
                    Status.OUTSIDE_GUARANTEE,
                    expected,
                    said,
                    excerpt=excerpt,
                    where=str(run.scenario.where),
                    behaviours=blamed,
                )
            )
        elif not found and (refused := _refused_for_good(run, ref)):
            results.append(
                CheckResult(
                    name,
                    Status.FAIL,
                    expected,
                    f"{msg.via} acknowledged {ref} (`{msg.code} {msg.text}`); its next hop "
                    f"refused every recipient it took for good ({', '.join(refused)}), and "
                    f"no non-delivery report of that reached the sender within {settle:g}s: "
                    "told 250, the sender never learnt the message failed",
                    excerpt=excerpt,
                    where=str(run.scenario.where),
                )
            )
        else:
            alive = [n for n in holders if n not in failed]
            acked_t = msg.reply_t if msg.reply_t is not None else msg.sent_t
            disk = power_cut_evidence(run.history, holders or [msg.via], acked_t, msg.text, ref)
            results.append(
                CheckResult(
                    name,
                    Status.FAIL,
                    expected,
                    f"{msg.via} acknowledged {ref} (`{msg.code} {msg.text}`), yet "
                    + _undelivered(run, ref, found, missing, settle)
                    + f" and {_not_held(run)}; "
                    + (
                        f"copies were on {', '.join(holders)} ({', '.join(alive)} still up"
                        + (
                            f"; a shadow copy is not held for it while its primary "
                            f"{msg.via} is up: no rule delivers it)"
                            if len(alive) > 1 and msg.via in alive
                            else ")"
                        )
                        if holders
                        else "no node was seen holding a copy"
                    )
                    + (f". {disk}" if disk else ""),
                    excerpt=excerpt,
                    where=str(run.scenario.where),
                )
            )
    return results


def expired_copies(run: Run, ref: str, shadows: list[str]) -> dict[str, str]:
    """The shadows whose copy of ``ref`` may rightly have expired before its primary lost
    its own: SN-4 lets an unacknowledged copy go after the shadow's SafetyNetHoldTime +
    MessageExpirationTimeout on the nodes' clock, so no promotion was owed then."""
    msg = run.messages[ref]
    tl = build_timeline(run.scenario, run.history, slack=_SLACK)
    failure = None  # when the primary lost its copy, as copy_lost reads the node faults
    for applied in tl.steps:
        arg = applied.step.arg
        if applied.t < msg.sent_t or getattr(arg, "node", None) != msg.via:
            continue
        if applied.step.kind == "wipe":
            failure = applied.t
            break
        if applied.step.kind in ("kill", "power_cut"):
            failure = applied.t
        elif applied.step.kind == "restart":
            failure = None
    if failure is None:
        return {}
    _, most = tl.timer_elapsed(msg.sent_t, failure)
    found = {}
    for shadow in shadows:
        hold = tl.setting_range(shadow, "SafetyNetHoldTime", msg.sent_t, failure)
        expiration = tl.setting_range(
            shadow, "MessageExpirationTimeout", msg.sent_t, failure, default=EXPIRATION_DEFAULT
        )
        if hold is None or expiration is None or most < hold[0] + expiration[0]:
            continue
        found[shadow] = (
            f"may rightly have let its copy go first: SafetyNetHoldTime + "
            f"MessageExpirationTimeout ({format_duration(hold[0])} + "
            f"{format_duration(expiration[0])}) had passed on its clock since the send"
        )
    return found


async def delivered_or_quiet(
    run: Run, all_delivered: Callable[[], Awaitable[bool]], settle: float
) -> None:
    """Wait, ``settle`` at most, until every acknowledged message is accounted for, or
    the cluster holds nothing (no queue of any node, seen so a heartbeat apart): what is
    undelivered then is in no queue from which a rule could still deliver it, and the
    rest of the settle would only be waited out (a loss found while shrinking cost the
    whole settle at each attempt)."""
    delivered = asyncio.ensure_future(poll(all_delivered, settle))
    quiet = asyncio.ensure_future(run.until_quiet(settle))
    try:
        await asyncio.wait({delivered, quiet}, return_when=asyncio.FIRST_COMPLETED)
        if not delivered.done() and quiet.result() is None:
            await delivered  # never quiet: the settle is waited out all the same
    finally:
        for task in (delivered, quiet):
            task.cancel()


def _undelivered(run: Run, ref: str, found: list[Any], missing: list[str], settle: float) -> str:
    """Which recipients never got ``ref`` within ``settle``, in words: all of them, or
    those a copy that did arrive left out (and of those, any a next hop refused for good
    with no report to the sender)."""
    if not found:
        return f"it was never delivered within {settle:g}s"
    unreported = sorted(set(missing) & _for_good(run, ref))
    return (
        f"{_names(missing)} never got it within {settle:g}s (the other recipients did: "
        f"{describe_deliveries(found)})"
        + (
            f"; the next hop refused {_names(unreported)} for good and no non-delivery "
            "report of that reached the sender"
            if unreported
            else ""
        )
    )


def _names(addresses: list[str]) -> str:
    return " and ".join(
        [", ".join(addresses[:-1]), addresses[-1]] if len(addresses) > 1 else addresses
    )


def _not_held(run: Run) -> str:
    """What the harness knows of where an undelivered message is not."""
    if any(run.target.can("control_api", ("GET", QUEUE_PATHS[q])) for q in ("active", "shadow")):
        return "no live node still holds it"
    return "the target lists no queues, so whether a live node still holds it is not known"


def scenario_given_unmet(run: Run) -> str:
    """How the scenario's ``given`` event never happened, in words ("mbx1 never sent
    XSHADOW to mbx2 (...)"); "" when there is none or it happened."""
    given = run.scenario.given
    if given is None or find_event(run, given) is not None:
        return ""
    fact = why_not(run, given)
    return matcher_phrase(given, run).never + (f" ({fact})" if fact else "")
