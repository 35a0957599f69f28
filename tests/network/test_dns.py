"""The harness's DNS server on real sockets: queries built here from RFC 1035, sent over
UDP and TCP to port 53 of the server's own loopback address, answers decoded here."""

from __future__ import annotations

import asyncio
import random
import socket
import struct
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pytest_shadowcheck.history import History
from pytest_shadowcheck.network.dns import DnsServer
from pytest_shadowcheck.network.proxy import FaultProxy

from .conftest import LineServer, closed_by_peer, read_reply

Run = Callable[..., Any]
A, MX, AAAA = 1, 15, 28
ZONE = {"corp.test": "127.20.0.5", "backup.test": "127.20.0.6"}


def query(name: str, qtype: int, ident: int | None = None) -> tuple[int, bytes]:
    ident = random.randint(0, 0xFFFF) if ident is None else ident
    header = struct.pack("!HHHHHH", ident, 0x0100, 1, 0, 0, 0)  # RD, one question
    qname = b"".join(bytes([len(p)]) + p.encode() for p in name.split(".")) + b"\0"
    return ident, header + qname + struct.pack("!HH", qtype, 1)


def read_name(packet: bytes, offset: int) -> tuple[str, int]:
    labels, end = [], None
    while True:
        length = packet[offset]
        if length & 0xC0 == 0xC0:
            end = end or offset + 2
            offset = ((length & 0x3F) << 8) | packet[offset + 1]
            continue
        if length == 0:
            return ".".join(labels), end or offset + 1
        labels.append(packet[offset + 1 : offset + 1 + length].decode())
        offset += 1 + length


@dataclass
class Reply:
    ident: int
    authoritative: bool
    rcode: int
    answers: list[tuple[str, int, str]]
    additional: list[tuple[str, int, str]]


def decode(packet: bytes) -> Reply:
    ident, flags, qd, an, ns, ar = struct.unpack_from("!HHHHHH", packet)
    assert flags & 0x8000, "not a response"
    offset = 12
    for _ in range(qd):
        offset = read_name(packet, offset)[1] + 4
    records = []
    for _ in range(an + ns + ar):
        owner, offset = read_name(packet, offset)
        rtype, _, _, size = struct.unpack_from("!HHIH", packet, offset)
        offset += 10
        rdata = packet[offset : offset + size]
        if rtype == A:
            value = socket.inet_ntoa(rdata)
        elif rtype == MX:
            value = f"{struct.unpack_from('!H', rdata)[0]} {read_name(packet, offset + 2)[0]}"
        else:
            value = rdata.hex()
        records.append((owner, rtype, value))
        offset += size
    return Reply(ident, bool(flags & 0x0400), flags & 0xF, records[:an], records[an + ns :])


async def ask_udp(server: tuple[str, int], name: str, qtype: int) -> Reply:
    ident, packet = query(name, qtype)
    loop = asyncio.get_running_loop()
    sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, server)
        await loop.sock_sendall(sock, packet)
        reply = decode(await asyncio.wait_for(loop.sock_recv(sock, 4096), 5))
    finally:
        sock.close()
    assert reply.ident == ident
    return reply


async def ask_tcp(server: tuple[str, int], name: str, qtype: int) -> Reply:
    ident, packet = query(name, qtype)
    reader, writer = await asyncio.open_connection(*server)
    writer.write(struct.pack("!H", len(packet)) + packet)
    size = struct.unpack("!H", await reader.readexactly(2))[0]
    reply = decode(await reader.readexactly(size))
    writer.close()
    assert reply.ident == ident
    return reply


def test_mx_and_a_for_each_next_hop_nxdomain_for_the_rest(run: Run) -> None:
    async def scenario() -> tuple[tuple[str, int], list[Reply], list[str]]:
        server = DnsServer("mbx1", ZONE)
        address = await server.start()
        replies = [
            await ask_udp(address, "corp.test", MX),
            await ask_udp(address, "MX.Corp.Test", A),  # names are case-insensitive
            await ask_udp(address, "corp.test", A),  # the implicit MX (RFC 5321 5.1)
            await ask_udp(address, "mx.corp.test", AAAA),
            await ask_udp(address, "elsewhere.test", MX),
            await ask_udp(address, "mx.elsewhere.test", A),
        ]
        await server.stop()
        return address, replies, [str(q).partition(" ")[2] for q in server.queries]

    address, replies, asked = run(scenario())
    host, port = address
    assert port == 53 and host.startswith("127.") and host != "127.0.0.1"
    mx, a, implicit, aaaa, unknown, unknown_a = replies
    assert all(r.authoritative for r in replies)
    assert (mx.rcode, mx.answers) == (0, [("corp.test", MX, "10 mx.corp.test")])
    assert mx.additional == [("mx.corp.test", A, "127.20.0.5")]  # glue
    assert (a.rcode, a.answers) == (0, [("MX.Corp.Test", A, "127.20.0.5")])
    assert implicit.answers == [("corp.test", A, "127.20.0.5")]
    assert (aaaa.rcode, aaaa.answers) == (0, [])  # the name exists, no IPv6 address
    assert (unknown.rcode, unknown.answers) == (3, [])  # NXDOMAIN
    assert (unknown_a.rcode, unknown_a.answers) == (3, [])
    assert asked == [
        "(udp) MX corp.test? MX 10 mx.corp.test",
        "(udp) A MX.Corp.Test? A 127.20.0.5",
        "(udp) A corp.test? A 127.20.0.5",
        "(udp) AAAA mx.corp.test? no AAAA record",
        "(udp) MX elsewhere.test? NXDOMAIN",
        "(udp) A mx.elsewhere.test? NXDOMAIN",
    ]


