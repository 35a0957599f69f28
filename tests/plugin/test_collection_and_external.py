"""Collection, selection by behaviour, options, the external target, JUnit and the report.

These runs use the ``external`` target against a plain SMTP server (a MailSink on
its own thread), so they exercise the whole plugin without starting MTA nodes.
"""

from __future__ import annotations

import json
from pathlib import Path

import junitparser
import pytest
from harnesskit import ThreadedSink, junit_schema
from lxml import etree

SCENARIOS = """\
defaults:
  topology:
    nodes: {mbx1: {}}
scenarios:
  - name: accepts_plain_mail
    title: the node answers 250 to a plain message
    behaviours: [CR-5]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - wait: 1.2s
    expect:
      - reply: {message: m1, code: 250}
      - lines: {link: client->mbx1, direction: c2s, contains: "^MAIL FROM"}
  - name: needs_a_kill
    behaviours: [PR-1, PR-2]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - kill: mbx1
  - name: needs_the_control_api
    behaviours: [SN-1]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
    expect:
      - queue: {node: mbx1, queue: safetynet_primary, contains: [m1]}
"""

FAILING = """\
scenarios:
  - name: expects_a_rejection
    title: wrongly expects a 451 4.4.0
    behaviours: [CR-4]
    topology:
      nodes: {mbx1: {}}
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
    expect:
      - reply: {message: m1, code: 451, enhanced: "4.4.0"}
"""


def _write(pytester: pytest.Pytester, name: str, text: str) -> Path:
    path = pytester.path / "library" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _target(sink: ThreadedSink) -> str:
    return f"--shadowcheck-target=external:mbx1={sink.address}"


def test_without_the_option_the_plugin_does_nothing(pytester: pytest.Pytester) -> None:
    _write(pytester, "s.yaml", SCENARIOS)
    result = pytester.runpytest("library")
    assert result.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert "[shadowcheck]" not in result.stdout.str()
    assert "shadowcheck certification" not in result.stdout.str()


def test_items_carry_scenario_name_and_behaviour_markers(pytester: pytest.Pytester) -> None:
    _write(pytester, "s.yaml", SCENARIOS)
    result = pytester.runpytest("--shadowcheck", "--collect-only", "-q", "library")
    result.stdout.fnmatch_lines(
        [
            "library/s.yaml::accepts_plain_mail[[]CR-5[]]",
            "library/s.yaml::needs_a_kill[[]PR-1,PR-2[]]",
            "library/s.yaml::needs_the_control_api[[]SN-1[]]",
        ]
    )
    by_marker = pytester.runpytest("--shadowcheck", "--collect-only", "-q", "-m", "PR-2", "library")
    by_marker.stdout.fnmatch_lines(["library/s.yaml::needs_a_kill*", "*1/3 tests collected*"])
    by_keyword = pytester.runpytest(
        "--shadowcheck", "--collect-only", "-q", "-k", "SN-1", "library"
    )
    by_keyword.stdout.fnmatch_lines(["library/s.yaml::needs_the_control_api*", "*1/3*"])


def test_no_paths_collects_the_bundled_library(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--shadowcheck", "--collect-only", "-q")
    result.stdout.fnmatch_lines(["*creation.yaml::cr4_single_node_rejects[[]CR-4[]]"])
    assert result.ret == pytest.ExitCode.OK
    replaced = pytester.runpytest(
        "--shadowcheck", "--collect-only", "-q", "--shadowcheck-scenarios", "library"
    )
    assert "creation.yaml" not in replaced.stdout.str()


def test_header_names_a_directory_of_many_scenario_files_once(pytester: pytest.Pytester) -> None:
    # a deep exploration passes hundreds of generated files: one entry, not hundreds
    for n in range(5):
        _write(pytester, f"s{n}.yaml", SCENARIOS.replace("name: ", f"name: f{n}_"))
    _write(pytester, "other.yaml", SCENARIOS)
    paths = [f"library/s{n}.yaml" for n in range(5)]
    result = pytester.runpytest("--shadowcheck", "--collect-only", *paths)
    header = [line for line in result.outlines if line.startswith("shadowcheck scenarios:")]
    assert header == ["shadowcheck scenarios: 5 files in library"]
    few = pytester.runpytest("--shadowcheck", "--collect-only", "library/s0.yaml")
    assert "shadowcheck scenarios: library/s0.yaml" in few.outlines


def test_unknown_target_is_a_usage_error_listing_targets(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--shadowcheck", "--shadowcheck-target=nosuch")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*unknown shadowcheck target 'nosuch'*", "*external *", "*reference *"]
    )


