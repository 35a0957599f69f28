"""Whether a target can run a scenario at all: the capabilities the scenario's steps
need, per-node settings, timers the MTA has compiled in, and anything else the target
itself rules out. A scenario it cannot run is UNTESTABLE, with the reason a user can act
on; one whose windows count on a compiled-in timer runs stretched to it (:func:`stretch`).
"""

from __future__ import annotations

from dataclasses import replace

from pytest_shadowcheck.scenario.capabilities import CAPABILITY_NEED, STEP_CAPABILITY, control_call
from pytest_shadowcheck.scenario.durations import format_duration
from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.scenario.model import Scenario, Step
from pytest_shadowcheck.targets.base import Target

__all__ = [
    "DEFAULT_STRETCH_BUDGET",
    "compiled_timer_reason",
    "missing_capability_reason",
    "stretch",
    "why_untestable",
]

#: how much longer a scenario may run when its windows stretch to a compiled-in timer
DEFAULT_STRETCH_BUDGET = 150.0


def missing_capability_reason(scenario: Scenario, target: Target) -> str | None:
    """Why ``target`` cannot run ``scenario`` for want of a capability: which one, what it
    would show or do, and the step that needs it; None when it has them all."""

    def uncovered(capability: str) -> list[Step]:
        """Steps needing ``capability`` that the target cannot carry out (an admin
        adapter may answer a step's one control API call without the whole API)."""
        return [
            s
            for s in scenario.steps
            if STEP_CAPABILITY.get(s.kind) == capability
            and not target.can(capability, control_call(s.kind, s.arg))
        ]

    missing = [
        c
        for c in scenario.required_capabilities()
        if c not in target.capabilities
        and (c != "control_api" or "control_api" in scenario.requires or uncovered(c))
    ]
    if not missing:
        return None
    parts = []
    for capability in missing:
        needed_by = next(
            (f"step {s.kind} at line {s.where.line}" for s in uncovered(capability)),
            "the scenario's topology (virtual clock)"
            if capability == "virtual_clock" and scenario.topology.clock == "virtual"
            else "the scenario's requires:",
        )
        part = f"{capability} - {CAPABILITY_NEED[capability]} - for {needed_by}"
        if (unavailable := target.capability_unavailable(capability)) is not None:
            part += f" ({unavailable})"
        parts.append(part)
    return f"target {target.label} lacks " + "; ".join(parts)


def why_untestable(
    scenario: Scenario, target: Target, budget: float = DEFAULT_STRETCH_BUDGET
) -> str | None:
    """Why ``target`` cannot run ``scenario`` at all (UNTESTABLE), or None; ``budget``:
    how much longer it may run stretched to the target's compiled-in timers."""
    why = missing_capability_reason(scenario, target)
    if why is None and scenario.node_settings and not target.per_node_settings:
        why = (
            f"target {target.label} cannot give single nodes settings of their own "
            f"(node_settings for {', '.join(scenario.node_settings)})"
        )
    if why is None and (other := target.cannot_run(scenario)):
        why = f"target {target.label}: {other}"
    if why is None:
        why = compiled_timer_reason(scenario, target, budget)
    return why


def _off_timers(scenario: Scenario, target: Target) -> dict[str, tuple[float, float, float]]:
    """The settings the scenario counts on that the target has compiled in at another
    value: name -> (the scenario's value, shortest, longest compiled-in)."""
    off = {}
    for name in sorted(set(scenario.timer_settings) | set(scenario.needs_settings)):
        if name not in target.timers:
            continue
        low, high = target.timers[name]
        for value in scenario.setting_values(name):
            if isinstance(value, (int, float)) and not low <= value <= high:
                off[name] = (float(value), low, high)
                break
    return off


def _compiled(low: float, high: float) -> str:
    return format_duration(low) + (f" to {format_duration(high)}" if high != low else "")


def stretch_needed(scenario: Scenario, target: Target) -> float:
    """Seconds the scenario runs longer with every window counted from a compiled-in
    timer at its longest value (0: nothing to stretch)."""
    return sum(
        scenario.timer_settings.get(name, 0) * max(0.0, high - value)
        for name, (value, _, high) in _off_timers(scenario, target).items()
    )


def compiled_timer_reason(
    scenario: Scenario, target: Target, budget: float = DEFAULT_STRETCH_BUDGET
) -> str | None:
    """Why the scenario's windows cannot be kept on ``target``, or None. A setting they
    count on that the MTA has compiled in at another value is stretched to it
    (:func:`stretch`) within ``budget`` seconds more; a setting the scenario needs given,
    or changes while the cluster runs, cannot be: never a FAIL, the MTA is not told it."""
    changed = {
        name
        for step in scenario.steps
        if step.kind == "set_settings"
        for name in getattr(step.arg, "values", {})
    }
    for name, (value, low, high) in _off_timers(scenario, target).items():
        if name in scenario.needs_settings or name in changed:
            how = "needs it given" if name in scenario.needs_settings else "changes it"
            return (
                f"target {target.label} has its {name} compiled in at {_compiled(low, high)} (its "
                f"description's timers), and this scenario {how} ({format_duration(value)}): "
                "the MTA cannot be given that value, so it cannot be held to it"
            )
    extra = stretch_needed(scenario, target)
    if extra > budget:
        names = ", ".join(
            f"{name} = {format_duration(value)}, compiled in at {_compiled(low, high)}"
            for name, (value, low, high) in _off_timers(scenario, target).items()
        )
        return (
            f"target {target.label} has timers compiled in that this scenario's windows count "
            f"on ({names}; its description's timers): stretched to them it would run "
            f"{format_duration(round(extra))} longer, beyond the stretch budget of "
            f"{format_duration(budget)} (--shadowcheck-stretch-budget)"
        )
    return None


def stretch(scenario: Scenario, target: Target) -> Scenario:
    """The scenario with every window counted from a timer the target has compiled in at
    another value, re-read with that timer at its longest value: what the MTA can be held
    to. The scenario itself when nothing is compiled in (call after
    :func:`compiled_timer_reason` said it may be stretched)."""
    off = _off_timers(scenario, target)
    if not off:
        return scenario
    timers = {name: high for name, (_, _, high) in off.items()}
    again = load_scenario_file(scenario.where.path, timers=timers)
    stretched = next(s for s in again if s.name == scenario.name)
    said = ", ".join(
        f"{name} counted at {format_duration(high)} (compiled in), not {format_duration(value)}"
        for name, (value, _, high) in off.items()
    )
    return replace(
        stretched,
        timeout=scenario.timeout + stretch_needed(scenario, target),
        title=f"{scenario.title} [windows stretched: {said}]",
    )
