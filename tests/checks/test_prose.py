"""Failure texts in a mail admin's words: matchers, patterns, steps and values said in
prose derived from their parts, checked on real histories (no regex, no Python repr,
no "no such line among 0" in front of the admin)."""

from __future__ import annotations

import asyncio
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from pytest_shadowcheck.checks.evaluate import run_check
from pytest_shadowcheck.checks.inside import check_log
from pytest_shadowcheck.checks.prose import describe_matcher, pattern_words, reply_words
from pytest_shadowcheck.checks.wire import check_lines, check_order, check_timing
from pytest_shadowcheck.checks.workload import Fate, WorkloadReport, results
from pytest_shadowcheck.history import History, _literal, plain_text
from pytest_shadowcheck.network.client import Reply, SendResult
from pytest_shadowcheck.network.messages import Message
from pytest_shadowcheck.progress import Progress
from pytest_shadowcheck.scenario.loader import Scenario, load_scenario_file
from pytest_shadowcheck.scenario.model import Step
from pytest_shadowcheck.verdict import CheckResult, Status

SCENARIO = """\
scenarios:
  - name: shadow_before_ack
    behaviours: [CR-3]
    settle: 200ms
    topology:
      nodes: {mbx1: {}, mbx2: {}}
      next_hops: {corp.test: {sink: mailbox}}
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - send: {id: m2, via: mbx1, to: [alice@corp.test]}
    expect:
      - order:
          first: {link: mbx1->mbx2, direction: s2c, line: "^250", message: m1}
          then: {reply: m1}
      - lines: {link: mbx1->mbx2, direction: s2c, contains: "^250[- ]XSHADOW "}
      - timing:
          from: {step: "^send id=m2 "}
          to: {reply: m2}
          at_least: 1.5s
          at_most: 4.5s
          tolerance: 0.3s
      - log: {node: mbx1, contains: ReplayLagTime}
      - queue: {node: mbx2, queue: shadow, contains: [m1], count: 2}
      - order:
          first: {link: mbx1->mbx2, direction: c2s, line: "^AUTH "}
          then: {link: mbx1->mbx2, direction: s2c, line: "^250[- ]XSHADOW "}
"""


@dataclass
class Target:
    """A black box: no control API, a log of five lines."""

    name: str = "docker:postfix"
    added_headers: frozenset[str] = frozenset()
    log: str = "\n".join(f"postfix/smtpd[{n}]: connect from unknown" for n in range(5))

    def can(self, capability: str, call: tuple[str, str] | None = None) -> bool:
        return False

    async def control(self, node: str, method: str, path: str, body: Any = None) -> Any:
        raise AssertionError("a black box has no control API")

    def node_log(self, node: str) -> str | None:
        return self.log


@dataclass
class Recorded:
    """What a check reads of a run (checks.view.RunView), over a real History."""

    scenario: Scenario
    history: History = field(default_factory=History)
    progress: Progress = field(default_factory=lambda: Progress("test"))
    messages: dict[str, Message] = field(default_factory=dict)
    sinks: dict[str, Any] = field(default_factory=dict)
    target: Target = field(default_factory=Target)

    def excerpt(
        self, around: float, links: list[str], before: float = 3.0, after: float = 2.0
    ) -> str:
        return self.history.excerpt(around, links=links or None, before=before, after=after)

    async def settled_message(self, ref: str, timeout: float = 0.0) -> Message:
        return self.messages[ref]

    async def still_held(self, ref: str) -> str | None:
        return None

    async def until_quiet(self, timeout: float) -> float | None:
        # a black box's queues cannot be read: never seen quiet (as engine.run's)
        await asyncio.sleep(timeout)
        return None

    def copy_holders(self, ref: str) -> list[str]:
        return []

    def copy_lost(self, node: str, since: float) -> str | None:
        return None

    def sent(self, ref: str, text: str) -> None:
        """The sender sent ``ref`` to mbx1 (never to mbx2) and got ``250 text``."""
        h = self.history
        h.record("connect", link="client->mbx1", conn=len(self.messages) + 1)
        h.record("line", link="client->mbx1", conn=1, direction="c2s", text="DATA")
        reply = Reply("EOD", 250, "2.0.0", text, h.now())
        h.record("line", link="client->mbx1", conn=1, direction="s2c", text=f"250 {text}")
        result = SendResult(True, 250, "2.0.0", text, [reply], None, f"<{ref}@x>")
        result.deciding_reply = reply
        self.messages[ref] = Message(ref, f"<{ref}@x>", "mbx1", h.now(), ["mbx1", "mbx2"], result)


