"""Measure what the FaultProxy adds to an SMTP link: latency per round trip and bulk throughput.

Run: python3 benchmarks/bench_proxy.py [--round-trips 2000] [--bulk-mb 32]

Everything (client, proxy, upstream) runs on one asyncio loop, as in a harness
run, so the figures include the loop's scheduling of all three. The upstream is
a minimal asyncio server answering each line with "250 OK" and swallowing DATA
content until the terminating dot, so the comparison isolates the proxy.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time

from pytest_shadowcheck.history import History
from pytest_shadowcheck.network.proxy import FaultProxy


class _Upstream(asyncio.Protocol):
    """Answers each command line with 250; DATA gets 354, content until \\r\\n.\\r\\n."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.buffer = b""
        self.in_data = False
        transport.write(b"220 bench upstream\r\n")

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while self.buffer:
            if self.in_data:
                end = self.buffer.find(b"\r\n.\r\n")
                if end == -1:
                    self.buffer = self.buffer[-4:]
                    return
                self.buffer = self.buffer[end + 5 :]
                self.in_data = False
                self.transport.write(b"250 2.0.0 queued\r\n")
                continue
            end = self.buffer.find(b"\r\n")
            if end == -1:
                return
            line, self.buffer = self.buffer[:end], self.buffer[end + 2 :]
            if line.upper() == b"DATA":
                self.in_data = True
                # Let the content terminator also match right after the 354.
                self.buffer = b"\r\n" + self.buffer
                self.transport.write(b"354 go ahead\r\n")
            else:
                self.transport.write(b"250 OK\r\n")


async def _ping_pong(address: tuple[str, int], round_trips: int) -> list[float]:
    """Seconds per NOOP round trip."""
    reader, writer = await asyncio.open_connection(*address)
    await reader.readline()
    samples: list[float] = []
    for _ in range(round_trips):
        started = time.perf_counter()
        writer.write(b"NOOP\r\n")
        await reader.readline()
        samples.append(time.perf_counter() - started)
    writer.close()
    return samples


async def _bulk(address: tuple[str, int], megabytes: int) -> float:
    """Seconds to send ``megabytes`` of message content and get the 250."""
    line = b"x" * 998 + b"\r\n"
    block = line * 64  # 64 KB
    blocks = megabytes * 1024 * 1024 // len(block)
    reader, writer = await asyncio.open_connection(*address)
    await reader.readline()
    writer.write(b"DATA\r\n")
    await reader.readline()
    started = time.perf_counter()
    writer.write(b"Message-ID: <bench@shadowcheck.test>\r\n\r\n")
    for _ in range(blocks):
        writer.write(block)
        await writer.drain()
    writer.write(b".\r\n")
    reply = await reader.readline()
    elapsed = time.perf_counter() - started
    assert reply.startswith(b"250"), reply
    writer.close()
    return elapsed


def _percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(fraction * len(ordered)))]


async def main(round_trips: int, bulk_mb: int) -> None:
    loop = asyncio.get_running_loop()
    server = await loop.create_server(_Upstream, "127.0.0.1", 0)
    upstream = server.sockets[0].getsockname()[:2]
    history = History()
    proxy = FaultProxy("bench->upstream", history)
    await proxy.start()
    proxy.set_upstream(*upstream)

    await _ping_pong(upstream, 200)  # warm-up
    await _ping_pong(proxy.address, 200)
    direct = await _ping_pong(upstream, round_trips)
    proxied = await _ping_pong(proxy.address, round_trips)
    direct_bulk = await _bulk(upstream, bulk_mb)
    proxied_bulk = await _bulk(proxy.address, bulk_mb)
    await proxy.stop()
    server.close()
    await server.wait_closed()

    def us(seconds: float) -> str:
        return f"{seconds * 1e6:9.1f}"

    print(f"NOOP round trips: {round_trips} per path (microseconds)")
    print(f"{'path':<12}{'median':>10}{'p99':>10}{'mean':>10}")
    for name, samples in (("direct", direct), ("proxied", proxied)):
        print(
            f"{name:<12}{us(statistics.median(samples))} {us(_percentile(samples, 0.99))}"
            f"{us(statistics.fmean(samples))}"
        )
    added_median = statistics.median(proxied) - statistics.median(direct)
    added_p99 = _percentile(proxied, 0.99) - _percentile(direct, 0.99)
    print(f"{'added':<12}{us(added_median)} {us(added_p99)}")
    print()
    print(f"Bulk DATA transfer: {bulk_mb} MB")
    for name, seconds in (("direct", direct_bulk), ("proxied", proxied_bulk)):
        print(f"{name:<12}{seconds:8.3f} s {bulk_mb / seconds:9.1f} MB/s")
    data_events = history.events(kind="data")
    print(f"\nproxy recorded {len(history.events(kind='line'))} line events and "
          f"{len(data_events)} data event(s) "
          f"(size {data_events[-1].data['size'] if data_events else '-'} bytes)")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--round-trips", type=int, default=2000)
    parser.add_argument("--bulk-mb", type=int, default=32)
    args = parser.parse_args()
    asyncio.run(main(args.round_trips, args.bulk_mb))
