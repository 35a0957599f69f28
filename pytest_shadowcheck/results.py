"""JUnit properties: what the report side reads from every run.

Testsuite properties (valid in every JUnit family, including xunit2):
``shadowcheck.run_id``, ``shadowcheck.target``, ``shadowcheck.target_version``,
``shadowcheck.harness_version``.

Per test case, the behaviour IDs are in the test name (``name[CR-4,CR-5]``)
and the verdict is the outcome (passed / failure / skipped "UNTESTABLE: ..." /
skipped "OUTSIDE-GUARANTEE: ..." as xfail). ``shadowcheck.behaviours`` and
``shadowcheck.verdict`` test case properties are added only for the
``xunit1``/``legacy`` families: xunit2 forbids properties in a test case.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

from . import __version__

if TYPE_CHECKING:
    from .plugin import ShadowcheckState

__all__ = ["JUnitProperties", "suite_properties"]


def suite_properties(state: ShadowcheckState) -> dict[str, str]:
    target = state.target
    return {
        "shadowcheck.run_id": state.run_id,
        "shadowcheck.target": state.target_spec,
        "shadowcheck.target_version": target.version(),
        "shadowcheck.harness_version": __version__,
    }


class JUnitProperties:
    """Adds the testsuite properties to ``--junitxml`` output (controller only)."""

    def __init__(self, state: ShadowcheckState) -> None:
        self.state = state

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        from _pytest.junitxml import xml_key

        xml = session.config.stash.get(xml_key, None)
        if xml is None:
            return
        for name, value in suite_properties(self.state).items():
            xml.add_global_property(name, value)
