"""What the docker target leaves on the engine, and how it is cleaned up: every
container, volume and lazy filesystem carries its owner (``host:pid:start``); an exiting
run removes its own (atexit), and a later run removes those of an owner that is gone
(a crashed or SIGKILLed run), never a live one's.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import socket
from pathlib import Path
from typing import Any

from pytest_shadowcheck.targets.docker.queue_disk import reap_mounts
from pytest_shadowcheck.targets.docker.support import docker_client
from pytest_shadowcheck.targets.lazy_storage import LazyStorage

__all__ = [
    "LABEL_NODE",
    "LABEL_OWNER",
    "LABEL_RUN",
    "LABEL_TARGET",
    "LIVE_CONTAINERS",
    "LIVE_STORAGE",
    "LIVE_VOLUMES",
    "owner_label",
    "reap_leftovers",
]

LABEL_OWNER = "org.shadowcheck.owner"
LABEL_RUN = "org.shadowcheck.run"
LABEL_NODE = "org.shadowcheck.node"
LABEL_TARGET = "org.shadowcheck.target"
#: (container ids, volume names, lazy filesystems) this process created and has not
#: removed yet
LIVE_CONTAINERS: set[str] = set()
LIVE_VOLUMES: set[str] = set()
LIVE_STORAGE: set[LazyStorage] = set()


# --------------------------------------------------------------------------- ownership


def _start_time(pid: int) -> str | None:
    """The process's start time in clock ticks since boot (tells a reused pid apart)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return stat.rpartition(")")[2].split()[19]


def owner_label(pid: int | None = None) -> str:
    """``host:pid:start`` of the process that owns a container."""
    pid = pid or os.getpid()
    return f"{socket.gethostname()}:{pid}:{_start_time(pid) or '?'}"


def _owner_alive(label: str) -> bool:
    host, _, rest = label.partition(":")
    pid, _, start = rest.partition(":")
    if host != socket.gethostname() or not pid.isdigit():
        return True  # another machine's engine user: not ours to judge
    if start == "?":  # no /proc when it was labelled: the pid alone must do
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except PermissionError:
            return True
        return True
    return _start_time(int(pid)) == start


def reap_leftovers(client: Any) -> list[str]:
    """Remove containers and volumes labelled by a process of this host that is gone
    (a crashed or SIGKILLed run), and detach the lazy filesystems such a process left
    mounted; return their names. Live owners are left alone."""
    from docker.errors import APIError, NotFound

    removed = []
    # ignore_removed: a short-lived container of a live run (a version command, run with
    # remove=True) may go between the listing and its inspection
    listed = client.containers.list(all=True, filters={"label": LABEL_OWNER}, ignore_removed=True)
    for container in listed:
        if _owner_alive(container.labels.get(LABEL_OWNER, "")):
            continue
        with contextlib.suppress(NotFound, APIError):
            container.remove(force=True)
            removed.append(container.name)
    for volume in client.volumes.list(filters={"label": LABEL_OWNER}):
        labels = volume.attrs.get("Labels") or {}
        if _owner_alive(labels.get(LABEL_OWNER, "")):
            continue
        with contextlib.suppress(NotFound, APIError):
            volume.remove(force=True)
            removed.append(volume.name)
    # after the containers: none of them holds a bind mount of these any more
    removed += reap_mounts(_owner_alive)
    return removed


def _remove_live() -> None:
    """atexit: remove whatever this process still owns (a run that did not stop)."""
    if not (LIVE_CONTAINERS or LIVE_VOLUMES or LIVE_STORAGE):
        return
    with contextlib.suppress(Exception):
        client = docker_client()
        for cid in list(LIVE_CONTAINERS):
            with contextlib.suppress(Exception):
                client.containers.get(cid).remove(force=True)
        for name in list(LIVE_VOLUMES):
            with contextlib.suppress(Exception):
                client.volumes.get(name).remove(force=True)
    for storage in list(LIVE_STORAGE):
        for mount in storage.mounts.values():
            with contextlib.suppress(Exception):
                mount.stop()
    LIVE_CONTAINERS.clear()
    LIVE_VOLUMES.clear()
    LIVE_STORAGE.clear()


atexit.register(_remove_live)
