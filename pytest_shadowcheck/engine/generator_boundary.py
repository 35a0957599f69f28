"""Exploration's operations for the copy's session and the primary's discard events,
judged by checks/model/sessions.py (CR-2) and checks/model/discard_expiry.py (DI-6):

- ``session`` (CR-2): one sender session carrying two or three messages back to back:
  their copies travel over one session from the primary to a shadow, opened while the
  sender's session is open.
- ``expiry`` drill (DI-6), in a quiet cluster of two nodes: the next hop refusing for a
  while, a message sent, its shadow killed (it can never ask for the discard status),
  the next hop accepting again and the message delivered; the primary's discard events
  looked at at once (ShadowMessageAutoDiscardInterval not yet passed), then past the
  interval and a sweep (on a virtual clock: the clock moved to one second short of it,
  looked at again, then two minutes on); the shadow restarted.

Drawn from a random stream of their own, after the generator's operations (as the wire
operations are), so that adding them changes none of the generator's other draws.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from typing import Any, NamedTuple

__all__ = ["EXPIRY_CAPABILITIES", "BoundaryDrawer", "Drawn", "sinks_of"]


class Drawn(NamedTuple):
    """An operation, the fields of generator.Operation in its order (this module does not
    import the generator, which imports it)."""

    label: str
    steps: tuple[dict[str, Any], ...]
    effect: tuple[str, str] = ("", "")
    behaviours: tuple[str, ...] = ()


#: ShadowMessageAutoDiscardInterval in force when the expiry drill is drawn, on a virtual
#: clock: moving past it stays under the virtual topology's SafetyNetHoldTime (10 minutes
#: or more), and the model allows the primary's sweep a minute of it
VIRTUAL_INTERVAL = 300.0
#: ... on a real clock: longer than the send, the kill and the delivery take before the
#: first look, short enough to wait out (the model allows a sweep half of it)
REAL_INTERVAL = 6.0
#: what the expiry drill needs of the target
EXPIRY_CAPABILITIES = frozenset({"control_api", "kill", "restart"})

#: after each of the generator's operations, the chance of one of these
SESSION_SHARE = 0.08
EXPIRY_SHARE = 0.15
#: the chance of the expiry drill first thing, in a cluster surely quiet
FIRST_SHARE = 0.4

_LABEL = "discard expiry"


def _seconds(value: float) -> str:
    return f"{value:g}s"


def sinks_of(topology: dict[str, Any]) -> dict[str, str]:
    """Recipient -> the sink of its domain, for the recipients every node routes to a sink
    of the topology's own (none where a node-level next hop decides)."""
    if any(spec.get("next_hops") for spec in topology["nodes"].values()):
        return {}
    hops = topology.get("next_hops", {})
    out = {}
    for rcpt in topology["directory"]["recipients"]:
        hop = hops.get(rcpt.rpartition("@")[2], {})
        if hop.get("sink") and hop.get("kind") != "boundary":
            out[rcpt] = str(hop["sink"])
    return out


#: the expiry drill only in scenarios this long (deep exploration's): its interval,
#: which the model reads only for DI-6, leaves DI-2, DI-5 and SN-2 unjudged, and its
#: waits would make the bounded slice's longest scenario the suite's longest by far
DRILL_MIN_LENGTH = 16


