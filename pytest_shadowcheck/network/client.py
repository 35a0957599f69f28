"""RecordingClient: the harness's SMTP sender, recording every reply it gets.

:meth:`RecordingClient.send` drives one SMTP transaction step by step with
aiosmtplib (CONNECT, EHLO, MAIL, RCPT..., DATA, end of data, QUIT) and records
each reply in the history as a ``reply`` event with ``command``, ``code``,
``enhanced`` (RFC 3463 code such as "4.4.0", or None) and ``text``. Failures -
refused connection, timeouts, 4xx/5xx replies, disconnects - come back as a
:class:`SendResult`, never as exceptions, because checks must reason about them.

``command`` values: "CONNECT" (the greeting), "EHLO", "MAIL", "RCPT", "DATA"
(the reply to the DATA command itself, normally 354), "EOD" (the reply after
the message content: the one that accepts or refuses the message), "QUIT".
Raw sessions record the first word of the line sent (upper-cased; "EOD" for
what follows a 354: the content).

A reply is always the answer to its own command. Servers may answer late on
purpose (tarpitting a misbehaving client: Postfix's ``smtpd_error_sleep_time``,
Exim's ACL delays), so when a reply does not come within the read timeout the
client never reads on in that session - a late reply would be taken for the
answer to the next command. It closes the connection instead and records why;
what was left to say is recorded as not sent.

For protocol abuse: :meth:`RecordingClient.raw_session` sends exact bytes,
:meth:`RecordingClient.vanish_mid_data` leaves in the middle of DATA, and
:meth:`RecordingClient.idle_session` goes quiet and records when the server
closes the session.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import socket
import struct
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from email.message import EmailMessage
from typing import Any

from aiosmtplib import (
    SMTP,
    SMTPException,
    SMTPRecipientRefused,
    SMTPResponse,
    SMTPResponseException,
    SMTPServerDisconnected,
    SMTPTimeoutError,
)

from pytest_shadowcheck.history import History
from pytest_shadowcheck.network.smtp_text import (
    dot_stuff,
    mask_auth_line,
    message_id_from_bytes,
    parse_enhanced_code,
)

__all__ = [
    "IdleResult",
    "RawReply",
    "RecordingClient",
    "Reply",
    "SendResult",
    "VanishResult",
    "make_message",
    "new_message_id",
]

_QUIT_TIMEOUT = 5.0


@dataclass(frozen=True)
class Reply:
    """One reply the client received: to ``command``, at history time ``t``."""

    command: str
    code: int
    enhanced: str | None
    text: str
    t: float


@dataclass
class SendResult:
    """Outcome of :meth:`RecordingClient.send`.

    ``accepted``: the server answered 250 after the message content. ``code``,
    ``enhanced``, ``text``: the deciding reply (the end-of-data reply, or the
    reply that stopped the transaction; None/"" when no reply came). ``error``:
    what went wrong without a reply (connection refused, timeout, disconnect),
    else None. ``message_id``: the Message-ID of the message sent.
    ``refused_recipients``: recipients refused at RCPT (others may have been
    accepted). ``last_command``: the command the transaction stopped at.
    ``deciding_reply``: the :class:`Reply` behind ``code`` (its ``t`` is when the
    verdict arrived; ``replies[-1]`` may be the later QUIT reply), or None.
    """

    accepted: bool
    code: int | None
    enhanced: str | None
    text: str
    replies: list[Reply]
    error: str | None
    message_id: str | None
    refused_recipients: list[str] = field(default_factory=list)
    last_command: str | None = None
    deciding_reply: Reply | None = None

    @property
    def temporary_failure(self) -> bool:
        """True for a 4xx deciding reply (the sender should retry)."""
        return self.code is not None and 400 <= self.code < 500

    @property
    def permanent_failure(self) -> bool:
        """True for a 5xx deciding reply."""
        return self.code is not None and self.code >= 500


@dataclass(frozen=True)
class RawReply:
    """What came back after sending ``sent`` (None: the greeting) in a raw session.

    ``outcome``: "reply" (``code`` and ``lines`` set), "timeout" (nothing complete
    within ``waited`` seconds; ``lines`` holds any partial reply; the client then
    ended the session, so no later line was sent), or "closed" (the server closed
    or reset the connection). ``command``: what the reply answers, as the
    history's ``reply`` event names it ("CONNECT" for the greeting, "EOD" after
    message content).
    """

    sent: bytes | None
    outcome: str
    code: int | None
    lines: list[str]
    t: float
    command: str = ""
    waited: float = 0.0


@dataclass(frozen=True)
class VanishResult:
    """Outcome of :meth:`RecordingClient.vanish_mid_data`.

    ``replies``: every reply up to the 354. ``sent_bytes``: content bytes sent
    before leaving. ``reached_data``: the server did answer 354 (False: it
    refused earlier and no content was sent). ``server_closed_at``: for
    how="idle", the history time the server closed the session, or None.
    """

    replies: list[RawReply]
    message_id: str | None
    sent_bytes: int
    reached_data: bool
    how: str
    server_closed_at: float | None = None


@dataclass(frozen=True)
class IdleResult:
    """Outcome of :meth:`RecordingClient.idle_session`.

    ``closed_by_server``: the server closed the session within the idle time.
    ``closed_at``: history time it did (None if it did not). ``idle_for``:
    seconds between going idle and the close (or the end of the wait).
    ``replies``: the greeting, the EHLO reply and anything the server said while
    we were idle (e.g. "421 4.4.2 timeout").
    """

    closed_by_server: bool
    closed_at: float | None
    idle_for: float
    replies: list[RawReply]


def new_message_id(domain: str = "shadowcheck.test") -> str:
    """A fresh, globally unique Message-ID in angle brackets."""
    return f"<{uuid.uuid4().hex}@{domain}>"


def make_message(
    message_id: str | None = None,
    subject: str = "shadowcheck test message",
    body: str = "This message was sent by the shadowcheck conformance harness.\n",
    size: int | None = None,
    headers: dict[str, str] | None = None,
    *,
    mail_from: str = "sender@ext.test",
    to: str = "alice@corp.test",
) -> bytes:
    """Build a test message (CRLF line endings) and return its bytes.

    A unique Message-ID is generated when none is given (read it back with
    :func:`~pytest_shadowcheck.network.smtp_text.message_id_from_bytes` or from
    :attr:`SendResult.message_id`). ``size``: pad the body with filler lines
    so the whole message is at least that many bytes. ``headers``: extra or
    overriding headers.
    """
    fields: dict[str, str] = {
        "From": mail_from,
        "To": to,
        "Subject": subject,
        "Date": email.utils.formatdate(localtime=False),
        "Message-ID": message_id or new_message_id(),
        "MIME-Version": "1.0",
        "Content-Type": "text/plain; charset=utf-8",
        # the default bodies carry 8-bit UTF-8 text as is (RFC 6152 8BITMIME)
        "Content-Transfer-Encoding": "8bit",
    }
    fields.update(headers or {})
    head = "".join(f"{name}: {value}\r\n" for name, value in fields.items()).encode()
    text = body.replace("\r\n", "\n").replace("\n", "\r\n").encode("utf-8")
    if text and not text.endswith(b"\r\n"):
        text += b"\r\n"
    raw = head + b"\r\n" + text
    if size is not None and len(raw) < size:
        filler = b"shadowcheck filler line to reach the requested message size.....\r\n"
        missing = size - len(raw)
        raw += filler * (missing // len(filler)) + b"x" * max(missing % len(filler) - 2, 0)
        if not raw.endswith(b"\r\n"):
            raw += b"\r\n"
    return raw


class RecordingClient:
    """SMTP client that records every reply it receives into ``history``.

    ``link`` names where it sends ("client->mbx1"). Its events carry the
    connection number ``numbering`` gives the session's local address (the
    proxy's own number for it, so client and proxy lines of one session share
    it); without one, or for an address it does not know, each session this
    client opens gets its next number (1, 2, ...).
    """

    def __init__(
        self,
        history: History,
        link: str = "client",
        numbering: Callable[[Any], int | None] | None = None,
    ) -> None:
        self.history = history
        self.link = link
        self._numbering = numbering
        self._sessions = 0

    def _next_conn(self) -> int:
        self._sessions += 1
        return self._sessions

    def _numbered(self, conn: int, local: Any) -> int:
        """The proxy's number for the session from ``local`` (host, port), else ``conn``."""
        number = self._numbering(local) if self._numbering is not None else None
        return conn if number is None else number

    def _reply(self, conn: int, command: str, code: int, text: str) -> Reply:
        enhanced = parse_enhanced_code(text)
        event = self.history.record(
            "reply",
            self.link,
            conn,
            "s2c",
            command=command,
            code=code,
            enhanced=enhanced,
            text=text,
        )
        return Reply(command, code, enhanced, text, event.t)

    def _closed(self, conn: int, reason: str) -> float:
        return self.history.record("close", self.link, conn, reason=reason, side="client").t

    # -- a normal transaction ----------------------------------------------------

    async def send(
        self,
        host: str,
        port: int,
        mail_from: str,
        rcpt_tos: list[str],
        message: bytes | EmailMessage,
        *,
        helo: str = "client.test",
        timeout: float = 30.0,
    ) -> SendResult:
        """Send one message in one session and report how it went.

        ``timeout`` bounds the wait for each reply (and the connect); a reply
        that does not come in time ends the session (``error`` says which). The
        transaction continues after refused recipients as long as one was
        accepted. QUIT is sent on a best-effort basis and does not change the
        result.
        """
        raw = bytes(message) if isinstance(message, EmailMessage) else message
        message_id = message_id_from_bytes(raw)
        conn = self._next_conn()
        replies: list[Reply] = []
        refused: list[str] = []
        command = "CONNECT"
        smtp = SMTP(hostname=host, port=port, local_hostname=helo, timeout=timeout, start_tls=False)

        def result(accepted: bool, error: str | None = None) -> SendResult:
            # The deciding reply is the last one before QUIT (QUIT never decides).
            deciding = [r for r in replies if r.command != "QUIT"]
            last = deciding[-1] if deciding and error is None else None
            return SendResult(
                accepted=accepted,
                code=last.code if last else None,
                enhanced=last.enhanced if last else None,
                text=last.text if last else "",
                replies=replies,
                error=error,
                message_id=message_id,
                refused_recipients=refused,
                last_command=command,
                deciding_reply=last,
            )

        def record(response: SMTPResponse) -> None:
            replies.append(self._reply(conn, command, response.code, response.message))

        try:
            greeting = await smtp.connect()
            # the greeting came through the proxy: it has numbered the session
            conn = self._numbered(conn, smtp.get_transport_info("sockname"))
            record(greeting)
            command = "EHLO"
            record(await smtp.ehlo())
            command = "MAIL"
            record(await smtp.mail(mail_from))
            command = "RCPT"
            for recipient in rcpt_tos:
                try:
                    record(await smtp.rcpt(recipient))
                except SMTPRecipientRefused as exc:
                    replies.append(self._reply(conn, command, exc.code, exc.message))
                    refused.append(recipient)
            if len(refused) == len(rcpt_tos):
                await self._quit(smtp, conn, replies)
                return result(False)
            command = "DATA"
            data_reply = await smtp.execute_command(b"DATA")
            record(data_reply)
            if data_reply.code != 354:
                await self._quit(smtp, conn, replies)
                return result(False)
            command = "EOD"
            record(await self._send_content(smtp, raw, timeout))
            accepted = replies[-1].code == 250
            await self._quit(smtp, conn, replies)
            return result(accepted)
        except SMTPResponseException as exc:
            replies.append(self._reply(conn, command, exc.code, exc.message))
            await self._quit(smtp, conn, replies)
            return result(False)
        except SMTPTimeoutError:
            # closed below, never read on: a late reply is not the next command's
            error = f"no reply to {command} within {timeout:g} s (timeout): the session was ended"
        except (SMTPServerDisconnected, ConnectionError) as exc:
            error = f"connection lost at {command}: {exc}"
        except (SMTPException, OSError) as exc:
            error = f"{type(exc).__name__} at {command}: {exc}"
        finally:
            smtp.close()
        self._closed(conn, error)
        return result(False, error)

    @staticmethod
    async def _send_content(smtp: SMTP, raw: bytes, timeout: float) -> SMTPResponse:
        """Send the message content and the final dot; return the server's reply.

        Done here rather than with ``SMTP.data`` so the 354 and the final reply
        are recorded separately.
        """
        protocol = smtp.protocol
        if protocol is None:
            raise SMTPServerDisconnected("connection lost before the message content")
        protocol.write(dot_stuff(raw) + b".\r\n")
        try:
            return await protocol.read_response(timeout=timeout)
        except (SMTPServerDisconnected, SMTPTimeoutError):
            smtp.close()
            raise

    async def _quit(self, smtp: SMTP, conn: int, replies: list[Reply]) -> None:
        """Say goodbye if still connected; failures here do not matter."""
        if not smtp.is_connected:
            return
        with contextlib.suppress(SMTPException, OSError):
            response = await smtp.execute_command(b"QUIT", timeout=_QUIT_TIMEOUT)
            replies.append(self._reply(conn, "QUIT", response.code, response.message))

    # -- protocol abuse ----------------------------------------------------------

    async def raw_session(
        self,
        host: str,
        port: int,
        lines: list[bytes],
        read_timeout: float = 5.0,
        *,
        linger: float = 0.0,
        keepalive: float | None = None,
    ) -> list[RawReply]:
        """Connect, read the greeting, then send each element of ``lines`` exactly
        as given (include the CRLF yourself; send a whole DATA body as one
        element) and read one reply after each. Returns the greeting followed by
        one :class:`RawReply` per element sent (then anything said while
        lingering); stops early when the server closes, or when a reply does not
        come within ``read_timeout`` (a "timeout" RawReply: the client ends the
        session there and records the elements it did not send as a ``note``). A
        refused connection gives a single "closed" RawReply.

        ``linger``: afterwards, stay connected up to that many seconds waiting
        for the server to close the session (e.g. an inactivity limit, TO-1),
        silent, or sending NOOP every ``keepalive`` seconds (a session that is
        never idle, which only an absolute limit ends).
        """
        conn = self._next_conn()
        try:
            session = await _RawSession.open(self, conn, host, port, read_timeout)
        except OSError as exc:
            t = self._closed(conn, f"connect failed: {exc!r}")
            return [RawReply(None, "closed", None, [], t, "CONNECT")]
        try:
            for index, line in enumerate(lines):
                if session.closed:
                    if session.gave_up is not None:
                        self._not_sent(conn, session, lines[index:])
                    break
                await session.exchange(line, read_timeout)
            if linger and not session.closed:
                await session.linger(linger, keepalive, read_timeout)
        finally:
            session.close("client finished")
        return session.replies

    def _not_sent(self, conn: int, session: _RawSession, lines: list[bytes]) -> None:
        """Record the lines a session that gave up on a reply never sent."""
        shown = [
            mask_auth_line(line.split(b"\r\n", 1)[0].decode(errors="replace"))
            if line.count(b"\r\n") <= 1
            else f"(message content, {len(line)} bytes)"
            for line in lines
        ]
        self.history.record(
            "note",
            self.link,
            session.conn,
            text=f"not sent ({session.gave_up}): " + " / ".join(shown),
        )

    async def vanish_mid_data(
        self,
        host: str,
        port: int,
        mail_from: str,
        rcpt_tos: list[str],
        message: bytes,
        *,
        send_bytes: int | None = None,
        how: str = "close",
        idle_seconds: float = 0.0,
        helo: str = "client.test",
        timeout: float = 10.0,
    ) -> VanishResult:
        """Start a transaction, send only ``send_bytes`` of the content (default:
        half) after the 354, then leave: how="close" (FIN), "reset" (RST) or
        "idle" (stay silent up to ``idle_seconds`` and record when the server
        closes, then close). The message is never completed.
        """
        if how not in ("close", "reset", "idle"):
            raise ValueError(f"how must be 'close', 'reset' or 'idle', not {how!r}")
        content = dot_stuff(message)
        cut = len(content) // 2 if send_bytes is None else min(send_bytes, len(content))
        message_id = message_id_from_bytes(message)
        conn = self._next_conn()
        try:
            session = await _RawSession.open(self, conn, host, port, timeout)
        except OSError as exc:
            t = self._closed(conn, f"connect failed: {exc!r}")
            refused = RawReply(None, "closed", None, [], t, "CONNECT")
            return VanishResult([refused], message_id, 0, False, how)
        commands = [f"EHLO {helo}", f"MAIL FROM:<{mail_from}>"]
        commands += [f"RCPT TO:<{rcpt}>" for rcpt in rcpt_tos] + ["DATA"]
        reached_data = False
        for line in commands:
            reply = await session.exchange(line.encode() + b"\r\n", timeout)
            if reply.code is None or reply.code >= 400:
                break
            reached_data = line == "DATA" and reply.code == 354
        closed_at: float | None = None
        if not reached_data:
            session.close("client gave up before DATA")
            return VanishResult(session.replies, message_id, 0, False, how)
        await session.write(content[:cut])
        if how == "idle":
            closed_at = await session.wait_for_close(idle_seconds)
        reason = f"client vanished mid-DATA after {cut} bytes ({how})"
        session.close(reason, rst=how == "reset")
        return VanishResult(session.replies, message_id, cut, True, how, closed_at)

    async def idle_session(
        self,
        host: str,
        port: int,
        idle_seconds: float,
        *,
        helo: str | None = "client.test",
    ) -> IdleResult:
        """Open a session (greeting, then EHLO unless ``helo`` is None), go idle,
        and wait up to ``idle_seconds`` for the server to close it (e.g.
        ConnectionInactivityTimeout, TO-1). The close is recorded as a ``close``
        event; we close ourselves when the wait ends."""
        conn = self._next_conn()
        try:
            session = await _RawSession.open(self, conn, host, port, idle_seconds or 5.0)
        except OSError as exc:
            t = self._closed(conn, f"connect failed: {exc!r}")
            return IdleResult(True, t, 0.0, [RawReply(None, "closed", None, [], t, "CONNECT")])
        if helo is not None and not session.closed:
            await session.exchange(f"EHLO {helo}\r\n".encode(), idle_seconds or 5.0)
        went_idle = self.history.now()
        closed_at = None if session.closed else await session.wait_for_close(idle_seconds)
        if session.closed and closed_at is None and session.gave_up is None:
            closed_at = session.closed_at
        ended = closed_at if closed_at is not None else self.history.now()
        session.close("client stopped waiting")
        return IdleResult(closed_at is not None, closed_at, ended - went_idle, session.replies)


