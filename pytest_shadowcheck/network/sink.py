"""MailSink: a plain SMTP next hop (a mailbox server or a remote MTA) that records
every message it accepts.

The sink runs its own SMTP server (:mod:`.sink_smtp`, replies as aiosmtpd gave them)
on the caller's asyncio loop, on an ephemeral loopback port. It never advertises
XSHADOW: to the transport under test it is an ordinary next hop. Every accepted
message becomes a :class:`Delivery` in :attr:`MailSink.deliveries` and a
``delivery`` event in the history; the ``helo`` of a delivery is the EHLO name the
delivering node used, which tells which node of the cluster delivered it.

Replies can be scripted per stage (MAIL, RCPT, DATA) to make the next hop
temporarily (4xx) or permanently (5xx) refuse, or "hang" (never answer until
the script is cleared or the sink stops), like real servers do: per recipient
(RCPT scripts may name an address or a pattern such as ``*@corp.test``), for a
number of uses (a burst of 4xx, then the normal answer), late (``delay``), or by
closing the session after the final dot with no reply (``close``). Every scripted
answer is a ``note`` event saying what the sink answered to which envelope.
"""

from __future__ import annotations

import asyncio
import contextlib
import fnmatch
import re
import weakref
from collections.abc import Callable
from dataclasses import dataclass
from email.parser import BytesHeaderParser
from email.policy import compat32
from typing import Any

from pytest_shadowcheck.history import History
from pytest_shadowcheck.network.sink_smtp import ACCEPT, CLOSE, HANG, SinkProtocol
from pytest_shadowcheck.network.smtp_text import (
    header_section,
    normalize_message_id,
    trace_from_headers,
)

__all__ = [
    "ACCEPT",
    "CLOSE",
    "HANG",
    "SCRIPT_STAGES",
    "Delivery",
    "MailSink",
    "ScriptedReply",
    "address_matches",
]

SCRIPT_STAGES = ("MAIL", "RCPT", "DATA")


@dataclass(frozen=True)
class Delivery:
    """One message the sink accepted (it answered 250 to the end of DATA).

    ``t``: history time of acceptance. ``message_id``: normalised ("<...>") or
    None. ``helo``: the EHLO/HELO name of the delivering client. ``peer``:
    "host:port" of the delivering socket. ``size``: bytes of the message
    content. ``headers``: first occurrence of each header, by name as written.
    ``raw``: the message content as received (CRLF line endings, un-stuffed).
    ``trace``: the harness's trace header (which message this is), None when the copy
    carries none (the harness did not compose it, or the transport removed it).
    """

    t: float
    message_id: str | None
    mail_from: str
    rcpt_tos: list[str]
    helo: str | None
    peer: str | None
    size: int
    headers: dict[str, str]
    raw: bytes
    trace: str | None = None


@dataclass
class ScriptedReply:
    """A reply the sink gives at ``stage`` instead of its normal one, for
    ``remaining`` more uses (None = until cleared), to the envelope address
    ``match`` names (the recipient at RCPT, the sender at MAIL; None = any), after
    ``delay`` seconds."""

    stage: str
    reply: str
    remaining: int | None = None
    match: str | None = None
    delay: float = 0.0


def address_matches(pattern: str, address: str) -> bool:
    """Whether an envelope address is the one ``pattern`` names, or one of those its
    wildcards (``*``, ``?``) name; case-insensitive, like mail domains."""
    return fnmatch.fnmatchcase(address.lower(), pattern.lower())


