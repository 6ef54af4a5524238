"""The hand-off's queue probes in the canonical drain: what ``harvest._may_hand_off``'s reads of
``tasks_claimable`` cost per call, and what one such read touches while the drain runs.

Each round runs ``bench/harvest_bench.py --mode workflows`` of each checkout (alternating
order, each on a fresh clone of its own migrated template) on one embedded server with
``pg_stat_statements.track = all``. While the drain runs, another session samples
``EXPLAIN (ANALYZE, BUFFERS)`` of two probes of the ``default`` queue every ``--every``
seconds: the head read (the highest pending priority, ``ORDER BY priority DESC LIMIT 1``)
and the bounded one (a pending task above priority 0). After each drain it prints the
statements of ``_may_hand_off`` from ``pg_stat_statements``: calls per workflow, microseconds
and shared buffers per call.

    python bench/hand_off_probe.py --base /work/wt/base --candidate . --rounds 1 --n 1000

With ``--micro`` it times the two probe shapes alone instead, as PL/pgSQL statements (a
cached plan with the priority as a parameter) in one backend: ``--calls`` calls per loop,
the two shapes alternating ``--rounds`` times, on the candidate's schema, in two states of
the ``default`` queue: 2,000 runs started and 1,000 of their workflow tasks claimed (a
backlog behind the claimed tasks' dead entries), then all 2,000 claimed (an empty queue
whose entries vacuum has not removed). Backend CPU from /proc/<pid>/schedstat.

    python bench/hand_off_probe.py --base /work/wt/base --candidate . --micro --rounds 6
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg
from run import SERVER_SETTINGS
from sql_path_ab import bench_json, fresh, migrate_templates

from harvest.db.embedded import EmbeddedPostgres

PROBES = {
    "head": (
        "SELECT t.priority FROM harvest.tasks AS t"
        " WHERE t.queue = 'default' AND t.status = 'pending' AND t.kind <> 'timer'"
        " ORDER BY t.priority DESC LIMIT 1"
    ),
    "bounded": (
        "SELECT t.priority FROM harvest.tasks AS t"
        " WHERE t.queue = 'default' AND t.priority > 0 AND t.status = 'pending' AND t.kind <> 'timer'"
        " ORDER BY t.priority DESC LIMIT 1"
    ),
}

# The statements of _may_hand_off (and the ageing probe) as pg_stat_statements names them.
STATEMENTS = (
    "SELECT left(regexp_replace(query, '\\s+', ' ', 'g'), 110), calls, total_exec_time,"
    " shared_blks_hit + shared_blks_read"
    " FROM pg_stat_statements"
    " WHERE dbid = (SELECT oid FROM pg_database WHERE datname = current_database())"
    "   AND query LIKE '%%FROM harvest.tasks AS t%%' AND query LIKE '%%LIMIT%%'"
    "   AND (query LIKE '%%ORDER BY t.priority DESC%%' OR query LIKE '%%priority_aging_secs IS NOT NULL%%')"
    "   AND query NOT LIKE '%%EXPLAIN%%'"
    " ORDER BY total_exec_time DESC"
)


def scan_node(plan: dict[str, Any]) -> dict[str, Any]:
    while plan.get("Plans"):
        plan = plan["Plans"][0]
    return plan


def sample(dsn: str, done: threading.Event, every: float, out: dict[str, list[tuple[int, int]]]) -> None:
    """(shared buffers, heap fetches) of one run of each probe, every `every` seconds."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        while not done.is_set():
            for name, sql in PROBES.items():
                (explained,) = conn.execute(f"EXPLAIN (ANALYZE, BUFFERS, FORMAT JSON) {sql}").fetchone()
                node = scan_node(explained[0]["Plan"])
                buffers = node.get("Shared Hit Blocks", 0) + node.get("Shared Read Blocks", 0)
                out[name].append((buffers, int(node.get("Heap Fetches", -1))))
            time.sleep(every)


def one_drain(root: Path, dsn: str, n: int, every: float) -> dict[str, Any]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        conn.execute("SELECT pg_stat_statements_reset()")
    samples: dict[str, list[tuple[int, int]]] = {name: [] for name in PROBES}
    done = threading.Event()
    sampler = threading.Thread(target=sample, args=(dsn, done, every, samples))
    sampler.start()
    try:
        result = bench_json(root, "harvest_bench.py", "--dsn", dsn, "--mode", "workflows", "--n", f"{n}")
    finally:
        done.set()
        sampler.join()
    assert result["completed"] == n, result
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(STATEMENTS).fetchall()
    return {
        "server_ms_per_wf": round(result["cpu"]["server_s"] * 1000 / n, 3),
        "throughput": round(result["throughput"], 1),
        "statements": [
            {
                "query": q,
                "calls_per_wf": round(c / n, 2),
                "us_per_call": round(t * 1000 / c, 2),
                "ms_per_wf": round(t / n, 4),
                "buffers_per_call": round(b / c, 2),
            }
            for q, c, t, b in rows
        ],
        "sampled": {
            name: {
                "samples": len(got),
                "buffers_median": statistics.median(b for b, _ in got) if got else None,
                "buffers_max": max(b for b, _ in got) if got else None,
                "heap_fetches_median": statistics.median(h for _, h in got) if got else None,
            }
            for name, got in samples.items()
        },
    }


