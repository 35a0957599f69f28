"""Combinations exploration found on the reference, each a false FAIL of a check until
its fix, run again on a real reference cluster: each must PASS, and the run must show
the combination really happened (so that the test cannot pass by missing it).

- seed 2002, scenario 480 (shrunk to two operations): the next hop refuses one recipient
  for good, the primary reports it to the sender, then the primary is wiped; its shadow,
  still holding the copy (on a virtual clock no heartbeat released it), promotes it and
  delivers it to every recipient once the next hop accepts again. The report was true
  when it was sent, and the promoted copy is the duplicate PR-2 allows: the bounce
  invariant does not count it against the report.

(Seed 1001's false CR-10 divergence is in model_scenarios.yaml, seed 2002's scenario 625
is ``cr10_every_recipient_refused_for_good_is_reported`` in scenarios/refusals.yaml.)
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pytest_shadowcheck.engine.run import run_scenario
from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.targets.reference import ReferenceTarget
from pytest_shadowcheck.verdict import Status

REPORTED_THEN_PROMOTED = """\
scenarios:
  - name: reported_then_promoted_after_a_wipe
    behaviours: [PR-2]
    topology: two-node-dag-virtual
    settings:
      ShadowHeartbeatFrequency: 500ms
      ShadowResubmitTimeSpan: 6s
      TransientFailureRetryInterval: 500ms
      SendConnectionInactivityTimeout: 1s
      RejectMessageOnShadowFailure: true
    timeout: 90s
    settle: 20s
    steps:
      - sink: {name: mailbox, rcpt: {nobody@corp.test: 550 5.1.1 no such user}}
      - send: {id: m4, via: mbx2, to: [bob@corp.test, nobody@corp.test]}
      - wait: 2s
      - wipe: mbx2
      - wait: {until: quiet, timeout: 9.5s}
      - sink: {name: mailbox, reply: accept}
      - advance: 1s
      - wait: 1s
      - advance: 1s
      - wait: {until: quiet, timeout: 11.5s}
    expect:
      - model: {}
"""


@pytest.mark.slow
def test_a_report_then_a_promoted_copy_after_the_reporters_wipe_is_no_false_report(
    tmp_path: Path,
) -> None:
    source = tmp_path / "s.yaml"
    source.write_text(REPORTED_THEN_PROMOTED)
    (scenario,) = load_scenario_file(source)
    history = tmp_path / "history.json"
    verdict = run_scenario(
        scenario, ReferenceTarget(), workdir=tmp_path / "run", history_file=history
    )
    bounce = [c for c in verdict.checks if c.name == "no bounce for delivered m4"]
    assert bounce and bounce[0].status == Status.PASS, verdict.checks
    assert not verdict.failures and verdict.overall is None, [c.render() for c in verdict.checks]
    # the combination happened: mbx2 reported nobody failed, then mbx1 delivered to it
    events = json.loads(history.read_text())["events"]
    to_nobody = [
        e["data"]["helo"]
        for e in events
        if e["kind"] == "delivery" and "nobody@corp.test" in e["data"]["rcpt_tos"]
    ]
    reports = [
        e for e in events if e["kind"] == "delivery" and e["data"].get("mail_from") in ("", "<>")
    ]
    assert reports and to_nobody == ["mbx1"], (reports, to_nobody)
