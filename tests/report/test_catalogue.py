"""The behaviour table: every catalogue ID linked to the scenarios naming it."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_shadowcheck.report.catalogue import END, START, main
from pytest_shadowcheck.scenario.loader import load_behaviours

SCENARIOS = """\
scenarios:
  - name: first
    behaviours: [CR-4, DI-2]
    topology:
      nodes: {mbx1: {}}
    steps:
      - send: {id: m1, via: mbx1, to: [a@corp.test]}
  - name: second
    behaviours: [CR-4]
    topology:
      nodes: {mbx1: {}}
    steps:
      - send: {id: m1, via: mbx1, to: [a@corp.test]}
"""

README = "# title\n\nbefore\n\n{start}\nold table\n{end}\n\nafter\n"


@pytest.fixture
def project(tmp_path: Path) -> Path:
    (tmp_path / "scenarios").mkdir()
    (tmp_path / "scenarios" / "s.yaml").write_text(SCENARIOS, encoding="utf-8")
    (tmp_path / "README.md").write_text(
        README.format(
            start=START,
            end=END,
        ),
        encoding="utf-8",
    )
    return tmp_path


def test_table_rows_link_each_id_to_its_scenarios(project: Path) -> None:
    readme = project / "README.md"
    assert main([str(readme), "--check"]) == 1
    assert main([str(readme)]) == 0
    text = readme.read_text(encoding="utf-8")
    assert "old table" not in text
    assert text.startswith("# title\n\nbefore\n") and text.endswith("\n\nafter\n")
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if "| " in line}
    assert set(load_behaviours()) <= set(rows)
    assert "[first](scenarios/s.yaml#L2), [second](scenarios/s.yaml#L8)" in rows["CR-4"]
    assert "[first](scenarios/s.yaml#L2)" in rows["DI-2"]
    assert "**untested**" in rows["PR-1"]
    assert main([str(readme), "--check"]) == 0


def test_missing_marker_is_an_error(project: Path) -> None:
    readme = project / "README.md"
    readme.write_text("# no markers\n", encoding="utf-8")
    with pytest.raises(ValueError, match="marker"):
        main([str(readme)])


def test_project_readme_table_is_current() -> None:
    readme = Path(__file__).resolve().parents[2] / "README.md"
    hint = "run: python -m pytest_shadowcheck catalogue README.md"
    assert main([str(readme), "--check"]) == 0, hint
    text = readme.read_text(encoding="utf-8")
    table = text[text.index("behaviour-table:start") : text.index("behaviour-table:end")]
    assert "**untested**" not in table
