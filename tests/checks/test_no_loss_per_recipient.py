"""The no-loss invariant accounts for each recipient: a message the next hop got for one
recipient and that its node then lost for the others is lost for them, though a copy of
it arrived. (Before, one delivered copy of a message passed it whole.)

Real nodes: one node with two next hops; a bounce (null reverse-path) to alice and bob
(held back: their next hop's link is cut) and dan (delivered at once); the node killed
and restarted on its queue, the link healed. The reference delivers alice and bob then.
The variant loader-drops-multi-recipient-bounces (tests/conformance) sets such an
envelope aside as corrupt when it reloads its queue: dan got his copy, alice and bob
never get theirs."""

from __future__ import annotations

from pathlib import Path

import pytest
from harnesskit import reference_or_variant

from pytest_shadowcheck.engine.run import run_scenario
from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.verdict import Status

SCENARIO = """\
scenarios:
  - name: a_bounce_kept_for_two_of_its_recipients
    behaviours: [PR-3]
    topology:
      nodes: {mbx1: {}}
      next_hops:
        corp.test: {sink: mailbox}
        other.test: {sink: other}
    settings: {TransientFailureRetryInterval: 0.5s}
    steps:
      - fault: {link: mbx1->mailbox, kind: cut}
      - send: {id: m1, via: mbx1, from: "", to: [alice@corp.test, bob@corp.test, dan@other.test]}
      - wait: {delivered: m1, to: other, timeout: 10s}
      - kill: mbx1
      - restart: mbx1
      - heal: mbx1->mailbox
    settle: 5s
"""


@pytest.mark.parametrize(
    ("variant", "status", "said"),
    [
        ("", Status.PASS, "delivered"),
        (
            "loader-drops-multi-recipient-bounces",
            Status.FAIL,
            "alice@corp.test and bob@corp.test never got it within 5s (the other recipients did: ",
        ),
    ],
    ids=["reference", "loses-two-recipients"],
)
def test_a_recipient_no_copy_reached_is_a_loss(
    tmp_path: Path, variant: str, status: Status, said: str
) -> None:
    source = tmp_path / "s.yaml"
    source.write_text(SCENARIO)
    (scenario,) = load_scenario_file(source)
    target = reference_or_variant(variant)
    verdict = run_scenario(scenario, target, workdir=tmp_path / "run")
    (loss,) = [c for c in verdict.checks if c.name == "no loss of m1"]
    assert loss.status == status, loss.observed
    assert said in loss.observed, loss.observed
