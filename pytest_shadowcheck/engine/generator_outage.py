"""Exploration's outage drills: a primary holding a message its shadow has a copy of
fails in the ways the promotion rules turn on, with the timers set so that the model can
tell a promotion that came too early from one in time.

The generator's own node faults strike the primary holding mail at random moments, for
random lengths, at whatever ShadowResubmitTimeSpan the scenario drew; and the model
grants every return its slack (checks/model/state.py), so a shadow that promotes within
a few seconds of the primary's return shows only where the span is long beside that
slack. These drills make those cases, at the start or after an operation that leaves the
cluster quiet, on a real clock, as one self-contained operation that ends healed, every
node up, the settings as they were:

- **back in time** (PR-1, PR-3): the primary, in touch with its shadow for longer than
  the span, is killed and back on its queue database after a heartbeat failed: its
  shadow must not promote (a shadow that promotes a primary heard from again, or counts
  the span from the first contact rather than the last, delivers the copy early).
- **kept down** (PR-1): the same, kept down past the promotion window: the shadow
  promotes after the span, not at the first unanswered heartbeat.
- **redundancy withdrawn** (PR-2, CR-6): an admin sets ShadowRedundancyEnabled to false
  and the primary comes back on a new queue database: its shadow still asks it for
  discards, learns the new database and promotes the copies it took before.
- **restarted holding a discard** (DI-5; :class:`RestartDrawer`, a stream and a share of
  its own): the primary delivers a message while its shadows cannot reach it, and is
  restarted on its queue database before any of them asked: back, it must still hand
  out the discard notification (a primary that keeps them only in memory leaves the
  copy in the shadow queue for good). The generator's own restarts come at random
  moments, so the one between a delivery and the shadow's next query is rare.

Their draws come from random streams of their own, after the generator's operations,
so that the other operations are drawn as without them.
"""

from __future__ import annotations

import math
import random
from collections.abc import Callable
from typing import Any

from pytest_shadowcheck.checks.model.check import DEFAULT_SLACK
from pytest_shadowcheck.engine.exploration_plan import seconds_text, settle
from pytest_shadowcheck.engine.generator_durability import Routes

__all__ = ["OUTAGE_SHARE", "RESTART_SHARE", "OutageDrawer", "RestartDrawer", "span_needed"]

#: after each of the generator's operations in a quiet cluster, the chance of a drill
OUTAGE_SHARE = 0.3
#: the drills only in scenarios this long (deep exploration's, once past its first
#: sixteen): the bounded slice's stay as they were, and within the suite's time goal
_LENGTH = 12
#: how long a killed node takes to be back and heard from, at most, on a loaded machine
_RESTART = 1.5
#: the heartbeat the drills set for themselves where the target changes settings live
#: (without, they are drawn only where the one in force is no longer than :data:`_BEAT`)
_FAST_BEAT = 0.5
_BEAT = 1.0

#: after each of the generator's operations in a quiet cluster, the chance of the
#: restart drill (once a plan; the outage drills are drawn first)
RESTART_SHARE = 0.3
#: the span the restart drill sets while its shadows are cut from the primary: longer
#: than the cut (a delivery, the slack, a restart) with a heartbeat and the slack to spare
_RESTART_SPAN = 20.0


def span_needed(kind: str, beat: float) -> float:
    """The shortest ShadowResubmitTimeSpan (whole seconds) beside which the catalogue
    model tells an early promotion in drill ``kind`` from one in time. It allows a
    promotion from the span less a beat less the slack after the primary was last
    reachable (checks/model/fates.py ``_not_early``); a shadow that promotes a returning
    primary ("back") does so a heartbeat after a return the model itself sees up to the
    slack late, the outage being a heartbeat and a half and the restart; one that counts
    the span from the first contact ("down") a heartbeat and a second of delivery after
    the kill."""
    early = 1.5 * beat + _RESTART + DEFAULT_SLACK + beat if kind == "back" else beat + 1.0
    return float(math.ceil(early + beat + DEFAULT_SLACK + 0.25))


OutageOperation = tuple[str, tuple[dict[str, Any], ...], tuple[str, ...]]


