"""A tarpitting MTA is judged as any other: every late reply is paired with its own command.

The ``tarpit`` variant (mta_variants/tarpit.py) is the reference MTA answering every
4xx/5xx reply ``TARPIT_DELAY`` seconds late, as Postfix and Exim can. A scripted
session against one real node shows each reply recorded as the answer to its own
command: a session whose read timeout is shorter than the tarpit ends at the first
late reply and sends nothing more; one that waits gets every reply in its place. The
security scenarios then give the same verdicts on it as on the unbroken reference.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from mta_variants.tarpit import TARPIT_DELAY
from test_broken_variants import SUITE, run_suite

from pytest_shadowcheck.scenario.loader import load_scenario_file

pytestmark = pytest.mark.slow

#: the read timeout the hasty session uses: the tarpit answers later than that
HASTY = 1.0
assert HASTY < TARPIT_DELAY

SESSIONS = f"""\
defaults:
  topology: two-node-dag
  timeout: 60s
scenarios:
  - name: tarpit_hasty_session
    title: a session that waits {HASTY:g} s for each reply, against a node answering refusals later
    behaviours: [XS-3]
    steps:
      - session:
          via: mbx1
          timeout: {HASTY:g}s
          say:
            - "EHLO stranger.example"
            - {{send: "XSHADOW mbx2", reply: "^5\\\\d\\\\d"}}
            - {{send: "NOOP", reply: "^250"}}
            - "QUIT"
  - name: tarpit_patient_session
    title: a session with the default reply timeout gets every late refusal in its place
    behaviours: [XS-3]
    steps:
      - session:
          via: mbx1
          say:
            - "EHLO stranger.example"
            - {{send: "XSHADOW mbx2", reply: "^5\\\\d\\\\d"}}
            - {{send: "AUTH PLAIN AG1ieDIAd3Jvbmc=", reply: "^5\\\\d\\\\d"}}
            - {{send: "NOOP", reply: "^250"}}
            - {{send: "MAIL FROM:<stranger@ext.test>", reply: "^250"}}
            - {{send: "RCPT TO:<nobody@nowhere.invalid>", reply: "^5\\\\d\\\\d"}}
            - {{send: "RCPT TO:<alice@corp.test>", reply: "^250"}}
            - {{send: "DATA", reply: "^354"}}
            - {{message: s1, reply: "^250"}}
            - {{send: "XQDISCARD", reply: "^5\\\\d\\\\d"}}
            - {{send: "QUIT", reply: "^221"}}
    expect:
      - delivered: {{message: s1, to: mailbox, within: 10s}}
