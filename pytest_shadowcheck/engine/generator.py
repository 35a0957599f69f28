"""Explored scenarios: a seeded sequence of operations on a bundled topology.

``generate(seed, index, ...)`` draws, from ``(seed, index)`` alone, a topology, start
settings with fast timers and a state-dependent sequence of operations (sends, waits,
node and link faults, scripted next hops, live setting changes, clock advances,
resubmissions), each an ordinary action step of the suite, only those the target can
perform (:data:`~pytest_shadowcheck.scenario.capabilities.STEP_CAPABILITY`). The
scenario ends with every fault healed, every node back and a wait long enough for every
timer in force, so that on a correct MTA whatever was acknowledged is delivered: the
always-on invariants (no loss, integrity) and the model check
judge it.

The operations are kept apart from the steps (engine/exploration_plan.py): shrinking
keeps a subset of the operations and the plan rebuilds a consistent scenario from it.

One node fault at a time (a kill, pause, wipe, or a cut between two nodes), and one
next-hop fault (its link cut or its replies scripted), which holds mail in the queues
while a node fails: a fault is ended, and the cluster given the time to recover
(ShadowResubmitTimeSpan and two heartbeats), before the next of its kind starts. Two
copies failing together is PR-4's case, outside the guarantee, which exploration does
not generate (:func:`untestable_by_exploration` says so).

Faults are drawn to meet where a transport earns its keep: while a next hop holds mail
back, sends go mostly through the node it holds back, and a node fault strikes that
node mostly - the primary holding acknowledged, undelivered mail. A node it kills is
either back at once (within ShadowResubmitTimeSpan: its shadow must not promote) or
kept down past the promotion window (its shadow must promote, in time, an intact
copy). Some messages carry a realistic body (engine/traffic_model.py: dot-leading and
998-octet lines), which a copy must keep as it was sent.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pytest_shadowcheck.engine import (
    generator_boundary,
    generator_durability,
    generator_groups,
    generator_heartbeat,
    generator_outage,
    generator_placement,
    generator_replay_lag,
    generator_wire,
)
from pytest_shadowcheck.engine.exploration_plan import (
    NEVER_EXPLORED,
    ClusterState,
    ExplorationPlan,
    Operation,
    explored_name,
    seconds_text,
    settle,
    topology_data,
)
from pytest_shadowcheck.engine.generator_safety_net import (
    DRILLS,
    SAFETY_NET_CAPABILITIES,
    safety_net_drill,
)
from pytest_shadowcheck.engine.traffic_model import Shape, _text_body
from pytest_shadowcheck.scenario.capabilities import CAPABILITY_NEED, STEP_CAPABILITY
from pytest_shadowcheck.scenario.model import Scenario

__all__ = [
    "EXPLORE_TOPOLOGIES",
    "Drawer",
    "ExplorationPlan",
    "Operation",
    "explored_name",
    "generate",
    "plan",
    "untestable_by_exploration",
]


#: the bundled topologies exploration draws from (the virtual one needs virtual_clock)
EXPLORE_TOPOLOGIES = (
    "two-node-dag",
    "outages-three-node",
    "two-node-dag-virtual",
    *generator_placement.TOPOLOGIES,
)

#: protocol points a ``cut_at`` strikes at on a node->node link (issue 26's points):
#: the shadow copy's final dot and its reply, the XSHADOW handshake, a discard query
_NODE_POINTS = (
    {"before_reply": "EOD"},
    {"after": "EOD"},
    {"after_reply": "EOD"},
    {"before_reply": "XSHADOW"},
    {"before_reply": "XQDISCARD"},
    {"inside_reply": "EHLO"},
)
#: ... and on a node->sink link: the delivery's final dot and its reply
_SINK_POINTS = ({"before_reply": "EOD"}, {"after": "EOD"}, {"before_reply": "RCPT"})
#: temporary refusals a next hop gives (a 5xx would bounce the message: no loss, but
#: not a delivery the no-loss invariant sees)
_TEMPFAILS = ("451 4.3.0 mailbox busy, try later", "421 4.3.2 service shutting down")
_SIZES = (None, None, 4_000, 40_000, 400_000)
#: SendConnectionInactivityTimeout (s): how soon a session to a frozen node is given up
_GIVE_UP = 1.0
#: ShadowResubmitTimeSpan at the start (s): the longest leaves a primary killed and back
#: at once well inside the span, give or take the model's slack
_SPANS = (2.0, 3.0, 4.0, 6.0)

#: how often a scenario starts with a heartbeat of :data:`_SLOW_BEAT` (s): at 0.5-1 s a
#: shadow that asks every other heartbeat stays inside the model's 2 s slack
_SLOW_BEATS = 0.25
_SLOW_BEAT = 4.0

#: how often a target with a virtual clock gets a scenario on it, besides the draw among
#: all topologies: the Safety Net's drills need it, and 300 s of exploring reached
#: about one such scenario in twelve
_VIRTUAL = 0.25
#: scenarios in which two sends carry one Message-ID (a message resent by its author, a
#: list's second copy): two messages all the same, which a duplicate filter keyed on the
#: Message-ID loses (the harness tells them apart by its trace). Deep scenarios only:
#: a queue listing cannot tell the two apart, so the model leaves them to the invariants,
#: and the bounded slice's shorter scenarios keep every message judged by the model
_SHARED_ID = 0.4
#: deep exploration's scenario length: what only its scenarios get
_DEEP = 16

#: the settings exploration changes while the cluster runs, and the values it draws
_LIVE = {
    "RejectMessageOnShadowFailure": (True, False),
    "ShadowRedundancyEnabled": (True, False),
    "ShadowHeartbeatFrequency": (0.5, 1.0),
    "ShadowResubmitTimeSpan": (2.0, 3.0, 4.0),
}

#: behaviour ID -> the capabilities exploration needs to exercise it (any one of the
#: tuples), with what it does with them; behaviours not named are exercised on any
#: target (sends and link faults need only the harness's proxies)
_NEEDS: dict[str, tuple[tuple[tuple[str, ...], ...], str]] = {
    "PR-2": ((("wipe_queue_db",),), "restarts a node on a new queue database"),
    "PR-3": ((("kill", "restart"), ("restart",)), "restarts a node on its queue database"),
    "DI-4": ((("control_api",),), "reads the shadow queue after a delivery"),
    "DI-5": (
        (("restart", "control_api"),),
        "restarts a primary on its queue database and reads its shadow's queue",
    ),
    "SN-1": ((("control_api",),), "reads the primary's Safety Net"),
    "SN-2": ((("control_api",),), "reads the shadow's Shadow Safety Net"),
    "SN-3": ((("virtual_clock", "control_api"),), "moves the clock past SafetyNetHoldTime"),
    "SN-5": ((("control_api",),), "asks for a resubmission from Safety Net"),
    "CR-6": ((("set_settings",),), "turns shadow redundancy off while the cluster runs"),
    # the Safety Net drills (engine/generator_safety_net.py)
    "SN-4": (
        ((*SAFETY_NET_CAPABILITIES, *DRILLS["expiry"]),),
        "moves the clock to just short of SafetyNetHoldTime + MessageExpirationTimeout",
    ),
    "SN-7": (
        ((*SAFETY_NET_CAPABILITIES, *DRILLS["broadcast"]),),
        "kills a primary and moves the clock past the 12 hours of a resubmission request",
    ),
    "SN-8": (
        ((*SAFETY_NET_CAPABILITIES, *DRILLS["recreated"]),),
        "recreates a primary's queue database before a resubmission request",
    ),
    "SN-11": (
        ((*SAFETY_NET_CAPABILITIES, *DRILLS["broadcast"], "categoriser_stamp"),),
        "has a Shadow Safety Net resubmit a message and reads the categoriser's stamp",
    ),
    "TO-3": ((("set_settings",),), "sets inconsistent session timeouts while the cluster runs"),
    "SN-10": (
        (("virtual_clock", "control_api", "set_settings", "kill", "restart"),),
        "changes a distribution group before a Shadow Safety Net resubmits a message to it",
    ),
    "SN-6": (
        (("set_settings", "control_api"),),
        "sets ReplayLagTime while the cluster runs and reads the configuration warnings",
    ),
    "DI-6": (
        (tuple(sorted(generator_boundary.EXPIRY_CAPABILITIES)),),
        "kills a shadow and moves the clock past ShadowMessageAutoDiscardInterval",
    ),
}


def untestable_by_exploration(capabilities: frozenset[str]) -> dict[str, str]:
    """Behaviour ID -> why exploration cannot exercise it on a target with these
    capabilities (the operations it would need are never generated for it)."""
    out = dict(NEVER_EXPLORED)
    for bid, (options, does) in _NEEDS.items():
        if any(set(need) <= capabilities for need in options):
            continue
        missing = sorted({c for need in options for c in need} - capabilities)
        # CAPABILITY_NEED says what each capability lets the harness do or see
        out[bid] = f"exploration {does}; this target lacks " + "; ".join(
            f"{c} ({CAPABILITY_NEED[c]})" for c in missing
        )
    return dict(sorted(out.items()))


class Drawer:
    """Draws one plan's operations; ``can`` says which step kinds the target performs."""

    def __init__(self, rng: random.Random, topology: str, capabilities: frozenset[str]):
        self.rng = rng
        self.capabilities = capabilities
        data = topology_data(topology)
        self.nodes = tuple(data["nodes"])
        self.recipients = tuple(data["directory"]["recipients"])
        self.databases: dict[str, str] = dict(data["directory"]["recipients"])
        hops = data.get("next_hops", {})
        self.sinks = tuple(sorted({h["sink"] for h in hops.values() if h.get("sink")}))
        self.virtual = data.get("clock") == "virtual"
        self.state = ClusterState(self.nodes)
        self.sent = 0
        #: a message may have been acknowledged with a single holder (redundancy off, or
        #: acknowledged without a copy): losing a node's queue database would lose it, PR-4
        self.single_holder = False
        self.redundancy = True
        self.reject = True
        #: the timers exploration changes live, as in force now (the start's: plan())
        self.timers: dict[str, float] = {}
        #: how long the cluster needs after a fault ends (ExplorationPlan.recovery)
        self.recovery = 10.0
        self.resubmits = 0
        #: the Safety Net drills drawn so far (a second of one kind finds little new)
        self.drilled: set[str] = set()
        #: whether the split-discards drill ran (once a scenario)
        self.split = False
        #: nodes that accepted mail while a next-hop fault was on: they may hold it
        self.holding: set[str] = set()
        #: the node fault on was already waited out past the promotion window
        self.outlasted = False
        #: a burst was sent (once a plan: it costs a few seconds)
        self.bursts = 0
        #: plain sends drawn so far, and the two of them (1-based) that share one
        #: Message-ID, with that ID (none: every send has its own)
        self.plain = 0
        self.shared_id: tuple[frozenset[int], str] | None = None
        self.shared_via: str | None = None

    def can(self, kind: str) -> bool:
        need = STEP_CAPABILITY.get(kind)
        return need is None or need in self.capabilities

    def node(self) -> str:
        return self.rng.choice(self.nodes)

    def held_back(self) -> list[str]:
        """Nodes a cut next-hop link holds mail back on (a scripted sink holds it on
        every node)."""
        return sorted({link.partition("->")[0] for link in self.state.hop_links()})

    def send(self) -> Operation:
        self.sent += 1
        ref = f"m{self.sent}"
        answering = self.state.answering() or list(self.nodes)
        count = self.rng.choice((1, 1, 2, 3))
        to = self.rng.sample(self.recipients, min(count, len(self.recipients)))
        held = [n for n in self.held_back() if n in answering]
        via = self.rng.choice(held if held and self.rng.random() < 0.7 else answering)
        spec: dict[str, Any] = {"id": ref, "via": via, "to": to}
        self.plain += 1
        if self.shared_id is not None and self.plain in self.shared_id[0]:
            spec["message_id"] = self.shared_id[1]
            # resent to the node that took the first, as to one MX (drawn all the same)
            first = self.shared_via or via
            via = spec["via"] = self.shared_via = first if first in answering else via
        if self.state.faulted("hop"):
            self.holding.add(via)
        if self.rng.random() < 0.3:
            # a realistic body: the lines a copy or a promotion may get wrong
            shape = Shape(dot_lines=self.rng.randint(0, 2), long_lines=self.rng.randint(0, 2))
            target = self.rng.choice((300, 3_000))
            body = _text_body(self.rng, shape, target, eight_bit=False).decode("ascii")
            spec["body"] = body.replace("\r\n", "\n")
        else:
            size = self.rng.choice(_SIZES)
            if size:
                spec["size"] = size
        # a node that cannot make a copy answers within SendConnectionInactivityTimeout
        spec["timeout"] = "20s"
        return Operation(f"send {ref} via {spec['via']}", ({"send": spec},), behaviours=("CR-1",))

    def burst(self) -> Operation:
        """More messages through one node than a handful, one after another, while a
        next hop holds them back: what a discard answer, a shadow queue or a restart's
        reload then holds is more than one page of sixteen."""
        via = self.rng.choice([n for n in self.held_back() if n in self.state.answering()])
        first = self.sent + 1
        steps = []
        for _ in range(self.rng.randint(17, 24)):
            self.sent += 1
            to = [self.rng.choice(self.recipients)]
            steps.append({"send": {"id": f"m{self.sent}", "via": via, "to": to, "timeout": "20s"}})
        self.holding.add(via)
        self.bursts += 1
        label = f"send m{first}..m{self.sent} via {via}"
        return Operation(label, tuple(steps), behaviours=("CR-1", "DI-2"))

    def wait(self) -> Operation:
        seconds = self.rng.choice((0.2, 0.5, 1.0, 1.5))
        return Operation(f"wait {seconds:g}s", ({"wait": seconds_text(seconds)},))

    def outlast(self) -> Operation:
        """A node down or frozen past the promotion window: time for its shadow to
        promote and deliver (``recovery`` covers the span, two heartbeats and a retry; a
        heartbeat to a frozen node gives up only after SendConnectionInactivityTimeout)."""
        self.outlasted = True
        if self.state.down:
            seconds = round(self.recovery + 1.0, 1)
            label = f"{sorted(self.state.down)[0]} down"
        else:
            seconds = round(self.recovery + 1.0 + _GIVE_UP, 1)
            label = f"{sorted(self.state.paused)[0]} paused"
        return Operation(f"wait {seconds:g}s ({label})", ({"wait": seconds_text(seconds)},))

    def start_fault(self, category: str) -> Operation:
        """A node fault (``node``: a kill, pause, restart, wipe, or a cut between two
        nodes) or a next-hop fault (``hop``: its link cut, or its replies scripted), in a
        cluster that has none of that category: a node fault while a next hop holds the
        mail back is where copies matter."""
        node = self.node()
        holding = sorted(self.holding)
        strike = category == "node" and bool(holding) and self.rng.random() < 0.85
        if strike:
            node = self.rng.choice(holding)  # the primary holding undelivered mail
        other = self.rng.choice([n for n in self.nodes if n != node])
        sink = self.rng.choice(self.sinks)
        if category == "hop":
            self.holding = set()
            return self._hop_fault(node, sink)
        self.outlasted = False
        choices: list[tuple[str, int]] = [("cut_node", 1), ("point", 2)]
        if self.can("kill") and self.can("restart"):
            # killing the primary that holds the mail is what PR-1 and PR-3 are about
            choices += [("kill", 12 if strike else 3), ("restart", 4 if strike else 2)]
        if self.can("pause"):
            choices.append(("pause", 2))
        if self.can("wipe") and not self.single_holder:
            choices.append(("wipe", 4))
        if self.can("power_cut") and self.can("restart") and not self.single_holder:
            choices.append(("power_cut", 1))
        kind = self.rng.choices([c for c, _ in choices], [w for _, w in choices])[0]
        if kind == "kill":
            return Operation(f"kill {node}", ({"kill": node},), ("down", node), ("PR-1", "PR-3"))
        if kind == "power_cut":
            return Operation(f"power_cut {node}", ({"power_cut": node},), ("down", node), ("PR-1",))
        if kind == "pause":
            return Operation(f"pause {node}", ({"pause": node},), ("pause", node), ("PR-1", "CR-4"))
        if kind in ("restart", "wipe"):
            behaviours = ("PR-3",) if kind == "restart" else ("PR-2",)
            steps = ({kind: node}, settle(self.recovery))
            return Operation(f"{kind} {node}", steps, ("up", node), behaviours)
        link = f"{node}->{other}"
        if kind == "cut_node":
            step = {"fault": {"link": link, "kind": "cut"}}
            return Operation(f"cut {link}", (step,), ("cut", link), ("CR-4", "CR-5", "PR-1"))
        point = dict(self.rng.choice(_NODE_POINTS))
        fault: dict[str, Any] = {"link": link, "kind": "cut_at", "point": point}
        ((place, verb),) = point.items()
        label = f"cut {link} {place} {verb}"
        return Operation(label, ({"fault": fault},), ("cut", link), ("CR-3", "DI-2"))

    def _hop_fault(self, node: str, sink: str) -> Operation:
        # a cut link holds mail on one node only: its shadow can deliver a promoted copy
        kind = self.rng.choice(("cut", "cut", "cut", "point", "tempfail", "tempfail"))
        link = f"{node}->{sink}"
        if kind == "cut":
            step = {"fault": {"link": link, "kind": "cut"}}
            return Operation(f"cut {link}", (step,), ("cut", link), ("DI-1",))
        if kind == "point":
            point = dict(self.rng.choice(_SINK_POINTS))
            fault: dict[str, Any] = {"link": link, "kind": "cut_at", "point": point}
            ((place, verb),) = point.items()
            label = f"cut {link} {place} {verb}"
            return Operation(label, ({"fault": fault},), ("cut", link), ("DI-1",))
        # a next hop refusing for a while: one recipient's RCPT, or the end of DATA
        reply = self.rng.choice(_TEMPFAILS)
        if self.rng.random() < 0.5:
            rcpt = self.rng.choice(self.recipients)
            spec: dict[str, Any] = {"name": sink, "rcpt": {rcpt: reply}}
            label = f"{sink} refuses RCPT {rcpt} with {reply[:3]}"
        else:
            spec = {"name": sink, "data": reply}
            label = f"{sink} refuses DATA with {reply[:3]}"
        return Operation(label, ({"sink": spec},), ("script", sink), ("DI-1",))

    def end_fault(self, category: str) -> Operation:
        state = self.state
        wait = settle(self.recovery)
        if category == "node" and state.down:
            node = sorted(state.down)[0]
            wipe = self.can("wipe") and not self.single_holder and self.rng.random() < 0.3
            how = "wipe" if wipe else "restart"
            ids = ("PR-2",) if how == "wipe" else ("PR-3",)
            return Operation(f"{how} {node}", ({how: node}, wait), ("up", node), ids)
        if category == "node" and state.paused:
            node = sorted(state.paused)[0]
            return Operation(
                f"resume {node}", ({"resume": node}, wait), ("resume", node), ("PR-1",)
            )
        links = sorted(state.node_links() if category == "node" else state.hop_links())
        if links:
            return Operation(f"heal {links[0]}", ({"heal": links[0]}, wait), ("heal", links[0]))
        sink = sorted(state.scripted)[0]
        step = {"sink": {"name": sink, "reply": "accept"}}
        return Operation(f"{sink} accepts again", (step, wait), ("unscript", sink))

    def set_settings(self) -> Operation:
        name = self.rng.choice(sorted(_LIVE))
        value = self.rng.choice(_LIVE[name])
        in_force = {
            "ShadowRedundancyEnabled": self.redundancy,
            "RejectMessageOnShadowFailure": self.reject,
            **self.timers,
        }
        if value == in_force.get(name):
            # a change to the value in force tests nothing: the other one (the same draw
            # from the stream, so that the operations after it stay as they were)
            value = next(v for v in _LIVE[name] if v != value)
        if name in self.timers:
            self.timers[name] = float(value)
        if name == "ShadowRedundancyEnabled":
            self.redundancy = bool(value)
        if name == "RejectMessageOnShadowFailure":
            self.reject = bool(value)
        if name == "ShadowRedundancyEnabled" and not value:
            self.single_holder = True
        if name == "RejectMessageOnShadowFailure" and not value:
            self.single_holder = True
        shown = seconds_text(value) if isinstance(value, float) else value
        step = {"set_settings": {"values": {name: shown}}}
        ids = {
            "ShadowRedundancyEnabled": ("CR-6",),
            "RejectMessageOnShadowFailure": ("CR-4", "CR-5"),
        }
        return Operation(f"set {name}={str(shown).lower()}", (step,), behaviours=ids.get(name, ()))


