"""Broken variants for Safety Net (SN): hold, expiry, and resubmission."""

from __future__ import annotations

import math
from typing import Any

from . import Variant, force_settings


def _window_off_by_one(edge: str) -> None:
    # The resubmission window's edge one tick off: ``start`` leaves out what was processed
    # at the very start, ``end`` takes in what was processed at the very end (SN-5).
    from reference_impl.queue_db import QueueDB

    original = QueueDB.safety_net

    def safety_net(
        self: QueueDB,
        kind: str,
        start: float | None = None,
        end: float | None = None,
        primary: str | None = None,
    ) -> list[dict[str, Any]]:
        if edge == "start" and start is not None:
            start = math.nextafter(start, math.inf)
        if edge == "end" and end is not None:
            end = math.nextafter(end, math.inf)
        return original(self, kind, start, end, primary)

    QueueDB.safety_net = safety_net  # type: ignore[method-assign]


def _safety_net_never_expires() -> None:
    from reference_impl.queue_db import QueueDB

    def expire_safety_net(self: QueueDB, now: float) -> int:
        return 0

    QueueDB.expire_safety_net = expire_safety_net  # type: ignore[method-assign]


def _expires_a_minute_early(table: str) -> None:
    # The hold (SN-3) or the unacknowledged shadow's hold + expiration (SN-4) one minute
    # short: an off-by-a-minute edge the hour-wide checks of old let through.
    from reference_impl.queue_db import QueueDB

    if table == "safety_net":
        original = QueueDB.expire_safety_net

        def expire_safety_net(self: QueueDB, now: float) -> int:
            return original(self, now + 60)

        QueueDB.expire_safety_net = expire_safety_net  # type: ignore[method-assign]
    else:
        original_shadows = QueueDB.expire_shadows

        def expire_shadows(self: QueueDB, older_than: float) -> int:
            return original_shadows(self, older_than + 60)

        QueueDB.expire_shadows = expire_shadows  # type: ignore[method-assign]


def _shadow_drops_discarded_copy() -> None:
    # On a discard notification the shadow deletes its copy, as if it had no
    # Shadow Safety Net (SN-2).
    from reference_impl.shadowing import Shadowing

    def safety_net_entry(self: Shadowing, shadow: dict[str, Any]) -> dict[str, Any] | None:
        return None

    Shadowing._safety_net_entry = safety_net_entry  # type: ignore[method-assign]


def _unacknowledged_shadow_expires_early() -> None:
    # Drops a copy nobody acknowledged after SafetyNetHoldTime alone, forgetting
    # MessageExpirationTimeout (SN-4).
    from reference_impl.safety_net import SafetyNet

    original = SafetyNet.sweep

    def sweep(self: SafetyNet) -> dict[str, int]:
        swept = original(self)
        older_than = self.node.clock.now() - self.node.settings.SafetyNetHoldTime
        swept["shadows"] += self.node.db.expire_shadows(older_than)
        return swept

    SafetyNet.sweep = sweep  # type: ignore[method-assign]


def _resubmits_outside_window() -> None:
    # Every Safety Net lookup ignores the request's time window (SN-5).
    from reference_impl.queue_db import QueueDB

    original = QueueDB.safety_net

    def safety_net(
        self: QueueDB,
        kind: str,
        start: float | None = None,
        end: float | None = None,
        primary: str | None = None,
    ) -> list[dict[str, Any]]:
        return original(self, kind, None, None, primary)

    QueueDB.safety_net = safety_net  # type: ignore[method-assign]


def _forgets_recipients_taken_first() -> None:
    """A fork the next hop answered in part forgets the recipients it took: the Safety
    Net entry names only those of the attempt that completed the message (the reference
    before session 18; found by deep exploration, seed 5005)."""
    from dataclasses import replace

    from reference_impl.queue_db import Fork, QueueDB

    narrow = QueueDB.fork_narrow

    def forgetful(self: QueueDB, fork: Fork, recipients: list[str]) -> None:
        narrow(self, replace(fork, recipients=list(recipients), taken=[]), recipients)

    QueueDB.fork_narrow = forgetful  # type: ignore[method-assign]


def _never_flags_replay_lag() -> None:
    from reference_impl.settings import Settings

    def warnings(self: Settings) -> list[dict[str, str]]:
        return []

    Settings.warnings = warnings  # type: ignore[method-assign]


