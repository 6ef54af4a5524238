"""Where a Harvest drain waits: wait events, the server/worker CPU split and NOTIFY counts.

    python bench/drain_waits.py [--n 1500]

A diagnostic beside `make bench` (not timed, not in latest.json). It starts an
EmbeddedPostgres with bench/run.py's SERVER_SETTINGS, runs one canonical drain
(`harvest_bench.py --mode workflows`) and meanwhile:

* samples ``pg_stat_activity`` of the drain's active backends every 10 ms
  (``wait_event_type / wait_event``; no wait event = on CPU);
* prints the drain's CPU split as harvest_bench.py measured it: the server (postmaster
  and its backends, exited ones included) and the bench process (worker + starters);
* counts the notifications a LISTEN connection receives on ``harvest_tasks`` and
  ``harvest_done``.
"""

from __future__ import annotations

import argparse
import collections
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

import psycopg

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

from run import SERVER_SETTINGS

from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--n", type=int, default=1500)
    args = parser.parse_args()
    server = EmbeddedPostgres(settings=SERVER_SETTINGS)
    server.start()
    try:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute("CREATE DATABASE drain")
        dsn = server.dsn_for("drain")
        Migrator(dsn).run()
        waits: collections.Counter = collections.Counter()
        notes: collections.Counter = collections.Counter()
        done = threading.Event()
        ticks = [0]

        def sample() -> None:
            with psycopg.connect(server.dsn, autocommit=True) as conn:
                while not done.is_set():
                    for kind, event in conn.execute(
                        "SELECT coalesce(wait_event_type, 'CPU'), coalesce(wait_event, '-')"
                        " FROM pg_stat_activity WHERE datname = 'drain' AND state = 'active'"
                        " AND pid <> pg_backend_pid()"
                    ).fetchall():
                        waits[f"{kind} / {event}"] += 1
                    ticks[0] += 1
                    time.sleep(0.01)

        def listen() -> None:
            with psycopg.connect(dsn, autocommit=True) as conn:
                conn.execute("LISTEN harvest_tasks")
                conn.execute("LISTEN harvest_done")
                while not done.is_set():
                    for note in conn.notifies(timeout=0.5):
                        notes[note.channel] += 1

        listener = threading.Thread(target=listen)
        listener.start()
        time.sleep(0.3)
        sampler = threading.Thread(target=sample)
        sampler.start()
        proc = subprocess.run(
            [
                sys.executable,
                str(HERE / "harvest_bench.py"),
                "--dsn",
                dsn,
                "--mode",
                "workflows",
                "--n",
                str(args.n),
            ],
            capture_output=True,
            text=True,
            check=True,
        )
        time.sleep(0.5)  # the last notifications
        done.set()
        sampler.join()
        listener.join()
        result = json.loads([line for line in proc.stdout.splitlines() if line.strip()][-1])
    finally:
        server.stop()
    n = args.n
    total = sum(waits.values()) or 1
    print(f"drain: {result['throughput']} workflows/s, {result['elapsed_s']} s for {n} runs")
    cpu = result["cpu"]  # measured by harvest_bench.py over the drain (bench/common.py)
    print(
        f"CPU per workflow: server {cpu['server_s'] / n * 1000:.2f} ms, bench process (worker + starters) "
        f"{cpu['client_s'] / n * 1000:.2f} ms"
    )
    print(f"notifications received: {dict(notes)}")
    print(f"active backends, {ticks[0]} samples, {total / max(ticks[0], 1):.1f} active on average:")
    for name, count in waits.most_common(10):
        print(f"  {name:32} {count / total:6.1%}")


if __name__ == "__main__":
    main()
