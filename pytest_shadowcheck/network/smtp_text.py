"""Small, pure helpers for reading SMTP text: reply codes, Message-IDs, the harness's
trace, secrets.

Shared by the proxy (which records what it carries), the sink (which records
what it accepts) and the client (which records what it was told), so that all
three agree on how a Message-ID or an enhanced status code is spelled.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import re
from email.parser import BytesHeaderParser
from email.policy import compat32

__all__ = [
    "TRACE_HEADER",
    "dot_stuff",
    "header_section",
    "identity_from_bytes",
    "mask_auth_line",
    "message_id_from_bytes",
    "normalize_message_id",
    "parse_enhanced_code",
    "trace_from_headers",
    "trace_value",
]

# RFC 3463 enhanced status code at the start of the reply text: class.subject.detail
_ENHANCED_CODE = re.compile(r"^\s*([245]\.\d{1,3}\.\d{1,3})(?=\s|$)")
_LONE_LF = re.compile(rb"(?<!\r)\n")
_LONE_CR = re.compile(rb"\r(?!\n)")
_LEADING_DOT = re.compile(rb"(?m)^\.")
# The header section never needs more than this to find a Message-ID; cap it so a
# huge body without a blank line cannot make us parse megabytes.
HEADER_SCAN_LIMIT = 64 * 1024


def parse_enhanced_code(text: str) -> str | None:
    """Return the RFC 3463 enhanced code ("4.4.0") opening a reply text, or None.

    ``text`` is the reply without its three-digit code ("4.4.0 Message failed...").
    A leading three-digit code is tolerated ("451 4.4.0 ..."), so full reply lines
    work too.
    """
    first_line = text.split("\n", 1)[0]
    stripped = re.sub(r"^\d{3}[ -]", "", first_line)
    match = _ENHANCED_CODE.match(stripped)
    return match.group(1) if match else None


def normalize_message_id(message_id: str | None) -> str | None:
    """Canonical form of a Message-ID for comparisons: trimmed, in angle brackets.

    ``"abc@x"``, ``" <abc@x> "`` and ``"<abc@x>"`` all give ``"<abc@x>"``; None and
    the empty string give None.
    """
    if message_id is None:
        return None
    core = message_id.strip().strip("<>").strip()
    return f"<{core}>" if core else None


#: the header the harness adds to every message it composes: the message's identity in
#: the accounting. A Message-ID is the sender's to choose (resends and some mailers
#: reuse one, some send none), so two messages sharing one must never count as one.
TRACE_HEADER = "X-Shadowcheck-Trace"


def trace_value(ref: str, token: str) -> str:
    """The trace of message ``ref`` in the run with ``token``: unique to the message."""
    return f"{ref}.{token}"


def trace_from_headers(headers: dict[str, str]) -> str | None:
    """The harness's trace among a message's headers (any spelling of the name)."""
    wanted = TRACE_HEADER.lower()
    for name, value in headers.items():
        if name.lower() == wanted:
            return value.strip() or None
    return None


def header_section(raw: bytes) -> bytes:
    """The header section of a message (up to the first blank line), capped."""
    head = raw[:HEADER_SCAN_LIMIT]
    for separator in (b"\r\n\r\n", b"\n\n"):
        end = head.find(separator)
        if end != -1:
            return head[: end + len(separator)]
    return head


def message_id_from_bytes(raw: bytes) -> str | None:
    """The normalised Message-ID header of a raw message, or None if it has none.

    Only the header section is parsed. Works on dot-stuffed wire content too,
    since header lines never start with a dot.
    """
    return identity_from_bytes(raw)[0]


def identity_from_bytes(raw: bytes) -> tuple[str | None, str | None]:
    """The normalised Message-ID and the harness's trace of a raw message (each None
    when absent), from one parse of its header section."""
    headers = BytesHeaderParser(policy=compat32).parsebytes(header_section(raw))
    value = headers.get("Message-ID")
    trace = headers.get(TRACE_HEADER)
    return (
        normalize_message_id(str(value)) if value is not None else None,
        str(trace).strip() or None if trace is not None else None,
    )


def peer_auth_line(secret: str, node: str) -> str:
    """``AUTH PLAIN`` as node ``node`` of a cluster with ``secret`` (docs/protocol.md
    section 3): the password is hex(HMAC-SHA256(secret, "shadowcheck-node:" + node))."""
    password = hmac.new(secret.encode(), b"shadowcheck-node:" + node.encode(), hashlib.sha256)
    plain = b"\0" + node.encode() + b"\0" + password.hexdigest().encode()
    return "AUTH PLAIN " + base64.b64encode(plain).decode()


def mask_auth_line(line: str) -> str:
    """Mask the credentials of an ``AUTH`` command line, keeping the mechanism.

    ``"AUTH PLAIN dXNlcg=="`` -> ``"AUTH PLAIN ****"``; a line that is not an AUTH
    command is returned unchanged. Continuation lines of an AUTH exchange (the
    base64 answers to 334 challenges) are masked by the caller, who knows the
    session state.
    """
    parts = line.split(" ", 2)
    if parts[0].upper() != "AUTH":
        return line
    if len(parts) <= 2:
        return line
    return f"{parts[0]} {parts[1]} ****"


def dot_stuff(message: bytes) -> bytes:
    """Prepare message content for DATA: CRLF line endings, leading dots doubled,
    ending with CRLF, without the terminating ``.\\r\\n``."""
    normalized = _LONE_CR.sub(b"\r\n", _LONE_LF.sub(b"\r\n", message))
    stuffed = _LEADING_DOT.sub(b"..", normalized)
    if not stuffed.endswith(b"\r\n"):
        stuffed += b"\r\n"
    return stuffed
