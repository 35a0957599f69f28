"""Engine notes on pytest's terminal, between the test outcomes."""

from __future__ import annotations

from collections.abc import Callable

import pytest

__all__ = ["note_writer"]


def note_writer(config: pytest.Config) -> Callable[[str], None] | None:
    """A writer for :class:`~pytest_shadowcheck.progress.Progress` lines, through the
    terminal reporter with capturing suspended (as pytest's live logging does); None
    under a pytest-xdist worker, which has no terminal, and with lanes, whose notes of
    several scenarios at once would interleave."""
    from pytest_shadowcheck.plugin.state import LANES_KEY

    if hasattr(config, "workerinput") or config.stash.get(LANES_KEY, 0) > 1:
        return None

    def write(line: str) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        if reporter is None:
            return
        capture = config.pluginmanager.get_plugin("capturemanager")
        if capture is not None:
            with capture.global_and_fixture_disabled():
                reporter.ensure_newline()
                reporter.write_line(line)
        else:
            reporter.ensure_newline()
            reporter.write_line(line)

    return write
