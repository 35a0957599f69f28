"""Power cuts on the docker target: each node's queue directory is a lazy filesystem on
the host, bind-mounted into its containers (docs/targets.md, "Power cut and disk full").

Postfix fsyncs a queue file before it answers 250, so a message it acknowledged is still
queued after a power cut and a restart. The negative control is the same Postfix with
every fsync made a no-op by eatmydata (targets/postfix-eatmydata.yaml): it must lose the
message at the power cut, or the power cut cuts nothing. Real containers, real FUSE.
"""

from __future__ import annotations

import asyncio
import os
import re
import smtplib
import socket
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from dockerkit import TARGETS, leftovers, load_scenarios, new_target, write_description

from pytest_shadowcheck.storage.mount import LazyMount, fuse_unavailable, mounted_at, unmount
from pytest_shadowcheck.targets.base import ClusterPlan, TargetError
from pytest_shadowcheck.targets.docker.admin import run_in
from pytest_shadowcheck.targets.docker.description import load_description
from pytest_shadowcheck.targets.docker.housekeeping import _owner_alive
from pytest_shadowcheck.targets.docker.queue_disk import owner_file, reap_mounts
from pytest_shadowcheck.targets.docker.target import DockerTarget

pytestmark = [
    pytest.mark.docker,
    pytest.mark.skipif(
        fuse_unavailable() is not None and not os.environ.get("SHADOWCHECK_REQUIRE_FUSE"),
        reason=f"no FUSE here: {fuse_unavailable()}",
    ),
]

ONE_NODE = """
defaults: {topology: single-node, timeout: 60s}
scenarios:
  - name: one_node
    title: the topology of the power-cut tests
    behaviours: [PR-3]
    steps: [{wait: 1s}]
"""

MESSAGE = b"From: a@ext.test\r\nTo: alice@corp.test\r\nMessage-ID: <power-1@test>\r\n\r\nkept?\r\n"


@pytest.fixture(scope="module")
def postfix_images(engine: Any) -> dict[str, str]:
    """Postfix and its eatmydata variant, built unless up to date."""
    from pytest_shadowcheck.targets.docker.images import build

    return build(["postfix", "postfix-eatmydata"], client=engine, log=lambda _: None)


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port bound but never listening: every connection is refused, and no node can
    be given it while the test runs."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        yield sock.getsockname()[1]


def lazy_plan(tmp_path: Path, closed: int) -> ClusterPlan:
    """One node whose only next hop refuses every connection: what it accepts stays
    queued (deferred), on a lazy filesystem."""
    (scenario,) = load_scenarios(tmp_path, ONE_NODE, "one.yaml")
    return ClusterPlan(
        topology=scenario.topology,
        settings={"TransientFailureRetryInterval": 3600},
        peers={"mbx1": {}},
        next_hops={"mbx1": {"corp.test": {"address": f"127.0.0.1:{closed}", "kind": "mailbox"}}},
        workdir=tmp_path / "work",
        lazy_storage=True,
    )


def send(address: tuple[str, int]) -> tuple[int, str]:
    """The first refusal (MAIL, RCPT) or the reply to the message."""
    with smtplib.SMTP(*address, timeout=30) as client:
        client.ehlo("client.test")
        for command in (lambda: client.mail("a@ext.test"), lambda: client.rcpt("alice@corp.test")):
            code, text = command()
            if code >= 400:
                return code, text.decode()
        code, text = client.data(MESSAGE)
    return code, text.decode()


async def queued(target: DockerTarget) -> list[str]:
    """Message-IDs queued on mbx1 (the description's queue listing), once each message
    has been tried and deferred: postqueue reads one queue directory after the other,
    and lists twice a message that qmgr moves from active to deferred meanwhile."""
    listing: Any = []
    for _ in range(100):
        listing = await target.control("mbx1", "GET", "/queues/active")
        if all(entry["state"] == "deferred" for entry in listing):
            return [str(entry["message_id"]) for entry in listing]
        await asyncio.sleep(0.1)
    raise AssertionError(f"not all deferred: {listing}")


def on_one_node(
    target: DockerTarget, plan: ClusterPlan, body: Callable[[], Awaitable[dict[str, Any]]]
) -> dict[str, Any]:
    """Start the one-node cluster, run ``body``, stop; the mount must be gone after."""

    async def run() -> dict[str, Any]:
        await target.start(plan)
        try:
            return await body()
        finally:
            await target.stop()

    found = asyncio.run(run())
    assert mounted_at(plan.workdir / "mbx1-queue") is None
    return found


