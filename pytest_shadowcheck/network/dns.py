"""A small authoritative DNS server for a scenario's next-hop domains (MX routing).

An MTA that routes by MX asks DNS where mail for ``corp.test`` goes, then connects to
port 25 of the answer. For such an MTA the harness serves, for each next-hop domain:

* ``corp.test MX 10 mx.corp.test`` (with the A record of ``mx.corp.test`` as
  additional data),
* ``mx.corp.test A 127.a.b.c`` and ``corp.test A 127.a.b.c`` (the implicit MX of
  RFC 5321 section 5.1, for an MTA that falls back to it): the loopback address of
  the harness proxy for that hop, which listens on port 25 there,
* for any other type of these names an empty answer, and NXDOMAIN for every other
  name, so nothing is routed outside the scenario.

Every question is recorded (:attr:`DnsServer.queries`) so a test or a diagnostic can
show what the MTA asked. It listens on UDP and TCP port 53 of a loopback address of
its own (a resolver's ``nameserver`` line names no port; :mod:`.loopback`). The wire
format (RFC 1035 section 4) is small enough to write here with :mod:`struct`.
"""

from __future__ import annotations

import asyncio
import contextlib
import struct
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, cast

from pytest_shadowcheck.network.loopback import on_free_loopback

__all__ = ["DNS_PORT", "DnsQuery", "DnsServer", "mx_host"]

DNS_PORT = 53
#: seconds resolvers may keep an answer: short, as a route step changes it mid-scenario
TTL = 1
MX_PREFERENCE = 10

TYPE_A, TYPE_MX, TYPE_AAAA = 1, 15, 28
TYPE_NAMES = {1: "A", 2: "NS", 5: "CNAME", 6: "SOA", 12: "PTR", 15: "MX", 16: "TXT",
              28: "AAAA", 33: "SRV", 255: "ANY"}  # fmt: skip
CLASS_IN = 1
NOERROR, FORMERR, SERVFAIL, NXDOMAIN, NOTIMP = 0, 1, 2, 3, 4
RCODE_NAMES = {NOERROR: "NOERROR", FORMERR: "FORMERR", SERVFAIL: "SERVFAIL",
               NXDOMAIN: "NXDOMAIN", NOTIMP: "NOTIMP"}  # fmt: skip
_HEADER = struct.Struct("!HHHHHH")
_QR, _AA, _RD, _RA = 0x8000, 0x0400, 0x0100, 0x0080


def mx_host(domain: str) -> str:
    """The host name the MX record of ``domain`` names."""
    return f"mx.{domain.lower().rstrip('.')}"


@dataclass(frozen=True)
class DnsQuery:
    """One question the server was asked, and what it answered."""

    t: float
    transport: str
    client: str
    name: str
    type: str
    #: "MX 10 mx.corp.test", "A 127.1.2.3", "no AAAA record", "NXDOMAIN", ...
    answer: str

    def __str__(self) -> str:
        return f"{self.client} ({self.transport}) {self.type} {self.name}? {self.answer}"


class _Malformed(ValueError):
    pass


def _read_name(packet: bytes, offset: int) -> tuple[str, int]:
    """A domain name at ``offset`` (compression pointers followed); the name and the
    offset after it."""
    labels: list[str] = []
    end: int | None = None
    for _ in range(128):  # a loop of pointers is malformed, not eternal
        if offset >= len(packet):
            raise _Malformed("name runs past the packet")
        length = packet[offset]
        if length & 0xC0 == 0xC0:
            if offset + 1 >= len(packet):
                raise _Malformed("truncated pointer")
            if end is None:
                end = offset + 2
            offset = ((length & 0x3F) << 8) | packet[offset + 1]
            continue
        if length & 0xC0:
            raise _Malformed("unknown label type")
        offset += 1
        if length == 0:
            return ".".join(labels), end if end is not None else offset
        labels.append(packet[offset : offset + length].decode("ascii", "replace"))
        offset += length
    raise _Malformed("too many labels")


def _encode_name(name: str) -> bytes:
    out = b""
    for label in name.rstrip(".").split("."):
        raw = label.encode("ascii")
        out += bytes([len(raw)]) + raw
    return out + b"\0"


def _record(owner: bytes, rtype: int, rdata: bytes) -> bytes:
    return owner + struct.pack("!HHIH", rtype, CLASS_IN, TTL, len(rdata)) + rdata


def _a(address: str) -> bytes:
    return bytes(int(part) for part in address.split("."))


