"""Notes while a scenario waits, so a long timer does not look like a hang.

The engine writes them here; who shows them is the caller's business (the pytest plugin
hands in a writer to its terminal, :func:`pytest_shadowcheck.plugin.terminal.note_writer`;
a run without one keeps the notes only).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["Progress"]

#: waits shorter than this are not announced
THRESHOLD = 1.0


class Progress:
    """Keeps every note of one scenario and hands each to ``write`` as
    ``[shadowcheck] SCENARIO: TEXT``."""

    def __init__(self, scenario: str, write: Callable[[str], None] | None = None) -> None:
        self.scenario = scenario
        self.write = write
        self.notes: list[str] = []

    def waiting(self, seconds: float, why: str) -> None:
        if seconds >= THRESHOLD:
            self.note(f"waiting up to {seconds:g}s {why}")

    def note(self, text: str) -> None:
        self.notes.append(text)
        if self.write is not None:
            self.write(f"[shadowcheck] {self.scenario}: {text}")
