"""Exploration's configuration drill for SN-6: an admin sets ReplayLagTime (a lagged
database copy) while the cluster runs, beyond, at or within SafetyNetHoldTime, and the
harness reads every answering node's configuration warnings (``snapshot`` of
``config_warnings``), which the model's SN-6 rule (checks/model/config_warnings.py)
judges.

Its draws come from a random stream of their own, after the generator's operations, so
that the other operations are drawn as without them.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["REPLAY_LAG_SHARE", "ReplayLagDrawer"]

#: after each of the generator's operations, the chance of a ReplayLagTime change
REPLAY_LAG_SHARE = 0.05

#: ReplayLagTime as a multiple of SafetyNetHoldTime: beyond it, at it (allowed: >=), within
_FACTORS = (0.5, 1.0, 3.0)


def _seconds(value: float) -> str:
    return f"{value:g}s"


class ReplayLagDrawer:
    """Draws ReplayLagTime changes; ``can`` says which step kinds the target performs."""

    def __init__(self, rng: random.Random, nodes: Sequence[str], can: Callable[[str], bool]):
        self.rng = rng
        self.nodes = tuple(nodes)
        self.can = can
        #: changes drawn so far
        self.drawn = 0

    def after(
        self, answering: Sequence[str], hold: float
    ) -> tuple[str, tuple[dict[str, Any], ...], tuple[str, ...]] | None:
        """Now and then, ReplayLagTime set on every node at a multiple of ``hold`` (the
        SafetyNetHoldTime the plan started with) and each answering node's warnings read."""
        if not (self.can("set_settings") and self.can("snapshot") and answering):
            return None
        if self.rng.random() >= REPLAY_LAG_SHARE or self.drawn >= 2:
            return None
        self.drawn += 1
        lag = hold * self.rng.choice(_FACTORS)
        change = {"set_settings": {"values": {"ReplayLagTime": _seconds(lag)}}}
        # the model judges no look within its slack (2s) of a change: either answer goes
        steps: list[dict[str, Any]] = [change, {"wait": "3s"}]
        steps += [{"snapshot": {"node": n, "queue": "config_warnings"}} for n in answering]
        return (f"set ReplayLagTime={_seconds(lag)}, read the warnings", tuple(steps), ("SN-6",))
