"""The generator of explored scenarios: deterministic from (seed, index), only what the
target can perform, and every scenario (or shrunk subset of one) ends healed, with
every node back and time for every timer in force."""

from __future__ import annotations

import random
from pathlib import Path

import pytest

from pytest_shadowcheck.engine.exploration_plan import topology_data
from pytest_shadowcheck.engine.generator import (
    explored_name,
    generate,
    plan,
    untestable_by_exploration,
)
from pytest_shadowcheck.plugin.exploration import deep_length, explored_index
from pytest_shadowcheck.scenario.capabilities import CAPABILITIES, STEP_CAPABILITY
from pytest_shadowcheck.scenario.durations import parse_duration
from pytest_shadowcheck.scenario.model import Scenario

ALL = frozenset(CAPABILITIES)
#: a black box with process control only (a docker MTA without a control API)
PROCESS_ONLY = frozenset({"kill", "pause", "restart", "wipe_queue_db"})


def _steps(scenario: Scenario) -> list[tuple[str, object]]:
    return [(s.kind, s.arg) for s in scenario.steps]


def test_same_seed_and_index_give_the_same_scenario(tmp_path: Path) -> None:
    first = plan(5, 3, capabilities=ALL, length=15)
    again = plan(5, 3, capabilities=ALL, length=15)
    assert [op.label for op in first.operations] == [op.label for op in again.operations]
    assert first.yaml() == again.yaml()
    a = generate(5, 3, capabilities=ALL, length=15, directory=tmp_path / "a")
    b = generate(5, 3, capabilities=ALL, length=15, directory=tmp_path / "b")
    assert a.name == b.name == explored_name(5, 3) == "explore_s5_003"
    assert _steps(a) == _steps(b) and a.settings == b.settings


def test_the_plugin_reads_back_every_name_the_generator_gives() -> None:
    """A deep exploration of 24 lanes for 25 minutes plans 1,200 scenarios: those from
    1000 on must be counted, and shrunk when they fail, as the others are (session 18's
    seed 5005 found a FAIL in scenario 1167 that was neither)."""
    for index in (0, 7, 999, 1000, 1167, 12345):
        assert explored_index(explored_name(5005, index)) == (5005, index)
    assert explored_index("explore_s5005_1167_shrunk") is None
    assert explored_index("cr4_single_node_rejects") is None


def test_seeds_and_indexes_give_different_scenarios() -> None:
    texts = {plan(s, i, capabilities=ALL, length=12).yaml() for s in (1, 2) for i in range(5)}
    assert len(texts) == 10


@pytest.mark.parametrize("capabilities", [frozenset(), PROCESS_ONLY, ALL - {"wipe_queue_db"}])
def test_only_operations_the_target_can_perform(
    tmp_path: Path, capabilities: frozenset[str]
) -> None:
    for index in range(25):
        scenario = plan(3, index, capabilities=capabilities, length=16).scenario(directory=tmp_path)
        for step in scenario.steps:
            need = STEP_CAPABILITY.get(step.kind)
            assert need is None or need in capabilities, (scenario.name, step.kind)
        assert set(scenario.required_capabilities()) <= capabilities
        if "virtual_clock" not in capabilities:
            assert scenario.topology.clock == "real"


def test_a_target_with_everything_gets_every_kind_of_operation() -> None:
    kinds = {
        next(iter(step))
        for index in range(40)
        for op in plan(9, index, capabilities=ALL, length=16).operations
        for step in op.steps
    }
    wanted = {"send", "wait", "kill", "restart", "wipe", "pause", "resume", "fault", "heal"}
    wanted |= {"sink", "set_settings", "advance", "resubmit", "power_cut"}
    assert wanted <= kinds


