"""Selections of a workload's plan (--shadowcheck-replay) and the ddmin search of the
shrinker: pure functions, run here without a cluster (test_shrink.py runs them whole)."""

from __future__ import annotations

import pytest

from pytest_shadowcheck.engine.nemesis import Fault
from pytest_shadowcheck.engine.shrink import Budget, ddmin, shrink_operations
from pytest_shadowcheck.engine.workload import kept_faults, replay_args
from pytest_shadowcheck.scenario.replay import (
    ReplayError,
    Selection,
    format_indices,
    parse_selection,
    parse_selections,
)
from pytest_shadowcheck.verdict import CheckResult, Status, Verdict


def test_a_selection_reads_back_what_it_writes() -> None:
    selection = parse_selection("single:messages=3,17,40-42;faults=none")
    assert selection == Selection("single", frozenset({3, 17, 40, 41, 42}), frozenset())
    assert selection.text() == "single:messages=3,17,40-42;faults=none"
    assert parse_selection(selection.text()) == selection
    only_faults = parse_selection("kill:faults=1")
    assert only_faults.messages is None and only_faults.keeps_message(12345)
    assert not only_faults.keeps_fault(0) and only_faults.keeps_fault(1)
    assert format_indices({4, 5}) == "4,5" and format_indices({4, 5, 6, 9}) == "4-6,9"


@pytest.mark.parametrize(
    ("given", "said"),
    [
        ("single", "expected the workload step's name, a colon"),
        ("single:", "keeps the whole plan"),
        ("single:message=3", "'message=3' is not messages=... or faults=..."),
        ("single:messages=3;messages=4", "messages= is given twice"),
        ("single:messages=three", "'three' is neither"),
        ("single:messages=9-2", "the range 9-2 in messages= runs backwards"),
        ("single:faults=-1", "'-1' is neither"),
    ],
)
def test_a_bad_selection_is_refused_in_words(given: str, said: str) -> None:
    with pytest.raises(ReplayError) as caught:
        parse_selection(given)
    assert said in str(caught.value)
    assert given in str(caught.value)


def test_one_selection_per_workload() -> None:
    with pytest.raises(ReplayError, match="names workload 'w' twice"):
        parse_selections(["w:messages=1", "w:faults=2"])


def test_kept_faults_start_when_planned() -> None:
    plan = [
        Fault(0, "kill", ("mbx1",), (), gap=1.0, duration=0.5),
        Fault(1, "restart", ("mbx1",), (), gap=2.0, duration=9.0),
        Fault(2, "kill", ("mbx1",), (), gap=1.5, duration=0.5),
        Fault(3, "kill", ("mbx1",), (), gap=1.0, duration=0.5),
    ]
    kept = kept_faults(plan, frozenset({2}))
    # fault 0's gap and length, and fault 1's gap (a restart has no length), waited out
    assert [(f.index, f.gap) for f in kept] == [(2, 1.0 + 0.5 + 2.0 + 1.5)]
    assert [f.index for f in kept_faults(plan, frozenset())] == []
    assert [f.gap for f in kept_faults(plan, frozenset({0, 3}))] == [1.0, 2.0 + 1.5 + 0.5 + 1.0]


def test_replay_args_name_seed_scale_and_selection() -> None:
    assert replay_args(7, 1.0, None) == ["--shadowcheck-workload-seed", "7"]
    assert replay_args(7, 0.5, Selection("w", frozenset({1}), None)) == [
        "--shadowcheck-workload-seed", "7", "--shadowcheck-workload-scale", "0.5",
        "--shadowcheck-replay", "w:messages=1",
    ]  # fmt: skip


def test_ddmin_finds_the_pair_that_fails() -> None:
    def fails(kept: list[int]) -> bool:
        return {17, 163} <= set(kept)

    assert ddmin(list(range(300)), fails) == [17, 163]


def test_ddmin_tries_nothing_at_all_when_asked() -> None:
    assert ddmin([4, 9], lambda kept: True, try_empty=True) == []
    assert ddmin([4, 9], lambda kept: 9 in kept, try_empty=True) == [9]


def _verdict(failing: bool) -> Verdict:
    check = CheckResult("no loss of m2", Status.FAIL if failing else Status.PASS, "", "")
    return Verdict("explore_s1_000", ["CR-1"], checks=[check])


def test_a_subset_that_fails_only_once_is_not_kept() -> None:
    # operations 0 and 3 fail every time; 3 alone fails its first run only (a send that
    # once raced its own delivery): the shrinker runs a failing subset twice and keeps
    # only what fails both times
    runs: dict[tuple[int, ...], int] = {}

    def attempt(kept: list[int]) -> Verdict:
        key = tuple(kept)
        runs[key] = runs.get(key, 0) + 1
        return _verdict({0, 3} <= set(kept) or (key == (3,) and runs[key] == 1))

    said: list[str] = []
    result = shrink_operations(_verdict(True), 6, attempt, Budget(40, 60), said.append)
    assert result.kept == [0, 3] and not result.stopped
    assert runs[(3,)] == 2 and runs[(0, 3)] == 2
    assert any("1 of 6 operations: does not this time (PASS): a race" in s for s in said), said


def test_a_confirmation_out_of_budget_keeps_the_last_confirmed() -> None:
    result = shrink_operations(_verdict(True), 4, lambda kept: _verdict(2 in kept), Budget(3, 60))
    # [0, 1] passes (1), [2, 3] fails (2) and its confirmation is the budget's third
    assert result.kept == [2, 3] and result.attempts == 3
    tight = shrink_operations(_verdict(True), 4, lambda kept: _verdict(2 in kept), Budget(2, 60))
    assert tight.kept == [0, 1, 2, 3] and tight.stopped
