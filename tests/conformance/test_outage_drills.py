"""The outage and restart drills (engine/generator_outage.py), run: each as the generator writes it,
alone, passes on the reference and FAILs on the broken variant it was made for, under
the rule that variant breaks. The drills are taken from seed 11's plans, as a deep
exploration draws them; a change of the generator's draws moves the test to other plans
instead of breaking it."""

from __future__ import annotations

from pathlib import Path

import pytest
from test_exploration import _child

from pytest_shadowcheck.engine.generator import plan
from pytest_shadowcheck.plugin.exploration import deep_length
from pytest_shadowcheck.targets.reference import ReferenceTarget

pytestmark = pytest.mark.slow

#: drill (a phrase of its label) -> the variant it was made for, the rule it FAILs
DRILLS = {
    "back after a failed heartbeat": ("promotes-when-primary-returns", "PR-1"),
    "kept down past the promotion window": ("last-contact-never-refreshed", "PR-1"),
    "ShadowRedundancyEnabled set false": ("stops-asking-when-xshadow-withdrawn", "PR-2"),
    "delivered while its shadows could not ask": ("forgets-discards-on-restart", "DI-5"),
}


def _write(directory: Path, phrase: str) -> str:
    """The first drill of seed 11 whose label has ``phrase``, written alone as a
    scenario file in ``directory``; its scenario's name."""
    capabilities = ReferenceTarget().capabilities
    for index in range(200):
        explored = plan(11, index, capabilities=capabilities, length=deep_length(index))
        for i, op in enumerate(explored.operations):
            if op.label.startswith(("outage:", "restart:")) and phrase in op.label:
                name = "drill_" + phrase.split()[0].lower()
                explored.write(keep=[i], directory=directory, name=name)
                return name
    raise AssertionError(f"no outage drill '{phrase}' in seed 11's first 200 plans")


def test_every_outage_drill_passes_on_the_reference(tmp_path: Path) -> None:
    drills = tmp_path / "drills"
    names = {_write(drills, phrase) for phrase in DRILLS}
    outcomes, output = _child(tmp_path, ["-p", "no:xdist", str(drills)], "reference")
    assert outcomes == dict.fromkeys(names, "passed"), output[-4000:]


@pytest.mark.parametrize("phrase", sorted(DRILLS))
def test_each_outage_drill_fails_on_its_variant(tmp_path: Path, phrase: str) -> None:
    variant, behaviour = DRILLS[phrase]
    drills = tmp_path / "drills"
    name = _write(drills, phrase)
    args = ["-p", "no:xdist", "--shadowcheck-target", f"broken:{variant}", str(drills)]
    outcomes, output = _child(tmp_path, args, variant)
    assert outcomes == {name: "failure"}, output[-4000:]
    assert f"{behaviour}: FAIL - the catalogue model" in output, output[-4000:]
