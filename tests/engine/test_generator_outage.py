"""Exploration's outage drills (engine/generator_outage.py): a primary holding a message
whose copy a shadow has is killed and back within the span, kept down past it, or back on
a new queue database after an admin switched shadow redundancy off; drawn from a stream of
their own, only in deep scenarios on a real clock, each ending healed with the timers as
they were."""

from __future__ import annotations

from typing import Any

from pytest_shadowcheck.engine.exploration_plan import topology_data
from pytest_shadowcheck.engine.generator import plan
from pytest_shadowcheck.engine.generator_durability import Routes
from pytest_shadowcheck.plugin.exploration import deep_length
from pytest_shadowcheck.scenario.capabilities import CAPABILITIES
from pytest_shadowcheck.scenario.durations import parse_duration

ALL = frozenset(CAPABILITIES)
#: the catalogue model's slack (checks/model/check.py DEFAULT_SLACK)
SLACK = 2.0
TIMERS = ("ShadowResubmitTimeSpan", "ShadowHeartbeatFrequency")


def _seconds(text: str) -> float:
    return parse_duration(text, None)


def _drills(
    capabilities: frozenset[str] = ALL, count: int = 100, prefix: str = "outage:"
) -> list[tuple[str, dict[str, Any], str, list[dict[str, Any]]]]:
    """(topology, settings in force, label, steps) of the outage drills (or those whose
    label starts with ``prefix``) of seed 11's first ``count`` plans of a deep
    exploration."""
    out = []
    for index in range(count):
        explored = plan(11, index, capabilities=capabilities, length=deep_length(index))
        # the settings in force as each operation starts
        settings = dict(explored.settings)
        for op in explored.operations:
            if op.label.startswith(prefix):
                out.append((explored.topology, dict(settings), op.label, list(op.steps)))
            for step in op.steps:
                for name, value in step.get("set_settings", {}).get("values", {}).items():
                    settings[name] = _seconds(value) if name in TIMERS else value
    return out


def _timers_in_drill(settings: dict[str, Any], steps: list[dict[str, Any]]) -> dict[str, float]:
    """The span and beat in force at the drill's kill (or restart)."""
    timers = {k: float(settings[k]) for k in TIMERS}
    for step in steps:
        if "kill" in step or "restart" in step:
            break
        for name, value in step.get("set_settings", {}).get("values", {}).items():
            if name in timers:
                timers[name] = _seconds(value)
    return timers


def test_a_primary_back_in_time_after_a_failed_heartbeat() -> None:
    """PR-1/PR-3 (promotes-when-primary-returns, last-contact-never-refreshed): o1 held on
    its primary, in touch with its shadow for longer than the span, killed, and back on its
    queue database after a heartbeat and a half; the span long enough beside that outage
    and the model's slack on either side for an early promotion to show."""
    back = [d for d in _drills() if "back after a failed heartbeat" in d[2]]
    assert back
    for topology, settings, _, steps in back:
        timers = _timers_in_drill(settings, steps)
        span, beat = timers["ShadowResubmitTimeSpan"], timers["ShadowHeartbeatFrequency"]
        # the model allows a promotion from the span less a beat less the slack after
        # the primary was last reachable; a returning primary is seen back up to the
        # slack late, after a heartbeat and a half and a restart (1.5 s at most), and a
        # shadow promoting it does so at its next heartbeat
        assert span - beat - SLACK > 1.5 * beat + 1.5 + SLACK + beat
        send = next(s["send"] for s in steps if "send" in s)
        via = send["via"]
        held = [s["fault"]["link"] for s in steps[: steps.index({"send": send})] if "fault" in s]
        sinks = {h["sink"] for h in topology_data(topology).get("next_hops", {}).values()}
        assert held and {link.partition("->")[2] for link in held} <= sinks
        assert all(link.startswith(f"{via}->") for link in held)
        kill = steps.index({"kill": via})
        assert _seconds(steps[kill - 1]["wait"]) >= span + beat  # in touch past the span
        assert steps[kill + 1] == {"wait": f"{1.5 * beat:g}s"}
        assert steps[kill + 2] == {"restart": via}
        assert steps.index({"heal": "all"}) > kill + 2


def test_a_primary_kept_down_past_the_window_after_a_long_contact() -> None:
    """PR-1: killed after more than the span in touch, kept down past the promotion
    window (its shadow must promote after the span, not at the first missed heartbeat),
    back on a new queue database."""
    down = [d for d in _drills() if "kept down past the promotion window" in d[2]]
    assert down
    for _, settings, _, steps in down:
        timers = _timers_in_drill(settings, steps)
        span, beat = timers["ShadowResubmitTimeSpan"], timers["ShadowHeartbeatFrequency"]
        # a shadow promoting at the first missed heartbeat delivers a beat and a second
        # after the kill: early by the model's reckoning only where the span exceeds that
        assert span - beat - SLACK > beat + 1.0
        via = next(s["send"]["via"] for s in steps if "send" in s)
        kill = steps.index({"kill": via})
        assert _seconds(steps[kill + 1]["wait"]) > span + 2 * beat
        assert steps[kill + 2] == {"wipe": via}


