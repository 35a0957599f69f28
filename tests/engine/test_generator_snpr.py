"""Exploration's durability drills (engine/generator_durability.py), ReplayLagTime
changes (engine/generator_replay_lag.py) and group drill (engine/generator_groups.py):
drawn from streams of their own, only where the target can perform them; a drill is a
power cut right after a 250 that only the node cut holds (or the shadows' right after
their copy), ending healed."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from pytest_shadowcheck.engine import (
    generator_durability,
    generator_groups,
    generator_heartbeat,
    generator_outage,
    generator_replay_lag,
)
from pytest_shadowcheck.engine.generator import plan
from pytest_shadowcheck.scenario.capabilities import CAPABILITIES

ALL = frozenset(CAPABILITIES)
DRILL = "durability:"


def _drills(
    capabilities: frozenset[str], kind: str = "", count: int = 60
) -> list[tuple[str, list[dict[str, Any]]]]:
    """(topology, steps) of the drills of seed 11's first ``count`` plans whose label
    says ``kind``."""
    out = []
    for index in range(count):
        explored = plan(11, index, capabilities=capabilities, length=16)
        for op in explored.operations:
            if op.label.startswith(DRILL) and kind in op.label:
                out.append((explored.topology, list(op.steps)))
    return out


def test_the_drills_leave_the_other_operations_as_drawn(monkeypatch: pytest.MonkeyPatch) -> None:
    with_drills = [plan(11, i, capabilities=ALL, length=16) for i in range(30)]
    monkeypatch.setattr(generator_durability, "DURABILITY_SHARE", 0.0)
    monkeypatch.setattr(generator_durability, "DISK_SHARE", 0.0)
    monkeypatch.setattr(generator_replay_lag, "REPLAY_LAG_SHARE", 0.0)
    monkeypatch.setattr(generator_groups, "GROUP_SHARE", 0.0)
    monkeypatch.setattr(generator_heartbeat, "HEARTBEAT_CHANGE_SHARE", 0.0)
    monkeypatch.setattr(generator_outage, "OUTAGE_SHARE", 0.0)
    monkeypatch.setattr(generator_outage, "RESTART_SHARE", 0.0)
    without = [plan(11, i, capabilities=ALL, length=16) for i in range(30)]
    drawn = 0
    extra = (DRILL, "set ReplayLag", "group drill", "heartbeat change:", "outage:", "restart:")
    for a, b in zip(with_drills, without, strict=True):
        kept = [op for op in a.operations if not op.label.startswith(extra)]
        drawn += len(a.operations) - len(kept)
        assert kept == b.operations
    assert drawn > 5


def test_a_lone_250_then_its_power_cut() -> None:
    """The unsynced-ack drill: its node cut from every other node and every next hop, a
    send, its power cut at once, back on its disk, then everything healed."""
    acks = [steps for _, steps in _drills(ALL, "alone, power cut")]
    assert acks
    for steps in acks:
        kinds = [next(iter(x)) for x in steps]
        send = kinds.index("send")
        via = steps[send]["send"]["via"]
        assert steps[send + 1] == {"power_cut": via}
        assert steps[send + 2] == {"restart": via}
        cut = {x["fault"]["link"] for x in steps[:send] if "fault" in x}
        assert all(link.startswith(f"{via}->") for link in cut)
        assert {"heal": "all"} in steps[send:]
        assert kinds[-1] == "wait"


def test_some_lone_messages_power_cut_are_bounces_to_three_recipients() -> None:
    """A null reverse-path with three recipients, alone on its node at the power cut: a
    queue loader that misreads that envelope on restart loses it
    (loader-drops-multi-recipient-bounces). Deep scenarios only."""
    acks = [steps for _, steps in _drills(ALL, "alone, power cut", count=80)]
    sends = [next(x["send"] for x in steps if "send" in x) for steps in acks]
    bounces = [s for s in sends if s.get("from") == ""]
    assert 0 < len(bounces) < len(sends), (len(bounces), len(sends))
    assert all(len(s["to"]) == 3 for s in bounces)
    short = [
        op
        for index in range(80)
        for op in plan(11, index, capabilities=ALL, length=10).operations
        if op.label.startswith(f"{DRILL} bounce")
    ]
    assert not short


def test_a_copy_then_the_shadows_power_cut_and_the_primary_killed_past_the_window() -> None:
    copies = _drills(ALL, "shadows' power cut", count=100)
    assert copies
    for topology, steps in copies:
        kinds = [next(iter(x)) for x in steps]
        send = kinds.index("send")
        via = steps[send]["send"]["via"]
        cut_off = [x["power_cut"] for x in steps if "power_cut" in x]
        assert cut_off and via not in cut_off
        assert kinds[send + 1] == "power_cut"
        assert {"kill": via} in steps and {"wipe": via} in steps
        assert steps.index({"kill": via}) < steps.index({"wipe": via})
        if topology == "creation-ad-site":
            # mbx3 is alone in its site, in no DAG: no shadow, so no copy to keep
            assert "mbx3" not in (via, *cut_off), steps
    assert any(topology == "creation-ad-site" for topology, _ in copies)


def test_no_drill_without_power_cuts_or_on_a_virtual_clock() -> None:
    assert not _drills(ALL - {"power_cut"}, "power cut", count=40)
    assert all(topology != "two-node-dag-virtual" for topology, _ in _drills(ALL))


def test_replay_lag_changes_are_read_back_on_every_answering_node(tmp_path: Path) -> None:
    seen = 0
    for index in range(30):
        explored = plan(11, index, capabilities=ALL, length=16)
        for op in explored.operations:
            if not op.label.startswith("set ReplayLagTime"):
                continue
            seen += 1
            (change, wait, *looks) = op.steps
            assert wait == {"wait": "3s"}  # past the model's slack: the looks are judged
            assert set(change["set_settings"]["values"]) == {"ReplayLagTime"}
            assert looks and all(x["snapshot"]["queue"] == "config_warnings" for x in looks)
        explored.scenario(directory=tmp_path)  # the schema takes the snapshot
    assert seen
    none = frozenset(ALL - {"control_api"})
    assert not any(
        op.label.startswith("set ReplayLagTime")
        for i in range(30)
        for op in plan(11, i, capabilities=none, length=16).operations
    )


def test_the_group_drill_changes_the_group_between_the_send_and_the_request(
    tmp_path: Path,
) -> None:
    # seed 195's first scenario draws it (a virtual-clock topology, in a quiet cluster)
    explored = plan(195, 0, capabilities=ALL, length=16)
    (drill,) = [op for op in explored.operations if op.label.startswith("group drill")]
    kinds = [next(iter(x)) for x in drill.steps]
    first, second = (i for i, x in enumerate(drill.steps) if "group" in x.get("directory", {}))
    # the members coming and going have the mailbox database the request names
    databases = {
        x["directory"]["recipient"]: x["directory"]["database"]
        for x in drill.steps[:first]
        if "recipient" in x.get("directory", {})
    }
    send, kill, request = kinds.index("send"), kinds.index("kill"), kinds.index("resubmit")
    assert first < send < second < kill < request
    group = drill.steps[first]["directory"]["group"]
    assert drill.steps[send]["send"]["to"] == [group]
    before = set(drill.steps[first]["directory"]["members"])
    after = set(drill.steps[second]["directory"]["members"])
    assert len(before & after) == 1 and len(before - after) == 1 and len(after - before) == 1
    assert drill.steps[request]["resubmit"]["node"] != drill.steps[send]["send"]["via"]
    assert set(databases) == (before | after) - (before & after)
    assert set(databases.values()) == {drill.steps[request]["resubmit"]["database"]}
    assert kinds[-2:] == ["restart", "wait"]
    explored.scenario(directory=tmp_path)
    assert "SN-10" in drill.behaviours
    assert not any(
        op.label.startswith("group drill")
        for op in plan(195, 0, capabilities=ALL - {"virtual_clock"}, length=16).operations
    )


def test_no_group_drill_in_the_bounded_slice() -> None:
    # seed 2027 is the slice's: its scenarios of 10 operations keep every model rule
    for index in range(3):
        operations = plan(2027, index, capabilities=ALL, length=10).operations
        assert not any(op.label.startswith("group drill") for op in operations)
    assert any(
        op.label.startswith("group drill")
        for op in plan(2027, 0, capabilities=ALL, length=16).operations
    )


def test_a_full_disk_then_a_message_through_that_node_alone() -> None:
    disks = _drills(ALL, "queue disk full")
    assert disks
    for _, steps in disks:
        kinds = [next(iter(x)) for x in steps]
        send = kinds.index("send")
        via = steps[send]["send"]["via"]
        assert steps[send - 1] == {"disk_full": via}
        assert steps[send + 1] == {"disk_ok": via}
        cut = {x["fault"]["link"] for x in steps[:send] if "fault" in x}
        assert cut and all(link.startswith(f"{via}->") for link in cut)
    # not in the slice's shorter scenarios, nor on a target without disk faults
    assert not _drills(ALL - {"disk_faults"}, "queue disk full", count=30)
    assert not any(
        op.label.endswith("queue disk full")
        for i in range(30)
        for op in plan(11, i, capabilities=ALL, length=10).operations
    )
