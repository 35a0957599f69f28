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


async def open_proxy(history: History, upstream: tuple[str, int] | None) -> FaultProxy:
    proxy = FaultProxy(LINK, history)
    await proxy.start()
    if upstream is not None:
        proxy.set_upstream(*upstream)
    return proxy


def lines(history: History, direction: str, conn: int | None = None) -> list[str]:
    return [
        e.data["text"]
        for e in history.events(kind="line", link=LINK)
        if e.direction == direction and (conn is None or e.conn == conn)
    ]


def faults(history: History) -> list[tuple[str, bool]]:
    return [(e.data["fault"], e.data["on"]) for e in history.events(kind="fault")]


MESSAGE = (
    b"From: a@ext.test\r\nTo: alice@corp.test\r\nMessage-ID: <m1@ext.test>\r\n"
    b"Subject: hello\r\n\r\nbody line one\r\n..dot-stuffed line\r\nSECRET-BODY\r\n"
)


def test_records_smtp_lines_and_summarises_data(run: Run, history: History) -> None:
    async def scenario() -> None:
        sink = MailSink("corp.test", history)
        proxy = await open_proxy(history, await sink.start())
        reader, writer = await asyncio.open_connection(*proxy.address)
        assert (await read_reply(reader))[0].startswith("220 corp.test")
        ehlo = await command(reader, writer, "EHLO mbx1.test")
        assert ehlo[0].startswith("250-corp.test")
        assert (await command(reader, writer, "MAIL FROM:<a@ext.test>"))[0].startswith("250")
        assert (await command(reader, writer, "RCPT TO:<alice@corp.test>"))[0].startswith("250")
        assert (await command(reader, writer, "DATA"))[0].startswith("354")
        writer.write(MESSAGE + b".\r\n")
        assert (await read_reply(reader))[0].startswith("250")
        assert (await command(reader, writer, "QUIT"))[0].startswith("221")
        assert await closed_by_peer(reader)
        writer.close()
        assert await eventually(lambda: bool(history.events(kind="close")))
        await proxy.stop()
        await sink.stop()
        assert sink.count("<m1@ext.test>") == 1

    run(scenario())
    client = lines(history, "c2s", conn=1)
    assert client == [
        "EHLO mbx1.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<alice@corp.test>", "DATA", "QUIT",
    ]
    server = lines(history, "s2c", conn=1)
    assert server[0].startswith("220 corp.test")
    assert any(s.startswith("354") for s in server)
    assert server[-1].startswith("221")
    assert not any("SECRET-BODY" in e.data.get("text", "") for e in history.events())
    (data,) = history.events(kind="data")
    assert data.link == LINK and data.conn == 1 and data.direction == "c2s"
    assert data.data["message_id"] == "<m1@ext.test>"
    assert data.data["size"] == len(MESSAGE)
    # The summary sits between the DATA line and the 250 that acknowledged it.
    ordered = [e for e in history.events(link=LINK) if e.kind in ("line", "data")]
    index = ordered.index(data)
    assert ordered[index - 1].data["text"].startswith("354")
    assert ordered[index + 1].data["text"].startswith("250")
    (connect,) = history.events(kind="connect")
    assert connect.conn == 1 and connect.data["upstream"].startswith("127.0.0.1:")
    (close,) = history.events(kind="close")
    assert close.conn == 1 and close.data["reason"] in ("server closed", "client closed")


def test_data_terminator_split_across_chunks() -> None:
    history = History()
    recorder = SmtpRecorder(history, "l", 1)
    recorder.feed("c2s", b"DATA\r\n")
    recorder.feed("s2c", b"354 go ahead\r\n")
    content = b"Message-ID: <split@x>\r\n\r\nhi\r\n"
    wire = content + b".\r\nNOOP\r\n"
    for i in range(len(wire)):  # the worst case: one byte per chunk
        recorder.feed("c2s", wire[i : i + 1])
    (data,) = history.events(kind="data")
    assert data.data == {"size": len(content), "message_id": "<split@x>", "complete": True}
    assert [e.data["text"] for e in history.events(kind="line")][-1] == "NOOP"


