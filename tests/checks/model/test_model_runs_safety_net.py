"""The model's Safety Net rules on a real cluster (safety_net_scenarios.yaml): the
12-hour broadcast PASSes on the reference, FAILs under SN-7 on a coordinator that
forgets its request when it restarts. One scenario, two runs (about 1.5 CPU-minutes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from .test_model_runs import run as run_model_scenarios

HERE = Path(__file__).resolve().parent
SCENARIOS = HERE / "safety_net_scenarios.yaml"

pytestmark = pytest.mark.slow


def run(tmp_path: Path, target: str) -> tuple[str, str]:
    """(passed | failed | error, the failure's text) of the one scenario."""
    ((outcome, text),) = run_model_scenarios(tmp_path, target, scenarios=SCENARIOS).values()
    return outcome, text


def test_the_reference_passes_the_broadcast_after_12_hours(tmp_path: Path) -> None:
    outcome, text = run(tmp_path, "reference")
    assert outcome == "passed", text
    # and the rules did decide: a PASS, not a NOT-APPLICABLE
    report = json.loads((tmp_path / "report" / "certification.json").read_text("utf-8"))
    (scenario,) = report["scenarios"]
    (model,) = [c for c in scenario["checks"] if c["name"] == "the catalogue model"]
    assert "SN-7 x1" in model["observed"] and "SN-11 x1" in model["observed"], model
    assert {scenario["by_behaviour"][b]["status"] for b in ("SN-7", "SN-11")} == {"PASS"}


def test_a_coordinator_that_forgets_its_request_fails_sn7(tmp_path: Path) -> None:
    outcome, text = run(tmp_path, "broken:forgets-requests-on-restart")
    assert outcome == "failed", text
    assert "rule tested: SN-7" in text
    assert "no Shadow Safety Net resubmitted it" in text
