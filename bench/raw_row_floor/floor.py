"""The raw-row floor: what one canonical run's rows cost the server with no logic around them.

1. **Derive.** In a fresh, migrated database, an AFTER ROW trigger on every table of the
   ``harvest`` schema (installed only in that throwaway database) records each row write:
   its transaction, table, operation and the row before and after. One canonical run
   (``bench/canonical.py``'s ``three_steps``) is started by an ``AsyncClient`` and run by
   an in-process ``Worker``, exactly as in the drain. The writes that name the run (the
   execution row, its events, its tasks) are kept, in order, grouped by transaction;
   writes that name no run (the worker's registration and heartbeats) are listed apart.
   ``pg_stat_user_tables`` deltas are read beside them.
2. **Generate.** A pgbench script that repeats those writes for 50 runs per transaction,
   in the same transactions and order, as plain statements: each INSERT
   ``SELECT``s the captured row's values (same sizes) for 50 generated keys, each UPDATE
   sets the columns that changed to the values they got, each DELETE removes the rows.
   The tables (schema ``floor``) have the same columns and primary keys and nothing
   else: no CHECK, no foreign key, no other index, no trigger, no PL/pgSQL.
3. **Measure.** pgbench runs it at 1, 2 and 4 clients; runs/s = script executions/s x 50.

``python bench/raw_row_floor/floor.py --dsn DSN`` (a fresh migrated database) derives,
writes ``floor.sql``, ``setup.sql`` and ``writes.json`` (the writes per run) next to this
file when ``--write`` is given, and measures the script it derived. Prints one JSON object (bench/common.py).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent))

import psycopg
from ceiling import bin_dir
from common import emit, server_cpu_seconds, settle_stats

RUNS_PER_TRANSACTION = 50
STRIDE = 5000  # generated bigint keys: batch * STRIDE + k * 50 + g (k < 100 writes per run and table)

AUDIT = """
CREATE TABLE public.floor_audit (
    seq bigserial PRIMARY KEY, xid bigint NOT NULL, tbl text NOT NULL, op text NOT NULL,
    old jsonb, new jsonb);
CREATE FUNCTION public.floor_audit() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO public.floor_audit (xid, tbl, op, old, new)
    VALUES (txid_current(), TG_TABLE_NAME, TG_OP,
            CASE WHEN TG_OP <> 'INSERT' THEN to_jsonb(OLD) END,
            CASE WHEN TG_OP <> 'DELETE' THEN to_jsonb(NEW) END);
    RETURN NULL;
