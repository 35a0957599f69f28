"""FaultProxy: an asyncio TCP proxy in front of one SMTP link, recording and faulting it.

Every link the harness can see (client->node, node->node, node->next hop) runs
through one :class:`FaultProxy`. It forwards bytes unchanged, records the SMTP
lines it carries into the run :class:`~pytest_shadowcheck.history.History`
(``connect``, ``line``, ``data``, ``close`` events, connections numbered from 1
per link), and can break the link on demand (``fault`` events):

- :meth:`FaultProxy.cut` - new connections are reset at once, existing ones closed.
- :meth:`FaultProxy.blackhole` - accept, never forward, never answer. Held
  traffic flows again after the blackhole is switched off (as TCP
  retransmission would deliver it), unless a peer gave up meanwhile.
- :meth:`FaultProxy.delay` - hold each chunk ``seconds`` before forwarding it.
- :meth:`FaultProxy.reset` - RST every current connection, once.
- :meth:`FaultProxy.slow_accept` - wait before connecting upstream.
- :meth:`FaultProxy.slow_greeting` - hold the server's first bytes.
- :meth:`FaultProxy.drop_after` - forward N more bytes, then close the connection.
- :meth:`FaultProxy.stall_after_data` - hold the server's replies once the client sent
  a message's content: the client waits for its 250 and times out.
- :meth:`FaultProxy.cut_at` / :meth:`FaultProxy.stall_at` - at a protocol point (after
  a client's command, before, inside or after the server's reply to one), the Nth time
  it is reached: close the connection there, or hold it (nothing more forwarded either
  way) until healed. The history shows where it struck.
- :meth:`FaultProxy.heal` - clear every fault.

Lines are parsed for recording (:mod:`.smtp_recorder`); forwarding works on whole
chunks, split only where a point fault strikes.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from dataclasses import dataclass, field
from typing import Any

from pytest_shadowcheck.history import History
from pytest_shadowcheck.network.loopback import on_free_loopback
from pytest_shadowcheck.network.smtp_recorder import POINT_PLACES, SmtpRecorder

__all__ = ["DIRECTIONS", "FaultProxy"]

DIRECTIONS = ("c2s", "s2c")
_CHUNK = 64 * 1024
_UPSTREAM_CONNECT_TIMEOUT = 30.0


class FaultProxy:
    """A recording, fault-injecting TCP proxy for one link.

    ``link`` names the link in the history ("mbx1->mbx2"). Call :meth:`start`
    to listen on an ephemeral port of ``listen_host`` (see :attr:`address`),
    :meth:`set_upstream` to say where to forward (changeable at any time; applies
    to new connections), and :meth:`stop` at the end. While the upstream is None,
    new connections are refused like under :meth:`cut`.
    """

    def __init__(self, link: str, history: History, listen_host: str = "127.0.0.1") -> None:
        self.link = link
        self.history = history
        self.listen_host = listen_host
        self.upstream: tuple[str, int] | None = None
        self._server: asyncio.Server | None = None
        self._address: tuple[str, int] | None = None
        #: further addresses the same link is reached at (listen_also)
        self._also: list[asyncio.Server] = []
        self.also_at: list[tuple[str, int]] = []
        self._connections: dict[int, _Connection] = {}
        self._next_conn = 1
        #: client (host, port) -> connection number, so a client's own events can carry it
        self._numbers_by_peer: dict[tuple[Any, ...], int] = {}
        # Fault state; read by connections on every chunk, so kept as plain fields.
        self._cut = False
        self._blackholed = False
        self._flowing = asyncio.Event()
        self._flowing.set()
        self._delays: dict[str, float] = {"c2s": 0.0, "s2c": 0.0}
        self._slow_accept = 0.0
        self._slow_greeting = 0.0
        self._drop_after: dict[str, int] = {}
        self._stall_after_data = False
        self._unstalled = asyncio.Event()
        self._unstalled.set()
        #: point faults armed (cut_at, stall_at), each striking once
        self._points: list[_PointFault] = []

    # -- lifecycle ---------------------------------------------------------------

    async def start(self, port: int = 0) -> tuple[str, int]:
        """Listen on ``port`` of ``listen_host`` (0: an ephemeral one, the default; a
        fixed one where an MTA the harness cannot re-route expects it); return (and keep
        in :attr:`address`) where it listens."""
        if self._server is not None:
            raise RuntimeError(f"proxy {self.link} already started")
        self._server = await asyncio.start_server(self._handle_client, self.listen_host, port)
        host, port = self._server.sockets[0].getsockname()[:2]
        self._address = (host, port)
        return self._address

    async def listen_also(self, port: int, host: str | None = None) -> tuple[str, int]:
        """Accept the link's connections on ``port`` of ``host`` too (None: a loopback
        address of its own, where no concurrent run listens): an MTA routing by MX
        reaches its next hop on port 25 of the address DNS gave. The same link: the
        same faults, recording and connection numbers."""

        async def bind(address: str) -> tuple[str, int]:
            server = await asyncio.start_server(self._handle_client, address, port)
            self._also.append(server)
            where = server.sockets[0].getsockname()[:2]
            self.also_at.append((where[0], where[1]))
            return self.also_at[-1]

        if host is not None:
            return await bind(host)
        return await on_free_loopback(port, bind, f"the proxy of {self.link}")

    @property
    def address(self) -> tuple[str, int]:
        """(host, port) the proxy listens on; RuntimeError before :meth:`start`."""
        if self._address is None:
            raise RuntimeError(f"proxy {self.link} not started")
        return self._address

    def set_upstream(self, host: str | None, port: int | None = None) -> None:
        """Forward new connections to (host, port); ``None`` refuses them instead."""
        if host is None:
            self.upstream = None
        else:
            if port is None:
                raise ValueError("set_upstream needs a port with a host")
            self.upstream = (host, int(port))

    async def stop(self) -> None:
        """Stop listening and close every connection (recorded as "proxy stopped")."""
        if self._server is not None:
            self._server.close()
        for server in self._also:
            server.close()
        for conn in list(self._connections.values()):
            conn.abort("proxy stopped", rst=False)
        tasks = [c.task for c in self._connections.values() if c.task is not None]
        for task in tasks:
            task.cancel()
        if tasks:
            await asyncio.gather(*tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()
            self._server = None
        for server in self._also:
            await server.wait_closed()
        self._also, self.also_at = [], []
        self._flowing.set()

    @property
    def connection_count(self) -> int:
        """Number of connections currently open through this proxy."""
        return len(self._connections)

    # -- faults ------------------------------------------------------------------

    def cut(self, on: bool = True) -> None:
        """Cut the link: new connections are reset at once, existing ones are
        closed (with RST). ``cut(False)`` lets new connections through again."""
        self._cut = on
        self._record_fault("cut", on)
        if on:
            for conn in list(self._connections.values()):
                conn.abort("cut", rst=True)

    def blackhole(self, on: bool = True) -> None:
        """Accept but never forward or answer, in both directions, on existing and
        new connections. ``blackhole(False)`` releases the held traffic."""
        self._blackholed = on
        if on:
            self._flowing.clear()
        else:
            self._flowing.set()
        self._record_fault("blackhole", on)

    def delay(self, direction: str, seconds: float) -> None:
        """Hold every chunk going ``direction`` ("c2s", "s2c" or "both") for
        ``seconds`` before forwarding it; 0 switches the delay off. Applies to
        existing connections too. Chunks are held one after another, so a burst
        arriving during a hold waits a little longer: the delay is a lower bound."""
        if seconds < 0:
            raise ValueError("delay seconds must be >= 0")
        for d in _directions(direction):
            self._delays[d] = float(seconds)
        self._record_fault("delay", seconds > 0, flow=direction, seconds=seconds)

    def reset(self) -> None:
        """Send RST on every current connection (both sides), once. New
        connections are not affected."""
        self._record_fault("reset", True, connections=sorted(self._connections))
        for conn in list(self._connections.values()):
            conn.abort("reset", rst=True)

    def slow_accept(self, seconds: float) -> None:
        """Wait ``seconds`` after accepting a new connection before connecting
        upstream (the client sees an accepted but silent connection); 0 = off."""
        if seconds < 0:
            raise ValueError("slow_accept seconds must be >= 0")
        self._slow_accept = float(seconds)
        self._record_fault("slow_accept", seconds > 0, seconds=seconds)

    def slow_greeting(self, seconds: float) -> None:
        """Hold the server's first bytes (its 220 greeting) on each new connection
        for ``seconds``; 0 = off. Connections already greeted are not affected."""
        if seconds < 0:
            raise ValueError("slow_greeting seconds must be >= 0")
        self._slow_greeting = float(seconds)
        self._record_fault("slow_greeting", seconds > 0, seconds=seconds)

    def drop_after(self, nbytes: int | None, direction: str = "c2s") -> None:
        """Forward ``nbytes`` more bytes going ``direction`` ("c2s", "s2c",
        "both"), then close the connection. Counted from now for existing
        connections and from their start for new ones, until healed.
        ``nbytes=None`` switches it off for ``direction``."""
        for d in _directions(direction):
            if nbytes is None:
                self._drop_after.pop(d, None)
            else:
                if nbytes < 0:
                    raise ValueError("drop_after nbytes must be >= 0")
                self._drop_after[d] = int(nbytes)
        for conn in self._connections.values():
            for d in _directions(direction):
                conn.budget[d] = nbytes
        self._record_fault("drop_after", nbytes is not None, nbytes=nbytes, flow=direction)

    def stall_after_data(self, on: bool = True) -> None:
        """Once the client has sent a message's content (the final dot) on a
        connection, hold everything the server says on it from then on: the
        client never gets its reply to the content and times out (a sender's
        session timing out after the server accepted). ``stall_after_data(False)``
        releases the held replies."""
        self._stall_after_data = on
        if on:
            self._unstalled.clear()
        else:
            self._unstalled.set()
        self._record_fault("stall_after_data", on)

    def cut_at(
        self, place: str, verb: str, occurrence: int = 1, connection: int | None = None
    ) -> None:
        """Close the connection (FIN both ways, after what went before) at a protocol
        point: ``place`` (one of :data:`POINT_PLACES`) of the command ``verb`` ("EOD" for
        the final dot, "CONNECT" for the greeting), the ``occurrence``-th time the link
        reaches it from now on (on connection number ``connection`` only, if given).
        Strikes once; ``inside_reply`` sends half of the reply's last line first."""
        self._arm("cut", place, verb, occurrence, connection)

    def stall_at(
        self, place: str, verb: str, occurrence: int = 1, connection: int | None = None
    ) -> None:
        """As :meth:`cut_at`, but hold the connection there instead: nothing more is
        forwarded either way until healed (the peers wait, then time out)."""
        self._arm("stall", place, verb, occurrence, connection)

    def _arm(
        self, action: str, place: str, verb: str, occurrence: int, connection: int | None
    ) -> None:
        if place not in POINT_PLACES:
            raise ValueError(f"a protocol point is one of {', '.join(POINT_PLACES)}, not {place!r}")
        if occurrence < 1 or (connection is not None and connection < 1):
            raise ValueError("occurrence and connection count from 1")
        point = _PointFault(action, place, verb.upper(), occurrence, connection)
        self._points.append(point)
        only = {} if connection is None else {"connection": connection}
        self._record_fault(
            f"{action}_at", True, point=place, verb=point.verb, occurrence=occurrence, **only
        )

    def heal(self) -> None:
        """Clear every fault (held blackhole and stalled traffic flows again)."""
        cleared = sorted(self.active_faults())
        self._points = []
        for conn in self._connections.values():
            conn.hold.set()
        self._cut = False
        self._blackholed = False
        self._flowing.set()
        self._stall_after_data = False
        self._unstalled.set()
        self._delays = {"c2s": 0.0, "s2c": 0.0}
        self._slow_accept = 0.0
        self._slow_greeting = 0.0
        self._drop_after = {}
        for conn in self._connections.values():
            conn.budget = {"c2s": None, "s2c": None}
        self._record_fault("heal", False, cleared=cleared)

    def active_faults(self) -> dict[str, Any]:
        """The faults currently switched on, with their parameters."""
        faults: dict[str, Any] = {}
        if self._cut:
            faults["cut"] = True
        if self._blackholed:
            faults["blackhole"] = True
        if self._stall_after_data:
            faults["stall_after_data"] = True
        for d, seconds in self._delays.items():
            if seconds:
                faults[f"delay_{d}"] = seconds
        if self._slow_accept:
            faults["slow_accept"] = self._slow_accept
        if self._slow_greeting:
            faults["slow_greeting"] = self._slow_greeting
        for d, nbytes in self._drop_after.items():
            faults[f"drop_after_{d}"] = nbytes
        for point in self._points:
            if not point.struck:
                faults.setdefault(f"{point.action}_at", []).append(point.describe())
        held = sorted(n for n, c in self._connections.items() if not c.hold.is_set())
        if held:
            faults["stalled_connections"] = held
        return faults

    def _record_fault(self, name: str, on: bool, **params: Any) -> None:
        self.history.record("fault", link=self.link, fault=name, on=on, **params)

    # -- connections -------------------------------------------------------------

    def connection_number(self, client_address: Any) -> int | None:
        """The number this proxy gave the connection from ``client_address`` (a socket
        address, as ``sockname`` gives it), or None if it never saw one."""
        if not client_address:
            return None
        return self._numbers_by_peer.get(tuple(client_address[:2]))

    async def _handle_client(
        self, client_reader: asyncio.StreamReader, client_writer: asyncio.StreamWriter
    ) -> None:
        number = self._next_conn
        self._next_conn += 1
        conn = _Connection(self, number, client_reader, client_writer)
        conn.task = asyncio.current_task()
        self._connections[number] = conn
        peer = client_writer.get_extra_info("peername")
        if peer:
            self._numbers_by_peer[tuple(peer[:2])] = number
        self.history.record(
            "connect",
            link=self.link,
            conn=number,
            peer=_format_address(peer),
            upstream=_format_address(self.upstream),
        )
        try:
            await conn.run()
        except asyncio.CancelledError:
            conn.abort(conn.close_reason or "cancelled", rst=False)
        except Exception as exc:  # a proxy must never crash the run: record and close
            conn.abort(f"proxy error: {exc!r}", rst=True)
        finally:
            self._connections.pop(number, None)
            conn.finish()