class MailSink:
    """An SMTP next hop recording deliveries into ``history``.

    ``name`` identifies the sink ("corp.test", "mbx-db1") in events (``sink``
    key) and in its SMTP greeting. ``link``, if given, is used as the ``link`` of
    its events so they show in excerpts filtered to that link.
    """

    def __init__(self, name: str, history: History, *, link: str | None = None) -> None:
        self.name = name
        self.history = history
        self.link = link
        self.deliveries: list[Delivery] = []
        self._scripts: list[ScriptedReply] = []
        self._release_hangs = asyncio.Event()
        self._delivered = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._address: tuple[str, int] | None = None
        self._sessions: weakref.WeakSet[SinkProtocol] = weakref.WeakSet()

    # -- lifecycle ---------------------------------------------------------------

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> tuple[str, int]:
        """Listen (ephemeral port by default) and return (host, port)."""
        if self._server is not None:
            raise RuntimeError(f"sink {self.name} already started")
        loop = asyncio.get_running_loop()

        def make_session() -> SinkProtocol:
            session = SinkProtocol(self, loop)
            self._sessions.add(session)
            return session

        self._server = await loop.create_server(make_session, host, port)
        bound_host, bound_port = self._server.sockets[0].getsockname()[:2]
        self._address = (bound_host, bound_port)
        return self._address

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) the sink listens on; RuntimeError before :meth:`start`."""
        if self._address is None:
            raise RuntimeError(f"sink {self.name} not started")
        return self._address

    async def stop(self) -> None:
        """Stop listening, release hung replies and close every session."""
        self._release_hangs.set()
        if self._server is not None:
            self._server.close()
        for session in list(self._sessions):
            transport = session.transport
            if transport is not None:
                with contextlib.suppress(Exception):
                    transport.close()
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None

    # -- scripted replies --------------------------------------------------------

    def script(
        self,
        stage: str,
        reply: str,
        times: int | None = None,
        *,
        match: str | None = None,
        delay: float = 0.0,
    ) -> None:
        """From now on, answer ``stage`` ("MAIL", "RCPT", "DATA") with ``reply``
        (e.g. "451 4.3.0 Try later", "550 5.1.1 No such user", "hang", "close", or
        "accept" - the normal answer, late with ``delay``) for ``times`` uses (None =
        until :meth:`clear_script`), only to the address ``match`` names (RCPT: the
        recipient, MAIL: the sender; wildcards allowed), ``delay`` seconds late.

        Several scripts for one stage are used in the order given (e.g. first a
        451 once, then a 550); the first whose ``match`` fits the address is used. A
        DATA script answers after the whole content was received, so "hang" there
        means: message received, never acknowledged; "close": received, and the
        session ended with no reply.
        """
        stage = stage.upper()
        if stage not in SCRIPT_STAGES:
            raise ValueError(f"stage must be one of {SCRIPT_STAGES}, not {stage!r}")
        if reply not in (HANG, ACCEPT, CLOSE) and not (len(reply) >= 3 and reply[:3].isdigit()):
            raise ValueError(
                f"reply must start with a 3-digit SMTP code or be hang, accept or close: {reply!r}"
            )
        if times is not None and times < 1:
            raise ValueError("times must be >= 1 or None")
        if match is not None and stage == "DATA":
            raise ValueError("a DATA script cannot match an address (RCPT and MAIL can)")
        if delay < 0:
            raise ValueError("delay must be >= 0")
        self._scripts.append(ScriptedReply(stage, reply, times, match, delay))
        if reply == HANG:
            self._release_hangs.clear()

    def clear_script(self, stage: str | None = None) -> None:
        """Forget scripted replies (for ``stage`` only, if given) and release
        every hung reply (the hung session then continues normally)."""
        if stage is None:
            self._scripts.clear()
        else:
            self._scripts = [s for s in self._scripts if s.stage != stage.upper()]
        if not any(s.reply == HANG for s in self._scripts):
            self._release_hangs.set()

    @property
    def scripts(self) -> list[ScriptedReply]:
        """The scripted replies still pending, in order of use."""
        return list(self._scripts)

    def _take_script(self, stage: str, address: str | None) -> ScriptedReply | None:
        for scripted in self._scripts:
            if scripted.stage != stage:
                continue
            if scripted.match is not None and not (
                address is not None and address_matches(scripted.match, address)
            ):
                continue
            if scripted.remaining is not None:
                scripted.remaining -= 1
                if scripted.remaining <= 0:
                    self._scripts.remove(scripted)
            return scripted
        return None

    @property
    def release_hangs(self) -> asyncio.Event:
        """Set when no hung reply should wait any longer."""
        return self._release_hangs

    def scripted(self, stage: str, helo: str | None, **details: Any) -> tuple[str, float] | None:
        """The scripted reply to give at ``stage`` now and how many seconds late (noted
        in the history with the envelope it answers), or None for the normal behaviour;
        "hang" means: wait for :attr:`release_hangs` first."""
        address = details.get("rcpt_to") if stage == "RCPT" else details.get("mail_from")
        scripted = self._take_script(stage, address if stage != "DATA" else None)
        if scripted is None:
            return None
        reply, delay = scripted.reply, scripted.delay
        answered = f"{_answer_words(reply, delay)} to {_envelope_words(stage, helo, details)}"
        self.history.record(
            "note",
            self.link,
            sink=self.name,
            text=f"sink {self.name} {answered}",
            stage=stage,
            reply=reply,
            delay=delay,
            helo=helo,
            **details,
        )
        return reply, delay

    # -- deliveries --------------------------------------------------------------

    def headers_of(self, raw: bytes) -> tuple[dict[str, str], str | None]:
        """The headers of a message's content and its normalised Message-ID."""
        headers = _first_headers(raw)
        return headers, normalize_message_id(headers.get("Message-ID"))

    def deliver(
        self,
        *,
        helo: str | None,
        peer: object,
        mail_from: str,
        rcpt_tos: list[str],
        raw: bytes,
        headers: dict[str, str],
    ) -> str:
        """Record an accepted message; the reply to its end of DATA."""
        message_id = normalize_message_id(headers.get("Message-ID"))
        delivery = Delivery(
            t=self.history.now(),
            message_id=message_id,
            mail_from=mail_from,
            rcpt_tos=list(rcpt_tos),
            helo=helo,
            peer=f"{peer[0]}:{peer[1]}" if isinstance(peer, tuple) else None,
            size=len(raw),
            headers=headers,
            raw=raw,
            trace=trace_from_headers(headers),
        )
        self.deliveries.append(delivery)
        self.history.record(
            "delivery",
            self.link,
            sink=self.name,
            message_id=message_id,
            trace=delivery.trace,
            mail_from=delivery.mail_from,
            rcpt_tos=delivery.rcpt_tos,
            helo=delivery.helo,
            peer=delivery.peer,
            size=delivery.size,
            categorised=categorised_by(raw),
        )
        # Wake every waiter, then re-arm for the next delivery.
        self._delivered.set()
        self._delivered = asyncio.Event()
        return f"250 2.6.0 {message_id or 'message'} queued as delivered"

    def deliveries_for(self, message_id: str) -> list[Delivery]:
        """Every delivery of the message with this Message-ID (with or without <>)."""
        wanted = normalize_message_id(message_id)
        return [d for d in self.deliveries if d.message_id == wanted]

    def deliveries_traced(self, traces: set[str]) -> list[Delivery]:
        """Every delivery of the messages with these traces (the harness's identity)."""
        return [d for d in self.deliveries if d.trace in traces]

    def count(self, message_id: str) -> int:
        """How many times the message with this Message-ID was delivered here."""
        return len(self.deliveries_for(message_id))

    async def wait_for(
        self,
        predicate_or_message_id: str | Callable[[list[Delivery]], bool],
        timeout: float,
    ) -> bool:
        """Wait until a message is delivered, or a condition holds; True if it did
        within ``timeout`` seconds, False otherwise (never raises on timeout).

        A string waits for at least one delivery of that Message-ID. A callable
        is called with the list of deliveries so far after each delivery (and at
        once) and should return True when satisfied.
        """
        if isinstance(predicate_or_message_id, str):
            message_id = predicate_or_message_id

            def satisfied() -> bool:
                return self.count(message_id) > 0

        else:
            predicate = predicate_or_message_id

            def satisfied() -> bool:
                return bool(predicate(list(self.deliveries)))

        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while not satisfied():
            remaining = deadline - loop.time()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._delivered.wait(), remaining)
        return True


