"""Delivery to next hops: one fork per next hop, retried until done or expired.

When every fork of a message is done (and its DSN, if one was due, is too),
the message is retired in one transaction: discard events for its shadows
(DI-1, DI-7, CR-10), Primary Safety Net entries for what reached a mailbox
or crossed the boundary (SN-1, SN-12), removal from the active queue.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import logging
from typing import Any

import aiosmtplib

from . import messages
from .config import NextHop
from .peer_link import PeerError, PeerLink, describe

# The node as delivery sees it (ports.py): no import of node.py, which imports this.
from .ports import DeliveryNode
from .queue_db import Fork, Message, new_id

log = logging.getLogger(__name__)

WORKERS_PER_HOP = 4
FINAL, RETRY = "final", "retry"


class Delivery:
    def __init__(self, node: DeliveryNode) -> None:
        self.node = node
        self._ready: dict[str, asyncio.Queue[str]] = {}
        self._workers: dict[str, list[asyncio.Task[Any]]] = {}
        self._later: list[tuple[float, str, str]] = []
        self._wake = asyncio.Event()
        self._processed: dict[str, asyncio.Event] = {}

    # -- scheduling -----------------------------------------------------------------

    def submit(self, message_id: str, domains: list[str]) -> None:
        for domain in domains:
            self.queue_for(domain).put_nowait(message_id)

    def queue_for(self, domain: str) -> asyncio.Queue[str]:
        queue = self._ready.get(domain)
        if queue is None:
            queue = self._ready[domain] = asyncio.Queue()
            self._workers[domain] = [
                self.node.background(self._worker(domain, queue)) for _ in range(WORKERS_PER_HOP)
            ]
        return queue

    def _retry_later(self, message_id: str, domain: str, when: float) -> None:
        heapq.heappush(self._later, (when, message_id, domain))
        self._wake.set()

    async def run(self) -> None:
        """Requeue what a previous run left pending, then release retries when due."""
        now = self.node.clock.now()
        for fork in self.node.db.pending_forks():
            if fork.next_attempt <= now:
                self.queue_for(fork.domain).put_nowait(fork.message)
            else:
                heapq.heappush(self._later, (fork.next_attempt, fork.message, fork.domain))
        clock = self.node.clock
        while True:
            now = clock.now()
            while self._later and self._later[0][0] <= now:
                _, message_id, domain = heapq.heappop(self._later)
                self.queue_for(domain).put_nowait(message_id)
            timeout = self._later[0][0] - now if self._later else None
            self._wake.clear()
            await clock.wait(self._wake, timeout)

    async def wait_processed(self, message_id: str, timeout: float) -> bool:
        """XS-4: wait until the message reached every next hop, or ``timeout``."""
        if self.node.db.message(message_id) is None:
            return True
        event = self._processed.setdefault(message_id, asyncio.Event())
        try:
            return await self.node.clock.wait(event, timeout)
        finally:
            self._processed.pop(message_id, None)

    # -- workers --------------------------------------------------------------------

    async def _worker(self, domain: str, queue: asyncio.Queue[str]) -> None:
        session = _Session(self.node)
        try:
            while True:
                if not queue.empty():
                    message_id = queue.get_nowait()  # busy: no idle timer to arm
                else:
                    try:
                        # TO-2: an idle outbound session is closed after the Send limit.
                        message_id = await asyncio.wait_for(
                            queue.get(), self.node.settings.SendConnectionInactivityTimeout
                        )
                    except TimeoutError:
                        await session.close()
                        message_id = await queue.get()
                try:
                    await self._attempt(session, message_id, domain)
                except Exception:
                    # One message that breaks the code must not take one of the
                    # hop's few workers with it (four such once stopped a hop).
                    log.exception("delivery of %s to %s failed; retrying later", message_id, domain)
                    await session.close()
                    self._retry_later(
                        message_id,
                        domain,
                        self.node.clock.now() + self.node.settings.TransientFailureRetryInterval,
                    )
        finally:
            await session.close()

    async def _attempt(self, session: _Session, message_id: str, domain: str) -> None:
        node = self.node
        message = node.db.message(message_id)
        fork = next((f for f in node.db.forks_of(message_id) if f.domain == domain), None)
        if message is None or fork is None or fork.state != "pending":
            return
        now = node.clock.now()
        if now - message.received_at >= node.expiration_for(message.received_at):
            self._finish_fork(message, fork, "failed", "4.4.7 message expired in the queue")
            return
        route = node.route(domain)
        if route is None:
            self._retry(message, fork, "no route to this domain")
            return
        outcome, detail = await session.deliver(route, message, fork)
        if session.refused:
            # the next hop took the others: what is retried or reported is these alone
            node.db.fork_narrow(fork, session.refused)
        if outcome == RETRY:
            self._retry(message, fork, detail)
        else:
            self._finish_fork(message, fork, "delivered" if detail == "" else "failed", detail)

    def _retry(self, message: Message, fork: Fork, error: str) -> None:
        when = self.node.clock.now() + self.node.settings.TransientFailureRetryInterval
        self.node.db.fork_retry(message.id, fork.domain, when, error)
        self._retry_later(message.id, fork.domain, when)

    def _finish_fork(self, message: Message, fork: Fork, state: str, error: str) -> None:
        node = self.node
        # One commit for the fork and, when it was the last one, the retirement.
        with node.db.transaction(durable=False):
            node.db.fork_done(message.id, fork.domain, state, node.clock.now(), error)
            self.message_progress(message.id)
        if state == "delivered":
            node.stats["delivered"] += 1

    # -- retiring ---------------------------------------------------------------------

    def message_progress(self, message_id: str) -> None:
        node = self.node
        message = node.db.message(message_id)
        if message is None:
            return
        forks = node.db.forks_of(message_id)
        if any(f.state == "pending" for f in forks):
            return
        failed = {
            r: f"fork {f.domain} failed" for f in forks if f.state == "failed" for r in f.recipients
        }
        if failed and not message.no_dsn and message.sender:
            self._send_dsn(message, failed)
        # CR-10: a DSN of this message is still on its way (only a failed fork makes one).
        if any(f.state != "delivered" for f in forks) and node.db.children(message_id):
            return
        now = node.clock.now()
        entries = []
        if message.keep_in_safety_net:
            for fork in forks:
                route = node.route(fork.domain)
                # SN-1: every recipient delivered, also those the next hop took on an
                # attempt it answered in part, whatever became of the others
                delivered = [*fork.taken, *(fork.recipients if fork.state == "delivered" else [])]
                if not delivered or (route is not None and route.kind == "node"):
                    continue
                entries.append(self._safety_net_entry(message, delivered, route, now))
        shadows = [n for n in (message.shadow_node, message.shadow_hop) if n]
        node.db.retire(message, shadows, entries, now)
        event = self._processed.get(message_id)
        if event is not None:
            event.set()
        if message.parent:
            self.message_progress(message.parent)

    def _safety_net_entry(
        self, message: Message, recipients: list[str], route: NextHop | None, now: float
    ) -> dict[str, Any]:
        directory = self.node.directory
        databases = list(dict.fromkeys(d for d in map(directory.database, recipients) if d))
        return {
            "kind": "primary",
            "message_id": message.message_id,
            "primary_node": self.node.name,
            "primary_db_id": self.node.db.db_id,
            "sender": message.sender,
            "recipients": recipients,
            "databases": databases,
            "content": message.content,
            "processed_at": now,
            "expires_at": now + self.node.settings.SafetyNetHoldTime,
            "crossed_boundary": route is not None and route.kind == "boundary",
        }

    def _send_dsn(self, message: Message, failed: dict[str, str]) -> None:
        node = self.node
        for fork in node.db.forks_of(message.id):
            if fork.state == "failed":
                node.db.fork_done(
                    message.id,
                    fork.domain,
                    "failed-reported",
                    node.clock.now(),
                    "reported in a DSN",
                )
        plan, unroutable = node.categorise([message.sender])
        if unroutable or not plan:
            log.warning("DSN for %s dropped: no route to %s", message.id, message.sender)
            return
        now = node.clock.now()
        content = messages.dsn(node.name, message.sender, message.message_id, failed, now)
        dsn = Message(
            id=new_id(),
            message_id=messages.header(content, "Message-ID"),
            sender="",
            recipients=[message.sender],
            content=content,
            received_at=now,
            origin="dsn",
            no_dsn=True,
            parent=message.id,
            keep_in_safety_net=False,
        )
        node.stats["dsns"] += 1
        node.enqueue(dsn, plan, categorise=False)


class _Session:
    """A worker's outbound connection, kept open between messages to the same hop."""

    def __init__(self, node: DeliveryNode) -> None:
        self.node = node
        self.smtp: aiosmtplib.SMTP | None = None
        self.address: tuple[str, int] | None = None
        #: of the last delivery: the recipients the next hop refused while it took
        #: others (None: it took all, or none)
        self.refused: list[str] | None = None

    async def close(self) -> None:
        smtp, self.smtp = self.smtp, None
        if smtp is not None and smtp.is_connected:
            with contextlib.suppress(aiosmtplib.SMTPException, OSError):
                await smtp.quit()
        if smtp is not None:
            smtp.close()

    async def deliver(self, route: NextHop, message: Message, fork: Fork) -> tuple[str, str]:
        """(FINAL, "") delivered; (FINAL, reason) failed for good; (RETRY, reason).
        When the next hop took some recipients only, :attr:`refused` names the others."""
        self.refused = None
        if route.kind == "node":
            return await self._relay(route, message, fork)
        assert route.address is not None
        if self.smtp is None or not self.smtp.is_connected or self.address != route.address:
            await self.close()
            self.smtp = aiosmtplib.SMTP(
                hostname=route.address[0],
                port=route.address[1],
                local_hostname=self.node.name,
                start_tls=False,
                timeout=self.node.settings.SendConnectionInactivityTimeout,
            )
            self.address = route.address
            try:
                await self.smtp.connect()
            except (aiosmtplib.SMTPException, OSError) as exc:
                await self.close()
                return RETRY, describe(exc)
        try:
            errors, _ = await self.smtp.sendmail(message.sender, fork.recipients, message.content)
        except ValueError as exc:
            # An address aiosmtplib will not put on a command line never will be.
            await self.close()
            return FINAL, f"5.1.3 {exc}"
        except aiosmtplib.SMTPRecipientsRefused as exc:
            # Every recipient refused: final only if every refusal was permanent.
            permanent = all(r.code >= 500 for r in exc.recipients)
            return (FINAL if permanent else RETRY), describe(exc)
        except aiosmtplib.SMTPResponseException as exc:
            await self.close()
            return (FINAL if exc.code >= 500 else RETRY), describe(exc)
        except (aiosmtplib.SMTPException, OSError) as exc:
            await self.close()
            return RETRY, describe(exc)
        if errors:
            self.refused = [r for r in fork.recipients if r in errors]
            if any(code < 500 for code, _ in errors.values()):
                return RETRY, f"recipients deferred: {errors}"
            return FINAL, f"recipients refused: {errors}"
        return FINAL, ""

    async def _relay(self, route: NextHop, message: Message, fork: Fork) -> tuple[str, str]:
        """To another node of the cluster, keeping a shadow when it offers XSHADOW."""
        node = self.node
        assert route.node is not None
        address = node.peer_address(route.node)
        if address is None:
            return RETRY, f"no address known for {route.node}"
        link = PeerLink(
            node.name,
            route.node,
            address,
            node.cluster.secret,
            node.settings.SendConnectionInactivityTimeout,
            on_discards=node.shadowing.on_discards,
        )
        try:
            await link.open()
            # CR-9: tracking never crosses a boundary; the next one makes its own copy.
            keep = (
                node.settings.ShadowRedundancyEnabled
                and link.advert is not None
                and node.same_boundary(route.node)
            )
            reply = await link.relay(message.sender, fork.recipients, message.content, keep)
            if keep and link.advert is not None:
                queue_id = reply.split()[1] if len(reply.split()) > 1 else new_id()
                node.shadowing.keep_shadow_of_relay(
                    route.node,
                    queue_id,
                    link.advert.db_id,
                    message,
                    [fork.domain],
                    fork.recipients,
                )
                if node.profile == "2010":
                    # XS-6: the discard exchange closes every session.
                    await link.query_discards()
        except PeerError as exc:
            return RETRY, str(exc)
        finally:
            await link.close()
        return FINAL, ""