def plan(
    seed: int,
    index: int,
    *,
    capabilities: frozenset[str],
    length: int,
    topologies: Sequence[str] = EXPLORE_TOPOLOGIES,
) -> ExplorationPlan:
    """The operations of explored scenario ``index`` of ``seed``: deterministic."""
    rng = random.Random(f"shadowcheck-explore:{seed}:{index}")
    usable = [
        t
        for t in topologies
        if topology_data(t).get("clock", "real") != "virtual" or "virtual_clock" in capabilities
    ]
    topology = rng.choice(usable)
    virtual = [t for t in usable if topology_data(t).get("clock") == "virtual"]
    if virtual and random.Random(f"shadowcheck-explore-clock:{seed}:{index}").random() < _VIRTUAL:
        # a drill on the virtual clock more often than one topology in seven (its own
        # stream: the scenarios it leaves alone stay as they were)
        topology = rng.choice(virtual)
    settings: dict[str, Any] = {
        "ShadowHeartbeatFrequency": rng.choice((0.5, 1.0)),
        "ShadowResubmitTimeSpan": rng.choice(_SPANS),
        "TransientFailureRetryInterval": 0.5,
        # a heartbeat or a copy to a frozen node gives up after this
        "SendConnectionInactivityTimeout": _GIVE_UP,
        "RejectMessageOnShadowFailure": rng.random() < 0.75,
    }
    settings.update(generator_placement.start_settings(rng, topology_data(topology)))
    settings.update(
        generator_placement.single_site_preference(
            random.Random(f"shadowcheck-explore-preference:{seed}:{index}"), topology_data(topology)
        )
    )
    if random.Random(f"shadowcheck-explore-heartbeat:{seed}:{index}").random() < _SLOW_BEATS:
        # a heartbeat long beside the model's slack: a shadow asking half as often shows
        # (its own stream: the other draws stay as they were)
        settings["ShadowHeartbeatFrequency"] = _SLOW_BEAT
    if topology_data(topology).get("clock") == "virtual":
        settings["SafetyNetHoldTime"] = rng.choice((600.0, 3600.0))
    drawer = Drawer(rng, topology, capabilities)
    drawer.reject = bool(settings["RejectMessageOnShadowFailure"])
    drawer.timers = {k: float(v) for k in _LIVE if isinstance(v := settings.get(k), float)}
    shared = random.Random(f"shadowcheck-explore-message-id:{seed}:{index}")
    if length >= _DEEP and shared.random() < _SHARED_ID:
        # its own stream, and only what the sends say changes: every draw stays as it was
        first = shared.randint(2, 3)
        drawer.shared_id = (
            frozenset({first, first + shared.randint(1, 3)}),
            f"<explore.s{seed}.{index}.resent@shadowcheck.test>",
        )
    drawer.single_holder = not drawer.reject
    preference = str(settings.get("ShadowMessagePreferenceSetting", "PreferRemote"))
    # wire operations come in addition, from a stream of their own: the others stay as drawn
    wire_rng = random.Random(f"shadowcheck-explore-wire:{seed}:{index}")
    wire = generator_wire.WireDrawer(wire_rng, drawer.nodes, drawer.recipients, drawer.can)
    # power cuts after a lone 250 (engine/generator_durability.py), from their own stream
    durable_rng = random.Random(f"shadowcheck-explore-durability:{seed}:{index}")
    durable = generator_durability.DurabilityDrawer(
        durable_rng,
        topology_data(topology),
        drawer.can,
        preference,
        random.Random(f"shadowcheck-explore-disk:{seed}:{index}"),
        random.Random(f"shadowcheck-explore-bounce:{seed}:{index}"),
    )
    lag_rng = random.Random(f"shadowcheck-explore-replay-lag:{seed}:{index}")
    lagged = generator_replay_lag.ReplayLagDrawer(lag_rng, drawer.nodes, drawer.can)
    group_rng = random.Random(f"shadowcheck-explore-groups:{seed}:{index}")
    grouped = generator_groups.GroupDrawer(group_rng, topology_data(topology), drawer.can)
    boundary = generator_boundary.BoundaryDrawer(
        random.Random(f"shadowcheck-explore-boundary:{seed}:{index}"), drawer.nodes,
        drawer.recipients, generator_boundary.sinks_of(topology_data(topology)), capabilities,
        virtual=drawer.virtual, length=length,
    )  # fmt: skip
    attempts = generator_placement.AttemptsDrawer(
        random.Random(f"shadowcheck-explore-attempts:{seed}:{index}"),
        topology_data(topology),
        length=length,
    )
    retimed = generator_heartbeat.HeartbeatChangeDrawer(
        random.Random(f"shadowcheck-explore-heartbeat-change:{seed}:{index}"),
        topology_data(topology),
        drawer.can,
    )
    outage = generator_outage.OutageDrawer(
        random.Random(f"shadowcheck-explore-outage:{seed}:{index}"),
        topology_data(topology),
        drawer.can,
        preference,
        length=length,
    )
    restarted = generator_outage.RestartDrawer(
        random.Random(f"shadowcheck-explore-restart:{seed}:{index}"),
        topology_data(topology),
        drawer.can,
        preference,
        length=length,
    )
    ops: list[Operation] = []
    temp = ExplorationPlan(seed, index, topology, settings, ops, capabilities)
    ops += [Operation(*added) for added in boundary.first(temp.recovery(ops))]
    if not ops and random.Random(f"shadowcheck-explore-split:{seed}:{index}").random() < 0.5:
        # half the scenarios where one primary's copies can be split over two shadows
        # start with the split-discards drill (drawn later, it is rarely drawn at all)
        for opening in _split(drawer, topology, settings):
            drawer.state.apply(opening.effect)
            ops.append(opening)

    def fail_primary() -> None:
        """An outage or restart drill (engine/generator_outage.py), now and then in a quiet
        cluster."""
        state = drawer.state
        failed = outage.after(
            quiet=state.quiet(), answering=state.answering(), timers=drawer.timers,
            reject=drawer.reject, redundancy=drawer.redundancy,
            single_holder=drawer.single_holder, recovery=temp.recovery(ops),
        ) or restarted.after(
            quiet=state.quiet(), answering=state.answering(), timers=drawer.timers,
            redundancy=drawer.redundancy, recovery=temp.recovery(ops),
        )  # fmt: skip
        if failed:
            ops.append(Operation(failed[0], failed[1], behaviours=failed[2]))

    # the cluster is quiet at the start: a drill may open the scenario
    fail_primary()

    def drawn_apart() -> int:  # what the drills of their own streams added
        drills = wire.drawn + durable.drawn + lagged.drawn + grouped.drawn + boundary.drawn
        return drills + attempts.drawn + retimed.drawn + outage.drawn + restarted.drawn

    while len(ops) - drawn_apart() < length:
        drawer.recovery = temp.recovery(ops)
        quiet = drawer.state.quiet()
        weights: list[tuple[str, int]] = [("send", 5), ("wait", 1)]
        # next-hop faults last: a node fault while mail is held back is what copies are
        # for, so node faults start mostly then
        held = drawer.state.faulted("hop") and bool(drawer.holding)
        for category, start, end in (("node", 6 if held else 1, 3), ("hop", 3, 1)):
            on = drawer.state.faulted(category)
            weights.append(("end_" + category, end) if on else ("start_" + category, start))
        # a frozen primary outlasted in deep scenarios only: the wait would make the
        # bounded slice longer, and its plans are the ones certified
        outages = drawer.state.down | (drawer.state.paused if length >= _DEEP else set())
        if outages & drawer.holding and not drawer.outlasted:
            # a primary down or frozen holding mail: as likely kept past the promotion
            # window as brought back (a long wait elsewhere costs time and finds nothing
            # new); a frozen one still accepts connections, and a heartbeat must give up
            weights.append(("outlast", 3))
        if set(drawer.held_back()) & set(drawer.state.answering()) and not drawer.bursts:
            # released together when the link heals: one discard answer names them all
            weights.append(("burst", 1))
        if drawer.can("set_settings"):
            weights.append(("settings", 1))
        # placement and forks (engine/generator_placement.py)
        weights.append(("bounce", 1))
        if not drawer.state.faulted("node") and generator_placement.placement_vias(
            topology_data(topology), drawer.state.answering()
        ):
            weights.append(("placement", 2))
        if quiet and _split_vias(drawer, topology):
            # one primary's copies on two shadows, one frozen as both discards fall due
            weights.append(("split", 3))
        if not drawer.state.faulted("hop"):
            # where messages fork over next hops, the deferred fork is the topology's point
            # (CR-10: the copy kept until every fork is done)
            forking = generator_placement.forks(topology_data(topology))
            weights.append(("refuse", 3 if forking else 1))
        unrouted = generator_placement.unrouted(topology_data(topology))
        # a copy without a route waits (PR-5): the one node that routes the domain is its
        # only deliverer, whose queue database exploration must not lose (PR-4)
        drawer.single_holder = drawer.single_holder or bool(unrouted)
        if unrouted and not drawer.state.faulted("node") and drawer.can("kill"):
            weights.append(("without_route", 3))
        if drawer.virtual and drawer.can("advance"):
            weights.append(("advance", 1))
        if drawer.can("resubmit") and quiet and drawer.resubmits < 1:
            weights.append(("resubmit", 1))
        drills = _drills(drawer, quiet)
        if drills:
            weights.append(("safety_net", 8))
        kind = rng.choices([k for k, _ in weights], [w for _, w in weights])[0]
        op: Operation | None
        if kind == "send":
            op = drawer.send()
        elif kind == "wait":
            op = drawer.wait()
        elif kind == "burst":
            op = drawer.burst()
        elif kind == "outlast":
            op = drawer.outlast()
        elif kind.startswith("start_"):
            op = drawer.start_fault(kind.partition("_")[2])
        elif kind.startswith("end_"):
            op = drawer.end_fault(kind.partition("_")[2])
        elif kind == "settings":
            op = drawer.set_settings()
        elif kind == "bounce":
            drawer.sent += 1
            answering = drawer.state.answering() or list(drawer.nodes)
            # mostly through a node a next hop holds mail back on, as sends go
            held_back = [n for n in drawer.held_back() if n in answering]
            pool = held_back if held_back and rng.random() < 0.7 else answering
            op = Operation(
                *generator_placement.bounce_send(
                    rng, f"m{drawer.sent}", pool, drawer.recipients, topology_data(topology)
                )
            )
            if drawer.state.faulted("hop"):
                drawer.holding.add(op.steps[0]["send"]["via"])
        elif kind == "placement":
            drawer.sent += 1
            vias = generator_placement.placement_vias(
                topology_data(topology), drawer.state.answering()
            )
            op = Operation(
                *generator_placement.placement_send(rng, f"m{drawer.sent}", vias, drawer.recipients)
            )
            if drawer.state.faulted("hop"):
                drawer.holding.add(op.steps[0]["send"]["via"])
        elif kind == "split":
            *split, op = _split(drawer, topology, settings)
            for extra in split:
                drawer.state.apply(extra.effect)
                ops.append(extra)
        elif kind == "without_route":
            drawer.sent += 1
            for drawn in generator_placement.without_route(
                rng,
                f"m{drawer.sent}",
                drawer.recovery,
                topology_data(topology),
                hold=not drawer.state.faulted("hop") and len(ops) - drawn_apart() + 2 <= length,
            ):
                op = Operation(*drawn)
                drawer.state.apply(op.effect)
                ops.append(op)
            continue
        elif kind == "refuse":
            drawer.sent += 1
            via = rng.choice(drawer.state.answering() or list(drawer.nodes))
            drawn = generator_placement.refuse_for_good(
                rng, f"m{drawer.sent}", via, topology_data(topology)
            )
            op = Operation(*drawn)
        elif kind == "safety_net":
            *before, op = _drill(drawer, drills, settings)
            for extra in before:
                drawer.state.apply(extra.effect)
                ops.append(extra)
        elif kind == "advance":
            minutes = rng.choice((1, 5, 20, 45))
            op = Operation(
                f"advance {minutes}m", ({"advance": f"{minutes}m"},), behaviours=("SN-3",)
            )
        else:
            node = drawer.node()
            database = rng.choice(
                sorted(set(topology_data(topology)["directory"]["recipients"].values()))
            )
            step = {"resubmit": {"node": node, "database": database, "start": "-1h", "end": "now"}}
            op = Operation(f"resubmit {database} on {node}", (step,), behaviours=("SN-5",))
            drawer.resubmits += 1
        if op is None:
            continue
        if kind == "end_hop":
            drawer.holding = set()  # what it held goes out in the recovery's wait
        if drawer.state.faulted("hop") and any(k in op.steps[0] for k in ("wipe", "power_cut")):
            # a queue lost while mail is held back: the messages it held copies of, or
            # was primary for, may have a single holder until the hop delivers them
            drawer.single_holder = True
        drawer.state.apply(op.effect)
        ops.append(op)
        if kind.startswith("end_") and drawer.state.quiet() and drawer.reject and drawer.redundancy:
            # a fault ended and the recovery waited with nothing held back: whatever had a
            # single holder is delivered, and every message from now on gets a copy
            drawer.single_holder = False
        wired = wire.after(drawer.state.answering())
        if wired:
            ops.append(Operation(wired[0], wired[1], behaviours=wired[2]))
        drill = durable.after(
            quiet=drawer.state.quiet(),
            reject=drawer.reject,
            redundancy=drawer.redundancy,
            recovery=temp.recovery(ops),
            length=length,
        )
        if drill:
            ops.append(Operation(drill[0], drill[1], behaviours=drill[2]))
        counted = attempts.after(quiet=drawer.state.quiet(), answering=drawer.state.answering())
        if counted:
            ops.append(Operation(counted[0], counted[1], behaviours=counted[2]))
        hold = float(settings.get("SafetyNetHoldTime", 2 * 86400.0))
        changed = lagged.after(drawer.state.answering(), hold)
        if changed:
            ops.append(Operation(changed[0], changed[1], behaviours=changed[2]))
        # the group drill's directory change leaves out the rules of its own message
        # and the whole run's (checks/model), the other messages' judged as without it
        regrouped = grouped.after(
            quiet=drawer.state.quiet(),
            answering=drawer.state.answering(),
            recovery=temp.recovery(ops),
            length=length,
        )
        if regrouped:
            ops.append(Operation(regrouped[0], regrouped[1], behaviours=regrouped[2]))
        state = drawer.state
        quiet, copies = state.quiet(), drawer.redundancy
        for added in boundary.after(state.answering(), quiet, drawer.recovery, copies=copies):
            state.apply(added.effect)
            ops.append(Operation(*added))
        beat = drawer.timers.get("ShadowHeartbeatFrequency")
        changed_beat = retimed.after(
            quiet=state.quiet(), answering=state.answering(), beat=beat, redundancy=copies
        )
        if changed_beat:
            ops.append(Operation(changed_beat[0], changed_beat[1], behaviours=changed_beat[2]))
        fail_primary()
    settings.update(generator_wire.settings_for([op.label for op in ops]))
    settings.update(boundary.settings())
    return temp


