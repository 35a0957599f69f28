"""The verdict rules, each in a real pytest run (pytester) against a real SMTP server.

- a behaviour is judged only by the checks that evidence it;
- a check whose triggering event never happened is NOT-APPLICABLE, and a behaviour
  NOT-APPLICABLE everywhere is never a PASS;
- a node that exits at start is INCONCLUSIVE: a JUnit error, not a failure, with
  the node's log once, and a non-zero exit;
- a partial run (-k) gives PARTIAL, never PASS, and lists what did not run;
- the target's label is the same whatever path named its description.
"""

from __future__ import annotations

import json
import os
import re
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest
from harnesskit import CR4_FAILS_CR5_PASSES, ThreadedSink

TWO_BEHAVIOURS = CR4_FAILS_CR5_PASSES

NEVER_STARTED_CLOCK = """\
defaults:
  topology:
    nodes: {mbx1: {}}
scenarios:
  - name: idle_session_timed
    behaviours: [TO-1, CR-5]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
    expect:
      - reply: {message: m1, code: 250, behaviours: [CR-5]}
      # nothing ever says XSHADOW here: the clock of this check never starts
      - timing:
          from: {link: client->mbx1, direction: s2c, line: "^XSHADOW"}
          to: {link: client->mbx1, closed: server}
          at_most: 1s
          within: 200ms
          behaviours: [TO-1]
  - name: only_after_a_copy
    behaviours: [TO-2]
    steps:
      - send: {id: m2, via: mbx1, to: [alice@corp.test]}
    expect:
      - reply:
          message: m2
          code: 451
          given: {link: client->mbx1, direction: s2c, line: "^250-XSHADOW"}
"""

BROKEN_START = """\
scenarios:
  - name: node_cannot_start
    behaviours: [CR-1]
    topology: single-node
    settings:
      # the reference refuses this at start: its node exits before it listens
      ShadowHeartbeatFrequency: 0s
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
    expect:
      - reply: {message: m1, code: 250}
"""


def _write(pytester: pytest.Pytester, name: str, text: str) -> Path:
    path = pytester.path / "library" / name
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def _certification(pytester: pytest.Pytester) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((pytester.path / "cert" / "certification.json").read_text())
    return data


def _statuses(data: dict[str, Any]) -> dict[str, str]:
    return {b["id"]: b["status"] for b in data["behaviours"]}


def test_a_behaviour_is_judged_only_by_its_own_checks(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    _write(pytester, "s.yaml", TWO_BEHAVIOURS)
    result = pytester.runpytest(
        "--shadowcheck",
        f"--shadowcheck-target=external:mbx1={plain_smtp.address}",
        f"--shadowcheck-report={pytester.path / 'cert'}",
        "library",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*CR-4: FAIL - reply to m1: mbx1 answered `250 *`",
            "*CR-5: PASS",
            # the failed check states the rule it tested first, in the catalogue's words
            "[[]FAIL[]] reply to m1  (*s.yaml:*)  evidence for CR-4",
            "    rule tested: CR-4 - RejectMessageOnShadowFailure=true and no copy can be made"
            " (*): reply `451 4.4.0 Message failed to be made redundant`; nothing is queued;*",
            "    expected: mbx1 answers the content of m1 with 451",
            "    observed: mbx1 answered `250 *`",
        ]
    )
    data = _certification(pytester)
    statuses = _statuses(data)
    assert statuses["CR-4"] == "FAIL" and statuses["CR-5"] == "PASS"
    cr4 = next(b for b in data["behaviours"] if b["id"] == "CR-4")
    decided = cr4["scenarios"][0]["decided_by"]
    # the certification names the checks that decided it; the CR-5 one is not among them
    assert [c["status"] for c in decided] == ["FAIL"], decided


