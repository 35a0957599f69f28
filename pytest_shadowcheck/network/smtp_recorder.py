"""The SMTP line tracker of one proxied connection: bytes in, history events out.

:class:`SmtpRecorder` follows just enough of a session (which command each reply
answers, DATA content, BDAT chunks, AUTH, STARTTLS) to record its ``line`` and
``data`` events, and to tell the proxy where the protocol points of the session are
(after a command, at, inside or after a reply), where a point fault strikes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any

from pytest_shadowcheck.history import History
from pytest_shadowcheck.network.smtp_text import (
    HEADER_SCAN_LIMIT,
    identity_from_bytes,
    mask_auth_line,
)
from pytest_shadowcheck.scenario.capabilities import POINT_PLACES

__all__ = ["POINT_PLACES", "SmtpRecorder", "Stop"]

#: asked at each point with (place, verb): True stops the feed there
Stop = Callable[[str, str], bool]

# A "line" longer than this without CRLF is recorded truncated: it is not SMTP.
_MAX_LINE = 4096
_DATA_END = b"\r\n.\r\n"


class SmtpRecorder:
    """Turns the byte streams of one connection into ``line`` and ``data`` events.

    Tracks just enough SMTP state: after the client's DATA and the server's 354
    the client's bytes are message content, summarised as one ``data`` event when
    ``\\r\\n.\\r\\n`` arrives; BDAT chunks are skipped by their announced size, and
    the message they carry is one ``data`` event after its LAST chunk;
    after STARTTLS is accepted the stream is opaque; AUTH credentials are masked.
    """

    def __init__(self, history: History, link: str, conn: int) -> None:
        self.history = history
        self.link = link
        self.conn = conn
        self._partial = {"c2s": bytearray(), "s2c": bytearray()}
        #: the client's commands still waiting for their replies, oldest first: with
        #: PIPELINING (RFC 2920) several are in flight and replies pair up in order
        self._awaiting: deque[str] = deque()
        #: the server's first reply came (one to nothing awaited is the greeting)
        self._greeted = False
        self._in_data = False
        self._data_size = 0
        self._data_tail = b""
        self._data_head = bytearray()
        self._bdat_remaining = 0
        self._bdat_size = 0
        #: the message the BDAT chunks carry: its size so far, its first bytes (for the
        #: Message-ID), and whether the chunk being read is its LAST
        self._bdat_total = 0
        self._bdat_last = False
        self._auth_in_progress = False  # the server sent 334: the next client line is credentials
        self._opaque = False
        #: complete message contents the client sent (DATA bodies)
        self.contents = 0
        #: the server sent a reply's first lines ("250-..."), not yet its last
        self._reply_open = False
        #: while feeding: asked at each protocol point whether to stop there
        self._stop: Stop | None = None

    def feed(self, direction: str, chunk: bytes, stop: Stop | None = None) -> int:
        """Record ``chunk``; return how many of its bytes were taken: all of them,
        unless ``stop(place, verb)`` said True at a protocol point (see
        :data:`POINT_PLACES`: a place, relative to a verb, "EOD" for the final dot,
        "CONNECT" for the greeting), where the proxy strikes: bytes past it were not
        recorded and must not be forwarded (feed them again to let them through)."""
        if self._opaque:
            return len(chunk)
        self._stop = stop
        try:
            if direction == "c2s":
                return self._feed_client(chunk)
            return self._feed_lines("s2c", chunk)[0]
        finally:
            self._stop = None

    def flush(self) -> None:
        """Record whatever partial line or content is left when the connection ends."""
        for direction, partial in self._partial.items():
            if partial and not self._opaque:
                self._line(direction, bytes(partial) + b" [incomplete]")
                partial.clear()
        if self._in_data:
            self._record_data(complete=False)

    def _at(self, place: str, verb: str | None) -> bool:
        return self._stop is not None and verb is not None and self._stop(place, verb)

    def _feed_client(self, chunk: bytes) -> int:
        pos = 0
        while pos < len(chunk):
            if self._in_data:
                pos += self._consume_data(chunk[pos:] if pos else chunk)
                if not self._in_data and self._at("after", "EOD"):
                    return pos
            elif self._bdat_remaining:
                part = chunk[pos : pos + self._bdat_remaining]
                self._bdat_remaining -= len(part)
                pos += len(part)
                if len(self._data_head) < HEADER_SCAN_LIMIT:
                    self._data_head += part[: HEADER_SCAN_LIMIT - len(self._data_head)]
                if not self._bdat_remaining:
                    if self._bdat_last:
                        self._record_bdat()
                    if self._at("after", "BDAT"):
                        return pos
            else:
                taken, stopped = self._feed_lines("c2s", chunk[pos:] if pos else chunk)
                pos += taken
                if stopped or self._opaque:
                    return pos if stopped else len(chunk)
        return pos

    def _feed_lines(self, direction: str, chunk: bytes) -> tuple[int, bool]:
        """Record complete lines; return (bytes of ``chunk`` taken, stopped at a point).
        Fewer than all are taken when a line switched the client stream into content
        mode (a BDAT chunk, TLS) or when the proxy strikes at a point."""
        buffer = self._partial[direction]
        base = len(buffer)  # buffer index i is chunk offset i - base
        buffer += chunk
        start = 0
        while True:
            reply_starts = direction == "s2c" and not self._reply_open
            # the first byte of a reply: the point before it
            if (
                reply_starts
                and base <= start < len(buffer)
                and self._at("before_reply", self._answering())
            ):
                return self._stopped(buffer, start, start, base)
            end = buffer.find(b"\r\n", start)
            if end == -1:
                break
            line = bytes(buffer[start:end])
            if direction == "s2c" and _final(line) and self._at("inside_reply", self._answering()):
                # half its last line forwarded (never what an earlier chunk already was)
                cut = max(start + max(1, (end - start) // 2), base)
                return self._stopped(buffer, start, cut, base)
            start = end + 2
            verb = self._line(direction, line)
            if direction == "c2s":
                if self._bdat_remaining or self._opaque:
                    buffer.clear()
                    return start - base, False
                if self._at("after", verb):
                    return self._stopped(buffer, start, start, base)
            elif self._at("after_reply", verb):
                return self._stopped(buffer, start, start, base)
        del buffer[:start]
        if len(buffer) > _MAX_LINE:
            self._line(direction, bytes(buffer[:_MAX_LINE]) + b" [truncated]")
            buffer.clear()
        return len(chunk), False

    @staticmethod
    def _stopped(buffer: bytearray, start: int, cut: int, base: int) -> tuple[int, bool]:
        """Stop at chunk offset ``cut - base``: the bytes of the line begun at ``start``
        up to there stay the partial line (recorded as incomplete if nothing follows)."""
        del buffer[cut:]
        del buffer[:start]
        return cut - base, True

    def _answering(self) -> str | None:
        """The command the server's next reply answers ("CONNECT": the greeting; None:
        a reply to nothing)."""
        if self._awaiting:
            return self._awaiting[0]
        return None if self._greeted else "CONNECT"

    def _line(self, direction: str, raw: bytes) -> str | None:
        """Record one line; return the verb of a client's command, or the verb a
        server's last reply line answered (None for any other line)."""
        text = raw.decode("utf-8", errors="replace")
        verb: str | None
        if direction == "c2s":
            text, verb = self._client_line(text)
        else:
            verb = self._server_line(text)
        self.history.record("line", self.link, self.conn, direction, text=text)
        return verb

    def _client_line(self, text: str) -> tuple[str, str]:
        if self._auth_in_progress:
            # An answer to the server's 334 challenge: credentials, and it gets a reply.
            self._auth_in_progress = False
            self._awaiting.append("AUTH")
            return "****", "AUTH"
        verb = text.split(" ", 1)[0].upper()
        self._awaiting.append(verb)
        if verb == "AUTH":
            return mask_auth_line(text), verb
        if verb == "BDAT":
            parts = text.split()
            if len(parts) >= 2 and parts[1].isdigit():
                if not self._bdat_total:
                    self._data_head = bytearray()  # the first chunk of a message
                self._bdat_size = self._bdat_remaining = int(parts[1])
                self._bdat_total += self._bdat_size
                self._bdat_last = len(parts) >= 3 and parts[2].upper() == "LAST"
                if not self._bdat_remaining and self._bdat_last:
                    self._record_bdat()
        return text, verb

    def _record_bdat(self) -> None:
        """The message a LAST chunk completed (RFC 3030): one ``data`` event, as DATA's."""
        self.contents += 1
        size, self._bdat_total = self._bdat_total, 0
        self._record_content(size, complete=True, bdat=True)

    def _server_line(self, text: str) -> str | None:
        code = text[:3]
        final = len(text) < 4 or text[3] != "-"
        self._reply_open = not final
        if not final:
            return None  # (a line of a longer reply)
        verb = self._answering()
        self._greeted = True
        if not self._awaiting:
            return verb  # the greeting, or a reply to nothing
        self._awaiting.popleft()
        if verb == "AUTH" and code == "334":
            self._auth_in_progress = True
        elif verb == "DATA" and code == "354":
            self._start_data()
        elif verb == "STARTTLS" and code == "220":
            self._opaque = True
            self.history.record(
                "note", self.link, self.conn, text="STARTTLS: session encrypted from here on"
            )
        return verb

    def _start_data(self) -> None:
        self._in_data = True
        self._data_size = 0
        # Pretend a CRLF preceded the content, so an empty body (".\r\n") ends it.
        self._data_tail = b"\r\n"
        self._data_head = bytearray()

    def _consume_data(self, chunk: bytes) -> int:
        """Account content bytes; return how many, up to the end-of-data marker."""
        if len(self._data_head) < HEADER_SCAN_LIMIT:
            self._data_head += chunk[: HEADER_SCAN_LIMIT - len(self._data_head)]
        # Look across the chunk boundary first, then inside the chunk, without
        # copying the chunk (this runs on every chunk of every message).
        tail = self._data_tail
        end = (tail + chunk[:4]).find(_DATA_END)
        if end != -1:
            consumed = end + len(_DATA_END) - len(tail)
        else:
            end = chunk.find(_DATA_END)
            if end == -1:
                self._data_size += len(chunk)
                self._data_tail = (tail + chunk)[-4:] if len(chunk) < 4 else chunk[-4:]
                return len(chunk)
            consumed = end + len(_DATA_END)
        self._data_size += consumed
        self._record_data(complete=True)
        # the final dot is a command of its own: the server's next reply answers it
        self._awaiting.append("EOD")
        return consumed

    def _record_data(self, complete: bool) -> None:
        self._in_data = False
        self.contents += complete
        # Size is the content without the terminating ".\r\n".
        size = max(self._data_size - 3, 0) if complete else self._data_size
        self._record_content(size, complete=complete)

    def _record_content(self, size: int, **details: Any) -> None:
        """One ``data`` event for a message's content (DATA or BDAT), with the Message-ID
        and the harness's trace read from its first bytes."""
        head = bytes(self._data_head)
        self._data_head = bytearray()
        message_id, trace = identity_from_bytes(head)
        if trace:
            details["trace"] = trace
        self.history.record(
            "data", self.link, self.conn, "c2s", size=size, message_id=message_id, **details
        )


def _final(line: bytes) -> bool:
    """The last line of a reply ("250 ok", not "250-more")."""
    return len(line) < 4 or line[3:4] != b"-"
