"""The lazy filesystem on a real FUSE mount: what a power cut keeps and loses, names held
until their directory is fsynced, a full and a failing disk, and SQLite on top."""

from __future__ import annotations

import asyncio
import errno
import itertools
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from pytest_shadowcheck.errors import TargetError
from pytest_shadowcheck.storage.mount import (
    LazyMount,
    fuse_unavailable,
    lazy_mounts,
    mounted_at,
    sweep_stale_controls,
)
from pytest_shadowcheck.targets.lazy_storage import LazyStorage

pytestmark = pytest.mark.skipif(
    fuse_unavailable() is not None and not os.environ.get("SHADOWCHECK_REQUIRE_FUSE"),
    reason=f"no FUSE here: {fuse_unavailable()}",
)


def mounted(tmp_path: Path, **options: object) -> Iterator[LazyMount]:
    mount = LazyMount(tmp_path / "disk", tmp_path / "mnt", **options)  # type: ignore[arg-type]
    mount.start()
    try:
        yield mount
    finally:
        mount.stop()


@pytest.fixture
def lazy(tmp_path: Path) -> Iterator[LazyMount]:
    yield from mounted(tmp_path, writeback=0)


@pytest.fixture
def strict(tmp_path: Path) -> Iterator[LazyMount]:
    yield from mounted(tmp_path, writeback=0, hold_names=True)


def write(path: Path, data: bytes, *, sync: bool, mode: str = "wb") -> None:
    with open(path, mode) as f:
        f.write(data)
        f.flush()
        if sync:
            os.fsync(f.fileno())


def test_a_synced_write_survives_a_power_cut_and_an_unsynced_one_is_gone(lazy: LazyMount) -> None:
    m = lazy.mountpoint
    write(m / "kept", b"queued and fsynced", sync=True)
    write(m / "kept", b"; appended, never fsynced", sync=False, mode="ab")
    write(m / "lost", b"written, closed, never fsynced", sync=False)
    assert (m / "kept").read_bytes() == b"queued and fsynced; appended, never fsynced"
    assert (m / "lost").stat().st_size == 30

    answer = lazy.power_cut()

    assert (m / "kept").read_bytes() == b"queued and fsynced"
    # names go through at once: the file is there, empty, as after a real crash
    assert (m / "lost").read_bytes() == b""
    assert sorted((f["file"], f["bytes"]) for f in answer["lost"]) == [("kept", 25), ("lost", 30)]
    kinds = [(e["kind"], e.get("file"), e.get("bytes")) for e in lazy.events()]
    assert kinds[0] == ("sync", "kept", 18)
    assert kinds[-1][0] == "power_cut"


def test_o_sync_writes_are_durable_when_the_write_returns(lazy: LazyMount) -> None:
    path = lazy.mountpoint / "journal"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_DSYNC, 0o644)
    try:
        os.write(fd, b"record 1\n")
    finally:
        os.close(fd)
    lazy.power_cut()
    assert path.read_bytes() == b"record 1\n"


def test_truncation_and_overwrites_read_back_and_vanish_together(lazy: LazyMount) -> None:
    path = lazy.mountpoint / "f"
    write(path, b"0123456789", sync=True)
    with open(path, "r+b") as f:
        f.truncate(4)
        f.seek(8)
        f.write(b"XY")
    assert path.read_bytes() == b"0123\0\0\0\0XY"
    lazy.power_cut()
    assert path.read_bytes() == b"0123456789"


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def test_a_rename_without_a_directory_fsync_is_undone_with_hold_names(strict: LazyMount) -> None:
    m = strict.mountpoint
    (m / "incoming").mkdir()
    (m / "active").mkdir()
    fsync_dir(m)
    write(m / "incoming" / "q1", b"message one", sync=True)
    write(m / "incoming" / "q2", b"message two", sync=True)
    fsync_dir(m / "incoming")
    os.rename(m / "incoming" / "q1", m / "active" / "q1")
    fsync_dir(m / "incoming")
    fsync_dir(m / "active")  # q1's move is durable
    os.rename(m / "incoming" / "q2", m / "active" / "q2")  # q2's is not

    answer = strict.power_cut()

    assert os.listdir(m / "active") == ["q1"]
    assert os.listdir(m / "incoming") == ["q2"]
    assert (m / "incoming" / "q2").read_bytes() == b"message two"
    assert answer["undone"] == ["incoming/q2 renamed to active/q2: back"]