def _split_vias(drawer: Drawer, topology: str) -> list[str]:
    """The nodes the split-discards drill may go through now (none once it ran, or where
    the target cannot pause a node or change a setting while it runs)."""
    if drawer.split or not (drawer.can("pause") and drawer.can("set_settings")):
        return []
    return generator_placement.splits(topology_data(topology), drawer.state.answering())


def _split(drawer: Drawer, topology: str, settings: dict[str, Any]) -> list[Operation]:
    """The split-discards drill (engine/generator_placement.py) where the topology and
    the target allow it (none elsewhere)."""
    vias = _split_vias(drawer, topology)
    if not vias:
        return []
    drawer.sent += 1
    drawer.split = True
    preference = str(settings.get("ShadowMessagePreferenceSetting", "PreferRemote"))
    drawn = generator_placement.split_discards(
        drawer.rng, f"m{drawer.sent}", vias, topology_data(topology), preference
    )
    return [Operation(*d) for d in drawn]


def _drills(drawer: Drawer, quiet: bool) -> list[str]:
    """The Safety Net drills (engine/generator_safety_net.py) the target can do now: once
    a plan or twice, on a virtual clock, in a quiet cluster, never where a wipe could lose
    mail."""
    if not (drawer.virtual and quiet and drawer.resubmits < 2):
        return []
    have = drawer.capabilities
    kinds = [k for k, need in DRILLS.items() if SAFETY_NET_CAPABILITIES | need <= have]
    # "taken": one next hop for every recipient, of two databases at least
    one_hop = len(drawer.sinks) == 1 and len(set(drawer.databases.values())) > 1
    return [
        k
        for k in kinds
        if (k != "recreated" or not drawer.single_holder)
        and (k != "taken" or one_hop)
        and k not in drawer.drilled
    ]


