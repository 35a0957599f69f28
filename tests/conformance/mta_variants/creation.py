"""Broken variants for creating the shadow copy (CR, XS-1)."""

from __future__ import annotations

import contextvars
from typing import Any

from . import Variant, force_settings


def _ack_before_copy() -> None:
    # The copy still happens, but in the background: the sender's 250 no
    # longer waits for the shadow's (CR-3).
    from reference_impl.shadowing import Shadowing

    original = Shadowing.make_copy

    async def make_copy(self: Shadowing, message: Any, next_hops: list[str], state: Any) -> Any:
        self.node.background(original(self, message, next_hops, state))
        plan = self.attempt_plan()
        return plan[0] if plan else "nobody"

    Shadowing.make_copy = make_copy  # type: ignore[method-assign]


def _claims_copy_on_failure() -> None:
    # When no copy can be made, pretend one was: never answers 451 4.4.0 (CR-4).
    from reference_impl.shadowing import Shadowing

    original = Shadowing.make_copy

    async def make_copy(self: Shadowing, message: Any, next_hops: list[str], state: Any) -> Any:
        return await original(self, message, next_hops, state) or "nobody"

    Shadowing.make_copy = make_copy  # type: ignore[method-assign]


def _always_rejects() -> None:
    force_settings(RejectMessageOnShadowFailure=True)


def _ignores_disabled() -> None:
    force_settings(ShadowRedundancyEnabled=True)


def _placement(plan: Any) -> None:
    """Replace Shadowing.attempt_plan by ``plan(shadowing, local, remote)``."""
    from reference_impl.shadowing import Shadowing

    def attempt_plan(self: Shadowing) -> list[str]:
        me = self.node.config
        members = self.candidates()
        local = sorted(n.name for n in members if n.site == me.site)
        remote = sorted(n.name for n in members if n.site != me.site)
        return list(plan(self, local, remote))

    Shadowing.attempt_plan = attempt_plan  # type: ignore[method-assign]


def _tries(shadowing: Any, names: list[str], setting: str) -> list[str]:
    return shadowing._cycle(names, getattr(shadowing.node.settings, setting))


def _ignores_preference() -> None:
    # Every node behaves as PreferRemote, whatever ShadowMessagePreferenceSetting says (CR-7).
    def plan(shadowing: Any, local: list[str], remote: list[str]) -> list[str]:
        return _tries(shadowing, remote, "MaxRetriesForRemoteSiteShadow") + _tries(
            shadowing, local, "MaxRetriesForLocalSiteShadow"
        )

    _placement(plan)


def _local_first() -> None:
    # PreferRemote tries the local site first, the remote one only as a fallback (CR-7).
    def plan(shadowing: Any, local: list[str], remote: list[str]) -> list[str]:
        local_tries = _tries(shadowing, local, "MaxRetriesForLocalSiteShadow")
        remote_tries = _tries(shadowing, remote, "MaxRetriesForRemoteSiteShadow")
        preference = shadowing.node.settings.ShadowMessagePreferenceSetting
        if shadowing.node.config.dag is None or preference == "LocalOnly":
            return local_tries
        if preference == "RemoteOnly" and remote:
            return remote_tries
        return local_tries + remote_tries

    _placement(plan)


def _preference_everywhere() -> None:
    # The site preference is applied wherever it is set: outside a DAG the servers of
    # every AD site are candidates, and RemoteOnly in a single-site DAG finds no
    # shadow at all (CR-7: "local site only, whatever the preference").
    from reference_impl.shadowing import Shadowing

    def candidates(self: Shadowing) -> list[Any]:
        me = self.node.config
        nodes = self.node.cluster.nodes.values()
        return [n for n in nodes if n.name != me.name and n.dag == me.dag]

    def plan(shadowing: Any, local: list[str], remote: list[str]) -> list[str]:
        local_tries = _tries(shadowing, local, "MaxRetriesForLocalSiteShadow")
        remote_tries = _tries(shadowing, remote, "MaxRetriesForRemoteSiteShadow")
        preference = shadowing.node.settings.ShadowMessagePreferenceSetting
        if preference == "LocalOnly":
            return local_tries
        if preference == "RemoteOnly":
            return remote_tries
        return remote_tries + local_tries

    Shadowing.candidates = candidates  # type: ignore[method-assign]
    _placement(plan)


def _one_attempt_per_site() -> None:
    force_settings(MaxRetriesForRemoteSiteShadow=1, MaxRetriesForLocalSiteShadow=1)


def _one_extra_attempt_per_site() -> None:
    # MaxRetriesFor{Remote,Local}SiteShadow off by one: a site gets one attempt more than
    # the setting allows (CR-7 counts are exact, both ways).
    from reference_impl.shadowing import Shadowing

    original = Shadowing._cycle

    def cycle(self: Shadowing, names: list[str], attempts: int) -> list[str]:
        return original(self, names, attempts + 1)

    Shadowing._cycle = cycle  # type: ignore[method-assign]


