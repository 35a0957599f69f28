"""What the catalogue model knows of one run, as SETS of what may have been in force: the
nodes (up, down, paused; their queue database), the links (ok, cut, faulty), the sinks
(accepting or not), the settings of each node and the virtual clock, over time.

A step takes effect some time between its event in the history and the next step's event
(the handler acts in between); the system under test may notice it later still, so every
change is uncertain over ``[step, next step + slack]``: a question about an interval that
overlaps such a window gets both the old and the new value. Nothing here guesses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pytest_shadowcheck.history import plain_text
from pytest_shadowcheck.scenario.durations import format_duration

if TYPE_CHECKING:
    from pytest_shadowcheck.history import History
    from pytest_shadowcheck.scenario.model import Scenario, Step

__all__ = ["DEFAULTS", "AppliedStep", "Timeline", "build_timeline"]

#: Exchange's defaults (the catalogue's reading, not any implementation's), for a setting
#: a scenario does not give
DEFAULTS: dict[str, Any] = {
    "ShadowRedundancyEnabled": True,
    "RejectMessageOnShadowFailure": False,
    "ShadowHeartbeatFrequency": 120.0,
    "ShadowResubmitTimeSpan": 3 * 3600.0,
    "SafetyNetHoldTime": 2 * 86400.0,
    "TransientFailureRetryInterval": 300.0,
    "ShadowMessagePreferenceSetting": "PreferRemote",
    "PrimarySafetyNetUnavailableTimeout": 12 * 3600.0,
}

#: fault kinds that stop every session on the link; the others may or may not
_BLOCKING = frozenset({"cut", "blackhole"})


@dataclass
class Change:
    """One change of a state, taking effect somewhere in ``[lo, hi]``."""

    lo: float
    hi: float
    value: Any


@dataclass
class AppliedStep:
    """A scenario step the run carried out: when its event was recorded (``t``) and when
    the next one was (``t_next``: its effect is done by then)."""

    index: int
    step: Step
    t: float
    t_next: float
    label: str


@dataclass
class Timeline:
    """The states of a run over time, each a list of uncertain changes from a start value."""

    scenario: Scenario
    slack: float
    steps: list[AppliedStep] = field(default_factory=list)
    #: the time of the last event of the history: no window closing after it is judged
    end: float = 0.0
    #: the wall clock (Unix epoch) at the history's t == 0: a real clock's reading
    wall0: float = 0.0
    nodes: dict[str, list[Change]] = field(default_factory=dict)
    #: node -> changes of its queue database (a counter: a wipe makes a new one)
    databases: dict[str, list[Change]] = field(default_factory=dict)
    links: dict[str, list[Change]] = field(default_factory=dict)
    sinks: dict[str, list[Change]] = field(default_factory=dict)
    #: (node, setting) -> changes of its value
    settings: dict[tuple[str, str], list[Change]] = field(default_factory=dict)
    #: virtual clock advances: (lo, hi, seconds)
    advances: list[Change] = field(default_factory=list)
    #: when a node came back after a restart or wipe (the "back after" event)
    returns: dict[str, list[float]] = field(default_factory=dict)

    # -- questions -------------------------------------------------------------------

    @staticmethod
    def _values(start: Any, changes: list[Change], a: float, b: float) -> set[Any]:
        """Every value that may have been in force at some moment of ``[a, b]``."""
        current = start
        out: set[Any] = set()
        for change in changes:
            if change.hi <= a:
                current = change.value
                continue
            if change.lo > b:
                break
            out.add(current)  # before the change, or while it is uncertain
            current = change.value
            out.add(current)
        out.add(current)
        return out

    def node_states(self, node: str, a: float, b: float) -> set[str]:
        return self._values("up", self.nodes.get(node, []), a, b)

    def database_ids(self, node: str, a: float, b: float) -> set[int]:
        return self._values(0, self.databases.get(node, []), a, b)

    def link_states(self, link: str, a: float, b: float) -> set[str]:
        return self._values("ok", self.links.get(link, []), a, b)

    def sink_states(self, sink: str, a: float, b: float) -> set[str]:
        return self._values("accepting", self.sinks.get(sink, []), a, b)

    def setting(self, node: str, name: str, a: float, b: float) -> set[Any]:
        start = self.scenario.node_setting(node, name, DEFAULTS.get(name))
        return self._values(start, self.settings.get((node, name), []), a, b)

    def one_setting(self, node: str, name: str, a: float, b: float) -> Any | None:
        """The setting's value when only one was in force over ``[a, b]``, else None."""
        values = self.setting(node, name, a, b)
        return next(iter(values)) if len(values) == 1 else None

    def setting_range(
        self, node: str, name: str, a: float, b: float, default: float | None = None
    ) -> tuple[float, float] | None:
        """The least and the most of a numeric setting's values in force over ``[a, b]``
        (``default`` for one neither the scenario nor Exchange's defaults give); None
        when one of them is not a number.

        An admin may change a timer while the cluster runs, and the catalogue does not
        say whether a wait already begun keeps the old value or takes the new one: a
        rule judged across a live change must hold for either, so a "by then" bound
        takes the most and a "not before" bound the least (a rule that asked for one
        value in force skipped every look after the change)."""
        values = {default if v is None else v for v in self.setting(node, name, a, b)}
        numbers = [float(v) for v in values if isinstance(v, int | float)]
        if not numbers or len(numbers) < len(values) or any(isinstance(v, bool) for v in values):
            return None
        return min(numbers), max(numbers)

    def wait_range(
        self, node: str, name: str, since: float, until: float
    ) -> tuple[float, float] | None:
        """:meth:`setting_range` of a periodic timer (a heartbeat) for what it may bring
        about from ``since`` to ``until``: the wait running at ``since`` began up to its
        own value before, under any value in force until then (one an admin has since
        shortened may still be running its course)."""
        before = self.setting_range(node, name, 0.0, since)
        if before is None:
            return None
        return self.setting_range(node, name, since - before[1], until)

    def changed(self, a: float, b: float, nodes: set[str], hops: bool = True) -> bool:
        """Whether anything that could change a message's path happened in ``[a, b]``
        to these nodes, the links between them, their settings, and (``hops``) their
        links to the sinks and the sinks themselves."""
        for node in nodes:
            if len(self.node_states(node, a, b)) > 1 or self.node_states(node, a, b) != {"up"}:
                return True
            for (who, _), changes in self.settings.items():
                if who == node and any(c.lo <= b and c.hi >= a for c in changes):
                    return True
        for link, changes in self.links.items():
            ends = set(link.split("->"))
            near = ends <= nodes if not hops else bool(ends & nodes)
            if near and changes and self.link_states(link, a, b) != {"ok"}:
                return True
        return hops and any(self.sink_states(s, a, b) != {"accepting"} for s in self.sinks)

    def reachable(self, src: str, dst: str, a: float, b: float) -> set[bool]:
        """Whether ``src`` could open a session to ``dst`` over ``[a, b]``: {True},
        {False} or both (a change in the window, a fault that lets some sessions by)."""
        states = self.node_states(dst, a, b)
        link = self.link_states(f"{src}->{dst}", a, b)
        out: set[bool] = set()
        if "up" in states and link & {"ok", "faulty"}:
            out.add(True)
        if states - {"up"} or link - {"ok"}:
            out.add(False)
        return out

    def virtual_elapsed(self, a: float, b: float) -> tuple[float, float]:
        """Seconds the virtual clock moved over ``[a, b]``: (at least, at most)."""
        least = sum(c.value for c in self.advances if c.lo >= a and c.hi <= b)
        most = sum(c.value for c in self.advances if c.hi >= a and c.lo <= b)
        return least, most

    def timer_elapsed(self, a: float, b: float) -> tuple[float, float]:
        """Seconds the nodes' transport timers saw pass over ``[a, b]``."""
        if self.scenario.topology.clock == "virtual":
            return self.virtual_elapsed(a, b)
        return b - a, b - a

    def timer_fired_after(self, t: float, period: float) -> float:
        """When a timer of ``period`` started at ``t`` (a shadow's next heartbeat, which
        tells it of a delivery) has surely fired: ``period`` later on a real clock; on a
        virtual one at the end of the advance that took the clock ``period`` past ``t``
        (the clock stands still between advances, and so do the timers)."""
        if self.scenario.topology.clock != "virtual":
            return t + period
        moved = 0.0
        for s in self.steps:
            if s.step.kind == "advance" and s.t >= t:
                moved += s.step.arg.seconds
                if moved >= period:
                    return s.t_next
        return self.end

    def applied_before(self, t: float) -> list[str]:
        return [s.label for s in self.steps if s.t <= t]