def test_a_file_never_made_durable_by_name_is_gone_with_hold_names(strict: LazyMount) -> None:
    write(strict.mountpoint / "new", b"fsynced data, unsynced name", sync=True)
    strict.power_cut()
    assert os.listdir(strict.mountpoint) == []


def test_names_go_through_at_once_without_hold_names(lazy: LazyMount) -> None:
    m = lazy.mountpoint
    write(m / "a", b"x", sync=True)
    os.rename(m / "a", m / "b")
    lazy.power_cut()
    assert os.listdir(m) == ["b"]


def test_a_full_disk_refuses_writes_past_its_budget_until_it_frees_up(lazy: LazyMount) -> None:
    path = lazy.mountpoint / "q"
    lazy.disk("full", budget=10)
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        assert os.write(fd, b"0123456789") == 10
        with pytest.raises(OSError) as refused:
            os.write(fd, b"more")
        assert refused.value.errno == errno.ENOSPC
        lazy.disk(None)
        assert os.write(fd, b"more") == 4
    finally:
        os.close(fd)


def test_a_failing_disk_fails_writes_and_fsyncs_with_eio(lazy: LazyMount) -> None:
    path = lazy.mountpoint / "q"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.write(fd, b"held")
        lazy.disk("error")
        with pytest.raises(OSError) as failed:
            os.fsync(fd)
        assert failed.value.errno == errno.EIO
        with pytest.raises(OSError) as failed:
            os.write(fd, b"x")
        assert failed.value.errno == errno.EIO
    finally:
        os.close(fd)


def test_held_data_is_written_back_after_the_writeback_delay(tmp_path: Path) -> None:
    for mount in mounted(tmp_path, writeback=0.5):
        write(mount.mountpoint / "f", b"late but kept", sync=False)
        deadline = time.monotonic() + 10
        events: list[dict[str, object]] = []
        while time.monotonic() < deadline and not events:
            events = [e for e in mount.events() if e["kind"] == "sync"]
            time.sleep(0.1)
        assert events and str(events[0]["why"]).startswith("write-back")
        mount.power_cut()
        assert (mount.mountpoint / "f").read_bytes() == b"late but kept"