@dataclass
class _Connection:
    """One proxied TCP connection: two pumps, two line recorders, fault budgets."""

    proxy: FaultProxy
    number: int
    client_reader: asyncio.StreamReader
    client_writer: asyncio.StreamWriter
    server_reader: asyncio.StreamReader | None = None
    server_writer: asyncio.StreamWriter | None = None
    task: asyncio.Task[Any] | None = None
    close_reason: str | None = None
    closed_recorded: bool = False
    greeted: bool = False
    budget: dict[str, int | None] = field(default_factory=dict)
    recorder: SmtpRecorder | None = None
    #: cleared while a stall_at holds the connection (both ways)
    hold: asyncio.Event = field(default_factory=asyncio.Event)
    #: the point fault that stopped the recorder's feed, to act on
    struck: _PointFault | None = None

    def __post_init__(self) -> None:
        self.hold.set()

    async def run(self) -> None:
        proxy = self.proxy
        self.budget = {d: proxy._drop_after.get(d) for d in DIRECTIONS}
        self.recorder = SmtpRecorder(proxy.history, proxy.link, self.number)
        if proxy._cut or proxy.upstream is None:
            self.abort("refused: link cut" if proxy._cut else "refused: no upstream", rst=True)
            return
        await proxy._flowing.wait()
        if proxy._slow_accept:
            await asyncio.sleep(proxy._slow_accept)
        upstream = proxy.upstream
        if proxy._cut or upstream is None:
            self.abort("refused: link cut" if proxy._cut else "refused: no upstream", rst=True)
            return
        try:
            server_reader, server_writer = await asyncio.wait_for(
                asyncio.open_connection(*upstream), _UPSTREAM_CONNECT_TIMEOUT
            )
        except (OSError, TimeoutError) as exc:
            self.abort(f"upstream {_format_address(upstream)} unreachable: {exc!r}", rst=True)
            return
        self.server_reader, self.server_writer = server_reader, server_writer
        pumps = [
            asyncio.create_task(self._pump("c2s", self.client_reader, server_writer)),
            asyncio.create_task(self._pump("s2c", server_reader, self.client_writer)),
        ]
        try:
            done, _ = await asyncio.wait(pumps, return_when=asyncio.FIRST_COMPLETED)
            for task in done:
                task.result()  # surface pump errors to _handle_client
            if pumps[0] in done and not pumps[1].done() and self.close_reason == "client closed":
                # a half-close (shutdown(SHUT_WR) after a pipelined QUIT, as Exim does):
                # pass the FIN on and let the server's last replies through. The client
                # ended its side now: a client giving up on a silent server (TO-4) shows
                # here, not only once the server answers or the wait below ends
                proxy.history.record("shutdown", proxy.link, self.number, "c2s")
                with contextlib.suppress(OSError, RuntimeError):
                    if server_writer.can_write_eof():
                        server_writer.write_eof()
                await asyncio.wait([pumps[1]], timeout=_HALF_CLOSE_TIMEOUT)
        finally:
            for task in pumps:
                task.cancel()
            await asyncio.gather(*pumps, return_exceptions=True)
        # the close happened now, when one side ended, not once both are shut down
        self.record_close()
        await self._close_gracefully()

    async def _pump(
        self, direction: str, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        proxy = self.proxy
        loop = asyncio.get_running_loop()
        recorder = self.recorder
        assert recorder is not None
        while True:
            try:
                chunk = await reader.read(_CHUNK)
            except ConnectionError as exc:
                self.close_reason = self.close_reason or f"{_side(direction)} error: {exc!r}"
                return
            if not chunk:
                self.close_reason = self.close_reason or f"{_side(direction)} closed"
                return
            read_at = loop.time()
            # Fast path: no fault active means no awaits besides drain.
            if proxy._blackholed:
                await proxy._flowing.wait()
            if direction == "s2c" and proxy._stall_after_data and recorder.contents:
                await proxy._unstalled.wait()
            if direction == "s2c" and not self.greeted:
                self.greeted = True
                if proxy._slow_greeting:
                    await asyncio.sleep(proxy._slow_greeting)
            hold = proxy._delays[direction]
            if hold:
                remaining = read_at + hold - loop.time()
                if remaining > 0:
                    await asyncio.sleep(remaining)
            budget = self.budget.get(direction)
            drop_now = False
            if budget is not None:
                if len(chunk) >= budget:
                    chunk = chunk[:budget]
                    drop_now = True
                else:
                    self.budget[direction] = budget - len(chunk)
            rest = chunk
            while rest:
                if not self.hold.is_set():
                    await self.hold.wait()
                if proxy._points:
                    taken = recorder.feed(direction, rest, self._stop_at)
                else:
                    taken = len(rest)
                    recorder.feed(direction, rest)
                part, rest = rest[:taken], rest[taken:]
                try:
                    if part:
                        writer.write(part)
                        await writer.drain()
                except ConnectionError as exc:
                    receiver = _side("s2c" if direction == "c2s" else "c2s")
                    self.close_reason = self.close_reason or f"{receiver} error: {exc!r}"
                    return
                struck, self.struck = self.struck, None
                if struck is not None:
                    proxy.history.record(
                        "fault", proxy.link, self.number, fault=f"{struck.action}_at", on=True,
                        struck=struck.describe(),
                    )  # fmt: skip
                    if struck.action == "cut":
                        self.close_reason = f"cut {struck.describe()}"
                        return
                    self.hold.clear()
            if drop_now:
                self.close_reason = f"drop_after ({direction})"
                return

    def _stop_at(self, place: str, verb: str) -> bool:
        """The recorder reached a protocol point: strike there if a point fault says so."""
        for point in self.proxy._points:
            if point.struck or point.place != place or point.verb != verb:
                continue
            if point.connection not in (None, self.number):
                continue
            point.seen += 1
            if point.seen == point.occurrence:
                point.struck = True
                self.struck = point
                return True
        return False

    async def _close_gracefully(self) -> None:
        for writer in (self.server_writer, self.client_writer):
            if writer is not None and not writer.is_closing():
                with contextlib.suppress(Exception):
                    writer.close()
        for writer in (self.server_writer, self.client_writer):
            if writer is not None:
                with contextlib.suppress(Exception):
                    await asyncio.wait_for(writer.wait_closed(), 2.0)

    def abort(self, reason: str, rst: bool) -> None:
        """Close both sides now (RST when ``rst``) and stop the connection's task."""
        if self.close_reason is None:
            self.close_reason = reason
        for writer in (self.client_writer, self.server_writer):
            if writer is None:
                continue
            if rst:
                _set_linger_zero(writer)
            with contextlib.suppress(Exception):
                writer.transport.abort()
        task = self.task
        if task is not None and task is not asyncio.current_task() and not task.done():
            task.cancel()

    def record_close(self) -> None:
        """Record the close event (after any partial line), once."""
        if self.closed_recorded:
            return
        self.closed_recorded = True
        if self.recorder is not None:
            self.recorder.flush()
        self.proxy.history.record(
            "close",
            link=self.proxy.link,
            conn=self.number,
            reason=self.close_reason or "closed",
        )

    def finish(self) -> None:
        """Record the close event, once, and make sure both sockets are closed."""
        self.record_close()
        for writer in (self.client_writer, self.server_writer):
            if writer is not None and not writer.is_closing():
                with contextlib.suppress(Exception):
                    writer.transport.abort()


@dataclass
class _PointFault:
    """An armed cut_at or stall_at: where, and how many times the point was reached."""

    action: str  # cut | stall
    place: str
    verb: str
    occurrence: int
    connection: int | None
    seen: int = 0
    struck: bool = False

    def describe(self) -> str:
        """Where it strikes, in an admin's words ("before the reply to EOD, 1st time")."""
        named = {"EOD": "final dot", "CONNECT": "connect"}
        what = named.get(self.verb, self.verb)
        the = f"the {what}" if self.verb in named else what
        where = {
            "after": f"after the client's {what}",
            "before_reply": f"before the server's reply to {the}",
            "inside_reply": f"inside the server's reply to {the} (half its last line sent)",
            "after_reply": f"after the server's reply to {the}",
        }[self.place]
        nth = _ordinal(self.occurrence)
        on = f" on connection #{self.connection}" if self.connection is not None else ""
        return f"{where}, {nth} time{on}"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"


#: how long the server may still answer a client that half-closed its side
_HALF_CLOSE_TIMEOUT = 10.0


def _directions(direction: str) -> tuple[str, ...]:
    if direction == "both":
        return DIRECTIONS
    if direction in DIRECTIONS:
        return (direction,)
    raise ValueError(f"direction must be 'c2s', 's2c' or 'both', not {direction!r}")


def _side(direction: str) -> str:
    return "client" if direction == "c2s" else "server"


def _format_address(address: Any) -> str | None:
    if not address:
        return None
    return f"{address[0]}:{address[1]}"


def _set_linger_zero(writer: asyncio.StreamWriter) -> None:
    """Make the next close send RST instead of FIN (SO_LINGER on, timeout 0)."""
    sock = writer.get_extra_info("socket")
    if sock is None:
        return
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
