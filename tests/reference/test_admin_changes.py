"""An admin's changes through the control API outlive the node's process: a node started
again on the same data directory, or on a new one beside it (a wipe), runs with them."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
from clusterkit import Cluster, Sink, two_nodes, wait_until

from reference_impl.config import ConfigError, parse_cluster
from reference_impl.node import Node

CLUSTER = {
    "boundary": "dag1",
    "secret": "s3cret",
    "nodes": {"mbx1": {"site": "a", "dag": "dag1"}},
    "next_hops": {"corp.test": "127.0.0.1:2525"},
    "settings": {"SafetyNetHoldTime": 600},
}


def _node(data: Path) -> Node:
    return Node(parse_cluster(CLUSTER), "mbx1", data)


def test_settings_and_routes_changed_live_survive_a_restart_and_a_wipe(tmp_path: Path) -> None:
    data = tmp_path / "mbx1"
    node = _node(data)
    node.update_settings({"SafetyNetHoldTime": 86400})
    node.admin.record_routes({"other.test": "127.0.0.1:2600", "corp.test": None})
    node.db.close()

    again = _node(data)
    assert again.settings.SafetyNetHoldTime == 86400
    assert "other.test" in again.routes and "corp.test" not in again.routes
    again.db.close()

    shutil.rmtree(data)  # a wipe: the queue database goes, the admin's configuration stays
    wiped = _node(data)
    assert wiped.settings.SafetyNetHoldTime == 86400
    wiped.db.close()
    assert (tmp_path / "mbx1.admin.json").exists()


def test_a_change_refused_is_not_kept(tmp_path: Path) -> None:
    data = tmp_path / "mbx1"
    node = _node(data)
    with pytest.raises(ValueError):
        node.update_settings({"SafetyNetHoldTime": "soon"})
    node.db.close()
    assert _node(data).settings.SafetyNetHoldTime == 600


def test_an_unreadable_file_of_changes_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "mbx1.admin.json").write_text("{not json")
    with pytest.raises(ConfigError, match=r"mbx1\.admin\.json: the node's saved admin changes"):
        _node(tmp_path / "mbx1")


def test_a_route_change_with_one_bad_hop_changes_no_route(
    cluster_factory: Callable[..., Cluster], sink: Sink
) -> None:
    # a real node's control API: one good hop and one unreadable in one request
    cluster = cluster_factory(two_nodes(sink))
    answer = cluster.api(
        "mbx1", "PUT", "/topology/next_hops",
        {"corp.test": None, "new.test": "127.0.0.1:2600", "bad.test": {"kind": "nowhere"}},
    )  # fmt: skip
    assert answer["status"] == 400 and "bad.test" in json.dumps(answer)
    # nothing of it was applied: corp.test still routed, new.test not, nothing recorded
    routes = cluster.api("mbx1", "PUT", "/topology/next_hops", {})
    assert set(routes) == {"corp.test"}
    code, _, message_id = cluster.send("mbx1", ["alice@corp.test"])
    assert code == 250
    wait_until(lambda: sink.of(message_id))
