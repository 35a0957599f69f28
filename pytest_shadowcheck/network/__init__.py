"""The harness's network layer: fault proxies, next-hop sinks and the recording client.

- :class:`FaultProxy` - recording, fault-injecting TCP proxy for one link.
- :class:`MailSink` / :class:`Delivery` - SMTP next hop recording deliveries.
- :class:`RecordingClient` / :class:`SendResult` - aiosmtplib sender recording
  every reply, plus raw sessions for protocol abuse.
- SMTP text helpers - Message-ID and enhanced-code parsing shared by all three.

Everything records into one :class:`pytest_shadowcheck.history.History` per run.
"""

from __future__ import annotations

from pytest_shadowcheck.network.client import (
    IdleResult,
    RawReply,
    RecordingClient,
    Reply,
    SendResult,
    VanishResult,
    make_message,
    new_message_id,
)
from pytest_shadowcheck.network.proxy import DIRECTIONS, FaultProxy
from pytest_shadowcheck.network.sink import (
    HANG,
    SCRIPT_STAGES,
    Delivery,
    MailSink,
    ScriptedReply,
)
from pytest_shadowcheck.network.smtp_text import (
    message_id_from_bytes,
    normalize_message_id,
    parse_enhanced_code,
)

__all__ = [
    "DIRECTIONS",
    "HANG",
    "SCRIPT_STAGES",
    "Delivery",
    "FaultProxy",
    "IdleResult",
    "MailSink",
    "RawReply",
    "RecordingClient",
    "Reply",
    "ScriptedReply",
    "SendResult",
    "VanishResult",
    "make_message",
    "message_id_from_bytes",
    "new_message_id",
    "normalize_message_id",
    "parse_enhanced_code",
]
