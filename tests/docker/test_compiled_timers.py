"""Timers compiled into an MTA, and settings no template gives it: the scenarios whose
windows count on them are UNTESTABLE naming the timer or setting, never FAIL.

No Docker engine needed: a DockerTarget reads its description when it is made.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from dockerkit import TARGETS

from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.targets.docker.description import DescriptionError, load_description
from pytest_shadowcheck.targets.docker.target import DockerTarget
from pytest_shadowcheck.targets.fit import stretch, why_untestable

SUITE = Path(__file__).resolve().parents[2] / "scenarios"


def _scenario(file: str, name: str):  # type: ignore[no-untyped-def]
    return next(s for s in load_scenario_file(SUITE / file) if s.name == name)


def _postfix_with(tmp_path: Path, extra: str) -> Path:
    """targets/postfix.yaml with ``extra`` top-level YAML appended."""
    path = tmp_path / "postfix.yaml"
    path.write_text((TARGETS / "postfix.yaml").read_text() + "\n" + extra)
    return path


def test_timers_are_read_as_shortest_and_longest(tmp_path: Path) -> None:
    path = _postfix_with(
        tmp_path,
        "timers: {TransientFailureRetryInterval: 60s-119s, ReceiveConnectionTimeout: 20m}\n",
    )
    assert load_description(path).timers == {
        "TransientFailureRetryInterval": (60.0, 119.0),
        "ReceiveConnectionTimeout": (1200.0, 1200.0),
    }


@pytest.mark.parametrize(
    ("timers", "message"),
    [
        ("{TransientFailureRetryInterval: soon}", "timers.TransientFailureRetryInterval: 'soon'"),
        ("{retry: 60s}", "'retry' is not a setting name"),
        ("{TransientFailureRetryInterval: 2m-1m}", "ends before it starts"),
    ],
)
def test_a_bad_timer_names_the_line(tmp_path: Path, timers: str, message: str) -> None:
    path = _postfix_with(tmp_path, f"timers: {timers}\n")
    with pytest.raises(DescriptionError) as caught:
        load_description(path)
    line = path.read_text().splitlines().index(f"timers: {timers}") + 1
    assert str(caught.value).startswith(f"{path}:{line}: "), str(caught.value)
    assert message in str(caught.value)


def test_a_window_counted_from_a_compiled_in_timer_stretches_within_the_budget(
    tmp_path: Path,
) -> None:
    target = DockerTarget(
        str(_postfix_with(tmp_path, "timers: {TransientFailureRetryInterval: 60s-119s}\n"))
    )
    power = _scenario("power.yaml", "pr3_power_cut_after_the_250_keeps_the_message")
    assert why_untestable(power, target) is None
    stretched = stretch(power, target)
    # the delivery window, TransientFailureRetryInterval + 9.5s, counted at 119 s
    (delivered,) = [c for c in stretched.expect if c.kind == "delivered"]
    assert delivered.arg["within"] == 128.5
    assert stretched.settings["TransientFailureRetryInterval"] == 119.0
    assert stretched.timeout == power.timeout + 118.5
    assert stretched.title.endswith(
        "[windows stretched: TransientFailureRetryInterval counted at 119s (compiled in), not "
        "500ms]"
    )
    # xs5 counts on it three times: 356 s more, beyond the default budget of 150 s
    xs5 = _scenario("security.yaml", "xs5_next_hop_without_shadow_redundancy")
    assert why_untestable(xs5, target) == (
        "target postfix has timers compiled in that this scenario's windows count on "
        "(TransientFailureRetryInterval = 500ms, compiled in at 1m to 119s; its description's "
        "timers): stretched to them it would run 356s longer, beyond the stretch budget of "
        "150s (--shadowcheck-stretch-budget)"
    )
    assert why_untestable(xs5, target, budget=400) is None
    # a scenario that counts nothing from the retry interval runs as it is
    xs3 = _scenario("security.yaml", "xs3_stranger_cannot_shadow")
    assert why_untestable(xs3, target) is None and stretch(xs3, target) is xs3
    # and without the declaration the MTA is told the setting and held to it
    plain = DockerTarget(str(TARGETS / "postfix.yaml"))
    assert why_untestable(xs5, plain) is None and stretch(xs5, plain) is xs5


LIVE_CHANGE = """\
scenarios:
  - name: retry_changed_live
    behaviours: [CR-5]
    topology: {nodes: {mbx1: {}}, next_hops: {corp.test: {sink: mailbox}}}
    settings: {TransientFailureRetryInterval: 60s}
    steps:
      - set_settings: {values: {TransientFailureRetryInterval: 1s}}
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - wait: {delivered: m1, timeout: TransientFailureRetryInterval + 5s}
"""


def test_a_compiled_in_timer_the_scenario_changes_live_is_untestable(tmp_path: Path) -> None:
    target = DockerTarget(
        str(_postfix_with(tmp_path, "timers: {TransientFailureRetryInterval: 60s}\n"))
    )
    (tmp_path / "live.yaml").write_text(LIVE_CHANGE)
    (scenario,) = load_scenario_file(tmp_path / "live.yaml")
    assert why_untestable(scenario, target) == (
        "target postfix has its TransientFailureRetryInterval compiled in at 1m (its "
        "description's timers), and this scenario changes it (1s): the MTA cannot be given "
        "that value, so it cannot be held to it"
    )


def test_a_configuration_no_template_gives_the_mta_is_untestable() -> None:
    logged = _scenario("safetynet.yaml", "sn6_replay_lag_beyond_hold_time_logged")
    reason = why_untestable(logged, DockerTarget(str(TARGETS / "postfix.yaml")))
    assert reason == (
        "target postfix: the scenario's premise is a configuration the MTA was given, and no "
        "template of postfix.yaml renders ReplayLagTime, SafetyNetHoldTime: postfix is never "
        "told it"
    )