def _broadcasts_at_once() -> None:
    # Gives up on an unanswering Primary Safety Net at once instead of after 12 h (SN-7).
    force_settings(PrimarySafetyNetUnavailableTimeout=0.0)


def _never_broadcasts() -> None:
    # Waits for an unanswering Primary Safety Net forever (SN-7).
    force_settings(PrimarySafetyNetUnavailableTimeout=math.inf)


def _ignores_queue_db_creation() -> None:
    # The primary claims its queue database always existed: it never broadcasts the
    # part of a window before the database was recreated (SN-8).
    from reference_impl.queue_db import QueueDB

    QueueDB.created_at = property(lambda self: 0.0)  # type: ignore[assignment,method-assign]


def _broadcasts_whole_window() -> None:
    # A recreated primary broadcasts the whole requested window, not only the part
    # before its queue database existed (SN-8).
    from reference_impl.safety_net import SafetyNet

    primary = SafetyNet.resubmit_primary
    broadcast = SafetyNet.broadcast
    requested_end: dict[int, float] = {}

    async def resubmit_primary(self: SafetyNet, database: str, start: float, end: float) -> str:
        requested_end[id(self)] = end
        return await primary(self, database, start, end)

    async def wide_broadcast(
        self: SafetyNet, primary_node: str, database: str, start: float, end: float
    ) -> int:
        end = max(end, requested_end.get(id(self), end))
        return await broadcast(self, primary_node, database, start, end)

    SafetyNet.resubmit_primary = resubmit_primary  # type: ignore[method-assign]
    SafetyNet.broadcast = wide_broadcast  # type: ignore[method-assign]


def _dsn_on_resubmission() -> None:
    # A resubmitted copy that fails for good is reported to its sender (SN-9).
    from reference_impl.node import Node

    original = Node.enqueue

    def enqueue(self: Node, message: Any, plan: Any, *, categorise: bool = True) -> None:
        if message.origin == "resubmitted":
            message.no_dsn = False
        original(self, message, plan, categorise=categorise)

    Node.enqueue = enqueue  # type: ignore[method-assign]


def _shadow_keeps_stale_expansion() -> None:
    # The Shadow Safety Net keeps the group as it was expanded when the copy was
    # discarded, not the original envelope recipients (SN-10).
    from reference_impl.shadowing import Shadowing

    original = Shadowing._safety_net_entry

    def safety_net_entry(self: Shadowing, shadow: dict[str, Any]) -> dict[str, Any] | None:
        entry = original(self, shadow)
        if entry is not None:
            entry["recipients"] = self.node.directory.expand(shadow["recipients"])
        return entry

    Shadowing._safety_net_entry = safety_net_entry  # type: ignore[method-assign]


def _resubmits_uncategorised() -> None:
    # A Shadow Safety Net copy is resubmitted without going through categorisation (SN-11).
    from reference_impl.safety_net import SafetyNet

    original = SafetyNet._resubmit

    def resubmit(
        self: SafetyNet, entry: dict[str, Any], recipients: list[str], *, categorise: bool
    ) -> bool:
        return original(self, entry, recipients, categorise=False)

    SafetyNet._resubmit = resubmit  # type: ignore[method-assign]


def _copies_after_categorisation() -> None:
    # The shadow copy is made of the primary's categorised content: it carries the
    # primary's later change (SN-11).
    from reference_impl import messages
    from reference_impl.shadowing import Shadowing

    original = Shadowing.make_copy

    async def make_copy(self: Shadowing, message: Any, next_hops: list[str], state: Any) -> Any:
        plain = message.content
        message.content = messages.categorised(plain, self.node.name, self.node.clock.now())
        try:
            return await original(self, message, next_hops, state)
        finally:
            message.content = plain

    Shadowing.make_copy = make_copy  # type: ignore[method-assign]


def _resubmits_crossed_boundary() -> None:
    # Forgets that a message left the boundary: resubmits it like any other (SN-12).
    from reference_impl.queue_db import QueueDB

    original = QueueDB.safety_net

    def safety_net(self: QueueDB, *args: Any, **kwargs: Any) -> list[dict[str, Any]]:
        entries = original(self, *args, **kwargs)
        for entry in entries:
            entry["crossed_boundary"] = False
        return entries

    QueueDB.safety_net = safety_net  # type: ignore[method-assign]


