"""FaultProxy's point faults (cut_at, stall_at) on real loopback sockets: each place of
a protocol point, the Nth occurrence and the Nth connection, and what the history shows."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest

from pytest_shadowcheck.history import History
from pytest_shadowcheck.network.proxy import FaultProxy
from pytest_shadowcheck.network.sink import MailSink
from pytest_shadowcheck.network.smtp_recorder import SmtpRecorder

from .conftest import LineServer, closed_by_peer, command, eventually, read_reply

Run = Callable[..., Any]
LINK = "mbx1->mbx2"
MESSAGE = b"From: a@ext.test\r\nMessage-ID: <p1@ext.test>\r\n\r\nbody\r\n"


async def open_proxy(history: History, upstream: tuple[str, int]) -> FaultProxy:
    proxy = FaultProxy(LINK, history)
    await proxy.start()
    proxy.set_upstream(*upstream)
    return proxy


def lines(history: History, direction: str, conn: int = 1) -> list[str]:
    return [
        e.data["text"]
        for e in history.events(kind="line", link=LINK)
        if e.direction == direction and e.conn == conn
    ]


def struck(history: History) -> list[tuple[int | None, str]]:
    return [(e.conn, e.data["struck"]) for e in history.events(kind="fault") if "struck" in e.data]


async def up_to_data(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    await read_reply(reader)
    assert (await command(reader, writer, "EHLO mbx1.test"))[0].startswith("250")
    assert (await command(reader, writer, "MAIL FROM:<a@ext.test>"))[0].startswith("250")
    assert (await command(reader, writer, "RCPT TO:<alice@corp.test>"))[0].startswith("250")
    assert (await command(reader, writer, "DATA"))[0].startswith("354")


async def read_until_closed(reader: asyncio.StreamReader) -> bytes:
    got = b""
    while chunk := await asyncio.wait_for(reader.read(4096), 5.0):
        got += chunk
    return got


def test_cut_after_a_command_forwards_it_and_no_more(run: Run, history: History) -> None:
    async def scenario() -> None:
        upstream = LineServer()
        proxy = await open_proxy(history, await upstream.start())
        proxy.cut_at("after", "RCPT")
        reader, writer = await asyncio.open_connection(*proxy.address)
        await read_reply(reader)
        # pipelined: the cut falls between RCPT and DATA of one chunk
        writer.write(b"MAIL FROM:<a@ext.test>\r\nRCPT TO:<b@corp.test>\r\nDATA\r\n")
        await writer.drain()
        assert await closed_by_peer(reader)
        writer.close()
        assert await eventually(lambda: bool(history.events(kind="close")))
        forwarded = b"MAIL FROM:<a@ext.test>\r\nRCPT TO:<b@corp.test>\r\n"
        assert await eventually(lambda: bytes(upstream.received[0]) == forwarded)
        await proxy.stop()
        await upstream.stop()

    run(scenario())
    assert lines(history, "c2s") == ["MAIL FROM:<a@ext.test>", "RCPT TO:<b@corp.test>"]
    assert struck(history) == [(1, "after the client's RCPT, 1st time")]
    (close,) = history.events(kind="close")
    assert close.data["reason"] == "cut after the client's RCPT, 1st time"


def test_cut_before_the_reply_to_the_final_dot(run: Run, history: History) -> None:
    async def scenario() -> None:
        sink = MailSink("corp.test", history)
        proxy = await open_proxy(history, await sink.start())
        proxy.cut_at("before_reply", "EOD")
        reader, writer = await asyncio.open_connection(*proxy.address)
        await up_to_data(reader, writer)
        writer.write(MESSAGE + b".\r\n")
        await writer.drain()
        # the server took the message; its 250 never reaches the client
        assert await read_until_closed(reader) == b""
        assert await eventually(lambda: sink.count("<p1@ext.test>") == 1)
        writer.close()
        await proxy.stop()
        await sink.stop()

    run(scenario())
    assert struck(history) == [(1, "before the server's reply to the final dot, 1st time")]
    assert not lines(history, "s2c")[-1].startswith("250 ")  # the last one recorded: 354
    assert lines(history, "s2c")[-1].startswith("354")


def test_cut_inside_the_reply_sends_half_its_line(run: Run, history: History) -> None:
    async def scenario() -> None:
        sink = MailSink("corp.test", history)
        proxy = await open_proxy(history, await sink.start())
        proxy.cut_at("inside_reply", "EOD")
        reader, writer = await asyncio.open_connection(*proxy.address)
        await up_to_data(reader, writer)
        writer.write(MESSAGE + b".\r\n")
        await writer.drain()
        partial = await read_until_closed(reader)
        assert partial.startswith(b"25") and b"\r\n" not in partial
        writer.close()
        await eventually(lambda: bool(history.events(kind="close")))
        await proxy.stop()
        await sink.stop()
        return partial

    partial = run(scenario())
    last = lines(history, "s2c")[-1]
    assert last == partial.decode() + " [incomplete]"
    assert struck(history) == [
        (1, "inside the server's reply to the final dot (half its last line sent), 1st time")
    ]


def test_cut_after_a_reply_lets_the_whole_reply_through(run: Run, history: History) -> None:
    async def scenario() -> None:
        upstream = LineServer(lambda line: "250 2.0.0 mbx1 keeps the shadow")
        proxy = await open_proxy(history, await upstream.start())
        proxy.cut_at("after_reply", "XSHADOW")
        reader, writer = await asyncio.open_connection(*proxy.address)
        await read_reply(reader)
        assert await command(reader, writer, "NOOP") == ["250 2.0.0 mbx1 keeps the shadow"]
        assert await command(reader, writer, "XSHADOW mbx1") == ["250 2.0.0 mbx1 keeps the shadow"]
        assert await closed_by_peer(reader)
        writer.close()
        await proxy.stop()
        await upstream.stop()

    run(scenario())
    assert struck(history) == [(1, "after the server's reply to XSHADOW, 1st time")]


def test_cut_before_the_greeting(run: Run, history: History) -> None:
    async def scenario() -> None:
        upstream = LineServer()
        proxy = await open_proxy(history, await upstream.start())
        proxy.cut_at("before_reply", "connect")
        reader, writer = await asyncio.open_connection(*proxy.address)
        assert await read_until_closed(reader) == b""
        writer.close()
        await proxy.stop()
        await upstream.stop()

    run(scenario())
    assert struck(history) == [(1, "before the server's reply to the connect, 1st time")]


def test_stall_after_data_holds_the_354_until_healed(run: Run, history: History) -> None:
    async def scenario() -> None:
        sink = MailSink("corp.test", history)
        proxy = await open_proxy(history, await sink.start())
        proxy.stall_at("after", "DATA")
        reader, writer = await asyncio.open_connection(*proxy.address)
        await read_reply(reader)
        await command(reader, writer, "EHLO mbx1.test")
        await command(reader, writer, "MAIL FROM:<a@ext.test>")
        await command(reader, writer, "RCPT TO:<alice@corp.test>")
        writer.write(b"DATA\r\n")
        with pytest.raises(TimeoutError):
            await read_reply(reader, timeout=0.4)
        # nothing goes the other way either
        writer.write(MESSAGE + b".\r\n")
        await asyncio.sleep(0.2)
        assert sink.count("<p1@ext.test>") == 0
        assert proxy.active_faults() == {"stalled_connections": [1]}
        proxy.heal()
        assert (await read_reply(reader))[0].startswith("354")
        assert (await read_reply(reader))[0].startswith("250")
        assert sink.count("<p1@ext.test>") == 1
        writer.close()
        await proxy.stop()
        await sink.stop()

    run(scenario())
    assert struck(history) == [(1, "after the client's DATA, 1st time")]
    assert [e.data["fault"] for e in history.events(kind="fault")] == [
        "stall_at",
        "stall_at",
        "heal",
    ]


def test_the_nth_occurrence_and_the_nth_connection(run: Run, history: History) -> None:
    async def scenario() -> None:
        upstream = LineServer()
        proxy = await open_proxy(history, await upstream.start())
        proxy.cut_at("before_reply", "MAIL", occurrence=2)
        proxy.cut_at("after", "NOOP", connection=2)
        reader, writer = await asyncio.open_connection(*proxy.address)
        await read_reply(reader)
        assert await command(reader, writer, "NOOP") == ["250 2.0.0 OK"]  # connection 1
        assert await command(reader, writer, "MAIL FROM:<a@ext.test>") == ["250 2.0.0 OK"]
        assert await command(reader, writer, "RSET") == ["250 2.0.0 OK"]
        writer.write(b"MAIL FROM:<a@ext.test>\r\n")  # the 2nd MAIL: its reply is lost
        assert await closed_by_peer(reader)
        writer.close()
        reader, writer = await asyncio.open_connection(*proxy.address)
        await read_reply(reader)
        writer.write(b"NOOP\r\n")
        assert await closed_by_peer(reader)
        writer.close()
        assert await eventually(lambda: len(history.events(kind="close")) == 2)
        assert proxy.active_faults() == {}
        await proxy.stop()
        await upstream.stop()

    run(scenario())
    assert struck(history) == [
        (1, "before the server's reply to MAIL, 2nd time"),
        (2, "after the client's NOOP, 1st time on connection #2"),
    ]


def test_bad_points_are_refused(history: History) -> None:
    proxy = FaultProxy(LINK, history)
    with pytest.raises(ValueError, match="protocol point"):
        proxy.cut_at("during", "EOD")
    with pytest.raises(ValueError, match="count from 1"):
        proxy.stall_at("after", "EOD", occurrence=0)


def test_cut_after_the_final_dot_and_after_a_bdat_chunk(run: Run, history: History) -> None:
    async def scenario() -> None:
        sink = MailSink("corp.test", history)
        proxy = await open_proxy(history, await sink.start())
        proxy.cut_at("after", "EOD")
        reader, writer = await asyncio.open_connection(*proxy.address)
        await up_to_data(reader, writer)
        # the content, its final dot and a pipelined QUIT in one write: the QUIT stays
        writer.write(MESSAGE + b".\r\nQUIT\r\n")
        assert await read_until_closed(reader) == b""
        writer.close()
        upstream = LineServer()
        proxy.set_upstream(*await upstream.start())
        proxy.cut_at("after", "BDAT")
        reader, writer = await asyncio.open_connection(*proxy.address)
        await read_reply(reader)
        writer.write(b"BDAT 7 LAST\r\nhello\r\nNOOP\r\n")
        assert await closed_by_peer(reader)
        writer.close()
        assert await eventually(lambda: bytes(upstream.received[0]) == b"BDAT 7 LAST\r\nhello\r\n")
        await proxy.stop()
        await sink.stop()
        await upstream.stop()

    run(scenario())
    assert "QUIT" not in lines(history, "c2s", conn=1)
    (data, *_) = history.events(kind="data")
    assert data.conn == 1 and data.data["complete"] is True
    assert struck(history) == [
        (1, "after the client's final dot, 1st time"),
        (2, "after the client's BDAT, 1st time"),
    ]


def test_the_reply_to_the_final_dot_pairs_with_it() -> None:
    """The final dot is a command of its own: with the next transaction pipelined behind
    it (RFC 2920), its 250 must not be taken for MAIL's, or the next DATA's 354 would be
    missed and the content recorded as commands."""
    history = History()
    recorder = SmtpRecorder(history, "l", 1)
    recorder.feed("s2c", b"220 hi\r\n")
    recorder.feed("c2s", b"MAIL FROM:<a@x>\r\nRCPT TO:<b@y>\r\nDATA\r\n")
    recorder.feed("s2c", b"250 ok\r\n250 ok\r\n354 go\r\n")
    recorder.feed("c2s", b"Message-ID: <one@x>\r\n\r\nhi\r\n.\r\nMAIL FROM:<a@x>\r\n")
    recorder.feed("c2s", b"RCPT TO:<b@y>\r\nDATA\r\n")
    recorder.feed("s2c", b"250 queued\r\n250 ok\r\n250 ok\r\n354 go\r\n")
    recorder.feed("c2s", b"Message-ID: <two@x>\r\n\r\nSECRET\r\n.\r\n")
    assert [e.data["message_id"] for e in history.events(kind="data")] == ["<one@x>", "<two@x>"]
    assert not any("SECRET" in str(e.data.get("text")) for e in history.events(kind="line"))
