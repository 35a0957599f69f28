"""The docker target on a real engine: clear errors, no leaked containers, real MTAs.

Every test starts real containers (host networking, loopback ports) from the
locally built images; nothing is mocked.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from dockerkit import (
    REROUTABLE_DEFAULTS,
    ROOT,
    TARGETS,
    check_kept_and_wiped,
    leftovers,
    load_scenarios,
    new_target,
    write_description,
)

from pytest_shadowcheck.engine.run import run_scenario
from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.targets.base import TargetError
from pytest_shadowcheck.targets.docker.target import (
    LABEL_OWNER,
    LABEL_RUN,
    DockerTarget,
    owner_label,
    reap_leftovers,
)
from pytest_shadowcheck.verdict import Status

pytestmark = pytest.mark.docker

POSTFIX = "shadowcheck/postfix:3.7"


def never_ready(tmp_path: Path, command: str, timeout: str = "2s") -> Path:
    return write_description(
        tmp_path,
        f"""
        name: never-ready
        image: {POSTFIX}
        queue_dir: /var/spool/postfix
        command: {command}
        ready: {{smtp_banner: true, timeout: {timeout}}}
        """,
    )


def test_an_image_that_does_not_exist_is_a_clear_error(
    engine: Any, tmp_path: Path, pytester: pytest.Pytester
) -> None:
    path = write_description(
        tmp_path,
        """
        # a vendor's description naming an image nobody built
        name: nothing
        image: shadowcheck/no-such-mta:0.0
        command: [run-it]
        """,
    )
    with pytest.raises(TargetError) as caught:
        DockerTarget(str(path))
    message = str(caught.value)
    assert f"{path}:3:" in message
    assert "'shadowcheck/no-such-mta:0.0' is not in the local Docker engine" in message
    assert "docker build -t / docker load / docker tag" in message

    # the same through pytest: a usage error before anything runs
    result = pytester.runpytest_subprocess(
        "--shadowcheck", f"--shadowcheck-target=docker:{path}", "-p", "no:cacheprovider"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*'shadowcheck/no-such-mta:0.0' is not in the local Docker*"])


@pytest.mark.usefixtures("images")
def test_a_recipe_image_names_its_build_command(engine: Any, tmp_path: Path) -> None:
    path = write_description(
        tmp_path,
        """
        image: shadowcheck/postfix:not-built
        recipe: postfix
        """,
    )
    with pytest.raises(TargetError, match=r"python -m pytest_shadowcheck images build postfix"):
        DockerTarget(str(path))


@pytest.mark.usefixtures("images")
@pytest.mark.parametrize(
    ("command", "observed"),
    [
        ("[sleep, '600']", "was not ready within 2s: no SMTP service on 127.0.0.1:"),
        ("[sh, -c, 'echo no config here >&2; exit 3']", "exited with code 3 before it was ready"),
    ],
    ids=["never-listens", "exits-at-once"],
)
def test_a_node_that_never_becomes_ready_is_inconclusive_and_leaves_nothing(
    engine: Any, tmp_path: Path, scenario_file: Path, tidy: list[str], command: str, observed: str
) -> None:
    target = new_target(never_ready(tmp_path, command), tidy)
    (scenario,) = load_scenario_file(scenario_file)
    workdir = tmp_path / "work"
    verdict = run_scenario(scenario, target, workdir=workdir)

    # a target that never started is not a verdict on the MTA
    assert verdict.status == Status.INCONCLUSIVE and not verdict.failures
    assert verdict.reason.startswith("the nodes did not start")
    said = f"{verdict.reason}\n{verdict.diagnostics}"
    assert "node mbx1 (shadowcheck/postfix:3.7)" in said
    assert observed in said
    if "exit" in command:
        assert "no config here" in said  # the container's own words
    assert leftovers(engine, tidy[-1]) == []
    log = (workdir / "mbx1.log").read_text()
    assert "--- container shadowcheck-" in log  # the log outlived the container


REAPER_CHILD = """
import sys, time
from pathlib import Path
from pytest_shadowcheck.engine.run import run_scenario
from pytest_shadowcheck.scenario.loader import load_scenario_file
from pytest_shadowcheck.targets.docker.target import DockerTarget

description, scenario_file, run_id, workdir = sys.argv[1:]
(scenario,) = load_scenario_file(Path(scenario_file))
run_scenario(scenario, DockerTarget(description, run_id=run_id), workdir=Path(workdir))
"""

WAITING_SCENARIO = """
defaults: {topology: two-node-dag, timeout: 300s}
scenarios:
  - name: sits_there
    title: two nodes that stay up until the harness is killed
    behaviours: [CR-5]
    steps:
      - wait: 240s
