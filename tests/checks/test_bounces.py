"""The bounce invariant on real sinks: reports in the shapes MTAs send them (RFC 3464 with
the returned message or its headers, the reference's, a plain-text bounce) delivered
over SMTP to the senders' sink, judged against what the mailbox sink received."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from pytest_shadowcheck.checks.bounces import bounce_invariant, reports
from pytest_shadowcheck.errors import SourceRef
from pytest_shadowcheck.history import History
from pytest_shadowcheck.network.messages import Message
from pytest_shadowcheck.network.sink import MailSink
from pytest_shadowcheck.scenario.loader import with_senders_sink
from pytest_shadowcheck.scenario.model import NextHop, NodeSpec, Scenario, Topology
from pytest_shadowcheck.verdict import CheckResult, Status

TRACE = "m1.5f3a9c"
SENT = (
    "From: sender@ext.test\r\nTo: alice@corp.test, bob@corp.test\r\n"
    f"Message-ID: <m1@shadowcheck.test>\r\nX-Shadowcheck-Trace: {TRACE}\r\n"
    "Subject: hi\r\n\r\nHello.\r\n"
).encode()


def rfc3464(failed: list[str], returned: str, action: str = "failed") -> bytes:
    groups = "".join(
        f"\r\nFinal-Recipient: rfc822; {r}\r\nAction: {action}\r\nStatus: 5.1.1\r\n" for r in failed
    )
    part = (
        "Content-Type: message/rfc822\r\n\r\n" + SENT.decode()
        if returned == "message"
        else "Content-Type: text/rfc822-headers\r\n\r\n"
        + SENT.decode().split("\r\n\r\n")[0].replace(f"X-Shadowcheck-Trace: {TRACE}\r\n", "")
        + "\r\n"
    )
    return (
        "From: MAILER-DAEMON@mbx1\r\nTo: sender@ext.test\r\nMessage-ID: <dsn1@mbx1>\r\n"
        "MIME-Version: 1.0\r\n"
        'Content-Type: multipart/report; report-type=delivery-status; boundary="b"\r\n\r\n'
        "--b\r\nContent-Type: text/plain\r\n\r\nYour message could not be delivered.\r\n"
        "--b\r\nContent-Type: message/delivery-status\r\n\r\nReporting-MTA: dns; mbx1\r\n"
        f"{groups}\r\n--b\r\n{part}\r\n--b--\r\n"
    ).encode()


PLAIN_BOUNCE = (
    "From: Mail Delivery System <Mailer-Daemon@mbx1>\r\nTo: sender@ext.test\r\n"
    "Message-ID: <bounce2@mbx1>\r\nSubject: Mail delivery failed\r\n\r\n"
    "A message that you sent could not be delivered to one or more of its\r\n"
    "recipients. This is a permanent error. The following address(es) failed:\r\n\r\n"
    "  alice@corp.test\r\n    host mailbox said: 550 5.1.1 no such user\r\n\r\n"
    "------ This is a copy of the message, including all the headers. ------\r\n" + SENT.decode()
).encode()


@dataclass
class View:
    """What the invariant reads of a run: real sinks, the scenario, the message sent."""

    scenario: Scenario
    history: History
    sinks: dict[str, MailSink]
    messages: dict[str, Message] = field(default_factory=dict)

    def excerpt(self, around: float, links: list[str], before: float = 3, after: float = 2) -> str:
        return self.history.excerpt(around, links, before, after)


async def deliver(sink: MailSink, sender: str, rcpts: list[str], content: bytes) -> None:
    reader, writer = await asyncio.open_connection(*sink.address)
    lines = ["EHLO mbx1", f"MAIL FROM:<{sender}>", *[f"RCPT TO:<{r}>" for r in rcpts], "DATA"]
    await reader.readline()
    for line in lines:
        writer.write(line.encode() + b"\r\n")
        while (await reader.readline())[3:4] == b"-":
            pass
    writer.write(content + b".\r\n")
    await reader.readline()
    writer.close()


def judge(*bounces: tuple[str, bytes], delivered: list[str]) -> tuple[View, list[CheckResult]]:
    history = History()
    topology = with_senders_sink(
        Topology(
            "t",
            {"mbx1": NodeSpec("mbx1")},
            next_hops={"corp.test": NextHop("corp.test", "mailbox")},
        ),
        ["ext.test"],
    )
    scenario = Scenario(
        "s", "s", ["CR-10"], [], topology, {}, [], [], 60, 1, SourceRef(Path("s.yaml"), 1)
    )

    async def go() -> View:
        sinks = {n: MailSink(n, history) for n in topology.sinks()}
        for sink in sinks.values():
            await sink.start()
        if delivered:
            await deliver(sinks["mailbox"], "sender@ext.test", delivered, SENT)
        for sender, content in bounces:
            await deliver(sinks["senders"], sender, ["sender@ext.test"], content)
        for sink in sinks.values():
            await sink.stop()
        return View(scenario, history, sinks)

    view = asyncio.run(go())
    view.messages["m1"] = Message(
        "m1",
        "<m1@shadowcheck.test>",
        "mbx1",
        0.0,
        ["mbx1"],
        content=SENT,
        mail_from="sender@ext.test",
        rcpt_to=["alice@corp.test", "bob@corp.test"],
    )
    return view, bounce_invariant(view)  # type: ignore[arg-type]


def test_a_report_about_a_refused_recipient_passes_and_names_it() -> None:
    view, results = judge(
        ("", rfc3464(["bob@corp.test"], "message")), delivered=["alice@corp.test"]
    )
    (report,) = reports(view)  # type: ignore[arg-type]
    assert (report.about, report.failed, report.found_by) == ("m1", ["bob@corp.test"], "trace")
    assert [r.status for r in results] == [Status.PASS]


def test_a_report_naming_a_delivered_recipient_fails_in_plain_words() -> None:
    _, results = judge(
        ("", rfc3464(["alice@corp.test", "bob@corp.test"], "message")),
        delivered=["alice@corp.test"],
    )
    (result,) = results
    assert result.status == Status.FAIL and result.behaviours == []
    assert "a delivered message produces no failure report" in result.observed
    assert "naming alice@corp.test, bob@corp.test" in result.observed
    assert "yet alice@corp.test got it at +" in result.observed
    assert "(mbx1 delivered it to mailbox)" in result.observed


def test_returned_headers_without_trace_fall_back_to_the_message_id() -> None:
    view, results = judge(
        ("", rfc3464(["alice@corp.test"], "headers")), delivered=["alice@corp.test"]
    )
    (report,) = reports(view)  # type: ignore[arg-type]
    assert report.found_by == "Message-ID"
    assert [r.status for r in results] == [Status.FAIL]


def test_a_delay_warning_is_no_failure_report() -> None:
    _, results = judge(
        ("", rfc3464(["alice@corp.test"], "message", action="delayed")),
        delivered=["alice@corp.test"],
    )
    assert [r.status for r in results] == [Status.PASS]


def test_a_plain_text_bounce_is_judged_by_the_recipients_it_names() -> None:
    view, results = judge(("", PLAIN_BOUNCE), delivered=["alice@corp.test", "bob@corp.test"])
    (report,) = reports(view)  # type: ignore[arg-type]
    # bob is only in the returned copy's To:, not among the failed addresses
    assert report.failed == ["alice@corp.test"]
    assert [r.status for r in results] == [Status.FAIL]


def test_mail_from_a_person_at_the_senders_sink_is_no_report() -> None:
    _, results = judge(("someone@ext.test", SENT.replace(b"m1@", b"other@")), delivered=[])
    assert results == []
