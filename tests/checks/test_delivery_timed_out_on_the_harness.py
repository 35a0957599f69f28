"""A delivery that never came because the harness stalled inside the node's own timer:
the node's SendConnectionInactivityTimeout ran out while the proxy between it and the
next hop held a line longer than that (CI once stalled 1.0 s inside a 0.5 s timeout,
and a node retrying a minute later delivered nothing in a 5 s window). That miss is the
machine's: INCONCLUSIVE, never a FAIL of the MTA; a shorter stall, or a session the next
hop ended, stays a FAIL. Real History objects, the check's own code."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from checks.test_prose import Recorded
from pytest_shadowcheck.checks.wire import check_delivered
from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.verdict import Status

SCENARIO = """\
scenarios:
  - name: delivered_after_a_stall
    behaviours: [CR-5]
    topology:
      nodes: {mbx1: {}, mbx2: {}}
      next_hops: {corp.test: {sink: mailbox}}
    settings: {SendConnectionInactivityTimeout: 500ms}
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
    expect:
      - delivered: {message: m1, to: mailbox, by: mbx1, within: 0s}
"""


def _attempt(tmp_path: Path, stall: float, closed_by: str) -> Recorded:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    (scenario,) = load_scenario_file(path)
    run = Recorded(scenario)
    run.sent("m1", "2.6.0 queued")
    h = run.history
    link = "mbx1->mailbox"
    h.record("connect", link=link, conn=1)
    h.record("line", link=link, conn=1, direction="s2c", text="220 mailbox")
    h.record("lag", late=stall)  # the loop woke this late: the EHLO was relayed late
    h.record("line", link=link, conn=1, direction="c2s", text="EHLO mbx1")
    h.record("shutdown", link=link, conn=1)
    h.record("close", link=link, conn=1, reason=closed_by)
    return run


def _judged(run: Recorded) -> tuple[Status, str]:
    (step,) = run.scenario.expect
    found = asyncio.run(check_delivered(run, step))  # type: ignore[arg-type]
    return found.status, found.observed


def test_a_session_the_node_ended_inside_a_longer_stall_is_no_verdict(tmp_path: Path) -> None:
    status, observed = _judged(_attempt(tmp_path, 0.997, "client closed"))
    assert status == Status.INCONCLUSIVE, observed
    assert "mbx1 ended its session to mailbox" in observed, observed
    stall = "stalled 0.997s relaying it, longer than its SendConnectionInactivityTimeout of 0.5s"
    assert stall in observed, observed
    assert "no verdict on the MTA" in observed, observed


@pytest.mark.parametrize(
    ("stall", "closed_by"),
    [(0.2, "client closed"), (0.997, "server closed")],
    ids=["stall-shorter-than-the-timer", "next-hop-ended-it"],
)
def test_otherwise_the_missing_delivery_fails(tmp_path: Path, stall: float, closed_by: str) -> None:
    status, observed = _judged(_attempt(tmp_path, stall, closed_by))
    assert status == Status.FAIL, observed
    assert "not delivered" in observed, observed
