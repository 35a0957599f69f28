"""Fixtures for the docker target's tests: a real Docker engine and locally built images.

Without an engine these tests are skipped (with the reason), except when
SHADOWCHECK_REQUIRE_DOCKER=1 (CI sets it): then a missing engine fails them.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from pytest_shadowcheck.targets.base import TargetError
from pytest_shadowcheck.targets.docker.target import LABEL_RUN, docker_client


@pytest.fixture(scope="session")
def engine() -> Any:
    try:
        return docker_client()
    except TargetError as exc:
        if os.environ.get("SHADOWCHECK_REQUIRE_DOCKER") == "1":
            pytest.fail(f"SHADOWCHECK_REQUIRE_DOCKER=1 but {exc}")
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def images(engine: Any) -> dict[str, str]:
    """The postfix, exim and reference images, built unless up to date (cached by recipe
    hash)."""
    from pytest_shadowcheck.targets.docker.images import build

    return build(["postfix", "exim", "reference"], client=engine, log=lambda _: None)


SINGLE_NODE_SCENARIO = """
defaults:
  topology: single-node
  timeout: 60s
scenarios:
  - name: one_message
    title: one message through one node
    behaviours: [CR-5]
    steps:
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
    expect:
      - reply: {message: m1, code: 250}
"""


@pytest.fixture
def scenario_file(tmp_path: Path) -> Path:
    path = tmp_path / "scenarios" / "one.yaml"
    path.parent.mkdir()
    path.write_text(SINGLE_NODE_SCENARIO.lstrip(), encoding="utf-8")
    return path


@pytest.fixture
def tidy(engine: Any) -> Iterator[list[str]]:
    """Run ids a test used: anything still labelled with one fails the test, then goes."""
    run_ids: list[str] = []
    yield run_ids
    for run_id in run_ids:
        label = {"label": f"{LABEL_RUN}={run_id}"}
        for container in engine.containers.list(all=True, filters=label):
            container.remove(force=True)
        for volume in engine.volumes.list(filters=label):
            volume.remove(force=True)