class OutageDrawer:
    """Draws one outage drill at most a plan, in deep scenarios on a real clock, where the
    target can kill and restart a node; ``can`` says which step kinds it performs."""

    def __init__(
        self,
        rng: random.Random,
        topology: dict[str, Any],
        can: Callable[[str], bool],
        preference: str,
        *,
        length: int,
    ) -> None:
        self.rng = rng
        self.routes = Routes(topology, preference)
        self.nodes = self.routes.nodes
        #: long enough and on a real clock (promotions wait on it)
        self.drawable = length >= _LENGTH and topology.get("clock", "real") != "virtual"
        self.can = can
        #: drills drawn so far (one at most)
        self.drawn = 0

    def after(
        self,
        *,
        quiet: bool,
        answering: list[str],
        timers: dict[str, float],
        reject: bool,
        redundancy: bool,
        single_holder: bool,
        recovery: float,
    ) -> OutageOperation | None:
        """Now and then (:data:`OUTAGE_SHARE`), with every node answering, a drill: its
        label, steps and behaviours. ``timers`` are the ShadowResubmitTimeSpan and
        ShadowHeartbeatFrequency in force, ``recovery`` how long the cluster needs after a
        fault at those timers (ExplorationPlan.recovery)."""
        if not (self.drawable and quiet and redundancy and self.drawn < 1):
            return None
        if not (self.can("kill") and self.can("restart")) or len(answering) != len(self.nodes):
            return None
        span = timers.get("ShadowResubmitTimeSpan")
        beat = timers.get("ShadowHeartbeatFrequency")
        vias = [n for n in self.nodes if self.routes.shadows[n]]
        if span is None or beat is None or not vias or not self.routes.everywhere:
            return None
        live = self.can("set_settings")
        if beat > _BEAT and not live:
            return None
        drill_beat = _FAST_BEAT if live else beat
        kinds = [k for k in ("back", "down") if live or span >= span_needed(k, drill_beat)]
        # a wipe loses what only the primary holds: a copy for every message (a 250 says
        # so) and none without one from before
        if live and self.can("wipe") and reject and not single_holder:
            kinds.append("withdrawn")
        if not kinds or self.rng.random() >= OUTAGE_SHARE:
            return None
        self.drawn += 1
        kind = self.rng.choice(kinds)
        via = self.rng.choice(vias)
        if kind == "withdrawn":
            return self._withdrawn(via, recovery)
        before = {"ShadowResubmitTimeSpan": span, "ShadowHeartbeatFrequency": beat}
        timed = {
            "ShadowResubmitTimeSpan": max(span, span_needed(kind, drill_beat)),
            "ShadowHeartbeatFrequency": drill_beat,
        }
        return self._outage(via, kind, before, timed, recovery)

    def _hold_and_send(self, via: str) -> list[dict[str, Any]]:
        """Cut ``via`` from its next hops and send it o1: the message stays queued on it,
        its copy on a shadow (RejectMessageOnShadowFailure is true: a 250 says so)."""
        to = self.rng.sample(list(self.routes.everywhere), 1)
        steps = self.routes.hold(via)
        steps.append({"send": {"id": "o1", "via": via, "to": to, "timeout": "20s"}})
        if self.can("snapshot"):
            # which shadow holds the copy: the model judges a promotion by one holder only
            shadows = sorted(self.routes.shadows[via])
            steps += [{"snapshot": {"node": n, "queue": "shadow"}} for n in shadows]
        return steps

    def _outage(
        self, via: str, kind: str, before: dict[str, float], timed: dict[str, float],
        recovery: float,
    ) -> OutageOperation:  # fmt: skip
        """``timed``: the timers the drill needs, set first where they differ from those
        in force (``before``), which are put back at its end."""
        steps: list[dict[str, Any]] = []
        changed = {k: v for k, v in timed.items() if v != before[k]}
        span, beat = timed["ShadowResubmitTimeSpan"], timed["ShadowHeartbeatFrequency"]
        if changed:
            steps.append(_timers(changed))
            # the change may be noticed up to the slack later: the model then reads the
            # old timers, which would leave an early promotion unjudged
            steps.append({"wait": seconds_text(DEFAULT_SLACK + 0.5)})
            recovery += max(0.0, span - before["ShadowResubmitTimeSpan"])
        steps += self._hold_and_send(via)
        # in touch for longer than the span: a shadow that counts it from the first
        # contact, not the last, promotes at the first unanswered heartbeat
        steps.append({"wait": seconds_text(span + beat)})
        steps.append({"kill": via})
        if kind == "back":
            # a heartbeat fails, then the primary is back on its queue database: the
            # shadow must keep its copy (two beats and a second to see that it does)
            steps += [{"wait": seconds_text(1.5 * beat)}, {"restart": via}]
            steps.append({"wait": seconds_text(2 * beat + 1.0)})
            what = "back after a failed heartbeat"
        else:
            steps.append({"wait": seconds_text(round(recovery + 1.0, 1))})
            # on a new queue database where the target can: only the promoted copy is left
            steps.append({"wipe" if self.can("wipe") else "restart": via})
            what = "kept down past the promotion window"
        steps += [{"heal": "all"}, settle(recovery)]
        if changed:
            steps.append(_timers({k: before[k] for k in changed}))
        label = (
            f"outage: o1 via {via} held, {via} killed after {seconds_text(span + beat)} "
            f"in touch, {what} (ShadowResubmitTimeSpan {seconds_text(span)}, "
            f"ShadowHeartbeatFrequency {seconds_text(beat)})"
        )
        return label, tuple(steps), ("PR-1", "PR-3") if kind == "back" else ("PR-1",)

    def _withdrawn(self, via: str, recovery: float) -> OutageOperation:
        off = {"set_settings": {"values": {"ShadowRedundancyEnabled": False}}}
        on = {"set_settings": {"values": {"ShadowRedundancyEnabled": True}}}
        steps = self._hold_and_send(via)
        # the change apart from the 250: o1 was surely sent with redundancy on
        steps += [{"wait": "0.5s"}, off, {"wipe": via}, settle(recovery), on]
        steps += [{"heal": "all"}, settle(recovery)]
        label = (
            f"outage: o1 via {via} held, ShadowRedundancyEnabled set false, {via} back on a "
            "new queue database"
        )
        return label, tuple(steps), ("PR-2", "CR-6")


