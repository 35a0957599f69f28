"""The machine's share of a delay, in words: what a timing check says when it grants an
overloaded machine a miss instead of blaming the MTA (docs/verdicts.md, "When the harness
itself runs late")."""

from __future__ import annotations

from pytest_shadowcheck.history import Lateness

__all__ = ["OVERLOADED_LEAST", "OVERLOADED_SHARE", "overloaded", "said"]

#: a wait (a scenario's timeout, a workload's settle) the machine's lateness (the
#: harness's loop, the nodes' waits for a CPU) took this share of, and at least the
#: seconds below, ran out of the machine's time (starting nodes alone blocks the loop
#: ~0.4 s)
OVERLOADED_SHARE = 0.1
OVERLOADED_LEAST = 2.0


def overloaded(late: float, span: float) -> bool:
    """Whether ``late`` seconds of the machine's lateness over a wait of ``span``
    seconds make the wait's outcome the machine's, not the MTA's."""
    return late >= max(OVERLOADED_LEAST, OVERLOADED_SHARE * span)


def said(late: Lateness) -> str:
    """"the harness itself ran 0.412s late and mbx1's processes waited 0.830s for a
    CPU, mbx2's 0.120s" (every node that waited, longest first)."""
    parts = []
    if late.harness > 0:
        parts.append(f"the harness itself ran {late.harness:.3f}s late")
    # longest first; a wait that rounds to nothing is not worth a word
    waits = sorted(((n, s) for n, s in late.waits if s >= 0.0005), key=lambda w: -w[1])
    if waits:
        (node, seconds), *others = waits
        text = f"{node}'s processes waited {seconds:.3f}s for a CPU"
        parts.append(text + "".join(f", {other}'s {more:.3f}s" for other, more in others))
    return " and ".join(parts) or "nothing ran late"
