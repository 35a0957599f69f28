"""A ``fault`` at a protocol point (cut_at, stall_at) loads as a FaultSpec with its
defaults, shows in the history as scenarios match it, and a bad point is one error at its
file and line."""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_shadowcheck.scenario.steps import FaultSpec

from .test_steps import FIRST, load, load_error


def test_a_point_fault_loads_with_its_defaults(tmp_path: Path) -> None:
    steps = load(
        tmp_path,
        "      - fault: {link: client->mbx1, kind: cut_at, point: {before_reply: eod}}\n"
        "      - fault: {link: mbx1->mbx2, kind: stall_at, point: {after: XSHADOW},\n"
        "                occurrence: 2, connection: 3}\n",
    )
    assert steps[0].arg == FaultSpec(
        link="client->mbx1", kind="cut_at", point="before_reply", verb="EOD"
    )
    assert steps[1].arg == FaultSpec.of(
        "mbx1->mbx2", "stall_at", point=("after", "XSHADOW"), occurrence=2, connection=3
    )
    assert [f"{s.kind} {s.arg.describe()}" for s in steps] == [
        "fault link=client->mbx1 kind=cut_at point=before_reply verb=EOD",
        "fault link=mbx1->mbx2 kind=stall_at point=after verb=XSHADOW occurrence=2 "
        "connection=3",
    ]


@pytest.mark.parametrize(
    ("step", "message"),
    [
        ("fault: {link: mbx1->mbx2, kind: cut_at}", "fault 'cut_at' needs a 'point'"),
        ("fault: {link: mbx1->mbx2, kind: cut, point: {after: EOD}}",
         "fault 'cut' takes no 'point'"),
        ("fault: {link: mbx1->mbx2, kind: stall_at, point: {after: CONNECT}}",
         "nothing comes after CONNECT"),
        ("fault: {link: mbx1->mbx2, kind: cut_at, point: {during: EOD}}",
         "unknown key 'during'"),
        ("fault: {link: mbx1->mbx2, kind: cut_at, point: {after: FOO}}", "FOO"),
        ("fault: {link: mbx1->mbx2, kind: cut_at, point: {after: EOD, before_reply: EOD}}",
         "point"),
        ("fault: {link: mbx1->mbx2, kind: cut_at, point: {after: EOD}, occurrence: 0}",
         "occurrence"),
    ],
)  # fmt: skip
def test_a_bad_point_is_one_error_at_its_file_and_line(
    tmp_path: Path, step: str, message: str
) -> None:
    error = load_error(tmp_path, f"      - {step}\n")
    assert error.where.line == FIRST
    assert message in str(error)
    assert f"steps.yaml:{FIRST}" in str(error)
