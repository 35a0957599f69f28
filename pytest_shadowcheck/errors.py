"""Errors a scenario author can act on: file, line, a snippet and what was expected.

Every problem found while loading a scenario file (YAML syntax, schema,
unknown node, unknown fault, bad duration, ...) is raised as one
:class:`ScenarioError`. Its ``str()`` is the whole message pytest shows; no
Python traceback is ever needed to understand it.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass
from pathlib import Path

__all__ = ["ScenarioError", "SourceRef", "TargetError", "format_snippet"]


@dataclass(frozen=True)
class SourceRef:
    """A place in a scenario file (1-based line, 1-based column; 0 = unknown)."""

    path: Path
    line: int = 0
    column: int = 0

    def __str__(self) -> str:
        # relative to the working directory when below it, like pytest's node IDs: the
        # same in reports whatever checkout or machine ran them
        path = self.path
        if path.is_absolute():
            with contextlib.suppress(ValueError, OSError):
                path = path.relative_to(Path.cwd())
        return f"{path}:{self.line}" if self.line else str(path)


def format_snippet(path: Path, line: int, column: int = 0, context: int = 2) -> str:
    """Return the lines around ``line`` of ``path``, the offending one marked with ``>``."""
    try:
        lines = path.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return ""
    if not line or line > len(lines):
        return ""
    first = max(1, line - context)
    last = min(len(lines), line + context)
    width = len(str(last))
    out = []
    for number in range(first, last + 1):
        mark = ">" if number == line else " "
        out.append(f"{mark} {number:>{width}} | {lines[number - 1]}")
        if number == line and column > 0:
            out.append(f"  {' ' * width} | {' ' * (column - 1)}^")
    return "\n".join(out)


class ScenarioError(Exception):
    """A scenario file is wrong. ``str(error)`` is a complete, user-facing message."""

    def __init__(
        self,
        message: str,
        where: SourceRef | None = None,
        expected: str | None = None,
    ) -> None:
        self.message = message
        self.where = where
        self.expected = expected
        super().__init__(self.format())

    def format(self) -> str:
        head = f"{self.where}: {self.message}" if self.where else self.message
        parts = [head]
        if self.where is not None and self.where.line:
            snippet = format_snippet(self.where.path, self.where.line, self.where.column)
            if snippet:
                parts.append(snippet)
        if self.expected:
            parts.append(f"expected: {self.expected}")
        return "\n".join(parts)


class TargetError(Exception):
    """The target could not do what was asked (node did not start, control call failed)."""