def accept_then_cut_power(target: DockerTarget, plan: ClusterPlan) -> dict[str, Any]:
    """A message answered 250 and queued; the node's power cut; the node restarted on
    what its disk kept. What each step saw."""

    async def body() -> dict[str, Any]:
        container = target.containers["mbx1"]
        mounts = run_in(container, ("cat", "/proc/self/mountinfo"))[1]
        code, reply = await asyncio.to_thread(send, target.handle("mbx1").smtp)
        assert code == 250, reply
        queue_id = re.search(r"queued as (\w+)", reply)
        assert queue_id, reply
        before = await queued(target)
        cut = await target.power_cut("mbx1")
        events = target.storage_events("mbx1")
        await target.restart("mbx1")
        after = await queued(target)
        return {
            "id": queue_id.group(1),
            "mounts": mounts,
            "before": before,
            "cut": cut,
            "events": events,
            "after": after,
        }

    return on_one_node(target, plan, body)


@pytest.mark.usefixtures("postfix_images")
def test_postfix_keeps_a_message_it_acknowledged_across_a_power_cut(
    engine: Any, tmp_path: Path, tidy: list[str], closed_port: int
) -> None:
    target = new_target("postfix.yaml", tidy)
    assert {"power_cut", "disk_faults"} <= target.capabilities
    plan = lazy_plan(tmp_path, closed_port)
    seen = accept_then_cut_power(target, plan)

    # inside the container the spool is the host's lazy filesystem
    assert " /var/spool/postfix " in seen["mounts"] and "shadowcheck-lazyfs" in seen["mounts"]
    assert seen["before"] == ["<power-1@test>"]
    # cleanup fsynced the queue file before the 250: nothing of it was held
    synced = [e["file"] for e in seen["events"] if e["kind"] == "sync"]
    assert f"incoming/{seen['id']}" in synced, seen["events"]
    assert not [f for f in seen["cut"]["lost"] if f["file"].endswith(seen["id"])], seen["cut"]
    assert seen["after"] == ["<power-1@test>"], seen
    # the disk as the reboot found it: Postfix's own files, Postfix's own owners
    backing = plan.workdir / ".disk" / "mbx1"
    (queue_file,) = [p for p in backing.rglob(seen["id"]) if p.parent.parent.name == "deferred"]
    assert (queue_file.stat().st_uid, queue_file.stat().st_size > 0) == (100, True)
    assert leftovers(engine, tidy[-1]) == []


@pytest.mark.usefixtures("postfix_images")
def test_postfix_without_fsync_loses_the_message_at_a_power_cut(
    engine: Any, tmp_path: Path, tidy: list[str], closed_port: int
) -> None:
    """The negative control: eatmydata makes Postfix's fsync a no-op."""
    target = new_target("postfix-eatmydata.yaml", tidy)
    plan = lazy_plan(tmp_path, closed_port)
    seen = accept_then_cut_power(target, plan)

    assert " /var/spool/postfix " in seen["mounts"] and "shadowcheck-lazyfs" in seen["mounts"]
    assert seen["before"] == ["<power-1@test>"]  # accepted, queued, listed...
    assert not [e for e in seen["events"] if e["kind"] == "sync"], seen["events"]
    lost = {f["file"] for f in seen["cut"]["lost"]}
    assert [f for f in lost if f.endswith(f"/{seen['id']}")], seen["cut"]
    assert seen["after"] == [], seen  # ...and gone with the power
    # names reach the disk at once (as on ext4): the queue file is there, its data not
    (queue_file,) = [p for p in plan.workdir.glob(f".disk/mbx1/deferred/*/{seen['id']}")]
    assert queue_file.stat().st_size == 0
    assert leftovers(engine, tidy[-1]) == []


@pytest.mark.usefixtures("postfix_images")
def test_a_full_disk_makes_postfix_refuse_mail_and_a_wipe_leaves_a_working_spool(
    engine: Any, tmp_path: Path, tidy: list[str], closed_port: int
) -> None:
    target = new_target("postfix.yaml", tidy)

    async def body() -> dict[str, Any]:
        address = target.handle("mbx1").smtp
        await target.disk("mbx1", "full", 0)
        refused = await asyncio.to_thread(send, address)
        await target.disk("mbx1", None)
        code, _ = await asyncio.to_thread(send, address)
        kept = await queued(target)
        await target.wipe("mbx1")
        check = run_in(target.containers["mbx1"], ("postfix", "check"))
        wiped = await queued(target)
        code_after, _ = await asyncio.to_thread(send, address)
        # a frozen node loses power too, and comes back
        await target.pause("mbx1")
        await target.power_cut("mbx1")
        target.containers["mbx1"].reload()
        frozen = target.containers["mbx1"].attrs["State"]
        await target.restart("mbx1")
        return {
            "refused": refused,
            "accepted": (code, code_after),
            "kept": kept,
            "check": check,
            "wiped": wiped,
            "events": [e["kind"] for e in target.storage_events("mbx1")],
            "frozen": (frozen["Status"], frozen["ExitCode"]),
            "back": await queued(target),
        }

    seen = on_one_node(target, lazy_plan(tmp_path, closed_port), body)
    # Postfix looks at the free space before it takes a message (queue_minfree)
    assert seen["refused"][0] == 452 and "Insufficient system storage" in seen["refused"][1]
    assert seen["accepted"] == (250, 250)
    assert seen["kept"] == ["<power-1@test>"] and seen["wiped"] == []
    assert seen["check"] == (0, ""), seen["check"]  # owners and modes as the image has them
    assert "disk" in seen["events"]
    assert seen["frozen"] == ("exited", 137) and seen["back"] == ["<power-1@test>"]
    assert leftovers(engine, tidy[-1]) == []


