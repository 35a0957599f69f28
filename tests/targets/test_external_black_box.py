"""``external:nodes.yaml`` on a black box: an MTA whose routes its admin set once.

Two reference MTA nodes are started by hand, as a user would run any MTA: their
cluster file relays corp.test and reaches each peer at fixed addresses, and the
harness gets no control API. The nodes.yaml declares those addresses (``relays``,
``peers``) and the settings the MTA runs with; the harness listens exactly there,
so wire checks and link faults work on every link, and a scenario whose settings
or routes the MTA does not have is UNTESTABLE with what it needs.
"""

from __future__ import annotations

import json
import random
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.filterwarnings("ignore::pytest.PytestAssertRewriteWarning")

LIBRARY = """\
defaults:
  topology:
    boundary: dag1
    nodes:
      mbx1: {site: site-a, dag: dag1}
      mbx2: {site: site-a, dag: dag1}
    next_hops:
      corp.test: {sink: mailbox}
  settings:
    ShadowHeartbeatFrequency: 0.5s
    TransientFailureRetryInterval: 1s
scenarios:
  - name: copied_and_delivered_through_fixed_routes
    behaviours: [CR-1, CR-3]
    steps:
      # a fault on the relay link the MTA itself chose: the harness stands there
      - fault: {link: mbx1->mailbox, kind: cut}
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - heal: mbx1->mailbox
    expect:
      - reply: {message: m1, code: 250}
      - lines: {link: mbx1->mbx2, direction: c2s, contains: "^XSHADOW"}
      - order:
          first: {link: mbx1->mbx2, direction: s2c, line: "^250", message: m1}
          then: {reply: m1}
          behaviours: [CR-3]
      - delivered: {message: m1, to: mailbox, by: mbx1, within: 10s}
  - name: needs_a_setting_the_mta_lacks
    behaviours: [CR-4]
    settings: {RejectMessageOnShadowFailure: true}
    steps:
      - send: {id: m2, via: mbx1, to: [alice@corp.test]}
    expect:
      - reply: {message: m2, code: 250}
  - name: needs_a_relay_the_mta_lacks
    behaviours: [CR-5]
    topology:
      nodes: {mbx1: {}}
      next_hops: {remote.test: {sink: remote}}
    steps:
      - send: {id: m3, via: mbx1, to: [carol@remote.test]}
    expect:
      - reply: {message: m3, code: 250}
"""