def _label(step: Step) -> str:
    """The step as the history shows it (engine/steps.step_label), lists written plain."""
    describe = getattr(step.arg, "describe", None)
    return plain_text(f"{step.kind} {describe()}") if callable(describe) else step.kind


def build_timeline(scenario: Scenario, history: History, slack: float) -> Timeline:
    """The timeline of ``scenario`` as ``history`` shows it was carried out."""
    events = history.events()
    line = scenario.steps
    done = [e for e in events if e.kind == "step" and "line" in e.data]
    timeline = Timeline(
        scenario, slack, end=events[-1].t if events else 0.0, wall0=history.started_at
    )
    # the i-th step event with a line is the i-th step (the engine records each before it)
    for i, (step, event) in enumerate(zip(line, done, strict=False)):
        t_next = done[i + 1].t if i + 1 < len(done) else timeline.end
        timeline.steps.append(AppliedStep(i, step, event.t, t_next, _label(step)))
    backs = [e for e in events if e.kind == "step" and " back after " in str(e.data.get("text"))]
    for event in backs:
        node = str(event.data["text"]).split(" ", 1)[0]
        timeline.returns.setdefault(node, []).append(event.t)
    wipes: dict[str, int] = {}
    for applied in timeline.steps:
        _apply(timeline, applied, wipes)
    return timeline