class _RawSession:
    """A plain socket session for abuse tests: exact bytes out, replies recorded."""

    def __init__(
        self,
        client: RecordingClient,
        conn: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
    ) -> None:
        self.client = client
        self.conn = conn
        self.reader = reader
        self.writer = writer
        self.replies: list[RawReply] = []
        self.closed = False
        self.closed_at: float | None = None
        #: why the client ended the session waiting for a reply, or None
        self.gave_up: str | None = None
        self._buffer = b""
        #: the last reply was 354: what is sent next is message content
        self._content_next = False

    @classmethod
    async def open(
        cls, client: RecordingClient, conn: int, host: str, port: int, timeout: float
    ) -> _RawSession:
        reader, writer = await asyncio.wait_for(asyncio.open_connection(host, port), timeout)
        session = cls(client, conn, reader, writer)
        greeting = await session.read_reply(None, "CONNECT", timeout)
        if greeting.outcome == "timeout":
            session.give_up(greeting)
        return session

    async def write(self, data: bytes) -> bool:
        """Send bytes; False if the connection is already gone."""
        try:
            self.writer.write(data)
            await self.writer.drain()
            return True
        except ConnectionError:
            self._server_closed("connection lost while sending")
            return False

    async def exchange(self, line: bytes, timeout: float) -> RawReply:
        """Send ``line`` and read its reply; after a timeout the session is over."""
        if self._content_next:
            verb = "EOD"
        else:
            verb = line.split(b" ", 1)[0].strip().decode(errors="replace").upper() or "(empty)"
        if not await self.write(line):
            reply = RawReply(line, "closed", None, [], self.client.history.now(), verb)
            self.replies.append(reply)
            return reply
        reply = await self.read_reply(line, verb, timeout)
        self._content_next = reply.code == 354
        if reply.outcome == "timeout":
            self.give_up(reply)
        return reply

    def give_up(self, reply: RawReply) -> None:
        """No reply within the read timeout: end the session. Reading on would take
        the late reply for the answer to the next line (a tarpitting server answers
        errors seconds late on purpose)."""
        what = "greeting" if reply.sent is None else f"reply to {reply.command}"
        self.gave_up = f"no {what} within {reply.waited:g} s: the harness ended the session"
        self.close(self.gave_up)

    async def read_reply(self, sent: bytes | None, verb: str, timeout: float) -> RawReply:
        """Read one complete (possibly multi-line) reply, or note timeout/close."""
        history = self.client.history
        lines: list[str] = []
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while True:
            newline = self._buffer.find(b"\r\n")
            if newline != -1:
                line = self._buffer[:newline].decode("utf-8", errors="replace")
                self._buffer = self._buffer[newline + 2 :]
                lines.append(line)
                if len(line) < 4 or line[3] != "-":
                    code = int(line[:3]) if line[:3].isdigit() else None
                    text = "\n".join(item[4:] for item in lines)
                    if sent is None:
                        # the greeting came through the proxy: it has numbered the session
                        local = self.writer.get_extra_info("sockname")
                        self.conn = self.client._numbered(self.conn, local)
                    if code is not None:
                        t = self.client._reply(self.conn, verb, code, text).t
                    else:
                        t = history.record(
                            "note", self.client.link, self.conn, text=f"unparseable reply: {line!r}"
                        ).t
                    reply = RawReply(sent, "reply", code, lines, t, verb)
                    break
                continue
            remaining = deadline - loop.time()
            if remaining <= 0:
                reply = RawReply(sent, "timeout", None, lines, history.now(), verb, timeout)
                break
            try:
                chunk = await asyncio.wait_for(self.reader.read(4096), remaining)
            except TimeoutError:
                continue
            except ConnectionError:
                chunk = b""
            if not chunk:
                closed = self._server_closed("server closed")
                reply = RawReply(sent, "closed", None, lines, closed, verb)
                break
            self._buffer += chunk
        self.replies.append(reply)
        return reply

    async def wait_for_close(self, seconds: float) -> float | None:
        """Stay silent up to ``seconds``; return the history time the server
        closed the session, or None. Replies it sends meanwhile are kept."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not self.closed:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return None
            reply = await self.read_reply(None, "(idle)", remaining)
            if reply.outcome == "timeout":
                self.replies.remove(reply)
                return None
        return self.closed_at

    async def linger(self, seconds: float, keepalive: float | None, read_timeout: float) -> None:
        """Stay connected up to ``seconds`` or until the server closes; with
        ``keepalive``, send NOOP every that many seconds meanwhile."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + seconds
        while not self.closed:
            remaining = deadline - loop.time()
            if remaining <= 0:
                return
            if keepalive is None:
                await self.wait_for_close(remaining)
                return
            await self.wait_for_close(min(keepalive, remaining))
            if not self.closed and loop.time() < deadline:
                # its own reply, however late: a NOOP is never left unanswered
                await self.exchange(b"NOOP\r\n", read_timeout)

    def _server_closed(self, reason: str) -> float:
        if not self.closed:
            self.closed = True
            self.closed_at = self.client._closed(self.conn, reason)
        assert self.closed_at is not None
        return self.closed_at

    def close(self, reason: str, rst: bool = False) -> None:
        if not self.closed:
            self.closed = True
            self.closed_at = self.client._closed(self.conn, reason)
        if rst:
            sock: Any = self.writer.get_extra_info("socket")
            if sock is not None:
                with contextlib.suppress(OSError):
                    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            self.writer.transport.abort()
        else:
            self.writer.close()
