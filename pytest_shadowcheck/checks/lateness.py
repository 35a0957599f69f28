"""The machine's share of a delay, in words: what a timing check says when it grants an
overloaded machine a miss instead of blaming the MTA (docs/verdicts.md, "When the harness
itself runs late")."""

from __future__ import annotations

from pytest_shadowcheck.history import Lateness

__all__ = ["said"]


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
