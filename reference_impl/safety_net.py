"""Safety Net: hold, expiry, and resubmission by mailbox database and time window.

A resubmission request (SN-5) is coordinated by the node it was made to: it
asks every node's Primary Safety Net (itself directly, the others with
XRESUBMIT PRIMARY). A primary answers for the part of the window its queue
database covers and itself broadcasts the rest to the Shadow Safety Nets
(SN-8). A primary that does not answer for PrimarySafetyNetUnavailableTimeout
(12 h) is given up on: the coordinator broadcasts the whole window for it
(SN-7). Resubmitted messages never produce DSNs (SN-9); shadow copies are
expanded and categorised afresh (SN-10, SN-11); messages that left the
boundary are never resubmitted (SN-12).
"""

from __future__ import annotations

import logging
from typing import Any

from .peer_link import PeerError, PeerLink

# The node as Safety Net sees it (ports.py): no import of node.py, which imports this.
from .ports import SafetyNetNode
from .queue_db import Message, new_id

log = logging.getLogger(__name__)

JANITOR_MAX_INTERVAL = 60.0


class SafetyNet:
    def __init__(self, node: SafetyNetNode) -> None:
        self.node = node

    # -- housekeeping ------------------------------------------------------------

    def janitor_interval(self) -> float:
        s = self.node.settings
        shortest = min(
            s.SafetyNetHoldTime,
            s.ShadowMessageAutoDiscardInterval,
            s.SafetyNetHoldTime + s.MessageExpirationTimeout,
        )
        return max(0.05, min(JANITOR_MAX_INTERVAL, shortest / 10))

    def sweep(self) -> dict[str, int]:
        """SN-3, SN-4, DI-6: everything whose time is up leaves."""
        node = self.node
        s = node.settings
        now = node.clock.now()
        return {
            "safety_net": node.db.expire_safety_net(now),
            "discard_events": node.db.expire_discards(now - s.ShadowMessageAutoDiscardInterval),
            "shadows": node.db.expire_shadows(
                now - (s.SafetyNetHoldTime + s.MessageExpirationTimeout)
            ),
        }

    async def run(self) -> None:
        for request in self.node.db.requests():
            if request["state"] == "running":
                self.node.background(self._coordinate(request))
        while True:
            await self.ask_before_expiring()
            self.sweep()
            await self.node.clock.sleep(self.janitor_interval())

    async def ask_before_expiring(self) -> None:
        """Before SN-4 drops copies never acknowledged, ask their primary once (a
        heartbeat): one that came back on a new queue database has them promoted (PR-2),
        not dropped. Its heartbeats would have asked long before, but a clock moved by a
        day at once wakes this sweep and the heartbeat together, and the sweep won."""
        node = self.node
        s = node.settings
        due = node.db.shadow_primaries(
            older_than=node.clock.now() - (s.SafetyNetHoldTime + s.MessageExpirationTimeout)
        )
        for primary in due:
            await node.shadowing.heartbeat(primary)

    # -- requests ----------------------------------------------------------------

    def request(self, database: str, start: float, end: float) -> dict[str, Any]:
        """SN-5: a resubmission request made to this node, which coordinates it."""
        request = {
            "request_id": new_id(),
            "database": database,
            "start": start,
            "end": end,
            "created_at": self.node.clock.now(),
            "state": "running",
            "waiting": sorted(self.node.cluster.nodes),
            "log": [],
        }
        self.node.db.save_request(request)
        self.node.background(self._coordinate(request))
        return request

    async def _coordinate(self, request: dict[str, Any]) -> None:
        node = self.node
        window = (request["database"], request["start"], request["end"])
        while request["waiting"]:
            for primary in list(request["waiting"]):
                answer = await self._ask_primary(primary, *window)
                if answer is not None:
                    request["waiting"].remove(primary)
                    request["log"].append(
                        {"node": primary, "answer": answer, "at": node.clock.now()}
                    )
                elif node.clock.now() - request["created_at"] >= (
                    node.settings.PrimarySafetyNetUnavailableTimeout
                ):
                    # SN-7: the primary is gone for good; its shadows answer for it.
                    request["waiting"].remove(primary)
                    count = await self.broadcast(primary, *window)
                    request["log"].append(
                        {"node": primary, "answer": f"broadcast: {count}", "at": node.clock.now()}
                    )
            node.db.save_request(request)
            if request["waiting"]:
                await node.clock.sleep(node.settings.ShadowHeartbeatFrequency)
        request["state"] = "done"
        node.db.save_request(request)

    async def _ask_primary(
        self, primary: str, database: str, start: float, end: float
    ) -> str | None:
        if primary == self.node.name:
            return await self.resubmit_primary(database, start, end)
        try:
            reply = await self._peer_command(primary, ["PRIMARY", database, repr(start), repr(end)])
        except PeerError as exc:
            log.info("primary Safety Net of %s did not answer: %s", primary, exc)
            return None
        return reply

    async def broadcast(self, primary: str, database: str, start: float, end: float) -> int:
        """Ask every Shadow Safety Net of the boundary for ``primary``'s messages."""
        total = 0
        for name in sorted(self.node.cluster.nodes):
            if name == self.node.name:
                total += self.resubmit_shadow(primary, database, start, end)
                continue
            try:
                reply = await self._peer_command(
                    name, ["SHADOW", database, repr(start), repr(end), primary]
                )
            except PeerError as exc:
                log.info("shadow Safety Net of %s did not answer: %s", name, exc)
                continue
            words = reply.split()
            if len(words) > 2 and words[1] == "RESUBMITTED":
                total += int(words[2])
        return total

    async def _peer_command(self, peer: str, words: list[str]) -> str:
        address = self.node.peer_address(peer)
        if address is None:
            raise PeerError(f"no address known for {peer}")
        link = PeerLink(
            self.node.name,
            peer,
            address,
            self.node.cluster.secret,
            self.node.settings.SendConnectionInactivityTimeout,
            on_discards=self.node.shadowing.on_discards,
        )
        try:
            await link.open()
            return await link.resubmit(words)
        finally:
            await link.close()

    async def answer(self, requester: str, words: list[str]) -> str:
        """XRESUBMIT PRIMARY|SHADOW <database> <start> <end> [<primary>]"""
        try:
            kind, database, start, end = (
                words[0].upper(),
                words[1],
                float(words[2]),
                float(words[3]),
            )
        except (IndexError, ValueError):
            return "501 5.5.4 Syntax: XRESUBMIT PRIMARY|SHADOW <database> <start> <end> [<primary>]"
        if kind == "PRIMARY":
            return "250 " + await self.resubmit_primary(database, start, end)
        if kind == "SHADOW" and len(words) == 5:
            count = self.resubmit_shadow(words[4], database, start, end)
            return f"250 2.0.0 RESUBMITTED {count}"
        return "501 5.5.4 Syntax: XRESUBMIT PRIMARY|SHADOW <database> <start> <end> [<primary>]"

    # -- resubmission --------------------------------------------------------------

    async def resubmit_primary(self, database: str, start: float, end: float) -> str:
        """This node's Primary Safety Net; the part before its queue database existed
        is broadcast to the shadows (SN-8)."""
        node = self.node
        created = node.db.created_at
        count = 0
        for entry in node.db.safety_net("primary", max(start, created), end):
            if database not in entry["databases"] or entry["crossed_boundary"]:
                continue
            recipients = [r for r in entry["recipients"] if node.directory.database(r) == database]
            if recipients and self._resubmit(entry, recipients, categorise=False):
                count += 1
        uncovered = "-"
        if start < created:
            uncovered_end = min(end, created)
            uncovered = f"{start!r} {uncovered_end!r}"
            count += await self.broadcast(node.name, database, start, uncovered_end)
        return f"2.0.0 RESUBMITTED {count} UNCOVERED {uncovered}"

    def resubmit_shadow(self, primary: str, database: str, start: float, end: float) -> int:
        node = self.node
        count = 0
        for entry in node.db.safety_net("shadow", start, end, primary=primary):
            if entry["crossed_boundary"]:
                continue
            # SN-10: expand the original recipients with today's directory.
            recipients = [
                r
                for r in node.directory.expand(entry["recipients"])
                if node.directory.database(r) == database
            ]
            if recipients and self._resubmit(entry, recipients, categorise=True):
                count += 1
        return count

    def _resubmit(self, entry: dict[str, Any], recipients: list[str], *, categorise: bool) -> bool:
        node = self.node
        plan, unroutable = node.categorise(recipients)
        if not plan:
            log.warning("resubmission of %s: no route for %s", entry["message_id"], unroutable)
            return False
        message = Message(
            id=new_id(),
            message_id=entry["message_id"],
            sender=entry["sender"],
            recipients=recipients,
            content=entry["content"],
            received_at=node.clock.now(),
            origin="resubmitted",
            no_dsn=True,  # SN-9
            keep_in_safety_net=False,
        )
        # SN-11: a shadow copy goes through categorisation here, the primary's is done.
        node.enqueue(message, plan, categorise=categorise)
        node.stats["resubmitted"] += 1
        return True
