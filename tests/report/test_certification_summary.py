"""The certification opens with a few sentences a mail admin can act on, derived from the
verdicts: what the MTA keeps, what it breaks (with the most telling observation), what
never came into play and what could not be tested here; the statuses are unchanged."""

from __future__ import annotations

import json
from typing import Any

from pytest_shadowcheck.report.certification import build_report, render_html, scenario_entry
from pytest_shadowcheck.report.rules import rule_sentences
from pytest_shadowcheck.verdict import CheckResult, Status, Verdict

LACKS = (
    "target docker:postfix lacks control_api: the MTA's internal state through a control "
    "API (queues, Safety Net contents)"
)
NO_SESSION = "mbx1 never sent XSHADOW to mbx2: mbx1 never opened an SMTP session to mbx2"


def _entry(verdict: Verdict) -> dict[str, Any]:
    data = verdict.to_dict()
    data["file"] = "scenarios/x.yaml"
    return scenario_entry(f"scenarios/x.yaml::{verdict.scenario}", data, 1.0)


def _verdicts() -> list[Verdict]:
    accepts = Verdict("cr5_cut_link_accepts", ["CR-5"])
    accepts.add(CheckResult("reply to m1", Status.PASS, "250", "mbx1 answered `250 Ok`"))
    # CR-3 fails twice: in a scenario of its own, and among others with a blanket check
    own = Verdict("cr3_shadow_ack_before_sender_ack", ["CR-1", "CR-3"])
    own.add(
        CheckResult(
            "order", Status.FAIL, "mbx2 accepted m1 from mbx1 (250 to its content) before ...",
            "mbx1 told the sender `250 2.0.0 Ok: queued as CF2F51664D6` for m1 (+1.486s); by "
            "then mbx2 had not accepted m1 from mbx1 (250 to its content): mbx1 never opened "
            "an SMTP session to mbx2 (checked at +1.486s)",
            "scenarios/x.yaml:40", "  +1.486s client->mbx1 #1 S: 250 2.0.0 Ok: queued",
            behaviours=["CR-3"],
        )
    )  # fmt: skip
    own.add(CheckResult("order", Status.FAIL, "e", "a lesser observation. More.", "x:1"))
    idle = Verdict("di1_discard_once_acknowledged", ["DI-1", "DI-2"])
    idle.add(
        CheckResult("lines", Status.NOT_APPLICABLE, "only applies if mbx1 sent XSHADOW to mbx2",
                    f"{NO_SESSION}, so there was nothing to check")
    )  # fmt: skip
    blind = Verdict("sn5_resubmission", ["SN-5", "SN-7"])
    blind.add(CheckResult("safetynet_primary queue of mbx1", Status.UNTESTABLE, "e", LACKS))
    together = Verdict("pr4_primary_and_shadow_fail_together", ["PR-4"])
    together.add(
        CheckResult("no loss of m1", Status.OUTSIDE_GUARANTEE, "m1 delivered",
                    "m1 lost, but every node holding a copy failed (mbx1 was killed and not "
                    "restarted): primary and shadow failing together is outside the guarantee")
    )  # fmt: skip
    return [accepts, own, idle, blind, together]


def _report() -> dict[str, Any]:
    return build_report(
        [_entry(v) for v in _verdicts()],
        run_id="r1",
        target="postfix",
        target_version="Postfix 3.7.11 (image shadowcheck/postfix:3.7 1bb9f960f63f)",
        started_at="2024-11-26T08:26:00+00:00",
    )


def test_the_summary_says_what_is_kept_broken_idle_and_untestable() -> None:
    report = _report()
    statuses = {b["id"]: b["status"] for b in report["behaviours"]}
    # the statuses are the verdicts' own
    assert statuses["CR-5"] == "PASS" and statuses["CR-3"] == statuses["CR-1"] == "FAIL"
    assert statuses["DI-1"] == statuses["DI-2"] == "NOT-APPLICABLE"
    assert statuses["SN-5"] == statuses["SN-7"] == "UNTESTABLE"
    assert report["summary"]["FAIL"] == 2 and report["summary"]["PASS"] == 1
    rules = rule_sentences()
    summary = {entry["status"]: entry for entry in report["admin_summary"]}
    assert list(summary) == [
        "PASS", "FAIL", "OUTSIDE-GUARANTEE", "NOT-APPLICABLE", "UNTESTABLE", "UNTESTED"
    ]  # fmt: skip
    assert summary["UNTESTED"]["text"].startswith(
        "37 of the 45 behaviours were not tested at all: no scenario for them ran (CR-2, "
    )
    (outside,) = summary["OUTSIDE-GUARANTEE"]["groups"]
    assert outside["items"] == [
        f"PR-4: {rules['PR-4']} Seen: m1 lost, but every node holding a copy failed (mbx1 was "
        "killed and not restarted): primary and shadow failing together is outside the "
        "guarantee (pr4_primary_and_shadow_fail_together, no loss of m1)"
    ]

    kept = summary["PASS"]
    assert kept["text"] == (
        "Postfix 3.7.11 keeps 1 of the 45 behaviours: each held in every scenario that tested it."
    )
    (family,) = kept["groups"]
    assert (family["family"], family["title"]) == ("CR", "creating the shadow copy")
    assert family["items"] == [f"CR-5: {rules['CR-5']} Held in 1 scenario (cr5_cut_link_accepts)."]

    broken = summary["FAIL"]
    assert broken["text"].startswith("Postfix 3.7.11 breaks 2 of the 45 behaviours")
    items = [i for g in broken["groups"] for i in g["items"]]
    cr3 = next(i for i in items if i.startswith("CR-3: "))
    # the most telling check: the one naming CR-3 itself, its first sentence only
    assert cr3 == (
        f"CR-3: {rules['CR-3']} Seen: mbx1 told the sender `250 2.0.0 Ok: queued as "
        "CF2F51664D6` for m1 (+1.486s); by then mbx2 had not accepted m1 from mbx1 (250 to "
        "its content): mbx1 never opened an SMTP session to mbx2 (checked at +1.486s) "
        "(cr3_shadow_ack_before_sender_ack, order)"
    )
    cr1 = next(i for i in items if i.startswith("CR-1: "))
    assert cr1.endswith("Seen: a lesser observation (cr3_shadow_ack_before_sender_ack, order)")

    assert summary["NOT-APPLICABLE"]["text"] == (
        "2 of the 45 behaviours never came into play, because what they presuppose never "
        "happened (DI-1, DI-2); most often: 2 because mbx1 never sent XSHADOW to mbx2."
    )
    assert summary["UNTESTABLE"]["text"] == (
        "2 of the 45 behaviours could not be tested on this target (SN-5, SN-7): 2 because "
        "docker:postfix lacks control_api - the MTA's internal state through a control API "
        "(queues, Safety Net contents)."
    )
    json.dumps(report)  # all of it goes into certification.json