def test_tcp_answers_too_and_a_route_change_changes_the_answer(run: Run) -> None:
    async def scenario() -> tuple[Reply, Reply, Reply]:
        server = DnsServer("mbx1", ZONE)
        address = await server.start()
        before = await ask_tcp(address, "mx.backup.test", A)
        server.set_zone({**ZONE, "backup.test": "127.20.0.9"})
        after = await ask_udp(address, "mx.backup.test", A)
        server.set_zone({"corp.test": "127.20.0.5"})
        gone = await ask_udp(address, "backup.test", MX)
        await server.stop()
        return before, after, gone

    before, after, gone = run(scenario())
    assert before.answers == [("mx.backup.test", A, "127.20.0.6")]
    assert after.answers == [("mx.backup.test", A, "127.20.0.9")]
    assert gone.rcode == 3


def test_concurrent_servers_each_get_port_53_of_an_address_of_their_own(run: Run) -> None:
    async def scenario() -> list[tuple[str, int]]:
        servers = [DnsServer(f"mbx{i}", {f"d{i}.test": f"127.20.1.{i}"}) for i in range(6)]
        addresses = [await s.start() for s in servers]
        # each answers for its own zone only: six servers, not one answering six times
        for i, address in enumerate(addresses):
            assert (await ask_udp(address, f"mx.d{i}.test", A)).answers[0][2] == f"127.20.1.{i}"
            assert (await ask_udp(address, f"mx.d{(i + 1) % 6}.test", A)).rcode == 3
        for s in servers:
            await s.stop()
        return addresses

    addresses = run(scenario())
    assert len({host for host, _ in addresses}) == 6
    assert {port for _, port in addresses} == {53}


def test_a_malformed_query_gets_formerr_and_the_server_keeps_answering(run: Run) -> None:
    async def scenario() -> tuple[bytes, Reply]:
        server = DnsServer("mbx1", ZONE)
        address = await server.start()
        loop = asyncio.get_running_loop()
        sock = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
        sock.setblocking(False)
        await loop.sock_connect(sock, address)
        # a question whose name claims 63 bytes and has 3
        await loop.sock_sendall(sock, struct.pack("!HHHHHH", 7, 0x0100, 1, 0, 0, 0) + b"\x3fabc")
        broken = await asyncio.wait_for(loop.sock_recv(sock, 512), 5)
        sock.close()
        fine = await ask_udp(address, "corp.test", MX)
        await server.stop()
        return broken, fine

    broken, fine = run(scenario())
    ident, flags = struct.unpack_from("!HH", broken)
    assert (ident, flags & 0x8000, flags & 0xF) == (7, 0x8000, 1)  # FORMERR
    assert fine.answers == [("corp.test", MX, "10 mx.corp.test")]


def test_a_proxy_also_on_port_25_of_its_own_address_is_the_same_link(
    run: Run, history: History
) -> None:
    async def scenario() -> tuple[str, int]:
        upstream = LineServer()
        proxy = FaultProxy("mbx1->mailbox", history)
        await proxy.start()
        proxy.set_upstream(*await upstream.start())
        also = await proxy.listen_also(25)
        reader, writer = await asyncio.open_connection(*also)
        assert await read_reply(reader) == ["220 upstream"]
        proxy.cut()  # a fault of the link reaches the port-25 listener too
        assert await closed_by_peer(reader)
        writer.close()
        await proxy.stop()
        await upstream.stop()
        return also

    host, port = run(scenario())
    assert port == 25 and host.startswith("127.") and host != "127.0.0.1"
    assert [e.conn for e in history.events(kind="connect", link="mbx1->mailbox")] == [1]
    assert [e.data["reason"] for e in history.events(kind="close")] == ["cut"]