class RestartDrawer:
    """Draws the restart drill (DI-5) at most once a plan, in deep scenarios on a real
    clock, where the target restarts a node, changes settings live and shows its queues;
    ``can`` says which step kinds it performs."""

    def __init__(
        self, rng: random.Random, topology: dict[str, Any], can: Callable[[str], bool],
        preference: str, *, length: int,
    ) -> None:  # fmt: skip
        self.rng = rng
        self.routes = Routes(topology, preference)
        self.drawable = length >= _LENGTH and topology.get("clock", "real") != "virtual"
        self.drawable &= all(can(k) for k in ("restart", "set_settings", "snapshot"))
        #: drills drawn so far (one at most)
        self.drawn = 0

    def after(
        self, *, quiet: bool, answering: list[str], timers: dict[str, float],
        redundancy: bool, recovery: float,
    ) -> OutageOperation | None:  # fmt: skip
        """Now and then (:data:`RESTART_SHARE`), in a quiet cluster (no link cut, no next
        hop scripted, every node answering), the drill: its label, steps and behaviours.
        ``timers`` are the ShadowResubmitTimeSpan and ShadowHeartbeatFrequency in force."""
        if not (self.drawable and quiet and redundancy and self.drawn < 1):
            return None
        vias = [n for n in self.routes.nodes if self.routes.shadows[n] and self.routes.routed[n]]
        if len(answering) != len(self.routes.nodes) or not vias:
            return None
        if any(k not in timers for k in _TIMERS):
            return None
        if self.rng.random() >= RESTART_SHARE:
            return None
        self.drawn += 1
        via = self.rng.choice(vias)
        to = self.rng.choice(self.routes.routed[via])
        shadows = sorted(self.routes.shadows[via])
        timed = {"ShadowResubmitTimeSpan": max(timers["ShadowResubmitTimeSpan"], _RESTART_SPAN)}
        timed["ShadowHeartbeatFrequency"] = _FAST_BEAT
        changed = {k: v for k, v in timed.items() if v != timers[k]}
        steps: list[dict[str, Any]] = []
        if changed:
            # noticed up to the slack later: the shadows must not promote during the cut
            steps += [_timers(changed), {"wait": seconds_text(DEFAULT_SLACK + 0.5)}]
        cuts = [f"{s}->{via}" for s in shadows]
        # the shadows' queries cut, not the copies (they go from the primary to them)
        steps += [{"fault": {"link": link, "kind": "cut"}} for link in cuts]
        steps.append({"send": {"id": "r1", "via": via, "to": [to], "timeout": "20s"}})
        steps.append({"wait": {"delivered": "r1", "timeout": seconds_text(recovery)}})
        # the model's restart rule (checks/model/notifications.py) wants the delivery
        # noted on disk: a restart the slack after it
        steps += [{"wait": seconds_text(DEFAULT_SLACK + 0.5)}, {"restart": via}]
        steps += [{"heal": link} for link in cuts]
        # a shadow asks within a heartbeat of the slack after the return; judged only
        # past that (the model counts the harness's own lateness as more slack)
        steps.append({"wait": seconds_text(_FAST_BEAT + 2 * DEFAULT_SLACK + 3.0)})
        steps += [{"snapshot": {"node": n, "queue": "shadow"}} for n in shadows]
        if changed:
            steps.append(_timers({k: timers[k] for k in changed}))
        steps.append(settle(recovery))
        label = (
            f"restart: r1 via {via} delivered while its shadows could not ask, {via} "
            "restarted on its queue database"
        )
        return label, tuple(steps), ("DI-5",)


_TIMERS = ("ShadowResubmitTimeSpan", "ShadowHeartbeatFrequency")


def _timers(values: dict[str, float]) -> dict[str, Any]:
    return {"set_settings": {"values": {k: seconds_text(v) for k, v in values.items()}}}
