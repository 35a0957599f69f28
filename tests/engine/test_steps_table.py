"""The engine's ``STEPS`` table: one handler per action step kind, each typed against its
spec; the nemesis plays typed specs through it; settings are shown by name."""

from __future__ import annotations

import asyncio
import inspect
from pathlib import Path
from typing import Any

import pytest

from pytest_shadowcheck.engine.nemesis import Fault, run_nemesis
from pytest_shadowcheck.engine.run import Run
from pytest_shadowcheck.engine.steps import STEPS, set_settings, step_label
from pytest_shadowcheck.errors import SourceRef, TargetError
from pytest_shadowcheck.history import History
from pytest_shadowcheck.progress import Progress
from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.scenario.model import Step
from pytest_shadowcheck.scenario.steps import (
    ACTION_SPECS,
    FaultSpec,
    HealSpec,
    NodeActionSpec,
    SettingsSpec,
)
from pytest_shadowcheck.verdict import Status, Verdict

WHERE = SourceRef(Path("s.yaml"), 7)


def test_every_action_kind_has_a_handler_typed_against_its_spec() -> None:
    assert set(STEPS) == set(ACTION_SPECS)
    for kind, handler in STEPS.items():
        annotation = inspect.signature(handler).parameters["spec"].annotation
        assert annotation == ACTION_SPECS[kind].__name__, kind


class Recorder:
    """Stands in for the run: records the steps the nemesis has it do."""

    def __init__(self) -> None:
        self.history = History()
        self.scenario = type("S", (), {"where": WHERE})()
        self.steps: list[Step] = []

    async def do(self, step: Step, verdict: Verdict) -> None:
        self.steps.append(step)


def test_the_nemesis_starts_no_fault_past_its_horizon() -> None:
    # two faults at once, then one 3 s later: past a 1 s horizon, so not begun
    faults = [
        Fault(0, "pause", ("mbx1",), (), 0.0, 0.0),
        Fault(1, "pause", ("mbx2",), (), 0.0, 0.0),
        Fault(2, "pause", ("mbx1",), (), 3.0, 0.0),
    ]
    run = Recorder()
    played = asyncio.run(
        run_nemesis(run, faults, asyncio.Event(), Verdict("s", []), horizon=1.0)  # type: ignore[arg-type]
    )
    assert played == 2
    assert [s.kind for s in run.steps] == ["pause", "resume", "pause", "resume"]
    (note,) = [e for e in run.history.events(kind="note") if "nemesis_horizon" in e.data]
    assert "no fault starts 1.0s into the workload or later" in str(note.data["text"])


def test_the_nemesis_plays_typed_specs() -> None:
    faults = [
        Fault(0, "kill", ("mbx1",), (), 0.0, 0.0),
        Fault(1, "wipe", ("mbx2",), (), 0.0, 0.0),
        Fault(2, "pause", ("mbx1",), (), 0.0, 0.0),
        Fault(3, "restart", ("mbx2",), (), 0.0, 0.0),
        Fault(4, "delay", ("mbx1",), ("mbx1->mbx2",), 0.0, 0.0, delay=0.5),
        Fault(5, "cut", ("mbx2",), ("mbx2->mailbox",), 0.0, 0.0),
    ]
    run = Recorder()
    played = asyncio.run(run_nemesis(run, faults, asyncio.Event(), Verdict("s", [])))  # type: ignore[arg-type]
    assert played == len(faults)
    assert [(s.kind, s.arg) for s in run.steps] == [
        ("kill", NodeActionSpec("mbx1")),
        ("restart", NodeActionSpec("mbx1")),
        ("kill", NodeActionSpec("mbx2")),
        ("wipe", NodeActionSpec("mbx2")),
        ("pause", NodeActionSpec("mbx1")),
        ("resume", NodeActionSpec("mbx1")),
        ("restart", NodeActionSpec("mbx2")),
        ("fault", FaultSpec(link="mbx1->mbx2", kind="delay", seconds=0.5, direction="both")),
        ("heal", HealSpec("mbx1->mbx2")),
        ("fault", FaultSpec(link="mbx2->mailbox", kind="cut")),
        ("heal", HealSpec("mbx2->mailbox")),
    ]
    # the history shows them as it always did (scenarios match these texts)
    assert [step_label(s) for s in run.steps[7:9]] == [
        "fault link=mbx1->mbx2 kind=delay seconds=0.5",
        "heal mbx1->mbx2",
    ]


def test_session_and_workload_steps_have_labels_of_their_own(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "scenarios:\n  - name: s1\n    behaviours: [XS-3]\n"
        "    topology:\n      nodes: {mbx1: {}, mbx2: {}}\n"
        "      next_hops: {corp.test: {sink: mailbox}}\n"
        "    steps:\n"
        "      - session: {via: mbx1, say: [EHLO x, 'AUTH PLAIN c2VjcmV0', {auth_as: mbx2}]}\n"
        "      - workload: {name: w1, messages: 5, sessions: 2}\n"
    )
    (scenario,) = load_scenario_file(path)
    assert [step_label(s) for s in scenario.steps] == [
        "session via=mbx1: EHLO x / AUTH PLAIN **** / AUTH PLAIN as mbx2",
        "workload w1: 5 messages, 2 sessions",
    ]


def test_a_step_with_raw_arguments_is_refused_by_name(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(
        "scenarios:\n  - name: s1\n    behaviours: [CR-4]\n"
        "    topology:\n      nodes: {mbx1: {}}\n    steps:\n      - kill: mbx1\n"
    )
    (scenario,) = load_scenario_file(path)
    run = Run(scenario, None, History(), Progress("s1"), tmp_path)  # type: ignore[arg-type]
    raw = Step("fault", {"link": "client->mbx1", "kind": "cut"}, WHERE)
    with pytest.raises(TypeError, match=r"step fault \(s.yaml:7\) has dict .*not a FaultSpec"):
        asyncio.run(run.do(raw, Verdict("s1", [])))


class SettingsRun:
    """Stands in for the run: nodes that take or refuse settings."""

    def __init__(self, refuse: bool) -> None:
        self.refuse = refuse
        self.changes: list[Any] = []
        self.target = self

    def running(self, nodes: tuple[str, ...] = ()) -> list[str]:
        return list(nodes or ("mbx1",))

    async def set_settings(self, node: str, values: dict[str, Any]) -> Any:
        if self.refuse:
            raise TargetError("PUT /settings: HTTP 400")
        return {"ReceiveConnectionTimeout": 0.2, "ShadowRedundancyEnabled": True}

    def restarted_for_change(self, node: str, answer: Any) -> None:
        pass


@pytest.mark.parametrize("refuse", [False, True])
def test_settings_checks_show_settings_by_name(refuse: bool) -> None:
    spec = SettingsSpec(values={"ReceiveConnectionTimeout": 0.2}, result="accepted")
    verdict = Verdict("s1", [])
    run = SettingsRun(refuse)
    asyncio.run(set_settings(run, spec, Step("set_settings", spec, WHERE), verdict))  # type: ignore[arg-type]
    (result,) = verdict.checks
    assert result.expected == "mbx1 accepted ReceiveConnectionTimeout=200ms"
    if refuse:
        assert (result.name, result.status) == ("settings on mbx1 rejected", Status.FAIL)
        assert result.observed == "rejected: PUT /settings: HTTP 400"
        assert run.changes == []
    else:
        assert (result.name, result.status) == ("settings on mbx1 accepted", Status.PASS)
        assert result.observed == (
            "accepted: ReceiveConnectionTimeout=200ms, ShadowRedundancyEnabled=true"
        )
        assert run.changes == [(None, ("settings", spec.values))]