def test_redundancy_switched_off_after_the_copy_then_a_new_queue_database() -> None:
    """PR-2 (stops-asking-when-xshadow-withdrawn): the copy taken, the setting switched
    off apart from the 250, the primary wiped; nothing is sent while it is off (a message
    without a copy would be lost with the wipe), and it is switched on again."""
    withdrawn = [d for d in _drills() if "ShadowRedundancyEnabled set false" in d[2]]
    assert withdrawn
    for _, settings, _, steps in withdrawn:
        assert settings["RejectMessageOnShadowFailure"] is True  # the 250 means a copy
        kinds = [next(iter(s)) for s in steps]
        off = steps.index({"set_settings": {"values": {"ShadowRedundancyEnabled": False}}})
        on = steps.index({"set_settings": {"values": {"ShadowRedundancyEnabled": True}}})
        assert kinds.index("send") < off - 1 and kinds[off - 1] == "wait"
        assert kinds[off + 1] == "wipe" and off < on
        assert kinds.count("send") == 1


def test_a_primary_restarted_before_its_shadows_asked_for_the_discard() -> None:
    """DI-5 (forgets-discards-on-restart): o1 delivered by its primary while every shadow
    it may copy to is cut from asking it, the primary restarted on its queue database the
    model's slack after the delivery, the cuts healed, and the shadows' queues looked at
    once the model judges them: past a heartbeat and the slack after the slack past the
    return. The span outlasts the cut, so no shadow promotes meanwhile."""
    drills = _drills(prefix="restart:")
    assert drills
    for topology, settings, _, steps in drills:
        send = next(s["send"] for s in steps if "send" in s)
        via = send["via"]
        cuts = [s["fault"]["link"] for s in steps[: steps.index({"send": send})] if "fault" in s]
        # every shadow the primary may copy to is kept from asking it (only the copies,
        # from the primary to the shadows, go through)
        preference = str(settings.get("ShadowMessagePreferenceSetting", "PreferRemote"))
        shadows = Routes(topology_data(topology), preference).shadows[via]
        assert sorted(link.partition("->")[0] for link in cuts) == sorted(shadows)
        assert all(link.endswith(f"->{via}") for link in cuts)
        restart = steps.index({"restart": via})
        assert "delivered" in steps[restart - 2]["wait"]
        assert _seconds(steps[restart - 1]["wait"]) >= SLACK
        healed = [s["heal"] for s in steps[restart + 1 : restart + 1 + len(cuts)]]
        assert healed == cuts
        timers = _timers_in_drill(settings, steps)
        beat = timers["ShadowHeartbeatFrequency"]
        look = restart + 1 + len(cuts)
        # asked within a beat of the slack after the return; judged from a beat and the
        # slack after that, with margin for the harness's own lateness
        assert _seconds(steps[look]["wait"]) > beat + 2 * SLACK
        assert all("snapshot" in s for s in steps[look + 1 : look + 1 + len(cuts)])
        span = timers["ShadowResubmitTimeSpan"]
        # the cut: a wait for the delivery (a second here), the slack, a restart
        assert span > 1.0 + SLACK + 0.5 + 1.5 + beat + SLACK


def test_the_drills_end_healed_with_the_timers_put_back() -> None:
    drills = _drills()
    assert {"back", "kept down", "set false"} <= {
        k for _, _, label, _ in drills for k in ("back", "kept down", "set false") if k in label
    }
    restarts = _drills(prefix="restart:")
    for _, settings, _, steps in drills + restarts:
        cut = [s["fault"]["link"] for s in steps if "fault" in s]
        assert {"heal": "all"} in steps or cut == [s["heal"] for s in steps if "heal" in s]
        assert next(iter(steps[-1])) in ("wait", "set_settings")
        changed = [s["set_settings"]["values"] for s in steps if "set_settings" in s]
        for name in TIMERS:
            set_to = [values[name] for values in changed if name in values]
            if set_to:
                assert _seconds(set_to[-1]) == float(settings[name])


def test_the_timers_a_drill_put_back_do_not_lengthen_the_waits_after_it() -> None:
    """The recovery after a drill counts the timers it left in force, not those it set
    for itself (its own waits count those)."""
    for index in range(100):
        explored = plan(11, index, capabilities=ALL, length=deep_length(index))
        at = [i for i, op in enumerate(explored.operations) if op.label.startswith("outage:")]
        if at and "ShadowResubmitTimeSpan 8s" in explored.operations[at[0]].label:
            ops = explored.operations
            without = [op for i, op in enumerate(ops) if i != at[0]]
            assert explored.recovery(ops) == explored.recovery(without)
            return
    raise AssertionError("no drill set ShadowResubmitTimeSpan for itself in 100 plans")


def test_no_drill_in_the_slice_on_a_virtual_clock_or_without_process_control() -> None:
    for index in range(3):
        assert not [
            op
            for op in plan(2027, index, capabilities=ALL, length=10).operations
            if op.label.startswith(("outage:", "restart:"))
        ]
    assert all(topology_data(t).get("clock") != "virtual" for t, *_ in _drills())
    assert all(topology_data(t).get("clock") != "virtual" for t, *_ in _drills(prefix="restart:"))
    assert not _drills(ALL - {"kill"}, count=60)
    # the restart drill sets its own span: never without live settings
    assert not _drills(ALL - {"set_settings"}, count=60, prefix="restart:")
    # without live settings: only what the timers drawn at the start allow (never the
    # return in time, which needs a span longer than any drawn), and no switch-off
    fixed = _drills(ALL - {"set_settings"})
    assert fixed and all("kept down" in label for _, _, label, _ in fixed)
