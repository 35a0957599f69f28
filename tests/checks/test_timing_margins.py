"""benchmarks/timing_margins.py measures a kept history's timing windows as the check
judged them: run on real reference nodes, then read back from the history file."""

from __future__ import annotations

import importlib.util
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from pytest_shadowcheck.engine.run import run_scenario
from pytest_shadowcheck.history import History
from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.targets.reference import ReferenceTarget
from pytest_shadowcheck.verdict import Status

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "timing_margins.py"


def _script() -> ModuleType:
    spec = importlib.util.spec_from_file_location("timing_margins", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up
    spec.loader.exec_module(module)
    return module


SCENARIOS = """\
scenarios:
  - name: delivered_soon_after_the_reply
    behaviours: [CR-1]
    topology: single-node
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - wait: {delivered: m1, timeout: 10s}
    expect:
      - timing: {from: {reply: m1}, to: {delivered: m1}, at_most: 2s, tolerance: 0.5s}
  - name: delivered_late_after_the_reply
    behaviours: [CR-1]
    topology: single-node
    steps:
      - sink: {name: mailbox, rcpt: {"alice@corp.test": {reply: accept, delay: 1.5s}}}
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - wait: {delivered: m1, timeout: 10s}
    expect:
      - timing: {from: {reply: m1}, to: {delivered: m1}, at_most: 0s, tolerance: 0.2s}
"""

@pytest.mark.slow
def test_margins_read_from_histories_are_the_checks_own(tmp_path: Path) -> None:
    source = tmp_path / "timed.yaml"
    source.write_text(SCENARIOS)
    kept = tmp_path / "histories"
    observed: dict[str, tuple[Status, float]] = {}
    for scenario in load_scenario_file(source):
        history = tmp_path / f"{scenario.name}.json"
        verdict = run_scenario(
            scenario, ReferenceTarget(), workdir=tmp_path / scenario.name, history_file=history
        )
        (timing,) = [c for c in verdict.checks if c.name == "timing"]
        delta = re.search(r"(\d+\.\d+)s after", timing.observed)
        assert delta, timing.observed
        observed[scenario.name] = (timing.status, float(delta.group(1)))
        # named as --shadowcheck-history names it
        kept.mkdir(exist_ok=True)
        shutil.copy(history, kept / f"tests_timed.yaml__{scenario.name}[CR-1].json")
    assert observed["delivered_soon_after_the_reply"][0] == Status.PASS
    assert observed["delivered_late_after_the_reply"][0] == Status.FAIL
    # the sender's reply is the one to the end of DATA, not the QUIT answer after it
    history = History.read_json(tmp_path / "delivered_late_after_the_reply.json")
    (scenario, *_) = load_scenario_file(source)
    run = _script().RecordedRun(scenario, history)
    (eod,) = [e for e in history.events(kind="reply") if e.data.get("command") == "EOD"]
    assert run.messages["m1"].reply_t == eod.t and run.messages["m1"].code == 250

    out = subprocess.run(
        [sys.executable, str(SCRIPT), str(kept), "--scenarios", str(source)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    rows = {
        m.group("name"): (float(m.group("margin")), float(m.group("granted")), m.group("outside"))
        for m in re.finditer(
            r"^\s*(?P<margin>-?\d+\.\d+)\s+(?P<granted>-?\d+\.\d+)\s+(?P<outside>\d+/\d+)\s+"
            r"(?P<name>\w+) \(at most",
            out,
            re.MULTILINE,
        )
    }
    # the tightest first: the window that failed leads
    assert out.splitlines()[1].split()[3] == "delivered_late_after_the_reply", out
    late, soon = rows["delivered_late_after_the_reply"], rows["delivered_soon_after_the_reply"]
    # 0 s + 0.2 s of tolerance against the delay the check observed (its text rounds to
    # the millisecond), and its granted lateness left it a FAIL
    assert late[0] == pytest.approx(0.2 - observed["delivered_late_after_the_reply"][1], abs=2e-3)
    assert late[1] < 0 and late[2] == "1/1", out
    assert soon[0] == pytest.approx(2.5 - observed["delivered_soon_after_the_reply"][1], abs=2e-3)
    assert soon[0] > 0 and soon[2] == "0/1", out


SYNTHETIC = """\
scenarios:
  - name: two_bounds
    behaviours: [TO-1]
    topology: single-node
    steps:
      - wait: 1s
    expect:
      - timing: {from: {step: "^start"}, to: {step: "^end"}, at_least: 1s, at_most: 1s}
"""


def test_a_window_s_margins_grant_the_lateness_the_check_grants(tmp_path: Path) -> None:
    """Both bounds at the default tolerance (0.5 s), with the machine's lateness placed
    where the check does and does not count it."""
    tm = _script()
    source = tmp_path / "s.yaml"
    source.write_text(SYNTHETIC)
    (scenario,) = load_scenario_file(source)
    history = History()
    zero = time.monotonic() - history.now()
    history.record_at(zero + 5.0, "lag", late=0.04)  # long before: counts for neither
    history.record_at(zero + 9.5, "lag", late=0.1)  # the second before the start
    history.record_at(zero + 10.0, "step", text="start")
    history.record_at(zero + 10.8, "wait", node="mbx1", waited=0.2, over=0.05)
    history.record_at(zero + 11.7, "step", text="end")
    (timing,) = scenario.expect
    measured = tm.measure(tm.RecordedRun(scenario, history), timing)
    got = {side: (margin, granted) for side, margin, granted in measured}
    # 1.7 s after the start: 0.2 s past 1 s + 0.5 s; 1.2 s above 1 s - 0.5 s
    # times are monotonic readings (hours of uptime): sums of them keep about 1e-11 s
    near = 1e-9
    assert got["at most"][0] == pytest.approx(-0.2, abs=near)
    assert got["at most"][1] == pytest.approx(-0.2 + 0.2, abs=near)  # the node's wait inside
    assert got["at least"][0] == pytest.approx(1.2, abs=near)
    assert got["at least"][1] == pytest.approx(1.2 + 0.1 + 0.2, abs=near)  # and the lag before


def test_a_window_naming_a_message_refused_before_its_data_is_not_measured(
    tmp_path: Path,
) -> None:
    tm = _script()
    source = tmp_path / "s.yaml"
    source.write_text(SCENARIOS)
    scenario = load_scenario_file(source)[0]
    history = History()  # the sender's session ended at RCPT: no DATA, no delivery
    history.record("reply", "client->mbx1", 1, "s2c", command="RCPT", code=550, text="no")
    kept = tmp_path / "kept"
    history.write_json(kept / f"x__{scenario.name}[CR-1].json")
    (kept / "y__delivered_soon_after_the_reply[CR-1].json").write_text('{"events": [')
    unreadable: list[Path] = []
    windows = tm.collect([kept], {scenario.name: scenario}, unreadable)
    (window,) = windows.values()
    assert window.runs == [] and window.unmeasured == 1
    assert [p.name for p in unreadable] == ["y__delivered_soon_after_the_reply[CR-1].json"]
