"""Synthetic incident drills: cause each incident on a local stack and wait for its starter alert.

    .venv/bin/python scripts/alert_drills.py [--timeout 240]

Starts an embedded PostgreSQL, two `harvest worker` processes of scripts/drill_app.py (A polls
queue ``drill`` and leads the metrics sampler, B polls ``drill_other``), each serving its metrics
on a port, and a Prometheus (Debian's ``prometheus``; ``make promtool`` installs it) scraping them
every second with the starter pack loaded in drill mode (every ``for:`` set to 0s, so an alert
fires as soon as its expression holds). Then, one drill after the other, it causes an incident and
polls Prometheus' /api/v1/alerts until the expected alert fires (or fails the drill):

1. dead letters and activity failures: a workflow whose activity always fails;
2. an uncovered queue and a shard that is not ready: a run started on a queue no worker polls;
3. stale workers: worker B stopped (SIGSTOP) while it is the only worker of its queue;
4. a stalled scanner and a silent sampler: worker A killed while B is still stopped (no process
   runs a scanner or the sampler any more; takes a minute, the rule's threshold).

Prints one line per drill and exits 0 when every alert fired. docs/runbooks/synthetic-incident-drills.md.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACK = ROOT / "docs" / "alerts" / "starter-pack-v0.1.0.json"
HARVEST = [sys.executable, "-c", "from harvest.cli import main; main()"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def drill_rules(path: Path) -> None:
    """The pack with every `for:` at 0s: a drill waits for the expression, not for the hold."""
    pack = json.loads(PACK.read_text())
    for group in pack["groups"]:
        for rule in group["rules"]:
            rule["for"] = "0s"
    path.write_text(json.dumps(pack))


def firing(prometheus: str) -> set[str]:
    with urllib.request.urlopen(f"{prometheus}/api/v1/alerts", timeout=5) as answer:
        alerts = json.load(answer)["data"]["alerts"]
    return {a["labels"]["alertname"] for a in alerts if a["state"] == "firing"}


def wait_for(
    prometheus: str,
    alerts: set[str],
    timeout: float,
    started: float,
    keep_up: Callable[[], object] | None = None,
) -> float:
    """Seconds from ``started`` (the incident) until every alert of ``alerts`` fires;
    ``keep_up``, called every other second meanwhile, keeps the incident going (a rate needs a
    counter that still moves when Prometheus has seen it born)."""
    beat = 0
    while True:
        beat += 1
        if keep_up is not None and beat % 2 == 0:
            keep_up()
        try:
            if alerts <= firing(prometheus):
                return time.monotonic() - started
        except OSError:
            pass
        if time.monotonic() - started > timeout:
            with urllib.request.urlopen(f"{prometheus}/api/v1/targets", timeout=5) as answer:
                targets = [
                    (t["scrapeUrl"], t["health"], t["lastError"])
                    for t in json.load(answer)["data"]["activeTargets"]
                ]
            raise SystemExit(
                f"drill failed: {sorted(alerts)} did not fire within {timeout:.0f}s "
                f"(firing: {sorted(firing(prometheus))}; targets: {targets})"
            )
        time.sleep(1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--timeout", type=float, default=240.0, help="seconds each drill may take")
    args = parser.parse_args()
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("prometheus is not installed: run `make promtool` (Debian's prometheus package)")

    from harvest import Client
    from harvest.db.embedded import EmbeddedPostgres
    from harvest.db.migrate import Migrator

    work = Path(tempfile.mkdtemp(prefix="harvest-drills-"))
    server = EmbeddedPostgres()
    processes: list[subprocess.Popen] = []
    try:
        dsn = server.start()
        Migrator(dsn).run()
        # The inherited PYTHONPATH stays after scripts/: a worktree's run imports its own library.
        path = os.pathsep.join(p for p in (str(ROOT / "scripts"), os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "HARVEST_DATABASE_URL": dsn, "PYTHONPATH": path}
        ports = {"a": free_port(), "b": free_port()}
        workers = {}
        for name, queue, interval in (("a", "drill", "1"), ("b", "drill_other", "0")):
            workers[name] = subprocess.Popen(
                [
                    *HARVEST,
                    "worker",
                    "drill_app:app",
                    "--queue",
                    queue,
                    "--metrics-port",
                    str(ports[name]),
                    "--metrics-interval",
                    interval,
                    "--log-level",
                    "WARNING",
                ],
                env={**env, "HARVEST_WORKER__HEARTBEAT_INTERVAL": "1"},
            )
            processes.append(workers[name])
        drill_rules(work / "rules.json")
        prom_port = free_port()
        (work / "prometheus.yml").write_text(
            json.dumps(
                {
                    "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
                    "rule_files": [str(work / "rules.json")],
                    "scrape_configs": [
                        {
                            "job_name": "harvest",
                            "static_configs": [
                                {"targets": [f"127.0.0.1:{ports['a']}", f"127.0.0.1:{ports['b']}"]}
                            ],
                        }
                    ],
                }
            )
        )
        processes.append(
            subprocess.Popen(
                [
                    binary,
                    f"--config.file={work / 'prometheus.yml'}",
                    f"--storage.tsdb.path={work / 'tsdb'}",
                    f"--web.listen-address=127.0.0.1:{prom_port}",
                    "--log.level=warn",
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
        prometheus = f"http://127.0.0.1:{prom_port}"
        time.sleep(5)
        quiet = firing(prometheus)
        print(f"steady state: firing {sorted(quiet) or 'nothing'}", flush=True)

        with Client(dsn) as client:
            started = time.monotonic()
            for _ in range(4):  # a counter is born at its first increment: rate() needs more
                client.start_workflow("drill_fails", queue="drill")
                time.sleep(2)
            expected = {"HarvestDeadLettersGrowing", "HarvestActivityFailures"}
            # More failures until both fire: on a loaded machine the four above can all fail
            # before the first scrape that sees the counter, which is then born at 4 and never
            # moves, and rate() reads 0 (CI 59d: the drill waited its 240 s out).
            took = wait_for(
                prometheus,
                expected,
                args.timeout,
                started,
                keep_up=lambda: client.start_workflow("drill_fails", queue="drill"),
            )
            print(f"drill 1 dead letters, activity failures: fired after {took:.0f}s", flush=True)

            started = time.monotonic()
            client.start_workflow("drill_waits", queue="drill_nobody")
            expected = {"HarvestQueueUncovered", "HarvestShardNotReady"}
            took = wait_for(prometheus, expected, args.timeout, started)
            print(f"drill 2 uncovered queue, shard not ready: fired after {took:.0f}s", flush=True)

        started = time.monotonic()
        workers["b"].send_signal(signal.SIGSTOP)
        took = wait_for(prometheus, {"HarvestWorkersStaleOrDraining"}, args.timeout, started)
        print(f"drill 3 stale workers: fired after {took:.0f}s", flush=True)
        # B stays stopped: with A killed, no process runs a scanner (or the sampler) any more.
        started = time.monotonic()
        workers["a"].kill()
        expected = {"HarvestScannerStalled", "HarvestPreflightFailing"}
        took = wait_for(prometheus, expected, args.timeout, started)
        print(f"drill 4 stalled scanner, silent sampler: fired after {took:.0f}s", flush=True)
        print("every drill fired its alert")
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGCONT)
                process.terminate()
        for process in processes:
            try:
                process.wait(30)
            except subprocess.TimeoutExpired:
                process.kill()
        server.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
