"""Broken variants for the timeouts scenarios (TO-1 .. TO-4; see the package docstring)."""

from __future__ import annotations

import dataclasses
from typing import Any

from . import Variant


def _no_inbound_idle_limit() -> None:
    # Idle inbound sessions are only ended by the absolute limit (TO-1). (Forcing the
    # setting to a day instead would make the node refuse to start: a target error, not
    # this defect.)
    from reference_impl.smtp_in import NodeSMTP

    NodeSMTP._timeout_cb = lambda self: None  # type: ignore[method-assign]


def _no_absolute_session_limit() -> None:
    # A session that is never idle lasts for ever (TO-1).
    from reference_impl.smtp_in import NodeSMTP

    def connection_made(self: NodeSMTP, transport: Any) -> None:
        super(NodeSMTP, self).connection_made(transport)
        self._session_limit = None

    NodeSMTP.connection_made = connection_made  # type: ignore[method-assign]


def _keeps_idle_next_hop_sessions() -> None:
    # A delivery session stays open, idle, until the next message comes (TO-2).
    from reference_impl.delivery import Delivery, _Session

    async def _worker(self: Delivery, domain: str, queue: Any) -> None:
        session = _Session(self.node)
        try:
            while True:
                await self._attempt(session, await queue.get(), domain)
        finally:
            await session.close()

    Delivery._worker = _worker  # type: ignore[method-assign]


def _keeps_idle_shadow_sessions() -> None:
    # The session to the shadow lasts as long as the sender's, however idle (TO-2).
    from reference_impl.shadowing import Shadowing

    Shadowing._close_when_idle = lambda self, state, link: None  # type: ignore[method-assign]


def _accepts_inconsistent_timeouts() -> None:
    # ReceiveConnectionInactivityTimeout >= ReceiveConnectionTimeout is accepted (TO-3).
    from reference_impl.settings import Settings

    validate = Settings.validate

    def lenient(self: Settings) -> None:
        if self.ReceiveConnectionInactivityTimeout >= self.ReceiveConnectionTimeout:
            validate(dataclasses.replace(self, ReceiveConnectionInactivityTimeout=0.0))
            return
        validate(self)

    Settings.validate = lenient  # type: ignore[method-assign]


def _waits_for_the_shadow_for_ever() -> None:
    # Node-to-node sessions have no timeout: a shadow that does not answer holds the
    # sender until it gives up, instead of counting as a failed attempt (TO-4).
    from reference_impl.peer_link import PeerLink

    init = PeerLink.__init__

    def __init__(self: PeerLink, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        self.smtp.timeout = None

    PeerLink.__init__ = __init__  # type: ignore[method-assign]


VARIANTS: list[Variant] = [
    Variant(
        name="no-inbound-idle-limit",
        breaks="ignores ReceiveConnectionInactivityTimeout: idle sessions stay open",
        fails=("to1_idle_inbound_session_closed",),
        apply=_no_inbound_idle_limit,
    ),
    Variant(
        name="no-absolute-session-limit",
        breaks="ignores ReceiveConnectionTimeout: a busy session is never ended",
        fails=("to1_busy_inbound_session_ends_at_connection_timeout",),
        apply=_no_absolute_session_limit,
    ),
    Variant(
        name="keeps-idle-next-hop-sessions",
        breaks="keeps an idle session to the next hop open past SendConnectionInactivityTimeout",
        fails=("to2_idle_outbound_session_closed",),
        apply=_keeps_idle_next_hop_sessions,
    ),
    Variant(
        name="keeps-idle-shadow-sessions",
        breaks="keeps an idle session to the shadow open as long as the sender's session",
        fails=("to2_idle_shadow_session_closed",),
        apply=_keeps_idle_shadow_sessions,
    ),
    Variant(
        name="accepts-inconsistent-timeouts",
        breaks="accepts ReceiveConnectionInactivityTimeout >= ReceiveConnectionTimeout",
        fails=(
            "to3_inactivity_at_or_above_connection_timeout_rejected",
            "to3_invalid_configuration_refused_at_start",
        ),
        apply=_accepts_inconsistent_timeouts,
    ),
    Variant(
        name="waits-for-the-shadow-for-ever",
        breaks="never times out a session to the shadow, so a silent shadow is no failed attempt",
        fails=(
            "cr4_shadow_session_timeout_rejects",
            "to4_unacknowledged_copy_times_out_then_accepted",
        ),
        apply=_waits_for_the_shadow_for_ever,
    ),
]