def test_the_eatmydata_description_is_postfix_but_for_eatmydata() -> None:
    """The negative control differs from targets/postfix.yaml only where it says so."""
    postfix = load_description(str(TARGETS / "postfix.yaml"))
    control = load_description(str(TARGETS / "postfix-eatmydata.yaml"))
    assert control.image == "shadowcheck/postfix-eatmydata:3.7"
    assert control.environment == {"LD_PRELOAD": "/usr/local/lib/libeatmydata.so"}
    assert (control.command, control.admin, control.ready, control.queue_dir) == (
        postfix.command,
        postfix.admin,
        postfix.ready,
        postfix.queue_dir,
    )
    ours = {f.path: f.source for f in postfix.files}
    theirs = {f.path: f.source for f in control.files}
    assert ours.keys() == theirs.keys()
    for path, source in theirs.items():
        lines = source.splitlines()
        for i, line in enumerate(lines):
            if "eatmydata" in line:
                lines[i : i + 2] = [""] * 2  # the marked comment and the line below it
        assert [x for x in lines if x] == ours[path].splitlines(), path
    main_cf = next(f.source for f in control.files if f.path == "/etc/postfix/main.cf")
    assert re.search(r"^import_environment = .* LD_PRELOAD$", main_cf, re.M)


@pytest.mark.usefixtures("postfix_images")
def test_a_description_without_queue_dir_says_why_it_cannot_cut_power(
    engine: Any, tmp_path: Path, closed_port: int
) -> None:
    path = write_description(tmp_path, "name: noqueue\nimage: shadowcheck/postfix:3.7\n")
    target = DockerTarget(str(path))
    assert "power_cut" not in target.capabilities
    why = target.capability_unavailable("power_cut")
    assert why is not None and "names no queue_dir" in why
    plan = lazy_plan(tmp_path, closed_port)
    with pytest.raises(TargetError, match="cannot cut power"):
        asyncio.run(target.start(plan))
    assert mounted_at(plan.workdir / "mbx1-queue") is None


@pytest.mark.usefixtures("postfix_images")
def test_a_restart_on_a_queue_the_host_no_longer_mounts_is_refused_saying_which_side(
    engine: Any, tmp_path: Path, tidy: list[str], closed_port: int
) -> None:
    """A node must never run on a queue directory a power cut cannot cut: a restart
    that finds the lazy filesystem gone is refused, naming what the container saw and
    what the host has, so that the run says INCONCLUSIVE and why."""
    target = new_target("postfix.yaml", tidy)
    plan = lazy_plan(tmp_path, closed_port)

    async def body() -> dict[str, Any]:
        queue = plan.workdir / "mbx1-queue"
        assert unmount(queue)  # the host loses the mount (as if someone detached it)
        with pytest.raises(TargetError) as refused:
            await target.restart("mbx1")
        return {"message": str(refused.value)}

    message = on_one_node(target, plan, body)["message"]
    assert "node mbx1: /var/spool/postfix in the container is " in message, message
    assert "not the lazy filesystem mounted on the host" in message, message
    assert f"the host has no mount at {plan.workdir / 'mbx1-queue'}" in message, message
    assert leftovers(engine, tidy[-1]) == []


def test_the_reaper_detaches_the_mounts_of_a_dead_owner_only(tmp_path: Path) -> None:
    mounts = [LazyMount(tmp_path / f"disk{i}", tmp_path / f"mbx{i}-queue") for i in (1, 2)]
    dead, live = mounts
    try:
        for mount in mounts:
            mount.start()
        # a pid that cannot exist (pid_max is at most 2**22)
        owner_file(dead.mountpoint).write_text(f"{socket.gethostname()}:99999999:1\n")
        owner_file(live.mountpoint).write_text(f"{socket.gethostname()}:{os.getpid()}:?\n")
        assert reap_mounts(_owner_alive) == [str(dead.mountpoint)]
        assert mounted_at(dead.mountpoint) is None
        assert mounted_at(live.mountpoint) is not None
    finally:
        for mount in mounts:
            mount.stop()
