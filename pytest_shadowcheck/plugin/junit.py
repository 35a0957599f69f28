"""JUnit properties: what the report side reads from every run.

Testsuite properties (valid in every JUnit family, including xunit2):
``shadowcheck.run_id``, ``shadowcheck.target`` (the target's label: the
description's name, whatever path was typed), ``shadowcheck.target_version``,
``shadowcheck.target_spec`` (what was given to ``--shadowcheck-target``),
``shadowcheck.harness_version``; at the end of the session the certification
adds ``shadowcheck.partial`` and ``shadowcheck.certification``.

Per test case, the behaviour IDs are in the test name (``name[CR-4,CR-5]``),
the scenario's status is the outcome (see :mod:`pytest_shadowcheck.statuses`), and the status of
each behaviour is the property ``shadowcheck.verdicts``: a ``<property>`` for
the ``xunit1``/``legacy`` families, a Jenkins ``[[PROPERTY|name=value]]`` line
in the test case's ``system-out`` for xunit2, whose schema forbids properties
in a test case. A scenario with workload steps adds, the same way, the figures
of each workload as ``shadowcheck.workload.NAME.FIGURE`` (see
:func:`workload_properties`), with the command replaying it and, when it was shrunk
(``--shadowcheck-shrink``), the messages and faults before and after and the command
replaying the shrunk reproduction.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any
from xml.etree import ElementTree as ET

import pytest

from pytest_shadowcheck.statuses import VERDICTS_PROPERTY
from pytest_shadowcheck.version import __version__

if TYPE_CHECKING:
    from pytest_shadowcheck.plugin.state import ShadowcheckState

__all__ = ["JUnitProperties", "junit_xml", "suite_properties", "workload_properties"]


def junit_xml(config: pytest.Config) -> Any:
    """pytest's JUnit writer of this session, or None without ``--junitxml``.

    pytest has no public way to add a testsuite property from a plugin outside a test
    (``record_testsuite_property`` is a fixture); its writer is kept under a private stash
    key, read here guarded, so that a pytest without it loses the properties, not the run.
    """
    try:
        from _pytest.junitxml import xml_key
    except ImportError:
        return None
    return config.stash.get(xml_key, None)


def workload_properties(workloads: list[dict[str, Any]]) -> list[tuple[str, str]]:
    """The figures of each workload (HistoryReport.summary()) as flat JUnit properties:
    what a dashboard plots per run - counts, rates, latency percentiles, the seed."""
    out: list[tuple[str, str]] = []
    for w in workloads:
        fates = w.get("fates", {})
        figures = {
            "seed": w.get("seed"),
            "attempted": w.get("attempted"),
            "acknowledged": w.get("acknowledged"),
            "lost": fates.get("lost", 0),
            "lost_outside_guarantee": fates.get("lost-outside", 0),
            "duplicated": fates.get("duplicated", 0),
            "duplicate_rate": w.get("duplicate_rate"),
            "still_queued": fates.get("queued", 0),
            "undelivered_on_unlisted_nodes": fates.get("unlisted", 0),
            "ack_latency_p50_s": w.get("ack_latency_s", {}).get("p50"),
            "ack_latency_p99_s": w.get("ack_latency_s", {}).get("p99"),
            "end_to_end_p99_s": w.get("end_to_end_s", {}).get("p99"),
            "availability": w.get("availability"),
            "temporary_failures": w.get("temporary_failures"),
            "faults": w.get("faults"),
        }
        replay, shrunk = w.get("replay") or {}, w.get("shrunk") or {}
        figures["replay"] = replay.get("command")
        if shrunk:
            figures |= {
                "shrunk_messages": f"{shrunk['messages_before']}->{shrunk['messages_after']}",
                "shrunk_faults": f"{shrunk['faults_before']}->{shrunk['faults_after']}",
                "shrunk_replay": shrunk["command"],
            }
        prefix = f"shadowcheck.workload.{w.get('workload', 'workload')}"
        out += [(f"{prefix}.{k}", str(v)) for k, v in figures.items() if v is not None]
    return out


def suite_properties(state: ShadowcheckState) -> dict[str, str]:
    target = state.target
    return {
        "shadowcheck.run_id": state.run_id,
        "shadowcheck.target": target.label,
        "shadowcheck.target_version": target.version(),
        "shadowcheck.target_spec": state.target_spec,
        "shadowcheck.harness_version": __version__,
    }


class JUnitProperties:
    """Adds the testsuite properties, and per-behaviour verdicts for xunit2 (controller only)."""

    def __init__(self, state: ShadowcheckState) -> None:
        self.state = state

    def _xml(self) -> Any:
        return junit_xml(self.state.config)

    @pytest.hookimpl(trylast=True)
    def pytest_sessionstart(self, session: pytest.Session) -> None:
        xml = self._xml()
        if xml is None:
            return
        for name, value in suite_properties(self.state).items():
            xml.add_global_property(name, value)

    @pytest.hookimpl(trylast=True)  # after junitxml made the test case's reporter
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        data = getattr(report, "shadowcheck", None)
        xml = self._xml()
        if xml is None or not isinstance(data, dict) or self.state.junit_properties_per_case:
            return
        verdicts = ";".join(f"{b}={v['status']}" for b, v in data["by_behaviour"].items())
        lines = [(VERDICTS_PROPERTY, verdicts), *workload_properties(data.get("workloads", []))]
        out = ET.Element("system-out")
        out.text = "".join(f"[[PROPERTY|{name}={value}]]\n" for name, value in lines)
        xml.node_reporter(report).append(out)
