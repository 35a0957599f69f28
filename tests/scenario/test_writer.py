"""scenario_yaml writes a scenario back in the suite's format: the loader reads the text
into an equal scenario (generated ones, and the bundled library's that hold only
writable steps)."""

from __future__ import annotations

from pathlib import Path

from pytest_shadowcheck.engine.generator import plan
from pytest_shadowcheck.scenario.capabilities import CAPABILITIES
from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.scenario.model import Scenario, Step
from pytest_shadowcheck.scenario.steps import CheckSpec, SessionSpec
from pytest_shadowcheck.scenario.writer import WriterError, scenario_yaml

SUITE = Path(__file__).resolve().parents[2] / "scenarios"


def _arg(step: Step) -> object:
    """A step's arguments; an inline check's without the place it was read from."""
    if isinstance(step.arg, CheckSpec):
        e = step.arg.expectation
        return (e.kind, e.arg, e.behaviours, e.given, e.precondition)
    if isinstance(step.arg, SessionSpec):
        a = step.arg
        said = [(i.send, i.auth_as, i.message, i.reply, i.refused) for i in a.say]
        # an expression (``ReceiveConnectionTimeout + 1s``) is written as its value
        times = [None if x is None else round(x, 6) for x in (a.timeout, a.idle, a.keepalive)]
        return (a.via, said, times, a.control, a.behaviours)
    return step.arg


def _same(a: Scenario, b: Scenario) -> None:
    assert b.name == a.name and b.title == a.title and b.behaviours == a.behaviours
    assert b.named_evidence == a.named_evidence
    assert b.topology == a.topology
    assert (b.settings, b.node_settings) == (a.settings, a.node_settings)
    assert (b.timeout, b.settle, b.given, b.requires) == (a.timeout, a.settle, a.given, a.requires)
    assert [(s.kind, _arg(s)) for s in b.steps] == [(s.kind, _arg(s)) for s in a.steps]
    assert [(s.kind, s.arg, s.behaviours, s.given, s.precondition) for s in b.expect] == [
        (s.kind, s.arg, s.behaviours, s.given, s.precondition) for s in a.expect
    ]


def _round_trip(scenario: Scenario, tmp_path: Path) -> Scenario:
    path = tmp_path / f"{scenario.name}.yaml"
    path.write_text(scenario_yaml(scenario, comment="written\nby the test"), encoding="utf-8")
    (back,) = load_scenario_file(path)
    return back


def test_generated_scenarios_round_trip(tmp_path: Path) -> None:
    for seed in (1, 2, 3):
        for index in range(15):
            scenario = plan(seed, index, capabilities=frozenset(CAPABILITIES), length=16).scenario(
                directory=tmp_path / "generated"
            )
            # it lists every behaviour its model may judge: only a check naming one is
            # evidence of it
            assert scenario.named_evidence
            back = _round_trip(scenario, tmp_path)
            _same(scenario, back)
            # and the text is a fixed point: written again, it reads the same
            assert scenario_yaml(back) == scenario_yaml(scenario)


def test_the_written_file_starts_with_its_comment(tmp_path: Path) -> None:
    scenario = plan(1, 0, capabilities=frozenset(CAPABILITIES), length=3).scenario(
        directory=tmp_path
    )
    text = scenario_yaml(scenario, comment="shrunk from 16 operations\n\nto 3")
    assert text.startswith("# shrunk from 16 operations\n#\n# to 3\nscenarios:\n")


def _library() -> list[Scenario]:
    return [s for path in sorted(SUITE.glob("*.yaml")) for s in load_scenario_file(path)]


def test_library_scenarios_round_trip(tmp_path: Path) -> None:
    """Every bundled scenario the writer can write (no workload step, a topology by
    name) reads back equal: checks, sink scripts, points, settings, sessions."""
    written = 0
    for scenario in _library():
        try:
            back = _round_trip(scenario, tmp_path)
        except WriterError:
            continue
        _same(scenario, back)
        written += 1
    assert written >= 40


def test_session_steps_round_trip(tmp_path: Path) -> None:
    """A stranger's refused verbs, AUTH as a node, a message, idle and keepalive, a
    control twin: the library's sessions read back equal (exploration draws them)."""
    with_session = [s for s in _library() if any(x.kind == "session" for x in s.steps)]
    assert len(with_session) >= 5
    for scenario in with_session:
        if any(x.kind == "workload" for x in scenario.steps) or scenario.topology.name == "inline":
            continue
        _same(scenario, _round_trip(scenario, tmp_path))
