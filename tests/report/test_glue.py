"""Glue a target adds around the MTA (a docker description's ``glue:``) earns no PASS in
the MTA's name: a real run whose target declares glue for two behaviours, one of which
passes and one fails, then its certification, terminal summary and matrix column."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from harnesskit import CR4_FAILS_CR5_PASSES, ThreadedSink

from pytest_shadowcheck.report.matrix import END, START, main
from pytest_shadowcheck.targets.docker.description import DescriptionError, load_description

SCENARIOS = CR4_FAILS_CR5_PASSES

WHAT = "a delivery program that forwards each local domain to the next hop"

# a third-party target: the external one, with the glue a description would declare
GLUED_TARGET = f"""
from pytest_shadowcheck import hookimpl
from pytest_shadowcheck.targets.base import Glue
from pytest_shadowcheck.targets.external import ExternalTarget


class Glued(ExternalTarget):
    glue = (Glue(("CR-4", "CR-5"), {WHAT!r}),)


@hookimpl
def shadowcheck_make_target(name, argument, options):
    return Glued(argument) if name == "glued" else None
"""


def test_a_pass_the_glue_earns_is_not_credited_to_the_mta(
    pytester: pytest.Pytester, plain_smtp: ThreadedSink
) -> None:
    pytester.makepyfile(glued=GLUED_TARGET)
    pytester.syspathinsert()
    library = pytester.path / "library"
    library.mkdir()
    (library / "s.yaml").write_text(SCENARIOS, encoding="utf-8")
    root = pytester.path / "docs" / "certifications"
    result = pytester.runpytest(
        "--shadowcheck",
        "--shadowcheck-target-plugin=glued",
        f"--shadowcheck-target=glued:mbx1={plain_smtp.address}",
        f"--shadowcheck-report={root / 'glued-1.0'}",
        "library",
    )
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines([
        "behaviours: 1 FAIL, 1 PASS (glue), 43 UNTESTED",
        "FAIL: CR-4",
        f"PASS (glue), not credited to the MTA: CR-5 (by the description's glue: {WHAT})",
    ])  # fmt: skip

    data = json.loads((root / "glued-1.0" / "certification.json").read_text())
    by_id = {b["id"]: b for b in data["behaviours"]}
    # the status is still the behaviour's; the flag says whose it is
    assert by_id["CR-5"]["status"] == "PASS" and by_id["CR-5"]["by_glue"] == WHAT
    assert by_id["CR-5"]["reason"] == f"by the description's glue: {WHAT} (1 scenario(s))"
    # a FAIL stays a FAIL, glue or not
    assert by_id["CR-4"]["status"] == "FAIL" and "by_glue" not in by_id["CR-4"]
    assert data["summary"]["PASS"] == 0 and data["summary"]["PASS (glue)"] == 1
    assert data["glue"] == [{"provides": ["CR-4", "CR-5"], "what": WHAT}]
    texts = [entry["text"] for entry in data["admin_summary"]]
    assert not any(" keeps " in text for text in texts), texts
    assert any(text.startswith("1 of the 45 behaviours held only through glue") for text in texts)

    page = (root / "glued-1.0" / "certification.html").read_text()
    row = re.search(r'<tr id="behaviour-CR-5">.*?</tr>', page)
    assert row is not None and ">PASS (glue)</span>" in row[0]
    assert f"by the description&#x27;s glue: {WHAT}" in row[0]

    readme = pytester.path / "README.md"
    readme.write_text(f"{START}\n{END}\n", encoding="utf-8")
    assert main([str(root), str(readme)]) == 0
    rows = {
        line.split(" | ")[0].strip("| "): line.split(" | ")[1].rstrip(" |")
        for line in readme.read_text().splitlines()
        if line.startswith("| ")
    }
    link = "docs/certifications/glued-1.0/certification.html"
    assert rows["CR-5"] == (
        f"[PASS (glue)]({link}#behaviour-CR-5) by the description's glue: a delivery program "
        "that forwards each local…"
    )
    assert rows["CR-4"].startswith(f"[FAIL]({link}#behaviour-CR-4) ")
    assert rows["**all**"] == "1 FAIL, 1 PASS (glue), 43 UNTESTED"


def test_a_description_declares_its_glue_by_catalogue_ids(tmp_path: Path) -> None:
    path = tmp_path / "mymta.yaml"
    path.write_text(
        "image: x\nglue:\n"
        f"  - {{provides: [TO-2, CR-5], what: {WHAT}}}\n"
        "  - {provides: [XS-9], what: a relay shim}\n"
    )
    with pytest.raises(DescriptionError) as caught:
        load_description(path)
    assert str(caught.value).startswith(f"{path}:4: glue.provides: 'XS-9' is not a behaviour")
    path.write_text(path.read_text().replace("XS-9", "XS-1"))
    glue = load_description(path).glue
    assert [(g.provides, g.what) for g in glue] == [
        (("TO-2", "CR-5"), WHAT),
        (("XS-1",), "a relay shim"),
    ]
    path.write_text("image: x\nglue:\n  - {provides: [CR-5]}\n")
    with pytest.raises(DescriptionError, match=r":3: 'glue' is a list of \{provides"):
        load_description(path)
