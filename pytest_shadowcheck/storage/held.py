"""What a lazy filesystem holds back: file data written since the file's last fsync.

A real disk keeps in the page cache what a program wrote until the program fsyncs it
(or the kernel writes it back, about 30 s later on Linux); a power cut loses whatever
was still there. :class:`HeldWrites` keeps, per file, the writes and truncations made
since its last sync, in order, over the file's synced contents (the backing file), so
that reads see them, a sync applies them to the backing file, and a power cut drops
them. Pure data: the FUSE operations (:mod:`.lazyfs`) do the I/O.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass, field

__all__ = ["HeldFile", "HeldWrites", "Op"]

#: ("w", offset, data) a write, ("t", size, b"") a truncation to ``size``
Op = tuple[str, int, bytes]


@dataclass
class HeldFile:
    """The changes to one file since its last sync."""

    ops: list[Op] = field(default_factory=list)
    #: monotonic time of the oldest change still held (the kernel writes back by age)
    since: float = 0.0
    #: bytes written since the last sync (what a power cut would lose)
    held_bytes: int = 0

    def size(self, synced_size: int) -> int:
        """The file's size as programs see it, over ``synced_size`` on the disk."""
        size = synced_size
        for kind, at, data in self.ops:
            size = max(size, at + len(data)) if kind == "w" else at
        return size

    def read(
        self, offset: int, length: int, synced_size: int, read_synced: Callable[[int, int], bytes]
    ) -> bytes:
        """``length`` bytes at ``offset`` as programs see them: the synced bytes with the
        held changes applied in the order they were made."""
        # bytes past the synced end read as zeros until a write fills them
        synced = read_synced(offset, max(0, min(length, synced_size - offset)))
        window = bytearray(synced.ljust(length, b"\0"))
        for kind, at, data in self.ops:
            if kind == "t":
                if at < offset + length:
                    start = max(0, at - offset)
                    window[start:] = bytes(length - start)
                continue
            lo, hi = max(offset, at), min(offset + length, at + len(data))
            if lo < hi:
                window[lo - offset : hi - offset] = data[lo - at : hi - at]
        end = max(0, min(self.size(synced_size), offset + length) - offset)
        return bytes(window[:end])


class HeldWrites:
    """Held changes of every file, keyed by the backing file's inode number (so that a
    rename or a second name keeps a file's held data with it)."""

    def __init__(self) -> None:
        self.files: dict[int, HeldFile] = {}

    def held(self, key: int) -> HeldFile | None:
        return self.files.get(key)

    def write(self, key: int, offset: int, data: bytes, now: float) -> None:
        entry = self._entry(key, now)
        entry.ops.append(("w", offset, bytes(data)))
        entry.held_bytes += len(data)

    def truncate(self, key: int, size: int, now: float) -> None:
        self._entry(key, now).ops.append(("t", size, b""))

    def take(self, key: int) -> HeldFile | None:
        """The file's held changes, now to be made durable (no longer held)."""
        return self.files.pop(key, None)

    def forget(self, key: int) -> HeldFile | None:
        """Drop the held changes of a file that no longer exists."""
        return self.files.pop(key, None)

    def older_than(self, when: float) -> list[int]:
        """Files holding a change made before ``when`` (due for write-back)."""
        return [key for key, entry in self.files.items() if entry.since <= when]

    def drop_all(self) -> dict[int, HeldFile]:
        """A power cut: every held change is gone; returns what was lost, per file."""
        lost, self.files = self.files, {}
        return lost

    def _entry(self, key: int, now: float) -> HeldFile:
        entry = self.files.get(key)
        if entry is None:
            entry = self.files[key] = HeldFile(since=now)
        return entry


def apply(fd: int, entry: HeldFile) -> int:
    """Write ``entry``'s changes to the backing file ``fd`` in order; the caller fsyncs.
    Returns the bytes written."""
    written = 0
    for kind, at, data in entry.ops:
        if kind == "t":
            os.ftruncate(fd, at)
        else:
            os.pwrite(fd, data, at)
            written += len(data)
    return written
