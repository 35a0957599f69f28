"""Loopback addresses of their own, for servers that must sit on a fixed port.

A resolver cannot be told a port (``/etc/resolv.conf`` names only addresses: DNS is
port 53) and an MTA routing by MX connects to port 25. So the harness gives each such
server an address of its own in 127.0.0.0/8 (all of it reaches the loopback interface
on Linux) and keeps the port fixed. Concurrent runs (pytest-xdist workers, two
developers) never share one: an address is taken by binding it, and a bind that fails
because another run holds it moves on to another random address.
"""

from __future__ import annotations

import errno
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

__all__ = ["LoopbackError", "on_free_loopback"]

T = TypeVar("T")

#: tries before giving up (a collision needs the same random pick out of ~16 million)
ATTEMPTS = 50


class LoopbackError(OSError):
    """No loopback address could be bound (port taken on every address, or no rights)."""

    def __str__(self) -> str:
        return str(self.strerror)  # the sentence, without OSError's "[Errno 98]"


def random_loopback(rng: random.Random | None = None) -> str:
    """A random address in 127.16.0.0 - 127.254.255.254: clear of 127.0.0.1, the
    resolver stubs of 127.0.0.53 (systemd) and 127.0.0.11 (Docker) and 127.0.1.1."""
    pick = rng or random
    return f"127.{pick.randint(16, 254)}.{pick.randint(0, 255)}.{pick.randint(1, 254)}"


async def on_free_loopback(port: int, bind: Callable[[str], Awaitable[T]], what: str) -> T:
    """``await bind(address)`` on random loopback addresses until one binds ``port``;
    return what it returned. ``what`` names the server in the error."""
    for _ in range(ATTEMPTS):
        address = random_loopback()
        try:
            return await bind(address)
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                continue  # another run holds this one
            if exc.errno == errno.EACCES:
                raise LoopbackError(
                    exc.errno,
                    f"cannot listen for {what} on port {port}: a port below 1024 needs "
                    "root or CAP_NET_BIND_SERVICE",
                ) from None
            raise
    raise LoopbackError(
        errno.EADDRINUSE,
        f"cannot listen for {what} on port {port} of any loopback address ({ATTEMPTS} "
        f"tried): a server listening on 0.0.0.0:{port} on this machine takes the port "
        "on every address",
    )