def _ends_healed(scenario: Scenario) -> None:
    """Every fault of the scenario is ended, and the last wait outlasts the timers."""
    down: set[str] = set()
    paused: set[str] = set()
    cut: set[str] = set()
    scripted: set[str] = set()
    for step in scenario.steps:
        arg = step.arg
        if step.kind in ("kill", "power_cut"):
            down.add(arg.node)
        elif step.kind in ("restart", "wipe"):
            down.discard(arg.node)
            paused.discard(arg.node)
        elif step.kind == "pause":
            paused.add(arg.node)
        elif step.kind == "resume":
            paused.discard(arg.node)
        elif step.kind == "fault":
            cut.add(arg.link)
        elif step.kind == "heal":
            cut = set() if arg.link is None else cut - {arg.link}
        elif step.kind == "sink":
            scripted = scripted - {arg.name} if arg.reply == "accept" else scripted | {arg.name}
        elif step.kind == "snapshot":
            # a snapshot asks a node's control API: only one that is up answers
            assert arg.node not in down | paused, scenario.name
    assert not (down or paused or cut or scripted), scenario.name
    # the wait until quiet (a virtual clock's Safety Net looks come after it)
    settles = [s.arg.timeout for s in scenario.steps if s.kind == "wait" and s.arg.until]
    # the timers in force at the end (a drill that set one for itself put it back)
    span = scenario.setting_values("ShadowResubmitTimeSpan")[-1]
    beat = scenario.setting_values("ShadowHeartbeatFrequency")[-1]
    assert settles[-1] >= span + 2 * beat, scenario.name
    assert [s.kind for s in scenario.steps[-2:]] != ["kill", "wait"]


def test_the_ending_reads_every_nodes_safety_nets(tmp_path: Path) -> None:
    """Once the cluster is quiet the harness reads each node's Safety Net and Shadow
    Safety Net (SN-1, SN-2): a shadow deleting a discarded copy shows only there. A
    target without a control API is read nothing."""
    explored = plan(11, 0, capabilities=ALL, length=16)
    steps = _steps(explored.scenario(directory=tmp_path))
    last = [arg for kind, arg in steps[-12:] if kind == "snapshot"]
    nodes = set(topology_data(explored.topology)["nodes"])
    for queue in ("safetynet_primary", "safetynet_shadow"):
        assert {s.node for s in last if s.queue == queue} == nodes, queue
    black_box = plan(11, 0, capabilities=PROCESS_ONLY, length=16).scenario(directory=tmp_path)
    assert "snapshot" not in {kind for kind, _ in _steps(black_box)}


def test_every_scenario_and_every_subset_ends_healed(tmp_path: Path) -> None:
    rng = random.Random(4)
    for index in range(30):
        explored = plan(21, index, capabilities=ALL, length=16)
        _ends_healed(explored.scenario(directory=tmp_path))
        for _ in range(4):
            keep = rng.sample(range(16), rng.randint(0, 16))
            _ends_healed(explored.scenario(keep, directory=tmp_path, name="subset"))


def test_no_wipe_while_a_message_may_be_acknowledged_with_a_single_holder() -> None:
    """A message acknowledged with no shadow copy (RejectMessageOnShadowFailure=false, or
    redundancy off) has one holder: a wipe would lose it (PR-4, outside the guarantee)."""
    wipes = 0
    for index in range(120):
        explored = plan(13, index, capabilities=ALL, length=16)
        reject, redundancy = explored.settings["RejectMessageOnShadowFailure"], True
        for op in explored.operations:
            if op.label.startswith("durability:"):
                continue  # a power cut after a lone 250 on purpose (test_generator_durability)
            if op.label.startswith("outage:"):
                continue  # redundancy off after the drill's one send (test_generator_outage)
            for step in op.steps:
                kind = next(iter(step))
                if kind in ("wipe", "power_cut"):
                    assert reject and redundancy, (explored.name, op.label)
                    wipes += 1
                values = step["set_settings"]["values"] if kind == "set_settings" else {}
                reject = values.get("RejectMessageOnShadowFailure", reject)
                redundancy = values.get("ShadowRedundancyEnabled", redundancy)
    assert wipes > 20


def test_timers_are_fast_and_sends_answer_in_time(tmp_path: Path) -> None:
    scenario = plan(2, 0, capabilities=ALL, length=16).scenario(directory=tmp_path)
    assert max(scenario.setting_values("ShadowResubmitTimeSpan")) <= 6
    assert scenario.settings["SendConnectionInactivityTimeout"] == 1
    assert all(s.arg.timeout <= 20 for s in scenario.steps if s.kind == "send")
    total = sum(s.arg.timeout for s in scenario.steps if s.kind == "wait")
    assert scenario.timeout > total + parse_duration("30s", scenario.where)


def test_the_model_expectation_waits_for_its_flag(tmp_path: Path) -> None:
    scenario = plan(2, 1, capabilities=ALL, length=4).scenario(directory=tmp_path)
    assert [s.kind for s in scenario.expect] == ["model"]