def _janitor_sweeps_once_a_minute() -> None:
    # Sweeps on a fixed minute whatever the hold time: fine for days, late by up to a
    # minute for a hold time of seconds (SN-3).
    from reference_impl.safety_net import JANITOR_MAX_INTERVAL, SafetyNet

    def janitor_interval(self: SafetyNet) -> float:
        return JANITOR_MAX_INTERVAL

    SafetyNet.janitor_interval = janitor_interval  # type: ignore[method-assign]


def _forgets_requests_on_restart() -> None:
    # Keeps resubmission requests in memory only: a restarted coordinator never resumes
    # the request that was waiting for a dead primary (SN-7).
    from reference_impl.safety_net import SafetyNet

    async def run(self: SafetyNet) -> None:
        while True:
            self.sweep()
            await self.node.clock.sleep(self.janitor_interval())

    SafetyNet.run = run  # type: ignore[method-assign]


def _remote_primary_answer_not_recorded() -> None:
    # The coordinator drops the answer of a primary on another node, so it asks again at
    # every heartbeat, and the primary resubmits the window again each time (SN-5).
    from reference_impl.safety_net import SafetyNet

    original = SafetyNet._ask_primary

    async def _ask_primary(
        self: SafetyNet, primary: str, database: str, start: float, end: float
    ) -> str | None:
        answer = await original(self, primary, database, start, end)
        return answer if primary == self.node.name else None

    SafetyNet._ask_primary = _ask_primary  # type: ignore[method-assign]


def _forgets_admin_changes_on_restart() -> None:
    # The node keeps what an admin changed in memory only: a restart (or a wipe) comes
    # back with the cluster file's settings and routes, until someone sets them again.
    from reference_impl.admin_changes import AdminChanges

    def record(self: AdminChanges, values: dict[str, Any]) -> None:
        return None

    AdminChanges.record_settings = record  # type: ignore[method-assign]
    AdminChanges.record_routes = record  # type: ignore[method-assign]


