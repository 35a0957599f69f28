"""The command line, and cluster mode proven: a standalone master and worker on loopback."""

from __future__ import annotations

import csv
import os
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

RESULT_FILES = [
    "matrix.csv", "flaky.csv", "regressions.csv", "latest_matrix.csv", "trends.csv",
    "durations.csv", "rejected.csv",
]


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _spark_home() -> Path:
    import pyspark

    return Path(pyspark.__file__).parent


def _loopback_env() -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        SPARK_LOCAL_IP="127.0.0.1",
        SPARK_HOME=str(_spark_home()),
        PYSPARK_PYTHON=sys.executable,
        SPARK_NO_DAEMONIZE="1",
    )
    return env


def _wait_for(log: Path, text: str, process: subprocess.Popen, timeout: float = 90) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if log.exists() and text in log.read_text(errors="replace"):
            return
        if process.poll() is not None:
            break
        time.sleep(0.5)
    raise AssertionError(f"{text!r} never appeared in {log}:\n{log.read_text(errors='replace')}")


@pytest.fixture(scope="module")
def standalone_cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    spark_class = _spark_home() / "bin" / "spark-class"
    if not spark_class.exists():
        pytest.skip(f"pyspark ships no {spark_class}")
    work = tmp_path_factory.mktemp("cluster")
    port = _free_port()
    url = f"spark://127.0.0.1:{port}"
    env = _loopback_env()
    started: list[subprocess.Popen] = []
    try:
        master_log = work / "master.log"
        with master_log.open("w") as log:
            master = subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.master.Master", "--host",
                 "127.0.0.1", "--port", str(port), "--webui-port", str(_free_port())],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )
        started.append(master)
        _wait_for(master_log, "I have been elected leader", master)
        worker_log = work / "worker.log"
        with worker_log.open("w") as log:
            worker = subprocess.Popen(
                [str(spark_class), "org.apache.spark.deploy.worker.Worker", url, "--host",
                 "127.0.0.1", "--cores", "2", "--memory", "2g", "--webui-port",
                 str(_free_port()), "--work-dir", str(work / "worker")],
                stdout=log, stderr=subprocess.STDOUT, env=env,
            )
        started.append(worker)
        _wait_for(worker_log, "Successfully registered with master", worker)
        yield url
    finally:
        for process in reversed(started):
            process.terminate()
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def _cli(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "reports", *args],
        capture_output=True, text=True, env=env or _loopback_env(), timeout=600, check=False,
    )


def _csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as handle:
        return list(csv.DictReader(handle))


@pytest.mark.spark
@pytest.mark.slow
def test_build_on_a_standalone_cluster_matches_local_mode(
    standalone_cluster: str, history: Path, tmp_path: Path
) -> None:
    out = tmp_path / "cluster-out"
    inputs = history.parent / "in"
    done = _cli("build", str(inputs), "--out", str(out), "--master", standalone_cluster)
    assert done.returncode == 0, done.stderr
    assert "INFO" not in done.stderr  # Spark starts quietly
    assert "files found" in done.stderr  # progress lines
    for name in RESULT_FILES:
        assert _csv(out / name) == _csv(history / name), name
    page = (out / "dashboard.html").read_text()
    assert page.count('<td class="cell"') == (history / "dashboard.html").read_text().count(
        '<td class="cell"'
    ) > 0


def test_missing_java_is_a_clear_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "JAVA_HOME"}
    env["PATH"] = str(tmp_path)  # nothing there: no java
    done = _cli("build", str(tmp_path), "--out", str(tmp_path / "out"), env=env)
    assert done.returncode == 3
    assert "Java 17 or later is required" in done.stderr


def test_a_bad_spark_setting_is_a_clear_error_before_spark_starts(tmp_path: Path) -> None:
    env = dict(os.environ, SHADOWCHECK_SPARK_CONF="spark.sql.shuffle.partitions=2;nonsense")
    done = _cli("build", str(tmp_path), "--out", str(tmp_path / "out"), env=env)
    assert done.returncode == 2
    assert "SHADOWCHECK_SPARK_CONF: 'nonsense' is not key=value" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "out").exists()


def test_help_names_the_build_options() -> None:
    done = _cli("build", "--help")
    assert done.returncode == 0
    for option in ("--out", "--master", "--target", "--target-version"):
        assert option in done.stdout
