"""Directory entries held back until their directory is fsynced (``--hold-names``).

POSIX makes a new name, a rename or an unlink durable only once the directory holding
it is fsynced; ext4 often makes it durable sooner. With this journal the lazy
filesystem is as strict as POSIX: each name operation is carried out on the backing
directory at once (so programs see it), remembered with what undoes it, and undone at
a power cut unless every directory it touched was fsynced since. An unlinked or
replaced file is kept in a hidden trash directory until then.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path

__all__ = ["TRASH", "NameJournal"]

TRASH = ".shadowcheck-lazyfs-trash"


@dataclass
class Change:
    kind: str  # "create", "unlink" or "rename"
    path: str
    #: for a rename: where the file went
    target: str = ""
    #: an unlinked file, or the file a rename replaced, kept until the change is durable
    kept: str = ""
    #: directories that must be fsynced before the change is durable
    pending: set[str] = field(default_factory=set)


class NameJournal:
    def __init__(self, root: Path) -> None:
        self.root = str(root)
        self.trash = os.path.join(self.root, TRASH)
        self.changes: list[Change] = []
        self._numbers = itertools.count()

    def hidden(self) -> set[str]:
        return {self.trash}

    def _keep(self, path: str) -> str:
        os.makedirs(self.trash, exist_ok=True)
        kept = os.path.join(self.trash, str(next(self._numbers)))
        os.rename(path, kept)
        return kept

    def created(self, path: str) -> None:
        self.changes.append(Change("create", path, pending={os.path.dirname(path)}))

    def unlinked(self, path: str) -> None:
        kept = self._keep(path)
        self.changes.append(Change("unlink", path, kept=kept, pending={os.path.dirname(path)}))

    def renamed(self, src: str, dst: str) -> None:
        kept = self._keep(dst) if os.path.lexists(dst) else ""
        try:
            os.rename(src, dst)
        except OSError:
            if kept:
                os.rename(kept, dst)
            raise
        dirs = {os.path.dirname(src), os.path.dirname(dst)}
        self.changes.append(Change("rename", src, target=dst, kept=kept, pending=dirs))

    def commit(self, directory: str) -> int:
        """``directory`` was fsynced: the changes waiting only for it are durable."""
        directory = directory.rstrip("/") or "/"
        done = 0
        for change in self.changes:
            if directory in change.pending:
                change.pending.discard(directory)
                if not change.pending:
                    done += 1
                    if change.kept:
                        _remove(change.kept)
        self.changes = [c for c in self.changes if c.pending]
        return done

    def undo(self) -> list[str]:
        """A power cut: every change not yet durable is undone, newest first."""
        undone = []
        for change in reversed(self.changes):
            rel = os.path.relpath(change.path, self.root)
            with contextlib.suppress(OSError):
                if change.kind == "create":
                    _remove(change.path)
                    undone.append(f"{rel} created: gone")
                elif change.kind == "unlink":
                    os.rename(change.kept, change.path)
                    undone.append(f"{rel} unlinked: back")
                else:
                    os.rename(change.target, change.path)
                    if change.kept:
                        os.rename(change.kept, change.target)
                    target = os.path.relpath(change.target, self.root)
                    undone.append(f"{rel} renamed to {target}: back")
        self.changes = []
        return undone


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(path)
