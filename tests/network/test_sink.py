from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from pytest_shadowcheck.history import History
from pytest_shadowcheck.network.sink import MailSink

from .conftest import closed_by_peer, command, read_reply

Run = Callable[..., Any]


def message(message_id: str, subject: str = "hi") -> bytes:
    return (
        f"From: a@ext.test\r\nTo: alice@corp.test\r\nMessage-ID: {message_id}\r\n"
        f"Subject: {subject}\r\n\r\nHello.\r\n"
    ).encode()


class Session:
    """A hand-driven SMTP session, so every reply of the sink is visible."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer

    @classmethod
    async def open(cls, address: tuple[str, int], helo: str = "mbx1") -> tuple[Session, list[str]]:
        reader, writer = await asyncio.open_connection(*address)
        await read_reply(reader)
        session = cls(reader, writer)
        return session, await session.cmd(f"EHLO {helo}")

    async def cmd(self, line: str, timeout: float = 5.0) -> list[str]:
        return await command(self.reader, self.writer, line, timeout)

    async def send(self, content: bytes, rcpt: str = "alice@corp.test") -> str:
        """MAIL, RCPT, DATA; return the first line of the last reply."""
        for line in ("MAIL FROM:<a@ext.test>", f"RCPT TO:<{rcpt}>", "DATA"):
            reply = (await self.cmd(line))[0]
            if not reply.startswith(("250", "354")):
                return reply
        self.writer.write(content + b".\r\n")
        return (await read_reply(self.reader))[0]

    def close(self) -> None:
        self.writer.close()


def test_delivery_is_recorded_with_message_id_and_helo(run: Run, history: History) -> None:
    async def scenario() -> None:
        sink = MailSink("corp.test", history, link="mbx1->corp.test")
        address = await sink.start()
        session, ehlo = await Session.open(address, helo="mbx1")
        assert ehlo[0] == "250-corp.test"
        assert not any("XSHADOW" in line.upper() for line in ehlo)
        assert (await session.send(message("<m1@ext.test>"))).startswith("250 2.6.0")
        assert (await session.cmd("RSET"))[0].startswith("250")
        assert (await session.send(message("<m1@ext.test>"))).startswith("250")
        session.close()
        other, _ = await Session.open(address, helo="mbx2")
        assert (await other.send(message("m2@ext.test"), rcpt="bob@corp.test")).startswith("250")
        other.close()
        await sink.stop()

        first = sink.deliveries[0]
        assert first.message_id == "<m1@ext.test>"
        assert first.helo == "mbx1"
        assert first.mail_from == "a@ext.test"
        assert first.rcpt_tos == ["alice@corp.test"]
        assert first.headers["Subject"] == "hi"
        assert first.raw == message("<m1@ext.test>")
        assert first.size == len(first.raw)
        assert first.peer is not None and first.peer.startswith("127.0.0.1:")
        assert sink.count("m1@ext.test") == 2
        assert [d.helo for d in sink.deliveries_for("<m2@ext.test>")] == ["mbx2"]
        assert sink.count("<nope@x>") == 0

    run(scenario())
    events = history.events(kind="delivery")
    assert [e.data["message_id"] for e in events] == ["<m1@ext.test>"] * 2 + ["<m2@ext.test>"]
    assert all(e.link == "mbx1->corp.test" and e.data["sink"] == "corp.test" for e in events)
    assert events[2].data["helo"] == "mbx2" and events[2].data["rcpt_tos"] == ["bob@corp.test"]


def test_delivery_records_every_categoriser_stamp(run: Run, history: History) -> None:
    # SN-11 is judged by the model from the history: every X-Categorized-By, top first
    stamped = b"X-Categorized-By: mbx2; Thu\r\nX-Categorized-By: mbx1; Thu\r\n" + message("<s@x>")

    async def scenario() -> None:
        sink = MailSink("corp.test", history)
        session, _ = await Session.open(await sink.start())
        assert (await session.send(stamped)).startswith("250")
        assert (await session.send(message("<plain@x>"))).startswith("250")
        session.close()
        await sink.stop()

    run(scenario())
    events = history.events(kind="delivery")
    assert [e.data["categorised"] for e in events] == [["mbx2", "mbx1"], []]


def test_scripted_temporary_rcpt_failure_is_used_n_times(run: Run, history: History) -> None:
    async def scenario() -> None:
        sink = MailSink("corp.test", history)
        sink.script("RCPT", "451 4.3.0 Try later", times=2)
        session, _ = await Session.open(await sink.start())
        await session.cmd("MAIL FROM:<a@ext.test>")
        assert await session.cmd("RCPT TO:<alice@corp.test>") == ["451 4.3.0 Try later"]
        assert await session.cmd("RCPT TO:<alice@corp.test>") == ["451 4.3.0 Try later"]
        assert (await session.cmd("RCPT TO:<alice@corp.test>"))[0].startswith("250")
        assert sink.scripts == []
        session.close()
        await sink.stop()

    run(scenario())
    notes = history.events(kind="note")
    assert [n.data["reply"] for n in notes] == ["451 4.3.0 Try later"] * 2
    assert notes[0].data["stage"] == "RCPT" and notes[0].data["rcpt_to"] == "alice@corp.test"


def test_scripted_permanent_failure_lasts_until_cleared(run: Run, history: History) -> None:
    async def scenario() -> None:
        sink = MailSink("corp.test", history)
        sink.script("mail", "550 5.7.1 Go away")
        session, _ = await Session.open(await sink.start())
        for _ in range(3):
            assert await session.cmd("MAIL FROM:<a@ext.test>") == ["550 5.7.1 Go away"]
        sink.clear_script()
        assert (await session.send(message("<m3@x>"))).startswith("250")
        session.close()
        await sink.stop()
        assert sink.count("<m3@x>") == 1

    run(scenario())


def test_scripted_data_refusal_is_not_a_delivery(run: Run, history: History) -> None:
    async def scenario() -> None:
        sink = MailSink("corp.test", history)
        sink.script("DATA", "451 4.4.0 Not now", times=1)
        sink.script("DATA", "554 5.6.0 Never", times=1)
        session, _ = await Session.open(await sink.start())
        assert await session.send(message("<m4@x>")) == "451 4.4.0 Not now"
        assert await session.send(message("<m4@x>")) == "554 5.6.0 Never"
        assert (await session.send(message("<m4@x>"))).startswith("250")
        session.close()
        await sink.stop()
        assert sink.count("<m4@x>") == 1

    run(scenario())
    notes = history.events(kind="note")
    assert [n.data["message_id"] for n in notes] == ["<m4@x>", "<m4@x>"]


def test_hang_never_answers_until_cleared(run: Run, history: History) -> None:
    async def scenario() -> None:
        sink = MailSink("corp.test", history)
        sink.script("DATA", "hang")
        session, _ = await Session.open(await sink.start())
        for line in ("MAIL FROM:<a@ext.test>", "RCPT TO:<alice@corp.test>", "DATA"):
            await session.cmd(line)
        session.writer.write(message("<m5@x>") + b".\r\n")
        with pytest.raises(TimeoutError):
            await read_reply(session.reader, timeout=0.4)
        assert sink.deliveries == []
        sink.clear_script()
        assert (await read_reply(session.reader))[0].startswith("250")
        assert sink.count("<m5@x>") == 1
        session.close()
        await sink.stop()

    run(scenario())


def test_stop_releases_a_hung_session(run: Run, history: History) -> None:
    async def scenario() -> None:
        sink = MailSink("corp.test", history)
        sink.script("MAIL", "hang")
        session, _ = await Session.open(await sink.start())
        session.writer.write(b"MAIL FROM:<a@ext.test>\r\n")
        await asyncio.sleep(0.1)
        await sink.stop()
        assert await closed_by_peer(session.reader)
        session.close()
        assert sink.deliveries == []

    run(scenario())


def test_wait_for_message_id_and_predicate(run: Run, history: History) -> None:
    async def scenario() -> None:
        sink = MailSink("corp.test", history)
        address = await sink.start()
        assert await sink.wait_for("<late@x>", timeout=0.2) is False

        async def deliver_later() -> None:
            await asyncio.sleep(0.2)
            session, _ = await Session.open(address)
            await session.send(message("<late@x>"))
            await session.send(message("<later@x>"))
            session.close()

        task = asyncio.create_task(deliver_later())
        assert await sink.wait_for("late@x", timeout=5) is True
        assert await sink.wait_for(lambda ds: len(ds) >= 2, timeout=5) is True
        assert await sink.wait_for(lambda ds: len(ds) >= 3, timeout=0.2) is False
        await task
        await sink.stop()

    run(scenario())


def test_script_validation() -> None:
    sink = MailSink("corp.test", History())
    with pytest.raises(ValueError, match="stage"):
        sink.script("EHLO", "421 bye")
    with pytest.raises(ValueError, match="3-digit"):
        sink.script("RCPT", "try later")
    with pytest.raises(ValueError, match="times"):
        sink.script("RCPT", "451 4.3.0 later", times=0)
    with pytest.raises(RuntimeError, match="not started"):
        _ = sink.address


@pytest.mark.parametrize(
    "arg",
    [
        "<alice@corp.test>",
        "<alice@corp.test> SIZE=1000 BODY=8BITMIME",
        " <x.y+tag@sub.d-x.test>  X=1 ",
        "<>",
        "bare@corp.test",
        '<"quoted local"@corp.test>',
        "<@route:alice@corp.test>",
        "<unterminated@corp.test",
        "<no-at-sign>",
    ],
)
def test_the_sinks_address_fast_path_reads_what_aiosmtpd_reads(arg: str) -> None:
    # the sink's shortcut for plain <local@domain> must agree with aiosmtpd's RFC 5322
    # parser on every form, plain or not (the others go to that parser)
    from aiosmtpd.smtp import SMTP

    from pytest_shadowcheck.network.sink_smtp import getaddr

    assert getaddr(arg) == SMTP(object())._getaddr(arg)
