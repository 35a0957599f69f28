"""The harness's own lateness is recorded and never blamed on the MTA.

Real reference nodes; the harness's event loop is really blocked (as an overloaded
machine blocks it) right after the sender got its 250, through the scenario hook every
run calls. The delivery that follows is relayed and stamped late by exactly that stall:
a timing check that misses by no more than the stall says INCONCLUSIVE, naming the
harness's delay; a miss beyond it (the next hop really slow) is still a FAIL."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from harnesskit import LoopStall

from pytest_shadowcheck.engine.run import run_scenario
from pytest_shadowcheck.history import History
from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.targets.reference import ReferenceTarget
from pytest_shadowcheck.verdict import Status

SCENARIO = """\
scenarios:
  - name: delivered_right_after_the_reply
    behaviours: [CR-1]
    topology: single-node
    steps:
{slow}      - send: {{id: m1, via: mbx1, to: [alice@corp.test]}}
      - wait: {{delivered: m1, timeout: 10s}}
    expect:
      - timing:
          from: {{reply: m1}}
          to: {{delivered: m1}}
          at_most: 0s
          tolerance: 0.4s
"""

SLOW_NEXT_HOP = """\
      - sink:
          name: mailbox
          rcpt: {"alice@corp.test": {reply: accept, delay: 1.5s}}
"""


def _replied(history: History) -> bool:
    """The sender has its reply to the final dot."""
    return any(e.data.get("command") == "EOD" for e in history.events(kind="reply"))


def _run(tmp_path: Path, stall: float, slow: bool) -> tuple[Status, str]:
    source = tmp_path / "s.yaml"
    source.write_text(SCENARIO.format(slow=SLOW_NEXT_HOP if slow else ""))
    (scenario,) = load_scenario_file(source)
    verdict = run_scenario(
        scenario,
        ReferenceTarget(),
        workdir=tmp_path / "run",
        hooks=LoopStall(stall, _replied),
        history_file=tmp_path / "history.json",
    )
    (timing,) = [c for c in verdict.checks if c.name == "timing"]
    return timing.status, timing.observed


@pytest.mark.parametrize(
    ("stall", "slow", "status", "said"),
    [
        (0.0, False, Status.PASS, "after mbx1 told the sender `250"),
        (1.5, False, Status.INCONCLUSIVE, "but the harness itself ran 1."),
        (0.3, True, Status.FAIL, "after mbx1 told the sender `250"),
    ],
    ids=["quiet", "harness-stalled", "next-hop-slow-beyond-the-stall"],
)
def test_a_miss_the_harness_caused_is_no_verdict(
    tmp_path: Path, stall: float, slow: bool, status: Status, said: str
) -> None:
    got, observed = _run(tmp_path, stall, slow)
    assert got == status, observed
    assert said in observed, observed
    if status == Status.INCONCLUSIVE:
        assert "no verdict on the MTA" in observed


EARLY = """\
scenarios:
  - name: delivered_too_soon_for_the_window
    behaviours: [CR-1]
    topology: single-node
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - wait: {delivered: m1, timeout: 10s}
    expect:
      - timing: {from: {step: "^send id=m1 "}, to: {delivered: m1}, at_least: 2s, tolerance: 0.2s}
"""


class StallAtStart:
    """The scenario hooks: block the run's event loop for ``seconds`` before its first
    step (as node start-up under load does)."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds

    def shadowcheck_scenario_started(self, scenario: Any, target: Any, history: History) -> None:
        time.sleep(self.seconds)

    def shadowcheck_scenario_finished(self, **_: Any) -> None:
        pass


def test_a_stall_long_before_the_start_excuses_no_early_event(tmp_path: Path) -> None:
    """A 2.2 s stall that ended as the first step began excuses at most the second before
    it: a delivery 1.8 s too early stays a FAIL."""
    source = tmp_path / "s.yaml"
    source.write_text(EARLY)
    (scenario,) = load_scenario_file(source)
    verdict = run_scenario(
        scenario, ReferenceTarget(), workdir=tmp_path / "run", hooks=StallAtStart(2.2)
    )
    (timing,) = [c for c in verdict.checks if c.name == "timing"]
    assert timing.status == Status.FAIL, timing.observed


def test_the_stall_is_in_the_history(tmp_path: Path) -> None:
    _run(tmp_path, 0.5, False)
    events = json.loads((tmp_path / "history.json").read_text())["events"]
    late = [e["data"]["late"] for e in events if e["kind"] == "lag"]
    assert late and max(late) >= 0.45, late