class BoundaryDrawer:
    """Draws these operations; ``capabilities`` are the target's."""

    def __init__(
        self,
        rng: random.Random,
        nodes: Sequence[str],
        recipients: Sequence[str],
        sinks: dict[str, str],
        capabilities: frozenset[str],
        *,
        virtual: bool,
        length: int = DRILL_MIN_LENGTH,
    ) -> None:
        self.rng = rng
        self.length = length
        self.nodes = tuple(nodes)
        self.recipients = tuple(recipients)
        #: recipient -> the sink every node delivers it to (none: not every node routes it)
        self.sinks = dict(sinks)
        self.capabilities = capabilities
        self.virtual = virtual
        self.interval = VIRTUAL_INTERVAL if virtual else REAL_INTERVAL
        self.sessions = 0
        self.drills = 0
        #: operations drawn so far
        self.drawn = 0

    def settings(self) -> dict[str, float]:
        """The start settings the operations drawn need."""
        return {"ShadowMessageAutoDiscardInterval": self.interval} if self.drills else {}

    def first(self, recovery: float) -> list[Drawn]:
        """Before the generator's first operation, now and then, the expiry drill."""
        out: list[Drawn] = []
        if self._can_drill() and self.rng.random() < FIRST_SHARE:
            out = self.expiry(recovery)
        self.drawn += len(out)
        return out

    def _can_drill(self) -> bool:
        return (
            self.drills < 1
            and self.length >= DRILL_MIN_LENGTH
            and self.capabilities >= EXPIRY_CAPABILITIES
            and bool(self.sinks)
            # which node holds the copy is then known: the other one
            and len(self.nodes) == 2
        )

    def after(
        self, answering: Sequence[str], quiet: bool, recovery: float, *, copies: bool = True
    ) -> list[Drawn]:
        """Now and then, operations after one of the generator's: each leaves the
        cluster's state as the generator follows it. ``copies``: shadow redundancy is on
        (the drill needs a copy)."""
        out: list[Drawn] = []
        roll = self.rng.random()
        if quiet and copies and self._can_drill() and roll < EXPIRY_SHARE:
            out = self.expiry(recovery)
        elif roll >= 1 - SESSION_SHARE and answering:
            out = [self.session(self.rng.choice(list(answering)))]
        self.drawn += len(out)
        return out

    def session(self, via: str) -> Drawn:
        """CR-2: two or three messages in one sender session, back to back."""
        count = self.rng.choice((2, 2, 3))
        say: list[Any] = ["EHLO sender.example"]
        refs = []
        for _ in range(count):
            self.sessions += 1
            ref = f"s{self.sessions}"
            refs.append(ref)
            rcpt = self.rng.choice(self.recipients)
            # no expected replies: a refusal (no copy possible) is the model's to judge
            say += ["MAIL FROM:<sender@ext.test>", f"RCPT TO:<{rcpt}>", "DATA", {"message": ref}]
        say.append("QUIT")
        label = f"session {'+'.join(refs)} via {via}"
        return Drawn(label, ({"session": {"via": via, "say": say}},), behaviours=("CR-2",))

    def expiry(self, recovery: float) -> list[Drawn]:
        """DI-6: a delivered message's discard event that its shadow, down, never asks
        for: kept one second short of the interval, gone past it and a sweep."""
        self.drills += 1
        primary = self.rng.choice(self.nodes)
        shadow = self.rng.choice([n for n in self.nodes if n != primary])
        rcpt = self.rng.choice(sorted(self.sinks))
        sink = self.sinks[rcpt]
        ref = f"e{self.drills}"

        def look() -> dict[str, Any]:
            # a fresh one each time: one object twice would be written as a YAML alias
            return {"snapshot": {"node": primary, "queue": "discard_events"}}

        held: tuple[dict[str, Any], ...] = (
            # the next hop holds the message back until the shadow is down: it cannot have
            # asked (the primary is not a node holding undelivered mail when one fails)
            {"sink": {"name": sink, "reply": "451 4.3.0 mailbox busy, try later"}},
            {"send": {"id": ref, "via": primary, "to": [rcpt], "timeout": "20s"}},
            {"kill": shadow},
            {"sink": {"name": sink, "reply": "accept"}},
        )
        # the model judges a look from its slack (2s) after the delivery on
        if self.virtual:
            # a retry is due only once the clock moves, then past the model's slack, so
            # that the next advance surely follows the event
            held += ({"advance": "1s"}, {"wait": "3s"}, look())
        else:
            held += ({"wait": "3.5s"}, look())
        ops = [
            Drawn(
                f"{_LABEL}: send {ref} via {primary}, kill {shadow}",
                held,
                ("down", shadow),
                ("DI-6",),
            )
        ]
        if self.virtual:
            ops += [
                Drawn(
                    f"{_LABEL}: advance to 1s short of the interval",
                    ({"advance": _seconds(self.interval - 2.0)}, {"wait": "0.5s"}, look()),
                    behaviours=("DI-6",),
                ),
                Drawn(
                    f"{_LABEL}: advance 2m",
                    ({"advance": "2m"}, {"wait": "3s"}, look()),
                    behaviours=("DI-6",),
                ),
            ]
        else:
            # the interval, half of it for a sweep, the model's slack twice, a margin
            past = self.interval * 1.5 + 2 * 2.0 + 1.0
            ops.append(
                Drawn(
                    f"{_LABEL}: wait {past:g}s",
                    ({"wait": _seconds(past)}, look()),
                    behaviours=("DI-6",),
                )
            )
        ops.append(
            Drawn(
                f"restart {shadow}",
                ({"restart": shadow}, {"wait": _seconds(recovery)}),
                ("up", shadow),
            )
        )
        return ops
