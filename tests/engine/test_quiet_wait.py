"""``wait: {until: quiet}``: the wait after a fault ends returns once the cluster holds
nothing, and not before. Real reference nodes: a message held back by a cut link keeps
the wait to its whole timeout; once the link heals, the wait ends when the message is
delivered and its shadow copy discarded, long before its timeout."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from harnesskit import run_on_reference

from pytest_shadowcheck.errors import ScenarioError
from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.verdict import Status

SCENARIO = """\
scenarios:
  - name: quiet_after_heal
    behaviours: [DI-1]
    topology: two-node-dag
    settings: {ShadowHeartbeatFrequency: 0.5s, TransientFailureRetryInterval: 0.5s}
    steps:
      - fault: {link: mbx1->mailbox, kind: cut}
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - wait: {until: quiet, timeout: 3s}
      - note: held wait over
      - heal: mbx1->mailbox
      - wait: {until: quiet, timeout: 30s}
      - note: quiet wait over
    expect:
      - delivered: {message: m1, to: mailbox, within: 40s}
"""


def _at(events: list[dict[str, Any]], kind: str, text: str) -> float:
    """When the first event of ``kind`` whose text starts with ``text`` was recorded."""
    return next(
        e["t"]
        for e in events
        if e["kind"] == kind and str(e["data"].get("text", "")).startswith(text)
    )


@pytest.mark.slow
def test_the_wait_ends_when_the_cluster_holds_nothing(tmp_path: Path) -> None:
    events, verdict = run_on_reference(tmp_path, SCENARIO)
    assert verdict.status == Status.PASS, (verdict.reason, verdict.failures)
    sent = _at(events, "step", "send id=m1")
    held = _at(events, "note", "held wait over")
    healed = _at(events, "step", "heal mbx1->mailbox")
    over = _at(events, "note", "quiet wait over")
    # held back by the cut: the whole 3 s, and no note that the cluster held nothing
    assert held - sent >= 3.0
    quiet = [e for e in events if e["kind"] == "note" and "held nothing" in e["data"]["text"]]
    assert len(quiet) == 1, quiet
    # healed: delivered, discarded, quiet for a heartbeat, far inside the 30 s
    assert over - healed < 10.0
    assert healed < quiet[0]["t"] < over
    delivered = [e["t"] for e in events if e["kind"] == "delivery"]
    assert delivered and delivered[0] < quiet[0]["t"]


def test_a_wait_names_one_thing_to_wait_for(tmp_path: Path) -> None:
    source = tmp_path / "bad.yaml"
    source.write_text(
        SCENARIO.replace("{until: quiet, timeout: 3s}", "{until: quiet, reply: m1, timeout: 3s}")
    )
    with pytest.raises(ScenarioError) as caught:
        load_scenario_file(source)
    assert "waits for one thing" in str(caught.value)
    assert "names reply and until" in str(caught.value)


WORKLOAD = """\
scenarios:
  - name: settle_of_a_lossy_workload
    behaviours: [PR-3]
    topology: single-node
    settings: {RejectMessageOnShadowFailure: false, TransientFailureRetryInterval: 0.5s}
    steps:
      - fault: {link: mbx1->mailbox, kind: %s}
      - workload:
          name: single
          messages: 30
          sessions: 2
          rate: 30
          settle: 10s
          nemesis: {faults: [kill], interval: 0.5s, duration: 0.3s}
"""


def _settle_notes(events: list[dict[str, Any]]) -> list[str]:
    return [
        str(e["data"]["text"])
        for e in events
        if e["kind"] == "note" and str(e["data"].get("text", "")).startswith("settle ended")
    ]


@pytest.mark.slow
def test_a_workload_s_settle_ends_once_what_was_lost_is_in_no_queue(tmp_path: Path) -> None:
    # a node whose queue lives only in memory: the kill loses what it held, and the
    # settle need not wait its 10 s out for what no queue can deliver any more
    for run in ("lossy", "held"):
        (tmp_path / run).mkdir()
    events, verdict = run_on_reference(tmp_path / "lossy", WORKLOAD % "delay, seconds: 20ms",
                                       variant="queue-in-memory-only")  # fmt: skip
    assert verdict.status == Status.FAIL, verdict.reason
    assert any("lost" in f.observed for f in verdict.failures), verdict.failures
    (note,) = _settle_notes(events)
    assert "the cluster holds nothing" in note and "undelivered" in note, note
    took = float(note.split("after ", 1)[1].split("s:", 1)[0])
    assert took < 10.0, note
    # the next hop cut, what the reference acknowledged stays queued: the settle is
    # waited out, the messages reported queued (not lost), no early end
    events, verdict = run_on_reference(tmp_path / "held", WORKLOAD % "cut")
    assert not _settle_notes(events), _settle_notes(events)
    assert not any("lost" in f.name for f in verdict.failures), verdict.failures
