"""What one canonical run costs the database, in counts the machine's load does not move.

On one embedded server with ``bench/run.py``'s settings (autovacuum off, so no vacuum's WAL
or ``ANALYZE`` lands in the window), for each checkout given: a template migrated by its own
code, a fresh clone, ``bench.sql_path`` (its ``bench/sql_path.sql``) for ``--warm`` runs, a
``CHECKPOINT``, then ``--n`` runs at ``--batch`` a call on one backend with
``pg_stat_statements.track = all`` and ``track_functions = all``. Per run: nested statements
(and writes), PL/pgSQL calls by function, shared buffers hit and dirtied, WAL records, bytes
and full-page images (``pg_walinspect`` over the window), heap rows inserted, updated (HOT or not) and deleted by
table, and the WAL records by relation and record type (``pg_walinspect``: a B-tree
``INSERT_LEAF`` is one index entry written).

``--drain`` counts the Python drain instead (``bench/harvest_bench.py --mode workflows``: 8
starters and one in-process Worker, the side's own library), the tracking set on the database
so every session of the drain has it. Its window is the whole drain, the worker's start and its
stop included, so no run is half done in it; the worker's start-up is a fixed cost that ``--n``
spreads. Besides the counts above it prints the top-level statements by kind (calls, rows a
call, buffers, WAL, plans: ``track_planning`` is on, so a statement not prepared on its
connection shows a plan a call), commits and rollbacks, sessions, and every nested statement's
calls and buffers (``nested_statements``, to set against the SQL path's); ``harvest_bench.py``'s
own polls and tallies are left out of the statements. The drain's counts move with its batch
sizes, which move with the load: take them from a quiet machine, and compare two checkouts side
by side.

    python bench/run_costs.py --checkout . --checkout /tmp/base --n 1000
    python bench/run_costs.py --checkout . --checkout /tmp/base --n 4000 --drain --fixed 1000

``--fixed N0`` (with ``--drain``) also drains N0 runs on another clone and prints the counts per
run of the difference between the two drains (``marginal``): what a run costs once the drain is
warm, and the start-up's fixed cost per drain.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg
from run import SERVER_SETTINGS
from sql_path_ab import OPTIONS, bench_json, fresh, migrate_templates, side_env

from harvest.db.embedded import EmbeddedPostgres

TABLES = """
SELECT relname, n_tup_ins, n_tup_upd, n_tup_hot_upd, n_tup_del
FROM pg_stat_user_tables WHERE schemaname = 'harvest'
"""
FUNCTIONS = "SELECT funcname, calls FROM pg_stat_user_functions WHERE schemaname = 'harvest'"
STATEMENTS = """
SELECT toplevel, query, calls, shared_blks_hit, shared_blks_dirtied, wal_records, wal_bytes, rows, plans
FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())
"""
DATABASE = """
SELECT xact_commit, xact_rollback, sessions FROM pg_stat_database WHERE datname = current_database()
"""
# What harvest_bench.py itself asks while and after a drain (its poll, its tallies): not the
# worker's or the client's.
BENCH_OWN = (
    "SELECT count(*) FROM harvest.executions",
    "SELECT count(*) FROM harvest.events",
    "SELECT created_at, completed_at, status",
    "SELECT sessions FROM pg_stat_database",
    "SELECT xact_commit",
    "SELECT sum(xact_commit)",
    "SELECT pg_stat_statements_reset",
    "SELECT pg_stat_force_next_flush",
    "SELECT pg_stat_clear_snapshot",
    "SELECT pg_backend_pid",
    "SELECT pid",
    # run_costs.py's own snapshots
    "SELECT funcname, calls FROM pg_stat_user_functions",
    "SELECT relname, n_tup_ins",
    "SELECT pg_current_wal_lsn()",
    "SELECT pg_sleep(",
)


def kind(query: str) -> str:
    """A top-level statement's kind: the Harvest function it calls, else its first words."""
    text = " ".join(query.split())
    for prefix in ("SELECT * FROM harvest.", "SELECT harvest.", "CALL harvest.", "select * from harvest."):
        if text.startswith(prefix):
            return "harvest." + text[len(prefix) :].split("(")[0]
    if text.upper().startswith(("SET ", "RESET ", "SHOW ")):
        return text.split(" = ")[0].split(" TO ")[0][:60]
    if "set_config" in text:
        return "set_config"
    if "pg_notify" in text:
        return "pg_notify"
    return text[:60]


