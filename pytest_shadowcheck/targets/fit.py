"""Whether a target can run a scenario at all: the capabilities the scenario's steps
need, per-node settings, and anything else the target itself rules out. A scenario it
cannot run is UNTESTABLE, with the reason a user can act on.
"""

from __future__ import annotations

from pytest_shadowcheck.scenario.capabilities import CAPABILITY_NEED, STEP_CAPABILITY, control_call
from pytest_shadowcheck.scenario.durations import format_duration
from pytest_shadowcheck.scenario.model import Scenario, Step
from pytest_shadowcheck.targets.base import Target

__all__ = ["compiled_timer_reason", "missing_capability_reason", "why_untestable"]


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


def why_untestable(scenario: Scenario, target: Target) -> str | None:
    """Why ``target`` cannot run ``scenario`` at all (UNTESTABLE), or None."""
    why = missing_capability_reason(scenario, target)
    if why is None and scenario.node_settings and not target.per_node_settings:
        why = (
            f"target {target.label} cannot give single nodes settings of their own "
            f"(node_settings for {', '.join(scenario.node_settings)})"
        )
    if why is None and (other := target.cannot_run(scenario)):
        why = f"target {target.label}: {other}"
    if why is None:
        why = compiled_timer_reason(scenario, target)
    return why


def compiled_timer_reason(scenario: Scenario, target: Target) -> str | None:
    """Why the scenario's windows cannot be kept on ``target``: a setting they count from
    (or one the scenario needs given) is compiled into the MTA at another value. Never a
    FAIL: the MTA is not told the setting, so it cannot be held to it."""
    for name in sorted(scenario.timer_settings | set(scenario.needs_settings)):
        if name not in target.timers:
            continue
        low, high = target.timers[name]
        for value in scenario.setting_values(name):
            if isinstance(value, (int, float)) and not low <= value <= high:
                compiled = format_duration(low) + (
                    f" to {format_duration(high)}" if high != low else ""
                )
                return (
                    f"target {target.label} has its {name} compiled in at {compiled} (its "
                    f"description's timers), and this scenario's windows count on "
                    f"{name} = {format_duration(value)}: the MTA cannot be given that value, "
                    "so it cannot be held to the windows"
                )
    return None
