"""The ``sink`` step's per-recipient, per-stage scripting as the loader builds it: typed
rules in order, ``reply:`` unchanged, and each mistake one error at its file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_shadowcheck.scenario.steps import SinkRule, SinkSpec

from .test_steps import FIRST, load, load_error


def test_rules_per_stage_and_recipient(tmp_path: Path) -> None:
    (step,) = load(
        tmp_path,
        """\
      - sink:
          name: mailbox
          mail: {reply: "421 4.3.2 busy", times: 2}
          rcpt:
            bob@corp.test: "550 5.1.1 no such user"
            "*@slow.test": {reply: "450 4.2.1 later", times: 1, delay: 500ms}
          data: {reply: accept, delay: ShadowHeartbeatFrequency}
""",
    )
    assert step.arg == SinkSpec(
        name="mailbox",
        rules=(
            SinkRule(stage="MAIL", reply="421 4.3.2 busy", times=2),
            SinkRule(stage="RCPT", reply="550 5.1.1 no such user", match="bob@corp.test"),
            SinkRule(
                stage="RCPT", reply="450 4.2.1 later", match="*@slow.test", times=1, delay=0.5
            ),
            SinkRule(stage="DATA", reply="accept", delay=5.0),
        ),
    )
    assert step.arg.describe() == (
        "name=mailbox mail=421 4.3.2 busy x2 rcpt bob@corp.test=550 5.1.1 no such user "
        "rcpt *@slow.test=450 4.2.1 later x1 after 500ms data=accept after 5s"
    )


def test_reply_stays_as_it_was_and_close_after_dot_counts(tmp_path: Path) -> None:
    first, second = load(
        tmp_path,
        """\
      - sink: {name: mailbox, reply: "451 4.3.0 busy"}
      - sink: {name: mailbox, close_after_dot: 2, rcpt: {a@corp.test: hang}}
""",
    )
    assert first.arg == SinkSpec(name="mailbox", reply="451 4.3.0 busy")
    assert first.arg.describe() == "name=mailbox reply=451 4.3.0 busy"
    assert second.arg.rules == (
        SinkRule(stage="RCPT", reply="hang", match="a@corp.test"),
        SinkRule(stage="DATA", reply="close", times=2),
    )


@pytest.mark.parametrize(
    ("step", "line", "message"),
    [
        ("sink: {name: mailbox}", 0, "a sink step that scripts nothing"),
        ('sink: {name: mailbox, rcpt: {bob@corp.test: "250 ok"}}', 0,
         "RCPT answer '250 ok' is neither a refusal"),
        ("sink: {name: mailbox, rcpt: {bob: \"550 5.1.1 no\"}}", 0,
         "rcpt key 'bob' is not an address"),
        ('sink:\n          name: mailbox\n          reply: accept\n'
         '          data: "451 4.3.0 x"', 3,
         "reply and data both say"),
        ("sink: {name: mailbox, reply: later}", 0, "sink reply 'later' is not an SMTP reply"),
        ("sink: {name: mailbox, mail: {reply: \"451 4.3.0 x\", times: 0}}", 0, "times"),
        ("sink: {name: mailbox, data: {reply: \"451 4.3.0 x\", delay: 2 parsecs}}", 0,
         "bad duration"),
        ("sink: {name: mailbox, rcpt: {a@corp.test: {reply: hang, when: now}}}", 0,
         "unknown key 'when'"),
    ],
)  # fmt: skip
def test_a_bad_sink_step_is_one_error_at_its_line(
    tmp_path: Path, step: str, line: int, message: str
) -> None:
    error = load_error(tmp_path, f"      - {step}\n")
    assert error.where is not None and error.where.line == FIRST + line
    assert message in error.message, error.message


def test_a_recipient_with_two_fates_is_one_error_at_its_line(tmp_path: Path) -> None:
    error = load_error(
        tmp_path,
        """\
      - send: {id: m1, via: mbx1, to: [a@corp.test, b@corp.test]}
      - check:
          fates:
            message: m1
            delivered: [a@corp.test]
            bounced: [b@corp.test, A@corp.test]
""",
    )
    assert error.where is not None and error.where.line == FIRST + 5
    assert "A@corp.test is given two fates: delivered and bounced" in error.message
