"""The SMTP line tracker of one proxied connection: bytes in, history events out.

:class:`SmtpRecorder` follows just enough of a session (which command each reply
answers, DATA content, BDAT chunks, AUTH, STARTTLS) to record its ``line`` and
``data`` events, and to tell the proxy where the protocol points of the session are
(after a command, at, inside or after a reply), where a point fault strikes.
"""

from __future__ import annotations

from collections import deque
from typing import Any

from pytest_shadowcheck.history import History
from pytest_shadowcheck.network.smtp_text import (
    HEADER_SCAN_LIMIT,
    mask_auth_line,
    message_id_from_bytes,
)

__all__ = ["SmtpRecorder"]

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

    def feed(self, direction: str, chunk: bytes) -> None:
        if self._opaque:
            return
        if direction == "c2s":
            self._feed_client(chunk)
        else:
            self._feed_lines("s2c", chunk)

    def flush(self) -> None:
        """Record whatever partial line or content is left when the connection ends."""
        for direction, partial in self._partial.items():
            if partial and not self._opaque:
                self._line(direction, bytes(partial) + b" [incomplete]")
                partial.clear()
        if self._in_data:
            self._record_data(complete=False)

    def _feed_client(self, chunk: bytes) -> None:
        while chunk:
            if self._in_data:
                chunk = self._consume_data(chunk)
            elif self._bdat_remaining:
                taken = chunk[: self._bdat_remaining]
                self._bdat_remaining -= len(taken)
                chunk = chunk[len(taken) :]
                if len(self._data_head) < HEADER_SCAN_LIMIT:
                    self._data_head += taken[: HEADER_SCAN_LIMIT - len(self._data_head)]
                if not self._bdat_remaining and self._bdat_last:
                    self._record_bdat()
            else:
                chunk = self._feed_lines("c2s", chunk)

    def _feed_lines(self, direction: str, chunk: bytes) -> bytes:
        """Record complete lines; return bytes left over when a line switched the
        client stream into content mode (DATA body, BDAT chunk, TLS)."""
        buffer = self._partial[direction]
        buffer += chunk
        start = 0
        while True:
            end = buffer.find(b"\r\n", start)
            if end == -1:
                break
            line = bytes(buffer[start:end])
            start = end + 2
            self._line(direction, line)
            if direction == "c2s" and (self._bdat_remaining or self._opaque):
                rest = bytes(buffer[start:])
                buffer.clear()
                return rest if not self._opaque else b""
        del buffer[:start]
        if len(buffer) > _MAX_LINE:
            self._line(direction, bytes(buffer[:_MAX_LINE]) + b" [truncated]")
            buffer.clear()
        return b""

    def _line(self, direction: str, raw: bytes) -> None:
        text = raw.decode("utf-8", errors="replace")
        if direction == "c2s":
            text = self._client_line(text)
        else:
            self._server_line(text)
        self.history.record("line", self.link, self.conn, direction, text=text)

    def _client_line(self, text: str) -> str:
        if self._auth_in_progress:
            # An answer to the server's 334 challenge: credentials, and it gets a reply.
            self._auth_in_progress = False
            self._awaiting.append("AUTH")
            return "****"
        verb = text.split(" ", 1)[0].upper()
        self._awaiting.append(verb)
        if verb == "AUTH":
            return mask_auth_line(text)
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
        return text

    def _record_bdat(self) -> None:
        """The message a LAST chunk completed (RFC 3030): one ``data`` event, as DATA's."""
        self.contents += 1
        size, self._bdat_total = self._bdat_total, 0
        self._record_content(size, complete=True, bdat=True)

    def _server_line(self, text: str) -> None:
        code = text[:3]
        final = len(text) < 4 or text[3] != "-"
        if not final or not self._awaiting:
            return  # (a line of a longer reply, or the greeting)
        verb = self._awaiting.popleft()
        if verb == "AUTH" and code == "334":
            self._auth_in_progress = True
        elif verb == "DATA" and code == "354":
            self._start_data()
        elif verb == "STARTTLS" and code == "220":
            self._opaque = True
            self.history.record(
                "note", self.link, self.conn, text="STARTTLS: session encrypted from here on"
            )

    def _start_data(self) -> None:
        self._in_data = True
        self._data_size = 0
        # Pretend a CRLF preceded the content, so an empty body (".\r\n") ends it.
        self._data_tail = b"\r\n"
        self._data_head = bytearray()

    def _consume_data(self, chunk: bytes) -> bytes:
        """Account content bytes; return what follows the end-of-data marker."""
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
                return b""
            consumed = end + len(_DATA_END)
        self._data_size += consumed
        self._record_data(complete=True)
        return chunk[consumed:]

    def _record_data(self, complete: bool) -> None:
        self._in_data = False
        self.contents += complete
        # Size is the content without the terminating ".\r\n".
        size = max(self._data_size - 3, 0) if complete else self._data_size
        self._record_content(size, complete=complete)

    def _record_content(self, size: int, **details: Any) -> None:
        """One ``data`` event for a message's content (DATA or BDAT), with the Message-ID
        read from its first bytes."""
        head = bytes(self._data_head)
        self._data_head = bytearray()
        self.history.record(
            "data", self.link, self.conn, "c2s",
            size=size, message_id=message_id_from_bytes(head), **details,
        )  # fmt: skip