"""


@pytest.mark.usefixtures("images")
def test_the_reaper_removes_what_a_killed_run_left_and_spares_live_owners(
    engine: Any, tmp_path: Path, tidy: list[str]
) -> None:
    dead_run = f"test-dead-{uuid.uuid4().hex[:8]}"
    live_run = f"test-live-{uuid.uuid4().hex[:8]}"
    tidy += [dead_run, live_run]
    scenario = tmp_path / "wait.yaml"
    scenario.write_text(WAITING_SCENARIO.lstrip())
    child = subprocess.Popen(
        [sys.executable, "-c", REAPER_CHILD, str(TARGETS / "postfix.yaml"), str(scenario),
         dead_run, str(tmp_path / "work")],
        cwd=ROOT,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        running: list[Any] = []
        while time.monotonic() < deadline and len(running) < 2:
            running = engine.containers.list(filters={"label": f"{LABEL_RUN}={dead_run}"})
            assert child.poll() is None, "the child run ended before its nodes were up"
            time.sleep(0.2)
        assert len(running) == 2, leftovers(engine, dead_run)
    finally:
        os.kill(child.pid, signal.SIGKILL)  # a crash: no teardown, no atexit
        child.wait(10)
    # a container of a live owner (this test process) must survive the reaper
    mine = engine.containers.create(
        POSTFIX, ["sleep", "60"], labels={LABEL_OWNER: owner_label(), LABEL_RUN: live_run}
    )
    # the two containers and two queue volumes the killed run left (another test
    # process's reaper, starting its first node just now, may have taken some)
    left = leftovers(engine, dead_run)
    removed = reap_leftovers(engine)
    assert set(left) <= set(removed), (left, removed)
    assert leftovers(engine, dead_run) == []
    assert leftovers(engine, live_run) == [mine.name]


@pytest.mark.usefixtures("images")
def test_postfix_keeps_an_acknowledged_message_across_kill_and_restart(
    engine: Any, tmp_path: Path, tidy: list[str]
) -> None:
    target = new_target("postfix.yaml", tidy)
    assert target.version().startswith("Postfix 3.7.")
    log = check_kept_and_wiped(target, tmp_path)
    assert "status=deferred" in log and "status=sent" in log  # queued, then delivered
    assert leftovers(engine, tidy[-1]) == []


@pytest.mark.usefixtures("images")
def test_bundled_scenarios_pass_on_the_reference_image(
    engine: Any, pytester: pytest.Pytester
) -> None:
    report = pytester.path / "cert"
    result = pytester.runpytest_subprocess(
        "--shadowcheck",
        f"--shadowcheck-target=docker:{TARGETS / 'reference.yaml'}",
        f"--shadowcheck-report={report}",
        # the library alone, not the explored slice (whose wire operations set receive
        # timeouts reference.yaml has no template for: UNTESTABLE there)
        "--shadowcheck-scenarios", "bundled",
        # a kill, a restart, a wipe, a pause and a virtual clock between them
        "-m", "PR-2 or PR-3 or DI-5 or SN-1",
        # one scenario at a time: with eight at once beside CI's other tests, the power
        # cut's container once saw its queue directory without the lazy filesystem
        # (INCONCLUSIVE, named as such; cause not found yet, docs/suite-speed.md)
        "--shadowcheck-concurrency", "1",
        "-p", "no:cacheprovider", "-p", "no:randomly",
        timeout=280,
    )  # fmt: skip
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed", 0) >= 3, result.stdout.str()[-3000:]
    assert not outcomes.get("failed") and not outcomes.get("skipped"), result.stdout.str()[-5000:]
    data = json.loads((report / "certification.json").read_text())
    assert "image shadowcheck/reference:local" in data["target_version"]
    for behaviour in ("PR-2", "PR-3", "DI-5", "SN-1"):
        entry = next(b for b in data["behaviours"] if b["id"] == behaviour)
        # -m runs part of the library: what ran passed, the certification says partial
        assert entry["status"] in ("PASS", "PARTIAL"), (behaviour, entry["status"])
        # the library's scenarios: the explored slice names every ID its model judges,
        # and one that no rule of the model decided on is NOT-APPLICABLE there
        library = [s for s in entry["scenarios"] if not s["scenario"].startswith("explore_")]
        assert library and all(s["status"] == "PASS" for s in library), library


ADMIN_SCENARIO = (
    REROUTABLE_DEFAULTS
    + """  settings: {TransientFailureRetryInterval: 1h, ReceiveConnectionInactivityTimeout: 5s}
  timeout: 90s
