from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from email.message import EmailMessage
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP as AiosmtpdServer

from pytest_shadowcheck.history import History
from pytest_shadowcheck.network.client import RecordingClient, make_message, new_message_id
from pytest_shadowcheck.network.proxy import FaultProxy
from pytest_shadowcheck.network.sink import MailSink
from pytest_shadowcheck.network.smtp_text import message_id_from_bytes, parse_enhanced_code

Run = Callable[..., Any]
LINK = "client->mbx1"
ALICE = ["alice@corp.test"]


@asynccontextmanager
async def sink_behind_proxy(history: History) -> AsyncIterator[tuple[MailSink, FaultProxy]]:
    """A sink with a proxy in front: client -> proxy -> sink, as in a scenario."""
    sink = MailSink("corp.test", history)
    proxy = FaultProxy(LINK, history)
    await proxy.start()
    proxy.set_upstream(*await sink.start())
    try:
        yield sink, proxy
    finally:
        await proxy.stop()
        await sink.stop()


def test_send_through_proxy_records_every_reply(run: Run, history: History) -> None:
    client = RecordingClient(history, LINK)
    message = make_message(subject="hello")
    message_id = message_id_from_bytes(message)

    async def scenario() -> None:
        async with sink_behind_proxy(history) as (sink, proxy):
            result = await client.send(*proxy.address, "sender@ext.test", ALICE, message,
                                       helo="client.test")
            assert result.accepted, result
            assert result.error is None
            assert result.code == 250 and result.enhanced == "2.6.0"
            assert result.deciding_reply is result.replies[5]
            assert result.replies[5].command == "EOD" and result.replies[6].command == "QUIT"
            assert result.message_id == message_id
            assert [r.command for r in result.replies] == [
                "CONNECT", "EHLO", "MAIL", "RCPT", "DATA", "EOD", "QUIT",
            ]
            assert [r.code for r in result.replies] == [220, 250, 250, 250, 354, 250, 221]
            (delivery,) = sink.deliveries_for(message_id or "")
            assert delivery.helo == "client.test"
            assert delivery.raw == message

    run(scenario())
    replies = history.events(kind="reply", link=LINK)
    assert [e.data["command"] for e in replies][:6] == [
        "CONNECT", "EHLO", "MAIL", "RCPT", "DATA", "EOD",
    ]
    assert all(e.conn == 1 and e.direction == "s2c" for e in replies)
    (data,) = history.events(kind="data", link=LINK)
    assert data.data["message_id"] == message_id and data.data["size"] == len(message)


def test_client_events_carry_the_proxys_connection_number(run: Run, history: History) -> None:
    # Two clients share the link, as a scenario's sends and sessions do: each
    # client's replies must be numbered as the proxy numbered the session, or the
    # history shows one session's reply under another's connection.
    async def scenario() -> None:
        async with sink_behind_proxy(history) as (_sink, proxy):
            for _ in range(2):
                client = RecordingClient(history, LINK, numbering=proxy.connection_number)
                result = await client.send(*proxy.address, "s@ext.test", ALICE, make_message())
                assert result.accepted, result
            raw = RecordingClient(history, LINK, numbering=proxy.connection_number)
            await raw.raw_session(*proxy.address, [b"NOOP\r\n", b"QUIT\r\n"])

    run(scenario())
    opened = [e.conn for e in history.events(kind="connect", link=LINK)]
    assert opened == [1, 2, 3]
    for conn in opened:
        replies = [e for e in history.events(kind="reply", link=LINK) if e.conn == conn]
        assert replies and replies[0].data["command"] == "CONNECT", conn


def test_email_message_objects_are_accepted(run: Run, history: History) -> None:
    client = RecordingClient(history, LINK)
    message = EmailMessage()
    message["From"], message["To"], message["Subject"] = "a@ext.test", "alice@corp.test", "x"
    message["Message-ID"] = "<obj@ext.test>"
    message.set_content("hello\n.leading dot survives\n")

    async def scenario() -> None:
        async with sink_behind_proxy(history) as (sink, proxy):
            result = await client.send(*proxy.address, "a@ext.test", ALICE, message)
            assert result.accepted and result.message_id == "<obj@ext.test>"
            assert b"\r\n.leading dot survives\r\n" in sink.deliveries[0].raw

    run(scenario())


def test_temporary_failure_after_data_is_a_result(run: Run, history: History) -> None:
    client = RecordingClient(history, LINK)

    async def scenario() -> None:
        async with sink_behind_proxy(history) as (sink, proxy):
            sink.script("DATA", "451 4.4.0 Message failed to be made redundant", times=1)
            result = await client.send(*proxy.address, "a@ext.test", ALICE, make_message())
            assert not result.accepted and result.error is None
            assert (result.code, result.enhanced) == (451, "4.4.0")
            assert result.text == "4.4.0 Message failed to be made redundant"
            assert result.temporary_failure and not result.permanent_failure
            assert result.last_command == "EOD"
            assert sink.deliveries == []

    run(scenario())
    (eod,) = [e for e in history.events(kind="reply") if e.data["command"] == "EOD"]
    assert eod.data["code"] == 451 and eod.data["enhanced"] == "4.4.0"


