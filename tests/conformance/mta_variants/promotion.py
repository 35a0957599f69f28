"""Broken variants for promotion after an outage (PR)."""

from __future__ import annotations

from typing import Any

from . import Variant, force_settings

PR1_SCENARIOS = (
    "pr1_shadow_promotes_after_primary_killed",
    "pr1_shadow_promotes_after_primary_paused",
    "pr1_shadow_promotes_when_primary_cut_off",
    "pr2_promotes_at_once_while_pr1_waits_out_resubmit_time_span",
)


def _shadow_drops_copies() -> None:
    # Acknowledges XSHADOWCOPY like a good shadow, keeps nothing.
    from reference_impl.shadowing import REPLY_COPY_STORED, Shadowing

    def store_copy(self: Shadowing, primary: str, copy: dict[str, Any], *args: Any) -> str:
        return REPLY_COPY_STORED

    Shadowing.store_copy = store_copy  # type: ignore[method-assign,assignment]


def _ignores_queue_database_id() -> None:
    # The primary's DBID is read but never compared with the one the copies came from.
    from reference_impl.queue_db import QueueDB

    def stale_shadows(self: QueueDB, primary: str, db_id: str) -> list[dict[str, Any]]:
        return []

    QueueDB.stale_shadows = stale_shadows  # type: ignore[method-assign]


def _promotes_late() -> None:
    # The primary is given three times ShadowResubmitTimeSpan before its copies are promoted.
    from reference_impl.shadowing import Shadowing

    original = Shadowing._primary_unreachable

    def unreachable(self: Shadowing, primary: str, reason: str) -> None:
        peer = self.node.db.peer(primary)
        last = peer["last_contact"] if peer else None
        span = self.node.settings.ShadowResubmitTimeSpan
        waiting = last is not None and self.node.clock.now() - last < 3 * span
        if self.node.profile != "2010" and waiting:
            self._failed_since_contact.add(primary)
            return
        original(self, primary, reason)

    Shadowing._primary_unreachable = unreachable  # type: ignore[method-assign]


def _promotes_when_primary_returns() -> None:
    # A primary heard from again after failed heartbeats has its copies promoted, whatever
    # its queue database ID says (PR-2 applied to a restart on the same database).
    from reference_impl.shadowing import Shadowing

    original = Shadowing.on_discards

    async def on_discards(self: Shadowing, primary: str, db_id: str | None, ids: list[str]) -> None:
        returned = primary in self._failed_since_contact
        await original(self, primary, db_id, ids)
        if returned:
            self.promote(primary, "primary returned", primary_failed=False)

    Shadowing.on_discards = on_discards  # type: ignore[method-assign]


def _alter_promoted(change: str) -> None:
    """The copy a shadow promotes is not what it was given: ``body`` un-stuffs a leading
    dot twice, ``recipient`` loses all but the first recipient, ``sender`` rewrites the
    reverse-path."""
    from reference_impl.queue_db import QueueDB

    original = QueueDB.shadows

    def shadows(self: QueueDB, primary: str | None = None) -> list[dict[str, Any]]:
        out = []
        for row in original(self, primary):
            row = dict(row)
            if change == "body":
                row["content"] = row["content"].replace(b"\r\n..", b"\r\n.")
            elif change == "recipient":
                row["recipients"] = list(row["recipients"])[:1]
            else:
                row["sender"] = "postmaster@shadow.invalid"
            out.append(row)
        return out

    QueueDB.shadows = shadows  # type: ignore[method-assign]


def _promotes_on_first_failed_heartbeat() -> None:
    # One unanswered heartbeat and the copies go: ShadowResubmitTimeSpan is never waited out.
    force_settings(ShadowResubmitTimeSpan=0.0)


def _heartbeat_waits_forever() -> None:
    # Sessions to a primary get no time limit: a hung primary (port open, no greeting)
    # blocks the heartbeat for good, so it never counts as unreachable.
    from reference_impl import shadowing
    from reference_impl.peer_link import PeerLink

    class PatientLink(PeerLink):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.smtp.timeout = None

    shadowing.PeerLink = PatientLink  # type: ignore[misc]


def _restart_forgets_pending_deliveries() -> None:
    # A restarted node keeps its queue database but never resumes what was pending in it.
    from reference_impl.queue_db import QueueDB

    def pending_forks(self: QueueDB) -> list[Any]:
        return []

    QueueDB.pending_forks = pending_forks  # type: ignore[method-assign]


def _promotes_without_route() -> None:
    # A copy with no route for its recipients, or only one through the failed primary, is
    # promoted anyway: it leaves the shadow queue for the active queue, where it retries
    # instead of waiting as a shadow.
    from reference_impl import messages
    from reference_impl.node import Plan
    from reference_impl.shadowing import Shadowing

    def routes_via(self: Shadowing, plan: Plan, peer: str) -> bool:
        return False

    Shadowing._routes_via = routes_via  # type: ignore[method-assign,assignment]
    original = Shadowing.promote

    def promote(
        self: Shadowing, primary: str, reason: str, shadows: list[dict[str, Any]] | None = None
    ) -> int:
        node = self.node
        categorise = node.categorise

        def routable_or_not(recipients: list[str]) -> tuple[Plan, list[str]]:
            plan, unroutable = categorise(recipients)
            for rcpt in unroutable:
                plan.setdefault(messages.domain_of(rcpt), ([], []))[0].append(rcpt)
            return plan, []

        node.categorise = routable_or_not  # type: ignore[method-assign]
        try:
            return original(self, primary, reason, shadows)
        finally:
            del node.categorise

    Shadowing.promote = promote  # type: ignore[method-assign]


