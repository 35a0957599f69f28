"""The reference's virtual clock: a wait's deadline is the moment it was asked for."""

from __future__ import annotations

import asyncio
from pathlib import Path

from reference_impl.clock import VirtualClock
from reference_impl.config import parse_cluster
from reference_impl.node import Node


def test_a_wait_ends_at_its_deadline_even_when_the_clock_moved_before_it_ran() -> None:
    """A shadow's heartbeat wait (DI-2) asked for at t=0 with 10 s left must end once
    the clock passes 10 s, also when the harness advanced the clock before the wait's
    own task first ran (CI, loaded: the heartbeat never came)."""

    async def scenario() -> bool:
        clock = VirtualClock(0.0)
        changed = asyncio.Event()
        wait = asyncio.ensure_future(clock.wait(changed, 10.0))
        await asyncio.sleep(0)  # the wait has scheduled its timer's task, not run it
        clock.advance(15.0)
        return await asyncio.wait_for(wait, timeout=2.0)

    assert asyncio.run(scenario()) is False  # it timed out on the clock, not on the event


def test_a_wait_still_ends_on_its_event() -> None:
    async def scenario() -> bool:
        clock = VirtualClock(0.0)
        changed = asyncio.Event()
        wait = asyncio.ensure_future(clock.wait(changed, 10.0))
        await asyncio.sleep(0)
        changed.set()
        return await asyncio.wait_for(wait, timeout=2.0)

    assert asyncio.run(scenario()) is True


def test_a_shadow_s_first_heartbeat_is_due_one_beat_after_its_copy_arrived(
    tmp_path: Path,
) -> None:
    """DI-2: the shadow asks its primary at least once every ShadowHeartbeatFrequency
    from when it holds a copy. A worker's note of the copy can reach the node's owner
    late (a loaded machine: after the harness advanced the clock); the first heartbeat is
    still due one beat after the copy arrived, not one beat after the note."""

    async def scenario() -> int:
        asked = asyncio.Event()

        async def primary(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            asked.set()  # mbx2 opened a session to mbx1: its heartbeat
            writer.close()

        server = await asyncio.start_server(primary, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        cluster = parse_cluster(
            {
                "boundary": "dag1",
                "secret": "s3cret",
                "clock": {"mode": "virtual"},
                "settings": {"ShadowHeartbeatFrequency": 10},
                "nodes": {
                    "mbx1": {"site": "a", "dag": "dag1"},
                    "mbx2": {"site": "a", "dag": "dag1", "peers": {"mbx1": f"127.0.0.1:{port}"}},
                },
            }
        )
        node = Node(cluster, "mbx2", tmp_path / "mbx2")
        arrived = node.clock.now()
        node.db.add_shadow(
            {
                "primary_node": "mbx1",
                "primary_db_id": "db1",
                "primary_msg": "m1",
                "sender": "sender@ext.test",
                "recipients": ["alice@corp.test"],
                "next_hops": ["corp.test"],
                "content": b"Subject: m1\r\n\r\nhello\r\n",
                "received_at": arrived,
            }
        )
        assert isinstance(node.clock, VirtualClock)
        node.clock.advance(15.0)  # the harness moved the clock before the note came
        node.shadowing.ensure_heartbeat("mbx1")
        try:
            await asyncio.wait_for(asked.wait(), timeout=5.0)
            return 1
        except TimeoutError:
            return 0
        finally:
            for task in list(node._tasks):
                task.cancel()
            server.close()
            node.db.close()

    assert asyncio.run(scenario()) == 1, "mbx2 never asked mbx1 within 5 s (real)"