def _answer_words(reply: str, delay: float) -> str:
    late = f" after {delay:g}s" if delay else ""
    if reply == HANG:
        return "held its answer (hang)"
    if reply == CLOSE:
        return f"closed the session{late} without a reply"
    if reply == ACCEPT:
        return f"answered as usual{late}"
    return f"answered {reply}{late}"


def _envelope_words(stage: str, helo: str | None, details: dict[str, Any]) -> str:
    """Which command of which envelope a scripted answer went to, as a mail admin says it."""
    sender = f"<{details.get('mail_from') or ''}>"
    who = f" from {helo}" if helo else ""
    if stage == "MAIL":
        return f"MAIL FROM:{sender}{who}"
    if stage == "RCPT":
        return f"RCPT TO:<{details.get('rcpt_to')}> (sender {sender}){who}"
    recipients = ", ".join(details.get("rcpt_tos") or [])
    message = details.get("message_id") or "a message without Message-ID"
    return f"the end of DATA of {message} (sender {sender}, for {recipients}){who}"


_STAMP = re.compile(rb"^X-Categorized-By:[ \t]*([^;\s]+)", re.IGNORECASE | re.MULTILINE)


def categorised_by(raw: bytes) -> list[str]:
    """The nodes every ``X-Categorized-By`` stamp of ``raw`` names, top first (the
    categoriser's stamp, docs/protocol.md: how SN-11's categorisation shows)."""
    return [m.decode("ascii", "replace") for m in _STAMP.findall(header_section(raw))]