def _ignores_heartbeat_retry_count() -> None:
    # 2010: the first heartbeat time-out already counts the primary as failed.
    force_settings(ShadowHeartbeatRetryCount=1)


def _last_contact_never_refreshed() -> None:
    # Records the primary's first contact and never a later one (unless a heartbeat
    # failed in between): a primary healthy for longer than ShadowResubmitTimeSpan is
    # promoted at its first missed heartbeat, not a span after its last contact (PR-1).
    from reference_impl.shadowing import Shadowing

    original = Shadowing._contact

    def _contact(self: Shadowing, primary: str, now: float, db_id: str | None) -> None:
        last = self._last_contact.get(primary)
        if last is not None and last[1] == db_id and primary not in self._failed_since_contact:
            return
        original(self, primary, now, db_id)

    Shadowing._contact = _contact  # type: ignore[method-assign]


def _stops_asking_when_xshadow_withdrawn() -> None:
    # A shadow asks its primary for discards only while the primary advertises XSHADOW:
    # once an admin sets ShadowRedundancyEnabled false, the copies it already holds never
    # learn that their primary came back on a new queue database (PR-2).
    from reference_impl.peer_link import PeerLink

    original = PeerLink.open

    async def open_(self: PeerLink, drain: bool = False) -> None:
        await original(self)

    PeerLink.open = open_  # type: ignore[method-assign]


VARIANTS: list[Variant] = [
    Variant(
        name="promotes-late",
        breaks="promotes copies only after three times ShadowResubmitTimeSpan",
        fails=(
            "pr1_shadow_promotes_after_primary_killed",
            "pr1_shadow_promotes_after_primary_paused",
            "pr1_shadow_promotes_when_primary_cut_off",
        ),
        apply=_promotes_late,
    ),
    Variant(
        name="promotes-when-primary-returns",
        breaks="promotes the copies of a primary that comes back on the same queue database",
        fails=("pr2_restart_on_same_database_does_not_promote",),
        apply=_promotes_when_primary_returns,
    ),
    Variant(
        name="promoted-copy-body-altered",
        breaks="the promoted copy loses a dot of a dot-stuffed line",
        fails=("pr1_shadow_promotes_after_primary_killed",),
        apply=lambda: _alter_promoted("body"),
    ),
    Variant(
        name="promoted-copy-loses-a-recipient",
        breaks="the promoted copy keeps only its first recipient",
        fails=("pr1_shadow_promotes_after_primary_killed",),
        apply=lambda: _alter_promoted("recipient"),
    ),
    Variant(
        name="promoted-copy-sender-rewritten",
        breaks="the promoted copy goes out with another reverse-path",
        fails=("pr1_shadow_promotes_after_primary_killed",),
        apply=lambda: _alter_promoted("sender"),
    ),
    Variant(
        name="shadow-drops-copies",
        breaks="the shadow acknowledges every copy but stores none of them",
        fails=("pr1_shadow_promotes_after_primary_killed", "pr4_primary_and_shadow_fail_together"),
        apply=_shadow_drops_copies,
    ),
    Variant(
        name="ignores-queue-database-id",
        breaks="the shadow never notices that the primary came back with a new queue database",
        fails=(
            "pr2_new_queue_database_promotes_at_once",
            "pr2_promotes_at_once_while_pr1_waits_out_resubmit_time_span",
        ),
        apply=_ignores_queue_database_id,
    ),
    Variant(
        name="promotes-on-first-failed-heartbeat",
        breaks="the shadow promotes at the first unanswered heartbeat, not after "
        "ShadowResubmitTimeSpan",
        fails=PR1_SCENARIOS,
        apply=_promotes_on_first_failed_heartbeat,
    ),
    Variant(
        name="heartbeat-waits-forever",
        breaks="the shadow's sessions to a primary have no time limit, so a hung primary "
        "never counts as unreachable",
        fails=(
            "pr1_shadow_promotes_after_primary_paused",
            "pr6_heartbeat_retry_count_decides_failure",
        ),
        apply=_heartbeat_waits_forever,
    ),
    Variant(
        name="restart-forgets-pending-deliveries",
        breaks="a node restarted on its queue database never resumes the deliveries pending in it",
        fails=(
            "pr3_primary_back_with_same_database_delivers_again",
            "pr3_acknowledged_message_survives_kill_and_restart_on_same_queue",
        ),
        apply=_restart_forgets_pending_deliveries,
    ),
    Variant(
        name="promotes-without-route",
        breaks="a shadow copy with no alternative route is promoted into the active queue "
        "instead of waiting in the shadow queue for a route",
        fails=(
            "pr5_copy_without_route_waits_for_one",
            "pr5_2010_route_only_through_failed_primary_waits_for_new_database",
        ),
        apply=_promotes_without_route,
    ),
    Variant(
        name="ignores-heartbeat-retry-count",
        breaks="2010: the first heartbeat time-out counts the primary as failed, whatever "
        "ShadowHeartbeatRetryCount says",
        fails=("pr6_heartbeat_retry_count_decides_failure",),
        apply=_ignores_heartbeat_retry_count,
    ),
    Variant(
        name="last-contact-never-refreshed",
        breaks="measures ShadowResubmitTimeSpan from the primary's first contact, not its last",
        fails=("pr1_span_counts_from_the_last_contact_not_the_first",),
        apply=_last_contact_never_refreshed,
    ),
    Variant(
        name="stops-asking-when-xshadow-withdrawn",
        breaks="stops asking its primary for discards once the primary no longer advertises "
        "XSHADOW, so copies taken before an admin disabled shadow redundancy are never promoted",
        fails=("pr2_copies_made_before_redundancy_was_disabled_are_promoted",),
        apply=_stops_asking_when_xshadow_withdrawn,
    ),
]