@pytest.fixture
def run(tmp_path: Path) -> Recorded:
    path = tmp_path / "s.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    (scenario,) = load_scenario_file(path)
    return Recorded(scenario)


def _expect(run: Recorded, kind: str, index: int = 0) -> Step:
    return [s for s in run.scenario.expect if s.kind == kind][index]


def _no_machine_text(result: CheckResult) -> None:
    """Nothing a mail admin would have to decode."""
    for text in (result.name, result.expected, result.observed, result.excerpt):
        assert "/^" not in text and "['" not in text and "{'" not in text, text
        assert "no such line" not in text and "never happened" not in text, text


@pytest.mark.parametrize(
    ("matcher", "text"),
    [
        (
            {"link": "mbx1->mbx2", "line": "^250", "direction": "s2c", "message": "m1"},
            "mbx2 accepted m1 from mbx1 (250 to its content)",
        ),
        (
            {"link": "mbx1->mbx2", "line": "^451", "direction": "s2c", "message": "m1"},
            "mbx2 deferred m1 from mbx1 (451 to its content)",
        ),
        (
            {"link": "mbx1->mbx2", "line": "^XSHADOW", "direction": "c2s"},
            "mbx1 sent XSHADOW to mbx2",
        ),
        ({"link": "mbx1->mbx2", "line": "^AUTH ", "direction": "c2s"}, "mbx1 sent AUTH to mbx2"),
        (
            {"link": "mbx1->mbx2", "line": "^250[- ]XSHADOW ", "direction": "s2c"},
            "mbx2 advertised XSHADOW to mbx1 in its EHLO reply",
        ),
        (
            {"link": "mbx2->mbx1", "line": "^250-DISCARD ", "direction": "s2c"},
            "mbx1 answered mbx2 with a line starting 250-DISCARD",
        ),
        (
            {"link": "client->mbx1", "line": "^220", "direction": "s2c"},
            "mbx1 greeted the sender with 220",
        ),
        (
            {"link": "mbx2->mailbox", "line": "^MAIL FROM: ?<>", "direction": "c2s"},
            "mbx2 sent `MAIL FROM:<>` to mailbox",
        ),
        (
            {"link": "chicago->newyork", "line": "^XQDISCARD", "direction": "c2s", "message": "m2"},
            "chicago sent XQDISCARD to newyork after m2's content",
        ),
        ({"link": "client->mbx1", "closed": "server"}, "mbx1 closed the sender's session"),
        ({"link": "mbx1->mbx2", "closed": "any"}, "the session from mbx1 to mbx2 ended"),
        ({"link": "mbx1->mbx3", "opened": True}, "mbx1 opened an SMTP session to mbx3"),
        ({"delivered": "m1", "to": "mailbox"}, "m1 was delivered to mailbox"),
        ({"reply": "m1"}, "the sender got its reply to m1"),
        ({"step": "^kill mbx1"}, "the harness killed mbx1"),
        ({"step": "^mbx1 back after wipe"}, "mbx1 came back after its wipe"),
        ({"step": "^send id=m2 "}, "the sender sent m2"),
        ({"step": "^fault link=mbx2->mbx1"}, "the harness broke mbx2->mbx1"),
        (
            {"any_of": [{"link": "mbx1->mbx2", "opened": True}, {"step": "^pause mbx1"}]},
            "mbx1 opened an SMTP session to mbx2 or the harness paused mbx1",
        ),
        (
            # the event both are the last line before is said once
            {
                "last_of": [
                    {"link": "mbx2->mbx1", "direction": "s2c", "line": ".",
                     "last_before": {"step": "^kill mbx1"}},
                    {"link": "mbx1->mbx2", "direction": "c2s", "line": ".",
                     "last_before": {"step": "^kill mbx1"}},
                ]
            },
            "mbx1 answered mbx2 or mbx1 spoke to mbx2, whichever was later, each for the last "
            "time before the harness killed mbx1",
        ),
        (
            {
                "last_of": [
                    {"link": "client->mbx1", "direction": "s2c", "line": "^221"},
                    {"link": "client->mbx1", "direction": "s2c", "line": "^221",
                     "last_before": {"reply": "m3"}},
                ]
            },
            "mbx1 answered the sender with 221 or mbx1 answered the sender with 221 for the "
            "last time before the sender got its reply to m3, whichever was later",
        ),
    ],
)
def test_a_matcher_reads_as_the_event_it_names(matcher: dict[str, Any], text: str) -> None:
    said = describe_matcher(matcher)
    assert said.text == text
    subject = text.split(" ", 2)
    # "never" and "had not" follow from the same parts
    assert said.never.startswith(subject[0]) and " never " in said.never
    assert " had not " in said.not_yet


