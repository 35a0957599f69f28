"""Terminal notes while a scenario waits, so a long timer does not look like a hang."""

from __future__ import annotations

import pytest

__all__ = ["Progress"]

#: waits shorter than this are not announced
THRESHOLD = 1.0


class Progress:
    """Writes ``[shadowcheck] SCENARIO: TEXT`` lines to the terminal.

    Output goes through the terminal reporter with capturing suspended (as
    pytest's live logging does). Under pytest-xdist workers have no terminal;
    there the notes are dropped.
    """

    def __init__(self, config: pytest.Config | None, scenario: str) -> None:
        self.config = config
        self.scenario = scenario
        self.notes: list[str] = []

    def waiting(self, seconds: float, why: str) -> None:
        if seconds >= THRESHOLD:
            self.note(f"waiting up to {seconds:g}s {why}")

    def note(self, text: str) -> None:
        self.notes.append(text)
        config = self.config
        if config is None or hasattr(config, "workerinput"):
            return
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        capture = config.pluginmanager.get_plugin("capturemanager")
        line = f"[shadowcheck] {self.scenario}: {text}"
        if capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.ensure_newline()
                reporter.write_line(line)
        else:
            reporter.ensure_newline()
            reporter.write_line(line)