def test_refused_recipients(run: Run, history: History) -> None:
    client = RecordingClient(history, LINK)

    async def scenario() -> None:
        async with sink_behind_proxy(history) as (sink, proxy):
            sink.script("RCPT", "550 5.1.1 No such user", times=1)
            partly = await client.send(*proxy.address, "a@ext.test",
                                       ["ghost@corp.test", "alice@corp.test"], make_message())
            assert partly.accepted
            assert partly.refused_recipients == ["ghost@corp.test"]
            assert sink.deliveries[0].rcpt_tos == ["alice@corp.test"]
            sink.script("RCPT", "550 5.1.1 No such user")
            refused = await client.send(*proxy.address, "a@ext.test", ["x@corp.test"],
                                        make_message())
            assert not refused.accepted and refused.permanent_failure
            assert refused.last_command == "RCPT" and refused.code == 550
            sink.clear_script()
            sink.script("MAIL", "421 4.3.2 Shutting down")
            mail = await client.send(*proxy.address, "a@ext.test", ALICE, make_message())
            assert not mail.accepted and mail.code == 421 and mail.last_command == "MAIL"

    run(scenario())


def test_refused_connection_is_a_result(run: Run, history: History) -> None:
    client = RecordingClient(history, LINK)

    async def scenario() -> None:
        async with sink_behind_proxy(history) as (_, proxy):
            proxy.cut()
            result = await client.send(*proxy.address, "a@ext.test", ALICE, make_message(),
                                       timeout=5)
            assert not result.accepted
            assert result.code is None and result.error is not None
            assert result.last_command == "CONNECT"
        closed = await client.send("127.0.0.1", proxy.address[1], "a@ext.test", ALICE,
                                   make_message(), timeout=5)
        assert not closed.accepted and closed.error is not None

    run(scenario())
    client_closes = [e for e in history.events(kind="close") if e.data.get("side") == "client"]
    assert len(client_closes) == 2


def test_timeouts_are_results(run: Run, history: History) -> None:
    client = RecordingClient(history, LINK)

    async def scenario() -> None:
        async with sink_behind_proxy(history) as (sink, proxy):
            sink.script("DATA", "hang")
            hung = await client.send(*proxy.address, "a@ext.test", ALICE, make_message(),
                                     timeout=0.5)
            assert not hung.accepted
            assert hung.error is not None and "timeout" in hung.error
            assert hung.last_command == "EOD"
            assert [r.code for r in hung.replies] == [220, 250, 250, 250, 354]
            sink.clear_script()
            proxy.blackhole()
            silent = await client.send(*proxy.address, "a@ext.test", ALICE, make_message(),
                                       timeout=0.3)
            assert not silent.accepted and silent.last_command == "CONNECT"
            assert silent.error is not None and "timeout" in silent.error.lower()
            proxy.heal()

    run(scenario())


def test_disconnect_mid_transaction_is_a_result(run: Run, history: History) -> None:
    client = RecordingClient(history, LINK)

    async def scenario() -> None:
        async with sink_behind_proxy(history) as (sink, proxy):
            sink.script("DATA", "hang")
            task = asyncio.create_task(
                client.send(*proxy.address, "a@ext.test", ALICE, make_message(), timeout=10)
            )
            assert await sink_notes(history)
            proxy.reset()
            result = await task
            assert not result.accepted
            assert result.error is not None and result.error.startswith("connection lost at EOD")

    run(scenario())


async def sink_notes(history: History) -> bool:
    for _ in range(500):
        if history.events(kind="note"):
            return True
        await asyncio.sleep(0.01)
    return False


def test_make_message() -> None:
    first, second = make_message(), make_message()
    assert message_id_from_bytes(first) != message_id_from_bytes(second)
    assert b"\r\n\r\n" in first and b"\n" not in first.replace(b"\r\n", b"")
    fixed = make_message("<fixed@x>", subject="s", body="a\nb", headers={"X-Test": "1"})
    assert message_id_from_bytes(fixed) == "<fixed@x>"
    assert b"X-Test: 1\r\n" in fixed and fixed.endswith(b"\r\n\r\na\r\nb\r\n")
    big = make_message(size=100_000)
    assert 100_000 <= len(big) < 100_100 and big.endswith(b"\r\n")
    assert new_message_id().startswith("<") and new_message_id() != new_message_id()
    assert parse_enhanced_code("4.4.0 Message failed") == "4.4.0"
    assert parse_enhanced_code("451 4.4.0 Message failed") == "4.4.0"
    assert parse_enhanced_code("Try later") is None