END $$;
"""

# Per table: the key of a row, and which of its columns hold the run's id or a generated number.
KEYS = {"executions": ["id"], "events": ["execution_id", "event_id"], "tasks": ["id"]}
RUN_ID_COLUMNS = {"executions": "id", "events": "execution_id", "tasks": "execution_id"}
NUMBERED = {"tasks": "id", "events": "global_id"}  # identity columns: generated per run


def _install_audit(conn: psycopg.Connection) -> list[str]:
    conn.execute(AUDIT)
    tables = [
        r[0]
        for r in conn.execute(
            "SELECT c.relname FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace"
            " WHERE n.nspname = 'harvest' AND c.relkind IN ('r', 'p') ORDER BY 1"
        )
    ]
    for t in tables:
        conn.execute(
            f"CREATE TRIGGER zz_floor_audit AFTER INSERT OR UPDATE OR DELETE ON harvest.{t}"
            " FOR EACH ROW EXECUTE FUNCTION public.floor_audit()"
        )
    return tables


def _table_stats(conn: psycopg.Connection) -> dict:
    conn.execute("SELECT pg_stat_clear_snapshot()")
    return {
        r[0]: {"ins": r[1], "upd": r[2], "del": r[3], "hot_upd": r[4]}
        for r in conn.execute(
            "SELECT relname, n_tup_ins, n_tup_upd, n_tup_del, n_tup_hot_upd FROM pg_stat_user_tables"
            " WHERE schemaname = 'harvest'"
        )
    }


async def _one_run(dsn: str) -> str:
    import harvest_bench
    from canonical import three_steps

    from harvest import AsyncClient

    async with harvest_bench.InProcessWorker(dsn):
        client = await AsyncClient.connect(dsn, pool_size=1, check_schema=False)
        try:
            handle = await client.start_workflow(three_steps, 0)
            await harvest_bench._wait_done(dsn, 1, 60)
        finally:
            await client.close()
    return str(handle.execution_id)


def derive(dsn: str) -> dict:
    """Run one canonical workflow on this fresh database and return what it wrote."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        _install_audit(conn)
        settle_stats()
        before = _table_stats(conn)
    run_id = asyncio.run(_one_run(dsn))
    settle_stats()
    with psycopg.connect(dsn, autocommit=True) as conn:
        after = _table_stats(conn)
        rows = conn.execute("SELECT xid, tbl, op, old, new FROM public.floor_audit ORDER BY seq").fetchall()
        columns = {
            t: conn.execute(
                "SELECT attname, format_type(atttypid, atttypmod) FROM pg_attribute"
                " WHERE attrelid = ('harvest.' || %s)::regclass AND attnum > 0 AND NOT attisdropped"
                " ORDER BY attnum",
                (t,),
            ).fetchall()
            for t in KEYS
        }
    writes, background = [], {}
    for xid, tbl, op, old, new in rows:
        row = new if new is not None else old
        if tbl in RUN_ID_COLUMNS and str(row.get(RUN_ID_COLUMNS[tbl])) == run_id:
            writes.append({"xid": xid, "table": tbl, "op": op, "old": old, "new": new})
        else:
            key = f"{tbl} {op}"
            background[key] = background.get(key, 0) + 1
    stats = {
        t: {k: after[t][k] - before.get(t, {}).get(k, 0) for k in after[t]}
        for t in after
        if any(after[t][k] != before.get(t, {}).get(k, 0) for k in after[t])
    }
    return {
        "run_id": run_id,
        "writes": writes,
        "background": background,
        "table_stat_deltas": stats,
        "columns": {t: [list(c) for c in cols] for t, cols in columns.items()},
    }


def _quote(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def _literal(value, pg_type: str) -> str:
    if value is None:
        return f"NULL::{pg_type}"
    if pg_type in ("jsonb", "json"):
        return f"{_quote(json.dumps(value, separators=(', ', ': ')))}::{pg_type}"
    if pg_type.endswith("[]"):
        items = ",".join('"' + str(v).replace('"', '\\"') + '"' for v in value)
        return f"{_quote('{' + items + '}')}::{pg_type}"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float) and pg_type != "text":
        return f"{value}::{pg_type}"
    return f"{_quote(str(value))}::{pg_type}"


RUN_UUID = "lpad(to_hex(:floor_batch * 50 + g), 32, '0')::uuid"
GEN = f"generate_series(1, {RUNS_PER_TRANSACTION}) AS g"


def _numbered(k: int) -> str:
    return f":floor_batch * {STRIDE} + {k * 50} + g"


