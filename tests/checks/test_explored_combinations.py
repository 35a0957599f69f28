"""Combinations exploration found on the reference, each a false FAIL of a check until
its fix, run again on a real reference cluster: each must PASS, and the run must show
the combination really happened (so that the test cannot pass by missing it).

- seed 2002, scenario 480 (shrunk to two operations): the next hop refuses one recipient
  for good, the primary reports it to the sender, then the primary is wiped; its shadow,
  still holding the copy (on a virtual clock no heartbeat released it), promotes it and
  delivers it to every recipient once the next hop accepts again. The report was true
  when it was sent, and the promoted copy is the duplicate PR-2 allows: the bounce
  invariant does not count it against the report.

- seed 3003, scenario 605 (shrunk to four operations): the next hop refuses one
  recipient for good while the sender's own server defers the report; the primary is
  killed and stays down past ShadowResubmitTimeSpan, its shadow promotes the copy and
  delivers it to every recipient (the next hop accepts again), and the restarted primary
  then sends the report it made before: it arrives after that delivery, and is still
  no false report.

- seed 4004, scenario 975 (shrunk to three operations): the same with no node fault at
  all: the shadow's link to its primary is cut, so it promotes its copy after
  ShadowResubmitTimeSpan (PR-1) while the primary, up, has already reported the refusal.

- seed 4646, scenario 219 (shrunk to six operations): the primary keeps its messages a
  week, its shadow two days (MessageExpirationTimeout changed live on each); a message
  held by a cut link outlives the shadow's SafetyNetHoldTime + MessageExpirationTimeout
  on the virtual clock, so the shadow lets its copy go (SN-4), and then the primary is
  wiped: no copy is left, and the loss is outside the guarantee, not a FAIL.

(Seed 1001's false CR-10 divergence is in model_scenarios.yaml, seed 2002's scenario 625
is ``cr10_every_recipient_refused_for_good_is_reported`` in scenarios/refusals.yaml.)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harnesskit import run_on_reference

from pytest_shadowcheck.verdict import Status, Verdict

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


REPORT_DEFERRED_PAST_A_PROMOTION = """\
scenarios:
  - name: report_deferred_past_a_promotion
    behaviours: [PR-1]
    topology: creation-forks
    settings:
      ShadowHeartbeatFrequency: 1s
      ShadowResubmitTimeSpan: 4s
      TransientFailureRetryInterval: 500ms
      SendConnectionInactivityTimeout: 1s
      RejectMessageOnShadowFailure: true
    timeout: 120s
    settle: 20s
    steps:
      - sink: {name: other, rcpt: {nobody@other.test: 500 5.0.0 refused}}
      - sink: {name: outside, data: "451 4.3.0 the sender's server is busy"}
      - send: {id: m5, via: mbx1, to: [dan@other.test, nobody@other.test]}
      - wait: 2s
      - sink: {name: other, reply: accept}
      - wait: {until: quiet, timeout: 8.5s}
      - kill: mbx1
      - wait: 9.5s
      - sink: {name: outside, reply: accept}
      - restart: mbx1
      - wait: {until: quiet, timeout: 10.5s}
    expect:
      - model: {}
