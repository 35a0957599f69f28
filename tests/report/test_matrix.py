"""The README's behaviour x MTA matrix, built from certifications of real runs."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from harnesskit import CR4_FAILS_CR5_PASSES, ThreadedSink

from pytest_shadowcheck.report.matrix import END, START, main, short_reason
from pytest_shadowcheck.scenario.loader import load_behaviours

ROOT = Path(__file__).resolve().parents[2]

SCENARIOS = CR4_FAILS_CR5_PASSES


def _rows(text: str) -> dict[str, list[str]]:
    block = text[text.index(START) + len(START) : text.index(END)]
    rows: dict[str, list[str]] = {}
    for line in block.strip().splitlines():
        if line.startswith("|---"):
            continue
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        rows[cells[0]] = cells[1:]
    return rows


@pytest.fixture
def certifications(pytester: pytest.Pytester, plain_smtp: ThreadedSink) -> Path:
    """Two certifications of real runs, one of them named as the reference's."""
    library = pytester.path / "library"
    library.mkdir()
    (library / "s.yaml").write_text(SCENARIOS, encoding="utf-8")
    root = pytester.path / "docs" / "certifications"
    for name in ("postfix-3.7", "reference"):
        pytester.runpytest(
            "--shadowcheck",
            f"--shadowcheck-target=external:mbx1={plain_smtp.address}",
            f"--shadowcheck-report={root / name}",
            "library",
        ).assert_outcomes(failed=1)
    (pytester.path / "README.md").write_text(
        f"# title\n\nbefore\n\n{START}\nold matrix\n{END}\n\nafter\n", encoding="utf-8"
    )
    return root


def test_one_row_per_behaviour_one_column_per_certification(certifications: Path) -> None:
    readme = certifications.parents[1] / "README.md"
    args = [str(certifications), str(readme)]
    assert main([*args, "--check"]) == 1  # the old block is stale
    assert main(args) == 0
    text = readme.read_text(encoding="utf-8")
    assert "old matrix" not in text
    assert text.startswith("# title\n\nbefore\n") and text.endswith("\n\nafter\n")
    rows = _rows(text)
    # the reference first, whatever the directory order; each heading links to its page
    assert rows["ID"][0].endswith("(docs/certifications/reference/certification.html)")
    assert rows["ID"][1].endswith("(docs/certifications/postfix-3.7/certification.html)")
    # every catalogue behaviour in family order (CR, DI, PR, SN, XS, TO), then the totals
    ids = [r for r in rows if r != "ID"]
    assert ids[:-1] == list(load_behaviours()) and ids[-1] == "**all**"
    page = "docs/certifications/reference/certification.html"
    # a status links to its behaviour's evidence, the reason follows, shortened
    assert rows["CR-4"][0] == f"[FAIL]({page}#behaviour-CR-4) reply to m1: mbx1 answered 250"
    assert rows["CR-5"][0] == f"[PASS]({page}#behaviour-CR-5) 1 scenario"
    untested = f"[UNTESTED]({page}#behaviour-TO-2) no scenario in the library names it"
    assert rows["TO-2"][0] == untested
    assert rows["**all**"][0] == "1 FAIL, 1 PASS, 43 UNTESTED"
    assert main([*args, "--check"]) == 0

    # a certification added later (another MTA) makes the matrix stale until regenerated
    shutil.copytree(certifications / "postfix-3.7", certifications / "exim-4.96")
    assert main([*args, "--check"]) == 1
    assert main(args) == 0
    heads = _rows(readme.read_text(encoding="utf-8"))["ID"]
    assert [h.rsplit("/", 2)[-2] for h in heads] == ["reference", "exim-4.96", "postfix-3.7"]


def test_an_unreadable_certification_is_named(
    certifications: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    broken = certifications / "broken-1.0" / "certification.json"
    broken.parent.mkdir()
    broken.write_text(json.dumps({"behaviours": [{"id": "CR-1", "status": "GREEN"}]}))
    assert main([str(certifications), str(certifications.parents[1] / "README.md")]) == 2
    assert f"{broken}: not a certification report" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("status", "reason", "short"),
    [
        ("PASS", "3 scenario(s)", "3 scenarios"),
        (
            "UNTESTABLE",
            "sn5_resubmission_by_database_and_window: target postfix lacks control_api - the "
            "MTA's internal state through a control API - for step resubmit at line 90",
            "lacks control_api",
        ),
        (
            "NOT-APPLICABLE",
            "cr8_sender_timeout: order: /^XSHADOW/ on mbx1->mbx2 never happened, so there was "
            "nothing to check",
            "order: /^XSHADOW/ on mbx1->mbx2 never happened",
        ),
        (
            "FAIL",
            "cr3_ack: order: +3.804s the sender got 250 2.0.0 Ok: queued as D4798160890 for m1;"
            " /^XSHADOW/ had not happened by then (checked at +3.808s)",
            "order: the sender got 250 for m1; /^XSHADOW/ had not happened by then",
        ),
        (
            "FAIL",
            "cr9: order: +1.166s mbx1->mbx3 #1 S: 250 2.0.0 02e369a4 Message accepted; /^250/ "
            "on mbx3->mbx4 had not happened",
            "order: mbx1->mbx3 #1 S: 250; /^250/ on mbx3->mbx4 had not happened",
        ),
        ("FAIL", "x: " + "a" * 100, "a" * 71 + "…"),
    ],
)
def test_reasons_are_cut_to_what_a_cell_holds(status: str, reason: str, short: str) -> None:
    assert short_reason(status, reason) == short


def test_project_readme_matrix_is_current() -> None:
    certifications = ROOT / "docs" / "certifications"
    hint = "run: python -m pytest_shadowcheck matrix docs/certifications README.md"
    assert main([str(certifications), str(ROOT / "README.md"), "--check"]) == 0, hint
    heads = _rows((ROOT / "README.md").read_text(encoding="utf-8"))["ID"]
    # every certification in the repository is a column, the reference's first
    named = [h.rsplit("/", 2)[-2] for h in heads]
    assert named[0] == "reference"
    certified = certifications.glob("*/certification.json")
    assert sorted(named) == sorted(p.parent.name for p in certified)
