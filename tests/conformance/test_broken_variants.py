"""Every scenario of the conformance suite can fail, and the reference passes them all.

Runs the suite in a child pytest (``--shadowcheck``) against each deliberately
broken variant in ``mta_variants``, reading the outcomes from the child's JUnit
XML. That the unbroken reference passes every scenario is checked by
``tests/plugin/test_reference_e2e.py`` (one run of the whole library).
"""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from functools import cache
from pathlib import Path

import pytest
from mta_variants import Variant, all_variants

from pytest_shadowcheck.scenario.loader import load_scenario_file

HERE = Path(__file__).resolve().parent
SUITE = HERE.parent.parent / "scenarios"

pytestmark = pytest.mark.slow

Outcomes = dict[str, tuple[str, str]]

#: plugins installed here that a child running scenarios in lanes does not use
#: (Hypothesis's alone is a quarter of a second of imports)
UNUSED_PLUGINS = ("-p", "no:hypothesispytest", "-p", "no:benchmark", "-p", "no:xdist")


@cache
def suite_scenarios() -> dict[str, Path]:
    """Every scenario name in the bundled suite, with its file (read once per process)."""
    found: dict[str, Path] = {}
    for path in sorted(SUITE.glob("*.yaml")):
        for scenario in load_scenario_file(path):
            assert scenario.name not in found, f"{scenario.name} defined twice"
            found[scenario.name] = path
    return found


def outcomes(junit: Path) -> Outcomes:
    """Scenario name → (passed | failed | error | skipped | xfailed, message) from JUnit XML."""
    result: Outcomes = {}
    for case in ET.parse(junit).getroot().iter("testcase"):
        outcome, message = "passed", ""
        for child in case:
            if child.tag in ("failure", "error", "skipped"):
                outcome, message = child.tag, child.get("message") or ""
                if child.tag == "failure":
                    outcome = "failed"
                elif child.tag == "skipped" and message.startswith("OUTSIDE-GUARANTEE"):
                    outcome = "xfailed"
        # the test case is named "scenario[CR-4,...]": the scenario name is the key
        result[case.get("name", "").partition("[")[0]] = (outcome, message)
    return result


def run_suite(
    tmp_path: Path,
    target: str,
    only: tuple[str, ...] = (),
    plugin: str = "broken_target",
    extra: tuple[str, ...] = (),
    timeout: float = 280,
    scenarios: Path | Sequence[Path] = SUITE,
    transcript: list[str] | None = None,
) -> Outcomes:
    """The bundled suite (or the scenarios named in ``only``; or those of ``scenarios``,
    directories or files) in a child pytest; its terminal output is appended to
    ``transcript`` when given."""
    paths = [scenarios] if isinstance(scenarios, Path) else list(scenarios)
    junit = tmp_path / "junit.xml"
    command = [
        sys.executable, "-m", "pytest", "--shadowcheck",
        "--shadowcheck-target", target,
        "--shadowcheck-target-plugin", plugin,
        "--shadowcheck-scenarios", *map(str, paths),
        f"--junitxml={junit}", "-o", "junit_family=xunit2",
        "-p", "no:cacheprovider", "-q", "-rfE", *extra,
    ]  # fmt: skip
    if only:
        command += ["-k", " or ".join(only)]
    path = [str(HERE), *filter(None, [os.environ.get("PYTHONPATH")])]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(path))
    proc = subprocess.run(
        command, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=timeout
    )
    if transcript is not None:
        transcript.append(proc.stdout)
    assert junit.exists(), f"the child pytest wrote no JUnit XML:\n{proc.stdout}\n{proc.stderr}"
    found = outcomes(junit)
    missing = set(only) - set(found)
    assert not missing, f"scenarios not run: {sorted(missing)}\n{proc.stdout[-3000:]}"
    return found


def kept_histories(directory: Path, scenario: str) -> list[Path]:
    """The history files a child run wrote for ``scenario`` into ``directory``
    (``--shadowcheck-history``): a failure seen once under CI's load is read from them
    (pytest keeps the last three runs' directories: read them before the next run)."""
    return sorted(directory.glob(f"*__{scenario}[[]*.json"))


# a correct but unusual variant (no scenario to fail) has a test of its own
@pytest.mark.parametrize("variant", [v for v in all_variants() if v.fails], ids=lambda v: v.name)
def test_broken_variant_fails_its_scenarios(tmp_path: Path, variant: Variant) -> None:
    # the child loads only the files of its scenarios, runs them in lanes of its own
    # (told how many: nothing to count) and loads no plugin it does not use: the whole
    # library's collection and certification and those plugins' imports were 40 % of
    # the CPU of a child that runs one to five scenarios (101 children per run)
    files = sorted({suite_scenarios()[name] for name in variant.fails})
    lanes = str(min(len(variant.fails), 4))
    histories = tmp_path / "histories"
    found = run_suite(
        tmp_path, f"broken:{variant.name}", variant.fails, scenarios=files,
        extra=("--shadowcheck-concurrency", lanes, f"--shadowcheck-history={histories}",
               *UNUSED_PLUGINS),
    )  # fmt: skip
    survived = {name: found[name] for name in variant.fails if found[name][0] != "failed"}
    kept = [str(p) for name in survived for p in kept_histories(histories, name)]
    assert not survived, (
        f"variant {variant.name!r} ({variant.breaks}) should fail these scenarios, "
        f"but got {survived}; histories: {kept}"
    )


def test_every_scenario_can_fail() -> None:
    scenarios = suite_scenarios()
    claimed = {name for v in all_variants() for name in v.fails}
    unknown = claimed - set(scenarios)
    assert not unknown, f"variants name scenarios that do not exist: {sorted(unknown)}"
    unbroken = sorted(set(scenarios) - claimed)
    assert not unbroken, f"no broken variant fails these scenarios (a defect): {unbroken}"


def test_variant_names_are_unique() -> None:
    names = [v.name for v in all_variants()]
    assert len(names) == len(set(names))