def test_behaviours_exploration_cannot_exercise_are_named_with_the_reason() -> None:
    assert set(untestable_by_exploration(ALL)) == {"PR-4"}
    black_box = untestable_by_exploration(PROCESS_ONLY)
    assert {"SN-3", "SN-5", "CR-6", "DI-4"} <= set(black_box)
    assert "PR-2" not in black_box and "PR-3" not in black_box
    assert "change the MTA's settings while it runs" in black_box["CR-6"]
    no_wipe = untestable_by_exploration(ALL - {"wipe_queue_db"})
    assert "restart a node on a new, empty queue database" in no_wipe["PR-2"]


def test_node_faults_strike_the_node_a_next_hop_holds_mail_back_on() -> None:
    """While a cut next-hop link holds mail back on a node, sends go mostly through it and
    a node fault strikes it mostly: the primary holding undelivered mail (chance alone
    would strike it one time in two or three)."""
    on_holder = elsewhere = 0
    for index in range(80):
        explored = plan(17, index, capabilities=ALL, length=16)
        hop_cut: set[str] = set()
        accepted: set[str] = set()
        sinks = {"mailbox", "senders", "external", "archive"}
        for op in explored.operations:
            if op.label.startswith("durability:"):
                continue  # a drill of its own (engine/generator_durability.py)
            for step in op.steps:
                kind, arg = next(iter(step.items()))
                if kind == "fault" and arg["link"].partition("->")[2] in sinks:
                    hop_cut.add(arg["link"].partition("->")[0])
                elif kind == "heal":
                    hop_cut.discard(arg.partition("->")[0])
                    accepted = set() if not hop_cut else accepted
                elif kind == "send" and arg["via"] in hop_cut:
                    accepted.add(arg["via"])
                elif kind in ("kill", "pause", "power_cut") and accepted:
                    if arg in accepted:
                        on_holder += 1
                    else:
                        elsewhere += 1
    assert on_holder + elsewhere > 20
    assert on_holder > 2 * elsewhere, (on_holder, elsewhere)


def test_a_killed_node_is_back_at_once_or_kept_down_past_the_promotion_window() -> None:
    """PR-3 needs a primary back within the span (its shadow must not promote), PR-1 one
    kept down past span + heartbeat + a delivery (its shadow must promote in time)."""
    quick = outlasted = 0
    for index in range(60):
        explored = plan(19, index, capabilities=ALL, length=16)
        span = float(explored.settings["ShadowResubmitTimeSpan"])
        beat = float(explored.settings["ShadowHeartbeatFrequency"])
        down: dict[str, float] = {}
        back: list[float] = []  # how long each node fault lasted
        for op in explored.operations:
            for step in op.steps:
                kind, arg = next(iter(step.items()))
                if kind in ("kill", "power_cut", "pause"):
                    down[arg] = 0.0
                elif kind == "wait":
                    # a wait until quiet with a node down lasts its whole timeout
                    seconds = arg["timeout"] if isinstance(arg, dict) else arg
                    down = {n: t + float(seconds.rstrip("s")) for n, t in down.items()}
                elif kind in ("restart", "wipe", "resume"):
                    back.append(down.pop(arg, 0.0))  # one that was up: killed, back at once
        back += down.values()  # the ending brings them back
        quick += sum(t < span - beat - 2.0 for t in back)
        outlasted += sum(t > span + beat + 3.0 for t in back)
    assert quick >= 5 and outlasted >= 5, (quick, outlasted)


def test_some_messages_carry_dot_leading_and_longest_lines_through_the_file(
    tmp_path: Path,
) -> None:
    dots = longest = 0
    for index in range(20):
        explored = plan(23, index, capabilities=ALL, length=16)
        sends = [s["send"] for op in explored.operations for s in op.steps if "send" in s]
        drawn = [send.get("body") for send in sends]
        scenario = explored.scenario(directory=tmp_path)
        loaded = [s.arg.body for s in scenario.steps if s.kind == "send"]
        for body, read in zip(drawn, loaded, strict=True):
            if body is None:
                continue
            assert read == body  # the scenario file keeps every line as drawn
            lines = body.split("\n")
            dots += any(line.startswith(".") for line in lines)
            longest += any(len(line) == 998 for line in lines)
    assert dots >= 5 and longest >= 5, (dots, longest)