def test_a_check_whose_event_never_happened_is_not_applicable(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    _write(pytester, "s.yaml", NEVER_STARTED_CLOCK)
    xml = pytester.path / "out.xml"
    result = pytester.runpytest(
        "--shadowcheck",
        f"--shadowcheck-target=external:mbx1={plain_smtp.address}",
        f"--shadowcheck-report={pytester.path / 'cert'}",
        f"--junitxml={xml}",
        "-rs",
        "library",
    )
    # CR-5 passed in the first; the second has nothing but a not-applicable check
    result.assert_outcomes(passed=1, skipped=1)
    result.stdout.fnmatch_lines(
        [
            "SKIPPED*NOT-APPLICABLE: reply: mbx1 never answered the sender with a line starting"
            " 250-XSHADOW: the sender opened 1 SMTP session to mbx1, in which mbx1 sent * lines,"
            " so there was nothing to check*"
        ]
    )
    statuses = _statuses(_certification(pytester))
    assert statuses["CR-5"] == "PASS"
    # never PASS: no check could say anything about them
    assert statuses["TO-1"] == "NOT-APPLICABLE"
    assert statuses["TO-2"] == "NOT-APPLICABLE"
    # the per-behaviour verdicts travel in the JUnit (xunit2: system-out property lines)
    outs = "".join(e.text or "" for e in ET.parse(xml).getroot().iter("system-out"))
    assert "[[PROPERTY|shadowcheck.verdicts=TO-1=NOT-APPLICABLE;CR-5=PASS]]" in outs


GIVEN_A_CONNECTION = """\
defaults:
  topology:
    nodes: {mbx1: {}}
scenarios:
  - name: judged_once_a_connection_opened
    behaviours: [CR-4, CR-5]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
    expect:
      # the sender's connection opened: this check applies (and passes)
      - reply:
          message: m1
          code: 250
          behaviours: [CR-5]
          given: {any_of: [{step: "^no such step"}, {link: client->mbx1, opened: true}]}
      # neither event happened: nothing to judge CR-4 on here
      - reply:
          message: m1
          code: 451
          behaviours: [CR-4]
          given: {any_of: [{step: "^no such step"}, {reply: m1, opened: true}]}
"""


def test_given_any_of_and_a_connection_opened(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    bad = GIVEN_A_CONNECTION.replace("{reply: m1, opened: true}", "{step: '^nor this'}")
    _write(pytester, "s.yaml", bad)
    result = pytester.runpytest(
        "--shadowcheck",
        f"--shadowcheck-target=external:mbx1={plain_smtp.address}",
        f"--shadowcheck-report={pytester.path / 'cert'}",
        "-rs",
        "library",
    )
    result.assert_outcomes(passed=1)
    statuses = _statuses(_certification(pytester))
    assert statuses["CR-5"] == "PASS"
    assert statuses["CR-4"] == "NOT-APPLICABLE"
    cr4 = next(b for b in _certification(pytester)["behaviours"] if b["id"] == "CR-4")
    assert (
        "the harness never ran the step `no such step`; the harness never ran the step "
        "`nor this`, so there was nothing to check" in json.dumps(cr4)
    )


def test_opened_takes_a_link_and_nothing_else(pytester: pytest.Pytester) -> None:
    # {reply: m1, opened: true} is not a link's opening: one clean error at its line
    _write(pytester, "s.yaml", GIVEN_A_CONNECTION)
    result = pytester.runpytest("--shadowcheck", "library")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(
        ["*s.yaml:21: *'opened' matches the opening of a connection on a link*"]
    )


LAST_BEFORE = """\
defaults:
  topology:
    nodes: {mbx1: {}}
scenarios:
  - name: the_last_answer_before_an_event
    behaviours: [CR-5]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - wait: 1s
      - send: {id: m2, via: mbx1, to: [alice@corp.test]}
      - wait: 1s
      - send: {id: m3, via: mbx1, to: [alice@corp.test]}
    expect:
      # m2's session ended a second before m3's reply, m1's two: the last 221 is m2's
      - timing:
          from: {link: client->mbx1, direction: s2c, line: "^221", last_before: {reply: m3}}
          to: {reply: m3}
          at_least: 0.8s
          at_most: 1.5s
          tolerance: 0s
      # the later of m1's 221 (the first) and the last 221 before m3's reply: m2's again
      - timing:
          from:
            last_of:
              - {link: client->mbx1, direction: s2c, line: "^221"}
              - {link: client->mbx1, direction: s2c, line: "^221", last_before: {reply: m3}}
          to: {reply: m3}
          at_least: 0.8s
          at_most: 1.5s
          tolerance: 0s
"""


def _passed_on_a_plain_server(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink, text: str
) -> dict[str, Any]:
    """Run the one scenario of ``text`` against a plain SMTP server; it must pass: its
    certification row."""
    _write(pytester, "s.yaml", text)
    result = pytester.runpytest(
        "--shadowcheck", f"--shadowcheck-target=external:mbx1={plain_smtp.address}",
        f"--shadowcheck-report={pytester.path / 'cert'}", "library",
    )  # fmt: skip
    result.assert_outcomes(passed=1)
    rows: list[dict[str, Any]] = _certification(pytester)["scenarios"]
    assert len(rows) == 1, rows
    return rows[0]


def test_last_before_and_last_of_take_the_latest_event(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    row = _passed_on_a_plain_server(pytester, plain_smtp, LAST_BEFORE)
    last, later = [c for c in row["checks"] if c["name"] == "timing"]
    assert "for the last time before" in last["expected"], last["expected"]
    assert "whichever was later" in later["expected"], later["expected"]
    assert [last["status"], later["status"]] == ["PASS", "PASS"], row["checks"]


FIRST_AFTER = """\
defaults:
  topology:
    nodes: {mbx1: {}}
scenarios:
  - name: the_first_answer_after_an_event
    behaviours: [CR-5]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - wait: 1s
      - send: {id: m2, via: mbx1, to: [alice@corp.test]}
    expect:
      # m1's session ended right after its reply; the first 221 after m2's reply is
      # m2's, a second later (without first_after: m1's own, at once)
      - timing:
          from: {reply: m1}
          to: {link: client->mbx1, direction: s2c, line: "^221", first_after: {reply: m2}}
          at_least: 0.8s
          at_most: 1.5s
          tolerance: 0s
      # timed from the event it is the first after: said once
      - timing:
          from: {reply: m2}
          to: {link: client->mbx1, direction: s2c, line: "^221", first_after: {reply: m2}}
          at_most: 0.5s
      # an event that came before the window's start (m1's 221, a second before m2's
      # reply) is within an upper bound, and said to come before it
      - timing:
          from: {reply: m2}
          to: {link: client->mbx1, direction: s2c, line: "^221", first_after: {reply: m1}}
          at_most: 0.5s
"""


def test_first_after_takes_the_first_line_after_the_event(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    row = _passed_on_a_plain_server(pytester, plain_smtp, FIRST_AFTER)
    timing, from_it, earlier = [c for c in row["checks"] if c["name"] == "timing"]
    assert "221 for the first time after mbx1 gave the sender its reply to m2" in timing["expected"]
    assert from_it["expected"].startswith(
        "mbx1 answered the sender with 221 at most 0.5s after mbx1 gave the sender its reply to m2"
    ), from_it["expected"]
    assert "s before mbx1 told the sender `250 " in earlier["observed"], earlier["observed"]
    assert "-" not in earlier["observed"].split("s before")[0], earlier["observed"]
    statuses = [timing["status"], from_it["status"], earlier["status"]]
    assert statuses == ["PASS", "PASS", "PASS"], row["checks"]
    bad = FIRST_AFTER.replace('direction: s2c, line: "^221", ', "closed: server, ")
    _write(pytester, "s.yaml", bad)
    result = pytester.runpytest("--shadowcheck", "library")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*s.yaml:*'first_after' picks the first line on a link*"])


BETWEEN = (
    LAST_BEFORE.split("    expect:")[0]
    + """\
    expect:
      # the last 221 after m1's reply and before m3's: m2's, a second before m3's reply
      - timing:
          from:
            link: client->mbx1
            direction: s2c
            line: "^221"
            first_after: {reply: m1}
            last_before: {reply: m3}
          to: {reply: m3}
          at_least: 0.8s
          at_most: 1.5s
          tolerance: 0s
      # no 221 after m3's reply and before m2's: a premise that never held
      - reply:
          message: m1
          code: 250
          given:
            link: client->mbx1
            direction: s2c
            line: "^221"
            first_after: {reply: m3}
            last_before: {reply: m2}
"""
)


def test_first_after_and_last_before_together_pick_a_line_between_two_events(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    row = _passed_on_a_plain_server(pytester, plain_smtp, BETWEEN)
    between = next(c for c in row["checks"] if c["name"] == "timing")
    assert between["status"] == "PASS", between
    assert "after mbx1 gave the sender its reply to m1 and before" in between["expected"]
    premise = next(c for c in row["checks"] if c["name"] == "reply")
    assert premise["status"] == "NOT-APPLICABLE", premise
    assert premise["observed"].startswith("mbx1 never answered the sender with 221 after"), premise[
        "observed"
    ]


def test_last_before_needs_a_line_on_a_link(pytester: pytest.Pytester) -> None:
    bad = LAST_BEFORE.replace('direction: s2c, line: "^221", ', "closed: server, ")
    _write(pytester, "s.yaml", bad)
    result = pytester.runpytest("--shadowcheck", "library")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    result.stdout.fnmatch_lines(["*s.yaml:*'last_before' picks the last line on a link*"])


@pytest.mark.slow
def test_a_node_that_never_starts_is_inconclusive_not_a_failure(
    pytester: pytest.Pytester,
) -> None:
    _write(pytester, "s.yaml", BROKEN_START)
    xml = pytester.path / "out.xml"
    result = pytester.runpytest_subprocess(
        "--shadowcheck",
        f"--shadowcheck-report={pytester.path / 'cert'}",
        f"--junitxml={xml}",
        "library",
    )
    result.assert_outcomes(errors=1)
    assert result.ret != 0
    out = result.stdout.str()
    assert "INCONCLUSIVE: scenario node_cannot_start (CR-1)" in out
    assert "the nodes did not start" in out
    # the node's own words, and its log tail once in the error report (pytest repeats the
    # report in its short summary when it runs under CI=true, which does not truncate it)
    report = out.split("short test summary info")[0]
    assert "ShadowHeartbeatFrequency must be positive" in report
    assert report.count("--- last lines of mbx1.log ---") == 1, out
    case = next(ET.parse(xml).getroot().iter("testcase"))
    assert [child.tag for child in case if child.tag != "system-out"] == ["error"]
    data = _certification(pytester)
    assert _statuses(data)["CR-1"] == "INCONCLUSIVE"
    assert data["summary"]["INCONCLUSIVE"] == 1 and data["summary"]["FAIL"] == 0
    page = (pytester.path / "cert" / "certification.html").read_text()
    assert "1 behaviour(s) INCONCLUSIVE" in page


def test_a_partial_run_is_partial_and_lists_what_did_not_run(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    _write(pytester, "s.yaml", NEVER_STARTED_CLOCK)
    xml = pytester.path / "out.xml"
    result = pytester.runpytest(
        "--shadowcheck",
        f"--shadowcheck-target=external:mbx1={plain_smtp.address}",
        f"--shadowcheck-report={pytester.path / 'cert'}",
        f"--junitxml={xml}",
        "-k",
        "idle_session",
        "library",
    )
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*not run: 1 scenario(s) of the library*"])
    data = _certification(pytester)
    assert data["not_run"] == ["only_after_a_copy"]
    statuses = _statuses(data)
    # CR-5's only scenario ran; TO-2's did not: UNTESTED, and TO-1 ran in full
    assert statuses["CR-5"] == "PASS" and statuses["TO-2"] == "UNTESTED"
    # a behaviour with some of its scenarios left out is PARTIAL
    _write(pytester, "t.yaml", TWO_BEHAVIOURS.replace("rejects_but_logs_fine", "second_cr5"))
    pytester.runpytest(
        "--shadowcheck",
        f"--shadowcheck-target=external:mbx1={plain_smtp.address}",
        f"--shadowcheck-report={pytester.path / 'cert'}",
        f"--junitxml={xml}",
        "-k",
        "idle_session",
        "library",
    )
    data = _certification(pytester)
    cr5 = next(b for b in data["behaviours"] if b["id"] == "CR-5")
    assert cr5["status"] == "PARTIAL" and cr5["not_run"] == ["second_cr5"]
    props = {p.get("name"): p.get("value") for p in ET.parse(xml).getroot().iter("property")}
    assert "CR-5" in props["shadowcheck.partial"].split(",")


def test_the_target_label_does_not_depend_on_the_path(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    _write(pytester, "s.yaml", TWO_BEHAVIOURS)
    nodes = pytester.path / "targets" / "mymta.yaml"
    nodes.parent.mkdir()
    nodes.write_text(
        f'name: mymta\nversion: "4.2"\nnodes:\n  mbx1: {{smtp: "{plain_smtp.address}"}}\n'
    )
    labels = []
    for spec, cwd in (
        ("targets/mymta.yaml", pytester.path),
        (str(nodes), pytester.path / "targets"),
    ):
        xml = pytester.path / f"out{len(labels)}.xml"
        os.chdir(cwd)
        pytester.runpytest(
            "--shadowcheck",
            f"--shadowcheck-target=external:{spec}",
            f"--shadowcheck-report={pytester.path / 'cert'}",
            f"--junitxml={xml}",
            str(pytester.path / "library"),
        )
        props = {p.get("name"): p.get("value") for p in ET.parse(xml).getroot().iter("property")}
        data = _certification(pytester)
        labels.append((props["shadowcheck.target"], props["shadowcheck.target_version"]))
        assert data["target"] == "mymta" and data["target_version"] == "4.2"
    assert labels == [("mymta", "4.2"), ("mymta", "4.2")]


def test_a_restart_in_place_of_a_reload_claims_no_pass_but_keeps_a_fail() -> None:
    from pytest_shadowcheck.verdict import CheckResult, Status, Verdict

    verdict = Verdict("s", ["PR-5", "PR-6"])
    verdict.add(CheckResult("delivered m1", Status.PASS, "m1", "yes", behaviours=["PR-5"]))
    verdict.add(CheckResult("timing", Status.FAIL, "at least 3s", "1s", behaviours=["PR-6"]))
    assert verdict.by_behaviour == {"PR-5": Status.PASS, "PR-6": Status.FAIL}
    verdict.caveats.append("mbx1 restarted on its queue to apply the route corp.test")
    # the passing checks may owe their result to the restart; a FAIL is still a FAIL
    assert verdict.by_behaviour == {"PR-5": Status.UNTESTABLE, "PR-6": Status.FAIL}
    assert verdict.behaviour_reason("PR-5") == (
        "its checks passed, but no PASS is claimed: "
        "mbx1 restarted on its queue to apply the route corp.test"
    )
    again = Verdict.from_dict(json.loads(json.dumps(verdict.to_dict())))
    assert again.by_behaviour == verdict.by_behaviour and again.caveats == verdict.caveats


@pytest.mark.parametrize("where", ["outside", "inside"])
def test_a_kept_workdir_is_named_without_the_machines_temporary_path(
    pytester: pytest.Pytester,
    plain_smtp: ThreadedSink,
    tmp_path_factory: pytest.TempPathFactory,
    where: str,
) -> None:
    _write(pytester, "s.yaml", TWO_BEHAVIOURS)
    # pytest's own temporary root (not below the run's directory), or one inside it
    basetemp = tmp_path_factory.mktemp("elsewhere") if where == "outside" else pytester.path / "t"
    result = pytester.runpytest(
        "--shadowcheck",
        f"--shadowcheck-target=external:mbx1={plain_smtp.address}",
        f"--shadowcheck-report={pytester.path / 'cert'}",
        f"--basetemp={basetemp}",
        "library",
    )
    result.assert_outcomes(failed=1)
    (scenario,) = _certification(pytester)["scenarios"]
    kept = re.search(r"\(node data and logs kept in (\S+)\)", scenario["reason"])
    assert kept, scenario["reason"]
    shown = kept.group(1)
    assert str(basetemp) not in json.dumps(_certification(pytester))
    if where == "outside":
        # named from <basetemp>, which the header resolves
        assert shown.startswith("<basetemp>/shadowcheck-rejects_but_logs_fine"), shown
        result.stdout.fnmatch_lines([f"shadowcheck workdirs: <basetemp> is {basetemp}"])
        directory = basetemp / shown.removeprefix("<basetemp>/")
    else:
        assert shown.startswith("t/shadowcheck-rejects_but_logs_fine"), shown
        directory = pytester.path / shown
    assert directory.is_dir()  # the user finds it (an external target writes nothing there)


def test_an_explored_scenario_credits_a_behaviour_only_with_checks_naming_it() -> None:
    """An explored scenario lists every behaviour its model may judge: a stranger's
    refused XSHADOW (a step's reply check, naming none) is no PASS of the Safety Net, and
    a damaged copy (an invariant) fails the scenario without failing SN-1 or XS-3."""
    from pytest_shadowcheck.verdict import CheckResult, Status, Verdict

    verdict = Verdict("explore_s1_000", ["SN-1", "XS-3"], named_evidence=True)
    verdict.add(CheckResult("reply to XSHADOW", Status.PASS, "a refusal", "`550`"))
    verdict.add(CheckResult("the catalogue model", Status.PASS, "", "", behaviours=["XS-3"]))
    # SN-1 was listed because the model might judge it, and it did not: no verdict of
    # this scenario (a NOT-APPLICABLE would hide another scenario's UNTESTABLE)
    assert verdict.by_behaviour == {"XS-3": Status.PASS}
    assert verdict.status == Status.PASS
    verdict.add(CheckResult("integrity of m2", Status.FAIL, "m2 as sent", "line 39 broken"))
    assert verdict.by_behaviour == {"XS-3": Status.PASS}
    assert verdict.status == Status.FAIL
    assert verdict.summary().startswith("integrity of m2: line 39 broken")
    again = Verdict.from_dict(json.loads(json.dumps(verdict.to_dict())))
    assert again.status == Status.FAIL and again.by_behaviour == verdict.by_behaviour
    # a run that broke says so for every behaviour listed
    verdict.untestable("no template renders ReceiveConnectionTimeout")
    assert verdict.by_behaviour == {"SN-1": Status.UNTESTABLE, "XS-3": Status.UNTESTABLE}
    # the same checks in a hand-written scenario evidence every behaviour it lists
    written = Verdict("s", ["SN-1", "XS-3"], checks=list(verdict.checks))
    assert written.by_behaviour == {"SN-1": Status.FAIL, "XS-3": Status.FAIL}
