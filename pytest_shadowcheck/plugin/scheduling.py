"""pytest-xdist's load scheduling, one scenario at a time, in collection order.

xdist's own ``load`` scheduler sends each worker a run of consecutive tests, so the
longest scenarios, sorted first by :mod:`.concurrency`, would all go to the first worker
and run one after another. Here every worker gets one scenario, and the next as it
finishes one: the longest start together, the short ones fill in around them.
An xdist worker runs a test only once it holds the next one (or is told to stop), so
each worker holds two: the one it runs and the one it runs next.
"""

from __future__ import annotations

from xdist.scheduler import LoadScheduling
from xdist.workermanage import WorkerController

__all__ = ["LongestFirstScheduling"]

#: what a worker holds: the scenario it runs and the one it runs next
_HELD = 2


class LongestFirstScheduling(LoadScheduling):
    def schedule(self) -> None:
        assert self.collection_is_completed
        if self.collection is not None:  # type: ignore[has-type]
            for node in self.nodes:
                self.check_schedule(node)
            return
        if not self._check_nodes_have_same_collection():
            self.log("**Different tests collected, aborting run**")
            return
        collection: list[str] = next(iter(self.node2collection.values()))
        self.collection = collection
        self.pending[:] = range(len(collection))
        if not collection:
            return
        # round by round, so that the first scenario of every worker is one of the longest
        for _ in range(_HELD):
            for node in self.nodes:
                self._send_tests(node, 1)
        if not self.pending:
            for node in self.nodes:
                node.shutdown()

    def check_schedule(self, node: WorkerController, duration: float = 0) -> None:
        if node.shutting_down:
            return
        if self.pending:
            if len(self.node2pending[node]) < _HELD:
                self._send_tests(node, _HELD - len(self.node2pending[node]))
        else:
            node.shutdown()