def test_a_burst_goes_through_a_node_whose_next_hop_link_is_cut() -> None:
    """More than a page of sixteen messages through one node while a cut next-hop link
    holds them back, at most once a scenario: released together, one discard answer
    must name them all (acts-on-sixteen-discards-per-answer is found by nothing else)."""
    bursts = 0
    for index in range(60):
        explored = plan(11, index, capabilities=ALL, length=16)
        # (a group drill, too, is more than 16 steps: a burst is only sends)
        in_plan = [
            op
            for op in explored.operations
            if len(op.steps) > 16 and all("send" in step for step in op.steps)
        ]
        assert len(in_plan) <= 1, [op.label for op in in_plan]
        nodes = set(topology_data(explored.topology)["nodes"])
        cut: set[str] = set()
        for op in explored.operations:
            if op.label.startswith("durability:"):
                continue
            sends = [arg for step in op.steps for kind, arg in step.items() if kind == "send"]
            if op in in_plan:
                bursts += 1
                assert 17 <= len(sends) <= 24 and len({s["via"] for s in sends}) == 1
                assert sends[0]["via"] in {link.partition("->")[0] for link in cut}, op.label
            for step in op.steps:
                kind, arg = next(iter(step.items()))
                if kind == "fault" and arg["link"].partition("->")[2] not in nodes:
                    cut.add(arg["link"])
                elif kind == "heal":
                    cut.discard(arg)
    assert bursts >= 5, bursts


def test_some_bounces_have_three_recipients() -> None:
    """A null reverse-path with several recipients: valid, rare, an envelope a queue may
    read as one recipient (loader-drops-multi-recipient-bounces)."""
    sizes = []
    for index in range(80):
        for op in plan(11, index, capabilities=ALL, length=16).operations:
            for step in op.steps:
                arg = step.get("send")
                if arg is not None and arg.get("from") == "":
                    sizes.append(len(arg["to"]))
    assert sizes.count(1) > sizes.count(3) > 0, sizes


def test_some_deep_scenarios_send_two_messages_with_one_message_id() -> None:
    """A resent message, or a list's second copy: two messages, one Message-ID
    (suppresses-repeated-message-id). Deep scenarios only: the slice's stay as they were."""
    shared = same_node = 0
    for index in range(40):
        for length, caps in ((16, ALL), (16, PROCESS_ONLY), (10, ALL)):
            sends = [
                step["send"]
                for op in plan(11, index, capabilities=caps, length=length).operations
                for step in op.steps
                if "send" in step
            ]
            given = [s for s in sends if s.get("message_id")]
            assert not given or (length == 16 and len(given) <= 2)
            assert len({s["message_id"] for s in given}) <= 1
            if len(given) == 2:
                shared += 1
                same_node += given[0]["via"] == given[1]["via"]
    assert 10 <= shared <= 40, shared
    # resent to the node that took the first (unless it was down then)
    assert same_node >= shared * 3 // 4, (same_node, shared)


def test_some_scenarios_start_with_a_heartbeat_long_beside_the_slack() -> None:
    """A shadow asking every other heartbeat is late by one heartbeat: at 0.5-1 s that is
    inside the model's 2 s slack, at 4 s it is not (heartbeats-too-rarely)."""
    beats = [
        plan(11, i, capabilities=ALL, length=16).settings["ShadowHeartbeatFrequency"]
        for i in range(80)
    ]
    assert set(beats) == {0.5, 1.0, 4.0}
    assert 8 <= beats.count(4.0) <= 32, beats.count(4.0)


def test_a_setting_changed_live_changes_the_value_in_force() -> None:
    """An admin's change to the value already in force tests nothing (session 35: six of
    the ten live heartbeat changes in seed 11's first ninety scenarios set 0.5 s over
    0.5 s); the slow heartbeat made fast is there (heartbeat-frequency-read-once)."""
    live = ("ShadowHeartbeatFrequency", "ShadowResubmitTimeSpan",
            "RejectMessageOnShadowFailure", "ShadowRedundancyEnabled")  # fmt: skip
    changes = 0
    slow_made_fast = 0
    for index in range(120):
        explored = plan(11, index, capabilities=ALL, length=16)
        in_force = {k: explored.settings.get(k, True) for k in live}
        for op in explored.operations:
            if not op.label.startswith("set "):
                continue  # a drill's own settings, put back by the drill
            ((name, value),) = op.steps[0]["set_settings"]["values"].items()
            if name not in live:
                continue  # ReplayLagTime's drill (engine/generator_replay_lag.py)
            if isinstance(value, str):
                value = parse_duration(value, None)  # type: ignore[arg-type]
            assert value != in_force[name], (index, op.label, in_force)
            slow_made_fast += in_force[name] == 4.0 and name == "ShadowHeartbeatFrequency"
            in_force[name] = value
            changes += 1
    assert changes >= 60 and slow_made_fast >= 3, (changes, slow_made_fast)


