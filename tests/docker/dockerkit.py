"""Helpers for the docker target's tests (no package here: ``tests/docker`` must not
shadow the Docker SDK's ``docker`` package on sys.path)."""

from __future__ import annotations

import textwrap
import uuid
from pathlib import Path
from typing import Any

from pytest_shadowcheck.engine.run import run_scenario
from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.targets.docker.target import LABEL_RUN, DockerTarget
from pytest_shadowcheck.verdict import Status

ROOT = Path(__file__).resolve().parents[2]
TARGETS = ROOT / "targets"


def leftovers(engine: Any, run_id: str) -> list[str]:
    """Names of containers and volumes still labelled with ``run_id``."""
    label = f"{LABEL_RUN}={run_id}"
    names = [c.name for c in engine.containers.list(all=True, filters={"label": label})]
    names += [v.name for v in engine.volumes.list(filters={"label": label})]
    return names


def write_description(directory: Path, body: str, name: str = "target.yaml") -> Path:
    path = directory / name
    path.write_text(textwrap.dedent(body).lstrip(), encoding="utf-8")
    return path


#: the start of a scenario file's defaults: one node; corp.test goes to the mailbox
#: sink until a route step sends it to the backup sink (admin adapters)
REROUTABLE_DEFAULTS = """
defaults:
  topology:
    description: one node; corp.test goes to the mailbox sink until re-routed to backup
    boundary: dag1
    nodes: {mbx1: {site: site-a, dag: dag1}}
    next_hops:
      corp.test: {sink: mailbox}
      other.test: {sink: backup}
"""


#: an acknowledged message deferred on the node's only copy, then the node killed and
#: restarted on its queue (delivered) or wiped (gone): the same for every MTA
DURABILITY_SCENARIOS = """
defaults:
  topology: single-node
  settings: {TransientFailureRetryInterval: 1s}
  timeout: 90s
scenarios:
  - name: acknowledged_message_survives_kill_and_restart
    title: a deferred, acknowledged message survives kill -9 and a restart on the same queue
    behaviours: [PR-3]
    steps:
      - sink: {name: mailbox, reply: "451 4.3.0 mailbox busy, try later"}
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - wait: 1s
      - kill: mbx1
      - restart: mbx1
      - sink: {name: mailbox, reply: accept}
    expect:
      - reply: {message: m1, code: 250}
      - delivered: {message: m1, to: mailbox, by: mbx1, within: 20s}
  - name: acknowledged_message_gone_with_a_wiped_queue
    title: the same message is gone when the queue is wiped instead (the only copy)
    behaviours: [PR-3]
    steps:
      - sink: {name: mailbox, reply: "451 4.3.0 mailbox busy, try later"}
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - wait: 1s
      - wipe: mbx1
      - sink: {name: mailbox, reply: accept}
    expect:
      - not_delivered: {message: m1, for: 6s}
"""


def load_scenarios(directory: Path, text: str, name: str = "scenarios.yaml") -> list[Any]:
    """The scenarios of a YAML text, written to ``directory/name`` and loaded."""
    path = directory / name
    path.write_text(textwrap.dedent(text).lstrip(), encoding="utf-8")
    return load_scenario_file(path)


def new_target(description: str | Path, tidy: list[str]) -> DockerTarget:
    """A docker target with a run id of its own, which ``tidy`` checks and clears."""
    run_id = f"test-{uuid.uuid4().hex[:8]}"
    tidy.append(run_id)
    return DockerTarget(str(TARGETS / description), run_id=run_id)


def check_kept_and_wiped(target: DockerTarget, workdir: Path) -> str:
    """Run DURABILITY_SCENARIOS on ``target``: the kept message PASSes, delivered by the
    restarted container; the wiped one is lost, which only the wipe explains. Returns
    the kept run's node log (both containers) for the MTA's own words."""
    kept, wiped = load_scenarios(workdir, DURABILITY_SCENARIOS, "durability.yaml")
    verdict = run_scenario(kept, target, workdir=workdir / "kept")
    assert verdict.status == Status.PASS, (verdict.failures, verdict.diagnostics)
    log = (workdir / "kept" / "mbx1.log").read_text()
    assert log.count("--- container ") == 2  # killed container, then the restarted one

    verdict = run_scenario(wiped, target, workdir=workdir / "wiped")
    assert verdict.status == Status.OUTSIDE_GUARANTEE, verdict.failures
    loss = next(c for c in verdict.checks if c.name == "no loss of m1")
    assert "mbx1 had its queue database wiped" in loss.observed
    return log