"""

LINK = "client->mbx1"


def _events(history_dir: Path, scenario: str) -> list[dict[str, Any]]:
    (path,) = history_dir.glob(f"*{scenario}*.json")
    events: list[dict[str, Any]] = json.loads(path.read_text())["events"]
    return [e for e in events if e["link"] == LINK]


def _replies(events: list[dict[str, Any]]) -> list[tuple[str, int]]:
    return [(e["data"]["command"], e["data"]["code"]) for e in events if e["kind"] == "reply"]


def test_every_late_reply_is_paired_with_its_own_command(tmp_path: Path) -> None:
    library = tmp_path / "library"
    library.mkdir()
    (library / "tarpit.yaml").write_text(SESSIONS, encoding="utf-8")
    history_dir = tmp_path / "history"
    found = run_suite(
        tmp_path,
        "broken:tarpit",
        scenarios=library,
        extra=(f"--shadowcheck-history={history_dir}", f"--shadowcheck-report={tmp_path}"),
    )
    assert found["tarpit_patient_session"][0] == "passed", found["tarpit_patient_session"]
    outcome, message = found["tarpit_hasty_session"]
    assert outcome == "failed"
    # the hasty session hung up at the late refusal: nothing after it was sent or answered
    assert f"no reply within {HASTY:g} s" in message, message
    (xs3,) = (b for b in json.loads((tmp_path / "certification.json").read_text())["behaviours"]
              if b["id"] == "XS-3")  # fmt: skip
    (judged,) = (s for s in xs3["scenarios"] if s["scenario"] == "tarpit_hasty_session")
    # the late reply is judged at its own line; the lines never sent are not judged
    assert sorted((c["name"], c["status"]) for c in judged["decided_by"]) == [
        ("session reply to NOOP", "NOT-APPLICABLE"), ("session reply to XSHADOW mbx2", "FAIL"),
    ]  # fmt: skip
    hasty = _events(history_dir, "tarpit_hasty_session")
    assert _replies(hasty) == [("CONNECT", 220), ("EHLO", 250)]
    said = [e["data"]["text"] for e in hasty if e["kind"] == "line" and e["direction"] == "c2s"]
    assert said == ["EHLO stranger.example", "XSHADOW mbx2"]
    gave_up = f"no reply to XSHADOW within {HASTY:g} s: the harness ended the session"
    closes = [e["data"]["reason"] for e in hasty if e["kind"] == "close"]
    assert gave_up in closes, closes
    notes = [e["data"]["text"] for e in hasty if e["kind"] == "note"]
    assert f"not sent ({gave_up}): NOOP / QUIT" in notes, notes

    patient = _events(history_dir, "tarpit_patient_session")
    assert _replies(patient) == [
        ("CONNECT", 220), ("EHLO", 250), ("XSHADOW", 500), ("AUTH", 535), ("NOOP", 250),
        ("MAIL", 250), ("RCPT", 550), ("RCPT", 250), ("DATA", 354), ("EOD", 250),
        ("XQDISCARD", 500), ("QUIT", 221),
    ]  # fmt: skip
    # each refusal names its verb, and came later than the hasty session waited
    sent_at = {
        e["data"]["text"].split(" ", 1)[0]: e["t"]
        for e in patient
        if e["kind"] == "line" and e["direction"] == "c2s"
    }
    for reply in (e for e in patient if e["kind"] == "reply" and e["data"]["code"] >= 500):
        command = reply["data"]["command"]
        if command in ("XSHADOW", "XQDISCARD"):
            assert command in reply["data"]["text"], reply
        if command != "RCPT":  # two RCPTs: the first one's time is overwritten above
            assert reply["t"] - sent_at[command] >= TARPIT_DELAY - 0.05, reply


def _judged(scenario: dict[str, Any]) -> tuple[str, str, list[tuple[str, str]]]:
    checks = sorted((c["name"], c["status"]) for c in scenario["decided_by"])
    return scenario["scenario"], scenario["status"], checks


def _verdicts(tmp_path: Path, target: str, names: tuple[str, ...]) -> dict[str, Any]:
    report = tmp_path / target.replace(":", "-")
    history = report / "history"
    found = run_suite(
        tmp_path,
        target,
        names,
        extra=(f"--shadowcheck-report={report}", f"--shadowcheck-history={history}"),
    )
    data = json.loads((report / "certification.json").read_text())
    # each behaviour's status, and in each scenario its status and every check's
    behaviours = {
        b["id"]: (b["status"], sorted(_judged(s) for s in b["scenarios"]))
        for b in data["behaviours"]
    }
    return {
        "scenarios": {name: found[name][0] for name in names},
        "behaviours": behaviours,
        "slowest refusal": _slowest_refusal(history, "xs3_stranger_cannot_shadow"),
    }


def _slowest_refusal(history_dir: Path, scenario: str) -> float:
    """How long the slowest 5xx reply to the stranger's session took, in seconds."""
    events = _events(history_dir, scenario)
    slowest, said_at = 0.0, 0.0
    for event in events:
        if event["kind"] == "line" and event["direction"] == "c2s":
            said_at = event["t"]
        elif event["kind"] == "reply" and event["data"]["code"] >= 500:
            slowest = max(slowest, event["t"] - said_at)
    return slowest


def test_security_scenarios_judge_the_tarpit_as_the_reference(tmp_path: Path) -> None:
    names = tuple(s.name for s in load_scenario_file(SUITE / "security.yaml"))
    reference = _verdicts(tmp_path, "reference", names)
    tarpit = _verdicts(tmp_path, "broken:tarpit", names)
    assert set(reference["scenarios"].values()) == {"passed"}, reference["scenarios"]
    # the stranger's refusals did come late from the tarpit (and promptly from the reference)
    assert tarpit.pop("slowest refusal") >= TARPIT_DELAY - 0.05
    assert reference.pop("slowest refusal") < 1.0
    assert tarpit == reference
