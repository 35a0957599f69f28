"""Fixtures for the reference MTA tests; the machinery is in clusterkit.py."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from clusterkit import Blackhole, Cluster, Sink, start_sink


@pytest.fixture
def sink() -> Iterator[Sink]:
    yield from start_sink()


@pytest.fixture
def sink2() -> Iterator[Sink]:
    yield from start_sink()


@pytest.fixture
def cluster_factory(tmp_path: Path) -> Iterator[Callable[..., Cluster]]:
    """Make clusters from spec dicts; every process is stopped at the end."""
    made: list[Cluster] = []

    def make(spec: dict[str, Any], start: bool = True) -> Cluster:
        root = tmp_path / f"cluster{len(made)}"
        root.mkdir()
        cluster = Cluster(root, spec)
        made.append(cluster)
        if start:
            cluster.start()
        return cluster

    yield make
    for cluster in made:
        cluster.stop()


@pytest.fixture
def blackhole() -> Iterator[Blackhole]:
    hole = Blackhole()
    yield hole
    hole.close()
