"""How a failed scenario reads: per check the rule it tested (the catalogue's sentence),
then expected and observed; the history around the failures once for the scenario."""

from __future__ import annotations

from pytest_shadowcheck.history import History
from pytest_shadowcheck.report.rules import rule_sentences
from pytest_shadowcheck.verdict import CheckResult, Status, Verdict, merge_excerpts


def _history() -> tuple[History, str, str]:
    h = History()
    h.record("step", text="send id=m1 via=mbx1 to=['alice@corp.test']", line=8)
    h.record("connect", link="client->mbx1", conn=1)
    h.record("line", link="client->mbx1", conn=1, direction="s2c", text="250 2.0.0 Ok: queued")
    h.record("delivery", sink="mailbox", message_id="<m1@x>", helo="mbx1", rcpt_tos=["a@x"])
    first = h.excerpt(h.now(), links=["client->mbx1"])
    second = h.excerpt(h.now(), links=["mbx1->mbx2"])
    return h, first, second


def test_each_failed_check_states_its_rule_then_expected_and_observed() -> None:
    _, first, second = _history()
    verdict = Verdict("cr4_shadow_killed_rejects", ["CR-4"], title="the shadow is down")
    verdict.add(
        CheckResult("reply to m1", Status.FAIL, "mbx1 answers the content of m1 with 451",
                    "mbx1 answered `250 2.0.0 Ok: queued`", "s.yaml:9", first)
    )  # fmt: skip
    verdict.add(
        CheckResult("not delivered m1", Status.FAIL, "m1 not delivered", "delivered once",
                    "s.yaml:10", second)
    )  # fmt: skip
    log_tail = "--- last lines of mbx1's log ---\nstarting the Postfix mail system"
    verdict.add(CheckResult("log of mbx1", Status.FAIL, "x", "y", "s.yaml:11", log_tail))
    rules = rule_sentences()
    text = verdict.render(rules)
    lines = text.splitlines()
    assert lines[0] == "FAIL: scenario cr4_shadow_killed_rejects (CR-4) - the shadow is down"
    start = lines.index("[FAIL] reply to m1  (s.yaml:9)")
    assert lines[start + 1] == f"    rule tested: CR-4 - {rules['CR-4']}"
    assert lines[start + 2] == "    expected: mbx1 answers the content of m1 with 451"
    assert lines[start + 3] == "    observed: mbx1 answered `250 2.0.0 Ok: queued`"
    # the rule once; the next check of the same behaviour only names it
    assert text.count(rules["CR-4"]) == 1
    assert "    rule tested: CR-4 (stated above)" in lines
    # the history once, after the checks, each event once, plain values
    assert text.count("history around it") == 1
    assert text.count("S: 250 2.0.0 Ok: queued") == 1
    assert text.count("DELIVERED to mailbox") == 1
    assert "to=alice@corp.test" in text and "['" not in text
    assert text.index("history around it") > text.index("[FAIL] log of mbx1")
    # a check's own evidence (a log tail) stays with it
    assert text.index("starting the Postfix mail system") < text.index("history around it")
    # without rules (a caller with no catalogue) the text still reads
    assert "rule tested" not in verdict.render()


def test_history_excerpts_merge_in_time_order() -> None:
    merged = merge_excerpts(
        [
            "  +1.000s a #1 C: EHLO x\n  +3.000s - STEP kill mbx1",
            "  +2.000s b #1 S: 220 y\n  +3.000s - STEP kill mbx1\n  ... 4 more event(s) in "
            "the window not shown",
        ]
    )
    assert merged.splitlines() == [
        "  +1.000s a #1 C: EHLO x",
        "  +2.000s b #1 S: 220 y",
        "  +3.000s - STEP kill mbx1",
        "  ... more events in these windows not shown",
    ]


def test_a_wrapped_long_line_is_shown_where_it_parts() -> None:
    """sendmail's L=990 wraps a 998-octet line: the text shows the octet where the two
    part and both ends, not two identical quotes of the line's start."""
    from pytest_shadowcheck.checks.integrity import _first_difference

    sent = b"first\r\n" + b"L" + b"a" * 990 + b"bcdefgh\r\nlast\r\n"
    wrapped = b"first\r\n" + b"L" + b"a" * 989 + b"\r\n abcdefgh\r\nlast\r\n"
    said = _first_difference(sent, wrapped)
    assert said.startswith("body line 2: sent 998 octets, delivered 990, first different at")
    assert "abcdefgh' (the line ends there)" in said
    assert said.count("(the line ends there)") == 2
