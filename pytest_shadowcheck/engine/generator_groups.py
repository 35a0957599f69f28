"""Exploration's group drill for SN-10, on a virtual clock: a message sent to a
distribution group and delivered; the group changed (one member removed, one added); its
primary killed; a resubmission asked of the shadow, which the Shadow Safety Net answers
once PrimarySafetyNetUnavailableTimeout (12h) has passed. The shadow holds only the
original envelope recipient (the group), so it expands the group afresh: the removed
member gets nothing, the added one the old message (checks/model/groups.py judges it).

One self-contained operation in a quiet cluster, ending with the primary back. A
``directory`` step leaves out the model's rules of the whole run and of the messages to
the addresses it names (only SN-10's follows a group); the other messages are judged as
without it. Drawn at most once a scenario, from a random stream of its own after the
generator's operations, and only in deep exploration's scenarios (the bounded slice's
keep every rule).
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

__all__ = ["GROUP_SHARE", "GroupDrawer"]

#: after each of the generator's operations in a quiet cluster, the chance of the drill
GROUP_SHARE = 0.1

#: drawn only in scenarios this long (deep exploration's): the bounded slice's shorter
#: scenarios keep every rule of the model
MIN_LENGTH = 16

#: what the drill needs of the target, as step kinds
_KINDS = ("directory", "advance", "resubmit", "set_settings", "snapshot", "kill", "restart")


class GroupDrawer:
    """Draws the group drill on a topology (its scenario-file dict)."""

    def __init__(
        self, rng: random.Random, topology: dict[str, Any], can: Callable[[str], bool]
    ) -> None:
        self.rng = rng
        self.nodes = tuple(topology["nodes"])
        self.virtual = topology.get("clock") == "virtual"
        self.databases: dict[str, str] = {
            str(r): str(d) for r, d in topology["directory"]["recipients"].items()
        }
        self.domains = set(topology.get("next_hops", {}))
        self.can = can
        #: drills drawn so far
        self.drawn = 0

    def after(
        self, *, quiet: bool, answering: Sequence[str], recovery: float, length: int
    ) -> tuple[str, tuple[dict[str, Any], ...], tuple[str, ...]] | None:
        if length < MIN_LENGTH:
            return None
        if not (self.virtual and quiet and len(answering) == len(self.nodes) > 1):
            return None
        if self.drawn or not all(self.can(k) for k in _KINDS):
            return None
        kept = sorted(r for r in self.databases if r.rpartition("@")[2] in self.domains)
        if not kept or self.rng.random() >= GROUP_SHARE:
            return None
        self.drawn += 1
        primary = self.rng.choice(self.nodes)
        shadow = self.rng.choice([n for n in self.nodes if n != primary])
        keep = self.rng.choice(kept)
        domain = keep.rpartition("@")[2]
        group, gone, new = (f"{who}@{domain}" for who in ("team", "gone", "new"))
        request = {
            "resubmit": {
                "node": shadow, "database": self.databases[keep], "start": "-1h", "end": "now"
            }
        }  # fmt: skip
        steps: tuple[dict[str, Any], ...] = (
            # the Safety Net must outlast the 12 hours before the broadcast
            {"set_settings": {"values": {"SafetyNetHoldTime": "1d"}}},
            # both in the database the request names: a request is for one (SN-5)
            {"directory": {"recipient": gone, "database": self.databases[keep]}},
            {"directory": {"recipient": new, "database": self.databases[keep]}},
            {"directory": {"group": group, "members": [keep, gone]}},
            {"send": {"id": "g1", "via": primary, "to": [group], "timeout": "20s"}},
            {"wait": "3s"},
            {"advance": "2m"},
            {"wait": "2s"},
            {"snapshot": {"node": shadow, "queue": "safetynet_shadow"}},
            {"directory": {"group": group, "members": [keep, new]}},
            {"kill": primary},
            {"advance": "1m"},
            request,
            {"advance": "11h + 50m"},
            {"wait": "2s"},
            {"advance": "20m"},
            {"wait": "6s"},
            {"snapshot": {"node": shadow, "queue": "active"}},
            {"restart": primary},
            {"wait": f"{recovery:g}s"},
        )
        label = f"group drill: g1 to {group} via {primary}, regrouped, resubmitted by {shadow}"
        return (label, steps, ("SN-10",))
