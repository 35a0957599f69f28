"""Shadow redundancy: making copies (primary side), keeping them (shadow side).

Primary side: before acknowledging a message, copy it to a node of the
boundary chosen by ShadowMessagePreferenceSetting, with the retry budgets of
MaxRetriesFor{Remote,Local}SiteShadow (CR-1..CR-7, TO-4).

Shadow side: store copies per primary and next hop (CR-10), ask each primary
for discard notifications on every session and at least every
ShadowHeartbeatFrequency (DI-2), move discarded copies to the Shadow Safety
Net (DI-4, SN-2), and promote copies when the primary stays unreachable for
ShadowResubmitTimeSpan (PR-1), after ShadowHeartbeatRetryCount heartbeat
failures on a 2010 node (PR-6), or at once when the primary's queue database
ID changed (PR-2). A promoted copy with no route waits for one (PR-5).
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from . import messages
from .config import NodeConfig
from .peer_link import PeerError, PeerLink
from .peers import PeerState

# The node as shadowing sees it (ports.py): no import of node.py, which imports this.
from .ports import ShadowingNode
from .queue_db import Message, new_id
from .stall_watch import StallWatch

log = logging.getLogger(__name__)

REPLY_COPY_STORED = "250 2.0.0 Shadow copy stored"


class Shadowing:
    def __init__(self, node: ShadowingNode) -> None:
        self.node = node
        self._heartbeats: dict[str, asyncio.Task[Any]] = {}
        #: set (and replaced) when ShadowHeartbeatFrequency changes: wakes the waits
        self._retimed = asyncio.Event()
        self._rotation = 0
        # Contacts are written at most every _contact_period(); what was not
        # written yet lives here, and a failure forces the next write (PR-6 counts).
        self._last_contact: dict[str, tuple[float, str | None]] = {}
        self._failed_since_contact: set[str] = set()
        #: primary -> when this node resumed after standing still (see _note_stall) or
        #: started: the primary's unreachability is measured from then on
        self._stalled_at: dict[str, float] = {}
        self.stalls = StallWatch(node.clock.now)
        self.attempt_log: list[dict[str, Any]] = []

    def start(self) -> None:
        if self.node.clock.mode == "real":
            self.node.background(self.stalls.run())
        now = self.node.clock.now()
        for primary in self.node.db.shadow_primaries():
            # PR-1 counts the time this node could not open a session to the primary:
            # while it was down itself it tried nothing, so the span starts now (a shadow
            # killed just after a heartbeat, back 3 s later on a loaded machine, promoted
            # at its first slow greeting a primary that never failed)
            self._stalled_at[primary] = now
            self.ensure_heartbeat(primary)

    # -- primary side -------------------------------------------------------------

    def candidates(self) -> list[NodeConfig]:
        """Nodes of this node's boundary: its DAG, or its AD site outside a DAG."""
        return [n for n in self.node.cluster.nodes.values() if self.node.same_boundary(n.name)]

    def attempt_plan(self) -> list[str]:
        """CR-7: the sequence of shadow attempts, by site and preference."""
        settings = self.node.settings
        me = self.node.config
        members = self.candidates()
        local = sorted(n.name for n in members if n.site == me.site)
        remote = sorted(n.name for n in members if n.site != me.site)
        local_tries = self._cycle(local, settings.MaxRetriesForLocalSiteShadow)
        if me.dag is None or not remote:
            return local_tries
        remote_tries = self._cycle(remote, settings.MaxRetriesForRemoteSiteShadow)
        preference = settings.ShadowMessagePreferenceSetting
        if preference == "RemoteOnly":
            return remote_tries
        if preference == "LocalOnly":
            return local_tries
        return remote_tries + local_tries

    def _cycle(self, names: list[str], attempts: int) -> list[str]:
        if not names:
            return []
        start = self._rotation % len(names)
        return [names[(start + i) % len(names)] for i in range(attempts)]

    async def make_copy(
        self, message: Message, next_hops: list[str], state: PeerState
    ) -> str | None:
        """Copy ``message`` to a shadow; the shadow's name, or None if every attempt failed."""
        self._rotation += 1
        settings = self.node.settings
        link = state.shadow_link
        if state.shadow_idle is not None:
            state.shadow_idle.cancel()  # busy again
        if isinstance(link, PeerLink) and link.is_open:
            if await self._try_copy(link, message, next_hops):
                self._close_when_idle(state, link)
                return link.peer
            await link.close()
            state.shadow_link = None
        for attempt, peer in enumerate(self.attempt_plan(), start=1):
            address = self.node.peer_address(peer)
            if address is None:
                self._log_attempt(message, peer, attempt, "no address known for this peer")
                continue
            link = PeerLink(
                self.node.name,
                peer,
                address,
                self.node.cluster.secret,
                timeout=settings.SendConnectionInactivityTimeout,
                on_discards=self.on_discards,
            )
            try:
                await link.open()
            except PeerError as exc:
                self._log_attempt(message, peer, attempt, str(exc))
                await link.close()
                continue
            if await self._try_copy(link, message, next_hops, attempt):
                # CR-2: this session belongs to the sender's session and ends with it.
                state.shadow_link = link
                self._close_when_idle(state, link)
                return peer
            await link.close()
        return None

    def _close_when_idle(self, state: PeerState, link: PeerLink) -> None:
        """TO-2: the session to the shadow is an outbound one; idle past the Send
        connector's limit (the sender sends nothing more), it is closed."""

        def close() -> None:
            if state.shadow_link is link:
                state.shadow_link = None
                self.node.background(link.close())

        loop = asyncio.get_running_loop()
        timeout = self.node.settings.SendConnectionInactivityTimeout
        state.shadow_idle = loop.call_later(timeout, close)

    async def _try_copy(
        self, link: PeerLink, message: Message, next_hops: list[str], attempt: int = 0
    ) -> bool:
        try:
            await link.send_copy(
                message.id,
                self.node.db.db_id,
                next_hops,
                message.sender,
                message.recipients,
                message.content,
            )
        except PeerError as exc:
            self._log_attempt(message, link.peer, attempt, str(exc))
            return False
        self.node.stats["shadow_copies_made"] += 1
        self._log_attempt(message, link.peer, attempt, "ok")
        return True

    def _log_attempt(self, message: Message, peer: str, attempt: int, outcome: str) -> None:
        log.info("shadow attempt %s for %s on %s: %s", attempt, message.id, peer, outcome)
        self.attempt_log.append(
            {
                "message": message.id,
                "message_id": message.message_id,
                "peer": peer,
                "attempt": attempt,
                "outcome": outcome,
                "at": self.node.clock.now(),
            }
        )
        del self.attempt_log[:-500]

    # -- shadow side ---------------------------------------------------------------

    def store_copy(
        self,
        primary: str,
        copy: dict[str, Any],
        sender: str,
        recipients: list[str],
        content: bytes,
    ) -> str:
        self.node.db.add_shadow(
            {
                "primary_node": primary,
                "primary_db_id": copy["primary_db_id"],
                "primary_msg": copy["primary_msg"],
                "message_id": messages.header(content, "Message-ID"),
                "sender": sender,
                "recipients": recipients,
                "next_hops": copy["next_hops"],
                "content": content,
                "received_at": self.node.clock.now(),
            }
        )
        self.node.stats["shadow_copies_stored"] += 1
        # The primary just opened a session to hand this copy over: it is up. Without
        # this, a heartbeat still failing from an earlier outage promoted copies the
        # primary had only now made, and both nodes delivered them (found by the
        # durability workloads under pause).
        self._contact(primary, self.node.clock.now(), copy["primary_db_id"])
        self.ensure_heartbeat(primary)
        return REPLY_COPY_STORED

    def keep_shadow_of_relay(
        self,
        primary: str,
        primary_msg: str,
        db_id: str,
        message: Message,
        hops: list[str],
        recipients: list[str],
    ) -> None:
        """2010 handshake, sending side: keep what was handed to ``primary``."""
        self.node.db.add_shadow(
            {
                "primary_node": primary,
                "primary_db_id": db_id,
                "primary_msg": primary_msg,
                "message_id": message.message_id,
                "sender": message.sender,
                "recipients": recipients,
                "next_hops": hops,
                "content": message.content,
                "received_at": self.node.clock.now(),
            }
        )
        self.ensure_heartbeat(primary)

    def ensure_heartbeat(self, primary: str) -> None:
        task = self._heartbeats.get(primary)
        if task is None or task.done():
            self._heartbeats[primary] = self.node.background(self._heartbeat_loop(primary))

    async def _heartbeat_loop(self, primary: str) -> None:
        # The first beat is due one frequency after the oldest copy arrived, not after
        # this loop started: a worker's note of the copy may reach the owner late.
        # (Never before this node started or resumed: see _stalled_at.)
        oldest = self.node.db.oldest_shadow_arrival(primary)
        before = self.node.clock.now() if oldest is None else oldest
        before = max(before, self._stalled_at.get(primary, before))
        while self.node.db.has_shadows(primary):
            waited = await self._one_beat_from(before)
            self._note_stall(primary, before, waited)
            await self.heartbeat(primary)
            before = self.node.clock.now()

    async def _one_beat_from(self, since: float) -> float:
        """Until one ShadowHeartbeatFrequency after ``since``, the value in force: an
        admin's change wakes the wait, so a shorter frequency holds from the change
        (DI-2), not from the end of a beat of the old one. Returns the longest value
        waited under (a shortened beat is no stall of this node)."""
        longest = 0.0
        while True:
            changed = self._retimed
            beat = self.node.settings.ShadowHeartbeatFrequency
            longest = max(longest, beat)
            left = since + beat - self.node.clock.now()
            if left <= 0 or not await self.node.clock.wait(changed, left):
                return longest

    def retime_heartbeats(self) -> None:
        """ShadowHeartbeatFrequency changed: every heartbeat wait measures itself again."""
        changed, self._retimed = self._retimed, asyncio.Event()
        changed.set()

    def _note_stall(self, primary: str, since: float, expected: float) -> bool:
        """Whether this node itself stood still (frozen, starved) since ``since``: its
        watchdog saw the loop stand still, or a wait outlasted ``expected`` by far. The
        time it missed says nothing of the primary, so the primary's unreachability is
        then measured from now on. Real clock only: a virtual clock jumps by design."""
        now = self.node.clock.now()
        if self.node.clock.mode != "real":
            return False
        # the watchdog saw the loop stand still, or this wait outlasted its own timer by far
        if not self.stalls.stood_still_since(since) and now - since <= 2 * expected + 1.0:
            return False
        self._stalled_at[primary] = now
        return True

    async def heartbeat(self, primary: str) -> None:
        """DI-2: a session to the primary whose only purpose is XQDISCARD."""
        node = self.node
        settings = node.settings
        if not node.db.has_shadows(primary):
            return
        timeout = (
            settings.ShadowHeartbeatTimeoutInterval
            if node.profile == "2010"
            else settings.SendConnectionInactivityTimeout
        )
        address = node.peer_address(primary)
        link = None
        started = node.clock.now()
        try:
            if address is None:
                raise PeerError(f"no address known for {primary}")
            link = PeerLink(
                node.name,
                primary,
                address,
                node.cluster.secret,
                timeout,
                on_discards=self.on_discards,
            )
            await link.open(drain=True)
            if not link.asked:
                self._contact(primary, node.clock.now(), None)
        except PeerError as exc:
            # a session that outlasted its own timeouts by far: this node stood still
            if not self._note_stall(primary, started, timeout):
                self._primary_unreachable(primary, str(exc))
        finally:
            if link is not None:
                await link.close()

    def _primary_unreachable(self, primary: str, reason: str) -> None:
        node = self.node
        self._failed_since_contact.add(primary)
        failures = node.db.peer_failure(primary)
        peer = node.db.peer(primary)
        if node.profile == "2010":
            # PR-6: consecutive heartbeat failures, not elapsed time, decide.
            if failures >= node.settings.ShadowHeartbeatRetryCount:
                self.promote(primary, f"{failures} heartbeats failed ({reason})")
            return
        last = peer["last_contact"] if peer else node.clock.now()
        if primary in self._last_contact:
            last = max(last, self._last_contact[primary][0])
        last = max(last, self._stalled_at.get(primary, last))
        if node.clock.now() - last >= node.settings.ShadowResubmitTimeSpan:
            self.promote(primary, f"unreachable since {last:.3f} ({reason})")

    async def on_discards(self, primary: str, db_id: str | None, ids: list[str]) -> None:
        node = self.node
        now = node.clock.now()
        if ids:
            with node.db.transaction(durable=True):
                node.db.shadow_to_safety_net(primary, ids, self._safety_net_entry)
            # on disk before the primary hears we acted on them (XQDISCARD ACK)
            await node.db.flushed()
        if db_id is not None:
            stale = node.db.stale_shadows(primary, db_id)
            if stale:
                # PR-2: the primary lost its queue; what it held is only here now.
                self.promote(primary, "primary queue database changed", stale, primary_failed=False)
        self._contact(primary, now, db_id)

    def _contact(self, primary: str, now: float, db_id: str | None) -> None:
        """Remember a successful contact; written at most once per heartbeat period."""
        last = self._last_contact.get(primary)
        recent = last is not None and last[1] == db_id and now - last[0] < self._contact_period()
        if recent and primary not in self._failed_since_contact:
            return
        self._failed_since_contact.discard(primary)
        self._last_contact[primary] = (now, db_id)
        self.node.db.peer_contact(primary, now, db_id)

    def _contact_period(self) -> float:
        return min(1.0, self.node.settings.ShadowHeartbeatFrequency / 2)

    def _safety_net_entry(self, shadow: dict[str, Any]) -> dict[str, Any] | None:
        node = self.node
        if node.profile == "2010":
            return None  # XS-6: a 2010 querier simply deletes its shadows.
        now = node.clock.now()
        expanded = node.directory.expand(shadow["recipients"])
        routes = [node.route(hop) for hop in shadow["next_hops"]]
        return {
            "kind": "shadow",
            "message_id": shadow["message_id"],
            "primary_node": shadow["primary_node"],
            "primary_db_id": shadow["primary_db_id"],
            "sender": shadow["sender"],
            # SN-10: the original envelope recipients, never the expansion.
            "recipients": shadow["recipients"],
            "databases": sorted({d for r in expanded if (d := node.directory.database(r))}),
            "content": shadow["content"],
            "processed_at": now,
            "expires_at": now + node.settings.SafetyNetHoldTime,
            "crossed_boundary": bool(routes)
            and all(r is not None and r.kind == "boundary" for r in routes),
        }

    def promote(
        self,
        primary: str,
        reason: str,
        shadows: list[dict[str, Any]] | None = None,
        *,
        primary_failed: bool = True,
    ) -> int:
        """PR-1/PR-2/PR-6: shadow copies become primary messages of this node.

        ``primary_failed``: the primary is down (not back with a new queue
        database), so a route through it is no alternative route (PR-5)."""
        node = self.node
        promoted = 0
        for shadow in shadows if shadows is not None else node.db.shadows(primary):
            plan, unroutable = node.categorise(shadow["recipients"])
            if unroutable or not plan or (primary_failed and self._routes_via(plan, primary)):
                # PR-5: no alternative route; stay a shadow until one exists.
                node.db.set_shadow_state(shadow["id"], "awaiting_route")
                continue
            message = Message(
                id=new_id(),
                message_id=shadow["message_id"],
                sender=shadow["sender"],
                recipients=shadow["recipients"],
                content=shadow["content"],
                received_at=node.clock.now(),
                origin="promoted",
            )
            # the copy is claimed and queued in one transaction: another session, or
            # another SMTP-in worker of this node, may be promoting the same stale copies
            # now (two discard answers naming a new database), and only one may queue it
            with node.db.transaction(durable=True):
                if not node.db.remove_shadow(shadow["id"]):
                    continue
                node.enqueue(message, plan)
            promoted += 1
        if promoted:
            log.warning("promoted %d shadow messages of %s: %s", promoted, primary, reason)
            node.stats["promoted"] += promoted
        return promoted

    def _routes_via(self, plan: dict[str, Any], peer: str) -> bool:
        """Some next hop of ``plan`` is reached only through ``peer`` (2010: a relay chain)."""
        routes = [self.node.route(domain) for domain in plan]
        return any(r is not None and r.kind == "node" and r.node == peer for r in routes)

    def retry_awaiting_route(self) -> int:
        """Routes changed: promoted copies that waited for one go now (PR-5)."""
        waiting = [s for s in self.node.db.shadows() if s["state"] == "awaiting_route"]
        by_primary: dict[str, list[dict[str, Any]]] = {}
        for shadow in waiting:
            by_primary.setdefault(shadow["primary_node"], []).append(shadow)
        return sum(
            self.promote(primary, "a route now exists", group)
            for primary, group in by_primary.items()
        )

    def shadow_queues(self) -> dict[str, list[dict[str, Any]]]:
        """CR-10: one shadow queue per primary and next hop."""
        queues: dict[str, list[dict[str, Any]]] = {}
        for shadow in self.node.db.shadows():
            view = {k: v for k, v in shadow.items() if k != "content"}
            for hop in shadow["next_hops"] or ["-"]:
                queues.setdefault(f"{shadow['primary_node']}/{hop}", []).append(view)
        return queues
