"""Exploration's Safety Net drills (engine/generator_safety_net.py): generated on a
virtual clock for a target that can do them, never for one that cannot, and each
written as a scenario the suite loads."""

from __future__ import annotations

import re
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
            found |= {"recreated"} if re.search(r"b via \S+, delivered, seen by", labels) else set()
            found |= {"expiry"} if "expiry 7d/2d" in labels else set()
            found |= {"window"} if re.search(r"resubmit \S+ on \S+, m", labels) else set()
            found |= {"taken"} if "taken first" in labels else set()
    return found


def test_every_drill_is_drawn_for_a_target_that_can_do_it() -> None:
    assert _kinds(ALL, range(1, 12)) == {"broadcast", "recreated", "expiry", "window", "taken"}


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


def test_a_window_drill_puts_its_edges_on_two_of_its_messages_to_the_second(
    tmp_path: Path,
) -> None:
    """SN-5's window is half-open: the drill's resubmission must start exactly when its
    second message was processed and end exactly when its fourth was, on the virtual
    clock the scenario moves (nothing else moves it while a drill runs)."""
    drills = 0
    for seed in range(1, 12):
        for index in range(6):
            drawn = plan(seed, index, capabilities=ALL, length=16)
            labels = [
                re.search(r"resubmit \S+ on \S+, (m\d+)b to", op.label) for op in drawn.operations
            ]
            firsts = [found.group(1) for found in labels if found]
            if not firsts:
                continue
            clock, sent = 0.0, {}
            for step in drawn.scenario(directory=tmp_path).steps:
                if step.kind == "advance":
                    clock += step.arg.seconds
                elif step.kind == "send":
                    sent[step.arg.id] = clock
                elif step.kind == "resubmit" and step.arg.end.written != "now":
                    first = firsts.pop(0)
                    a, b, c, d = (sent[first + s] for s in ("", "b", "c", "d"))
                    start, end = step.arg.start.on(clock), step.arg.end.on(clock)
                    assert (a, b, d) == (b - 1, start, end), (drawn.name, sent, start, end)
                    assert b < c < d and c - b >= 60, (drawn.name, sent)
                    drills += 1
    assert drills >= 2


def test_a_group_drill_may_follow_a_safety_net_drill() -> None:
    """The group drill's directory change leaves out only the rules of the messages to
    the addresses it names (and the whole run's): a Safety Net drill before it keeps its
    judging (checks/model), so the group drill is drawn after one too."""
    after = grouped = drilled = 0
    for seed in range(1, 8):
        for index in range(30):
            labels = [op.label for op in plan(seed, index, capabilities=ALL, length=16).operations]
            first = next((i for i, x in enumerate(labels) if x == "SafetyNetHoldTime=1d"), None)
            group = [i for i, x in enumerate(labels) if x.startswith("group drill")]
            grouped += bool(group)
            drilled += first is not None
            after += first is not None and any(i > first for i in group)
    assert after >= 1 and grouped >= 3 and drilled >= 30, (after, grouped, drilled)


def test_a_broadcast_drill_keeps_the_primary_down_well_past_the_broadcast_due() -> None:
    """SN-7: after the 12 hours the coordinator's next heartbeat broadcasts the request,
    which the model gives twice its slack and a delivery; the primary comes back 3 s
    after that at the earliest, so that the harness's own lateness, which the model
    grants, leaves the window judged (a coordinator that forgot the request showed
    INCONCLUSIVE by 0.005 s)."""
    waits = []
    for index in range(60):
        drawn = plan(11, index, capabilities=ALL, length=16)
        beat = float(drawn.settings["ShadowHeartbeatFrequency"])
        for op in drawn.operations:
            if op.label == "advance 20m" and len(op.steps) == 2:
                waits.append((beat, float(op.steps[1]["wait"].rstrip("s"))))
    assert waits
    for beat, wait in waits:
        assert wait >= beat + 2 * 2.0 + 1.0 + 3.0
