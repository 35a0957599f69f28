"""Exploration's operations on the wire: raw SMTP sessions of the harness's own (a
stranger trying the shadow verbs, a sender that falls silent or keeps its session open
after a message) and an admin's inconsistent timeouts, which the model's wire rules
(checks/model/wire.py) and the steps' own checks judge.

They need only the harness's proxies (``session``) or the settings interface
(``set_settings``, TO-3). A scenario that draws one gets short inbound limits
(:data:`WIRE_SETTINGS`) so that a session the node must end ends within seconds.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from typing import Any

from pytest_shadowcheck.checks.model.check import DEFAULT_SLACK

__all__ = ["WIRE_SETTINGS", "WIRE_SHARE", "WireDrawer", "WireOperation", "settings_for"]

#: an operation as generator.Operation takes it (label, action steps, behaviour IDs):
#: plain, so that the generator imports this module and not the other way round
WireOperation = tuple[str, tuple[dict[str, Any], ...], tuple[str, ...]]

#: inbound limits in force when a wire operation is drawn: the idle limit under the
#: absolute one (TO-3), both above what a send waiting on a frozen shadow takes, and the
#: idle one above SendConnectionInactivityTimeout (1s) + the model's slack (2s), or the
#: shadow would end an idle shadow session before the primary is due to (TO-2)
WIRE_SETTINGS: dict[str, float] = {
    "ReceiveConnectionInactivityTimeout": 4.5,
    # past the idle limit + the model's slack by more than a loaded machine's delay: a
    # node without the idle limit still ends a silent session, at this one
    "ReceiveConnectionTimeout": 9.0,
}
#: how long a sender that stays connected after its message keeps its session: past
#: SendConnectionInactivityTimeout + the model's slack, under ReceiveConnectionTimeout
_KEPT_OPEN = 5.0

#: how much longer than the limit and the model's slack a silent or busy sender stays
_PAST_SLACK = 3.0

#: after each of the generator's operations, the chance of a wire operation
WIRE_SHARE = 0.15

#: stand-ins nobody implements, for a stranger's control twin session
_STAND_INS = {"XQDISCARD": "XQNOSUCH", "XSHADOW": "XSNOSUCH"}


def _seconds(value: float) -> str:
    return f"{value:g}s"


def settings_for(labels: Sequence[str]) -> dict[str, float]:
    """The start settings a plan whose operations have these labels needs."""
    return dict(WIRE_SETTINGS) if any(label.startswith("wire ") for label in labels) else {}


class WireDrawer:
    """Draws wire operations; ``can`` says which step kinds the target performs."""

    def __init__(
        self,
        rng: random.Random,
        nodes: Sequence[str],
        recipients: Sequence[str],
        can: Callable[[str], bool],
    ) -> None:
        self.rng = rng
        self.nodes = tuple(nodes)
        self.recipients = tuple(recipients)
        self.can = can
        self.sessions = 0
        #: wire operations drawn so far
        self.drawn = 0

    def after(self, answering: Sequence[str]) -> WireOperation | None:
        """Now and then (:data:`WIRE_SHARE`), a wire operation after one of the
        generator's: it changes nothing of the cluster's state the generator follows."""
        if self.rng.random() >= WIRE_SHARE:
            return None
        drawn = self.draw(answering)
        self.drawn += drawn is not None
        return drawn

    def draw(self, answering: Sequence[str]) -> WireOperation | None:
        """One wire operation through a node that answers (None when none does)."""
        if not answering:
            return None
        via = self.rng.choice(list(answering))
        # a stranger's session costs a few round trips; the others wait seconds
        choices = [("stranger", 5), ("idle", 1), ("busy", 1), ("open_sender", 2)]
        if self.can("set_settings"):
            choices.append(("inconsistent", 2))  # an instant step
        kind = self.rng.choices([c for c, _ in choices], [w for _, w in choices])[0]
        if kind == "stranger":
            return self.stranger(via)
        if kind in ("idle", "busy"):
            return self.silent(via, busy=kind == "busy")
        if kind == "open_sender":
            return self.open_sender(via)
        return self.inconsistent()

    def stranger(self, via: str) -> WireOperation:
        """XS-3: a sender that never authenticated tries XSHADOW and XQDISCARD (and,
        half the time, a control twin with unknown verbs in their place)."""
        other = self.rng.choice([n for n in self.nodes if n != via] or [via])
        say: list[Any] = [
            "EHLO stranger.example",
            {"send": "XQDISCARD", "refused": True},
            {"send": f"XSHADOW {other}", "refused": True},
        ]
        session: dict[str, Any] = {"via": via, "say": say}
        if self.rng.random() < 0.5:
            session["control"] = dict(_STAND_INS)
            # five shadow verbs: past a limit of unknown verbs an MTA may keep (the
            # reference's is five), where a verb not counted shows
            say += ["XQDISCARD", f"XSHADOW {other}", "XQDISCARD", "NOOP"]
        say.append("QUIT")
        label = f"wire stranger tries XSHADOW/XQDISCARD on {via}"
        return (label, ({"session": session},), ("XS-3",))

    def silent(self, via: str, *, busy: bool) -> WireOperation:
        """TO-1: a sender says EHLO, then nothing (the node ends it after
        ReceiveConnectionInactivityTimeout), or only NOOPs (it ends at
        ReceiveConnectionTimeout)."""
        # past the absolute limit and the model's slack by more than the harness's own
        # lateness the model then grants (checks/model/check.py): a session the harness
        # ends just at that deadline leaves a node that never ends it unjudged
        idle = WIRE_SETTINGS["ReceiveConnectionTimeout"] + DEFAULT_SLACK + _PAST_SLACK
        session: dict[str, Any] = {"via": via, "say": ["EHLO client.test"], "idle": _seconds(idle)}
        if busy:
            session["keepalive"] = "500ms"
        label = f"wire {'busy' if busy else 'silent'} sender on {via}"
        return (label, ({"session": session},), ("TO-1",))

    def open_sender(self, via: str) -> WireOperation:
        """TO-2 / CR-8: a sender that keeps its session open (NOOPs) after a message, then
        hangs up without QUIT: the primary's session to the shadow, idle, is closed all
        the same, and the message is delivered at once."""
        self.sessions += 1
        ref = f"w{self.sessions}"
        rcpt = self.rng.choice(self.recipients)
        say: list[Any] = [
            "EHLO client.test",
            "MAIL FROM:<sender@ext.test>",
            f"RCPT TO:<{rcpt}>",
            "DATA",
            {"message": ref},
        ]
        session = {"via": via, "say": say, "idle": _seconds(_KEPT_OPEN), "keepalive": "500ms"}
        label = f"wire {ref} via {via}, sender stays connected"
        return (label, ({"session": session},), ("TO-2", "CR-8"))

    def inconsistent(self) -> WireOperation:
        """TO-3: an admin sets the idle limit at or above the absolute one (or the
        absolute one below it): the change is refused, and changes nothing."""
        inactivity = WIRE_SETTINGS["ReceiveConnectionInactivityTimeout"]
        timeout = WIRE_SETTINGS["ReceiveConnectionTimeout"]
        values = self.rng.choice(
            (
                {"ReceiveConnectionInactivityTimeout": _seconds(timeout)},
                {"ReceiveConnectionInactivityTimeout": _seconds(timeout + 3)},
                {"ReceiveConnectionTimeout": _seconds(inactivity / 2)},
            )
        )
        ((name, value),) = values.items()
        # the change names the limit it conflicts with too, at the value in force: a
        # target that cannot be given that one is never told the conflict (UNTESTABLE)
        values = {**{k: _seconds(v) for k, v in WIRE_SETTINGS.items()}, **values}
        step = {"set_settings": {"values": values, "result": "rejected"}}
        return (f"wire set {name}={value} (refused)", (step,), ("TO-3",))
