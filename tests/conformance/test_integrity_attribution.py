"""A damaged copy is blamed on a recovery only when a fault came near it.

An MTA that breaks every long line (sendmail's ``L=990``) alters every message it
delivers, fault or not: the workload's integrity invariant FAILs the scenario, and no
behaviour of the scenario (PR-3 here: the node killed and restarted delivers what it
acknowledged - and it did, every message) is blamed for it. A variant whose damage only
a promotion shows (its shadow's short line buffer) is still blamed on the promotion's
behaviour (tests/conformance/test_broken_variants.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from test_broken_variants import run_suite

pytestmark = pytest.mark.slow


def test_a_copy_damaged_without_a_fault_fails_the_scenario_and_no_behaviour(
    tmp_path: Path,
) -> None:
    report = tmp_path / "cert"
    found = run_suite(
        tmp_path,
        "broken:wraps-long-lines",
        ("durability_kill",),
        extra=(f"--shadowcheck-report={report}",),
    )
    assert found["durability_kill"][0] == "failed", found
    (scenario,) = json.loads((report / "certification.json").read_text())["scenarios"]
    assert scenario["verdict"] == "FAIL"
    assert scenario["by_behaviour"]["PR-3"]["status"] == "PASS", scenario["by_behaviour"]
    (damaged,) = [c for c in scenario["checks"] if c["name"].startswith("integrity of the copies")]
    assert damaged["status"] == "FAIL" and damaged["behaviours"] == ["integrity"]
    assert "longest 998 octets" in damaged["observed"], damaged["observed"]