@pytest.mark.parametrize(("synchronous", "survives"), [("FULL", True), ("OFF", False)])
def test_sqlite_commits_survive_only_when_sqlite_syncs(
    lazy: LazyMount, synchronous: str, survives: bool
) -> None:
    """The reference MTA's queue is SQLite in WAL mode: a commit is durable when SQLite
    fsyncs its WAL (synchronous=FULL), and lost at a power cut when it does not."""
    db = lazy.mountpoint / "queue.db"
    conn = sqlite3.connect(db, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    conn.execute(f"PRAGMA synchronous={synchronous}")
    conn.execute("CREATE TABLE IF NOT EXISTS q (id TEXT)")
    conn.execute("INSERT INTO q VALUES ('m1')")
    conn.close() if not survives else None
    lazy.power_cut()
    if survives:
        conn.close()
    after = sqlite3.connect(db)
    try:
        rows = after.execute("SELECT id FROM q").fetchall()
    except sqlite3.DatabaseError:
        rows = []
    finally:
        after.close()
    assert (rows == [("m1",)]) is survives


def test_times_inodes_and_owners_are_the_disks_own(lazy: LazyMount, tmp_path: Path) -> None:
    """Postfix schedules a deferred message by its queue file's mtime, names a queue file
    after its inode and checks who owns the queue: the mount shows the real times and
    inode numbers, and what a process creates is its own."""
    m = lazy.mountpoint
    before = time.time()
    write(m / "q", b"x", sync=True)
    assert before - 5 < (m / "q").stat().st_mtime < time.time() + 5
    os.utime(m / "q", (1_000_000_000, 2_000_000_000))
    assert (m / "q").stat().st_atime == 1_000_000_000
    assert (m / "q").stat().st_mtime == 2_000_000_000
    # the disk's inode numbers (libfuse's own node ids change when the kernel forgets)
    assert (m / "q").stat().st_ino == (lazy.backing / "q").stat().st_ino
    if os.geteuid() != 0:
        return  # a user's mount cannot give files away
    (m / "spool").mkdir(mode=0o777)
    maker = (
        "import os; os.setgid(65534); os.setuid(65534); "
        "os.mkdir('spool/d', 0o700); open('spool/f', 'w').close(); os.mkfifo('spool/p', 0o622)"
    )
    subprocess.run([sys.executable, "-c", maker], cwd=m, check=True)
    for name, mode in (("d", 0o700), ("f", 0o644 & ~_umask()), ("p", 0o622 & ~_umask())):
        st = (m / "spool" / name).stat()
        assert (st.st_uid, st.st_gid) == (65534, 65534), name
        assert st.st_mode & 0o7777 == mode, (name, oct(st.st_mode))
        assert (lazy.backing / "spool" / name).stat().st_uid == 65534


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def test_a_mount_left_by_a_crashed_run_neither_blocks_the_next_nor_outlives_its_stop(
    tmp_path: Path,
) -> None:
    crashed = LazyMount(tmp_path / "disk", tmp_path / "mnt", writeback=0)
    crashed.start()
    assert crashed.process is not None
    crashed.process.kill()  # the filesystem's process dies; the kernel keeps the mount
    crashed.process.wait(5)
    assert mounted_at(crashed.mountpoint) == ("fuse", "shadowcheck-lazyfs")
    with pytest.raises(OSError):
        os.listdir(crashed.mountpoint)  # "Transport endpoint is not connected"

    for mount in mounted(tmp_path, writeback=0):  # the same place: the leftover goes first
        write(mount.mountpoint / "f", b"x", sync=True)
        assert os.listdir(mount.mountpoint) == ["f"]
        assert mount.mountpoint in lazy_mounts()
        assert mount.process is not None
        mount.process.kill()
        mount.process.wait(5)
    # stop() unmounted what its dead process left
    assert mounted_at(tmp_path / "mnt") is None
    assert os.listdir(tmp_path / "mnt") == []
    crashed.stop()  # its socket directory too


def test_a_dead_run_s_socket_directory_is_swept_and_a_live_one_kept(tmp_path: Path) -> None:
    """A run killed before it stopped its filesystem leaves the controller's socket
    directory in /tmp; the next mount's start removes it once it is old and unanswered."""
    dead = LazyMount(tmp_path / "d1", tmp_path / "m1", writeback=0)
    dead.start()
    assert dead.process is not None and dead._control_dir is not None
    dead_dir = dead._control_dir
    dead.process.kill()  # the run dies with it: nobody calls stop()
    dead.process.wait(5)
    for mount in mounted(tmp_path / "live", writeback=0):
        assert mount._control_dir is not None
        live_dir = mount._control_dir
        old = time.time() - 3600
        for directory in (dead_dir, live_dir):
            os.utime(directory, (old, old))
        young = Path(tempfile.mkdtemp(prefix="shadowcheck-lazyfs-"))  # a start under way
        try:
            removed = sweep_stale_controls(dead_dir.parent)
            assert dead_dir in removed and not dead_dir.exists()
            assert live_dir.exists() and young.exists()
            assert mount.power_cut()["lost"] == []  # the live one still answers
        finally:
            young.rmdir()
    dead.stop()  # unmounts what the dead process left


def test_an_fsync_through_a_read_only_descriptor_makes_the_file_durable(lazy: LazyMount) -> None:
    """fsync acts on the file, not the descriptor: SQLite's WAL syncer in the reference
    flushes what another descriptor wrote through one opened read-only."""
    path = lazy.mountpoint / "wal"
    write(path, b"frames", sync=False)
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
    lazy.power_cut()
    assert path.read_bytes() == b"frames"


def test_a_mount_point_deeper_than_a_unix_socket_path_still_mounts(tmp_path: Path) -> None:
    """pytest's basetemp under pytester is deep: the controller's socket must not be."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    assert len(str(deep / ".mnt.lazyfs.sock")) > 108
    for mount in mounted(deep, writeback=0):
        write(mount.mountpoint / "f", b"x", sync=True)
        assert mount.power_cut()["lost"] == []


def test_held_data_in_a_moved_directory_is_named_where_it_now_is(lazy: LazyMount) -> None:
    m = lazy.mountpoint
    (m / "incoming" / "a1").mkdir(parents=True)
    (m / "queue").mkdir()
    write(m / "incoming" / "a1" / "message", b"never fsynced", sync=False)
    os.rename(m / "incoming" / "a1", m / "queue" / "a1")
    assert lazy.power_cut()["lost"] == [{"file": "queue/a1/message", "bytes": 13}]


WRITES = 20000
_APPEND_AND_SYNC = """
import os, sys
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_APPEND)
for _ in range(int(sys.argv[2])):
    os.write(fd, b"x" * 512)
    os.fsync(fd)
