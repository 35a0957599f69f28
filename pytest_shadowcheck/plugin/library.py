"""Where a ``--shadowcheck`` session's scenarios are: the bundled library, or the paths
the command line or the ini file names. Light (pytest and the standard library), so
that the choice of workers can read it before the harness loads."""

from __future__ import annotations

from importlib import resources
from pathlib import Path

import pytest

__all__ = ["BUNDLED", "bundled_scenarios", "library_paths", "scenario_paths"]

#: stands for the bundled library in --shadowcheck-scenarios
BUNDLED = "bundled"


def bundled_scenarios() -> Path:
    return Path(str(resources.files("scenarios")))


def library_paths(config: pytest.Config, scenario_paths: list[Path]) -> list[Path]:
    """The library a certification is measured against: the configured scenario paths
    holding what was asked to run, or what was asked itself when it lies outside them
    (a file or node id of the bundled library still counts the whole library, so that
    running part of it gives a PARTIAL certification, not a PASS)."""
    out: list[Path] = []
    for arg in config.args:
        path = (config.invocation_params.dir / str(arg).split("::")[0]).resolve()
        home = next((p for p in scenario_paths if p == path or p in path.parents), path)
        if home not in out:
            out.append(home)
    return out


def scenario_paths(config: pytest.Config) -> list[Path]:
    given = config.getoption("shadowcheck_scenarios")
    if given:
        return [bundled_scenarios() if p == BUNDLED else Path(p).resolve() for p in given]
    configured = config.getini("shadowcheck_scenarios")
    if configured:
        return [Path(p) for p in configured]
    return [bundled_scenarios()]