class DnsServer:
    """Authoritative for the next-hop domains of ``zone`` (domain -> IPv4 address of
    the hop's port-25 listener); :meth:`set_zone` changes it at any time (a route step).
    ``name`` says whose server it is in errors ("mbx1")."""

    def __init__(
        self,
        name: str,
        zone: Mapping[str, str] | None = None,
        on_query: Callable[[DnsQuery], None] | None = None,
    ) -> None:
        self.name = name
        self.zone: dict[str, str] = {}
        self.set_zone(zone or {})
        self.on_query = on_query
        self.queries: list[DnsQuery] = []
        self._udp: asyncio.DatagramTransport | None = None
        self._tcp: asyncio.Server | None = None
        self._address: tuple[str, int] | None = None
        self._sessions: set[asyncio.Task[Any]] = set()

    def set_zone(self, zone: Mapping[str, str]) -> None:
        self.zone = {domain.lower().rstrip("."): address for domain, address in zone.items()}

    @property
    def address(self) -> tuple[str, int]:
        if self._address is None:
            raise RuntimeError(f"DNS server of {self.name} not started")
        return self._address

    # -- lifecycle -------------------------------------------------------------------

    async def start(self, host: str | None = None, port: int = DNS_PORT) -> tuple[str, int]:
        """Listen on UDP and TCP ``port`` of ``host`` (None: a loopback address of its
        own, port 53, where no concurrent run listens)."""
        if host is None:
            return await on_free_loopback(port, self._bind, f"the DNS server of {self.name}")
        return await self._bind(host, port)

    async def _bind(self, host: str, port: int = DNS_PORT) -> tuple[str, int]:
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(
            lambda: _Udp(self), local_addr=(host, port)
        )
        # TCP on the same port (port 0: the one UDP got), for resolvers that use it
        bound = int(transport.get_extra_info("sockname")[1])
        try:
            tcp = await asyncio.start_server(self._tcp_session, host, bound)
        except BaseException:
            transport.close()
            raise
        self._udp, self._tcp = transport, tcp
        self._address = transport.get_extra_info("sockname")[:2]
        return self.address

    async def stop(self) -> None:
        if self._udp is not None:
            self._udp.close()
            self._udp = None
        for task in list(self._sessions):
            task.cancel()
        if self._sessions:
            await asyncio.gather(*self._sessions, return_exceptions=True)
        if self._tcp is not None:
            self._tcp.close()
            await self._tcp.wait_closed()
            self._tcp = None

    async def _tcp_session(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._sessions.add(task)
        client = _peer(writer.get_extra_info("peername"))
        try:
            while True:
                size = struct.unpack("!H", await reader.readexactly(2))[0]
                reply = self.answer(await reader.readexactly(size), "tcp", client)
                if reply is None:
                    break
                writer.write(struct.pack("!H", len(reply)) + reply)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            if task is not None:
                self._sessions.discard(task)

    # -- answering -------------------------------------------------------------------

    def answer(self, packet: bytes, transport: str = "udp", client: str = "") -> bytes | None:
        """The reply to one query message (None: not even a header to answer to)."""
        if len(packet) < _HEADER.size:
            return None
        ident, flags, qdcount = _HEADER.unpack_from(packet)[:3]
        if flags & _QR:
            return None  # a response, not a question
        opcode = (flags >> 11) & 0xF
        base = _QR | _AA | _RA | (flags & _RD) | (opcode << 11)
        if opcode != 0 or qdcount != 1:
            rcode = NOTIMP if opcode != 0 else FORMERR
            return _HEADER.pack(ident, base | rcode, 0, 0, 0, 0)
        try:
            name, offset = _read_name(packet, _HEADER.size)
            if offset + 4 > len(packet):
                raise _Malformed("question runs past the packet")
            qtype, qclass = struct.unpack_from("!HH", packet, offset)
        except _Malformed:
            return _HEADER.pack(ident, base | FORMERR, 0, 0, 0, 0)
        question = packet[_HEADER.size : offset + 4]
        rcode, answers, additional, summary = self._lookup(name, qtype, qclass)
        self._record(transport, client, name, qtype, summary)
        header = _HEADER.pack(ident, base | rcode, 1, len(answers), 0, len(additional))
        return header + question + b"".join(answers) + b"".join(additional)

    def _lookup(
        self, name: str, qtype: int, qclass: int
    ) -> tuple[int, list[bytes], list[bytes], str]:
        key = name.lower().rstrip(".")
        owner = b"\xc0\x0c"  # the name of the question (offset 12)
        type_name = TYPE_NAMES.get(qtype, f"TYPE{qtype}")
        if key in self.zone:
            domain, address = key, self.zone[key]
        elif key.startswith("mx.") and key[3:] in self.zone:
            domain, address = None, self.zone[key[3:]]
        else:
            return NXDOMAIN, [], [], "NXDOMAIN"
        if qclass not in (CLASS_IN, 255):
            return NOERROR, [], [], f"no {type_name} record (class {qclass})"
        if qtype in (TYPE_A, 255):
            return NOERROR, [_record(owner, TYPE_A, _a(address))], [], f"A {address}"
        if qtype == TYPE_MX and domain is not None:
            host = mx_host(domain)
            rdata = struct.pack("!H", MX_PREFERENCE) + _encode_name(host)
            glue = _record(_encode_name(host), TYPE_A, _a(address))
            return NOERROR, [_record(owner, TYPE_MX, rdata)], [glue], f"MX {MX_PREFERENCE} {host}"
        return NOERROR, [], [], f"no {type_name} record"

    def _record(self, transport: str, client: str, name: str, qtype: int, answer: str) -> None:
        query = DnsQuery(
            time.time(), transport, client, name, TYPE_NAMES.get(qtype, f"TYPE{qtype}"), answer
        )
        self.queries.append(query)
        if self.on_query is not None:
            self.on_query(query)


class _Udp(asyncio.DatagramProtocol):
    def __init__(self, server: DnsServer) -> None:
        self.server = server
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's UDP transport does not subclass asyncio.DatagramTransport
        self.transport = cast(asyncio.DatagramTransport, transport)

    def datagram_received(self, data: bytes, addr: Any) -> None:
        reply = self.server.answer(data, "udp", _peer(addr))
        if reply is not None and self.transport is not None:
            self.transport.sendto(reply, addr)


def _peer(address: Any) -> str:
    if isinstance(address, tuple) and len(address) >= 2:
        return f"{address[0]}:{address[1]}"
    return str(address or "")
