"""The mail sink's SMTP server: a plain :class:`asyncio.Protocol`, no streams, no task
per session.

It speaks what aiosmtpd 1.4 spoke for the sink before (``hostname=<sink name>``,
``ident="shadowcheck sink"``, ``enable_SMTPUTF8=True``, ``data_size_limit=None``, no
TLS, no AUTH): the same greeting, EHLO keywords, replies, error texts and limits, byte
for byte (tests/network/test_sink_parity.py runs the same conversations through both).
Why not aiosmtpd itself: with one message per connection its per-session set-up
(``inspect.getmembers`` over the handler and itself, a stream reader, a task) and its
line-by-line DATA loop were most of the harness's CPU (benchmarks/bench_harness.py).

What a session needs from the sink is the :class:`SinkHooks` protocol: a scripted
reply per stage (with how long to wait before giving it), the event that releases hung
replies, and recording a delivery.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Awaitable, Callable
from email._header_value_parser import get_addr_spec, get_angle_addr
from email.errors import HeaderParseError
from typing import Any, Protocol, cast

from pytest_shadowcheck.network.smtp_text import trace_from_headers

__all__ = ["ACCEPT", "CLOSE", "HANG", "SinkHooks", "SinkProtocol", "getaddr"]

HANG = "hang"
"""Scripted reply meaning: never answer (until the script is cleared or the sink stops)."""
CLOSE = "close"
"""Scripted reply meaning: end the session without a reply (after the final dot: the
message was received, and the sender never learns whether it was taken)."""
ACCEPT = "accept"
"""Scripted reply meaning: the normal answer (only useful with a delay: a slow reply)."""

IDENT = "shadowcheck sink"
#: aiosmtpd's limits: RFC 5321 4.5.3.1.6 (998 octets + CRLF + a stuffed dot) for any
#: line, 512 for a command (MAIL: +10 once SMTPUTF8 is advertised by EHLO)
LINE_LIMIT = 1001
COMMAND_LIMIT = 512
MAIL_LIMIT_EXTENDED = COMMAND_LIMIT + 10
BOGUS_LIMIT = 5
IDLE_TIMEOUT = 300.0

# Reply texts, as aiosmtpd words them.
BAD_SYNTAX = "500 Error: bad syntax"
TOO_LONG = "500 Command line too long"
DATA_LINE_TOO_LONG = "500 Line too long (see RFC5321 4.5.3.1.6)"
TOO_MANY_BOGUS = "502 5.5.1 Too many unrecognized commands, goodbye."
MALFORMED = "553 5.1.3 Error: malformed address"
NEED_MAIL = "503 Error: need MAIL command"
NEED_RCPT = "503 Error: need RCPT command"
NESTED_MAIL = "503 Error: nested MAIL command"
START_DATA = "354 End data with <CR><LF>.<CR><LF>"
VRFY_OK = "252 Cannot VRFY user, but will accept message and attempt delivery"
NO_TLS_AUTH = "538 5.7.11 Encryption required for requested authentication mechanism"
#: HELP's syntax lines (ESMTP adds the second part); STARTTLS is hidden without TLS
SYNTAX = {
    "AUTH": ("AUTH <mechanism>", ""),
    "DATA": ("DATA", ""),
    "EHLO": ("EHLO hostname", ""),
    "HELO": ("HELO hostname", ""),
    "HELP": ("HELP [command]", ""),
    "MAIL": ("MAIL FROM: <address>", " [SP <mail-parameters>]"),
    "NOOP": ("NOOP [ignored]", ""),
    "QUIT": ("QUIT", ""),
    "RCPT": ("RCPT TO: <address>", " [SP <mail-parameters>]"),
    "RSET": ("RSET", ""),
    "VRFY": ("VRFY <address>", ""),
}
COMMANDS = frozenset([*SYNTAX, "STARTTLS", "EXPN"])

#: the plain ``<local@domain>`` of nearly every MAIL FROM / RCPT TO: no quoting, no
#: comments, no source route - anything else goes to the RFC 5322 parser aiosmtpd uses
_PLAIN_ADDRESS = re.compile(r"\s*<([A-Za-z0-9.!#$%&'*+/=?^_`{|}~-]+@[A-Za-z0-9.-]+)>\s*(.*)", re.S)


def getaddr(arg: str) -> tuple[str | None, str | None]:
    """(address, rest) of a MAIL/RCPT argument as aiosmtpd reads it; (None, None) if
    unparseable. The regular expression is the cheap path for the common form."""
    if not arg:
        return "", ""
    plain = _PLAIN_ADDRESS.fullmatch(arg)
    if plain is not None:
        return plain.group(1), plain.group(2)
    parse = get_angle_addr if arg.lstrip().startswith("<") else get_addr_spec
    try:
        address, rest = parse(arg)
    except HeaderParseError:
        return None, None
    return str(address.addr_spec), str(rest)


def _params(options: list[str]) -> dict[str, str | bool] | None:
    """ESMTP parameters, or None when one is malformed (RFC 1869)."""
    result: dict[str, str | bool] = {}
    for option in options:
        name, eq, value = option.partition("=")
        if not name.isalnum() or (eq and not value):
            return None
        result[name] = value if eq else True
    return result


def unstuff(body: bytes) -> bytes:
    """The content of a DATA body (CRLF-terminated lines, stuffed): a leading dot off
    every line (RFC 5321 4.5.2)."""
    body = body.replace(b"\r\n.", b"\r\n")
    return body[1:] if body.startswith(b".") else body


def _has_long_line(body: bytes) -> bool:
    if len(body) <= LINE_LIMIT:
        return False
    # a line of more than LINE_LIMIT octets with its CRLF
    return any(len(line) > LINE_LIMIT - 2 for line in body.split(b"\r\n"))


class SinkHooks(Protocol):
    """What a session asks of its sink."""

    name: str

    @property
    def release_hangs(self) -> asyncio.Event: ...

    def scripted(
        self, stage: str, helo: str | None, **details: Any
    ) -> tuple[str, float] | None: ...

    def deliver(
        self,
        *,
        helo: str | None,
        peer: object,
        mail_from: str,
        rcpt_tos: list[str],
        raw: bytes,
        headers: dict[str, str],
    ) -> str: ...

    def headers_of(self, raw: bytes) -> tuple[dict[str, str], str | None]: ...


class SinkProtocol(asyncio.Protocol):
    """One SMTP session of a sink: commands split on LF, DATA on CRLF, like aiosmtpd.

    Input is processed as it arrives; a hung scripted reply parks the session (input
    is kept) until the sink releases it.
    """

    def __init__(self, sink: SinkHooks, loop: asyncio.AbstractEventLoop) -> None:
        self.sink = sink
        self.loop = loop
        self.transport: asyncio.Transport | None = None
        self.peer: object = None
        self.helo: str | None = None
        self.extended = False
        self._buffer = bytearray()
        self._in_data = False
        self._scan = 0  # where to look for the end of DATA next
        self._skipping = False  # inside an over-long command line
        self._bogus = BOGUS_LIMIT
        self._waiting: asyncio.Task[None] | None = None
        self._last_command = 0.0
        self._timer: asyncio.TimerHandle | None = None
        self._reset()

    def _reset(self) -> None:
        self.mail_from: str | None = None
        self.rcpt_tos: list[str] = []

    # -- transport callbacks -------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)  # uvloop's is not a subclass
        self.peer = transport.get_extra_info("peername")
        self._last_command = self.loop.time()
        self._timer = self.loop.call_later(IDLE_TIMEOUT, self._idle)
        self.push(f"220 {self.sink.name} {IDENT}")

    def connection_lost(self, exc: Exception | None) -> None:
        self.transport = None
        if self._timer is not None:
            self._timer.cancel()
        if self._waiting is not None:
            self._waiting.cancel()

    def eof_received(self) -> bool:
        return False  # close: like aiosmtpd, a half-closed client ends the session

    def data_received(self, data: bytes) -> None:
        self._buffer += data
        if self._waiting is None:
            self._process()

    def _idle(self) -> None:
        # one timer per session, re-armed lazily: commands only note their time
        if self.transport is None:
            return
        left = self._last_command + IDLE_TIMEOUT - self.loop.time()
        if left > 0:
            self._timer = self.loop.call_later(left, self._idle)
        else:
            self.transport.close()

    def push(self, reply: str) -> None:
        if self.transport is not None:
            self.transport.write(reply.encode() + b"\r\n")

    def _close(self) -> None:
        if self.transport is not None:
            self.transport.close()
            self.transport = None

    # -- input ---------------------------------------------------------------------

    def _process(self) -> None:
        buffer = self._buffer
        while self._waiting is None and self.transport is not None and buffer:
            if self._in_data:
                if not self._data(buffer):
                    return
                continue
            end = buffer.find(b"\n")
            if end < 0:
                if len(buffer) > LINE_LIMIT:  # keep no more than a line's worth
                    self._skipping = True
                    buffer.clear()
                return
            line = bytes(buffer[:end]).rstrip(b"\r\n")
            del buffer[: end + 1]
            if self._skipping or end > LINE_LIMIT:
                self._skipping = False
                self.push(TOO_LONG)
                continue
            try:
                self._command(line)
            except Exception as error:  # a bug here answers like aiosmtpd's handler
                self.push(f"500 Error: ({error.__class__.__name__}) {error}")

    def _data(self, buffer: bytearray) -> bool:
        """Take a complete DATA body off ``buffer``; False while it is incomplete."""
        if buffer.startswith(b".\r\n"):
            body, consumed = b"", 3
        else:
            end = buffer.find(b"\r\n.\r\n", self._scan)
            if end < 0:
                self._scan = max(0, len(buffer) - 4)
                return False
            body, consumed = bytes(buffer[: end + 2]), end + 5
        del buffer[:consumed]
        self._in_data = False
        self._scan = 0
        if _has_long_line(body):
            self._reset()
            self.push(DATA_LINE_TOO_LONG)
            return True
        self._end_of_data(unstuff(body))
        return True

    def _command(self, line: bytes) -> None:
        if not line:
            self.push(BAD_SYNTAX)
            return
        verb_bytes, _, arg_bytes = line.partition(b" ")
        try:
            verb = verb_bytes.upper().decode("ascii")
        except UnicodeDecodeError:
            self.push(BAD_SYNTAX)
            return
        arg = arg_bytes.strip().decode("utf-8", "surrogateescape") if arg_bytes else None
        limit = MAIL_LIMIT_EXTENDED if self.extended and verb == "MAIL" else COMMAND_LIMIT
        if len(line) > limit:
            self.push(TOO_LONG)
            return
        if verb not in COMMANDS:
            self._bogus -= 1
            if self._bogus < 1:
                self.push(TOO_MANY_BOGUS)
                self._close()
                return
            self.push(f'500 Error: command "{verb}" not recognized')
            return
        self._last_command = self.loop.time()
        getattr(self, f"smtp_{verb}")(arg)

    def _park(self, then: Callable[[], None]) -> None:
        """A hung reply: wait for the sink's release, then go on as if unscripted."""
        self._after(self.sink.release_hangs.wait(), then)

    def _after(self, event: Awaitable[Any], then: Callable[[], None]) -> None:
        """``then()`` once ``event`` is done, the session's input kept meanwhile."""

        async def wait() -> None:
            await event
            self._waiting = None
            if self.transport is None or self.transport.is_closing():
                return  # the sink stopped: nothing more happens in this session
            try:
                then()
            except Exception as error:
                self.push(f"500 Error: ({error.__class__.__name__}) {error}")
            if self._waiting is None:
                self._process()

        self._waiting = self.loop.create_task(wait())

    # -- commands (the names follow aiosmtpd's smtp_VERB) ------------------------------

    def smtp_HELO(self, arg: str | None) -> None:
        if not arg:
            self.push("501 Syntax: HELO hostname")
            return
        self._reset()
        self.extended = False
        self.helo = arg
        self.push(f"250 {self.sink.name}")

    def smtp_EHLO(self, arg: str | None) -> None:
        if not arg:
            self.push("501 Syntax: EHLO hostname")
            return
        self._reset()
        self.extended = True
        self.helo = arg
        self.push(f"250-{self.sink.name}\r\n250-8BITMIME\r\n250-SMTPUTF8\r\n250 HELP")

    def smtp_NOOP(self, arg: str | None) -> None:
        self.push("250 OK")

    def smtp_QUIT(self, arg: str | None) -> None:
        if arg:
            self.push("501 Syntax: QUIT")
            return
        self.push("221 Bye")
        self._close()

    def smtp_STARTTLS(self, arg: str | None) -> None:
        self.push("501 Syntax: STARTTLS" if arg else "454 TLS not available")

    def smtp_AUTH(self, arg: str | None) -> None:
        if not self.helo:
            self.push("503 Error: send EHLO first")
        elif not self.extended:
            self.push("500 Error: command 'AUTH' not recognized")
        else:
            self.push(NO_TLS_AUTH)

    def smtp_EXPN(self, arg: str | None) -> None:
        self.push("502 EXPN not implemented")

    def smtp_HELP(self, arg: str | None) -> None:
        code = 250
        if arg:
            syntax = SYNTAX.get(arg.upper())
            if syntax is not None:
                self.push("250 Syntax: " + syntax[0] + (syntax[1] if self.extended else ""))
                return
            code = 501
        self.push(f"{code} Supported commands: {' '.join(sorted(SYNTAX))}")

    def smtp_VRFY(self, arg: str | None) -> None:
        if not arg:
            self.push("501 Syntax: VRFY <address>")
        elif getaddr(arg)[0] is None:
            self.push("502 Could not VRFY " + arg)
        else:
            self.push(VRFY_OK)

    def smtp_RSET(self, arg: str | None) -> None:
        if arg:
            self.push("501 Syntax: RSET")
            return
        self._reset()
        self.push("250 OK")

    def _envelope_address(self, arg: str | None, keyword: str, syntax: str) -> tuple[str, str]:
        """(address, options) of MAIL/RCPT, or ("", reply) when refused."""
        if self.extended:
            syntax += " [SP <mail-parameters>]"
        if arg is None or arg[: len(keyword)].upper() != keyword:
            return "", syntax
        address, rest = getaddr(arg[len(keyword) :].strip())
        if address is None:
            return "", MALFORMED
        if not address or (not self.extended and rest):
            return "", syntax
        return address, rest or ""

    def smtp_MAIL(self, arg: str | None) -> None:
        if not self.helo:
            self.push("503 Error: send HELO first")
            return
        syntax = "501 Syntax: MAIL FROM: <address>"
        address, rest = self._envelope_address(arg, "FROM:", syntax)
        if not address:
            self.push(rest)
            return
        if self.mail_from:
            self.push(NESTED_MAIL)
            return
        refusal = _mail_params_refusal(_params(rest.upper().split()))
        if refusal is not None:
            self.push(refusal or syntax + (" [SP <mail-parameters>]" if self.extended else ""))
            return

        def accept() -> None:
            self.mail_from = address
            self.push("250 2.1.0 Sender OK")

        self._staged("MAIL", accept, mail_from=address)

    def smtp_RCPT(self, arg: str | None) -> None:
        if not self.helo:
            self.push("503 Error: send HELO first")
            return
        if not self.mail_from:
            self.push(NEED_MAIL)
            return
        syntax = "501 Syntax: RCPT TO: <address>"
        address, rest = self._envelope_address(arg, "TO:", syntax)
        if not address:
            self.push(rest)
            return
        params = _params(rest.upper().split())
        if params is None:
            self.push(syntax + (" [SP <mail-parameters>]" if self.extended else ""))
        elif params:
            self.push("555 RCPT TO parameters not recognized or not implemented")
        else:

            def accept() -> None:
                self.rcpt_tos.append(address)
                self.push("250 2.1.5 Recipient OK")

            self._staged("RCPT", accept, mail_from=self.mail_from, rcpt_to=address)

    def smtp_DATA(self, arg: str | None) -> None:
        if not self.helo:
            self.push("503 Error: send HELO first")
        elif not self.rcpt_tos:
            self.push(NEED_RCPT)
        elif arg:
            self.push("501 Syntax: DATA")
        else:
            self._in_data = True
            self.push(START_DATA)

    def _end_of_data(self, raw: bytes) -> None:
        mail_from, rcpt_tos = self.mail_from or "", self.rcpt_tos
        self._reset()
        headers, message_id = self.sink.headers_of(raw)

        def accept() -> None:
            self.push(
                self.sink.deliver(
                    helo=self.helo,
                    peer=self.peer,
                    mail_from=mail_from,
                    rcpt_tos=rcpt_tos,
                    raw=raw,
                    headers=headers,
                )
            )

        self._staged(
            "DATA",
            accept,
            message_id=message_id,
            mail_from=mail_from,
            rcpt_tos=list(rcpt_tos),
            trace=trace_from_headers(headers),
        )

    def _staged(self, stage: str, accept: Callable[[], None], **details: Any) -> None:
        """The scripted reply for ``stage`` if any, else ``accept()``; a hang defers it,
        a delay holds the answer (and the rest of the session's input) that long."""
        scripted = self.sink.scripted(stage, self.helo, **details)
        if scripted is None:
            accept()
            return
        reply, delay = scripted

        def answer() -> None:
            if reply == ACCEPT:
                accept()
            elif reply == CLOSE:
                self._close()
            elif reply == HANG:
                self._park(accept)
            else:
                self.push(reply)

        if delay > 0:
            self._hold(delay, answer)
        else:
            answer()

    def _hold(self, delay: float, then: Callable[[], None]) -> None:
        """A slow reply: ``then()`` after ``delay`` seconds, input kept meanwhile."""
        self._after(asyncio.sleep(delay), then)


def _mail_params_refusal(params: dict[str, str | bool] | None) -> str | None:
    """Why MAIL's parameters are refused ("" = the syntax reply), None if they are fine.
    The sink advertises 8BITMIME and SMTPUTF8 and no SIZE limit, as aiosmtpd did."""
    if params is None:
        return ""
    params = dict(params)
    if params.pop("BODY", "7BIT") not in ("7BIT", "8BITMIME"):
        return "501 Error: BODY can only be one of 7BIT, 8BITMIME"
    if not isinstance(params.pop("SMTPUTF8", False), bool):
        return "501 Error: SMTPUTF8 takes no arguments"
    size = params.pop("SIZE", None)
    if size and (isinstance(size, bool) or not size.isdigit()):
        return ""
    if params:
        return "555 MAIL FROM parameters not recognized or not implemented"
    return None