os.close(fd)
"""


def test_a_file_never_looks_shorter_while_another_process_appends_and_syncs(
    lazy: LazyMount,
) -> None:
    # SQLite's processes share a WAL so: a size read from the backing file while
    # the held data was being synced into it once looked short, the kernel believed
    # it and cut a reader's pread short (SQLITE_IOERR_SHORT_READ in a workers node).
    path = lazy.mountpoint / "wal"
    path.write_bytes(b"")
    writer = subprocess.Popen([sys.executable, "-c", _APPEND_AND_SYNC, str(path), str(WRITES)])
    seen: list[int] = []
    try:
        while writer.poll() is None:
            seen.append(path.stat().st_size)
    finally:
        writer.wait(60)
    assert writer.returncode == 0
    shrank = [(a, b) for a, b in itertools.pairwise(seen) if b < a]
    assert len(seen) > 100, "the reader saw too few sizes to tell"
    assert not shrank, f"the size went down {len(shrank)} times, only appended to: {shrank[:3]}"
    assert path.stat().st_size == WRITES * 512


def test_a_start_that_fails_leaves_no_control_directory_and_says_why(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the control socket's directory deeper than a Unix socket's path takes: the
    # filesystem's process exits at start, naming the reason
    deep = tmp_path / ("t" * 120)
    deep.mkdir()
    monkeypatch.setattr("tempfile.tempdir", str(deep))
    mount = LazyMount(tmp_path / "disk", tmp_path / "mnt")
    with pytest.raises(TargetError, match="exited at start: lazyfs: cannot listen on"):
        mount.start()
    assert mounted_at(mount.mountpoint) is None
    assert list(deep.iterdir()) == []
    # a start that fails before the process: the directory goes too
    (tmp_path / "file").write_text("not a directory")
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path / "again"))
    (tmp_path / "again").mkdir()
    blocked = LazyMount(tmp_path / "file" / "disk", tmp_path / "mnt2")
    with pytest.raises(NotADirectoryError):
        blocked.start()
    assert list((tmp_path / "again").iterdir()) == []


def test_a_mount_cancelled_while_it_starts_is_still_stopped(tmp_path: Path) -> None:
    """-x cancels a scenario wherever it is: a cancellation while a node's filesystem is
    still mounting (its start runs in a thread, which goes on) must leave nothing
    mounted once the storage is stopped, and no filesystem process behind."""
    storage = LazyStorage(tmp_path, writeback=0)
    started: list[LazyMount] = []

    async def cancelled_then_stopped() -> None:
        mounting = asyncio.ensure_future(storage.mount("mbx1"))
        await asyncio.sleep(0.05)  # the filesystem's process is starting, not yet mounted
        assert not mounting.done()
        mounting.cancel()
        with pytest.raises(asyncio.CancelledError):
            await mounting
        started.extend(storage.mounts.values())
        await storage.stop()

    asyncio.run(cancelled_then_stopped())
    assert mounted_at(storage.directory("mbx1")) is None
    assert not [m for m in lazy_mounts() if str(tmp_path) in str(m)]
    (mount,) = started
    assert mount.process is not None and mount.process.poll() is not None
