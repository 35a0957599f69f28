"""Which recipients a scenario's next hops may refuse for good (5xx), read from its
sink steps alone: a refusal at RCPT carries no content, so no transaction names the
message it refused, and a rule that owes a delivery or a kept copy asks here whether
the message's fate may have been a DSN instead.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.model.replay import Sent
    from pytest_shadowcheck.checks.model.rules import Judge

__all__ = ["ever_refused_for_good", "may_be_refused", "partly_refused"]


def ever_refused_for_good(j: Judge) -> set[str]:
    """Recipients some sink step of the scenario may refuse with a 5xx (at RCPT, or the
    whole message at MAIL or DATA): a transaction that carried no content may have
    refused them, unseen by the rules that read transactions."""
    everyone = {r.lower() for m in j.obs.sent.values() for r in m.to}
    out: set[str] = set()
    for applied in j.tl.steps:
        if applied.step.kind != "sink":
            continue
        arg = applied.step.arg
        if str(arg.reply or "").startswith("5"):
            return everyone
        for rule in arg.rules:
            if not rule.reply.startswith("5"):
                continue
            if rule.stage != "RCPT" or not rule.match or "*" in rule.match:
                return everyone
            out.add(rule.match.lower())
    return out


def may_be_refused(j: Judge, m: Sent) -> bool:
    """Whether every recipient of ``m`` may have been refused for good by its next hop
    (a sink step scripted a 5xx for each): then its fate may be a DSN, not a delivery,
    and the rules that wait for its delivery do not judge it."""
    never = ever_refused_for_good(j)
    return bool(never) and all(r.lower() in never for r in m.to)


def partly_refused(j: Judge, m: Sent) -> bool:
    """Whether some recipient of ``m`` may have been refused for good: its fork failed in
    part, and whether the recipients it did deliver are kept in Safety Net (and so
    resubmitted) is not something the catalogue settles."""
    never = ever_refused_for_good(j)
    return any(r.lower() in never for r in m.to)
