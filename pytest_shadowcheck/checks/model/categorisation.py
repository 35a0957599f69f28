"""SN-11: a Shadow Safety Net copy has none of the primary's later changes and goes
through full categorisation on resubmission.

Seen from outside through the categoriser's stamp (``X-Categorized-By: NODE``,
docs/protocol.md), which the sink records with each delivery: judged only where the
primary's own delivery of the message carried its stamp (the MTA shows categorisation),
for a delivery by another node after a resubmission request, of a message the harness
saw in that node's Shadow Safety Net before the request (so that it came from there, not
from a shadow queue: PR-1). That delivery carries the resubmitting node's stamp and not
the primary's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pytest_shadowcheck.checks.model.replay import Sent
    from pytest_shadowcheck.checks.model.rules import Judge

__all__ = ["categorised_afresh_rule"]


def categorised_afresh_rule(j: Judge, m: Sent) -> None:
    if not m.accepted:
        return
    requests = sorted(s.t for s in j.tl.steps if s.step.kind == "resubmit")
    for rcpt in m.to:
        got = [d for d in m.deliveries if rcpt.lower() in d.recipients]
        if not got or got[0].by != m.via or got[0].categorised is None:
            continue
        if m.via not in got[0].categorised:
            continue  # this MTA does not show its categorisation by the stamp
        for d in got[1:]:
            asked = [t for t in requests if got[0].t < t < d.t]
            if d.by == m.via or not asked or d.categorised is None:
                continue
            seen = any(
                s.queue == "safetynet_shadow"
                and s.node == d.by
                and m.ref in s.refs
                and got[0].t < s.t < asked[0]
                for s in j.obs.snapshots
            )
            if not seen:
                continue
            j.exercised["SN-11"] += 1
            if d.by in d.categorised and m.via not in d.categorised:
                continue
            stamps = ", ".join(d.categorised) or "none"
            j.diverged(
                "SN-11",
                f"{d.by} resubmits {m.ref} from its Shadow Safety Net: the copy has none of "
                f"{m.via}'s changes (no X-Categorized-By stamp of {m.via}) and is categorised "
                f"afresh (a stamp of {d.by})",
                f"the copy {rcpt} got from {d.by} at {j.when(d.t)} carried the stamps of: {stamps}",
                d.t,
            )
            return