LOOPS = {
    "head": (
        "CREATE FUNCTION pg_temp.loop_head(p_priority integer, p_calls integer) RETURNS integer"
        " LANGUAGE plpgsql AS $$ DECLARE v_top integer; v_hits integer := 0; BEGIN"
        " FOR i IN 1..p_calls LOOP"
        "  SELECT t.priority INTO v_top FROM harvest.tasks AS t"
        "  WHERE t.queue = 'default' AND t.status = 'pending' AND t.kind <> 'timer'"
        "  ORDER BY t.priority DESC LIMIT 1;"
        "  IF v_top > p_priority THEN v_hits := v_hits + 1; END IF;"
        " END LOOP; RETURN v_hits; END $$"
    ),
    "bounded": (
        "CREATE FUNCTION pg_temp.loop_bounded(p_priority integer, p_calls integer) RETURNS integer"
        " LANGUAGE plpgsql AS $$ DECLARE v_hits integer := 0; BEGIN"
        " FOR i IN 1..p_calls LOOP"
        "  PERFORM t.priority FROM harvest.tasks AS t"
        "  WHERE t.queue = 'default' AND t.priority > p_priority AND t.status = 'pending'"
        "  AND t.kind <> 'timer' ORDER BY t.priority DESC LIMIT 1;"
        "  IF FOUND THEN v_hits := v_hits + 1; END IF;"
        " END LOOP; RETURN v_hits; END $$"
    ),
}


def backend_ns(pid: int) -> int:
    return int(Path(f"/proc/{pid}/schedstat").read_text().split()[0])


def micro(dsn: str, rounds: int, calls: int) -> None:
    with psycopg.connect(dsn, autocommit=True) as conn:
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]
        for sql in LOOPS.values():
            conn.execute(sql)
        conn.execute(
            "SELECT count(*) FROM generate_series(1, 2000) AS g,"
            " LATERAL harvest.start_workflow('probe_wf', '[]', 'probe-' || g, 'default') AS s"
        )
        for claimed in (1000, 2000):
            while (
                conn.execute(
                    "SELECT count(*) FROM harvest.tasks WHERE queue = 'default' AND status = 'running'"
                ).fetchone()[0]
                < claimed
            ):
                conn.execute("SELECT count(*) FROM harvest.claim_tasks('w', ARRAY['default'], 50)")
            per_call: dict[str, list[float]] = {name: [] for name in LOOPS}
            for i in range(rounds):
                for name in LOOPS if i % 2 == 0 else list(LOOPS)[::-1]:
                    before = backend_ns(pid)
                    (hits,) = conn.execute(f"SELECT pg_temp.loop_{name}(0, %s)", (calls,)).fetchone()
                    per_call[name].append((backend_ns(pid) - before) / calls / 1000)
                    assert hits == 0, (name, hits)
            print(
                json.dumps(
                    {
                        "claimed": claimed,
                        "pending": 2000 - claimed,
                        **{
                            f"{name}_us_per_call": [round(x, 2) for x in got]
                            for name, got in per_call.items()
                        },
                        **{
                            f"{name}_median_us": round(statistics.median(got), 2)
                            for name, got in per_call.items()
                        },
                        "ratios": [
                            round(b / h, 3)
                            for h, b in zip(per_call["head"], per_call["bounded"], strict=True)
                        ],
                    }
                ),
                flush=True,
            )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, type=Path)
    parser.add_argument("--candidate", default=Path("."), type=Path)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--n", type=int, default=1000)
    parser.add_argument("--every", type=float, default=0.05, help="seconds between EXPLAIN samples")
    parser.add_argument("--micro", action="store_true", help="time the two probe shapes alone")
    parser.add_argument("--calls", type=int, default=20000, help="--micro: calls per timed loop")
    args = parser.parse_args()
    sides = {"base": args.base.resolve(), "cand": args.candidate.resolve()}
    settings = {**SERVER_SETTINGS, "pg_stat_statements.track": "all"}
    with (
        EmbeddedPostgres(settings=settings) as server,
        psycopg.connect(server.dsn, autocommit=True) as admin,
    ):
        migrate_templates(admin, server, sides)
        if args.micro:
            micro(fresh(admin, server, "run_cand", "tmpl_cand"), args.rounds, args.calls)
            return
        for i in range(args.rounds):
            for key in ("base", "cand") if i % 2 == 0 else ("cand", "base"):
                dsn = fresh(admin, server, f"run_{key}", f"tmpl_{key}")
                figures = one_drain(sides[key], dsn, args.n, args.every)
                print(json.dumps({"round": i + 1, "side": key, **figures}), flush=True)


if __name__ == "__main__":
    main()