scenarios:
  - name: admin_adapters
    title: the queue listing, a settings reload and a route change, all inside the container
    behaviours: [TO-1]
    steps:
      - set_settings: {values: {ReceiveConnectionInactivityTimeout: 1s}, result: accepted}
      - session: {via: mbx1, say: ["EHLO client.test"], idle: 3s}
      - sink: {name: mailbox, reply: "451 4.3.0 mailbox busy, try later"}
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - check: {queue: {node: mbx1, queue: active, contains: [m1], within: 5s}}
      - check: {log: {node: mbx1, contains: "DEFERRED", within: 5s}}
      - route: {domain: corp.test, sink: backup}
    expect:
      # the retry interval is an hour: only the flush after the route change delivers it now
      - delivered: {message: m1, to: backup, within: 5s}
      - queue: {node: mbx1, queue: active, absent: [m1], within: 5s}
      # the idle session, before any message: the 1s of the reloaded configuration
      - timing:
          from: {link: client->mbx1, direction: s2c, line: "^250 "}
          to: {link: client->mbx1, closed: server}
          at_least: 1s
          at_most: 1s
          tolerance: 0.5s
"""
)


@pytest.mark.usefixtures("images")
@pytest.mark.parametrize(
    ("description", "deferred", "main_cf", "timeout_line"),
    [
        ("postfix.yaml", "status=deferred", "etc/postfix/main.cf", "smtpd_timeout = 1s"),
        # Exim logs only to files (logs: in the description): the log check reads them
        ("exim.yaml", "== alice@corp.test .* defer", "etc/exim4/exim4.conf",
         "smtp_receive_timeout = 1s"),
    ],
    ids=["postfix", "exim"],
)  # fmt: skip
def test_admin_adapters_list_the_queue_reload_settings_and_reroute(
    engine: Any,
    tmp_path: Path,
    tidy: list[str],
    description: str,
    deferred: str,
    main_cf: str,
    timeout_line: str,
) -> None:
    (scenario,) = load_scenarios(tmp_path, ADMIN_SCENARIO.replace("DEFERRED", deferred))
    target = new_target(description, tidy)
    assert "control_api" not in target.capabilities

    verdict = run_scenario(scenario, target, workdir=tmp_path / "work")
    assert verdict.status == Status.PASS, (verdict.reason, verdict.failures, verdict.diagnostics)
    # the queue looks were answered inside the container, not skipped as UNTESTABLE
    assert all(c.status == Status.PASS for c in verdict.checks), verdict.checks
    observed = [c.observed for c in verdict.checks if c.name == "active queue of mbx1"]
    assert observed == ["it holds 1: m1", "it is empty"]
    config = (tmp_path / "work" / "mbx1" / "files" / main_cf).read_text()
    assert timeout_line in config and "127.0.0.1" in config
    assert leftovers(engine, tidy[-1]) == []


@pytest.mark.usefixtures("images")
def test_a_users_own_recipe_is_built_from_the_base_and_cached_by_hash(
    engine: Any, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from pytest_shadowcheck.targets.docker.images import recipe_hash, user_recipe
    from pytest_shadowcheck.targets.docker.images.__main__ import main

    recipe = tmp_path / "mymta"
    recipe.mkdir()
    (recipe / "Dockerfile").write_text(
        "ARG BASE\nFROM ${BASE}\nRUN echo 'mymta 0.1' > /etc/mymta-version\n"
    )
    tag = f"shadowcheck-test/mymta:{uuid.uuid4().hex[:8]}"
    build = ["build", "--recipe", str(recipe), "--tag", tag]
    try:
        assert main(build) == 0
        assert capsys.readouterr().out.strip() == f"{tag}: built"
        assert main(build) == 0  # same files: the image is not built again
        assert capsys.readouterr().out.strip() == f"{tag}: cached"
        labels = engine.images.get(tag).labels
        assert labels["org.shadowcheck.recipe-hash"] == recipe_hash(user_recipe(recipe, tag))
        description = write_description(
            tmp_path,
            f"name: mymta\nimage: {tag}\nrecipe: mymta\n"
            "version: {command: [cat, /etc/mymta-version]}\n",
        )
        assert DockerTarget(str(description)).version().startswith("mymta 0.1")
        # a changed recipe: the target refuses the image it no longer describes
        (recipe / "Dockerfile").write_text((recipe / "Dockerfile").read_text() + "# changed\n")
        with pytest.raises(TargetError, match=rf"build --recipe {recipe} --tag {tag}"):
            DockerTarget(str(description))
    finally:
        with contextlib.suppress(Exception):
            engine.images.remove(tag, force=True)


EXIM_SCENARIO = """
defaults:
  topology: two-node-dag
  settings: {TransientFailureRetryInterval: 1s}
  timeout: 90s