# Each WAL block reference in the window, by relation and record type (a record that touches
# two blocks of one index, a split, counts once per block).
BLOCKS = """
SELECT coalesce(c.relname, b.relfilenode::text), b.resource_manager, b.record_type,
       count(DISTINCT b.start_lsn), count(*) FILTER (WHERE b.block_fpi_length > 0),
       sum(b.record_length)
FROM pg_get_wal_block_info(%s::pg_lsn, %s::pg_lsn) AS b
LEFT JOIN pg_class AS c ON c.relfilenode = b.relfilenode AND b.reldatabase = (
    SELECT oid FROM pg_database WHERE datname = current_database())
GROUP BY 1, 2, 3
"""


def snapshot(conn: psycopg.Connection) -> dict:
    return {
        "tables": {r[0]: r[1:] for r in conn.execute(TABLES).fetchall()},
        "functions": dict(conn.execute(FUNCTIONS).fetchall()),
        "lsn": conn.execute("SELECT pg_current_wal_lsn()::text").fetchone()[0],
        "database": conn.execute(DATABASE).fetchone(),
    }


def per_run(value: float, n: int, digits: int = 2) -> float:
    return round(value / n, digits)


def measure(dsn: str, root: Path, n: int, batch: int, warm: int, options: str, drain: bool) -> dict:
    procedure = (root / "bench" / "sql_path.sql").read_text()
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
        conn.execute(procedure)
        if warm and not drain:
            conn.execute("CALL bench.sql_path(%s, %s, 'warm', %s)", (warm, batch, options))
        if drain:
            # Every session of the drain (the worker's pools, the client's) tracks as the SQL
            # path's one session does.
            name = conn.execute("SELECT current_database()").fetchone()[0]
            conn.execute(f"ALTER DATABASE \"{name}\" SET pg_stat_statements.track = 'all'")
            conn.execute(f"ALTER DATABASE \"{name}\" SET track_functions = 'all'")
            # (plans: a statement psycopg has prepared on its connection plans once, another each call)
            conn.execute(f'ALTER DATABASE "{name}" SET pg_stat_statements.track_planning = on')
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_sleep(1.5)")  # the warm-up's backend's stats flushed at its exit
        conn.execute("CHECKPOINT")
        conn.execute("SELECT pg_stat_statements_reset()")
        before = snapshot(conn)
    extra: dict = {}
    if drain:
        out = bench_json(root, "harvest_bench.py", "--dsn", dsn, "--mode", "workflows", "--n", f"{n}")
        extra = {"throughput": out["throughput"], "steps": out["steps"]}
    else:
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute("SET pg_stat_statements.track = 'all'")
            conn.execute("SET track_functions = 'all'")
            conn.execute("SET pg_stat_statements.track_planning = on")
            conn.execute("CALL bench.sql_path(%s, %s, 'run', %s)", (n, batch, options))
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT pg_sleep(1.5)")  # the measured backends' stats flushed at their exit
        after = snapshot(conn)
        statements = conn.execute(STATEMENTS).fetchall()
        blocks = conn.execute(BLOCKS, (before["lsn"], after["lsn"])).fetchall()
        wal_stats = conn.execute(
            'SELECT "resource_manager/record_type", sum(count), sum(combined_size) FROM pg_get_wal_stats(%s::pg_lsn,'
            " %s::pg_lsn) GROUP BY 1 HAVING sum(count) > 0 ORDER BY 3 DESC",
            (before["lsn"], after["lsn"]),
        ).fetchall()
        wal_total = conn.execute(
            "SELECT sum(count), sum(fpi_size), pg_wal_lsn_diff(%s::pg_lsn, %s::pg_lsn)"
            " FROM pg_get_wal_stats(%s::pg_lsn, %s::pg_lsn)",
            (after["lsn"], before["lsn"], before["lsn"], after["lsn"]),
        ).fetchone()
    tables = {}
    for name, row in after["tables"].items():
        d = [a - b for a, b in zip(row, before["tables"].get(name, (0, 0, 0, 0)), strict=True)]
        if any(d):
            ins, upd, hot, dele = d
            tables[name] = {
                "ins": per_run(ins, n),
                "upd": per_run(upd, n),
                "hot": per_run(hot, n),
                "non_hot": per_run(upd - hot, n),
                "del": per_run(dele, n),
            }
    functions = {
        name: per_run(calls - before["functions"].get(name, 0), n)
        for name, calls in sorted(after["functions"].items(), key=lambda kv: -kv[1])
        if calls - before["functions"].get(name, 0)
    }
    wal = wal_total
    statements = [r for r in statements if not (r[0] and " ".join(r[1].split()).startswith(BENCH_OWN))]
    nested = [r for r in statements if not r[0]]
    top = [r for r in statements if r[0]]
    by_kind: dict[str, list[float]] = defaultdict(lambda: [0.0] * 7)
    for r in top:
        row = by_kind[kind(r[1])]
        for i, value in enumerate((r[2], r[7], r[3], r[4], r[5], r[6], r[8])):
            row[i] += float(value)
    database = [a - b for a, b in zip(after["database"], before["database"], strict=True)]
    by_relation: dict[str, dict[str, float]] = defaultdict(dict)
    index_entries: dict[str, float] = {}
    bytes_by_relation: dict[str, float] = defaultdict(float)
    for rel, rmgr, rtype, records, fpis, record_bytes in blocks:
        bytes_by_relation[rel] += float(record_bytes) / n
        by_relation[rel][f"{rmgr}/{rtype}"] = per_run(records, n)
        if fpis:
            by_relation[rel]["FPI"] = by_relation[rel].get("FPI", 0) + per_run(fpis, n)
        if rmgr == "Btree" and rtype in ("INSERT_LEAF", "INSERT_POST"):
            index_entries[rel] = index_entries.get(rel, 0) + per_run(records, n)
        if rmgr == "Gin" and rtype in ("INSERT", "INSERT_LISTPAGE"):
            index_entries[rel] = index_entries.get(rel, 0) + per_run(records, n)
    dearest = sorted(nested, key=lambda r: -(r[3] + r[4] * 10))[:15]
    return {
        **extra,
        "commits": per_run(database[0], n, 3),
        "rollbacks": per_run(database[1], n, 3),
        "sessions": database[2],
        "top_level": per_run(sum(r[2] for r in top), n, 3),
        "top_level_by_kind": {
            k: {
                "calls": per_run(v[0], n, 4),
                "rows_a_call": round(v[1] / v[0], 2) if v[0] else 0,
                "hit": per_run(v[2], n, 1),
                "dirtied": per_run(v[3], n, 3),
                "wal_records": per_run(v[4], n, 2),
                "wal_bytes": per_run(v[5], n, 0),
                "plans": per_run(v[6], n, 4),
            }
            for k, v in sorted(by_kind.items(), key=lambda kv: -kv[1][0])
        },
        "statements": per_run(sum(r[2] for r in nested), n),
        "writes": per_run(
            sum(r[2] for r in nested if r[1].lstrip().upper().startswith(("INSERT", "UPDATE", "DELETE"))), n
        ),
        "function_calls": per_run(sum(functions.values()) * n, n),
        "shared_hit": per_run(sum(r[3] for r in top), n, 1),
        "shared_dirtied": per_run(sum(r[4] for r in top), n),
        "wal_records": per_run(float(wal[0]), n, 1),
        "wal_fpi_bytes": per_run(float(wal[1]), n, 0),
        "wal_bytes": per_run(float(wal[2]), n, 0),
        "index_entries": per_run(sum(index_entries.values()) * n, n),
        "index_entries_by_index": dict(sorted(index_entries.items(), key=lambda kv: -kv[1])),
        "tables": tables,
        "functions": functions,
        "wal_by_relation": {k: by_relation[k] for k in sorted(by_relation)},
        "wal_record_bytes_by_relation": {
            k: round(v) for k, v in sorted(bytes_by_relation.items(), key=lambda kv: -kv[1]) if v >= 1
        },
        "wal_by_resource_manager": {
            f"{r[0]}": [per_run(float(r[1]), n), per_run(float(r[2]), n, 0)] for r in wal_stats
        },
        # Every nested statement's calls and buffers hit per run, to set a drain against the SQL path.
        "nested_statements": {
            " ".join(r[1].split())[:120]: [per_run(r[2], n, 3), per_run(r[3], n, 1)]
            for r in sorted(nested, key=lambda r: -r[2])
        },
        "dearest_statements": [
            {
                "query": " ".join(r[1].split())[:140],
                "calls": per_run(r[2], n),
                "hit": per_run(r[3], n, 1),
                "dirtied": per_run(r[4], n),
                "wal_bytes": per_run(float(r[6]), n, 0),
            }
            for r in dearest
        ],
    }


