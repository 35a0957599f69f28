"""A sink refusing like a real server, on real sockets: per recipient at RCPT, a burst
of 4xx then the normal answer, a late answer, a session closed after the final dot -
and every scripted answer recorded with the envelope it went to."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from pytest_shadowcheck.history import History
from pytest_shadowcheck.network.sink import MailSink, address_matches

from .conftest import closed_by_peer, read_reply
from .test_sink import Session, message

Run = Callable[..., Any]


def test_rcpt_refused_per_recipient_by_address_and_pattern(run: Run, history: History) -> None:
    async def scenario() -> None:
        sink = MailSink("mailbox", history, link="mbx1->mailbox")
        sink.script("RCPT", "550 5.1.1 no such user", match="Bob@corp.test")
        sink.script("RCPT", "450 4.2.1 try later", times=1, match="*@slow.corp.test")
        session, _ = await Session.open(await sink.start())
        await session.cmd("MAIL FROM:<sender@ext.test>")
        assert (await session.cmd("RCPT TO:<alice@corp.test>"))[0].startswith("250")
        assert await session.cmd("RCPT TO:<bob@corp.test>") == ["550 5.1.1 no such user"]
        assert await session.cmd("RCPT TO:<carol@slow.corp.test>") == ["450 4.2.1 try later"]
        # the 4xx was for one use; the 550 stays for bob
        assert (await session.cmd("RCPT TO:<carol@slow.corp.test>"))[0].startswith("250")
        assert await session.cmd("RCPT TO:<bob@corp.test>") == ["550 5.1.1 no such user"]
        assert (await session.cmd("DATA"))[0].startswith("354")
        session.writer.write(message("<m1@ext.test>") + b".\r\n")
        assert (await read_reply(session.reader))[0].startswith("250")
        session.close()
        await sink.stop()
        # the message went to the accepted recipients only
        assert sink.deliveries[0].rcpt_tos == ["alice@corp.test", "carol@slow.corp.test"]

    run(scenario())
    notes = history.events(kind="note")
    assert [(n.data["rcpt_to"], n.data["reply"][:3]) for n in notes] == [
        ("bob@corp.test", "550"),
        ("carol@slow.corp.test", "450"),
        ("bob@corp.test", "550"),
    ]
    assert all(n.data["mail_from"] == "sender@ext.test" for n in notes)
    assert all(n.link == "mbx1->mailbox" for n in notes)
    assert notes[0].data["text"] == (
        "sink mailbox answered 550 5.1.1 no such user to RCPT TO:<bob@corp.test> "
        "(sender <sender@ext.test>) from mbx1"
    )


def test_mail_burst_of_4xx_then_accept(run: Run, history: History) -> None:
    async def scenario() -> None:
        sink = MailSink("mailbox", history)
        sink.script("MAIL", "421 4.3.2 busy", times=2)
        session, _ = await Session.open(await sink.start())
        for _ in range(2):
            assert await session.cmd("MAIL FROM:<sender@ext.test>") == ["421 4.3.2 busy"]
        assert (await session.send(message("<m2@x>"))).startswith("250")
        session.close()
        await sink.stop()
        assert sink.count("<m2@x>") == 1 and sink.scripts == []

    run(scenario())


def test_slow_data_reply_answers_late_and_keeps_the_next_command(
    run: Run, history: History
) -> None:
    async def scenario() -> None:
        sink = MailSink("mailbox", history)
        sink.script("DATA", "accept", times=1, delay=0.6)
        session, _ = await Session.open(await sink.start())
        for line in ("MAIL FROM:<a@ext.test>", "RCPT TO:<alice@corp.test>", "DATA"):
            await session.cmd(line)
        # the final dot and a pipelined NOOP: the NOOP waits behind the slow answer
        session.writer.write(message("<m3@x>") + b".\r\nNOOP\r\n")
        with pytest.raises(TimeoutError):
            await read_reply(session.reader, timeout=0.3)
        assert sink.deliveries == []
        assert (await read_reply(session.reader))[0].startswith("250 2.6.0")
        assert await read_reply(session.reader) == ["250 OK"]
        session.close()
        await sink.stop()
        assert sink.count("<m3@x>") == 1

    run(scenario())
    note = history.events(kind="note")[0]
    assert note.data["delay"] == 0.6 and note.data["rcpt_tos"] == ["alice@corp.test"]
    assert "answered as usual after 0.6s" in note.data["text"]


def test_close_after_the_final_dot_gives_no_reply_and_no_delivery(
    run: Run, history: History
) -> None:
    async def scenario() -> None:
        sink = MailSink("mailbox", history)
        sink.script("DATA", "close", times=1)
        address = await sink.start()
        session, _ = await Session.open(address)
        for line in ("MAIL FROM:<a@ext.test>", "RCPT TO:<alice@corp.test>", "DATA"):
            await session.cmd(line)
        session.writer.write(message("<m4@x>") + b".\r\n")
        assert await closed_by_peer(session.reader)
        session.close()
        assert sink.deliveries == []
        # once used up, the next session is answered as usual
        again, _ = await Session.open(address)
        assert (await again.send(message("<m4@x>"))).startswith("250")
        again.close()
        await sink.stop()

    run(scenario())
    note = history.events(kind="note")[0]
    assert note.data["stage"] == "DATA" and note.data["message_id"] == "<m4@x>"
    assert "closed the session without a reply" in note.data["text"]


def test_a_slow_refusal_is_late_and_still_a_refusal(run: Run, history: History) -> None:
    async def scenario() -> None:
        sink = MailSink("mailbox", history)
        sink.script("RCPT", "451 4.3.0 later", match="bob@corp.test", delay=0.3)
        session, _ = await Session.open(await sink.start())
        await session.cmd("MAIL FROM:<a@ext.test>")
        loop = asyncio.get_running_loop()
        start = loop.time()
        assert await session.cmd("RCPT TO:<bob@corp.test>") == ["451 4.3.0 later"]
        assert loop.time() - start >= 0.3
        session.close()
        await sink.stop()

    run(scenario())


def test_script_refuses_what_cannot_be_scripted(history: History) -> None:
    sink = MailSink("mailbox", history)
    with pytest.raises(ValueError, match="DATA script cannot match"):
        sink.script("DATA", "550 5.0.0 no", match="bob@corp.test")
    with pytest.raises(ValueError, match="delay"):
        sink.script("RCPT", "450 4.0.0 no", delay=-1)
    with pytest.raises(ValueError, match="3-digit"):
        sink.script("DATA", "later")


def test_address_patterns() -> None:
    assert address_matches("*@corp.test", "Bob@CORP.test")
    assert address_matches("bob@corp.test", "bob@corp.test")
    assert not address_matches("bob@corp.test", "bobby@corp.test")
    assert not address_matches("*@corp.test", "bob@corp.test.evil")
