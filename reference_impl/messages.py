"""Message content helpers: header lookup, trace headers, delivery status notifications.

Content is kept as the bytes received (CRLF line ends) so that what the
shadow holds is exactly what the sender sent; the primary's later changes
(the categoriser's stamp) exist only in its own copy (SN-11).
"""

from __future__ import annotations

import email.utils
import re
import time

_HEADER_END = re.compile(rb"\r?\n\r?\n")


def header_block(content: bytes) -> bytes:
    match = _HEADER_END.search(content)
    return content if match is None else content[: match.start()]


def header(content: bytes, name: str) -> str | None:
    """The first value of header ``name`` (unfolded), or None."""
    wanted = name.lower().encode()
    lines = header_block(content).split(b"\n")
    for index, line in enumerate(lines):
        key, sep, value = line.partition(b":")
        if sep and key.strip().lower() == wanted:
            parts = [value.strip()]
            for follow in lines[index + 1 :]:
                if follow[:1] in (b" ", b"\t"):
                    parts.append(follow.strip())
                else:
                    break
            return b" ".join(parts).decode("utf-8", "replace")
    return None


def prepend_header(content: bytes, name: str, value: str) -> bytes:
    return f"{name}: {value}\r\n".encode() + content


def received_header(by: str, helo: str, peer: str, moment: float) -> tuple[str, str]:
    stamp = email.utils.formatdate(moment, usegmt=True)
    return "Received", f"from {helo} ([{peer}]) by {by} with ESMTP; {stamp}"


def categorised(content: bytes, node: str, moment: float) -> bytes:
    """The categoriser's content conversion: a stamp naming the node that did it."""
    stamp = email.utils.formatdate(moment, usegmt=True)
    return prepend_header(content, "X-Categorized-By", f"{node}; {stamp}")


def dsn(
    reporting_node: str,
    original_sender: str,
    original_message_id: str | None,
    failed: dict[str, str],
    moment: float,
) -> bytes:
    """A minimal non-delivery report (RFC 3464 layout) for ``failed`` {recipient: reason}."""
    boundary = f"dsn-{int(time.time() * 1000)}"
    per_recipient = "".join(
        f"Final-Recipient: rfc822; {rcpt}\r\nAction: failed\r\nStatus: 5.0.0\r\n"
        f"Diagnostic-Code: smtp; {reason}\r\n\r\n"
        for rcpt, reason in failed.items()
    )
    lines = [
        f"From: postmaster@{reporting_node}",
        f"To: {original_sender}",
        "Subject: Undeliverable: delivery status notification",
        f"Message-ID: {email.utils.make_msgid(domain=reporting_node)}",
        f"Date: {email.utils.formatdate(moment, usegmt=True)}",
        "MIME-Version: 1.0",
        f'Content-Type: multipart/report; report-type=delivery-status; boundary="{boundary}"',
        f"X-Original-Message-ID: {original_message_id or ''}",
        "",
        f"--{boundary}",
        "Content-Type: text/plain",
        "",
        "Delivery failed for: " + ", ".join(failed),
        "",
        f"--{boundary}",
        "Content-Type: message/delivery-status",
        "",
        f"Reporting-MTA: dns; {reporting_node}",
        "",
        per_recipient.rstrip("\r\n"),
        f"--{boundary}--",
        "",
    ]
    return "\r\n".join(lines).encode()


def domain_of(address: str) -> str:
    return address.rpartition("@")[2].lower()