def test_target_help_lists_the_targets_and_exits_0(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--shadowcheck", "--shadowcheck-target=help")
    assert result.ret == 0
    result.stdout.fnmatch_lines(["shadowcheck targets*", "*docker *", "*reference *"])
    assert "ERROR" not in result.stdout.str() + result.stderr.str()


def test_an_unknown_or_lower_case_behaviour_marker_is_an_error(pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--shadowcheck", "-m", "cr-4 or CR-99 or PR-1")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(
        ["*-m names behaviour IDs the catalogue does not have: cr-4 (did you mean CR-4?), CR-99",
         "known IDs: CR-1, CR-2, *"]
    )  # fmt: skip


def test_external_target_runs_and_missing_capabilities_are_untestable(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    _write(pytester, "s.yaml", SCENARIOS)
    xml = pytester.path / "out.xml"
    report = pytester.path / "cert"
    result = pytester.runpytest(
        "--shadowcheck",
        _target(plain_smtp),
        "-rs",
        f"--junitxml={xml}",
        f"--shadowcheck-report={report}",
        "--shadowcheck-run-id=run-42",
        # progress notes show when scenarios run one at a time (workers show none)
        "--shadowcheck-concurrency=1",
        "library",
    )
    result.assert_outcomes(passed=1, skipped=2)
    result.stdout.fnmatch_lines(
        [
            "*[[]shadowcheck[]] accepts_plain_mail: waiting up to 1.2s (wait step)*",
            "SKIPPED*UNTESTABLE: target external lacks kill - kill a node abruptly*",
            # a check that needs a look inside is UNTESTABLE alone; the scenario still ran
            "SKIPPED*UNTESTABLE: safetynet_primary queue of mbx1: target external lacks"
            " control_api*",
        ]
    )
    # real messages went through: the scenario needing a kill never started
    assert len(plain_smtp.sink.deliveries) == 2

    # JUnit: valid against the XSD, parsed by junitparser, with the suite properties
    schema = etree.XMLSchema(etree.parse(str(junit_schema())))
    assert schema.validate(etree.parse(str(xml))), schema.error_log
    suites = junitparser.JUnitXml.fromfile(str(xml))
    suite = next(iter(suites))
    props = {p.name: p.value for p in suite.properties()}
    assert props["shadowcheck.run_id"] == "run-42"
    assert props["shadowcheck.target"] == "external"
    assert props["shadowcheck.target_spec"].startswith("external:mbx1=")
    assert set(props) >= {"shadowcheck.target_version", "shadowcheck.harness_version"}
    names = {case.name for case in suite}
    assert "needs_a_kill[PR-1,PR-2]" in names

    data = json.loads((report / "certification.json").read_text())
    status = {b["id"]: b["status"] for b in data["behaviours"]}
    assert len(status) == 45
    assert status["CR-5"] == "PASS"
    assert status["PR-1"] == status["PR-2"] == status["SN-1"] == "UNTESTABLE"
    assert status["TO-4"] == "UNTESTED"
    assert data["run_id"] == "run-42"
    # a scenario runs in its setup phase: its time is that, not the call's near-zero
    ran = [s for s in data["scenarios"] if s["verdict"] not in ("UNTESTABLE", "NOT-APPLICABLE")]
    assert ran and all(s["duration_s"] > 0.01 for s in ran)
    page = (report / "certification.html").read_text()
    assert "TO-4" in page and "UNTESTABLE" in page


def test_failure_shows_expected_observed_and_history(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    _write(pytester, "f.yaml", FAILING)
    result = pytester.runpytest("--shadowcheck", _target(plain_smtp), "library")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "FAIL: scenario expects_a_rejection (CR-4) - wrongly expects a 451 4.4.0",
            "*defined at *f.yaml:2",
            "*[[]FAIL[]] reply to m1*",
            "*rule tested: CR-4 - RejectMessageOnShadowFailure=true and no copy can be made*",
            "*expected: mbx1 answers the content of m1 with 451 4.4.0",
            "*observed: mbx1 answered `250 *`",
            "history around it (once for the scenario):",
            "*client->mbx1 #1 C: MAIL FROM:<sender@ext.test>",
        ]
    )
    out = result.stdout.str()
    assert "Traceback" not in out
    # no Python repr in front of the admin: the step's recipients are a plain list
    assert "to=alice@corp.test" in out and "['" not in out


def test_report_is_complete_under_xdist(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    _write(pytester, "s.yaml", SCENARIOS)
    _write(pytester, "f.yaml", FAILING)
    report = pytester.path / "cert"
    xml = pytester.path / "out.xml"
    result = pytester.runpytest_subprocess(
        "--shadowcheck",
        _target(plain_smtp),
        "-n",
        "2",
        f"--shadowcheck-report={report}",
        f"--junitxml={xml}",
        "library",
    )
    result.assert_outcomes(passed=1, skipped=2, failed=1)
    data = json.loads((report / "certification.json").read_text())
    assert {s["scenario"] for s in data["scenarios"]} == {
        "accepts_plain_mail",
        "needs_a_kill",
        "needs_the_control_api",
        "expects_a_rejection",
    }
    status = {b["id"]: b["status"] for b in data["behaviours"]}
    assert status["CR-4"] == "FAIL" and status["CR-5"] == "PASS"
    suite = next(iter(junitparser.JUnitXml.fromfile(str(xml))))
    props = {p.name: p.value for p in suite.properties()}
    assert props["shadowcheck.run_id"] == data["run_id"]


def test_xunit1_family_adds_behaviour_properties_per_case(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    _write(pytester, "s.yaml", SCENARIOS)
    xml = pytester.path / "out.xml"
    result = pytester.runpytest(
        "--shadowcheck",
        _target(plain_smtp),
        "-o",
        "junit_family=xunit1",
        f"--junitxml={xml}",
        "-k",
        "accepts",
        "library",
    )
    result.assert_outcomes(passed=1)
    tree = etree.parse(str(xml))
    props = {
        p.get("name"): p.get("value") for p in tree.iterfind(".//testcase/properties/property")
    }
    assert props == {
        "shadowcheck.behaviours": "CR-5",
        "shadowcheck.verdict": "PASS",
        "shadowcheck.verdicts": "CR-5=PASS",
    }


def test_sn11_needs_a_categoriser_stamp_the_target_must_claim(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    # The control API and the clock are claimed; without the stamp the MTA cannot show
    # a fresh categorisation from outside, so the verdict is UNTESTABLE, not FAIL (an
    # external target cannot kill either, which the reason lists too).
    nodes = pytester.path / "nodes.yaml"
    claimed = ["control_api", "virtual_clock", "set_settings"]
    node = {"smtp": plain_smtp.address, "control": plain_smtp.address}
    nodes.write_text(
        json.dumps({"nodes": {"mbx1": node, "mbx2": node}, "capabilities": claimed}),
        encoding="utf-8",
    )
    result = pytester.runpytest(
        "--shadowcheck", f"--shadowcheck-target=external:{nodes}", "-rs", "-k", "sn11"
    )
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(
        ["SKIPPED*UNTESTABLE: target external lacks kill - *; categoriser_stamp - *"]
    )
    assert plain_smtp.sink.deliveries == [], "nothing was sent for an untestable scenario"
