"""Paired A/B of the SQL path's server CPU per workflow: two checkouts of Harvest
(a baseline and a candidate), alternating, on one embedded server.

Each side gets its own template database migrated by its own code (its own
functions/), and every run a fresh clone of it. A run is one client calling
``bench.sql_path`` (bench/sql_path.sql of that side) for ``--n`` workflows in
batches of ``--batch``; the backend's CPU is read from
``/proc/<pg_backend_pid()>/stat`` (utime + stime) around the ``CALL``. Then, on
another fresh clone of each side, the statements per workflow counted by
``pg_stat_statements`` with ``track = all`` (sql_path.py's statement pass).
Prints one line per pair and a JSON summary.

    python bench/sql_path_ab.py --base /work/wt/base26 --candidate . --pairs 6
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg
from run import SERVER_SETTINGS

from harvest.db.embedded import EmbeddedPostgres

MIGRATE = "import sys; from harvest.db.migrate import Migrator; Migrator(sys.argv[1]).run()"
OPTIONS = (
    "import json; from harvest import App; from canonical import noop, three_steps;"
    " print(json.dumps(App(workflows=[three_steps], activities=[noop]).activities['noop'].options_json()))"
)
TICKS = os.sysconf("SC_CLK_TCK")


def side_env(root: Path, bench: Path | None = None) -> dict[str, str]:
    """The environment of a side's process: ``root``'s library and bench scripts (or ``bench``'s)."""
    env = dict(os.environ)
    env["PYTHONPATH"] = f"{root / 'harvest_py'}{os.pathsep}{bench or root / 'bench'}"
    return env


def bench_json(root: Path, script: str, *args: str, bench: Path | None = None) -> dict[str, Any]:
    """Run ``bench/<script> args...`` (of ``bench``, else of ``root``) with ``root``'s library,
    and return the JSON object its last line prints (its result)."""
    folder = bench or root / "bench"
    out = subprocess.run(
        [sys.executable, str(folder / script), *args],
        env=side_env(root, folder),
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    result: dict[str, Any] = json.loads(out.strip().splitlines()[-1])
    return result


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS  # utime, stime (fields 14, 15)


def fresh(admin: psycopg.Connection, server: EmbeddedPostgres, name: str, template: str) -> str:
    admin.execute(f'DROP DATABASE IF EXISTS "{name}"')
    admin.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')
    return server.dsn_for(name)


def migrate_templates(admin: psycopg.Connection, server: EmbeddedPostgres, sides: dict[str, Path]) -> None:
    """A template database per side ("tmpl_base", "tmpl_cand"), migrated by that side's code."""
    for key, root in sides.items():
        admin.execute(f'CREATE DATABASE "tmpl_{key}"')
        subprocess.run(
            [sys.executable, "-c", MIGRATE, server.dsn_for(f"tmpl_{key}")], env=side_env(root), check=True
        )


def paired_runs(
    admin: psycopg.Connection,
    server: EmbeddedPostgres,
    pairs: int,
    together: bool,
    run: Callable[[str, str], Any],
) -> Iterator[dict[str, Any]]:
    """The pairs of an A/B: each side's ``run(side, dsn)`` on a fresh clone of its template, the
    base first in odd pairs and the candidate first in even ones (or both at once with
    ``together``); yields {"pair", "first", "base", "cand"} as each pair ends."""
    for i in range(pairs):
        order = ["base", "cand"] if i % 2 == 0 else ["cand", "base"]
        row: dict[str, Any] = {"pair": i + 1, "first": order[0]}
        dsns = {key: fresh(admin, server, f"run_{key}", f"tmpl_{key}") for key in order}
        if together:
            with ThreadPoolExecutor(2) as pool:
                runs = {key: pool.submit(run, key, dsns[key]) for key in order}
                row.update({key: done.result() for key, done in runs.items()})
        else:
            for key in order:
                row[key] = run(key, dsns[key])
        for key in order:
            admin.execute(f'DROP DATABASE "run_{key}"')
        yield row


def one_run(dsn: str, procedure: str, n: int, batch: int, options: str) -> tuple[float, float]:
    """(backend CPU ms per workflow, workflows per second)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(procedure)
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        before, started = cpu_seconds(pid), time.perf_counter()
        conn.execute("CALL bench.sql_path(%s, %s, 'ab', %s)", (n, batch, options))
        elapsed, cpu = time.perf_counter() - started, cpu_seconds(pid) - before
    return cpu * 1000 / n, n / elapsed


def statements(dsn: str, procedure: str, n: int, batch: int, options: str) -> dict:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(procedure)
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT pg_stat_statements_reset()")
        conn.execute("SET pg_stat_statements.track = 'all'")
        conn.execute("CALL bench.sql_path(%s, %s, 'st', %s)", (n, batch, options))
        nested, writes = conn.execute(
            "SELECT sum(calls), sum(calls) FILTER (WHERE query ~* '^\\s*(INSERT|UPDATE|DELETE)')"
            " FROM pg_stat_statements WHERE dbid = (SELECT oid FROM pg_database"
            " WHERE datname = current_database()) AND NOT toplevel"
        ).fetchone()
    return {"statements_per_workflow": float(nested) / n, "writes_per_workflow": float(writes or 0) / n}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, type=Path)
    parser.add_argument("--candidate", default=Path("."), type=Path)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument(
        "--together", action="store_true", help="run each pair's two sides at once (both see the same load)"
    )
    parser.add_argument(
        "--autovacuum-off",
        action="store_true",
        help="no autovacuum: no ANALYZE in the middle of a run changing its plans (less noise)",
    )
    args = parser.parse_args()
    settings = dict(SERVER_SETTINGS, **({"autovacuum": "off"} if args.autovacuum_off else {}))
    sides = {"base": args.base.resolve(), "cand": args.candidate.resolve()}
    procedures = {k: (root / "bench" / "sql_path.sql").read_text() for k, root in sides.items()}
    options = subprocess.run(
        [sys.executable, "-c", OPTIONS],
        env=side_env(sides["cand"]),
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    with (
        EmbeddedPostgres(settings=settings) as server,
        psycopg.connect(server.dsn, autocommit=True) as admin,
    ):
        migrate_templates(admin, server, sides)
        counts = {
            k: statements(
                fresh(admin, server, f"st_{k}", f"tmpl_{k}"), procedures[k], 200, args.batch, options
            )
            for k in sides
        }
        print(json.dumps({"statements": counts}), flush=True)
        pairs = []
        for row in paired_runs(
            admin,
            server,
            args.pairs,
            args.together,
            lambda key, dsn: one_run(dsn, procedures[key], args.n, args.batch, options),
        ):
            row["ratio"] = row["cand"][0] / row["base"][0]
            pairs.append(row)
            print(
                f"pair {row['pair']} ({row['first']} first): base {row['base'][0]:.2f} ms/wf ({row['base'][1]:.0f} wf/s)"
                f"  cand {row['cand'][0]:.2f} ms/wf ({row['cand'][1]:.0f} wf/s)  ratio {row['ratio']:.2f}"
                f"  load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
        print(
            json.dumps(
                {
                    "median_ratio": round(statistics.median(p["ratio"] for p in pairs), 3),
                    "ratios": [round(p["ratio"], 3) for p in pairs],
                    "median_base_wf_s": round(statistics.median(p["base"][1] for p in pairs), 1),
                    "median_cand_wf_s": round(statistics.median(p["cand"][1] for p in pairs), 1),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
