"""Exploration's Safety Net drills (engine/generator_safety_net.py): generated on a
virtual clock for a target that can do them, never for one that cannot, and each
written as a scenario the suite loads."""

from __future__ import annotations

from pathlib import Path

from pytest_shadowcheck.engine.generator import plan, untestable_by_exploration
from pytest_shadowcheck.scenario.capabilities import CAPABILITIES

ALL = frozenset(CAPABILITIES)


def _kinds(capabilities: frozenset[str], seeds: range) -> set[str]:
    found: set[str] = set()
    for seed in seeds:
        for index in range(6):
            drawn = plan(seed, index, capabilities=capabilities, length=16)
            labels = " | ".join(op.label for op in drawn.operations)
            found |= {"broadcast"} if "advance 11h50m" in labels else set()
            found |= {"recreated"} if "b via" in labels else set()
            found |= {"expiry"} if "expiry 7d/2d" in labels else set()
    return found


def test_every_drill_is_drawn_for_a_target_that_can_do_it() -> None:
    assert _kinds(ALL, range(1, 12)) == {"broadcast", "recreated", "expiry"}


def test_no_drill_without_a_virtual_clock_and_the_behaviours_say_why() -> None:
    without = ALL - {"virtual_clock"}
    assert _kinds(without, range(1, 12)) == set()
    why = untestable_by_exploration(without)
    assert {"SN-4", "SN-7", "SN-8", "SN-11"} <= set(why)
    assert "a clock the harness can move by hours" in why["SN-7"]
    assert not {"SN-4", "SN-7", "SN-8", "SN-11"} & set(untestable_by_exploration(ALL))


def test_a_drill_is_a_scenario_that_looks_at_the_shadow_safety_net(tmp_path: Path) -> None:
    for index in range(40):
        drawn = plan(18, index, capabilities=ALL, length=16)
        if any("seen by" in op.label for op in drawn.operations):
            break
    scenario = drawn.scenario(directory=tmp_path)
    looks = [
        s.arg for s in scenario.steps if s.kind == "snapshot" and s.arg.queue == "safetynet_shadow"
    ]
    assert looks and {"SN-4", "SN-7", "SN-8", "SN-11"} <= set(scenario.behaviours)
    assert any(s.kind == "resubmit" for s in scenario.steps)
