"""Benchmark: the reference MTA against a Postfix relay, same load, same sink.

    python benchmarks/bench_transport.py [--messages 5000] [--sessions 10]
                                         [--mode both|per-connection|reuse] [--rounds 3]

One run drives Postfix's ``smtp-source`` (``--sessions`` parallel sessions,
``--messages`` messages in all, identical flags for every target) into

* (a) a 2-node reference cluster (one site, one DAG), shadow redundancy on;
* (b) the same cluster with ``ShadowRedundancyEnabled: false``;
* (c) a Postfix relay with its durable queue, configured here from scratch
  (own config and queue directories, ``postfix -c DIR``, loopback only,
  ``relay_domains`` + ``transport_maps`` to the sink, no DNS, no local
  delivery);

and, as a calibration, (d) straight into the sink. ``a`` and ``b`` run the
nodes with the reference's default SmtpInProcesses; ``a2``, ``b3`` (any digit)
with that many SMTP-in processes per node, so that one run can alternate them.
Every target delivers to one ``smtp-sink`` (from Debian's postfix package) on a loopback port; the
sink's own running counter (``-c``: ``sess=N quit=N mesg=N``) is what counts
deliveries. The script prints, for each target, messages per second
*accepted* (until smtp-source exits: every message had its 250) and
*delivered* (until the sink counted them all), then (a)/(c) and (b)/(c).

Two ways to send, both reported by default (``--mode both``):

* ``per-connection``: smtp-source's default, one message per SMTP session
  (what an MTA sees from many independent senders). It charges the
  per-session cost, which for a shadowing node includes opening its own
  authenticated session to the shadow (CR-2).
* ``reuse``: ``smtp-source -d``, many messages per session (what a relay
  sees from a busy peer MTA); the per-message cost alone.

Neither is "the" fair one: per-connection is the common case at a transport's
front door (and the one the shadow protocol makes expensive, since CR-2 asks
for a new primary-to-shadow session per sender session); reuse isolates the
per-message cost. Postfix does 5,000 messages in ~8 s either way here.

The machine is shared, so its load changes while the script runs. With
``--rounds N`` every target runs N times, interleaved, each round in a
rotated order; each run prints the 1-minute load average at its start, and
the ratios are the median over rounds of (ours / Postfix) *within* a round
(the same load for both), next to best against best. Each run also shows
the target's CPU time per message, over all its processes (both nodes;
Postfix's master and every service it ran): the cost that does not depend
on how much of the machine the other jobs left.

The cost of the power-cut fault: a target key ending in ``L`` (``aL``, ``cL``) runs
the same target with its queue on the harness's lazy filesystem (docs/targets.md,
"Power cut and disk full"), the filesystem process's CPU counted as the target's.

    python benchmarks/bench_transport.py --targets a,aL,c,cL --mode reuse --rounds 3

Requirements (the script installs nothing): ``/usr/sbin/smtp-source``,
``/usr/sbin/smtp-sink``, ``/usr/sbin/postfix`` from Debian's ``postfix``
package, and root (Postfix's master runs as root). Everything listens on
127.0.0.1 only and is stopped, and its directories removed, at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pytest_shadowcheck.storage.mount import LazyMount

SBIN = Path("/usr/sbin")
TOOLS = ("smtp-source", "smtp-sink", "postfix", "postconf")
INSTALL_HINT = (
    "install Debian's postfix package (it ships smtp-source and smtp-sink):\n"
    "  echo 'postfix postfix/main_mailer_type select No configuration' "
    "| debconf-set-selections\n"
    "  apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y postfix"
)
REPO = Path(__file__).resolve().parent.parent
SENDER = "bench@source.test"
RECIPIENT = "user@bench.test"
MODES = {"per-connection": [], "reuse": ["-d"]}


def tool(name: str) -> str:
    found = SBIN / name
    if found.exists():
        return str(found)
    other = shutil.which(name)
    if other is None:
        raise SystemExit(f"error: {name} not found.\n{INSTALL_HINT}")
    return other


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_listening(port: int, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"nothing listens on 127.0.0.1:{port} after {timeout:g}s")


# -- the sink ------------------------------------------------------------------------------


class Sink:
    """``smtp-sink -c`` on a loopback port; a thread follows its message counter."""

    _COUNTER = re.compile(rb"mesg=(\d+)")

    def __init__(self, port: int) -> None:
        self.port = port
        self.count = 0
        self._changed = threading.Condition()
        argv = [tool("smtp-sink"), "-c"]
        if os.geteuid() == 0:
            argv += ["-u", "postfix"]  # smtp-sink refuses to keep root privileges
        argv += [f"127.0.0.1:{port}", "1024"]
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self._reader = threading.Thread(target=self._follow, daemon=True)
        self._reader.start()
        wait_listening(port)

    def _follow(self) -> None:
        assert self.proc.stdout is not None
        pending = b""
        while chunk := os.read(self.proc.stdout.fileno(), 65536):
            pending += chunk
            *records, pending = re.split(rb"[\r\n]", pending)
            for record in reversed(records):
                match = self._COUNTER.search(record)
                if match:
                    with self._changed:
                        self.count = int(match.group(1))
                        self._changed.notify_all()
                    break

    def wait_for(self, target: int, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        with self._changed:
            while self.count < target:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._changed.wait(min(left, 0.05))
        return True

    def stop(self) -> None:
        stop_process(self.proc)


def stop_process(proc: subprocess.Popen[Any], sig: int = signal.SIGTERM) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


# -- targets ---------------------------------------------------------------------------------


@dataclass
class Target:
    key: str
    label: str
    port: int = 0
    notes: list[str] = field(default_factory=list)


CLUSTER_YAML = """\
boundary: bench
secret: bench-secret
nodes:
  mbx1: {{site: site-a, dag: dag1}}
  mbx2: {{site: site-a, dag: dag1}}