VARIANTS: list[Variant] = [
    Variant(
        name="window-start-excluded",
        breaks="leaves out of a resubmission what was processed at the window's first second",
        fails=("sn5_window_edges_to_the_second",),
        apply=lambda: _window_off_by_one("start"),
    ),
    Variant(
        name="window-end-included",
        breaks="resubmits what was processed at the window's end, which is outside it",
        fails=("sn5_window_edges_to_the_second",),
        apply=lambda: _window_off_by_one("end"),
    ),
    Variant(
        name="safety-net-never-expires",
        breaks="keeps messages in Safety Net past SafetyNetHoldTime",
        fails=("sn1_sn3_primary_safety_net_hold_time", "sn2_sn3_shadow_safety_net_hold_time"),
        apply=_safety_net_never_expires,
    ),
    Variant(
        name="safety-net-hold-a-minute-short",
        breaks="drops Safety Net entries a minute before SafetyNetHoldTime is up",
        fails=("sn1_sn3_primary_safety_net_hold_time", "sn2_sn3_shadow_safety_net_hold_time"),
        apply=lambda: _expires_a_minute_early("safety_net"),
    ),
    Variant(
        name="unacknowledged-shadow-expires-a-minute-early",
        breaks="drops an unacknowledged shadow copy a minute before SafetyNetHoldTime + "
        "MessageExpirationTimeout",
        fails=("sn4_unacknowledged_shadow_expires_after_hold_plus_expiration",),
        apply=lambda: _expires_a_minute_early("shadows"),
    ),
    Variant(
        name="shadow-drops-discarded-copy",
        breaks="deletes a discarded shadow copy instead of keeping it in its Shadow Safety Net",
        fails=(
            "sn2_sn3_shadow_safety_net_hold_time",
            "sn8_partial_window_after_queue_db_recreated",
        ),
        apply=_shadow_drops_discarded_copy,
    ),
    Variant(
        name="unacknowledged-shadow-expires-early",
        breaks="drops an unacknowledged shadow copy after SafetyNetHoldTime, "
        "not SafetyNetHoldTime + MessageExpirationTimeout",
        fails=("sn4_unacknowledged_shadow_expires_after_hold_plus_expiration",),
        apply=_unacknowledged_shadow_expires_early,
    ),
    Variant(
        name="resubmits-outside-window",
        breaks="resubmits Safety Net messages of the database from outside the requested window",
        fails=("sn5_resubmission_by_database_and_window",),
        apply=_resubmits_outside_window,
    ),
    Variant(
        name="never-flags-replay-lag",
        breaks="accepts ReplayLagTime > SafetyNetHoldTime without a configuration warning",
        fails=("sn6_replay_lag_beyond_hold_time_flagged", "sn6_replay_lag_beyond_hold_time_logged"),
        apply=_never_flags_replay_lag,
    ),
    Variant(
        name="broadcasts-before-12h",
        breaks="broadcasts a resubmission request as soon as the Primary Safety Net "
        "does not answer, not after 12 hours",
        fails=("sn7_shadow_answers_after_12h_primary_unavailable",),
        apply=_broadcasts_at_once,
    ),
    Variant(
        name="never-broadcasts",
        breaks="waits forever for a Primary Safety Net that does not answer",
        fails=(
            "sn7_shadow_answers_after_12h_primary_unavailable",
            "sn10_shadow_copy_group_expanded_afresh",
        ),
        apply=_never_broadcasts,
    ),
    Variant(
        name="ignores-queue-db-creation",
        breaks="a recreated primary answers for the whole window and broadcasts nothing",
        fails=("sn8_partial_window_after_queue_db_recreated",),
        apply=_ignores_queue_db_creation,
    ),
    Variant(
        name="broadcasts-whole-window",
        breaks="a recreated primary broadcasts the whole window, not only the part before "
        "its queue database was created",
        fails=("sn8_partial_window_after_queue_db_recreated",),
        apply=_broadcasts_whole_window,
    ),
    Variant(
        name="dsn-on-resubmission",
        breaks="sends a DSN when a resubmitted copy fails",
        fails=("sn9_resubmission_sends_no_dsn",),
        apply=_dsn_on_resubmission,
    ),
    Variant(
        name="safety-net-forgets-recipients-taken-first",
        breaks=(
            "keeps a message in Safety Net only for the recipients of the delivery attempt "
            "that completed it, not for those the next hop took on an earlier attempt"
        ),
        fails=("sn5_recipient_taken_before_a_retry_is_resubmitted",),
        apply=_forgets_recipients_taken_first,
    ),
    Variant(
        name="shadow-keeps-stale-expansion",
        breaks="the Shadow Safety Net keeps the group's expansion, not the original recipients",
        fails=("sn10_shadow_copy_group_expanded_afresh",),
        apply=_shadow_keeps_stale_expansion,
    ),
    Variant(
        name="resubmits-uncategorised",
        breaks="resubmits a Shadow Safety Net copy without categorising it",
        fails=("sn11_shadow_copy_categorised_afresh",),
        apply=_resubmits_uncategorised,
    ),
    Variant(
        name="copies-after-categorisation",
        breaks="makes the shadow copy of the primary's categorised content",
        fails=("sn11_shadow_copy_categorised_afresh",),
        apply=_copies_after_categorisation,
    ),
    Variant(
        name="resubmits-crossed-boundary",
        breaks="resubmits messages that already left the boundary",
        fails=("sn12_message_that_left_the_boundary_never_resubmitted",),
        apply=_resubmits_crossed_boundary,
    ),
    Variant(
        name="janitor-sweeps-once-a-minute",
        breaks="sweeps the Safety Net once a minute whatever SafetyNetHoldTime is",
        fails=("sn3_short_hold_time_expires_on_time",),
        apply=_janitor_sweeps_once_a_minute,
    ),
    Variant(
        name="forgets-requests-on-restart",
        breaks="forgets a waiting resubmission request when its coordinating node restarts",
        fails=("sn7_request_survives_a_restart_of_the_coordinator",),
        apply=_forgets_requests_on_restart,
    ),
    Variant(
        name="remote-primary-answer-not-recorded",
        breaks="asks a primary on another node again at every heartbeat after it answered",
        fails=("sn5_request_through_another_node_served_once",),
        apply=_remote_primary_answer_not_recorded,
    ),
    Variant(
        name="forgets-admin-changes-on-restart",
        breaks="keeps a setting an admin changed in memory only: a restart comes back with "
        "the cluster file's SafetyNetHoldTime",
        fails=("sn4_hold_time_changed_live_survives_a_restart",),
        apply=_forgets_admin_changes_on_restart,
    ),
]
