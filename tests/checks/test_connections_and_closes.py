"""The ``connections`` check, the ``closed`` event matcher and a lingering ``session``.

Run through the ``external`` target against a plain SMTP server (a MailSink on
its own thread): real sockets, real proxies, so both passing and failing
verdicts are seen as a user would see them.
"""

from __future__ import annotations

import pytest
from harnesskit import ThreadedSink

COUNTS = """\
scenarios:
  - name: counts_connections
    title: two sends are two connections; one of them carried m1
    behaviours: [CR-7]
    topology:
      nodes: {mbx1: {}}
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - send: {id: m2, via: mbx1, to: [alice@corp.test]}
    expect:
      - connections: {link: client->mbx1, count: 2}
      - connections: {link: client->mbx1, message: m1, count: 1}
      - connections: {link: client->mbx1, from: {step: "^send id=m2 "}, count: 1}
      - connections: {link: client->mbx1, to: {reply: m1}, at_most: 1, at_least: 1}
      - order:
          first: {link: client->mbx1, closed: any, message: m1}
          then: {reply: m2}
"""

WRONG_COUNT = """\
scenarios:
  - name: expects_three_connections
    title: wrongly expects three connections
    behaviours: [CR-7]
    topology:
      nodes: {mbx1: {}}
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - send: {id: m2, via: mbx1, to: [alice@corp.test]}
    expect:
      - connections: {link: client->mbx1, count: 3}
"""

LINGER = """\
scenarios:
  - name: lingering_sessions
    title: QUIT makes the server close at once; a keepalive session is never closed
    behaviours: [TO-1]
    topology:
      nodes: {mbx1: {}}
    steps:
      - session: {via: mbx1, say: ["EHLO client.test", "QUIT"], idle: 3s}
      - session: {via: mbx1, say: ["EHLO client.test"], idle: 1s, keepalive: 200ms}
    expect:
      - timing:
          from: {link: client->mbx1, direction: c2s, line: "^QUIT"}
          to: {link: client->mbx1, closed: server}
          at_most: 0.5s
      - lines: {link: client->mbx1, direction: c2s, contains: "^NOOP"}
"""

NEVER_CLOSED = """\
scenarios:
  - name: idle_but_never_closed
    title: wrongly expects the server to close an idle session
    behaviours: [TO-1]
    topology:
      nodes: {mbx1: {}}
    steps:
      - session: {via: mbx1, say: ["EHLO client.test"], idle: 500ms}
    expect:
      - order:
          first: {link: client->mbx1, direction: s2c, line: "^250 "}
          then: {link: client->mbx1, closed: server}
"""

UNKNOWN_COUNT = """\
scenarios:
  - name: bad_count
    behaviours: [CR-7]
    topology:
      nodes: {mbx1: {}}
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
    expect:
      - connections: {link: client->mbx1, count: MaxRetriesForRemoteSiteShadow}
"""

CLOSED_WITH_LINE = """\
scenarios:
  - name: closed_and_line
    behaviours: [TO-1]
    topology:
      nodes: {mbx1: {}}
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
    expect:
      - order:
          first: {link: client->mbx1, closed: any, line: "^221"}
          then: {reply: m1}
"""


def _run(pytester: pytest.Pytester, text: str, sink: ThreadedSink) -> pytest.RunResult:
    path = pytester.path / "library" / "s.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return pytester.runpytest(
        "--shadowcheck", f"--shadowcheck-target=external:mbx1={sink.address}", "library"
    )


def test_connections_are_counted_by_link_message_and_window(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    _run(pytester, COUNTS, plain_smtp).assert_outcomes(passed=1)


def test_a_wrong_count_fails_and_lists_the_connections(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    result = _run(pytester, WRONG_COUNT, plain_smtp)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*[[]FAIL[]] connections on client->mbx1  (*s.yaml:11)",
            "*expected: the sender opened exactly 3 SMTP session(s) to mbx1",
            "*observed: 2 opened: #1 at +*s, #2 at +*s",
        ]
    )


def test_a_session_lingers_for_the_server_close_or_keeps_busy(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    _run(pytester, LINGER, plain_smtp).assert_outcomes(passed=1)


def test_a_close_that_never_came_fails(pytester: pytest.Pytester, plain_smtp: ThreadedSink) -> None:
    result = _run(pytester, NEVER_CLOSED, plain_smtp)
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(
        [
            "*expected: mbx1 answered the sender with 250 before mbx1 closed the sender's session",
            "*observed: mbx1 answered the sender `250 *` (+*s), but mbx1 never closed the sender's"
            " session: the sender opened 1 SMTP session to mbx1, in which * lines passed"
            " (checked at +*s)",
        ]
    )


@pytest.mark.parametrize(
    ("text", "message"),
    [
        (UNKNOWN_COUNT, "s.yaml:9: 'MaxRetriesForRemoteSiteShadow' is not a whole-number setting"),
        (CLOSED_WITH_LINE, "s.yaml:10: 'closed' matches the close of a connection on a link"),
    ],
)
def test_bad_counts_and_close_matchers_are_reported_at_their_line(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink, text: str, message: str
) -> None:
    result = _run(pytester, text, plain_smtp)
    output = result.stdout.str() + result.stderr.str()
    assert message in output
    assert "Traceback" not in output