def _free_ports(n: int) -> list[int]:
    """``n`` ports free now, below the kernel's ephemeral range: the black box is told
    them long before the harness listens on them, and a port the kernel hands out (as
    it does to every other test's outgoing connection) may be taken by then (CI saw
    "address already in use" on a relay port)."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    rng = random.Random()
    ports: list[int] = []
    while len(ports) < n:
        port = rng.randrange(10_000, low)
        if port in ports:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
        ports.append(port)
    return ports


@pytest.fixture
def black_box(tmp_path: Path) -> Iterator[Path]:
    """Two reference nodes with fixed routes; the nodes.yaml a user would write for them."""
    smtp1, smtp2, relay1, relay2, peer12, peer21 = _free_ports(6)
    cluster = {
        "boundary": "dag1",
        "secret": "black-box-secret",
        "nodes": {
            "mbx1": {
                "site": "site-a", "dag": "dag1",
                "peers": {"mbx2": f"127.0.0.1:{peer12}"},
                "next_hops": {"corp.test": f"127.0.0.1:{relay1}"},
            },
            "mbx2": {
                "site": "site-a", "dag": "dag1",
                "peers": {"mbx1": f"127.0.0.1:{peer21}"},
                "next_hops": {"corp.test": f"127.0.0.1:{relay2}"},
            },
        },
        "settings": {"ShadowHeartbeatFrequency": 0.5, "TransientFailureRetryInterval": 1},
    }  # fmt: skip
    config = tmp_path / "cluster.yaml"
    config.write_text(yaml.safe_dump(cluster), encoding="utf-8")
    procs = []
    try:
        for name, port in (("mbx1", smtp1), ("mbx2", smtp2)):
            proc = subprocess.Popen(
                [sys.executable, "-m", "reference_impl", "node", "--config", str(config),
                 "--name", name, "--data", str(tmp_path / name), "--smtp", f"127.0.0.1:{port}"],
                stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            procs.append(proc)
            assert proc.stdout is not None
            started = json.loads(proc.stdout.readline())
            assert started["smtp"] == f"127.0.0.1:{port}"
        nodes = {
            "name": "black-box-reference",
            # the reference stamps each categorisation (docs/protocol.md): declared, so
            # the integrity invariant accepts it
            "added_headers": ["X-Categorized-By"],
            "nodes": {
                "mbx1": {
                    "smtp": f"127.0.0.1:{smtp1}",
                    "relays": {"corp.test": f"127.0.0.1:{relay1}"},
                    "peers": {"mbx2": f"127.0.0.1:{peer12}"},
                },
                "mbx2": {
                    "smtp": f"127.0.0.1:{smtp2}",
                    "relays": {"corp.test": f"127.0.0.1:{relay2}"},
                    "peers": {"mbx1": f"127.0.0.1:{peer21}"},
                },
            },
            "settings": {
                "ShadowHeartbeatFrequency": "0.5s",
                "TransientFailureRetryInterval": "1s",
                "RejectMessageOnShadowFailure": False,
            },
        }
        path = tmp_path / "nodes.yaml"
        path.write_text(yaml.safe_dump(nodes), encoding="utf-8")
        yield path
    finally:
        for proc in procs:
            proc.terminate()
        for proc in procs:
            proc.wait(timeout=10)


def _run_library(pytester: pytest.Pytester, nodes: Path, *extra: str) -> pytest.RunResult:
    (pytester.path / "library").mkdir()
    (pytester.path / "library" / "s.yaml").write_text(LIBRARY, encoding="utf-8")
    # a process of its own: an in-process run after a test that imported the reference
    # would see two copies of the harness's Target class (pytester's module snapshot)
    return pytester.runpytest_subprocess(
        "--shadowcheck", f"--shadowcheck-target=external:{nodes}", *extra
    )


def test_a_black_box_is_tested_on_the_links_its_admin_configured(
    pytester: pytest.Pytester, black_box: Path
) -> None:
    result = _run_library(pytester, black_box, "-rs", "-v", "library")
    result.assert_outcomes(passed=1, skipped=2)
    # the relay link and the peer link went through the harness at the MTA's own addresses
    result.stdout.fnmatch_lines(["*PASSED*copied_and_delivered_through_fixed_routes*"])
    # in the order the workers finished them
    for reason in (
        "*UNTESTABLE*cannot change the MTA's settings; the scenario needs "
        "RejectMessageOnShadowFailure=True (the MTA runs with False)*",
        "*UNTESTABLE*mbx1 relays no remote.test to the harness: add "
        "`relays: {remote.test: HOST:PORT}` to nodes.mbx1*",
    ):
        result.stdout.fnmatch_lines([reason])


def test_undeclared_settings_and_routes_are_named(
    pytester: pytest.Pytester, black_box: Path
) -> None:
    # without relays the two-node scenarios cannot run, and say what to add
    data = yaml.safe_load(black_box.read_text())
    for spec in data["nodes"].values():
        del spec["relays"], spec["peers"]
    black_box.write_text(yaml.safe_dump(data))
    result = _run_library(pytester, black_box, "-rs", "library")
    result.assert_outcomes(skipped=3)
    result.stdout.fnmatch_lines(["*give each node `relays` and `peers` in a nodes.yaml*"])


def test_collect_only_lists_what_each_scenario_needs(
    pytester: pytest.Pytester, black_box: Path
) -> None:
    result = _run_library(pytester, black_box, "--collect-only", "library")
    result.stdout.fnmatch_lines(
        [
            "target black-box-reference: 1 of 3 scenario(s) can run",
            "  runs        library/s.yaml::copied_and_delivered_through_fixed_routes*",
            "  UNTESTABLE  library/s.yaml::needs_a_setting_the_mta_lacks*RejectMessage*",
            "  UNTESTABLE  library/s.yaml::needs_a_relay_the_mta_lacks*relays no remote.test*",
        ]
    )
