"""The catalogue model on real clusters: the hand-written runs of model_scenarios.yaml,
judged by ``expect: [model: {}]`` alone, PASS on the reference and FAIL on broken
variants of it under the behaviour whose prediction failed.

Runs the scenarios in a child pytest, as tests/conformance/test_broken_variants.py does
(a variant is the target ``broken:NAME`` of the conformance plugin ``broken_target``).
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "model_scenarios.yaml"
CONFORMANCE = HERE.parent.parent / "conformance"

pytestmark = pytest.mark.slow


def run(
    tmp_path: Path, target: str, only: str = "", scenarios: Path = SCENARIOS
) -> dict[str, tuple[str, str]]:
    """Scenario name -> (passed | failed | error, the failure's text) from a child pytest
    of ``scenarios``; its certification in ``tmp_path / "report"``."""
    junit = tmp_path / "junit.xml"
    command = [
        sys.executable, "-m", "pytest", "--shadowcheck",
        "--shadowcheck-target", target,
        "--shadowcheck-target-plugin", "broken_target",
        "--shadowcheck-scenarios", str(scenarios),
        f"--junitxml={junit}", "-o", "junit_family=xunit2",
        "--shadowcheck-report", str(tmp_path / "report"),
        "-p", "no:cacheprovider", "-q",
    ]  # fmt: skip
    if only:
        command += ["-k", only]
    path = [str(CONFORMANCE), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    proc = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=240
    )
    assert junit.exists(), f"the child pytest wrote no JUnit XML:\n{proc.stdout}\n{proc.stderr}"
    found: dict[str, tuple[str, str]] = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome, text = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed" if child.tag == "failure" else "error"
                text = (child.get("message") or "") + "\n" + (child.text or "")
        found[case.get("name", "").partition("[")[0]] = (outcome, text)
    return found


def test_the_reference_passes_every_model_run(tmp_path: Path) -> None:
    found = run(tmp_path, "reference")
    assert len(found) == 12
    assert all(outcome == "passed" for outcome, _ in found.values()), found


@pytest.mark.parametrize(
    ("variant", "scenario", "behaviour", "said"),
    [
        (
            "never-rejects-unredundant",
            "model_replies_copies_and_discards",
            "CR-4",
            "mbx1 refuses m2 with 451 4.4.0",
        ),
        (
            "ack-before-shadow-copy",
            "model_replies_copies_and_discards",
            "CR-3",
            "mbx2 acknowledged the copy only at",
        ),
        (
            "advertises-xshadow-to-anyone",
            "model_restart_keeps_the_queue",
            "XS-1",
            "mbx1 does not advertise XSHADOW to an anonymous sender",
        ),
        (
            "forgets-discards-on-restart",
            "model_discards_survive_restart",
            "DI-5",
            "still hands mbx2 the discard notification",
        ),
        (
            "ignores-queue-database-id",
            "model_promotion_after_wipe",
            "PR-2",
            "m1 was not delivered by then",
        ),
        (
            "restart-forgets-pending-deliveries",
            "model_restart_keeps_the_queue",
            "PR-3",
            "so it delivers its own queue",
        ),
        (
            "safety-net-never-expires",
            "model_safety_net_hold_time",
            "SN-3",
            "m1 leaves the Safety Net of mbx1 once SafetyNetHoldTime (1h) has passed",
        ),
        (
            "window-start-excluded",
            "model_resubmission_window",
            "SN-5",
            "takes at_start (processed by mbx1 at 2026-01-01 01:00:00",
        ),
        (
            "accepts-xqdiscard-from-anyone",
            "model_wire_sessions",
            "XS-3",
            "mbx1 refuses `XQDISCARD` from a sender that did not authenticate",
        ),
        (
            "keeps-idle-shadow-sessions",
            "model_wire_sessions",
            "TO-2",
            "mbx1 closes its session to mbx2 once it has been idle",
        ),
        (
            "processes-only-after-quit",
            "model_wire_sessions",
            "CR-8",
            "mbx1 told the sender 250 for w1 at",
        ),
        (
            "resubmits-crossed-boundary",
            "model_resubmission_window",
            "SN-12",
            "frank@branch.test got crossed again",
        ),
    ],
)
def test_a_broken_variant_diverges_under_the_right_behaviour(
    tmp_path: Path, variant: str, scenario: str, behaviour: str, said: str
) -> None:
    outcome, text = run(tmp_path, f"broken:{variant}", only=scenario)[scenario]
    assert outcome == "failed", text
    assert "[FAIL] the catalogue model" in text, text
    # the model reports a run's first divergence; where a variant breaks two rules and
    # timing decides which shows first, either is the right behaviour
    found = [
        (b, words)
        for b, words in [(behaviour, said), *ALSO_BREAKS.get(variant, [])]
        if f"evidence for {b}" in text and words in text
    ]
    assert found, text
    assert "operations up to it" in text


#: a second rule a variant breaks in the same scenario, reported when, under load, the
#: first one's divergence did not show (ack-before-shadow-copy: the copy's 250 came in
#: time for m1, and m2 was still accepted with the shadow down)
ALSO_BREAKS = {
    "ack-before-shadow-copy": [("CR-4", "mbx1 accepted m2 with `250")],
}
