"""Exploration's drill for DI-2 across a live change: in a scenario that started with a
slow heartbeat, once no node holds another's copies (so no shadow's heartbeats run), a
message is sent and an admin shortens ShadowHeartbeatFrequency at once. "At least once
every ShadowHeartbeatFrequency" is then the new value from the change on
(checks/model/heartbeats.py): a shadow that keeps the old beat until it ends asks
seconds late, which a change drawn at any other moment of a beat shows only when it
comes early in it.

Its draws come from a random stream of their own, after the generator's operations, so
that the other operations are drawn as without them.
"""

from __future__ import annotations

import random
from collections.abc import Callable
from typing import Any

from pytest_shadowcheck.checks.model.check import DEFAULT_SLACK
from pytest_shadowcheck.engine.exploration_plan import seconds_text
from pytest_shadowcheck.engine.generator_placement import hop_recipients

__all__ = ["HEARTBEAT_CHANGE_SHARE", "HeartbeatChangeDrawer"]

#: after each of the generator's operations in a quiet cluster, the chance of the drill
HEARTBEAT_CHANGE_SHARE = 0.5
#: the new frequencies (s): beside a 4 s beat, either makes the old beat's query late by
#: more than the model's slack (DEFAULT_SLACK)
_SHORTER = (0.5, 1.0)


class HeartbeatChangeDrawer:
    """Draws the drill once a plan, on a real clock, where the target changes settings
    while it runs; ``can`` says which step kinds the target performs."""

    def __init__(
        self, rng: random.Random, topology: dict[str, Any], can: Callable[[str], bool]
    ) -> None:
        self.rng = rng
        self.nodes = tuple(topology["nodes"])
        self.real = topology.get("clock", "real") != "virtual"
        self.recipients = hop_recipients(topology)
        self.can = can
        #: drills drawn so far (one at most)
        self.drawn = 0

    def after(
        self, *, quiet: bool, answering: list[str], beat: float | None, redundancy: bool
    ) -> tuple[str, tuple[dict[str, Any], ...], tuple[str, ...]] | None:
        """Now and then, with every node answering and ``beat`` (the
        ShadowHeartbeatFrequency in force) long, the drill: its label, steps and
        behaviours. It puts ``beat`` back at its end, so the generator's own draws (which
        never set the value in force) stay as drawn."""
        if not (self.real and quiet and redundancy and self.recipients and self.drawn < 1):
            return None
        # a beat no longer than the new one and the slack: its query is never late
        if beat is None or beat <= max(_SHORTER) + DEFAULT_SLACK or not self.can("set_settings"):
            return None
        if len(self.nodes) < 2 or len(answering) != len(self.nodes):
            return None
        if self.rng.random() >= HEARTBEAT_CHANGE_SHARE:
            return None
        self.drawn += 1
        via = self.rng.choice(self.nodes)
        to = self.rng.choice(self.recipients)
        shorter = self.rng.choice(_SHORTER)
        # two beats and a second: every copy made before was named in an answer to a
        # query, so no shadow holds one and its next copy starts its heartbeats afresh
        unheld = {"wait": {"until": "quiet", "timeout": seconds_text(2 * beat + 1)}}
        steps: tuple[dict[str, Any], ...] = (
            unheld,
            {"send": {"id": "h1", "via": via, "to": [to], "timeout": "20s"}},
            {"set_settings": {"values": {"ShadowHeartbeatFrequency": seconds_text(shorter)}}},
            # past the old beat: the query the old frequency would make comes in it
            {"wait": seconds_text(beat + 1)},
            {"set_settings": {"values": {"ShadowHeartbeatFrequency": seconds_text(beat)}}},
        )
        label = (
            f"heartbeat change: h1 via {via}, then ShadowHeartbeatFrequency "
            f"{seconds_text(beat)} -> {seconds_text(shorter)} at once, put back after a beat"
        )
        return label, steps, ("DI-2",)