def test_placement_sends_go_where_the_site_preference_shows() -> None:
    """In topologies spanning AD sites some sends go through a node with a candidate in
    its own site and one in another, every node up (CR-7: shadow-placement-local-first);
    a DAG within one site sometimes has a preference it must ignore (RemoteOnly there
    finds no shadow on an MTA that applies it: shadow-placement-preference-everywhere)."""
    placed, preferred = 0, set()
    for index in range(60):
        explored = plan(11, index, capabilities=ALL, length=16)
        nodes = topology_data(explored.topology)["nodes"]
        for op in explored.operations:
            if op.label.endswith("(placement)"):
                placed += 1
                via = op.steps[0]["send"]["via"]
                sites = [nodes[n]["site"] for n in nodes if n != via]
                assert nodes[via]["site"] in sites and set(sites) - {nodes[via]["site"]}
        if len({spec["site"] for spec in nodes.values()}) == 1:
            preferred.add(explored.settings.get("ShadowMessagePreferenceSetting"))
    assert placed >= 10, placed
    assert {None, "RemoteOnly"} <= preferred, preferred


def test_a_virtual_clock_ending_looks_at_the_safety_nets_either_side_of_the_hold(
    tmp_path: Path,
) -> None:
    """Once quiet, on the nodes' clock: half a minute short of SafetyNetHoldTime the
    latest deliveries are still held (SN-1, SN-2), past it and a sweep nothing is (SN-3);
    the look follows the advance by more than the model's 2 s slack."""
    index = next(
        i
        for i in range(60)
        if plan(11, i, capabilities=ALL, length=16).topology.endswith("virtual")
    )
    explored = plan(11, index, capabilities=ALL, length=16)
    steps = _steps(explored.scenario(directory=tmp_path))
    quiet = max(i for i, (kind, arg) in enumerate(steps) if kind == "wait" and arg.until == "quiet")
    advances = [(i, arg) for i, (kind, arg) in enumerate(steps) if kind == "advance" and i > quiet]
    assert len(advances) == 2, steps[quiet:]
    hold = float(explored.settings["SafetyNetHoldTime"])
    (first, short), (second, past) = advances
    assert short.seconds == hold - 30.0
    assert short.seconds + past.seconds > hold + 60 + 2
    for at in (first, second):
        assert steps[at + 1][0] == "wait" and steps[at + 1][1].timeout > 2
        looked = {(a.node, a.queue) for k, a in steps[at + 2 : at + 8] if k == "snapshot"}
        assert {q for _, q in looked} == {"safetynet_primary", "safetynet_shadow"}


def test_a_change_the_mta_must_reject_names_the_limit_it_conflicts_with() -> None:
    """TO-3: a target that cannot be given ReceiveConnectionTimeout is never told the
    conflict, so the change names it too (the description's guard then says UNTESTABLE)."""
    rejected = [
        step["set_settings"]["values"]
        for seed in range(1, 40)
        for op in plan(seed, 0, capabilities=ALL, length=16).operations
        for step in op.steps
        if step.get("set_settings", {}).get("result") == "rejected"
    ]
    assert rejected
    for values in rejected:
        assert set(values) == {"ReceiveConnectionInactivityTimeout", "ReceiveConnectionTimeout"}
        idle, whole = (parse_duration(values[k], None) for k in sorted(values))  # type: ignore[arg-type]
        assert idle >= whole, values