def _first_headers(raw: bytes) -> dict[str, str]:
    """First occurrence of every header of ``raw``, keyed by the name as written."""
    section = header_section(raw)
    plain = _plain_headers(section)
    headers = plain if plain is not None else _parsed_headers(section)
    if "Message-ID" not in headers:
        # Header names are case-insensitive; expose the usual spelling too.
        for name, value in list(headers.items()):
            if name.lower() == "message-id":
                headers["Message-ID"] = value
                break
    return headers


def _parsed_headers(section: bytes) -> dict[str, str]:
    parsed = BytesHeaderParser(policy=compat32).parsebytes(section)
    headers: dict[str, str] = {}
    for name, value in parsed.items():
        headers.setdefault(name, str(value))
    return headers


_HEADER_NAME = re.compile(r"[\x21-\x39\x3b-\x7e]+:")


def _plain_headers(section: bytes) -> dict[str, str] | None:
    """What :func:`_parsed_headers` gives, for the common case only: ASCII, CRLF line
    ends, a blank line at the end, every line a header or its continuation, no
    ``From `` line; None for anything else. The email parser was a sixth of the sink's
    CPU (benchmarks/bench_harness.py); tests/network/test_sink_parity.py compares."""
    if not section.endswith(b"\r\n\r\n") or not section.isascii():
        return None
    body = section[:-4]
    if b"\r" in body.replace(b"\r\n", b"") or b"\n" in body.replace(b"\r\n", b""):
        return None
    headers: dict[str, str] = {}
    name: str | None = None
    value: list[str] = []
    for line in body.decode("ascii").split("\r\n"):
        if line[:1] in (" ", "\t"):
            if name is None:
                return None
            value.append(line)
            continue
        match = None if line.startswith("From ") else _HEADER_NAME.match(line)
        if match is None:
            return None
        if name is not None:
            headers.setdefault(name, "\r\n".join(value).rstrip("\r\n"))
        name = line[: match.end() - 1]
        value = [line[match.end() :].lstrip(" \t")]
    if name is not None:
        headers.setdefault(name, "\r\n".join(value).rstrip("\r\n"))
    return headers