"""


@pytest.mark.slow
def test_a_report_deferred_past_a_promotion_is_no_false_report(tmp_path: Path) -> None:
    events, verdict = run_on_reference(tmp_path, REPORT_DEFERRED_PAST_A_PROMOTION)
    _no_false_report(verdict, "m5")
    # the combination happened: mbx2 delivered to nobody, then mbx1's report came
    to_nobody = [t for t, by in _deliveries(events, "nobody@other.test") if by == "mbx2"]
    reports = [t for t, by in _deliveries(events) if by == "mbx1"]
    assert to_nobody and reports and min(to_nobody) < min(reports), (to_nobody, reports)


def _no_false_report(verdict: Verdict, ref: str) -> None:
    """The bounce invariant passed for ``ref``, and nothing of the run failed or broke."""
    rendered = [c.render() for c in verdict.checks]
    bounce = [c for c in verdict.checks if c.name == f"no bounce for delivered {ref}"]
    assert bounce and bounce[0].status == Status.PASS, rendered
    assert not verdict.failures and verdict.overall is None, rendered


def _deliveries(events: list[dict[str, Any]], rcpt: str = "") -> list[tuple[float, str]]:
    """(when, by which node) of each delivery to ``rcpt``; with none named, of each
    non-delivery report (a delivery with the null reverse-path)."""
    return [
        (e["t"], e["data"]["helo"])
        for e in events
        if e["kind"] == "delivery"
        and (rcpt in e["data"]["rcpt_tos"] if rcpt else e["data"].get("mail_from") in ("", "<>"))
    ]


@pytest.mark.slow
def test_a_report_then_a_promoted_copy_after_the_reporters_wipe_is_no_false_report(
    tmp_path: Path,
) -> None:
    events, verdict = run_on_reference(tmp_path, REPORTED_THEN_PROMOTED)
    _no_false_report(verdict, "m4")
    # the combination happened: mbx2 reported nobody failed, then mbx1 delivered to it
    to_nobody = [by for _, by in _deliveries(events, "nobody@corp.test")]
    reports = _deliveries(events)
    assert reports and to_nobody == ["mbx1"], (reports, to_nobody)


SHADOW_CUT_OFF = """\
scenarios:
  - name: reported_then_promoted_by_a_cut_off_shadow
    behaviours: [PR-1]
    topology: two-node-dag
    settings:
      ShadowHeartbeatFrequency: 1s
      ShadowResubmitTimeSpan: 4s
      TransientFailureRetryInterval: 500ms
      SendConnectionInactivityTimeout: 1s
      RejectMessageOnShadowFailure: true
    timeout: 90s
    settle: 20s
    steps:
      - fault: {link: mbx1->mbx2, kind: cut}
      - sink: {name: mailbox, rcpt: {nobody@corp.test: 500 5.0.0 refused}}
      - send: {id: m2, via: mbx2, to: [bob@corp.test, nobody@corp.test]}
      - wait: 2s
      - sink: {name: mailbox, reply: accept}
      - wait: {until: quiet, timeout: 8.5s}
    expect:
      - model: {}
"""


@pytest.mark.slow
def test_a_report_then_a_copy_promoted_by_a_cut_off_shadow_is_no_false_report(
    tmp_path: Path,
) -> None:
    events, verdict = run_on_reference(tmp_path, SHADOW_CUT_OFF)
    _no_false_report(verdict, "m2")
    # the combination happened: mbx2 reported nobody failed, mbx1 delivered to it later
    to_nobody = [t for t, by in _deliveries(events, "nobody@corp.test") if by == "mbx1"]
    reports = [t for t, by in _deliveries(events) if by == "mbx2"]
    assert reports and to_nobody and min(reports) < min(to_nobody), (reports, to_nobody)


SHADOW_EXPIRED_THEN_PRIMARY_WIPED = """\
scenarios:
  - name: shadow_copy_expired_then_primary_wiped
    behaviours: [PR-2]
    topology: two-node-dag-virtual
    settings:
      ShadowHeartbeatFrequency: 1s
      ShadowResubmitTimeSpan: 2s
      TransientFailureRetryInterval: 500ms
      RejectMessageOnShadowFailure: true
      SafetyNetHoldTime: 10m
    timeout: 120s
    settle: 20s
    steps:
      - set_settings: {nodes: [mbx1], values: {MessageExpirationTimeout: 7d}}
      - set_settings: {nodes: [mbx2], values: {MessageExpirationTimeout: 2d}}
      - fault: {link: mbx1->mailbox, kind: cut}
      - wait: 3s
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - wait: 1s
      - snapshot: {node: mbx2, queue: shadow}
      - advance: 173370s
      - wait: 2s
      - advance: 4m
      - wait: 2s
      - snapshot: {node: mbx2, queue: shadow}
      - wipe: mbx1
      - heal: all
      - wait: {until: quiet, timeout: 6.5s}
"""


@pytest.mark.slow
def test_a_primary_wiped_after_its_shadow_let_the_copy_expire_is_outside_the_guarantee(
    tmp_path: Path,
) -> None:
    events, verdict = run_on_reference(tmp_path, SHADOW_EXPIRED_THEN_PRIMARY_WIPED)
    rendered = [c.render() for c in verdict.checks]
    lost = [c for c in verdict.checks if c.name == "no loss of m1"]
    assert lost and lost[0].status == Status.OUTSIDE_GUARANTEE, rendered
    assert "no copy was left" in lost[0].observed and "mbx2 may rightly" in lost[0].observed
    assert not verdict.failures, rendered
    # the combination happened: mbx2 held the copy, then no longer, before the wipe
    looks = [  # a shadow queue is listed by primary and next hop
        [entry["message_id"] for held in e["data"]["answer"].values() for entry in held]
        for e in events
        if e["kind"] == "snapshot" and e["data"]["node"] == "mbx2"
    ]
    assert len(looks) == 2 and any("<m1." in i for i in looks[0]) and not looks[1], looks
