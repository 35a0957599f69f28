"""Helpers for the docker target's tests (no package here: ``tests/docker`` must not
shadow the Docker SDK's ``docker`` package on sys.path)."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

from pytest_shadowcheck.targets.docker import LABEL_RUN

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ROOT / "targets"


def leftovers(engine: Any, run_id: str) -> list[str]:
    """Names of containers and volumes still labelled with ``run_id``."""
    label = f"{LABEL_RUN}={run_id}"
    names = [c.name for c in engine.containers.list(all=True, filters={"label": label})]
    names += [v.name for v in engine.volumes.list(filters={"label": label})]
    return names


def write_description(directory: Path, body: str, name: str = "target.yaml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(body).lstrip(), encoding="utf-8")
    return path
