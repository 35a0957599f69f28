"""benchmarks/timing_margins.py measures a kept history's timing windows as the check
judged them: run on real reference nodes, then read back from the history file."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from pytest_shadowcheck.engine.run import run_scenario
from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.targets.reference import ReferenceTarget
from pytest_shadowcheck.verdict import Status

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "timing_margins.py"

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

pytestmark = pytest.mark.slow


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