def test_the_page_opens_with_the_summary_and_shows_the_history_once() -> None:
    report = _report()
    page = render_html(report)
    short = page.index("<h2>In short</h2>")
    assert short < page.index("<h2>Behaviours by status</h2>")
    assert short < page.index("<h2>Behaviours and scenarios</h2>")
    assert "Postfix 3.7.11 keeps 1 of the 45 behaviours" in page[short:]
    assert "mbx1 told the sender `250 2.0.0 Ok: queued as CF2F51664D6`" in page
    own = next(s for s in report["scenarios"] if s["scenario"].startswith("cr3"))
    rendered = [c["rendered"] for c in own["checks"]]
    assert rendered[0].splitlines()[1] == f"    rule tested: CR-3 - {rule_sentences()['CR-3']}"
    assert all("history around it" not in r for r in rendered)
    assert own["history"] == "  +1.486s client->mbx1 #1 S: 250 2.0.0 Ok: queued"
    assert page.count("history around it (once for the scenario)") == 1


def test_an_explored_scenario_leaves_the_library_its_verdicts_and_names_its_evidence() -> None:
    """An explored scenario lists every behaviour its model may judge: the ones it did
    not judge keep the library's verdict (an UNTESTABLE is not hidden under its
    NOT-APPLICABLE), only checks naming a behaviour are listed as deciding it, and its
    generated file is named without this machine's temporary path."""
    import tempfile

    explored = Verdict(
        "explore_s2027_000",
        ["CR-1", "SN-5"],
        source=f"{tempfile.gettempdir()}/shadowcheck-explore/r1/explore_s2027_000.yaml:3",
        named_evidence=True,
    )
    explored.add(CheckResult("the catalogue model", Status.PASS, "", "", behaviours=["CR-1"]))
    generated = f"{tempfile.gettempdir()}/shadowcheck-explore/r1/explore_s2027_000.yaml:40"
    explored.add(
        CheckResult("integrity of m2", Status.FAIL, "m2 as sent", "line 39 parted", generated)
    )
    entries = [_entry(explored)] + [_entry(v) for v in _verdicts()]
    report = build_report(
        entries, run_id="r1", target="postfix", target_version="3.7",
        started_at="2024-11-26T08:26:00+00:00",
    )  # fmt: skip
    behaviours = {b["id"]: b for b in report["behaviours"]}
    assert behaviours["SN-5"]["status"] == "UNTESTABLE"
    (judged,) = [s for s in behaviours["CR-1"]["scenarios"] if s["scenario"] == explored.scenario]
    assert [c["name"] for c in judged["decided_by"]] == ["the catalogue model"]
    (entry,) = [e for e in entries if e["scenario"] == explored.scenario]
    assert entry["verdict"] == "FAIL" and entry["source"] == "explore_s2027_000.yaml:3"
    assert entry["checks"][1]["where"] == "explore_s2027_000.yaml:40"
    assert "(explore_s2027_000.yaml:40)" in entry["checks"][1]["rendered"]
    assert tempfile.gettempdir() not in json.dumps(entry)
    # CR-1 FAILs elsewhere; what the summary says was seen is never the explored
    # scenario's integrity FAIL, which evidences no behaviour there
    broken = next(e for e in report["admin_summary"] if e["status"] == "FAIL")
    cr1 = next(i for g in broken["groups"] for i in g["items"] if i.startswith("CR-1: "))
    assert "line 39 parted" not in cr1 and cr1.endswith("(cr3_shadow_ack_before_sender_ack, order)")