next_hops:
  bench.test: 127.0.0.1:{sink}
settings:
  ShadowRedundancyEnabled: {shadow}
  RejectMessageOnShadowFailure: false
  ShadowHeartbeatFrequency: 3600
  ShadowResubmitTimeSpan: 86400
  ReceiveConnectionInactivityTimeout: 600
  ReceiveConnectionTimeout: 3600
  SendConnectionInactivityTimeout: 600
  TransientFailureRetryInterval: 1
{processes}"""


@contextlib.contextmanager
def lazy_directory(directory: Path, on: bool) -> Iterator[LazyMount | None]:
    """``directory`` as a mount of the lazy filesystem (its disk beside it), or as it is."""
    if not on:
        yield None
        return
    mount = LazyMount(directory.with_name(directory.name + "-disk"), directory)
    mount.start()
    try:
        yield mount
    finally:
        mount.stop()


def lazy_cpu(mount: LazyMount | None) -> float:
    process = mount.process if mount is not None else None
    return cpu_seconds(process.pid) if process is not None else 0.0


@contextlib.contextmanager
def reference_cluster(
    work: Path, sink_port: int, shadow: bool, processes: int | None = None, lazy: bool = False
) -> Iterator[dict[str, Any]]:
    """``python -m reference_impl cluster``; yields mbx1's JSON line (plus mbx2's, and
    ``lazy``: the LazyMount under the nodes' data, or None).
    ``processes``: the nodes' SmtpInProcesses (None: the reference's default)."""
    with contextlib.ExitStack() as stack:
        base = Path(tempfile.mkdtemp(prefix="cluster-", dir=work))
        mount = stack.enter_context(lazy_directory(base / "data", lazy))
        nodes = stack.enter_context(_reference_cluster(base, sink_port, shadow, processes))
        yield {**nodes, "lazy": mount}


@contextlib.contextmanager
def _reference_cluster(
    base: Path, sink_port: int, shadow: bool, processes: int | None
) -> Iterator[dict[str, Any]]:
    config = base / "cluster.yaml"
    config.write_text(
        CLUSTER_YAML.format(
            sink=sink_port,
            shadow=str(shadow).lower(),
            processes="" if processes is None else f"  SmtpInProcesses: {processes}\n",
        )
    )
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    data = base / "data"
    proc = subprocess.Popen(
        [sys.executable, "-m", "reference_impl", "cluster", str(config), "--data", str(data)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        assert proc.stdout is not None
        nodes = {}
        for _ in range(2):
            line = proc.stdout.readline()
            if not line:
                raise RuntimeError(f"reference cluster did not start (exit {proc.wait()})")
            info = json.loads(line)
            nodes[info["node"]] = info
        yield nodes
    finally:
        stop_process(proc)
        shutil.rmtree(base, ignore_errors=True)


def control_get(address: str, path: str, token: str | None = None) -> Any:
    # the node's control API wants the token of its JSON start line
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    request = urllib.request.Request(f"http://{address}{path}", headers=headers)
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


MAIN_CF = """\
compatibility_level = 3.6
queue_directory = {queue}
data_directory = {data}
mail_owner = postfix
setgid_group = postdrop
myhostname = bench-postfix.localdomain
mydomain = localdomain
myorigin = $myhostname
inet_interfaces = 127.0.0.1
inet_protocols = ipv4
mynetworks = 127.0.0.0/8
mydestination =
local_recipient_maps =
local_transport = error:5.1.1 no local delivery in this benchmark
alias_maps =
alias_database =
relay_domains = bench.test
transport_maps = inline:{{ bench.test=smtp:[127.0.0.1]:{sink} }}
smtpd_relay_restrictions = permit_mynetworks, reject_unauth_destination
smtp_dns_support_level = disabled
smtp_host_lookup = native
smtpd_peername_lookup = no
biff = no
append_dot_mydomain = no
maillog_file = {log}
maillog_file_prefixes = {base}
meta_directory = /etc/postfix
"""

MASTER_CF = """\
127.0.0.1:{port} inet n - n - - smtpd
pickup    unix  n       -       n       60      1       pickup
cleanup   unix  n       -       n       -       0       cleanup
qmgr      unix  n       -       n       300     1       qmgr
tlsmgr    unix  -       -       n       1000?   1       tlsmgr
rewrite   unix  -       -       n       -       -       trivial-rewrite
bounce    unix  -       -       n       -       0       bounce
defer     unix  -       -       n       -       0       bounce
trace     unix  -       -       n       -       0       bounce
verify    unix  -       -       n       -       1       verify
flush     unix  n       -       n       1000?   0       flush
proxymap  unix  -       -       n       -       -       proxymap
proxywrite unix -       -       n       -       1       proxymap
smtp      unix  -       -       n       -       -       smtp
relay     unix  -       -       n       -       -       smtp
showq     unix  n       -       n       -       -       showq
error     unix  -       -       n       -       -       error
retry     unix  -       -       n       -       -       error
discard   unix  -       -       n       -       -       discard
anvil     unix  -       -       n       -       1       anvil
scache    unix  -       -       n       -       1       scache
postlog   unix-dgram n  -       n       -       1       postlogd
"""


@contextlib.contextmanager
def postfix_relay(
    work: Path, sink_port: int, port: int, lazy: bool = False
) -> Iterator[tuple[Path, LazyMount | None]]:
    """A private Postfix instance (``postfix -c DIR``); yields its base directory (and
    with ``lazy``, the LazyMount its queue directory is)."""
    if os.geteuid() != 0:
        raise RuntimeError("Postfix's master must start as root: run the benchmark as root")
    base = Path(tempfile.mkdtemp(prefix="postfix-", dir=work))
    base.chmod(0o755)
    conf, queue, data = base / "conf", base / "queue", base / "data"
    for directory in (conf, queue, data):
        directory.mkdir()
    shutil.chown(data, "postfix")
    stack = contextlib.ExitStack()
    mount = stack.enter_context(lazy_directory(queue, lazy))
    log = base / "maillog"
    (conf / "main.cf").write_text(
        MAIN_CF.format(queue=queue, data=data, sink=sink_port, log=log, base=base)
    )
    (conf / "master.cf").write_text(MASTER_CF.format(port=port))
    postfix = tool("postfix")
    env = {**os.environ, "MAIL_CONFIG": str(conf)}

    def run(*args: str) -> None:
        done = subprocess.run(
            [postfix, "-c", str(conf), *args], env=env, capture_output=True, text=True
        )
        if done.returncode != 0:
            logged = log.read_text()[-2000:] if log.exists() else ""
            raise RuntimeError(
                f"postfix {' '.join(args)} failed:\n{done.stderr}{done.stdout}{logged}"
            )

    started = False
    try:
        run("check")
        run("start")
        started = True
        wait_listening(port)
        yield base, mount
    finally:
        if started:
            with contextlib.suppress(RuntimeError):
                run("stop")
            pid_file = queue / "pid" / "master.pid"
            deadline = time.monotonic() + 15
            while pid_file.exists() and time.monotonic() < deadline:
                time.sleep(0.1)
        stack.close()
        shutil.rmtree(base, ignore_errors=True)


# -- measuring --------------------------------------------------------------------------------


@dataclass
class Result:
    target: str
    mode: str
    messages: int
    round: int = 1
    load: float | None = None  # 1-minute load average when the run started
    cpu_ms: float | None = None  # the target's CPU time per message (every process of it)
    accepted_s: float | None = None
    delivered_s: float | None = None
    delivered: int = 0
    error: str = ""
    notes: list[str] = field(default_factory=list)

    @property
    def accepted_rate(self) -> float | None:
        return None if not self.accepted_s else self.messages / self.accepted_s

    @property
    def delivered_rate(self) -> float | None:
        return None if not self.delivered_s else self.messages / self.delivered_s


def _stat(pid: int) -> list[str]:
    with open(f"/proc/{pid}/stat") as stat:
        return stat.read().rpartition(")")[2].split()


def cpu_seconds(pid: int, tree: bool = False) -> float:
    """CPU time (user + system) of ``pid``; with ``tree``, also of its children,
    the live ones and those it has reaped (how Postfix's master runs its services)."""
    ticks = os.sysconf("SC_CLK_TCK")
    try:
        fields = _stat(pid)
    except FileNotFoundError:
        return 0.0
    total = int(fields[11]) + int(fields[12])
    if tree:
        total += int(fields[13]) + int(fields[14])
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                with contextlib.suppress(FileNotFoundError, ProcessLookupError):
                    child = _stat(int(entry))
                    if int(child[1]) == pid:
                        total += int(child[11]) + int(child[12])
    return total / ticks


def drive(
    result: Result,
    port: int,
    sink: Sink,
    sessions: int,
    mode: str,
    size: int | None,
    cpu: Callable[[], float] | None = None,
) -> None:
    """smtp-source into ``port``; fills in the accepted and delivered times, and
    the target's CPU time per message when ``cpu`` tells its CPU seconds so far."""
    argv = [tool("smtp-source"), *MODES[mode], "-s", str(sessions), "-m", str(result.messages)]
    if size is not None:
        argv += ["-l", str(size)]
    argv += ["-M", "bench-client.localdomain", "-f", SENDER, "-t", RECIPIENT, f"127.0.0.1:{port}"]
    before = sink.count
    cpu_before = cpu() if cpu else 0.0
    start = time.monotonic()
    done = subprocess.run(argv, capture_output=True, text=True)
    result.accepted_s = time.monotonic() - start
    if done.returncode != 0:
        result.error = f"smtp-source exit {done.returncode}: {done.stderr.strip()[-300:]}"
    budget = max(120.0, result.messages / 20)
    if sink.wait_for(before + result.messages, budget - (time.monotonic() - start)):
        result.delivered_s = time.monotonic() - start
    else:
        result.error = (result.error + "; " if result.error else "") + (
            f"the sink had {sink.count - before} of {result.messages} after {budget:g}s"
        )
    result.delivered = sink.count - before
    if cpu is not None:
        result.cpu_ms = 1000 * (cpu() - cpu_before) / result.messages


def run_all(args: argparse.Namespace) -> list[Result]:
    for name in TOOLS:
        tool(name)
    modes = list(MODES) if args.mode == "both" else [args.mode]
    results: list[Result] = []
    work = Path(tempfile.mkdtemp(prefix="bench-transport-", dir=args.workdir))
    work.chmod(0o755)
    sink = Sink(free_port())
    keys = args.targets.split(",")
    try:
        for mode in modes:
            for number in range(1, args.rounds + 1):
                # Interleaved rounds, each in a rotated order, so that every target
                # runs under the same (shared, changing) machine load on average.
                shift = (number - 1) % len(keys)
                for key in keys[shift:] + keys[:shift]:
                    result = Result(
                        target=key,
                        mode=mode,
                        messages=args.messages,
                        round=number,
                        load=os.getloadavg()[0],
                    )
                    results.append(result)
                    print(
                        f"... {key} ({mode}, round {number}, load {result.load:.2f})",
                        file=sys.stderr,
                        flush=True,
                    )
                    try:
                        run_target(key, result, work, sink, args)
                    except (RuntimeError, OSError) as exc:
                        result.error = str(exc)
    finally:
        sink.stop()
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    return results


def run_target(key: str, result: Result, work: Path, sink: Sink, args: argparse.Namespace) -> None:
    drive_args = (sink, args.sessions, result.mode, args.size)
    if key == "sink":
        drive(result, sink.port, *drive_args)
    elif (reference := REFERENCE_KEY.fullmatch(key)) is not None:
        processes = int(reference["processes"]) if reference["processes"] else None
        lazy = bool(reference["lazy"])
        shadow = reference["shadow"] == "a"
        with reference_cluster(work, sink.port, shadow, processes, lazy) as nodes:
            mount = nodes.pop("lazy")
            entry = nodes["mbx1"]
            pids = [int(info["pid"]) for info in nodes.values()]
            drive(
                result,
                int(entry["smtp"].rpartition(":")[2]),
                *drive_args,
                # each node's process and its SMTP-in workers (SmtpInProcesses)
                cpu=lambda: sum(cpu_seconds(pid, tree=True) for pid in pids) + lazy_cpu(mount),
            )
            first = control_get(entry["control"], "/stats", entry.get("token"))
            second = control_get(nodes["mbx2"]["control"], "/stats", nodes["mbx2"].get("token"))
            result.notes.append(
                f"mbx1 received={first['received']} delivered={first['delivered']} "
                f"shadow_copies_made={first['shadow_copies_made']} "
                f"accepted_without_shadow={first['accepted_without_shadow']}; "
                f"mbx2 shadow_copies_stored={second['shadow_copies_stored']}"
            )
    elif key in ("c", "cL"):
        port = free_port()
        with postfix_relay(work, sink.port, port, lazy=key == "cL") as (base, mount):
            master = int((base / "queue" / "pid" / "master.pid").read_text().split()[0])
            drive(
                result,
                port,
                *drive_args,
                cpu=lambda: cpu_seconds(master, tree=True) + lazy_cpu(mount),
            )
    else:
        raise RuntimeError(f"unknown target {key!r}")


#: a or b, optionally followed by the nodes' SmtpInProcesses (``a1``, ``b3``)
REFERENCE_KEY = re.compile(r"(?P<shadow>[ab])(?P<processes>[1-9][0-9]*)?(?P<lazy>L)?")

LABELS = {
    "sink": "(d) smtp-source -> smtp-sink",
    "a": "(a) reference, 2 nodes, shadow on",
    "b": "(b) reference, 2 nodes, shadow off",
    "c": "(c) postfix relay",
    "cL": "(c) postfix relay, queue on the lazy filesystem",
}


def label(key: str) -> str:
    reference = REFERENCE_KEY.fullmatch(key)
    if reference is None:
        return LABELS.get(key, key)
    text = LABELS[reference["shadow"]]
    if reference["processes"]:
        text += f", {reference['processes']} SMTP-in"
    return text + (", data on the lazy filesystem" if reference["lazy"] else "")


def fmt(value: float | None, spec: str) -> str:
    width = int(re.match(r"\d*", spec).group() or 0)  # type: ignore[union-attr]
    return "-".rjust(width) if value is None else format(value, spec)


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def report(results: list[Result], args: argparse.Namespace) -> str:
    out = []
    for mode in dict.fromkeys(r.mode for r in results):
        rows = [r for r in results if r.mode == mode]
        flags = " ".join([*MODES[mode], "-s", str(args.sessions), "-m", str(args.messages)])
        out.append(f"\n{mode}: smtp-source {flags}")
        out.append(
            f"{'target':46} {'round':>5} {'load':>5} {'accepted/s':>11} {'delivered/s':>12} "
            f"{'accept s':>9} {'deliver s':>10} {'CPU ms/msg':>10}"
        )
        for r in rows:
            out.append(
                f"{label(r.target):46} {r.round:5d} {fmt(r.load, '5.2f')} "
                f"{fmt(r.accepted_rate, '11.0f')} {fmt(r.delivered_rate, '12.0f')} "
                f"{fmt(r.accepted_s, '9.2f')} {fmt(r.delivered_s, '10.2f')} "
                f"{fmt(r.cpu_ms, '10.2f')}"
            )
            for note in r.notes:
                out.append(f"    {note}")
            if r.error:
                out.append(f"    ERROR: {r.error}")
        if args.rounds > 1:
            out.append(f"over {args.rounds} rounds: best / median")
            for key in dict.fromkeys(r.target for r in rows):
                mine = [r for r in rows if r.target == key and not r.error]
                parts = []
                for what in ("accepted_rate", "delivered_rate"):
                    values = [v for r in mine if (v := getattr(r, what))]
                    best = max(values) if values else None
                    parts.append(f"{fmt(best, '6.0f')} / {fmt(_median(values), '6.0f')}")
                cpu = _median([r.cpu_ms for r in mine if r.cpu_ms is not None])
                out.append(
                    f"  {label(key):44} accepted/s {parts[0]}   delivered/s {parts[1]}"
                    f"   CPU ms/msg (median) {fmt(cpu, '5.2f')}"
                )
        for key in dict.fromkeys(r.target for r in rows):
            reference = REFERENCE_KEY.fullmatch(key)
            if reference is None:
                continue
            ratios = _ratios(rows, key, 1.0 if reference["shadow"] == "a" else 2.0)
            if ratios:
                out.append(f"({key})/(c): " + ", ".join(ratios))
    return "\n".join(out)


def _ratios(rows: list[Result], key: str, target: float) -> list[str]:
    """Ours against Postfix: the median over rounds of the ratio within a round
    (same load), and best against best."""
    parts = []
    for what in ("accepted_rate", "delivered_rate"):
        per_round = []
        for number in sorted({r.round for r in rows}):
            ours = next((r for r in rows if r.target == key and r.round == number), None)
            theirs = next((r for r in rows if r.target == "c" and r.round == number), None)
            if ours and theirs and not ours.error and not theirs.error:
                mine, postfix = getattr(ours, what), getattr(theirs, what)
                if mine and postfix:
                    per_round.append(mine / postfix)
        if not per_round:
            continue
        ratio = statistics.median(per_round)
        verdict = "meets" if ratio >= target else "misses"
        text = f"{what.split('_')[0]} {ratio:.2f}x ({verdict} {target:g}x)"
        if len(per_round) > 1:
            best = [getattr(r, what) for r in rows if r.target == key and not r.error]
            best_c = [getattr(r, what) for r in rows if r.target == "c" and not r.error]
            if all(best) and all(best_c):
                text += f" [best/best {max(best) / max(best_c):.2f}x]"
        parts.append(text)
    return parts


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--messages", type=int, default=5000, help="messages per target")
    parser.add_argument("--sessions", type=int, default=10, help="parallel smtp-source sessions")
    parser.add_argument(
        "--mode", choices=["both", *MODES], default="both", help="messages per connection"
    )
    parser.add_argument("--size", type=int, help="smtp-source -l: message body length")
    parser.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="run every target this many times, interleaved; ratios are per round (same load)",
    )
    parser.add_argument(
        "--targets",
        default="sink,a,b,c",
        help="comma-separated subset of sink,a,b,c (default: all); a or b followed by a "
        "number runs the nodes with that many SMTP-in processes (a1,a2: SmtpInProcesses 1, 2)",
    )
    parser.add_argument(
        "--workdir", help="where the queues live (default: the system temp dir; use a disk)"
    )
    parser.add_argument("--keep", action="store_true", help="keep the work directory")
    parser.add_argument("--json", help="also write the results to this JSON file")
    args = parser.parse_args(argv)
    results = run_all(args)
    print(report(results, args))
    if args.json:
        Path(args.json).write_text(
            json.dumps(
                [
                    {
                        **r.__dict__,
                        "accepted_rate": r.accepted_rate,
                        "delivered_rate": r.delivered_rate,
                    }
                    for r in results
                ],
                indent=2,
            )
        )
    return 1 if any(r.error for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