def generate(derived: dict) -> tuple[str, str, dict]:
    """(setup.sql, the pgbench script, a summary of the writes per run)."""
    columns = derived["columns"]
    setup = [
        "-- The raw-row floor's tables (bench/raw_row_floor/floor.py): Harvest's columns and",
        "-- primary keys, nothing else. Generated; do not edit.",
        "DROP SCHEMA IF EXISTS floor CASCADE;",
        "CREATE SCHEMA floor;",
        "CREATE SEQUENCE floor.batch;",
    ]
    for t, cols in columns.items():
        body = ", ".join(f"{name} {typ}" for name, typ in cols)
        setup.append(f"CREATE TABLE floor.{t} ({body}, PRIMARY KEY ({', '.join(KEYS[t])}));")
    types = {t: dict(cols) for t, cols in columns.items()}
    numbers: dict[tuple[str, int], int] = {}  # (table, captured identity value) -> k
    counters: dict[str, int] = {}

    def value_expr(t: str, col: str, value) -> str:
        if col == RUN_ID_COLUMNS[t] and str(value) == derived["run_id"]:
            return RUN_UUID
        if NUMBERED.get(t) == col:
            return _numbered(numbers[(t, value)])
        return _literal(value, types[t][col])

    def where(t: str, row: dict) -> str:
        if t == "executions":
            return f"id = ANY (ARRAY(SELECT {RUN_UUID} FROM {GEN}))"
        if t == "events":
            return (
                f"execution_id = ANY (ARRAY(SELECT {RUN_UUID} FROM {GEN})) AND event_id = {row['event_id']}"
            )
        base = f":floor_batch * {STRIDE} + {numbers[(t, row['id'])] * 50}"
        return f"id BETWEEN {base} + 1 AND {base} + {RUNS_PER_TRANSACTION}"

    script = [
        "-- The raw-row floor (bench/raw_row_floor/floor.py): the rows one canonical run writes,",
        f"-- {RUNS_PER_TRANSACTION} runs per transaction, in the run's transactions and order.",
        "-- Generated from a run of the current code; do not edit.",
    ]
    summary: dict[str, int] = {}
    transactions = 0
    last_xid = None
    for w in derived["writes"]:
        t, op = w["table"], w["op"]
        summary[f"{t} {op.lower()}"] = summary.get(f"{t} {op.lower()}", 0) + 1
        if w["xid"] != last_xid:
            if last_xid is not None:
                script.append("COMMIT;")
            script.append("BEGIN;")
            if last_xid is None:
                script.append("SELECT nextval('floor.batch') AS floor_batch \\gset")
            transactions += 1
            last_xid = w["xid"]
        if op == "INSERT":
            if t in NUMBERED:
                counters[t] = counters.get(t, -1) + 1
                numbers[(t, w["new"][NUMBERED[t]])] = counters[t]
            cols = [c for c, _ in columns[t]]
            values = ", ".join(value_expr(t, c, w["new"].get(c)) for c in cols)
            script.append(f"INSERT INTO floor.{t} ({', '.join(cols)}) SELECT {values} FROM {GEN};")
        elif op == "UPDATE":
            changed = [c for c, _ in columns[t] if w["old"].get(c) != w["new"].get(c)]
            if not changed:
                sets = f"{KEYS[t][-1]} = {KEYS[t][-1]}"  # an update that changes nothing still writes
            else:
                sets = ", ".join(f"{c} = {_literal(w['new'].get(c), types[t][c])}" for c in changed)
            script.append(f"UPDATE floor.{t} SET {sets} WHERE {where(t, w['old'])};")
        else:
            script.append(f"DELETE FROM floor.{t} WHERE {where(t, w['old'])};")
    if last_xid is not None:
        script.append("COMMIT;")
    summary["transactions"] = transactions
    return "\n".join(setup) + "\n", "\n".join(script) + "\n", summary


