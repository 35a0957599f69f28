"""SMTP in: aiosmtpd with the shadow-redundancy verbs (see docs/protocol.md).

aiosmtpd parses the protocol; this module adds what a transport node needs:
peer authentication, the XSHADOW / XSHADOWCOPY / XQDISCARD / XRESUBMIT
verbs for authenticated peers of the boundary only, relay rules, bare-LF
refusal, and the absolute session limit (TO-1). Everything that decides
what happens to a message lives in the node; this layer only guards and
translates.
"""

from __future__ import annotations

import asyncio
import errno
import inspect
import logging
import re
import sqlite3
from collections.abc import Callable
from typing import Any, AnyStr, cast

from aiosmtpd.smtp import SMTP, AuthResult, Envelope, LoginPassword, Session

from .peers import PeerState

# The node as this adapter sees it: only the members it uses (ports.py); never node.py.
from .ports import SmtpInNode

log = logging.getLogger(__name__)

# Replies as data, so that tests and docs quote the same text.
REPLY_NOT_RECOGNISED = '500 Error: command "{verb}" not recognized'
REPLY_RELAY_DENIED = "550 5.7.54 Unable to relay recipient in non-accepted domain"
REPLY_BARE_LF = "550 5.6.11 Bare line feeds are not allowed"
REPLY_SHADOW_FIRST = "503 5.5.1 XSHADOWCOPY must come before MAIL"
REPLY_SESSION_LIMIT = "421 4.4.2 Connection timed out"
REPLY_SYNTAX = "501 5.5.4 Syntax: {syntax}"
REPLY_TOO_MANY_CONNECTIONS = "421 4.3.2 Too many connections, try again later"
REPLY_RESERVED = "421 4.3.2 Too many connections; the rest are kept for peers of the boundary"
REPLY_TOO_MANY_UNKNOWN = "502 5.5.1 Too many unrecognized commands, goodbye."
REPLY_AUTH_TOO_MANY = "421 4.7.0 Too many authentication failures, closing connection"
# A message the queue could not store is refused for now, never acknowledged: the
# sender keeps it and retries (RFC 5321 452; RFC 3463 4.3.1 mail system full).
REPLY_NO_STORAGE = "452 4.3.1 Insufficient system storage"
REPLY_STORAGE_ERROR = "451 4.3.0 Queue write failed, try again later"

#: failed AUTH attempts a session may make; the next failure closes it
AUTH_FAILURES_PER_SESSION = 3
#: the first failure's delay before its 535; doubled per recent failure from
#: the same address, up to AUTH_DELAY_MAX (throttles guessing across sessions too)
AUTH_DELAY = 0.25
AUTH_DELAY_MAX = 4.0
AUTH_FAILURE_MEMORY = 60.0  # seconds an address's failures count against it

#: unknown verbs (and shadow verbs from a non-peer, answered the same) a session may
#: send; the next closes it. aiosmtpd's own limit for unknown verbs alone is the
#: same, so a stranger cannot tell the two apart by counting (XS-3)
STRANGE_VERBS = 5
#: what a boundary peer may add to a message it forwards (its Received header,
#: the categoriser's stamp): a copy of a message just under SIZE still fits
PEER_SIZE_HEADROOM = 16 * 1024
#: commands a session in the peers' reserve may use before it authenticates
_RESERVE_VERBS = frozenset({"EHLO", "HELO", "AUTH", "QUIT", "NOOP", "RSET"})
# Control characters a mailbox must not carry (NUL first); TAB is left to aiosmtpd's
# parser, which treats it as folding white space.
_CONTROL_CHARACTERS = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")

NULL_PATH = "<>"  # MAIL FROM:<> as aiosmtpd records it: a bounce (RFC 5321 4.5.5)

_BARE_LF = re.compile(rb"(?<!\r)\n")
# ``<local@domain>`` with dot-atom parts of RFC 5322 atext, then spaces (the
# usual MAIL/RCPT argument); anything else goes to aiosmtpd's full parser.
_ATEXT = r"[A-Za-z0-9!#$%&'*+/=?^_`{|}~-]+"
_SIMPLE_PATH = re.compile(rf"<({_ATEXT}(?:\.{_ATEXT})*@[A-Za-z0-9-]+(?:\.[A-Za-z0-9-]+)*)>[ \t]*")