def test_raw_session_sends_exact_bytes(run: Run, history: History) -> None:
    client = RecordingClient(history, LINK)

    async def scenario() -> None:
        async with sink_behind_proxy(history) as (_, proxy):
            replies = await client.raw_session(
                *proxy.address,
                [b"EHLO abuser.test\r\n", b"XSHADOW mbx9\r\n", b"XQDISCARD 100\r\n",
                 b"DATA\r\n", b"QUIT\r\n", b"NOOP\r\n"],
                read_timeout=2,
            )
            assert [r.code for r in replies[:6]] == [220, 250, 500, 500, 503, 221]
            assert replies[1].sent == b"EHLO abuser.test\r\n"
            assert not any("XSHADOW" in line for line in replies[1].lines)
            assert replies[-1].outcome == "closed"
            proxy.cut()
            refused = await client.raw_session(*proxy.address, [b"EHLO x\r\n"], read_timeout=2)
            assert [r.outcome for r in refused] == ["closed"]

    run(scenario())
    commands = [e.data["command"] for e in history.events(kind="reply")]
    assert commands[:4] == ["CONNECT", "EHLO", "XSHADOW", "XQDISCARD"]
    texts = [line.data["text"] for line in history.events(kind="line", link=LINK)]
    at = texts.index("XSHADOW mbx9")
    assert texts[at + 1].startswith("500 ") and "XSHADOW" in texts[at + 1]


def test_raw_session_timeout_outcome(run: Run, history: History) -> None:
    client = RecordingClient(history, LINK)

    async def scenario() -> None:
        async with sink_behind_proxy(history) as (_, proxy):
            replies = await client.raw_session(*proxy.address, [b"EHLO x"], read_timeout=0.3)
            assert replies[-1].outcome == "timeout" and replies[-1].code is None

    run(scenario())


@pytest.mark.parametrize("how", ["close", "reset"])
def test_vanish_mid_data_leaves_an_incomplete_message(run: Run, how: str) -> None:
    history = History()
    client = RecordingClient(history, LINK)
    message = make_message(size=5000)

    async def scenario() -> None:
        async with sink_behind_proxy(history) as (sink, proxy):
            result = await client.vanish_mid_data(
                *proxy.address, "a@ext.test", ALICE, message, send_bytes=1000, how=how
            )
            assert result.reached_data and result.sent_bytes == 1000
            assert [r.code for r in result.replies] == [220, 250, 250, 250, 354]
            assert await proxy_closed(history)
            await asyncio.sleep(0.2)
            assert sink.deliveries == []

    run(scenario())
    (data,) = history.events(kind="data", link=LINK)
    assert data.data["complete"] is False and data.data["size"] == 1000
    reasons = [e.data["reason"] for e in history.events(kind="close") if e.data.get("side")]
    assert reasons == [f"client vanished mid-DATA after 1000 bytes ({how})"]


async def proxy_closed(history: History) -> bool:
    for _ in range(500):
        if [e for e in history.events(kind="close") if "side" not in e.data]:
            return True
        await asyncio.sleep(0.01)
    return False


def test_vanish_stops_when_refused_before_data(run: Run, history: History) -> None:
    client = RecordingClient(history, LINK)

    async def scenario() -> None:
        async with sink_behind_proxy(history) as (sink, proxy):
            sink.script("RCPT", "550 5.1.1 No such user")
            result = await client.vanish_mid_data(*proxy.address, "a@ext.test", ALICE,
                                                  make_message())
            assert not result.reached_data and result.sent_bytes == 0
            assert result.replies[-1].code == 550

    run(scenario())


@asynccontextmanager
async def impatient_server(idle_timeout: float) -> AsyncIterator[tuple[str, int]]:
    """A tiny aiosmtpd server that drops idle sessions after ``idle_timeout``."""

    class Handler:
        pass

    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: AiosmtpdServer(Handler(), hostname="impatient", timeout=idle_timeout, loop=loop),
        "127.0.0.1",
        0,
    )
    try:
        yield server.sockets[0].getsockname()[:2]
    finally:
        server.close()
        await server.wait_closed()


def test_idle_session_records_when_the_server_closes(run: Run, history: History) -> None:
    client = RecordingClient(history, LINK)

    async def scenario() -> None:
        async with impatient_server(0.3) as address:
            result = await client.idle_session(*address, idle_seconds=5)
            assert result.closed_by_server
            assert result.closed_at is not None and result.idle_for >= 0.25
            assert result.replies[0].code == 220 and result.replies[1].code == 250
            assert [r.outcome for r in result.replies] == ["reply", "reply", "closed"]
        sink = MailSink("corp.test", history)
        patient = await client.idle_session(*await sink.start(), idle_seconds=0.3, helo=None)
        await sink.stop()
        assert not patient.closed_by_server and patient.closed_at is None
        assert patient.idle_for >= 0.3
        assert [r.code for r in patient.replies] == [220]

    run(scenario())
    server_close = [e for e in history.events(kind="close") if e.data["reason"] == "server closed"]
    assert len(server_close) == 1 and server_close[0].conn == 1


def test_vanish_idle_records_server_close(run: Run, history: History) -> None:
    client = RecordingClient(history, LINK)

    async def scenario() -> None:
        async with impatient_server(0.3) as address:
            result = await client.vanish_mid_data(*address, "a@ext.test", ALICE, make_message(),
                                                  how="idle", idle_seconds=5)
            assert result.reached_data and result.server_closed_at is not None

    run(scenario())
