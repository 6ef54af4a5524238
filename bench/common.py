"""Shared by every benchmark script: percentiles, database stats, the result hand-off.

Each system runs in its own subprocess (``python bench/<system>_bench.py ...``)
and prints exactly one JSON object on its last stdout line; ``bench/run.py``
collects them.
"""

from __future__ import annotations

import json
import math
import sys
import time
from typing import Any

import psutil
import psycopg

# The settings every system gets (the issue: same machine, same settings).
CONCURRENCY = 50  # Harvest Worker(concurrency), DBOS executor threads/queue concurrency, PgQueuer tasks
CLAIM_BATCH = 50  # Harvest Worker(claim_batch), PgQueuer batch_size


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of values; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100.0 * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def latency_summary(values_s: list[float]) -> dict[str, Any]:
    """p50/p95/p99/max in milliseconds."""
    ms = [v * 1000.0 for v in values_s]
    return {
        "n": len(ms),
        "p50_ms": _r(percentile(ms, 50)),
        "p95_ms": _r(percentile(ms, 95)),
        "p99_ms": _r(percentile(ms, 99)),
        "max_ms": _r(max(ms) if ms else None),
    }


def _r(x: float | None, digits: int = 2) -> float | None:
    return None if x is None else round(x, digits)


def xact_commits(dsn: str) -> int:
    """Committed transactions of this DSN's database, as the statistics collector sees them.

    Backends flush their counters at exit or about once a second, so callers close
    their own connections and wait a moment before reading the "after" value.
    """
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_stat_clear_snapshot()")
        return int(
            conn.execute(
                "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
            ).fetchone()[0]
        )


def server_cpu_seconds(dsn: str | None = None, postmaster_pid: int | None = None) -> float:
    """CPU seconds the PostgreSQL server has used so far: the postmaster and every backend,
    exited ones included (the postmaster's reaped children). Found from a DSN (the
    postmaster is the parent of our backend) or given by pid. Take the difference of two
    readings around a measured phase; each system runs alone, so the server's CPU is its."""
    if postmaster_pid is None:
        with psycopg.connect(dsn, autocommit=True) as conn:
            backend = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
            postmaster_pid = psutil.Process(backend).ppid()  # while the backend lives
    root = psutil.Process(postmaster_pid)
    t = root.cpu_times()
    total = t.user + t.system + t.children_user + t.children_system
    for child in root.children(recursive=True):
        try:
            ct = child.cpu_times()
            total += ct.user + ct.system
        except psutil.Error:  # exited between the listing and the read: counted once reaped
            pass
    return total


def database_backends_cpu(dsn: str) -> dict[int, float]:
    """CPU seconds so far of each backend connected to this DSN's database but ours, by pid
    (/proc/<pid>/schedstat: nanoseconds). Two readings around a phase, while its connections
    are open, give that database's share of the server even when another database of the
    same server is busy at the same time (``sum(after[p] - before.get(p, 0))``); background
    processes and backends that exited between the readings are not in it."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        pids = [
            row[0]
            for row in conn.execute(
                "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
            ).fetchall()
        ]
    cpu: dict[int, float] = {}
    for pid in pids:
        try:
            with open(f"/proc/{pid}/schedstat") as stat:
                cpu[pid] = int(stat.read().split()[0]) / 1e9
        except OSError:  # exited since the listing
            pass
    return cpu


def settle_stats() -> None:
    """Give exited/idle backends time to flush their statistics (PGSTAT_MIN_INTERVAL is 1 s)."""
    time.sleep(1.2)


def emit(result: dict[str, Any]) -> None:
    """The subprocess' answer: one JSON line, last on stdout."""
    sys.stdout.write("\n" + json.dumps(result, default=str) + "\n")
    sys.stdout.flush()