def _one_boundary_for_all() -> None:
    # Every node of the organisation counts as a peer of the boundary: copies may go to
    # another DAG, and a relay into another DAG keeps tracking the message (CR-9).
    from reference_impl.node import Node

    def same_boundary(self: Node, other: str) -> bool:
        return other != self.name and other in self.cluster.nodes

    Node.same_boundary = same_boundary  # type: ignore[method-assign]


_SESSION: contextvars.ContextVar[Any] = contextvars.ContextVar("sender_session", default=None)


def _processes_only_after_quit() -> None:
    # A message is only handed to delivery once its sender said QUIT (so that a sender
    # who never saw the 250 and will resend causes no duplicate): a sender that timed
    # out after the copy was made loses its message (CR-8).
    from reference_impl.delivery import Delivery
    from reference_impl.smtp_in import NodeHandler, NodeSMTP

    handle_data = NodeHandler.handle_DATA
    submit = Delivery.submit
    smtp_quit = NodeSMTP.smtp_QUIT

    async def handle_DATA(self: NodeHandler, server: NodeSMTP, session: Any, envelope: Any) -> str:
        if server.peer_state.peer_node is None:
            _SESSION.set(server)
        return await handle_data(self, server, session, envelope)

    def deferred_submit(self: Delivery, message_id: str, domains: list[str]) -> None:
        server = _SESSION.get()
        if server is None:
            submit(self, message_id, domains)
            return
        pending = server.__dict__.setdefault("_pending_submits", [])
        pending.append((self, message_id, domains))

    async def quit_and_submit(self: NodeSMTP, arg: str) -> None:
        _SESSION.set(None)  # tasks started from here on belong to no sender
        for delivery, message_id, domains in self.__dict__.pop("_pending_submits", []):
            submit(delivery, message_id, domains)
        await smtp_quit(self, arg)

    NodeHandler.handle_DATA = handle_DATA  # type: ignore[method-assign]
    Delivery.submit = deferred_submit  # type: ignore[method-assign]
    NodeSMTP.smtp_QUIT = quit_and_submit  # type: ignore[method-assign]


def _releases_copy_on_first_fork() -> None:
    # The shadow is told to discard as soon as one next hop has the message (CR-10).
    from reference_impl.delivery import Delivery

    finish_fork = Delivery._finish_fork

    def _finish_fork(self: Delivery, message: Any, fork: Any, state: str, error: str) -> None:
        finish_fork(self, message, fork, state, error)
        if state == "delivered" and message.shadow_node:
            with self.node.db.transaction(durable=False) as c:
                c.execute(
                    "INSERT OR IGNORE INTO discard_events VALUES (?, ?, ?, ?, NULL)",
                    (message.shadow_node, message.id, message.message_id, self.node.clock.now()),
                )

    Delivery._finish_fork = _finish_fork  # type: ignore[method-assign]


def _forgets_dsn_fork() -> None:
    # A message is retired (and its shadow discarded) without waiting for its DSN (CR-10).
    from reference_impl.queue_db import QueueDB

    QueueDB.children = lambda self, message_id: 0  # type: ignore[method-assign]


def _refuses_bounces() -> None:
    # MAIL FROM:<> is refused, as the reference once did: bounces cannot get in (CR-1).
    from reference_impl.smtp_in import NULL_PATH, NodeHandler

    async def handle_MAIL(
        self: NodeHandler,
        server: Any,
        session: Any,
        envelope: Any,
        address: str,
        mail_options: list[str],
    ) -> str:
        if address in (NULL_PATH, ""):
            return "550 5.1.7 the null reverse-path is not accepted here"
        envelope.mail_from = address
        envelope.mail_options.extend(mail_options)
        return "250 OK"

    NodeHandler.handle_MAIL = handle_MAIL  # type: ignore[attr-defined]


def _shadow_redundancy_off() -> None:
    force_settings(ShadowRedundancyEnabled=False)


def _shadow_session_per_message() -> None:
    # Closes the sender session's shadow session before each copy: the second message
    # of a sender session is copied over a second session (CR-2: one per sender session).
    from reference_impl.shadowing import Shadowing

    original = Shadowing.make_copy

    async def make_copy(self: Shadowing, message: Any, next_hops: list[str], state: Any) -> Any:
        link = state.shadow_link
        if link is not None and link.is_open:
            await link.close()
            state.shadow_link = None
        return await original(self, message, next_hops, state)

    Shadowing.make_copy = make_copy  # type: ignore[method-assign]


def _retries_a_500() -> None:
    # Treats a next hop's 500 as temporary (a 5xx test written as "> 500"): the fork is
    # retried for ever instead of failing, so no DSN goes out.
    from reference_impl.delivery import FINAL, RETRY, _Session

    original = _Session.deliver

    async def deliver(self: _Session, route: Any, message: Any, fork: Any) -> tuple[str, str]:
        outcome, reason = await original(self, route, message, fork)
        if outcome == FINAL and reason.startswith("500 "):
            return RETRY, reason
        return outcome, reason

    _Session.deliver = deliver  # type: ignore[method-assign]