scenarios:
  - name: exim_keeps_a_message_across_kill_and_restart
    title: two Exim daemons side by side; a deferred message survives kill -9 and a restart
    behaviours: [PR-3]
    steps:
      - sink: {name: mailbox, reply: "451 4.3.0 mailbox busy, try later"}
      - send: {id: m1, via: mbx1, to: [alice@corp.test]}
      - check: {queue: {node: mbx1, queue: active, contains: [m1], within: 5s}}
      - kill: mbx1
      - restart: mbx1
      - sink: {name: mailbox, reply: accept}
    expect:
      - reply: {message: m1, code: 250}
      - delivered: {message: m1, to: mailbox, by: mbx1, within: 20s}
      - log: {node: mbx2, contains: "daemon started"}
"""


@pytest.mark.usefixtures("images")
def test_exim_keeps_an_acknowledged_message_across_kill_and_restart(
    engine: Any, tmp_path: Path, tidy: list[str]
) -> None:
    (scenario,) = load_scenarios(tmp_path, EXIM_SCENARIO)
    target = new_target("exim.yaml", tidy)
    assert target.version().startswith("Exim version 4.96")

    verdict = run_scenario(scenario, target, workdir=tmp_path / "work")
    assert verdict.status == Status.PASS, (verdict.failures, verdict.diagnostics)
    # Exim logs only to files: the target kept them with the containers' output
    log = (tmp_path / "work" / "mbx1.log").read_text()
    assert "--- /var/log/exim4/mainlog in container " in log
    assert "== alice@corp.test" in log and "=> alice@corp.test" in log  # deferred, delivered
    assert log.count("--- container ") == 2  # killed container, then the restarted one
    # two daemons on one host network: each has a notifier socket of its own
    for node in ("mbx1", "mbx2"):
        assert "notifier" not in (tmp_path / "work" / f"{node}.log").read_text()
    assert leftovers(engine, tidy[-1]) == []


@pytest.mark.usefixtures("images")
def test_a_neutral_listing_needs_no_headers_command_but_names_every_message(
    engine: Any,
) -> None:
    from pytest_shadowcheck.targets.docker.admin import QueueAdapter, list_queue

    # the listing command really runs in a container (docker exec), as an MTA's would
    listing = (
        '{"id": "A1", "recipients": ["alice@corp.test"], "message_id": "<m1.r@shadowcheck.test>"}\n'
        '{"id": "B2", "recipients": ["bob@corp.test"], "state": "deferred"}\n'
    )
    container = engine.containers.run(
        POSTFIX, ["sleep", "120"], network_mode="none", detach=True,
        environment={"LISTING": listing},
    )  # fmt: skip
    try:
        printed = ("sh", "-c", 'printf %s "$LISTING"')
        only_first = ("sh", "-c", 'printf %s "$LISTING" | head -1')
        # an entry that carries its Message-ID needs no headers command
        assert list_queue(container, QueueAdapter(only_first, "json-lines")) == [
            {"id": "A1", "recipients": ["alice@corp.test"], "message_id": "<m1.r@shadowcheck.test>"}
        ]
        # one that does not, with no headers command, would read as lost: an error
        with pytest.raises(RuntimeError, match="lists B2 without message_id"):
            list_queue(container, QueueAdapter(printed, "json-lines"))
        # with one, only the entry without message_id is looked at ({id} = B2)
        headers = ("sh", "-c", 'test "$1" = B2 && echo "Message-ID: <m2.r@shadowcheck.test>"',
                   "sh", "{id}")  # fmt: skip
        entries = list_queue(container, QueueAdapter(printed, "json-lines", headers))
        assert [(e["id"], e["message_id"]) for e in entries] == [
            ("A1", "<m1.r@shadowcheck.test>"), ("B2", "<m2.r@shadowcheck.test>")
        ]  # fmt: skip
        # a malformed line is named
        broken = ("sh", "-c", 'printf %s "$LISTING"; echo "{oops"')
        with pytest.raises(RuntimeError, match="cannot read json-lines from sh: line 3 is not"):
            list_queue(container, QueueAdapter(broken, "json-lines", headers))
    finally:
        container.remove(force=True)


def test_an_empty_version_is_an_error_naming_the_description_line(
    engine: Any, tmp_path: Path, pytester: pytest.Pytester
) -> None:
    path = write_description(
        tmp_path,
        f"""
        name: silent
        image: {POSTFIX}
        version: {{command: [postconf, -h, no_such_parameter_here]}}
        """,
    )
    # postconf prints nothing for an unknown parameter (a warning on stderr only)
    with pytest.raises(TargetError) as caught:
        DockerTarget(str(path)).version()
    message = str(caught.value)
    assert message.startswith(f"{path}:3: the version command (postconf -h "), message
    assert "printed nothing" in message

    # through pytest: a usage error before any scenario runs, not a blank header
    result = pytester.runpytest_subprocess(
        "--shadowcheck", f"--shadowcheck-target=docker:{path}", "-p", "no:cacheprovider"
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([f"*{path}:3: the version command*printed nothing*"])
