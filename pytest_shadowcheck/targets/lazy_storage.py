"""The nodes' queue directories on lazy filesystems: one mount per node, for a target
that offers the ``power_cut`` and ``disk_faults`` capabilities.

A node's directory is ``WORKDIR/NODE`` as ever (``WORKDIR/NODE-queue`` with
``suffix="-queue"``: the docker target, whose ``WORKDIR/NODE`` holds rendered files),
now a mount of the lazy filesystem over ``WORKDIR/.disk/NODE`` (what a reboot finds).
The target kills the node's processes; this cuts the power of its disk and reports what
was lost.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
from pathlib import Path
from typing import Any

from pytest_shadowcheck.errors import TargetError
from pytest_shadowcheck.storage.mount import LazyMount

__all__ = ["LazyStorage"]


class LazyStorage:
    def __init__(
        self,
        workdir: Path,
        *,
        writeback: float = 30.0,
        hold_names: bool = False,
        suffix: str = "",
    ) -> None:
        self.workdir = workdir
        self.writeback = writeback
        self.hold_names = hold_names
        self.suffix = suffix
        self.mounts: dict[str, LazyMount] = {}

    def directory(self, node: str) -> Path:
        """Where ``node``'s queue directory is mounted."""
        return self.workdir / f"{node}{self.suffix}"

    def backing(self, node: str) -> Path:
        """The real directory under it: what the disk keeps."""
        return self.workdir / ".disk" / node

    async def mount(self, node: str) -> Path:
        """``node``'s queue directory, mounted (once)."""
        if node not in self.mounts:
            mount = LazyMount(
                self.backing(node),
                self.directory(node),
                writeback=self.writeback,
                hold_names=self.hold_names,
            )
            # registered before it starts, and its start waited out even when the run
            # is cancelled meanwhile (-x stops the session): the thread mounts anyway,
            # and stop() must find what it mounted, or the mount and its process outlive
            # the run
            self.mounts[node] = mount
            starting = asyncio.ensure_future(asyncio.to_thread(mount.start))
            try:
                await asyncio.shield(starting)
            except asyncio.CancelledError:
                with contextlib.suppress(Exception):
                    await starting
                raise
        return self.directory(node)

    def _mount(self, node: str) -> LazyMount:
        try:
            return self.mounts[node]
        except KeyError:
            raise TargetError(f"node {node} has no lazy filesystem") from None

    async def power_cut(self, node: str) -> dict[str, Any]:
        """Drop what ``node``'s disk did not make durable (its processes are dead)."""
        return await asyncio.to_thread(self._mount(node).power_cut)

    async def disk(self, node: str, mode: str | None, budget: int = 0) -> None:
        await asyncio.to_thread(self._mount(node).disk, mode, budget)

    def events(self, node: str) -> list[dict[str, Any]]:
        mount = self.mounts.get(node)
        if mount is None:
            return []
        try:
            return mount.events()
        except (OSError, TargetError):
            return []

    async def wipe(self, node: str) -> None:
        """A new, empty queue directory (the node is stopped): everything under the
        mount goes, held data with it."""
        directory = self.directory(node)
        for entry in await asyncio.to_thread(os.listdir, directory):
            path = directory / entry
            if path.is_dir() and not path.is_symlink():
                await asyncio.to_thread(shutil.rmtree, path, True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()

    async def stop(self) -> None:
        """Unmount every node's filesystem, each even when another one failed to."""
        failures: list[Exception] = []
        for mount in list(self.mounts.values()):
            try:
                await asyncio.to_thread(mount.stop)
            except Exception as exc:
                failures.append(exc)
        self.mounts.clear()
        if failures:
            raise failures[0]
