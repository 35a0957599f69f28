"""Settings, directory and route changes made by a scenario are configuration, not node
state: a node restarted or wiped later in the run still has them, and a node that
was paused while they were made gets them when it resumes (the engine makes them
again). Real reference nodes; the second scenario expects the
opposite, to show the checks would see a node that forgot them."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

SCENARIOS = """\
defaults:
  topology: single-node
  settings: {RejectMessageOnShadowFailure: false, SafetyNetHoldTime: 2d, ReplayLagTime: 1d}
scenarios:
  - name: kept_after_restart_and_wipe
    behaviours: [SN-6, SN-10]
    steps:
      - set_settings: {values: {ReplayLagTime: 3d}}
      - directory: {group: team@corp.test, members: [alice@corp.test, bob@corp.test]}
      - restart: mbx1
      - check: {config_warning: {node: mbx1, code: "^SN-6$"}}
      - wipe: mbx1
      - check: {config_warning: {node: mbx1, code: "^SN-6$"}}
      - send: {id: m1, via: mbx1, to: [team@corp.test]}
    expect:
      - delivered: {message: m1, recipients: [alice@corp.test, bob@corp.test], within: 10s}
  - name: route_kept_after_restart
    behaviours: [PR-5]
    topology:
      nodes: {mbx1: {}}
      next_hops: {corp.test: {sink: mailbox}, spare.test: {sink: spare}}
    steps:
      - route: {domain: corp.test, sink: spare}
      - restart: mbx1
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
    expect:
      - delivered: {message: m1, to: spare, within: 10s}
  - name: route_made_while_paused_applies_on_resume
    behaviours: [PR-5]
    topology:
      nodes: {mbx1: {}}
      next_hops: {corp.test: {sink: mailbox}, spare.test: {sink: spare}}
    steps:
      - pause: mbx1
      - route: {domain: corp.test, sink: spare}
      - set_settings: {values: {ReplayLagTime: 3d}}
      - resume: mbx1
      - check: {config_warning: {node: mbx1, code: "^SN-6$"}}
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
    expect:
      - delivered: {message: m1, to: spare, within: 10s}
  - name: wrongly_expects_them_forgotten
    behaviours: [SN-6]
    steps:
      - set_settings: {values: {ReplayLagTime: 3d}}
      - restart: mbx1
      - check: {config_warning: {node: mbx1, code: "^SN-6$", present: false}}
"""


def test_settings_and_directory_survive_restart_and_wipe(pytester: pytest.Pytester) -> None:
    path = pytester.path / "library" / "restart.yaml"
    path.parent.mkdir()
    path.write_text(SCENARIOS, encoding="utf-8")
    result = pytester.runpytest_subprocess(
        "--shadowcheck", "-p", "no:randomly", "-p", "no:cacheprovider", "library", timeout=120
    )
    result.assert_outcomes(passed=3, failed=1)
    result.stdout.fnmatch_lines(
        [
            "*[[]FAIL[]] config warnings of mbx1*",
            "*expected: mbx1 does not flag the configuration warning SN-6",
            "*observed: mbx1 flags SN-6: ReplayLagTime (259200s) exceeds SafetyNetHoldTime*",
        ]
    )
