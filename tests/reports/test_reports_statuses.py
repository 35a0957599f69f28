"""The plugin's verdict statuses through the table and the matrices, on real Spark.

Files written as the plugin writes them (issue 12): per-behaviour verdicts in the
test case property ``shadowcheck.verdicts`` (a <property> for xunit1, a
``[[PROPERTY|...]]`` line in system-out for xunit2), ``shadowcheck.partial`` and
``shadowcheck.certification`` on the suite.
"""

from __future__ import annotations

import csv
from datetime import timedelta
from pathlib import Path

import pytest
from reports_junit_helpers import DAY0, Case, write_junit

from reports.build import build
from reports.table import read_cases

pytestmark = pytest.mark.spark

CERT = "https://ci.example/runs/7/certification.html"


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


def plugin_run(root: Path) -> None:
    cases = [
        # XS-3 held although the scenario failed: its verdict is its own.
        Case("scenarios", "xs3_stranger[XS-3,CR-1]", "failed",
             verdicts="XS-3=PASS;CR-1=FAIL"),
        Case("scenarios", "to2_idle[TO-2,CR-2]", "failed",
             verdicts="TO-2=NOT-APPLICABLE;CR-2=FAIL"),
        Case("scenarios", "cr6_start[CR-6,PR-3]", "inconclusive",
             verdicts="CR-6=INCONCLUSIVE;PR-3=INCONCLUSIVE"),
        Case("scenarios", "pr1_dead_node[PR-1]", "passed", verdicts="PR-1=PASS"),
        Case("scenarios", "sn5_contents[SN-5]", "skipped", verdicts="SN-5=UNTESTABLE"),
        Case("scenarios", "pr4_both[PR-4]", "outside", verdicts="PR-4=OUTSIDE-GUARANTEE"),
        Case("other", "test_plain_skip[DI-4]", "skip"),
    ]
    write_junit(
        root / "plugin.xml", run_id="p1", target="exim", version="4.96", started=DAY0,
        cases=cases,
        suite_properties={"shadowcheck.partial": "PR-1", "shadowcheck.certification": CERT},
    )


def xunit2_run(root: Path) -> None:
    """xunit2 forbids testcase properties: the plugin writes them into system-out."""
    stamp = (DAY0 + timedelta(hours=1)).isoformat()
    (root / "xunit2.xml").write_text(
        '<?xml version="1.0" encoding="utf-8"?>'
        f'<testsuite name="pytest" timestamp="{stamp}"><properties>'
        '<property name="shadowcheck.run_id" value="q1"/>'
        '<property name="shadowcheck.target" value="postfix"/>'
        '<property name="shadowcheck.target_version" value="3.7"/></properties>'
        '<testcase classname="scenarios" name="xs3_stranger[XS-3,CR-1]" time="1.5">'
        '<failure message="FAIL: node kept no copy">trace</failure>'
        "<system-out>log line\n[[PROPERTY|shadowcheck.verdicts=XS-3=PASS;CR-1=FAIL]]\n"
        "</system-out></testcase></testsuite>"
    )


def test_per_behaviour_verdicts_decide_the_matrix(spark, tmp_path: Path) -> None:
    root = tmp_path / "in"
    root.mkdir()
    plugin_run(root)
    xunit2_run(root)
    out = tmp_path / "out"
    build(spark, [str(root)], str(out))

    latest = {(r["target"], r["behaviour"]): r for r in read_csv(out / "latest_matrix.csv")}
    assert {b: r["status"] for (t, b), r in latest.items() if t == "exim"} == {
        "XS-3": "PASS", "CR-1": "FAIL", "TO-2": "NOT-APPLICABLE", "CR-2": "FAIL",
        "CR-6": "INCONCLUSIVE", "PR-3": "INCONCLUSIVE",
        "PR-1": "PARTIAL",  # it passed, but the run did not run all its scenarios
        "SN-5": "UNTESTABLE", "PR-4": "OUTSIDE-GUARANTEE",
        "DI-4": "SKIPPED",  # a plain pytest skip is no shadowcheck verdict
    }
    assert {b: r["status"] for (t, b), r in latest.items() if t == "postfix"} == {
        "XS-3": "PASS", "CR-1": "FAIL",
    }
    assert {r["certification"] for (t, _), r in latest.items() if t == "exim"} == {CERT}
    assert latest[("exim", "PR-1")]["partial"] == "True"
    assert latest[("exim", "CR-6")]["inconclusive"] == "1"
    assert latest[("exim", "CR-6")]["failed"] == "0"

    runs = {r["run_id"]: r for r in read_csv(out / "trends.csv")}
    assert runs["p1"]["certification"] == CERT
    assert runs["q1"]["certification"] == ""

    rows = read_cases(spark, str(out)).collect()
    statuses = {(r.scenario, r.behaviour): r.status for r in rows if r.target == "exim"}
    assert statuses[("xs3_stranger[XS-3,CR-1]", "XS-3")] == "PASS"
    assert statuses[("test_plain_skip[DI-4]", "DI-4")] == "SKIPPED"
    # The history matrix counts by status too: XS-3 passed in the failed scenario.
    matrix = {(r["target"], r["behaviour"]): r for r in read_csv(out / "matrix.csv")}
    assert (matrix[("exim", "XS-3")]["passed"], matrix[("exim", "XS-3")]["failed"]) == ("1", "0")