def test_empty_message_and_content_after_terminator() -> None:
    history = History()
    recorder = SmtpRecorder(history, "l", 1)
    recorder.feed("c2s", b"DATA\r\n")
    recorder.feed("s2c", b"354 go ahead\r\n")
    recorder.feed("c2s", b".\r\nRSET\r\n")
    (data,) = history.events(kind="data")
    assert data.data["size"] == 0 and data.data["message_id"] is None
    assert [e.data["text"] for e in history.events(kind="line")] == [
        "DATA", "354 go ahead", "RSET",
    ]


def test_rejected_data_command_does_not_start_content_mode() -> None:
    history = History()
    recorder = SmtpRecorder(history, "l", 1)
    recorder.feed("c2s", b"DATA\r\n")
    recorder.feed("s2c", b"503 5.5.1 need RCPT\r\n")
    recorder.feed("c2s", b"QUIT\r\n")
    assert not history.events(kind="data")
    assert [e.data["text"] for e in history.events(kind="line")][-1] == "QUIT"


def test_auth_credentials_are_masked() -> None:
    history = History()
    recorder = SmtpRecorder(history, "l", 1)
    recorder.feed("c2s", b"AUTH PLAIN AHVzZXIAc2VjcmV0\r\n")
    recorder.feed("s2c", b"235 2.7.0 ok\r\n")
    recorder.feed("c2s", b"AUTH LOGIN\r\n")
    recorder.feed("s2c", b"334 VXNlcm5hbWU6\r\n")
    recorder.feed("c2s", b"dXNlcg==\r\n")
    recorder.feed("s2c", b"334 UGFzc3dvcmQ6\r\n")
    recorder.feed("c2s", b"c2VjcmV0\r\n")
    recorder.feed("s2c", b"235 2.7.0 ok\r\n")
    recorder.feed("c2s", b"MAIL FROM:<a@x>\r\n")
    client = [e.data["text"] for e in history.events(kind="line") if e.direction == "c2s"]
    assert client == ["AUTH PLAIN ****", "AUTH LOGIN", "****", "****", "MAIL FROM:<a@x>"]


def test_bdat_chunks_are_skipped_not_parsed() -> None:
    history = History()
    recorder = SmtpRecorder(history, "l", 1)
    recorder.feed("c2s", b"BDAT 14 LAST\r\nline1\r\nline2\r\nQUIT\r\n")
    assert [e.data["text"] for e in history.events(kind="line")] == ["BDAT 14 LAST", "QUIT"]
    (data,) = history.events(kind="data")
    assert data.data["size"] == 14 and data.data["bdat"] is True


def test_bdat_message_is_one_data_event_with_its_message_id() -> None:
    history = History()
    recorder = SmtpRecorder(history, "l", 1)
    first, second = MESSAGE[:30], MESSAGE[30:]
    recorder.feed("c2s", b"BDAT %d\r\n" % len(first) + first)
    assert not history.events(kind="data")  # not a whole message yet
    # the LAST chunk split across reads, and what follows it read as commands again
    recorder.feed("c2s", b"BDAT %d LAST\r\n" % len(second) + second[:10])
    recorder.feed("c2s", second[10:] + b"QUIT\r\n")
    (data,) = history.events(kind="data")
    assert data.data["message_id"] == "<m1@ext.test>"
    assert data.data["size"] == len(MESSAGE) and data.data["complete"] is True
    assert recorder.contents == 1
    assert [e.data["text"] for e in history.events(kind="line")][-1] == "QUIT"


def test_a_client_half_close_still_gets_the_servers_last_replies(
    run: Run, history: History
) -> None:
    """Exim pipelines QUIT after the message and shuts its sending side down at once:
    the server's 250 and 221 must still reach it, or it retries a delivered message."""

    async def scenario() -> None:
        sink = MailSink("corp.test", history)
        proxy = await open_proxy(history, await sink.start())
        reader, writer = await asyncio.open_connection(*proxy.address)
        await read_reply(reader)
        await command(reader, writer, "EHLO mbx1.test")
        await command(reader, writer, "MAIL FROM:<a@ext.test>")
        await command(reader, writer, "RCPT TO:<alice@corp.test>")
        assert (await command(reader, writer, "DATA"))[0].startswith("354")
        writer.write(MESSAGE + b".\r\nQUIT\r\n")
        writer.write_eof()  # shutdown(SHUT_WR)
        assert (await read_reply(reader))[0].startswith("250")
        assert (await read_reply(reader))[0].startswith("221")
        assert await closed_by_peer(reader)
        writer.close()
        await proxy.stop()
        await sink.stop()

    run(scenario())
    assert lines(history, "s2c")[-2:][0].startswith("250")
    assert lines(history, "s2c")[-1].startswith("221")
    (close,) = history.events(kind="close")
    assert close.data["reason"] == "client closed"