def _apply(tl: Timeline, applied: AppliedStep, wipes: dict[str, int]) -> None:
    step, lo = applied.step, applied.t
    # a loss of service is done when its handler returns; a return to service may be
    # noticed by the others only later (a peer marked down, a session being retried)
    hi, back_hi = applied.t_next, applied.t_next + tl.slack
    arg = step.arg
    kind = step.kind
    nodes = list(tl.scenario.topology.nodes)
    if kind in ("kill", "power_cut"):
        tl.nodes.setdefault(arg.node, []).append(Change(lo, hi, "down"))
    elif kind == "pause":
        tl.nodes.setdefault(arg.node, []).append(Change(lo, hi, "paused"))
    elif kind == "resume":
        tl.nodes.setdefault(arg.node, []).append(Change(lo, back_hi, "up"))
    elif kind in ("restart", "wipe"):
        back = min((t for t in tl.returns.get(arg.node, []) if t >= lo), default=applied.t_next)
        changes = tl.nodes.setdefault(arg.node, [])
        changes.append(Change(lo, back + tl.slack, "down"))
        changes.append(Change(lo, back + tl.slack, "up"))
        if kind == "wipe":
            wipes[arg.node] = wipes.get(arg.node, 0) + 1
            tl.databases.setdefault(arg.node, []).append(Change(lo, back, wipes[arg.node]))
    elif kind == "fault":
        state = "cut" if arg.kind in _BLOCKING else "faulty"
        tl.links.setdefault(arg.link, []).append(Change(lo, hi, state))
    elif kind == "heal":
        for link in tl.scenario.topology.links():
            if arg.link in (None, link) and tl.links.get(link):
                tl.links[link].append(Change(lo, back_hi, "ok"))
    elif kind == "sink":
        accepting = (arg.reply in (None, "accept")) and not arg.rules
        state = "accepting" if accepting else "refusing"
        tl.sinks.setdefault(arg.name, []).append(Change(lo, back_hi, state))
    elif kind == "set_settings":
        for node in arg.nodes or nodes:
            # a node down or frozen gets the change when it is back (restart, resume)
            # (as the engine sees it: every earlier step is done when this one starts)
            earlier = [c.value for c in tl.nodes.get(node, []) if c.lo < lo]
            until = hi if earlier[-1:] in ([], ["up"]) else _back(tl, node, lo)
            for name, value in arg.values.items():
                changes = tl.settings.setdefault((node, name), [])
                if arg.result == "rejected":  # the change may not take
                    continue
                changes.append(Change(lo, until, value))
    elif kind == "advance":
        tl.advances.append(Change(lo, hi, float(arg.seconds)))


def seconds(value: float) -> str:
    """A duration as the scenario files write it."""
    return format_duration(value)


def _back(tl: Timeline, node: str, since: float) -> float:
    """When ``node``, down or frozen at ``since``, is surely back (and has been given the
    changes made meanwhile): its next return after a restart, or the end of its next
    resume step, plus the slack; the end of the run if it never comes back."""
    returns = [t for t in tl.returns.get(node, []) if t >= since]
    resumes = [
        s.t_next
        for s in tl.steps
        if s.step.kind == "resume" and s.step.arg.node == node and s.t >= since
    ]
    return min([*returns, *resumes], default=tl.end) + tl.slack
