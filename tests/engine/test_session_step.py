"""The ``session`` step: a raw SMTP session the harness holds with a node.

Run through the ``external`` target against a plain SMTP server (a MailSink on
its own thread), which refuses the shadow verbs as unknown commands, so both a
passing and a failing reply check can be seen on a real socket.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from harnesskit import ThreadedSink

STRANGER = """\
scenarios:
  - name: stranger_session
    title: a stranger's XQDISCARD is refused; its message is accepted
    behaviours: [XS-3]
    topology:
      nodes: {mbx1: {}}
    steps:
      - session:
          via: mbx1
          say:
            - "EHLO stranger.example"
            - {send: "XQDISCARD", reply: "^5\\\\d\\\\d"}
            - {send: "MAIL FROM:<s@ext.test>", reply: "^250"}
            - "RCPT TO:<alice@corp.test>"
            - {send: "DATA", reply: "^354"}
            - {message: s1, reply: "^250"}
            - QUIT
    expect:
      - reply: {message: s1, code: 250}
      - lines: {link: client->mbx1, direction: c2s, contains: "^XQDISCARD"}
      - lines: {link: client->mbx1, direction: s2c, contains: "^500 "}
"""

WRONG = """\
scenarios:
  - name: expects_xqdiscard_accepted
    title: wrongly expects the server to answer XQDISCARD with 250
    behaviours: [XS-3]
    topology:
      nodes: {mbx1: {}}
    steps:
      - session:
          via: mbx1
          say:
            - "EHLO stranger.example"
            - {send: "XQDISCARD", reply: "^250"}
"""

DUPLICATE = """\
scenarios:
  - name: duplicate_id
    behaviours: [XS-3]
    topology:
      nodes: {mbx1: {}}
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - session:
          via: mbx1
          say:
            - {message: m1}
"""


def _run(pytester: pytest.Pytester, text: str, sink: ThreadedSink) -> pytest.RunResult:
    path = pytester.path / "library" / "s.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return pytester.runpytest(
        "--shadowcheck", f"--shadowcheck-target=external:mbx1={sink.address}", "library"
    )


def test_session_sends_exact_lines_and_registers_its_message(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    result = _run(pytester, STRANGER, plain_smtp)
    result.assert_outcomes(passed=1)
    (delivery,) = plain_smtp.sink.deliveries
    assert delivery.helo == "stranger.example"
    assert delivery.message_id is not None and delivery.message_id.startswith("<s1.")


def test_a_reply_that_does_not_match_fails_with_the_item_line(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    result = _run(pytester, WRONG, plain_smtp)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*[[]FAIL[]] session reply to XQDISCARD  (*s.yaml:12)",
            "*expected: mbx1 answers XQDISCARD with 250",
            '*observed: mbx1 answered `500 Error: command "XQDISCARD" not recognized`',
            "*STEP session via=mbx1: EHLO stranger.example / XQDISCARD*",
            "*client->mbx1 #1 C: XQDISCARD",
        ]
    )


def test_a_session_message_id_must_be_new(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    result = _run(pytester, DUPLICATE, plain_smtp)
    assert "duplicate message id 'm1'" in result.stdout.str() + result.stderr.str()
    assert "Traceback" not in result.stdout.str()
    assert Path(pytester.path / "library" / "s.yaml").exists()
