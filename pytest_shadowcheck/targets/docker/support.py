"""Plumbing of the docker target: loopback ports for the nodes, the tar archive that
carries rendered files into a container, and the readiness probes."""

from __future__ import annotations

import asyncio
import contextlib
import io
import os
import random
import socket
import tarfile
from pathlib import Path
from typing import Any

from pytest_shadowcheck.targets.base import TargetError
from pytest_shadowcheck.targets.docker.description import LISTEN_HOST

__all__ = ["docker_client", "free_ports", "http_ok", "smtp_banner", "tar_files"]

#: node ports are chosen from here up to the ephemeral range
PORT_POOL_START = 20000


def _ephemeral_floor() -> int:
    """Lowest port the kernel hands out for bind(port 0)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_ports(count: int) -> list[int]:
    """``count`` distinct free loopback ports, all held until every one is chosen.

    They come from below the kernel's ephemeral range: between choosing a port
    and the container binding it, a bind(0) anywhere on the machine (the
    harness's own proxies, other test processes) can never take it."""
    floor = _ephemeral_floor()
    pool = list(range(PORT_POOL_START, floor)) if floor - PORT_POOL_START >= 1000 else []
    random.shuffle(pool)
    sockets: list[socket.socket] = []
    try:
        while len(sockets) < count:
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            port = pool.pop() if pool else 0
            try:
                sock.bind((LISTEN_HOST, port))
            except OSError as exc:
                sock.close()
                if port == 0:
                    raise TargetError(f"no free port on {LISTEN_HOST}: {exc}") from None
                continue
            sockets.append(sock)
        return [s.getsockname()[1] for s in sockets]
    finally:
        for sock in sockets:
            sock.close()


def tar_files(files: dict[str, tuple[bytes, int]]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for path, (content, mode) in files.items():
            info = tarfile.TarInfo(path.lstrip("/"))
            info.size = len(content)
            info.mode = mode
            archive.addfile(info, io.BytesIO(content))
    return buffer.getvalue()


async def smtp_banner(port: int) -> str | None:
    """None when an SMTP server greets with 220 on the port, else what was wrong."""
    try:
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(LISTEN_HOST, port), timeout=2.0
        )
    except (OSError, TimeoutError) as exc:
        return f"no SMTP service on {LISTEN_HOST}:{port} ({exc.__class__.__name__})"
    try:
        line = await asyncio.wait_for(reader.readline(), timeout=2.0)
    except (OSError, TimeoutError):
        line = b""
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()
    text = line.decode(errors="replace").strip()
    return None if text.startswith("220") else f"no 220 banner on port {port} (got {text!r})"


async def http_ok(port: int, path: str) -> str | None:
    import aiohttp

    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as session,
            session.get(f"http://{LISTEN_HOST}:{port}{path}") as response,
        ):
            return None if response.status < 300 else f"GET {path}: HTTP {response.status}"
    except (aiohttp.ClientError, TimeoutError) as exc:
        return f"GET {path} on port {port}: {exc.__class__.__name__}"


def docker_client() -> Any:
    """A client of the local Docker engine, or a TargetError saying how to get one."""
    try:
        import docker
    except ImportError:
        raise TargetError(
            "the docker target needs the Docker SDK: pip install 'pytest-shadowcheck[docker]'"
        ) from None
    where = os.environ.get("DOCKER_HOST", "unix:///var/run/docker.sock")
    try:
        client = docker.from_env(timeout=120)
        client.ping()
    except Exception as exc:
        raise TargetError(
            f"no Docker engine answers at {where} ({exc.__class__.__name__}: {exc}); "
            "start one (e.g. `dockerd &`, see docs/targets.md)"
        ) from None
    return client
