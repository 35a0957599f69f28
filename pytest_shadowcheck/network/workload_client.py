"""A lean SMTP client for workloads: many messages per session, one history event each.

:class:`~pytest_shadowcheck.network.client.RecordingClient` opens a session per message
and records every reply: right for a scenario's three messages, too slow and too verbose
for ten thousand. :class:`WorkloadSession` keeps one session open for several
transactions (a new ``MAIL`` after each accepted message, RSET after a refused one),
pipelines the envelope when the server advertises PIPELINING (RFC 2920) and sends the
content in BDAT chunks when asked and the server advertises CHUNKING (RFC 3030): every
reply is read in the order of its command, so a reply is never taken for another's, and
a session that loses its way (no reply, a lost connection, a 421) is ended. It returns the
deciding reply (or why none came) of each transaction; the workload records it as one
``attempt`` event. The wire itself is recorded by the proxy in front of the node, as
for every other step.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_shadowcheck.history import History
from pytest_shadowcheck.network.smtp_text import dot_stuff

__all__ = ["CHUNK", "Outcome", "SessionError", "WorkloadSession"]

#: bytes per BDAT chunk
CHUNK = 64 * 1024


class SessionError(Exception):
    """The session is unusable (refused, closed, timed out): open a new one."""


@dataclass(frozen=True)
class Outcome:
    """How one transaction ended: the deciding reply, or the error instead of one."""

    command: str
    code: int | None
    text: str
    error: str | None
    #: whether the envelope was pipelined, and the content sent with BDAT
    pipelined: bool = False
    bdat: bool = False
    #: recipients the server refused at RCPT: a 250 at the end acknowledges the others
    refused_rcpts: tuple[str, ...] = ()

    @property
    def accepted(self) -> bool:
        return self.code == 250 and self.command == "EOD"


class WorkloadSession:
    """One SMTP session to ``host:port`` for a workload; not safe for concurrent use."""

    def __init__(
        self,
        history: History,
        link: str,
        conn: int,
        host: str,
        port: int,
        *,
        helo: str = "workload.test",
        timeout: float = 10.0,
        numbering: Callable[[Any], int | None] | None = None,
    ) -> None:
        self.history = history
        self.link = link
        #: the session's connection number: the proxy's (``numbering`` gives it for the
        #: session's local address once connected), else ``conn``
        self.conn = conn
        self._numbering = numbering
        self.host, self.port = host, port
        self.helo = helo
        self.timeout = timeout
        self.pipelining = False
        #: the EHLO keywords the server advertised (upper case, without parameters)
        self.extensions: frozenset[str] = frozenset()
        self.transactions = 0
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    @property
    def open(self) -> bool:
        return self._writer is not None and not self._writer.is_closing()

    async def connect(self) -> None:
        """Connect, read the greeting, say EHLO; SessionError when any of it fails."""
        try:
            self._reader, self._writer = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.port), self.timeout
            )
        except (OSError, TimeoutError) as exc:
            raise SessionError(f"connect failed: {exc!r}") from None
        try:
            code, text = await self._read_reply("CONNECT")
        except SessionError:
            self.close()
            raise
        if self._numbering is not None and self._writer is not None:
            # the greeting came through the proxy: it has numbered the session
            self.conn = self._numbering(self._writer.get_extra_info("sockname")) or self.conn
        if code != 220:
            self.close()
            raise SessionError(f"greeting {code} {text}")
        self._write(f"EHLO {self.helo}\r\n".encode())
        try:
            code, text = await self._read_reply("EHLO")
        except SessionError:
            self.close()
            raise
        if code != 250:
            self.close()
            raise SessionError(f"EHLO refused: {code} {text}")
        self.extensions = frozenset(
            line.split()[0].upper() for line in text.splitlines()[1:] if line.split()
        )
        self.pipelining = "PIPELINING" in self.extensions

    async def transaction(
        self,
        mail_from: str,
        rcpt_tos: list[str],
        raw: bytes,
        params: tuple[str, ...] = (),
        *,
        bdat: bool = False,
    ) -> Outcome:
        """MAIL (with ``params``), RCPT..., DATA and the content - or BDAT chunks when
        ``bdat`` and the server offers CHUNKING; the outcome, never an exception.

        After an error (no reply) the session is closed: the caller opens a new one.
        """
        self.transactions += 1
        chunked = bdat and "CHUNKING" in self.extensions
        mail = " ".join([f"MAIL FROM:<{mail_from}>", *params])
        commands = [mail] + [f"RCPT TO:<{r}>" for r in rcpt_tos]
        verbs = ["MAIL"] + ["RCPT"] * len(rcpt_tos)
        if not chunked:
            commands.append("DATA")
            verbs.append("DATA")
        command = "MAIL"
        pipelined = self.pipelining

        replies: list[tuple[str, int, str]] = []

        def outcome(verb: str, code: int | None, text: str, error: str | None = None) -> Outcome:
            answered = [c for v, c, _ in replies if v == "RCPT"]
            refused = tuple(r for r, c in zip(rcpt_tos, answered, strict=False) if c >= 400)
            return Outcome(verb, code, text, error, pipelined, chunked, refused)

        try:
            if pipelined:
                # RFC 2920: the whole envelope at once, then one reply per command in order
                self._write("".join(c + "\r\n" for c in commands).encode())
                for verb in verbs:
                    command = verb
                    replies.append((verb, *await self._read_reply(verb)))
            else:
                for line, verb in zip(commands, verbs, strict=True):
                    command = verb
                    if verb == "DATA" and not any(
                        code < 400 for v, code, _ in replies if v == "RCPT"
                    ):
                        break
                    self._write(line.encode() + b"\r\n")
                    replies.append((verb, *await self._read_reply(verb)))
                    if verb == "MAIL" and replies[-1][1] >= 400:
                        return outcome("MAIL", replies[-1][1], replies[-1][2])
            refused = [r for r in replies if r[1] >= 400]
            rcpt_ok = any(code < 400 for verb, code, _ in replies if verb == "RCPT")
            ready = replies[-1][1] == 354 if not chunked else rcpt_ok and replies[0][1] < 400
            if not ready:
                verb, code, text = refused[0] if refused else replies[-1]
                await self._rset()
                return outcome(verb, code, text)
            if chunked:
                command = "BDAT"
                verb, code, text = await self._chunks(raw)
                if code != 250:
                    await self._rset()
                return outcome(verb, code, text)
            command = "EOD"
            self._write(dot_stuff(raw) + b".\r\n")
            code, text = await self._read_reply("EOD")
            if code != 250:
                # some servers keep the failed transaction open ("nested MAIL command")
                await self._rset()
            return outcome("EOD", code, text)
        except SessionError as exc:
            self.close()
            return outcome(command, None, "", f"{exc} (at {command})")

    async def _chunks(self, raw: bytes) -> tuple[str, int, str]:
        """The content in BDAT chunks (not dot-stuffed: RFC 3030), each reply read
        before the next chunk; the last chunk's reply is the end of data's ("EOD")."""
        size = len(raw)
        for start in range(0, max(size, 1), CHUNK):
            piece = raw[start : start + CHUNK]
            last = start + CHUNK >= size
            self._write(f"BDAT {len(piece)}{' LAST' if last else ''}\r\n".encode() + piece)
            verb = "EOD" if last else "BDAT"
            code, text = await self._read_reply(verb)
            if code != 250 or last:
                return verb, code, text
        raise AssertionError("unreachable: the last chunk returns")

    async def rset(self) -> bool:
        """RSET between transactions; False (and the session closed) when it failed."""
        await self._rset()
        return self.open

    async def quit(self) -> None:
        if self.open:
            with contextlib.suppress(SessionError):
                self._write(b"QUIT\r\n")
                await self._read_reply("QUIT")
        self.close()

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()
        self._writer = self._reader = None

    async def _rset(self) -> None:
        """End a refused transaction; a session that cannot is closed, the outcome kept."""
        try:
            self._write(b"RSET\r\n")
            code, _ = await self._read_reply("RSET")
        except SessionError:
            self.close()
            return
        if code != 250:
            self.close()  # a server that cannot reset the transaction has lost its way

    def _write(self, data: bytes) -> None:
        if self._writer is None or self._writer.is_closing():
            raise SessionError("connection closed")
        self._writer.write(data)

    async def _read_reply(self, verb: str) -> tuple[int, str]:
        """One complete (possibly multi-line) reply: (code, text lines joined by newlines)."""
        if self._reader is None:
            raise SessionError("connection closed")
        lines: list[str] = []
        try:
            # one deadline per reply: wait_for would start a task for every line read,
            # about a tenth of the harness CPU with one message per connection
            async with asyncio.timeout(self.timeout):
                if self._writer is not None:
                    await self._writer.drain()
                while True:
                    raw = await self._reader.readuntil(b"\r\n")
                    line = raw[:-2].decode("utf-8", errors="replace")
                    lines.append(line)
                    if len(line) < 4 or line[3] != "-":
                        break
        except TimeoutError:
            # the caller closes the session: a late reply must never be read as the
            # answer to a later command (a tarpitting server answers refusals late)
            raise SessionError(
                f"no reply to {verb} within {self.timeout:g} s: the session was ended"
            ) from None
        except (asyncio.IncompleteReadError, ConnectionError, OSError) as exc:
            raise SessionError(
                f"connection lost waiting for the reply to {verb}: {exc!r}"
            ) from None
        head = lines[-1][:3]
        if not head.isdigit():
            raise SessionError(f"unparseable reply to {verb}: {lines[-1]!r}")
        if head == "421" and self._writer is not None:
            # the server is closing the session (RFC 5321 3.8): nothing more is sent on it
            self._writer.close()
        return int(head), "\n".join(item[4:] for item in lines)