_HOOK_PREFIXES = ("smtp_", "auth_", "handle_")
_HOOK_NAMES: dict[type, list[str]] = {}


class ListsOnlyHooks:
    """``dir()`` lists only the names aiosmtpd looks for (verbs, AUTH mechanisms,
    hooks). aiosmtpd builds its tables on every connection by scanning ``dir()``
    of the protocol and of the handler, ``inspect.getmembers`` reading every
    attribute on the way; with this the tables come out the same at a fraction
    of the cost. Computed once per class: patch a class before its first use."""

    def __dir__(self) -> list[str]:
        cls = type(self)
        names = _HOOK_NAMES.get(cls)
        if names is None:
            names = [n for n in object.__dir__(self) if n.startswith(_HOOK_PREFIXES)]
            _HOOK_NAMES[cls] = names
        return list(names)


class NodeSession(Session):
    """aiosmtpd sets the deprecated ``Session.login_data`` itself on every AUTH
    and logs a deprecation warning each time; here it is a plain attribute."""

    login_data: Any = None


class NodeSMTP(ListsOnlyHooks, SMTP):
    """One inbound connection. The verbs below refuse anyone but a boundary peer,
    and refuse them exactly as an unknown verb is refused, so a stranger learns
    nothing (XS-3)."""

    def __init__(self, node: SmtpInNode, **kwargs: Any) -> None:
        self.node = node
        # One protocol instance serves one connection, so per-session state lives here.
        self.peer_state = PeerState()
        settings = node.settings
        super().__init__(
            NodeHandler(node),
            hostname=node.name,
            ident="shadowcheck reference MTA",
            data_size_limit=settings.MaxMessageSize,
            timeout=settings.ReceiveConnectionInactivityTimeout,
            auth_require_tls=False,
            authenticator=authenticator(node),
            auth_exclude_mechanism=["LOGIN"],
            command_call_limit=None,
            **kwargs,
        )
        self._session_limit: asyncio.TimerHandle | None = None
        self._held: list[str] = []
        self._auth_failures = 0
        self._auth_delay = 0.0
        self._strange = 0  # unknown or refused shadow verbs so far
        self._last_bytes = 0.0  # loop time the client last sent anything
        self._counted = False  # counted in node.inbound_connections
        self._reserve_only = False  # admitted into the peers' reserve
        self._smtp_methods = _Verbs(self._smtp_methods, self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        self._last_bytes = self.loop.time()
        self._session_limit = self.loop.call_later(
            self.node.settings.ReceiveConnectionTimeout, self._close_with, REPLY_SESSION_LIMIT
        )
        node = self.node
        node.inbound_connections += 1
        self._counted = True
        cap = node.connection_cap()
        if node.inbound_connections > cap:
            # Written before aiosmtpd's greeting (its task has not run yet).
            log.warning("connection refused: %d inbound connections", cap)
            self._close_with(REPLY_TOO_MANY_CONNECTIONS)
        elif node.inbound_connections > cap - reserve_for_peers(cap):
            self._reserve_only = True

    def data_received(self, data: bytes) -> None:
        # Bytes, not only commands, show a live client: a slow DATA is not idle.
        self._last_bytes = self.loop.time()
        super().data_received(data)

    def connection_lost(self, error: Exception | None) -> None:
        if self._counted:
            self._counted = False
            self.node.inbound_connections -= 1
        if self._session_limit is not None:
            self._session_limit.cancel()
        if self.peer_state.shadow_idle is not None:
            self.peer_state.shadow_idle.cancel()
        link = self.peer_state.shadow_link
        if link is not None:
            # The shadow session lives at most as long as the sender's session.
            self.peer_state.shadow_link = None
            self.node.background(link.close())
        super().connection_lost(error)

    def note_auth_failure(self, login: str) -> None:
        """Count a refused AUTH, here and for the client's address (node-wide)."""
        self._auth_failures += 1
        address = str(self.session.peer[0]) if self.session and self.session.peer else "?"
        now = self.loop.time()
        count, last = self.node.auth_failures.get(address, (0, now))
        count = 1 if now - last > AUTH_FAILURE_MEMORY else count + 1
        failures = self.node.auth_failures
        failures[address] = (count, now)
        if len(failures) > 4096:  # many addresses: forget those that went quiet
            for key in [k for k, (_, t) in failures.items() if now - t > AUTH_FAILURE_MEMORY]:
                del failures[key]
        self._auth_delay = min(AUTH_DELAY * 2 ** (count - 1), AUTH_DELAY_MAX)
        log.warning(
            "refused AUTH as %r from %s: failure %d of %d in this session, %d from this "
            "address in the last %gs",
            login,
            address,
            self._auth_failures,
            AUTH_FAILURES_PER_SESSION,
            count,
            AUTH_FAILURE_MEMORY,
        )

    async def push(self, status: AnyStr) -> None:
        """aiosmtpd writes each line of a reply on its own; the lines of a
        multi-line reply (``250-...``) are held and go out with its last line,
        in one write: the same bytes, a fraction of the segments and wake-ups."""
        if isinstance(status, str) and status[3:4] == "-":
            self._held.append(status)
            return
        if self._auth_delay and isinstance(status, str) and status.startswith("535"):
            # A refused AUTH is answered late: guessing costs time, not just a packet.
            delay, self._auth_delay = self._auth_delay, 0.0
            await asyncio.sleep(delay)
            if self._auth_failures >= AUTH_FAILURES_PER_SESSION:
                self._close_with(REPLY_AUTH_TOO_MANY)
                return
        if self._held:
            held = "\r\n".join(self._held)
            self._held.clear()
            if isinstance(status, str):
                await super().push(held + "\r\n" + status)
                return
            await super().push(held)
        await super().push(status)

    def _getaddr(self, arg: str) -> tuple[str | None, str | None]:
        """aiosmtpd's address parser, with a fast path for the plain form: its
        RFC 5322 parser costs ~50 us per MAIL or RCPT; the result is the same
        (tests/reference/test_smtp_in_fast_paths.py compares the two)."""
        match = _SIMPLE_PATH.match(arg) if arg else None
        if match is None or arg.startswith("(", match.end()):
            address, rest = super()._getaddr(arg)
            if address and _CONTROL_CHARACTERS.search(address):
                return None, None  # NUL and friends: refused here, not after DATA
            return address, rest
        address = match.group(1)
        if self.local_part_limit and len(address.rpartition("@")[0]) > self.local_part_limit:
            return None, None
        return address, arg[match.end() :]

    def _create_session(self) -> Session:
        return NodeSession(self.loop)

    def _timeout_cb(self) -> None:
        idle = self.loop.time() - self._last_bytes
        if idle < self._timeout_duration:
            self._reset_timeout(self._timeout_duration - idle)  # bytes came since
            return
        self._close_with(REPLY_SESSION_LIMIT)

    def strange_verb(self) -> bool:
        """Count an unknown verb, or a shadow verb from a non-peer; True: the last allowed
        one is past and the session ends."""
        self._strange += 1
        return self._strange >= STRANGE_VERBS

    async def _too_many_strange(self, arg: str | None) -> None:
        log.warning("%r too many unrecognised commands", self.session and self.session.peer)
        self._close_with(REPLY_TOO_MANY_UNKNOWN)

    async def _reserved(self, arg: str | None) -> None:
        self._close_with(REPLY_RESERVED)

    def _close_with(self, reply: str) -> None:
        # A stream transport (uvloop's is not an asyncio.WriteTransport subclass).
        transport = cast(asyncio.WriteTransport | None, self.transport)
        if transport is not None and not transport.is_closing():
            transport.write(reply.encode() + b"\r\n")
            transport.close()

    def _is_peer(self) -> bool:
        return self.peer_state.peer_node is not None

    async def _refuse_unless_peer(self, verb: str) -> bool:
        if self._is_peer():
            return False
        if self.strange_verb():
            await self._too_many_strange(None)
        else:
            await self.push(REPLY_NOT_RECOGNISED.format(verb=verb))
        return True

    def _boundary_peer(self) -> str | None:
        """The authenticated peer if it is of this node's boundary (DAG or site)."""
        peer = self.peer_state.peer_node
        return peer if peer is not None and self.node.same_boundary(peer) else None

    async def smtp_AUTH(self, arg: str) -> None:
        await super().smtp_AUTH(arg)
        assert self.session is not None
        auth = self.session.auth_data
        if self.session.authenticated and isinstance(auth, LoginPassword):
            self.peer_state.peer_node = auth.login.decode()
            # A peer forwards what it accepted plus its own headers (PEER_SIZE_HEADROOM).
            self.data_size_limit = self.node.settings.MaxMessageSize + PEER_SIZE_HEADROOM

    async def smtp_XSHADOW(self, arg: str | None) -> None:
        """XSHADOW <node>: the sending hop keeps a shadow of what it sends here."""
        if await self._refuse_unless_peer("XSHADOW"):
            return
        if not self.node.settings.ShadowRedundancyEnabled:
            await self.push(REPLY_NOT_RECOGNISED.format(verb="XSHADOW"))
            return
        if not arg or arg.split()[0] != self.peer_state.peer_node:
            await self.push(REPLY_SYNTAX.format(syntax="XSHADOW <your node name>"))
            return
        self.peer_state.sender_keeps_shadow = True
        await self.push(f"250 2.0.0 {arg.split()[0]} keeps the shadow")

    async def smtp_XSHADOWCOPY(self, arg: str | None) -> None:
        """XSHADOWCOPY <primary-msg-id> <primary-db-id> <next-hop>[,<next-hop>...]"""
        if await self._refuse_unless_peer("XSHADOWCOPY"):
            return
        parts = (arg or "").split()
        if len(parts) != 3:
            await self.push(
                REPLY_SYNTAX.format(syntax="XSHADOWCOPY <message> <queue-db-id> <next-hops>")
            )
            return
        assert self.envelope is not None
        if self.envelope.mail_from:
            await self.push(REPLY_SHADOW_FIRST)
            return
        self.peer_state.pending_copy = {
            "primary_msg": parts[0],
            "primary_db_id": parts[1],
            "next_hops": [hop for hop in parts[2].split(",") if hop],
        }
        await self.push("250 2.0.0 Ready for shadow copy")

    async def smtp_XQDISCARD(self, arg: str | None) -> None:
        """XQDISCARD [max] [ACK]: the discard notifications for the querying node (DI-3).
        ACK: the querier acted on the page this session gave it last; those count as
        handed over, and the reply is the next page."""
        if await self._refuse_unless_peer("XQDISCARD"):
            return
        words = (arg or "").split()
        ack = bool(words) and words[-1].upper() == "ACK"
        if ack:
            words.pop()
        if len(words) > 1 or (words and not words[0].isdigit()):
            await self.push(REPLY_SYNTAX.format(syntax="XQDISCARD [max] [ACK]"))
            return
        limit = int(words[0]) if words else 1000
        peer = self.peer_state.peer_node
        assert peer is not None
        if self._boundary_peer() is None:
            # Another DAG or site: no notification is ever meant for it (docs/protocol.md 5).
            await self.push(f"250 0 discard notifications for {peer}")
            return
        if ack:
            self.node.confirm_discards(peer, self.peer_state.offered_discards)
            self.peer_state.offered_discards = []
        lines, offered = self.node.answer_discard_query(peer, limit)
        self.peer_state.offered_discards = offered
        for line in lines[:-1]:
            await self.push("250-" + line)
        await self.push("250 " + lines[-1])

    async def smtp_XRESUBMIT(self, arg: str | None) -> None:
        """XRESUBMIT PRIMARY|SHADOW <database> <start> <end> [<primary-node>]"""
        if await self._refuse_unless_peer("XRESUBMIT"):
            return
        assert self.peer_state.peer_node is not None
        reply = await self.node.answer_resubmit(self.peer_state.peer_node, (arg or "").split())
        await self.push(reply)

    async def smtp_RSET(self, arg: str) -> None:
        self.peer_state.pending_copy = None
        await super().smtp_RSET(arg)


def reserve_for_peers(cap: int) -> int:
    """Connections above ``cap - reserve`` serve boundary peers only (a tenth, 2 to 64)."""
    return max(2, min(64, cap // 10))


class _Verbs(dict[str, Any]):
    """aiosmtpd's verb table, looked up for every command: counts unknown verbs
    with the refused shadow verbs, and keeps the peers' reserve for peers."""

    def __init__(self, table: dict[str, Any], owner: NodeSMTP) -> None:
        super().__init__(table)
        self.owner = owner

    def get(self, key: str, default: Any = None) -> Any:
        owner = self.owner
        if owner._reserve_only and key not in _RESERVE_VERBS and not owner._is_peer():
            return owner._reserved
        method = super().get(key, default)
        if method is None and owner.strange_verb():
            return owner._too_many_strange
        return method


class NodeHandler(ListsOnlyHooks):
    """aiosmtpd handler hooks: per-verb decisions delegated to the node."""

    def __init__(self, node: SmtpInNode) -> None:
        self.node = node

    async def handle_EHLO(
        self,
        server: NodeSMTP,
        session: Session,
        envelope: Envelope,
        hostname: str,
        responses: list[str],
    ) -> list[str]:
        session.host_name = hostname
        advert = self.node.shadow_advertisement() if server.peer_state.peer_node else None
        if advert:
            # XS-1: only an authenticated peer of the boundary sees XSHADOW.
            responses.insert(-1, "250-" + advert)
        return responses

    async def handle_RCPT(
        self,
        server: NodeSMTP,
        session: Session,
        envelope: Envelope,
        address: str,
        rcpt_options: list[str],
    ) -> str:
        if server.peer_state.pending_copy is None and not self.node.accepts(address):
            return REPLY_RELAY_DENIED
        envelope.rcpt_tos.append(address)
        return "250 2.1.5 Recipient OK"

    async def handle_DATA(self, server: NodeSMTP, session: Session, envelope: Envelope) -> str:
        try:
            return await self._data(server, session, envelope)
        except (sqlite3.Error, OSError) as exc:
            # the queue could not store the message (or its copy): nothing was committed
            log.warning("refusing a message the queue could not store: %s", exc)
            return REPLY_NO_STORAGE if _disk_full(exc) else REPLY_STORAGE_ERROR

    async def _data(self, server: NodeSMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.original_content or b""
        if _BARE_LF.search(content):
            return REPLY_BARE_LF
        state = server.peer_state
        copy, state.pending_copy = state.pending_copy, None
        # aiosmtpd keeps the null reverse-path as "<>" (truthy, so RCPT works);
        # the node's own form is "", which aiosmtplib sends as MAIL FROM:<>.
        sender = "" if envelope.mail_from == NULL_PATH else envelope.mail_from or ""
        recipients = list(envelope.rcpt_tos)
        if copy is not None:
            assert state.peer_node is not None
            reply = self.node.shadowing.store_copy(
                state.peer_node, copy, sender, recipients, content
            )
            await self.node.db.flushed()  # the copy is on disk before its 250
            return reply
        # CR-8: once the shadow has the copy the message must be processed even
        # if the sender gives up waiting, so the work is shielded from the
        # session's cancellation.
        work = asyncio.ensure_future(
            self.node.receive(
                sender=sender,
                recipients=recipients,
                content=content,
                helo=session.host_name or "",
                peer=str(session.peer[0]) if session.peer else "",
                state=state,
            )
        )
        return await asyncio.shield(work)


def _disk_full(exc: BaseException) -> bool:
    if isinstance(exc, OSError):
        return exc.errno in (errno.ENOSPC, errno.EDQUOT)
    return "full" in str(exc)  # SQLITE_FULL: "database or disk is full"


# aiosmtpd checks the EHLO hook's signature on every connection; work it out once.
NodeHandler.handle_EHLO.__signature__ = inspect.signature(  # type: ignore[attr-defined]
    NodeHandler.handle_EHLO
)


def authenticator(node: SmtpInNode) -> Callable[..., AuthResult]:
    """aiosmtpd authenticator: AUTH PLAIN with node name and boundary secret."""

    def authenticate(
        server: SMTP, session: Session, envelope: Envelope, mechanism: str, auth_data: Any
    ) -> AuthResult:
        if not isinstance(auth_data, LoginPassword):
            return AuthResult(success=False, handled=False)
        login = auth_data.login.decode("utf-8", "replace")
        if node.is_boundary_peer(login, auth_data.password):
            return AuthResult(success=True, auth_data=auth_data)
        if isinstance(server, NodeSMTP):
            server.note_auth_failure(login)
        return AuthResult(success=False, handled=False)

    return authenticate