def run_pgbench(dsn: str, script: str, clients: int, seconds: float) -> dict:
    url = urlparse(dsn)
    with tempfile.NamedTemporaryFile("w", suffix=".sql", delete=False) as fh:
        fh.write(script)
        path = fh.name
    os.chmod(path, 0o644)
    try:
        cmd = [
            str(bin_dir() / "pgbench"),
            "-n",
            "-f",
            path,
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
        server0 = server_cpu_seconds(dsn)
        proc = subprocess.run(cmd, capture_output=True, text=True, check=False)
        _backends_gone(dsn)
        server_s = server_cpu_seconds(dsn) - server0
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        raise RuntimeError(f"pgbench failed ({proc.returncode}): {proc.stderr[-2000:]}")
    tps = float(re.search(r"tps = ([\d.]+)", proc.stdout).group(1))
    scripts = int(re.search(r"number of transactions actually processed: (\d+)", proc.stdout).group(1))
    return {
        "clients": clients,
        "scripts_per_s": round(tps, 1),
        "runs_per_s": round(tps * RUNS_PER_TRANSACTION, 1),
        # The whole server's CPU (every backend, the postmaster's helpers) per run, as the SQL
        # path's server_cpu_ms_per_wf: at one client the floor's server work per run beside it.
        "server_cpu_ms_per_run": round(server_s * 1000 / (scripts * RUNS_PER_TRANSACTION), 4)
        if scripts
        else None,
    }


def _backends_gone(dsn: str, timeout: float = 2.0) -> None:
    """Wait until pgbench's backends have left the database, and a moment for the postmaster to
    reap them: an exited backend's CPU is in the server's reading only once it is reaped."""
    deadline = time.monotonic() + timeout
    with psycopg.connect(dsn, autocommit=True) as conn:
        while time.monotonic() < deadline:
            others = conn.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database()"
                " AND pid <> pg_backend_pid()"
            ).fetchone()[0]
            if not others:
                break
            time.sleep(0.01)
    time.sleep(0.1)


def statements(dsn: str, script: str, limit: int = 12) -> list[dict] | None:
    """Per-statement server time of the floor (pg_stat_statements, one short pgbench run)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        try:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
            conn.execute("SELECT pg_stat_statements_reset()")
        except psycopg.Error:
            return None
    run_pgbench(dsn, script, 1, 1)
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 100), calls, total_exec_time"
            " FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database"
            " WHERE datname = current_database()) AND query LIKE '%%floor.%%' ORDER BY total_exec_time DESC"
            " LIMIT %s",
            (limit,),
        ).fetchall()
    return [
        {"query": q, "calls": c, "us_per_run": round(t * 1000 / (c * RUNS_PER_TRANSACTION), 2)}
        for q, c, t in rows
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--dsn", required=True, help="a fresh database with Harvest's schema migrated")
    parser.add_argument("--clients", default="1,2,4")
    parser.add_argument("--seconds", type=float, default=5.0)
    parser.add_argument(
        "--write", action="store_true", help="write setup.sql and floor.sql next to this file"
    )
    args = parser.parse_args()
    derived = derive(args.dsn)
    setup, script, summary = generate(derived)
    committed = HERE / "writes.json"
    if args.write:
        (HERE / "setup.sql").write_text(setup)
        (HERE / "floor.sql").write_text(script)
        committed.write_text(json.dumps(summary, indent=2, sort_keys=True) + "\n")
    with psycopg.connect(args.dsn, autocommit=True) as conn:
        conn.execute(setup)
    runs = []
    for clients in (int(c) for c in args.clients.split(",")):
        runs.append(run_pgbench(args.dsn, script, clients, args.seconds))
        print(f"raw-row floor: {runs[-1]}", file=sys.stderr, flush=True)
    emit(
        {
            "system": "pgbench",
            "mode": "raw_row_floor",
            "runs_per_transaction": RUNS_PER_TRANSACTION,
            "writes_per_run": summary,
            "background_writes": derived["background"],
            "table_stat_deltas": derived["table_stat_deltas"],
            # The committed script writes what a run writes today (counts per table and operation;
            # the script measured is always the one derived in this run).
            "committed_script_current": committed.exists() and json.loads(committed.read_text()) == summary,
            "runs": runs,
            "best_runs_per_s": max(r["runs_per_s"] for r in runs),
            "top_statements": statements(args.dsn, script),
            # The same rows in this many statements per run (the SQL path's statement-cost row
            # prints its own count beside it).
            "statements_per_run": round(
                sum(1 for line in script.splitlines() if re.match(r"(INSERT|UPDATE|DELETE) ", line))
                / RUNS_PER_TRANSACTION,
                2,
            ),
            "measured_at": datetime.now(UTC).isoformat(),
        }
    )


if __name__ == "__main__":
    main()