def test_a_client_giving_up_on_a_silent_server_is_recorded_when_it_does(
    run: Run, history: History
) -> None:
    """A frozen node takes the connection and says nothing; the client that gives up
    closes its side at once, and the history says so then (TO-4 reads it), though the
    proxy still waits for the server's last word before it records the close."""

    async def scenario() -> float:
        async def silent(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.read()  # until the client's FIN, then still nothing
            await asyncio.sleep(30)

        server = await asyncio.start_server(silent, "127.0.0.1", 0)
        proxy = await open_proxy(history, server.sockets[0].getsockname()[:2])
        _reader, writer = await asyncio.open_connection(*proxy.address)
        await asyncio.sleep(0.3)
        gave_up = history.now()
        writer.close()
        assert await eventually(lambda: bool(history.events(kind="shutdown")))
        await proxy.stop()
        server.close()
        return gave_up

    gave_up = run(scenario())
    (shutdown,) = history.events(kind="shutdown")
    assert shutdown.direction == "c2s" and shutdown.conn == 1
    assert shutdown.t >= gave_up
    # recorded on the client's FIN, not on the server's answer or the half-close wait
    closes = history.events(kind="close")
    assert all(c.t >= shutdown.t for c in closes)


def test_cut_closes_existing_and_refuses_new_until_switched_off(run: Run, history: History) -> None:
    async def scenario() -> None:
        upstream = LineServer()
        proxy = await open_proxy(history, await upstream.start())
        reader, writer = await asyncio.open_connection(*proxy.address)
        assert await read_reply(reader) == ["220 upstream"]
        proxy.cut()
        assert await closed_by_peer(reader)
        writer.close()
        reader2, writer2 = await asyncio.open_connection(*proxy.address)
        assert await closed_by_peer(reader2)
        writer2.close()
        assert upstream.connections == 1  # the refused one never reached upstream
        proxy.cut(False)
        reader3, writer3 = await asyncio.open_connection(*proxy.address)
        assert await read_reply(reader3) == ["220 upstream"]
        writer3.close()
        await proxy.stop()
        await upstream.stop()

    run(scenario())
    assert faults(history) == [("cut", True), ("cut", False)]
    reasons = {e.conn: e.data["reason"] for e in history.events(kind="close")}
    assert reasons[1] == "cut"
    assert reasons[2] == "refused: link cut"
    assert [e.conn for e in history.events(kind="connect")] == [1, 2, 3]


def test_no_upstream_refuses_and_upstream_can_change(run: Run, history: History) -> None:
    async def scenario() -> None:
        first, second = LineServer(greeting="220 first"), LineServer(greeting="220 second")
        first_address, second_address = await first.start(), await second.start()
        proxy = await open_proxy(history, None)
        reader, writer = await asyncio.open_connection(*proxy.address)
        assert await closed_by_peer(reader)
        writer.close()
        proxy.set_upstream(*first_address)
        reader, writer_a = await asyncio.open_connection(*proxy.address)
        assert await read_reply(reader) == ["220 first"]
        proxy.set_upstream(*second_address)
        # The open connection stays with the old upstream; new ones go to the new one.
        assert await command(reader, writer_a, "NOOP") == ["250 2.0.0 OK"]
        reader_b, writer_b = await asyncio.open_connection(*proxy.address)
        assert await read_reply(reader_b) == ["220 second"]
        writer_a.close()
        writer_b.close()
        await proxy.stop()
        await first.stop()
        await second.stop()

    run(scenario())
    reasons = [e.data["reason"] for e in history.events(kind="close") if e.conn == 1]
    assert reasons == ["refused: no upstream"]


def test_blackhole_holds_traffic_until_healed(run: Run, history: History) -> None:
    async def scenario() -> None:
        upstream = LineServer()
        proxy = await open_proxy(history, await upstream.start())
        reader, writer = await asyncio.open_connection(*proxy.address)
        await read_reply(reader)
        proxy.blackhole()
        writer.write(b"NOOP\r\n")
        with pytest.raises(TimeoutError):
            await read_reply(reader, timeout=0.4)
        # A new connection is accepted but gets no greeting either.
        reader2, writer2 = await asyncio.open_connection(*proxy.address)
        with pytest.raises(TimeoutError):
            await read_reply(reader2, timeout=0.3)
        assert bytes(upstream.received[0]) == b""  # nothing was forwarded
        proxy.heal()
        assert await read_reply(reader) == ["250 2.0.0 OK"]
        assert await read_reply(reader2) == ["220 upstream"]
        writer.close()
        writer2.close()
        await proxy.stop()
        await upstream.stop()

    run(scenario())
    assert faults(history) == [("blackhole", True), ("heal", False)]
    (heal,) = [e for e in history.events(kind="fault") if e.data["fault"] == "heal"]
    assert heal.data["cleared"] == ["blackhole"]


def test_stall_after_data_holds_the_reply_to_the_content(run: Run, history: History) -> None:
    async def scenario() -> None:
        sink = MailSink("corp.test", history)
        proxy = await open_proxy(history, await sink.start())
        proxy.stall_after_data()
        reader, writer = await asyncio.open_connection(*proxy.address)
        await read_reply(reader)
        # Everything before the content flows as usual ...
        assert (await command(reader, writer, "EHLO mbx1.test"))[0].startswith("250")
        assert (await command(reader, writer, "MAIL FROM:<a@ext.test>"))[0].startswith("250")
        assert (await command(reader, writer, "RCPT TO:<alice@corp.test>"))[0].startswith("250")
        assert (await command(reader, writer, "DATA"))[0].startswith("354")
        writer.write(MESSAGE + b".\r\n")
        # ... the server accepts the content, but its 250 is held.
        assert await eventually(lambda: sink.count("<m1@ext.test>") == 1)
        with pytest.raises(TimeoutError):
            await read_reply(reader, timeout=0.4)
        proxy.heal()
        assert (await read_reply(reader))[0].startswith("250")
        writer.close()
        await proxy.stop()
        await sink.stop()

    run(scenario())
    assert faults(history) == [("stall_after_data", True), ("heal", False)]
    server = lines(history, "s2c", conn=1)
    assert server[-1].startswith("250")  # recorded when it was finally forwarded


@pytest.mark.parametrize(("direction", "minimum"), [("c2s", 0.3), ("s2c", 0.3), ("both", 0.6)])
def test_delay_holds_each_direction(run: Run, direction: str, minimum: float) -> None:
    history = History()

    async def scenario() -> float:
        upstream = LineServer()
        proxy = await open_proxy(history, await upstream.start())
        reader, writer = await asyncio.open_connection(*proxy.address)
        await read_reply(reader)
        proxy.delay(direction, 0.3)
        loop = asyncio.get_running_loop()
        started = loop.time()
        assert await command(reader, writer, "NOOP") == ["250 2.0.0 OK"]
        elapsed = loop.time() - started
        proxy.delay(direction, 0)
        started = loop.time()
        await command(reader, writer, "NOOP")
        undelayed = loop.time() - started
        writer.close()
        await proxy.stop()
        await upstream.stop()
        assert undelayed < elapsed
        return elapsed

    assert run(scenario()) >= minimum
    (on, off) = history.events(kind="fault")
    assert on.data == {"fault": "delay", "on": True, "flow": direction, "seconds": 0.3}
    assert off.data["on"] is False


def test_delay_rejects_bad_direction(history: History) -> None:
    proxy = FaultProxy(LINK, history)
    with pytest.raises(ValueError, match="direction"):
        proxy.delay("up", 1.0)


def test_reset_kills_current_connections_once(run: Run, history: History) -> None:
    async def scenario() -> None:
        upstream = LineServer()
        proxy = await open_proxy(history, await upstream.start())
        reader, writer = await asyncio.open_connection(*proxy.address)
        await read_reply(reader)
        proxy.reset()
        with pytest.raises(ConnectionResetError):
            await asyncio.wait_for(reader.read(100), 5)
        writer.close()
        reader2, writer2 = await asyncio.open_connection(*proxy.address)
        assert await read_reply(reader2) == ["220 upstream"]
        writer2.close()
        await proxy.stop()
        await upstream.stop()

    run(scenario())
    assert faults(history) == [("reset", True)]
    assert history.events(kind="fault")[0].data["connections"] == [1]
    assert [e.data["reason"] for e in history.events(kind="close") if e.conn == 1] == ["reset"]


@pytest.mark.parametrize("fault", ["slow_accept", "slow_greeting"])
def test_slow_accept_and_slow_greeting_hold_the_greeting(run: Run, fault: str) -> None:
    history = History()

    async def scenario() -> float:
        upstream = LineServer()
        proxy = await open_proxy(history, await upstream.start())
        getattr(proxy, fault)(0.3)
        loop = asyncio.get_running_loop()
        started = loop.time()
        reader, writer = await asyncio.open_connection(*proxy.address)
        assert await read_reply(reader) == ["220 upstream"]
        elapsed = loop.time() - started
        # Only the greeting / the accept is slowed, not the session.
        assert await command(reader, writer, "NOOP") == ["250 2.0.0 OK"]
        writer.close()
        await proxy.stop()
        await upstream.stop()
        return elapsed

    assert run(scenario()) >= 0.3
    assert faults(history) == [(fault, True)]


def test_drop_after_forwards_n_bytes_then_closes(run: Run, history: History) -> None:
    async def scenario() -> None:
        upstream = LineServer()
        proxy = await open_proxy(history, await upstream.start())
        proxy.drop_after(10)
        reader, writer = await asyncio.open_connection(*proxy.address)
        await read_reply(reader)
        writer.write(b"NOOP\r\nNOOP\r\nNOOP\r\n")
        await writer.drain()
        assert await closed_by_peer(reader)
        writer.close()
        assert await eventually(lambda: bytes(upstream.received[0]) == b"NOOP\r\nNOOP")
        proxy.drop_after(None)
        reader2, writer2 = await asyncio.open_connection(*proxy.address)
        await read_reply(reader2)
        assert await command(reader2, writer2, "NOOP") == ["250 2.0.0 OK"]
        writer2.close()
        await proxy.stop()
        await upstream.stop()

    run(scenario())
    reasons = [e.data["reason"] for e in history.events(kind="close") if e.conn == 1]
    assert reasons == ["drop_after (c2s)"]
    assert faults(history) == [("drop_after", True), ("drop_after", False)]
    # Only what was forwarded is recorded: one full line, one incomplete.
    assert lines(history, "c2s", conn=1) == ["NOOP", "NOOP [incomplete]"]


def test_drop_after_on_existing_connection_counts_from_now(run: Run, history: History) -> None:
    async def scenario() -> None:
        upstream = LineServer()
        proxy = await open_proxy(history, await upstream.start())
        reader, writer = await asyncio.open_connection(*proxy.address)
        await read_reply(reader)
        assert await command(reader, writer, "NOOP") == ["250 2.0.0 OK"]
        proxy.drop_after(0, direction="s2c")
        writer.write(b"NOOP\r\n")
        assert await closed_by_peer(reader)
        writer.close()
        await proxy.stop()
        await upstream.stop()

    run(scenario())
    assert [e.data["reason"] for e in history.events(kind="close")] == ["drop_after (s2c)"]


def test_heal_clears_every_fault(run: Run, history: History) -> None:
    async def scenario() -> None:
        upstream = LineServer()
        proxy = await open_proxy(history, await upstream.start())
        proxy.delay("both", 5)
        proxy.slow_accept(5)
        proxy.slow_greeting(5)
        proxy.drop_after(1)
        proxy.cut()
        assert set(proxy.active_faults()) == {
            "cut", "delay_c2s", "delay_s2c", "slow_accept", "slow_greeting", "drop_after_c2s",
        }
        proxy.heal()
        assert proxy.active_faults() == {}
        reader, writer = await asyncio.open_connection(*proxy.address)
        assert await read_reply(reader, timeout=2) == ["220 upstream"]
        assert await command(reader, writer, "NOOP", timeout=2) == ["250 2.0.0 OK"]
        writer.close()
        await proxy.stop()
        await upstream.stop()

    run(scenario())


def test_stop_closes_everything(run: Run, history: History) -> None:
    async def scenario() -> None:
        upstream = LineServer()
        proxy = await open_proxy(history, await upstream.start())
        reader, writer = await asyncio.open_connection(*proxy.address)
        await read_reply(reader)
        address = proxy.address
        await proxy.stop()
        assert await closed_by_peer(reader)
        writer.close()
        assert proxy.connection_count == 0
        with pytest.raises(OSError):
            await asyncio.open_connection(*address)
        await upstream.stop()

    run(scenario())
    assert [e.data["reason"] for e in history.events(kind="close")] == ["proxy stopped"]


def test_unreachable_upstream_is_recorded(run: Run, history: History) -> None:
    async def scenario() -> None:
        upstream = LineServer()
        address = await upstream.start()
        await upstream.stop()  # nothing listens there any more
        proxy = await open_proxy(history, address)
        reader, writer = await asyncio.open_connection(*proxy.address)
        assert await closed_by_peer(reader)
        writer.close()
        await proxy.stop()

    run(scenario())
    (close,) = history.events(kind="close")
    assert close.data["reason"].startswith("upstream 127.0.0.1:")


def test_large_message_is_summarised_not_recorded_line_by_line(run: Run, history: History) -> None:
    body = b"".join(b"line %06d of a big message\r\n" % i for i in range(40000))  # ~1.1 MB
    message = b"Message-ID: <big@ext.test>\r\nSubject: big\r\n\r\n" + body

    async def scenario() -> None:
        sink = MailSink("corp.test", history)
        proxy = await open_proxy(history, await sink.start())
        reader, writer = await asyncio.open_connection(*proxy.address)
        await read_reply(reader)
        await command(reader, writer, "EHLO mbx1.test")
        await command(reader, writer, "MAIL FROM:<a@ext.test>")
        await command(reader, writer, "RCPT TO:<alice@corp.test>")
        assert (await command(reader, writer, "DATA"))[0].startswith("354")
        writer.write(message + b".\r\n")
        assert (await read_reply(reader, timeout=10))[0].startswith("250")
        writer.close()
        await proxy.stop()
        await sink.stop()
        assert sink.deliveries[0].size == len(message)

    run(scenario())
    (data,) = history.events(kind="data")
    assert data.data["size"] == len(message)
    assert data.data["message_id"] == "<big@ext.test>"
    assert len(history.events(kind="line")) < 30


def test_pipelined_commands_pair_with_their_replies_in_order() -> None:
    # RFC 2920: MAIL, RCPT and DATA in one write, their replies in another; the
    # content starts after the 354 that answers DATA, not after the first reply.
    history = History()
    recorder = SmtpRecorder(history, "l", 1)
    recorder.feed("s2c", b"220 hello\r\n")
    recorder.feed("c2s", b"AUTH PLAIN AHVzZXIAc2VjcmV0\r\nEHLO me\r\n")
    recorder.feed("s2c", b"235 2.7.0 ok\r\n250-hi\r\n250 PIPELINING\r\n")
    recorder.feed("c2s", b"MAIL FROM:<a@x>\r\nRCPT TO:<b@y>\r\nDATA\r\n")
    recorder.feed("s2c", b"250 ok\r\n250 ok\r\n354 go ahead\r\n")
    recorder.feed("c2s", b"Message-ID: <p@x>\r\n\r\nhi\r\n.\r\nQUIT\r\n")
    (data,) = history.events(kind="data")
    assert data.data["message_id"] == "<p@x>" and data.data["complete"]
    client = [e.data["text"] for e in history.events(kind="line") if e.direction == "c2s"]
    assert client == [
        "AUTH PLAIN ****", "EHLO me", "MAIL FROM:<a@x>", "RCPT TO:<b@y>", "DATA", "QUIT",
    ]


def test_refused_pipelined_data_does_not_start_content_mode() -> None:
    history = History()
    recorder = SmtpRecorder(history, "l", 1)
    recorder.feed("c2s", b"MAIL FROM:<a@x>\r\nRCPT TO:<b@y>\r\nDATA\r\n")
    recorder.feed("s2c", b"250 ok\r\n550 no such user\r\n554 no valid recipients\r\n")
    recorder.feed("c2s", b"RSET\r\n")
    assert not history.events(kind="data")
    assert [e.data["text"] for e in history.events(kind="line")][-1] == "RSET"
