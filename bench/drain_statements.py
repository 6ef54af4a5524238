"""The canonical drain's server work against the SQL path's, entry point by entry point: what
the worker makes the server do that Harvest's SQL alone does not (docs/performance.md, "Canonical
drain, thirteenth cut").

On one embedded server with ``bench/run.py``'s settings plus ``pg_stat_statements.track = all``,
each on a fresh clone of one migrated template: ``bench/harvest_bench.py --mode workflows`` (8
starters, one in-process Worker) and ``bench/sql_path.py --clients 1 --batch 50``, ``--n`` runs
each. Per entry point (the drain's top-level calls; the SQL path's calls from its procedure):
calls, rows returned per call, statement time, shared buffers hit and dirtied and WAL records,
all per workflow; then each side's plans, commits and nested statements per workflow and the
whole server's CPU per workflow over the run. Then the price of a fresh backend's warm-up: one
session runs ``bench.sql_path`` in batches of 50 and the first batch's CPU is set against the
next ones' (the function compiles, catalog caches and first plans a new pooled connection pays).

    python bench/drain_statements.py --n 1500
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg
from canonical import noop, three_steps
from common import server_cpu_seconds
from run import SERVER_SETTINGS
from sql_path_ab import bench_json, fresh, migrate_templates

from harvest import App
from harvest.db.embedded import EmbeddedPostgres

STATEMENTS = """
SELECT toplevel, query, calls, rows, total_exec_time, plans, shared_blks_hit, shared_blks_dirtied,
       wal_records
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
"""
# The procedure's own statements name its variables (bench/sql_path.sql); the worker's and the
# client's are top-level calls.
PROCEDURE_STATEMENT = re.compile(r"\bv_(worker|queue|size)\b")
ENTRY_POINT = re.compile(r"harvest\.(\w+)\s*\(")


def entry_points(rows: list[tuple], n: int, drain: bool) -> dict[str, dict[str, float]]:
    out: dict[str, dict[str, float]] = {}
    for top, query, calls, nrows, exec_ms, _plans, hit, dirtied, wal in rows:
        if (top if drain else not top and PROCEDURE_STATEMENT.search(query)) and calls:
            match = ENTRY_POINT.search(query)
            # (a helper's name starts with "_": one the procedure's own statement calls inside)
            if not match or match.group(1).startswith("_") or match.group(1) == "register_worker":
                continue
            e = out.setdefault(
                match.group(1), {"calls": 0, "rows": 0, "exec_ms": 0.0, "hit": 0, "dirtied": 0, "wal": 0}
            )
            for key, value in zip(
                ("calls", "rows", "exec_ms", "hit", "dirtied", "wal"),
                (calls, nrows, exec_ms, hit, dirtied, wal),
                strict=True,
            ):
                e[key] += value
    return {
        name: {
            "calls_per_wf": round(e["calls"] / n, 3),
            # (the SQL path's procedure aggregates each call's rows into one: its calls carry 50)
            "rows_per_call": round(e["rows"] / e["calls"], 1) if drain else None,
            "exec_us_per_wf": round(e["exec_ms"] * 1000 / n, 1),
            "shared_hit_per_wf": round(e["hit"] / n, 1),
            "dirtied_per_wf": round(e["dirtied"] / n, 2),
            "wal_records_per_wf": round(e["wal"] / n, 1),
        }
        for name, e in sorted(out.items(), key=lambda kv: -kv[1]["exec_ms"])
    }


def one_side(admin: psycopg.Connection, server: EmbeddedPostgres, root: Path, kind: str, n: int) -> dict:
    dsn = fresh(admin, server, "stmt_x", "tmpl_x")
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT pg_stat_statements_reset()")
        (commits0,) = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    before = server_cpu_seconds(dsn)
    if kind == "drain":
        out = bench_json(root, "harvest_bench.py", "--dsn", dsn, "--mode", "workflows", "--n", f"{n}")
        server_ms = out["cpu"]["server_s"] * 1000 / n  # the drain's own window
        extra = {"throughput": out["throughput"], "sessions": out["sessions"], "steps": out["steps"]}
    else:
        out = bench_json(root, "sql_path.py", "--dsn", dsn, "--clients", "1", "--n", f"{n}", "--batch", "50")
        server_ms = (server_cpu_seconds(dsn) - before) * 1000 / n
        extra = {"throughput": out["best_wf_per_s"]}
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(STATEMENTS).fetchall()
        (commits1,) = conn.execute(
            "SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()"
        ).fetchone()
    admin.execute('DROP DATABASE "stmt_x"')
    nested = [r for r in rows if not r[0]]
    return {
        "server_cpu_ms_per_wf": round(server_ms, 3),
        **extra,
        "commits_per_wf": round((commits1 - commits0) / n, 3),
        "nested_statements_per_wf": round(sum(r[2] for r in nested) / n, 1),
        "plans_per_wf": round(sum(r[5] for r in rows) / n, 2),
        "shared_hit_per_wf": round(sum(r[6] for r in rows if r[0]) / n, 1),
        "entry_points": entry_points(rows, n, kind == "drain"),
    }


def warm_up(admin: psycopg.Connection, server: EmbeddedPostgres, root: Path, sessions: int) -> dict:
    """CPU ms of a fresh backend's first batch of 50 against its second: its warm-up."""
    dsn = fresh(admin, server, "warm_x", "tmpl_x")
    options = json.dumps(App(workflows=[three_steps], activities=[noop]).activities["noop"].options_json())
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute((root / "bench" / "sql_path.sql").read_text())
    firsts, seconds = [], []
    for i in range(sessions):
        with psycopg.connect(dsn, autocommit=True) as conn:
            (pid,) = conn.execute("SELECT pg_backend_pid()").fetchone()

            def cpu_ms(pid: int = pid) -> float:
                with open(f"/proc/{pid}/schedstat") as stat:
                    return int(stat.read().split()[0]) / 1e6

            for batch, into in ((1, firsts), (2, seconds)):
                t0 = cpu_ms()
                conn.execute("CALL bench.sql_path(50, 50, %s, %s)", (f"warm{i}-{batch}", options))
                into.append(cpu_ms() - t0)
    admin.execute('DROP DATABASE "warm_x"')
    return {
        "first_batch_ms": round(statistics.median(firsts), 1),
        "next_batch_ms": round(statistics.median(seconds), 1),
        "warm_up_ms": round(statistics.median(a - b for a, b in zip(firsts, seconds, strict=True)), 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkout", default=Path("."), type=Path, help="the Harvest checkout to measure")
    parser.add_argument("--n", type=int, default=1500)
    parser.add_argument("--warm-sessions", type=int, default=8, help="fresh sessions to price a warm-up on")
    args = parser.parse_args()
    root = args.checkout.resolve()
    settings = {
        **SERVER_SETTINGS,
        "pg_stat_statements.track": "all",
        "pg_stat_statements.track_planning": "on",
        "pg_stat_statements.max": "10000",
    }
    with (
        EmbeddedPostgres(settings=settings) as server,
        psycopg.connect(server.dsn, autocommit=True) as admin,
    ):
        migrate_templates(admin, server, {"x": root})
        result = {kind: one_side(admin, server, root, kind, args.n) for kind in ("drain", "sql_path")}
        result["warm_up"] = warm_up(admin, server, root, args.warm_sessions)
    result["load"] = round(os.getloadavg()[0], 1)
    drain, sql = result["drain"]["entry_points"], result["sql_path"]["entry_points"]
    print(
        f"{'entry point (drain / SQL path)':34} {'calls/wf':>15} {'rows/call':>15} {'exec us/wf':>15} {'hits/wf':>15}"
    )
    for name in dict.fromkeys([*drain, *sql]):
        d, s = drain.get(name, {}), sql.get(name, {})
        cols = [
            (d.get(k, "-"), s.get(k, "-") if k != "rows_per_call" else 50 if s else "-")
            for k in ("calls_per_wf", "rows_per_call", "exec_us_per_wf", "shared_hit_per_wf")
        ]
        print(f"{name:34} " + " ".join(f"{a!s:>6} / {b!s:<6}" for a, b in cols))
    print(json.dumps(result))


if __name__ == "__main__":
    main()
