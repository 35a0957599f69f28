"""Progress lines on stderr: one per phase, plus task counts while a long Spark job runs."""

from __future__ import annotations

import sys
import threading
import time
from types import TracebackType
from typing import TextIO

from pyspark import SparkContext

__all__ = ["Progress"]


class Progress:
    """Prints ``[  12.3s] message`` lines; watches Spark stages when ``watch`` is on.

    Short jobs print nothing extra: task counts only appear once a stage has run
    for ``after_s`` seconds, which is what "large input" means in practice.
    """

    def __init__(self, enabled: bool = True, stream: TextIO | None = None) -> None:
        self.enabled = enabled
        self.stream = stream or sys.stderr
        self.started = time.monotonic()

    def say(self, message: str) -> None:
        if self.enabled:
            elapsed = time.monotonic() - self.started
            print(f"[{elapsed:6.1f}s] {message}", file=self.stream, flush=True)

    def watch(self, sc: SparkContext, label: str, after_s: float = 2.0) -> _StageWatcher:
        return _StageWatcher(self, sc, label, after_s)


class _StageWatcher:
    def __init__(self, progress: Progress, sc: SparkContext, label: str, after_s: float) -> None:
        self.progress = progress
        self.sc = sc
        self.label = label
        self.after_s = after_s
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._run, name="reports-progress", daemon=True)

    def __enter__(self) -> _StageWatcher:
        self.progress.say(f"{self.label} ...")
        if self.progress.enabled:
            self.thread.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop.set()
        if self.thread.is_alive():
            self.thread.join(timeout=5)

    def _run(self) -> None:
        begun = time.monotonic()
        last = ""
        while not self.stop.wait(1.0):
            if time.monotonic() - begun < self.after_s:
                continue
            tracker = self.sc.statusTracker()
            done = total = 0
            for stage_id in tracker.getActiveStageIds():
                info = tracker.getStageInfo(stage_id)
                if info is not None:
                    done += info.numCompletedTasks
                    total += info.numTasks
            line = f"  {self.label}: {done}/{total} tasks" if total else ""
            if line and line != last:
                self.progress.say(line.strip())
                last = line