def test_a_split_discards_drill_splits_one_primarys_copies_and_leaves_all_as_it_was() -> None:
    """DI-3 (hands-out-every-notification is found by nothing else): in a DAG over two
    sites, a primary's copies on its remote and its local shadow, the local one frozen
    while both notifications fall due; the next hop, the cut link, the frozen node and the
    site preference are back as they were when the drill ends."""
    drills = 0
    for index in range(40):
        explored = plan(11, index, capabilities=ALL, length=16)
        labels = [op.label for op in explored.operations]
        at = next((i for i, label in enumerate(labels) if label.startswith("split copies")), None)
        if at is None:
            continue
        drills += 1
        nodes = topology_data(explored.topology)["nodes"]
        steps = [step for op in explored.operations[at : at + 2] for step in op.steps]
        kinds = [next(iter(step)) for step in steps]
        (cut,) = [s["fault"]["link"] for s in steps if "fault" in s]
        via, remote = cut.split("->")
        (paused,) = [s["pause"] for s in steps if "pause" in s]
        assert nodes[via]["site"] != nodes[remote]["site"]
        assert nodes[paused]["site"] == nodes[via]["site"] and paused != via
        assert {"heal": cut} in steps and {"resume": paused} in steps
        assert kinds.index("fault") < kinds.index("heal") < kinds.index("pause")
        replies = [s["sink"]["reply"] for s in steps if "sink" in s]
        assert replies[0].startswith("451") and replies[-1] == "accept"
        sends = [s["send"] for s in steps if "send" in s]
        assert len(sends) == 2 and {s["via"] for s in sends} == {via}
        preference = explored.settings.get("ShadowMessagePreferenceSetting", "PreferRemote")
        changes = [s["set_settings"]["values"] for s in steps if "set_settings" in s]
        name = "ShadowMessagePreferenceSetting"
        if preference == "PreferRemote":
            assert changes == []
        else:
            assert changes == [{name: "PreferRemote"}, {name: preference}], changes
    assert drills >= 3
    # never for a target that cannot freeze a node or change a setting while it runs
    for capabilities in (ALL - {"pause"}, ALL - {"set_settings"}):
        for index in range(40):
            labels = [
                op.label for op in plan(11, index, capabilities=capabilities, length=16).operations
            ]
            assert not any(label.startswith("split copies") for label in labels)


def test_the_attempts_drill_cuts_a_node_off_once_no_node_holds_anothers_copies() -> None:
    """CR-7 (one-extra-shadow-attempt-per-site): past the slowest heartbeat and the slack,
    a node cut from every other node is sent a message; deep real-clock scenarios only."""
    drills = []
    for index in range(60):
        for length in (16, 10):
            explored = plan(11, index, capabilities=ALL, length=length)
            for op in explored.operations:
                if op.label.startswith("attempts:"):
                    assert length == 16
                    assert topology_data(explored.topology).get("clock") != "virtual"
                    drills.append((explored.topology, list(op.steps)))
    assert drills
    for topology, steps in drills:
        nodes = set(topology_data(topology)["nodes"])
        (send,) = [s["send"] for s in steps if "send" in s]
        cut = {s["fault"]["link"] for s in steps if "fault" in s}
        assert cut == {f"{send['via']}->{n}" for n in nodes - {send["via"]}}
        assert float(steps[0]["wait"].rstrip("s")) >= 6.0 + 1.0  # 4 s beat + 2 s slack
        assert steps.index({"heal": "all"}) > steps.index({"send": send})


def test_the_heartbeat_change_drill_shortens_a_slow_beat_just_after_a_copy() -> None:
    """DI-2 across a live change (heartbeat-frequency-read-once): once no shadow holds a
    copy, a message, then ShadowHeartbeatFrequency shortened at once from the 4 s in
    force, then a wait past the old beat; real clock, a target that changes settings."""
    drills = []
    for index in range(80):
        explored = plan(11, index, capabilities=ALL, length=deep_length(index))
        for op in explored.operations:
            if op.label.startswith("heartbeat change:"):
                assert explored.settings["ShadowHeartbeatFrequency"] == 4.0
                assert topology_data(explored.topology).get("clock") != "virtual"
                drills.append((index, list(op.steps)))
    # in the ramp's short scenarios too: a deep exploration reaches them in its first minute
    assert len(drills) >= 4 and min(index for index, _ in drills) < 16, drills
    for _, steps in drills:
        kinds = [next(iter(step)) for step in steps]
        assert kinds == ["wait", "send", "set_settings", "wait", "set_settings"]
        unheld, _, change, after, back = steps
        assert back["set_settings"]["values"] == {"ShadowHeartbeatFrequency": "4s"}
        assert unheld["wait"]["until"] == "quiet"
        assert parse_duration(unheld["wait"]["timeout"], None) >= 2 * 4.0 + 1
        shorter = parse_duration(change["set_settings"]["values"]["ShadowHeartbeatFrequency"], None)
        # the old beat's query (4 s after the copy) then misses the new due (the change,
        # a moment after the copy, plus the new beat and the model's 2 s slack)
        assert shorter + 2.0 < 4.0
        assert parse_duration(after["wait"], None) > 4.0
    without = [plan(11, i, capabilities=ALL - {"set_settings"}, length=16) for i in range(80)]
    assert not [op for p in without for op in p.operations if "heartbeat change" in op.label]