VARIANTS: list[Variant] = [
    Variant(
        name="refuses-bounces",
        breaks="refuses MAIL FROM:<>, so a bounce is never accepted, copied or delivered",
        fails=("pr1_bounce_shadowed_and_promoted_with_null_reverse_path",),
        apply=_refuses_bounces,
    ),
    Variant(
        name="no-shadow-redundancy",
        breaks="runs every node with ShadowRedundancyEnabled=false, whatever it is told",
        # CR-1/CR-2 fail in these; XS-3 and TO-2 must not (test_verdicts_per_behaviour)
        fails=(
            "cr3_shadow_ack_before_sender_ack",
            "xs3_stranger_cannot_shadow",
            "to2_idle_shadow_session_closed",
        ),
        apply=_shadow_redundancy_off,
    ),
    Variant(
        name="ack-before-shadow-copy",
        breaks="sends the sender its 250 before the shadow has acknowledged the copy",
        fails=("cr3_shadow_ack_before_sender_ack",),
        apply=_ack_before_copy,
    ),
    Variant(
        name="never-rejects-unredundant",
        breaks="accepts a message no copy could be made of, even when told to reject it",
        fails=(
            "cr4_single_node_rejects",
            "cr4_cut_link_rejects",
            "cr4_shadow_killed_rejects",
            "cr4_retries_used_up_rejects",
            "cr4_shadow_session_timeout_rejects",
        ),
        apply=_claims_copy_on_failure,
    ),
    Variant(
        name="always-rejects-unredundant",
        breaks="rejects a message no copy could be made of, although told to accept it",
        fails=("cr5_cut_link_accepts", "to4_unacknowledged_copy_times_out_then_accepted"),
        apply=_always_rejects,
    ),
    Variant(
        name="shadows-when-disabled",
        breaks="keeps advertising XSHADOW and making copies with ShadowRedundancyEnabled=false",
        fails=("cr6_disabled_no_xshadow",),
        apply=_ignores_disabled,
    ),
    Variant(
        name="shadow-placement-ignores-preference",
        breaks="places the copy as PreferRemote would, whatever the preference setting says",
        fails=("cr7_remote_only_never_uses_local_site", "cr7_local_only_never_uses_remote_site"),
        apply=_ignores_preference,
    ),
    Variant(
        name="shadow-placement-local-first",
        breaks="PreferRemote tries the local site first and the remote one only as a fallback",
        fails=("cr7_prefer_remote_tries_remote_site_then_local",),
        apply=_local_first,
    ),
    Variant(
        name="shadow-placement-preference-everywhere",
        breaks="applies the site preference outside a DAG and in a single-site DAG too",
        fails=(
            "cr7_single_site_dag_remote_only_uses_local_site",
            "cr7_outside_a_dag_local_site_whatever_the_preference",
        ),
        apply=_preference_everywhere,
    ),
    Variant(
        name="one-shadow-attempt-per-site",
        breaks="ignores MaxRetriesFor{Remote,Local}SiteShadow: one attempt per site, then gives up",
        fails=(
            "cr4_retries_used_up_rejects",
            "cr7_prefer_remote_tries_remote_site_then_local",
            "cr7_remote_only_never_uses_local_site",
            "cr7_local_only_never_uses_remote_site",
            "cr7_outside_a_dag_local_site_whatever_the_preference",
        ),
        apply=_one_attempt_per_site,
    ),
    Variant(
        name="one-extra-shadow-attempt-per-site",
        breaks="MaxRetriesFor{Remote,Local}SiteShadow off by one: one attempt too many per site",
        fails=(
            "cr4_retries_used_up_rejects",
            "cr7_remote_only_never_uses_local_site",
            "cr7_local_only_never_uses_remote_site",
            "cr7_outside_a_dag_local_site_whatever_the_preference",
        ),
        apply=_one_extra_attempt_per_site,
    ),
    Variant(
        name="one-boundary-for-all-nodes",
        breaks="treats every node as a peer of its boundary, across AD sites and DAGs",
        fails=("cr9_crossing_into_another_dag_restarts_tracking",),
        apply=_one_boundary_for_all,
    ),
    Variant(
        name="processes-only-after-quit",
        breaks="hands a message to delivery only once its sender said QUIT",
        fails=("cr8_sender_timeout_after_copy_still_delivered",),
        apply=_processes_only_after_quit,
    ),
    Variant(
        name="releases-copy-on-first-fork",
        breaks="tells the shadow to discard as soon as one next hop has the message",
        fails=("cr10_copy_kept_until_every_next_hop_has_it",),
        apply=_releases_copy_on_first_fork,
    ),
    Variant(
        name="forgets-the-dsn-fork",
        breaks="retires a message, releasing its shadow copy, before its DSN went out",
        fails=("cr10_copy_kept_until_the_dsn_is_out",),
        apply=_forgets_dsn_fork,
    ),
    Variant(
        name="shadow-session-per-message",
        breaks="opens a new shadow session for each message of one sender session",
        fails=("cr2_one_shadow_session_for_a_sender_session",),
        apply=_shadow_session_per_message,
    ),
    Variant(
        name="retries-a-500",
        breaks="retries a next hop's 500 as if it were a temporary failure",
        fails=("cr10_refusal_at_the_500_edge_makes_a_dsn",),
        apply=_retries_a_500,
    ),
]
