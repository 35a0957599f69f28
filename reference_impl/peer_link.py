"""SMTP out to another node of the boundary: authenticated, shadow-aware.

Every session a node opens to a peer, for whatever reason, asks that peer
for discard notifications first (DI-2) and learns the peer's queue database
ID from its XSHADOW keyword, which is how a shadow notices a primary that
came back with a new database (PR-2).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass

import aiosmtplib

from .credentials import node_password

#: notifications asked for per XQDISCARD (the server may send fewer) and pages
#: per session: the rest waits for the next session or heartbeat
DISCARD_PAGE = 300
MAX_DISCARD_PAGES = 50

DiscardCallback = Callable[[str, str | None, list[str]], Awaitable[None]]


class PeerError(Exception):
    """A peer session failed: refused, timed out, or answered with an error."""


@dataclass
class ShadowAdvert:
    node: str
    db_id: str


def parse_advert(ehlo_text: str) -> ShadowAdvert | None:
    """The XSHADOW keyword of an EHLO reply: ``XSHADOW <node> <queue-db-id>``."""
    for line in ehlo_text.splitlines():
        words = line.split()
        if len(words) == 3 and words[0].upper() == "XSHADOW":
            return ShadowAdvert(node=words[1], db_id=words[2])
    return None


def parse_discard_reply(text: str) -> tuple[str | None, list[str]]:
    """XQDISCARD's reply: ``DBID <id>``, one message id a line, then a count line."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    db_id = None
    ids = []
    for line in lines:
        words = line.split()
        if words[0] == "DBID" and len(words) == 2:
            db_id = words[1]
        elif words[0] == "DISCARD" and len(words) == 2:
            ids.append(words[1])
    return db_id, ids


class PeerLink:
    """One authenticated session from ``local`` to ``peer``."""

    def __init__(
        self,
        local: str,
        peer: str,
        address: tuple[str, int],
        secret: str,
        timeout: float,
        on_discards: DiscardCallback | None = None,
    ) -> None:
        self.local = local
        self.peer = peer
        self.address = address
        self.secret = secret
        self.timeout = timeout
        self.on_discards = on_discards
        self.advert: ShadowAdvert | None = None
        #: the peer answered a discard query in this session (so its database is known)
        self.asked = False
        self.smtp = aiosmtplib.SMTP(
            hostname=address[0],
            port=address[1],
            local_hostname=local,
            timeout=timeout,
            start_tls=False,
        )

    @property
    def is_open(self) -> bool:
        return self.smtp.is_connected

    async def open(self, drain: bool = False) -> None:
        """Connect, EHLO, AUTH, EHLO. With ``drain`` (a shadow's heartbeat) the
        discard notifications are asked for even when the primary no longer advertises
        XSHADOW: ShadowRedundancyEnabled false stops new copies (CR-6), but the copies
        already made still need their discards, and their primary's queue database."""
        try:
            await self.smtp.connect()
            await self.smtp.ehlo()
            await self.smtp.auth_plain(self.local, node_password(self.secret, self.local))
            # Again after AUTH: XSHADOW is advertised to authenticated peers only.
            reply = await self.smtp.ehlo()
        except (aiosmtplib.SMTPException, OSError) as exc:
            self.smtp.close()
            raise PeerError(f"{self.peer}: {describe(exc)}") from None
        self.advert = parse_advert(reply.message)
        if self.advert is not None:
            await self.query_discards()
        elif drain:
            try:
                await self.query_discards()
            except PeerError:
                if not self.is_open:
                    raise
                # refused, not unreachable: a primary that keeps no discards for us

    async def query_discards(self) -> list[str]:
        """DI-2: ask for the discards meant for this node; hand them to the callback.

        Page by page: each page is acted on (the callback returns once the moves
        are on disk) before ``XQDISCARD <n> ACK`` confirms it and asks for the
        next, so a reply lost on the way is offered again, not orphaned."""
        taken: list[str] = []
        reply = await self._command("XQDISCARD")
        self.asked = True
        for page in range(MAX_DISCARD_PAGES):
            db_id, ids = parse_discard_reply(reply)
            if self.on_discards is not None:
                await self.on_discards(
                    self.peer, db_id or (self.advert.db_id if self.advert else None), ids
                )
            if not ids:
                break
            taken += ids
            # the last page allowed in this session is confirmed without asking for more
            more = DISCARD_PAGE if page + 1 < MAX_DISCARD_PAGES else 0
            reply = await self._command("XQDISCARD", str(more), "ACK")
        return taken

    async def send_copy(
        self,
        primary_msg: str,
        db_id: str,
        next_hops: list[str],
        sender: str,
        recipients: list[str],
        content: bytes,
    ) -> None:
        """CR-1/CR-2: one shadow copy; returns once the shadow acknowledged it."""
        if self.advert is None:
            raise PeerError(f"{self.peer} does not offer shadow redundancy")
        await self._command("XSHADOWCOPY", primary_msg, db_id, ",".join(next_hops) or "-")
        await self._transaction(sender, recipients, content)

    async def relay(
        self, sender: str, recipients: list[str], content: bytes, keep_shadow: bool
    ) -> str:
        """Hand a message to the peer as its next hop; the peer's queue id is returned."""
        if keep_shadow:
            await self._command("XSHADOW", self.local)
        return await self._transaction(sender, recipients, content)

    async def resubmit(self, words: list[str]) -> str:
        return await self._command("XRESUBMIT", *words)

    async def close(self) -> None:
        try:
            if self.smtp.is_connected:
                await self.smtp.quit()
        except (aiosmtplib.SMTPException, OSError):
            pass
        finally:
            self.smtp.close()

    async def _command(self, verb: str, *args: str) -> str:
        try:
            reply = await self.smtp.execute_command(verb.encode(), *(a.encode() for a in args))
        except (aiosmtplib.SMTPException, OSError) as exc:
            self.smtp.close()
            raise PeerError(f"{self.peer}: {verb}: {describe(exc)}") from None
        if reply.code >= 400:
            raise PeerError(f"{self.peer}: {verb}: {reply.code} {reply.message}")
        return reply.message

    async def _transaction(self, sender: str, recipients: list[str], content: bytes) -> str:
        try:
            errors, message = await self.smtp.sendmail(sender, recipients, content)
        except ValueError as exc:
            # aiosmtplib refuses an address it cannot put on a command line; the
            # session must not stay open waiting for a transaction that never comes.
            self.smtp.close()
            raise PeerError(f"{self.peer}: {exc}") from None
        except (aiosmtplib.SMTPException, OSError) as exc:
            if not isinstance(exc, aiosmtplib.SMTPResponseException) or exc.code >= 500:
                self.smtp.close()
            raise PeerError(f"{self.peer}: {describe(exc)}") from None
        if errors:
            raise PeerError(f"{self.peer}: recipients refused: {errors}")
        return message


def describe(exc: BaseException) -> str:
    if isinstance(exc, aiosmtplib.SMTPResponseException):
        return f"{exc.code} {exc.message}"
    return f"{type(exc).__name__}: {exc}" if str(exc) else type(exc).__name__