def _drill(drawer: Drawer, kinds: list[str], settings: dict[str, Any]) -> list[Operation]:
    drawer.resubmits += 1
    drawer.sent += 1
    kind = drawer.rng.choice(kinds)
    drawer.drilled.add(kind)
    databases = {r: str(d) for r, d in drawer.databases.items()}
    drill = safety_net_drill(
        drawer.rng, kinds=[kind], nodes=drawer.nodes, databases=databases, sinks=drawer.sinks,
        ref=f"m{drawer.sent}", recovery=drawer.recovery, hold=float(settings["SafetyNetHoldTime"]),
        beat=drawer.timers.get("ShadowHeartbeatFrequency", 1.0),
    )  # fmt: skip
    return [Operation(*drawn) for drawn in drill]


def generate(
    seed: int,
    index: int,
    *,
    capabilities: frozenset[str],
    length: int,
    topologies: Sequence[str] = EXPLORE_TOPOLOGIES,
    directory: Path | None = None,
) -> Scenario:
    """Explored scenario ``index`` of ``seed`` (named ``explore_s{seed}_{index:03d}``):
    ``length`` operations a target with ``capabilities`` can perform."""
    return plan(
        seed, index, capabilities=capabilities, length=length, topologies=topologies
    ).scenario(directory=directory)
