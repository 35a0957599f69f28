"""The reference target on a virtual clock: a node (re)started mid-scenario starts
at the cluster's current virtual time, so the queue database a wipe creates is
dated at the wipe, not at the clock's configured start (SN-8 depends on it)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.targets.base import ClusterPlan
from pytest_shadowcheck.targets.reference import ReferenceTarget

pytestmark = pytest.mark.slow

DAY0 = 1767225600.0  # 2026-01-01T00:00:00Z, the virtual clock's default start
HOUR = 3600.0

SCENARIO = """
scenarios:
  - name: clock_probe
    behaviours: [SN-8]
    topology:
      clock: virtual
      nodes: {mbx1: {}}
      next_hops: {corp.test: {sink: mailbox}}
    steps: [{advance: 7h}]
"""


def test_wiped_node_starts_at_the_current_virtual_time(tmp_path: Path) -> None:
    path = tmp_path / "probe.yaml"
    path.write_text(SCENARIO, encoding="utf-8")
    scenario = load_scenario_file(path)[0]

    async def main() -> tuple[float, float, float]:
        target = ReferenceTarget()
        plan = ClusterPlan(
            topology=scenario.topology,
            settings={},
            peers={"mbx1": {}},
            next_hops={"mbx1": {"corp.test": {"address": "127.0.0.1:9", "kind": "mailbox"}}},
            workdir=tmp_path / "run",
        )
        try:
            await target.start(plan)
            first = await target.control("mbx1", "GET", "/queue-db")
            await target.advance_clock("mbx1", 7 * HOUR)
            await target.wipe("mbx1")
            second = await target.control("mbx1", "GET", "/queue-db")
            clock = await target.control("mbx1", "GET", "/clock")
        finally:
            await target.stop()
        return float(first["created_at"]), float(second["created_at"]), float(clock["now"])

    created_first, created_after_wipe, now = asyncio.run(main())
    assert created_first == DAY0
    assert created_after_wipe == DAY0 + 7 * HOUR
    assert now == DAY0 + 7 * HOUR