# The drain's counts that --fixed sets against a smaller drain's.
MARGINAL = (
    "commits",
    "top_level",
    "statements",
    "writes",
    "function_calls",
    "shared_hit",
    "shared_dirtied",
    "wal_records",
    "wal_bytes",
    "index_entries",
)


def marginal(big: dict, n: int, small: dict, n_small: int) -> dict:
    """Per run of the difference between a drain of ``n`` runs and one of ``n_small``: the
    counts without the drain's start-up and stop (the worker's and pools' sessions warming,
    the housekeeping's first calls), and those fixed costs per drain."""
    out: dict = {"per_run": {}, "fixed": {}, "top_level_calls_per_run": {}}
    for key in MARGINAL:
        per = (big[key] * n - small[key] * n_small) / (n - n_small)
        out["per_run"][key] = round(per, 3)
        out["fixed"][key] = round(small[key] * n_small - per * n_small, 1)
    for key, row in big["top_level_by_kind"].items():
        other = small["top_level_by_kind"].get(key, {"calls": 0})["calls"]
        out["top_level_calls_per_run"][key] = round((row["calls"] * n - other * n_small) / (n - n_small), 4)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--checkout", action="append", type=Path, help="a Harvest checkout (repeatable)")
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--warm", type=int, default=200)
    parser.add_argument("--drain", action="store_true", help="the Python drain instead of the SQL path")
    parser.add_argument(
        "--fixed",
        type=int,
        default=0,
        help="with --drain: also a drain of this many runs, and the counts per run of the difference (no start-up in them)",
    )
    args = parser.parse_args()
    roots = [c.resolve() for c in (args.checkout or [Path(".")])]
    options = subprocess.run(
        [sys.executable, "-c", OPTIONS], env=side_env(roots[0]), check=True, capture_output=True, text=True
    ).stdout.strip()
    settings = dict(SERVER_SETTINGS, autovacuum="off", **{"pg_stat_statements.max": "10000"})
    results = {}
    with (
        EmbeddedPostgres(settings=settings) as server,
        psycopg.connect(server.dsn, autocommit=True) as admin,
    ):
        sides = {f"s{i}": root for i, root in enumerate(roots)}
        migrate_templates(admin, server, sides)
        for key, root in sides.items():
            dsn = fresh(admin, server, f"run_{key}", f"tmpl_{key}")
            results[str(root)] = measure(dsn, root, args.n, args.batch, args.warm, options, args.drain)
            admin.execute(f'DROP DATABASE "run_{key}"')
            if args.drain and args.fixed:
                dsn = fresh(admin, server, f"run_{key}", f"tmpl_{key}")
                small = measure(dsn, root, args.fixed, args.batch, args.warm, options, True)
                admin.execute(f'DROP DATABASE "run_{key}"')
                results[str(root)]["marginal"] = marginal(results[str(root)], args.n, small, args.fixed)
    print(json.dumps(results, default=float))


if __name__ == "__main__":
    main()