@pytest.mark.parametrize(
    ("regex", "line", "reply"),
    [
        ("ReplayLagTime", "a line mentioning ReplayLagTime", "a reply mentioning ReplayLagTime"),
        ("^5\\d\\d", "a 5xx line", "a 5xx reply"),
        (
            "^(5\\d\\d|250 0 )",
            "a 5xx line or a line starting `250 0`",
            "a 5xx reply or a reply starting `250 0`",
        ),
        ("^354", "a line starting 354", "354"),
        ("^RCPT TO:<dave@corp\\.test>", "a line starting `RCPT TO:<dave@corp.test>`", None),
        ("^X-Categorized-By: mbx2;", "a line starting `X-Categorized-By: mbx2;`", None),
        # no words say it: the pattern is shown, once, as a pattern
        ("^X-[A-Z]+: \\d+$", "a line matching the pattern `^X-[A-Z]+: \\d+$`", None),
    ],
)
def test_a_pattern_reads_as_plain_words(regex: str, line: str, reply: str | None) -> None:
    assert pattern_words(regex) == line
    if reply is not None:
        assert reply_words(regex) == reply


def test_an_order_broken_on_a_link_never_opened_says_so(run: Recorded) -> None:
    run.sent("m1", "2.0.0 Ok: queued as DFA42160957")
    result = asyncio.run(check_order(run, _expect(run, "order")))
    assert result.status == Status.FAIL
    assert result.expected == (
        "mbx2 accepted m1 from mbx1 (250 to its content) before mbx1 gave the sender its "
        "reply to m1"
    )
    assert result.observed.startswith(
        "mbx1 told the sender `250 2.0.0 Ok: queued as DFA42160957` for m1 (+"
    )
    assert (
        "; by then mbx2 had not accepted m1 from mbx1 (250 to its content): mbx1 never opened "
        "an SMTP session to mbx2 (checked at +" in result.observed
    )
    _no_machine_text(result)


def test_an_order_of_two_events_that_never_came(run: Recorded) -> None:
    run.sent("m1", "2.0.0 Ok")
    result = asyncio.run(check_order(run, _expect(run, "order", 1)))
    assert result.expected == (
        "mbx1 sent AUTH to mbx2 before mbx2 advertised XSHADOW to mbx1 in its EHLO reply"
    )
    assert result.observed.startswith(
        "mbx1 never sent AUTH to mbx2 and mbx2 never advertised XSHADOW to mbx1 in its EHLO "
        "reply: mbx1 never opened an SMTP session to mbx2 (checked at +"
    )
    _no_machine_text(result)


def test_a_missing_line_says_what_the_link_carried(run: Recorded) -> None:
    step = _expect(run, "lines")
    result = asyncio.run(check_lines(run, step))
    assert result.expected == "mbx2 advertised XSHADOW to mbx1 in its EHLO reply"
    assert result.observed == (
        "mbx2 never advertised XSHADOW to mbx1 in its EHLO reply: mbx1 never opened an SMTP "
        "session to mbx2"
    )
    # with a session but no such line, the lines it did carry are counted
    h = run.history
    h.record("connect", link="mbx1->mbx2", conn=1)
    for text in ("220 mbx2 ESMTP", "250-mbx2", "250 8BITMIME"):
        h.record("line", link="mbx1->mbx2", conn=1, direction="s2c", text=text)
    h.record("line", link="mbx1->mbx2", conn=1, direction="c2s", text="EHLO mbx1")
    result = asyncio.run(check_lines(run, step))
    assert result.observed == (
        "mbx2 never advertised XSHADOW to mbx1 in its EHLO reply: mbx1 opened 1 SMTP session "
        "to mbx2, in which mbx2 sent 3 lines"
    )
    _no_machine_text(result)


def test_a_timing_from_a_step_names_the_step_plainly(run: Recorded) -> None:
    step = _expect(run, "timing")
    send = next(s for s in run.scenario.steps if getattr(s.arg, "id", None) == "m2")
    # the engine's label of the step carries a Python list: the text must not
    run.history.record(
        "step", text="send id=m2 via=mbx1 to=['alice@corp.test'] timeout=10.0", line=send.where.line
    )
    run.sent("m2", "2.0.0 Ok: queued as DE9A3167014")
    result = asyncio.run(check_timing(run, step))
    assert result.status == Status.FAIL
    assert result.expected == (
        "mbx1 gave the sender its reply to m2 at least 1.5s and at most 4.5s after the "
        "sender sent m2 to mbx1 (give or take 0.3s)"
    )
    assert result.observed.startswith(
        "mbx1 told the sender `250 2.0.0 Ok: queued as DE9A3167014` for m2 0.0"
    )
    assert "s after the sender sent m2 to mbx1 for alice@corp.test (+" in result.observed
    assert "STEP send id=m2 via=mbx1 to=alice@corp.test timeout=10.0" in result.excerpt
    _no_machine_text(result)


