"""Check options, on the reference target (one real node, a real sink):
``delivered.headers`` (regexes over the header lines of the delivered copies),
``delivered.count`` (exactly N copies), ``lines.within`` (wait for the ``contains``
line before judging) and ``lines.unique`` (no two matching lines alike)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

SCENARIOS = """\
defaults:
  topology: single-node
  settings: {RejectMessageOnShadowFailure: false}
scenarios:
  - name: stamp_present
    behaviours: [SN-11]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      # no wait for the delivery: within must wait for the sink's reply to DATA
      - check: {lines: {link: mbx1->mailbox, direction: s2c, contains: "queued as delivered",
                        within: 10s}}
    expect:
      - delivered: {message: m1, by: mbx1, within: 0s,
                    headers: {contains: "^X-Categorized-By: mbx1;", absent: "^X-Never:"}}
  - name: stamp_forbidden
    behaviours: [SN-11]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - check: {lines: {link: mbx1->mailbox, contains: "^NEVER SENT", within: 300ms}}
    expect:
      - delivered: {message: m1, within: 10s, headers: {absent: "^X-Categorized-By: mbx1"}}
  - name: count_exact
    behaviours: [SN-11]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
    expect:
      - delivered: {message: m1, within: 10s, count: 1}
  - name: count_too_few
    behaviours: [SN-11]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - wait: {delivered: m1, timeout: 10s}
    expect:
      # waits the whole 500 ms for a second copy that never comes
      - delivered: {message: m1, within: 500ms, count: 2}
  - name: recipients_unique
    behaviours: [DI-3]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - send: {id: m2, via: mbx1, to: [bob@corp.test]}
    expect:
      - lines: {link: client->mbx1, direction: c2s, contains: "^RCPT TO:", unique: true}
  - name: greetings_repeat
    behaviours: [DI-3]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - send: {id: m2, via: mbx1, to: [bob@corp.test]}
    expect:
      - lines: {link: client->mbx1, direction: c2s, contains: "^EHLO ", unique: true}
"""


def test_headers_and_lines_within(pytester: pytest.Pytester) -> None:
    path = pytester.path / "library" / "checks.yaml"
    path.parent.mkdir()
    path.write_text(SCENARIOS, encoding="utf-8")
    result = pytester.runpytest_subprocess(
        "--shadowcheck", "-p", "no:randomly", "-p", "no:cacheprovider", "library", timeout=120
    )
    result.assert_outcomes(passed=3, failed=3)
    out = result.stdout.str()
    result.stdout.fnmatch_lines(
        [
            "*[[]FAIL[]] lines on mbx1->mailbox*",
            "*expected: mbx1 sent `NEVER SENT` to mailbox (waiting up to 0.3s)",
            "*observed: mbx1 never sent `NEVER SENT` to mailbox: mbx1 opened 1 SMTP session to"
            " mailbox, in which * lines passed",
            "*[[]FAIL[]] delivered m1*",
            "*expected: m1 delivered within 10s, exactly once, every copy with no header line"
            " starting `X-Categorized-By: mbx1`",
            "*observed: delivered once: mbx1 delivered it to mailbox for alice@corp.test at *;"
            " the copy mbx1 delivered to mailbox at * has `X-Categorized-By: mbx1; *`",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*count_too_few*",
            "*expected: m1 delivered within 0.5s, exactly twice",
            "*observed: delivered once: mbx1 delivered it to mailbox for alice@corp.test at +*s",
        ]
    )
    result.stdout.fnmatch_lines(
        [
            "*[[]FAIL[]] lines on client->mbx1*",
            "*expected: the sender sent EHLO to mbx1, and each such line only once",
            "*observed: the sender sent `EHLO *` to mbx1 (+*s); the same line again at +*s"
            " (first at +*s): the sender sent `EHLO *` to mbx1",
        ]
    )
    assert "Traceback" not in out
