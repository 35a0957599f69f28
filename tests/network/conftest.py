"""Helpers for the network-layer tests: real event loops, real loopback sockets."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any, TypeVar

import pytest

from pytest_shadowcheck.history import History

T = TypeVar("T")

# Any single test coroutine finishing later than this is a hang, not slowness.
TEST_DEADLINE = 20.0


@pytest.fixture
def run() -> Callable[[Coroutine[Any, Any, T]], T]:
    """Run a coroutine to completion on a fresh event loop, with a hang guard."""

    def runner(coro: Coroutine[Any, Any, T]) -> T:
        async def guarded() -> T:
            return await asyncio.wait_for(coro, TEST_DEADLINE)

        return asyncio.run(guarded())

    return runner


@pytest.fixture
def history() -> History:
    return History()


async def read_reply(reader: asyncio.StreamReader, timeout: float = 5.0) -> list[str]:
    """Read one (possibly multi-line) SMTP reply; return its lines without CRLF."""
    lines: list[str] = []
    while True:
        raw = await asyncio.wait_for(reader.readline(), timeout)
        if not raw:
            raise ConnectionError(f"closed after {lines!r}")
        line = raw.decode().rstrip("\r\n")
        lines.append(line)
        if len(line) < 4 or line[3] != "-":
            return lines


async def command(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, line: str, timeout: float = 5.0
) -> list[str]:
    """Send one command line and read its reply."""
    writer.write(line.encode() + b"\r\n")
    await writer.drain()
    return await read_reply(reader, timeout)


async def eventually(check: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Poll ``check`` until it is true or ``timeout`` passes (for recorded events
    that land just after the socket operation that caused them)."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not check():
        if loop.time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


async def closed_by_peer(reader: asyncio.StreamReader, timeout: float = 5.0) -> bool:
    """True if the peer closes or resets the connection within ``timeout``."""
    try:
        while True:
            data = await asyncio.wait_for(reader.read(4096), timeout)
            if not data:
                return True
    except ConnectionError:
        return True
    except TimeoutError:
        return False


class LineServer:
    """A tiny SMTP-ish upstream: greets, answers each CRLF line with ``answer(line)``
    (None = no answer), and keeps every byte it received, per connection."""

    def __init__(
        self, answer: Callable[[str], str | None] | None = None, greeting: str = "220 upstream"
    ) -> None:
        self.answer = answer or (lambda line: "250 2.0.0 OK")
        self.greeting = greeting
        self.received: list[bytearray] = []
        self.connections = 0
        self._server: asyncio.Server | None = None

    async def start(self) -> tuple[str, int]:
        self._server = await asyncio.start_server(self._serve, "127.0.0.1", 0)
        host, port = self._server.sockets[0].getsockname()[:2]
        return host, port

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        received = bytearray()
        self.received.append(received)
        try:
            writer.write(self.greeting.encode() + b"\r\n")
            while True:
                raw = await reader.readline()
                if not raw:
                    break
                received += raw
                reply = self.answer(raw.decode(errors="replace").rstrip("\r\n"))
                if reply is not None:
                    writer.write(reply.encode() + b"\r\n")
                    await writer.drain()
        except ConnectionError:
            pass
        finally:
            writer.close()

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