def test_a_log_check_says_what_it_read(run: Recorded) -> None:
    result = asyncio.run(check_log(run, _expect(run, "log")))
    assert result.status == Status.FAIL
    assert result.expected == "mbx1's log has a line mentioning ReplayLagTime"
    assert result.observed == "mbx1's log has 5 lines, none mentioning ReplayLagTime"
    _no_machine_text(result)


def test_a_check_the_target_cannot_look_at_is_named_as_it_would_be(run: Recorded) -> None:
    result = asyncio.run(run_check(run, _expect(run, "queue")))
    assert result.status == Status.UNTESTABLE
    assert result.name == "shadow queue of mbx2"
    assert result.expected == "the shadow queue of mbx2 holds m1 and holds exactly 2 messages"
    assert result.observed.startswith("target docker:postfix lacks control_api: ")
    _no_machine_text(result)


def test_a_check_whose_premise_never_came_says_why(run: Recorded) -> None:
    step = _expect(run, "log")
    step.given = {"link": "mbx1->mbx2", "direction": "c2s", "line": "^XSHADOW"}
    result = asyncio.run(run_check(run, step))
    assert result.status == Status.NOT_APPLICABLE
    assert result.expected == "only applies if mbx1 sent XSHADOW to mbx2"
    assert result.observed == (
        "mbx1 never sent XSHADOW to mbx2: mbx1 never opened an SMTP session to mbx2, so there "
        "was nothing to check"
    )


def _fate(ref: str, fate: str) -> Fate:
    return Fate(ref, f"<{ref}.2dee0c8e@shadowcheck.test>", "mbx1", fate, 1.0, 2.0)


def test_a_workload_loss_says_the_count_and_each_message_once() -> None:
    fates = {f"w-{n:05}": _fate(f"w-{n:05}", "lost" if n < 3 else "delivered") for n in range(8)}
    counts = Counter(f.fate for f in fates.values())
    report = WorkloadReport("w", 7, fates, counts, Counter(), {}, {}, 1.0, 0, [], 0)
    fates["w-00007"].copied_to = {"mbx2"}  # a shadow copy was made
    loss, dup, settled = results(report, ["PR-2"], "here.yaml:3")
    assert loss.observed.startswith(
        "3 of 8 acknowledged messages lost (never delivered, in no queue): w-00000, w-00001, "
        "w-00002 (sent through mbx1, no copy seen on another node) (Message-IDs "
        "<REF.2dee0c8e@shadowcheck.test>). Figures: 8 attempted, 8 acknowledged; fates: "
        "5 delivered, 3 lost;"
    ), loss.observed
    assert dup.observed.startswith("0 of 8 acknowledged messages delivered more than once")
    assert "0 unexplained" in dup.observed
    assert settled.observed == "all 8 acknowledged messages delivered; seed 7"


@pytest.mark.parametrize(
    "value",
    [
        ["alice@corp.test", "bob@corp.test"],
        {"MaxMessageSize": 1000, "Retry": [0.5, 2.0], "On": True, "Off": None},
        ["it's", 'say "hi"', "back\\slash", "tab\there", "é ✓", "\x01", -3, 1e-05],
        [[], {}, (1, "two"), ()],
    ],
)
def test_a_label_s_literal_reads_as_python_reads_it(value: Any) -> None:
    # the lanes' threads write step labels at once; Python's own reader of literals
    # (ast) fails under threads on 3.11 (gh-106905), so the harness reads them itself
    import ast

    text = repr(value)
    assert _literal(text) == ast.literal_eval(text)


def test_what_is_not_a_literal_stays_as_written() -> None:
    assert plain_text("a [not a literal] b {x} c [1, 2") == "a [not a literal] b {x} c [1, 2"
    assert plain_text("to=['a@corp.test'] set={'On': True}") == "to=a@corp.test set=(On=true)"
    # a key that cannot be one (a list), and nesting deeper than any label's
    assert plain_text("x {[1]: 2} y") == "x {[1]: 2} y"
    deep = "[" + "(" * 3000 + ")" * 3000 + "]"
    assert plain_text(deep) == deep
    for bad in ("[1,", "[1 2]", "{'a'}", "[x]", "[1]]", "{'a': }"):
        with pytest.raises((ValueError, KeyError, IndexError)):
            _literal(bad)
