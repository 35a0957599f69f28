"""The machine's share of a delay, in words: what a timing check says when it grants an
overloaded machine a miss instead of blaming the MTA (docs/verdicts.md, "When the harness
itself runs late")."""

from __future__ import annotations

from pytest_shadowcheck.history import Lateness

__all__ = ["said"]


def said(late: Lateness) -> str:
    """"the harness itself ran 0.412s late and mbx1's processes waited 0.830s for a CPU"."""
    parts = []
    if late.harness > 0:
        parts.append(f"the harness itself ran {late.harness:.3f}s late")
    if late.node is not None and late.node_wait > 0:
        parts.append(f"{late.node}'s processes waited {late.node_wait:.3f}s for a CPU")
    return " and ".join(parts) or "nothing ran late"
