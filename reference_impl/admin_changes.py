"""What an admin changed on a running node, kept on disk so that it outlives the process.

A setting or a route changed through the control API is the admin's configuration, not
the process's memory: Exchange keeps Set-TransportConfig in Active Directory, Postfix's
``postconf -e`` writes main.cf. So the node writes each change to a small file beside
its data directory (``<data>.admin.json``), reads it back at start, and a restart or a
new queue database (a wipe deletes the data directory only) runs with what the admin
set. A node that forgot a raised SafetyNetHoldTime at a restart dropped Safety Net
entries and shadow copies the admin had asked it to keep.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import ConfigError


@dataclass
class AdminChanges:
    """The settings and routes changed on one node since its cluster file was written."""

    path: Path
    settings: dict[str, Any] = field(default_factory=dict)
    #: domain -> the route as the control API took it; None: the route was removed
    routes: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def beside(cls, data_dir: Path) -> AdminChanges:
        """The changes kept for the node whose data directory is ``data_dir``."""
        path = data_dir.with_name(f"{data_dir.name}.admin.json")
        changes = cls(path)
        try:
            raw = json.loads(path.read_text())
        except FileNotFoundError:
            return changes
        except (OSError, ValueError) as exc:
            problem = f"the node's saved admin changes are unreadable: {exc}"
            raise ConfigError(f"{path}: {problem}") from None
        if not isinstance(raw, dict):
            raise ConfigError(f"{path}: expected a mapping of settings and routes")
        changes.settings = dict(raw.get("settings") or {})
        changes.routes = dict(raw.get("routes") or {})
        return changes

    def record_settings(self, values: dict[str, Any]) -> None:
        self.settings.update(values)
        self._save()

    def record_routes(self, routes: dict[str, Any]) -> None:
        self.routes.update({domain.lower(): raw for domain, raw in routes.items()})
        self._save()

    def _save(self) -> None:
        # written whole, then renamed: a crash leaves the old file or the new, never half
        text = json.dumps({"settings": self.settings, "routes": self.routes}, indent=1)
        partial = self.path.with_name(self.path.name + ".partial")
        with open(partial, "w") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(partial, self.path)
