"""A reply that comes late is never taken for the answer to a later command.

A tarpitting server (Postfix's ``smtpd_error_sleep_time``, Exim's ACL delays) answers
every refusal late on purpose. The server here, on a real loopback socket, answers in
order and names the command in every reply it gives, so the pairing the client
recorded can be read off each reply: it refuses late, by more than the client's
read timeout in the first half of each test, by less in the second.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from pytest_shadowcheck.history import History
from pytest_shadowcheck.network.client import RecordingClient, make_message
from pytest_shadowcheck.network.workload_client import WorkloadSession

Run = Callable[..., Any]
LINK = "client->mbx1"
#: how late every refusal comes; the short read timeout is below it, the long one above
DELAY = 0.8
SHORT, LONG = 0.3, 3.0


class Tarpit:
    """An SMTP-ish server that answers every 4xx/5xx ``DELAY`` seconds late, in order."""

    def __init__(self, greeting_delay: float = 0.0) -> None:
        self.received: list[list[str]] = []
        self.greeting_delay = greeting_delay

    def answer(self, text: str, state: dict[str, int]) -> str:
        verb = text.split(" ", 1)[0].upper()
        if verb == "EHLO":
            return "250-tarpit.test EHLO ok\r\n250 PIPELINING"
        if verb in ("MAIL", "RSET"):
            state["rcpts"] = 0
            return f"250 2.0.0 {verb} ok"
        if verb == "RCPT":
            if "bad@" in text:
                return "550 5.1.1 RCPT refused: no such user"
            state["rcpts"] += 1
            return "250 2.1.5 RCPT ok"
        if verb == "DATA":
            return "354 DATA go ahead" if state["rcpts"] else "554 5.5.1 DATA: no recipients"
        if verb == "NOOP":
            return "250 2.0.0 NOOP ok"
        if verb == "QUIT":
            return "221 2.0.0 QUIT bye"
        return f"500 5.5.1 {verb} not recognised"

    async def serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        received: list[str] = []
        self.received.append(received)
        state = {"rcpts": 0}
        in_data = False
        with contextlib.suppress(ConnectionError):
            await asyncio.sleep(self.greeting_delay)
            writer.write(b"220 tarpit.test CONNECT ready\r\n")
            while line := await reader.readline():
                text = line.decode(errors="replace").rstrip("\r\n")
                if in_data:
                    if text != ".":
                        continue
                    in_data, reply = False, "250 2.0.0 EOD queued"
                else:
                    received.append(text)
                    reply = self.answer(text, state)
                if reply[0] in "45":
                    await asyncio.sleep(DELAY)  # the tarpit
                writer.write(reply.encode() + b"\r\n")
                await writer.drain()
                in_data = reply.startswith("354")
                if reply.startswith("221"):
                    break
        writer.close()


@asynccontextmanager
async def tarpit(greeting_delay: float = 0.0) -> AsyncIterator[tuple[Tarpit, tuple[str, int]]]:
    server = Tarpit(greeting_delay)
    listener = await asyncio.start_server(server.serve, "127.0.0.1", 0)
    try:
        yield server, listener.sockets[0].getsockname()[:2]
    finally:
        listener.close()
        await listener.wait_closed()


def paired(history: History) -> list[tuple[str, int]]:
    """(command, code) of every reply the client recorded, each checked to be the
    reply to that command: the server names the command in each of its replies."""
    found = []
    for event in history.events(kind="reply", link=LINK):
        command, text = event.data["command"], event.data["text"]
        assert command in text, f"the reply `{text}` was recorded as the answer to {command}"
        found.append((command, event.data["code"]))
    return found


LINES = [b"EHLO client.test\r\n", b"XSHADOW mbx2\r\n", b"NOOP\r\n", b"QUIT\r\n"]


def test_raw_session_ends_at_a_late_reply_and_records_the_rest_as_not_sent(
    run: Run, history: History
) -> None:
    client = RecordingClient(history, LINK)

    async def scenario() -> Tarpit:
        async with tarpit() as (server, address):
            replies = await client.raw_session(*address, LINES, read_timeout=SHORT)
            # the refusal would have come now: nothing is there to read it
            await asyncio.sleep(DELAY + 0.2)
        assert [(r.command, r.outcome) for r in replies] == [
            ("CONNECT", "reply"), ("EHLO", "reply"), ("XSHADOW", "timeout"),
        ]  # fmt: skip
        assert replies[-1].waited == SHORT
        return server

    server = run(scenario())
    assert paired(history) == [("CONNECT", 220), ("EHLO", 250)]
    assert server.received == [["EHLO client.test", "XSHADOW mbx2"]]
    (close,) = history.events(kind="close", link=LINK)
    assert close.data["reason"] == (
        f"no reply to XSHADOW within {SHORT:g} s: the harness ended the session"
    )
    (note,) = history.events(kind="note", link=LINK)
    assert note.data["text"] == f"not sent ({close.data['reason']}): NOOP / QUIT"


def test_raw_session_sends_nothing_after_a_late_greeting(run: Run, history: History) -> None:
    client = RecordingClient(history, LINK)

    async def scenario() -> Tarpit:
        async with tarpit(greeting_delay=DELAY) as (server, address):
            replies = await client.raw_session(*address, LINES, read_timeout=SHORT)
            await asyncio.sleep(DELAY + 0.2)
        assert [(r.command, r.outcome) for r in replies] == [("CONNECT", "timeout")]
        return server

    server = run(scenario())
    # the greeting was not read as the answer to EHLO: EHLO was never said
    assert server.received == [[]] and paired(history) == []
    (note,) = history.events(kind="note", link=LINK)
    assert note.data["text"] == (
        f"not sent (no greeting within {SHORT:g} s: the harness ended the session): "
        "EHLO client.test / XSHADOW mbx2 / NOOP / QUIT"
    )


def test_raw_session_waits_for_each_late_reply(run: Run, history: History) -> None:
    client = RecordingClient(history, LINK)
    content = make_message(subject="late")
    lines = [LINES[0], b"XSHADOW mbx2\r\n", b"MAIL FROM:<a@ext.test>\r\n",
             b"RCPT TO:<bad@corp.test>\r\n", b"RCPT TO:<alice@corp.test>\r\n", b"DATA\r\n",
             content + b".\r\n", b"NOOP\r\n", b"QUIT\r\n"]  # fmt: skip

    async def scenario() -> None:
        async with tarpit() as (_, address):
            replies = await client.raw_session(*address, lines, read_timeout=LONG)
        assert [r.outcome for r in replies] == ["reply"] * 10

    run(scenario())
    assert paired(history) == [
        ("CONNECT", 220), ("EHLO", 250), ("XSHADOW", 500), ("MAIL", 250), ("RCPT", 550),
        ("RCPT", 250), ("DATA", 354), ("EOD", 250), ("NOOP", 250), ("QUIT", 221),
    ]  # fmt: skip
    assert not history.events(kind="note", link=LINK)


def test_send_ends_at_a_late_refusal_or_waits_for_it(run: Run, history: History) -> None:
    client = RecordingClient(history, LINK)
    rcpts = ["bad@corp.test", "alice@corp.test"]

    async def scenario() -> None:
        async with tarpit() as (server, address):
            hasty = await client.send(*address, "a@ext.test", rcpts, make_message(), timeout=SHORT)
            assert not hasty.accepted and hasty.last_command == "RCPT"
            assert hasty.error == (
                f"no reply to RCPT within {SHORT:g} s (timeout): the session was ended"
            )
            await asyncio.sleep(DELAY + 0.2)
            # the hasty session never said the second RCPT: it ended at the first
            assert server.received[0][-1] == "RCPT TO:<bad@corp.test>"
            patient = await client.send(*address, "a@ext.test", rcpts, make_message(), timeout=LONG)
            assert patient.accepted and patient.refused_recipients == ["bad@corp.test"]

    run(scenario())
    first = [("CONNECT", 220), ("EHLO", 250), ("MAIL", 250)]
    assert paired(history) == [
        *first, *first, ("RCPT", 550), ("RCPT", 250), ("DATA", 354), ("EOD", 250), ("QUIT", 221),
    ]  # fmt: skip


def test_workload_session_ends_at_a_late_reply_or_waits_for_it(
    run: Run, history: History
) -> None:
    async def scenario() -> None:
        async with tarpit() as (server, address):
            hasty = WorkloadSession(history, LINK, 1, *address, timeout=SHORT)
            await hasty.connect()
            assert hasty.pipelining
            refused = await hasty.transaction("a@ext.test", ["bad@corp.test"], make_message())
            assert refused.code is None and refused.command == "RCPT"
            assert refused.error == (
                f"no reply to RCPT within {SHORT:g} s: the session was ended (at RCPT)"
            )
            assert not hasty.open
            patient = WorkloadSession(history, LINK, 2, *address, timeout=LONG)
            await patient.connect()
            # a refusal, then the next transaction of the same session: each its own reply
            refused = await patient.transaction("a@ext.test", ["bad@corp.test"], make_message())
            assert (refused.command, refused.code, refused.error) == ("RCPT", 550, None)
            accepted = await patient.transaction("a@ext.test", ["alice@corp.test"], make_message())
            assert accepted.accepted and accepted.text == "2.0.0 EOD queued"
            await patient.quit()
            received = server.received[1]
            assert received == [
                "EHLO workload.test", "MAIL FROM:<a@ext.test>", "RCPT TO:<bad@corp.test>",
                "DATA", "RSET", "MAIL FROM:<a@ext.test>", "RCPT TO:<alice@corp.test>", "DATA",
                "QUIT",
            ]  # fmt: skip

    run(scenario())
