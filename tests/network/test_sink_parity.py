"""The sink's own SMTP server answers what aiosmtpd answered for it, byte for byte.

Each conversation goes, pipelined, to the sink and to an aiosmtpd server set up as the
sink used to be (same hostname, ident, SMTPUTF8, no size limit, the same replies from its
MAIL/RCPT/DATA hooks); every reply, and every message either accepts (envelope and
content, byte-exact), must be the same. The conversation also goes in 7-byte pieces, so
that lines, and the end of DATA, arrive split.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import pytest
from aiosmtpd.smtp import SMTP, Envelope, Session

from pytest_shadowcheck.history import History
from pytest_shadowcheck.network.sink import MailSink, _first_headers
from pytest_shadowcheck.network.smtp_text import normalize_message_id

Run = Callable[..., Any]
Accepted = tuple[str, list[str], bytes]


class _OldSinkHandler:
    """The hooks the sink gave aiosmtpd (before its own server), minus the scripts."""

    def __init__(self) -> None:
        self.accepted: list[Accepted] = []

    async def handle_MAIL(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list
    ) -> str:
        envelope.mail_from = address
        envelope.mail_options.extend(options)
        return "250 2.1.0 Sender OK"

    async def handle_RCPT(
        self, server: SMTP, session: Session, envelope: Envelope, address: str, options: list
    ) -> str:
        envelope.rcpt_tos.append(address)
        envelope.rcpt_options.extend(options)
        return "250 2.1.5 Recipient OK"

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        raw = envelope.original_content or b""
        self.accepted.append((str(envelope.mail_from), list(envelope.rcpt_tos), raw))
        message_id = normalize_message_id(_first_headers(raw).get("Message-ID"))
        return f"250 2.6.0 {message_id or 'message'} queued as delivered"


async def _talk(address: tuple[str, int], conversation: bytes, piece: int | None) -> bytes:
    """Send ``conversation`` (whole, or in ``piece``-byte writes) and read until the
    server closes (every conversation ends with QUIT or a forced goodbye)."""
    reader, writer = await asyncio.open_connection(*address)
    if piece is None:
        writer.write(conversation)
    else:
        for start in range(0, len(conversation), piece):
            writer.write(conversation[start : start + piece])
            await writer.drain()
            await asyncio.sleep(0)
    await writer.drain()
    received = await reader.read()
    writer.close()
    return received


async def _through_aiosmtpd(conversation: bytes, piece: int | None) -> tuple[bytes, list[Accepted]]:
    handler = _OldSinkHandler()
    loop = asyncio.get_running_loop()
    server = await loop.create_server(
        lambda: SMTP(
            handler,
            hostname="corp.test",
            ident="shadowcheck sink",
            enable_SMTPUTF8=True,
            data_size_limit=None,
            loop=loop,
        ),
        "127.0.0.1",
        0,
    )
    try:
        replies = await _talk(server.sockets[0].getsockname()[:2], conversation, piece)
    finally:
        server.close()
        await server.wait_closed()
    return replies, handler.accepted


async def _through_sink(conversation: bytes, piece: int | None) -> tuple[bytes, list[Accepted]]:
    sink = MailSink("corp.test", History())
    try:
        replies = await _talk(await sink.start(), conversation, piece)
    finally:
        await sink.stop()
    return replies, [(d.mail_from, d.rcpt_tos, d.raw) for d in sink.deliveries]


def _lines(*lines: bytes | str) -> bytes:
    return b"".join((line.encode() if isinstance(line, str) else line) + b"\r\n" for line in lines)


BODY = _lines(
    "From: a@ext.test",
    "Message-ID: <p1@ext.test>",
    "Subject: =?utf-8?q?caf=C3=A9?=",
    "",
    ".leading dot",
    "..two dots",
    ".",  # stuffed to "..": not the end
    b"8-bit: caf\xc3\xa9, latin-1 \xe9, nul \x00 and a lone \r and \n inside",
    "x" * 998,  # the longest a line may be
    "",
)
TRANSACTION = [b"MAIL FROM:<a@ext.test>", b"RCPT TO:<alice@corp.test>", b"DATA"]


def _stuffed(body: bytes) -> bytes:
    lines = body.split(b"\r\n")
    return b"\r\n".join(b"." + line if line.startswith(b".") else line for line in lines)


CONVERSATIONS = {
    "message": _lines(b"EHLO mbx1", *TRANSACTION) + _stuffed(BODY) + _lines(".", "QUIT"),
    "two messages, RSET, HELO": _lines(
        "EHLO mbx1", *TRANSACTION[:2], "RSET", *TRANSACTION
    ) + _stuffed(BODY) + _lines(".", "HELO mbx2", *TRANSACTION, ".", "QUIT"),
    "empty content, lower case, null sender": _lines(
        "ehlo mbx1", "mail from:<>", "rcpt to:<bob@corp.test>", "data", ".",
        *TRANSACTION, "..starts with a dot", ".", "QUIT",
    ),
    "before HELO": _lines(
        "MAIL FROM:<a@b.test>", "RCPT TO:<a@b.test>", "DATA", "AUTH PLAIN", "NOOP",
        "VRFY <a@b.test>", "HELP", "RSET", "QUIT",
    ),
    "envelope errors": _lines(
        "EHLO mbx1", "", "RCPT TO:<a@b.test>", "DATA", "MAIL", "MAIL TO:<a@b.test>",
        "MAIL FROM:", "MAIL FROM:<a@b.test", "MAIL FROM:<\"quoted local\"@b.test>",
        "MAIL FROM:<a@b.test>", "MAIL FROM:<c@b.test>", "RCPT", "RCPT FROM:<a@b.test>",
        "RCPT TO:<@route:x@b.test>", "RCPT TO:<x@b.test> NOTIFY=NEVER", "RCPT TO:<x@b.test> X=",
        "RCPT TO:bare@b.test", "DATA now", "RSET", "MAIL FROM:<a@b.test> BODY=8BITMIME SIZE=10",
        "RSET", "MAIL FROM:<a@b.test> SMTPUTF8", "RSET", "MAIL FROM:<a@b.test> BODY=BINARYMIME",
        "MAIL FROM:<a@b.test> SIZE=big", "MAIL FROM:<a@b.test> SMTPUTF8=yes",
        "MAIL FROM:<a@b.test> FOO=bar", "MAIL FROM:<a@b.test> =x", "QUIT now", "QUIT",
    ),
    "HELO has no parameters": _lines(
        "HELO mbx1", "MAIL FROM:<a@b.test> BODY=8BITMIME", "MAIL FROM:<a@b.test>",
        "RCPT TO:<x@b.test> NOTIFY=NEVER", "AUTH PLAIN", "HELP MAIL", "QUIT",
    ),
    "other verbs": _lines(
        "EHLO", "HELO", "EHLO  mbx1  ", "HELP", "HELP mail", "HELP EXPN", "HELP nope", "EXPN x",
        "STARTTLS", "STARTTLS now", "AUTH PLAIN", "VRFY", "VRFY <a@b.test>", "VRFY <a@b",
        "NOOP anything", "RSET x", b"\xffHELO", b"MAIL FROM:<j\xc3\xb6rg@b.test>", " ", "QUIT",
    ),
    "bare LF commands": b"EHLO mbx1\nMAIL FROM:<a@b.test>\nRCPT TO:<x@b.test>\nQUIT\n",
    "long lines": _lines(
        "EHLO mbx1", "NOOP " + "x" * 600, "NOOP " + "x" * 3000,
        # MAIL may be 10 longer after EHLO: 555 for the first, too long the second
        "MAIL FROM:<a@b.test> " + "X" * 495, "MAIL FROM:<a@b.test> " + "X" * 505,
        *TRANSACTION, "y" * 1000, "z", ".", *TRANSACTION, "w" * 5000, ".",
        *TRANSACTION, "x" * 999, ".", "QUIT",
    ),
    "too many unknown commands": _lines("EHLO mbx1", *["XYZZY"] * 5),  # then closed
}  # fmt: skip


@pytest.mark.parametrize("piece", [None, 7], ids=["whole", "7-byte pieces"])
@pytest.mark.parametrize("name", list(CONVERSATIONS))
def test_the_sink_answers_and_records_what_aiosmtpd_did(
    run: Run, name: str, piece: int | None
) -> None:
    conversation = CONVERSATIONS[name]
    old_replies, old_accepted = run(_through_aiosmtpd(conversation, piece))
    new_replies, new_accepted = run(_through_sink(conversation, piece))
    assert new_replies.decode("utf-8", "replace").splitlines() == (
        old_replies.decode("utf-8", "replace").splitlines()
    )
    assert new_accepted == old_accepted
    assert new_replies.startswith(b"220 corp.test shadowcheck sink\r\n")


def test_the_messages_arrive_unstuffed_and_byte_exact(run: Run) -> None:
    # the parity above would pass if both got it wrong the same way
    _, accepted = run(_through_sink(CONVERSATIONS["message"], None))
    assert accepted == [("a@ext.test", ["alice@corp.test"], BODY)]


PLAIN_SECTIONS = [
    b"From: a@ext.test\r\nMessage-ID: <p1@ext.test>\r\nSubject: hi\r\n\r\n",
    b"Subject:   spaced\t \r\nX-Empty:\r\nX-Tab:\tv\r\nsubject: second\r\n\r\n",
    b"Subject: folded\r\n  over\r\n\tthree lines\r\nTo: b@c\r\n\r\n",
    b"X-Fold-Only:\r\n next line\r\nmessage-id: <lower@x>\r\n\r\n",
    b"Received: from a by b; Mon, 1 Jan 2024 00:00:00 +0000\r\nA:b:c\r\n\r\n",
]
#: not plain: left to the email parser
OTHER_SECTIONS = [
    b"From someone Mon Jan 1\r\nSubject: unixfrom\r\n\r\n",
    b" continued first\r\nSubject: x\r\n\r\n",
    b"Subject: no colon next\r\nnot a header\r\nTo: b@c\r\n\r\n",
    b"Subject: bare\nTo: lf@x\n\n",
    b"Subject: lone \r cr\r\n\r\n",
    b"Subject: caf\xc3\xa9\r\n\r\n",
    b": empty name\r\nSubject: x\r\n\r\n",
    b"Subject: no blank line\r\n",
]


@pytest.mark.parametrize("section", PLAIN_SECTIONS + OTHER_SECTIONS)
def test_the_sinks_header_fast_path_reads_what_the_email_parser_reads(section: bytes) -> None:
    from pytest_shadowcheck.network.sink import _parsed_headers, _plain_headers

    plain = _plain_headers(section)
    assert (plain is not None) == (section in PLAIN_SECTIONS)
    if plain is not None:
        assert plain == _parsed_headers(section)
