"""An executable model of the catalogue: a second, independent reading of BEHAVIOURS.md
that judges a whole run (the ``model`` expectation).

Pure: a function of the scenario and its history. :mod:`.state` keeps every state the
run may have been in over time (a step takes effect somewhere in a window; the system
notices within the slack), :mod:`.replay` reads what was observed (replies, deliveries,
queues the harness looked at), :mod:`.rules` and :mod:`.fates` are the catalogue's rules,
each citing its behaviour ID. A rule decides only when the states leave one outcome; the
first observation outside the allowed outcomes is the divergence.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from pytest_shadowcheck.checks.model import (
    broadcast,
    categorisation,
    config_warnings,
    discard_expiry,
    expiry,
    fates,
    groups,
    heartbeats,
    notifications,
    placement,
    protocol,
    refusals,
    resubmission,
    routes,
    sessions,
    wire,
)
from pytest_shadowcheck.checks.model.replay import observe
from pytest_shadowcheck.checks.model.rules import Divergence, Judge, disabled_rule, reply_rule
from pytest_shadowcheck.checks.model.state import DEFAULTS, build_timeline

if TYPE_CHECKING:
    from pytest_shadowcheck.history import History
    from pytest_shadowcheck.scenario.model import Scenario

__all__ = ["MODEL_BEHAVIOURS", "Divergence", "ModelOutcome", "explain", "touched_by", "unmodelled"]

#: the behaviour IDs the model has rules for
MODEL_BEHAVIOURS: tuple[str, ...] = (
    "CR-1",
    "CR-3",
    "CR-4",
    "CR-5",
    "CR-6",
    "CR-7",
    "CR-10",
    "DI-2",
    "DI-5",
    "PR-1",
    "PR-2",
    "PR-3",
    "PR-4",
    "PR-5",
    "SN-1",
    "SN-2",
    "SN-3",
    "SN-4",
    "SN-5",
    "SN-7",
    "SN-8",
    "SN-9",
    "SN-11",
    "SN-12",
    "XS-1",
    # wire.py
    "CR-8",
    "DI-1",
    "DI-3",
    "TO-1",
    "TO-2",
    "TO-4",
    "XS-3",
    # config_warnings.py, groups.py
    "SN-6",
    "SN-10",
    # discard_expiry.py, sessions.py
    "DI-6",
    "CR-2",
)

#: the step kinds whose effect the model follows
MODELLED_STEPS = frozenset(
    {
        "send",
        "wait",
        "kill",
        "restart",
        "wipe",
        "pause",
        "resume",
        "power_cut",
        "fault",
        "heal",
        "sink",
        "set_settings",
        # a queue disk full or failing: the messages sent until it is freed are left to
        # the invariants (replay.py), the rest judged as ever
        "disk_full",
        "disk_error",
        "disk_ok",
        "advance",
        "resubmit",
        "snapshot",
        "check",
        "note",
    }
)

#: every behaviour the model judges: what an unmodelled thing touches unless said below
_ALL = frozenset(MODEL_BEHAVIOURS)

#: what an unmodelled setting or step kind may change of the model's predictions
_TOUCHES: dict[str, frozenset[str]] = {
    # shadow placement retries: which shadows are tried, so whether a copy can be made
    "MaxRetriesForRemoteSiteShadow": frozenset({"CR-1", "CR-4", "CR-5"}),
    "MaxRetriesForLocalSiteShadow": frozenset({"CR-1", "CR-4", "CR-5"}),
    # 2010 heartbeats and session timeouts: when a primary counts as unreachable
    "ShadowHeartbeatRetryCount": frozenset({"PR-1", "PR-3"}),
    "ShadowHeartbeatTimeoutInterval": frozenset({"PR-1", "PR-3"}),
    "SendConnectionInactivityTimeout": frozenset({"PR-1", "PR-3", "CR-4", "CR-5", "CR-1"}),
    # expiry of shadows and discard events: copies that may rightly vanish or stay
    "MessageExpirationTimeout": frozenset({"CR-1", "PR-2", "PR-4", "SN-3"}),
    "ShadowMessageAutoDiscardInterval": frozenset({"DI-2", "DI-5", "SN-2"}),
    # a size limit refuses with its own reply, which the model leaves alone
    "MaxMessageSize": frozenset(),
    "ReceiveConnectionInactivityTimeout": frozenset({"CR-4", "CR-5"}),
    "ReceiveConnectionTimeout": frozenset({"CR-4", "CR-5"}),
    "MaxAcknowledgementDelay": frozenset(),
    "ReplayLagTime": frozenset(),
    # a group's or a recipient's change: only SN-10 (groups.py) follows the expansion;
    # the rules judging one message are left out only for the messages to an address a
    # directory step names (explain), the rules judging the whole run everywhere
    "directory": _ALL - {"SN-10"},
}


@dataclass
class ModelOutcome:
    #: action steps the model applied
    operations: int
    #: behaviour ID -> times one of its rules decided something
    exercised: Counter[str] = field(default_factory=Counter)
    #: the first observation no allowed state explains
    divergence: Divergence | None = None
    #: step kinds / settings the model does not cover
    unmodelled: list[str] = field(default_factory=list)


#: below this a send connector's idle timeout may end sessions to healthy nodes too
_SESSION_TIMEOUT_FLOOR = 1.0


def unmodelled(scenario: Scenario) -> list[str]:
    """The settings and step kinds of ``scenario`` the model has no rule for."""
    found: list[str] = []
    if scenario.topology.profile != "2013":
        found.append(f"profile {scenario.topology.profile}")
    names = set(scenario.settings) | {n for s in scenario.node_settings.values() for n in s}
    for step in scenario.steps:
        if step.kind == "set_settings":
            names |= set(step.arg.values)
        elif (
            step.kind not in MODELLED_STEPS
            and not wire.modelled_step(step)
            and step.kind not in found
        ):
            found.append(step.kind)
    known = set(DEFAULTS) | wire.KNOWN_SETTINGS | config_warnings.KNOWN_SETTINGS
    if all(
        isinstance(v, int | float) and v >= _SESSION_TIMEOUT_FLOOR
        for v in scenario.setting_values("SendConnectionInactivityTimeout")
    ):
        # it only decides how soon a session to a frozen node gives up, and the model
        # already counts a frozen node as one no copy reaches (TO-4, then CR-4/CR-5)
        known.add("SendConnectionInactivityTimeout")
    found += sorted(names - known)
    return found


def directory_named(scenario: Scenario) -> frozenset[str]:
    """The addresses ``scenario``'s ``directory`` steps name (a group, a recipient given a
    mailbox database), lower-cased: a message to one of them is expanded or filed as the
    model does not follow."""
    named: set[str] = set()
    for step in scenario.steps:
        if step.kind == "directory":
            named |= {a.lower() for a in (step.arg.group, step.arg.recipient) if a}
    return frozenset(named)


def touched_by(items: list[str]) -> frozenset[str]:
    """The behaviours whose predictions the unmodelled ``items`` may change."""
    out: set[str] = set()
    for item in items:
        out |= _TOUCHES.get(item, _ALL)
    return frozenset(out)


def explain(scenario: Scenario, history: History, *, slack: float = 2.0) -> ModelOutcome:
    """Judge one run of ``scenario`` against the catalogue: which behaviours' rules
    decided something, and the first observation no allowed state explains."""
    timeline = build_timeline(scenario, history, slack)
    obs = observe(timeline, history)
    judge = Judge(timeline, obs)
    disabled_rule(judge)
    protocol.advertisement_rule(judge)
    resubmission.dsn_rule(judge)
    refusals.fork_rule(judge, history)
    refusals.bounce_rule(judge)
    refusals.kept_rule(judge, history)
    placement.placement_rule(judge)
    placement.attempts_rule(judge, history)
    heartbeats.heartbeat_rules(judge, wire.wire_rules(judge, history))
    config_warnings.replay_lag_rule(judge, history)
    sessions.shadow_session_rule(judge, history)
    missing = unmodelled(scenario)
    touched = touched_by(missing)
    # a directory change touches the messages to an address it names: the rules of
    # every other message stay judged as without it (only "directory" spares them)
    named = directory_named(scenario)
    spared_touched = touched_by([item for item in missing if item != "directory"])
    spared: set[int] = set()  # the divergences of the other messages' rules
    counts = Counter({k: v for k, v in judge.exercised.items() if k not in touched})
    for m in obs.sent.values():
        before, counted = len(judge.divergences), Counter(judge.exercised)
        reply_rule(judge, m)
        fates.copy_rule(judge, m)
        fates.duplicate_rule(judge, m)
        fates.promotion_rule(judge, m)
        fates.wipe_rule(judge, m)
        fates.restart_rule(judge, m)
        fates.loss_rule(judge, m)
        fates.discard_rule(judge, m)
        notifications.restart_discard_rule(judge, m)
        protocol.ack_order_rule(judge, m)
        fates.safety_net_rule(judge, m)
        resubmission.resubmission_rule(judge, m)
        routes.no_route_rule(judge, m)
        broadcast.broadcast_rule(judge, m)
        expiry.unacknowledged_expiry_rule(judge, m)
        categorisation.categorised_afresh_rule(judge, m)
        groups.group_expansion_rule(judge, m)
        discard_expiry.discard_expiry_rule(judge, m)
        concerned = bool(named & {r.lower() for r in m.to})
        if not concerned:
            spared |= {id(d) for d in judge.divergences[before:]}
        left_out = touched if concerned else spared_touched
        mine = judge.exercised - counted
        counts += Counter({k: v for k, v in mine.items() if k not in left_out})
    found = sorted(
        (
            d
            for d in judge.divergences
            if d.behaviour not in (spared_touched if id(d) in spared else touched)
        ),
        key=lambda d: d.t,
    )
    exercised = counts
    operations = sum(1 for s in timeline.steps if s.step.kind not in ("snapshot", "check", "note"))
    return ModelOutcome(operations, exercised, found[0] if found else None, missing)
