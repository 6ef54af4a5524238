"""What the partial index tasks_rate_held (migration 0132) costs the claim, and what an override
over a held backlog costs (functions/flow_rate_limits.sql, _repace_rate_bucket).

    nice -n 10 python bench/rate_held_ab.py [--pairs 8] [--samples 30] [--held 100000]

One embedded PostgreSQL, two databases migrated alike: A keeps tasks_rate_held, B drops it.
Two timed calls, each a client-timed claim_tasks:

- refuse: a claim of 200 rate-limited activities whose bucket is empty: every one is refused
  and marked (the only write that enters the index); then (untimed) they are made due again;
- claim: a claim of 50 unlimited activities (the ordinary hot path: it enters nothing, the
  predicate is evaluated); then (untimed) they are released.

A pair is one run of each call on A and on B, the order alternating pair by pair, each the
median of --samples calls; the tables are vacuumed (untimed) between pairs. Then, on A, one
set_rate_limit_override over --held held tasks (its batch), and the same UPDATE over every
held task in a rolled-back transaction (what an unbatched override would hold its locks for).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import psycopg

from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator

POLICY = '{"activities": {"ab_paced": {"rate_limit": {"rps": 0.0001, "burst": 1}}}}'
OPTIONS = '{"rate_limit": {"rps": 0.0001, "burst": 1}}'


def _fill(conn: psycopg.Connection, queue: str, n: int, options: str) -> None:
    """One run and n activity tasks on queue, through the real functions."""
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (POLICY,))
    conn.execute("SELECT harvest.start_workflow('ab_wf', '[]', %s, %s)", (queue, queue + "_wf"))
    conn.execute(
        """SELECT harvest.complete_workflow_task(c.task_id, c.fencing_token, 1, (
               SELECT jsonb_agg(jsonb_build_object('type', 'schedule_activity', 'seq', i, 'name', 'ab_paced',
                                                   'input', '[]'::jsonb, 'queue', %(q)s::text, 'options', %(o)s::jsonb))
               FROM generate_series(1, %(n)s) AS i))
           FROM harvest.claim_tasks('w', ARRAY[%(wq)s::text]) AS c""",
        {"q": queue, "o": options, "n": n, "wq": queue + "_wf"},
    )


def _wal(conn: psycopg.Connection) -> int:
    return int(conn.execute("SELECT pg_current_wal_insert_lsn() - '0/0'::pg_lsn").fetchone()[0])


WAL: dict[str, list[int]] = {}


def _refuse(conn: psycopg.Connection) -> float:
    before = _wal(conn)
    t = time.perf_counter()
    conn.execute("SELECT count(*) FROM harvest.claim_tasks('w', ARRAY['abr'], 200)")
    elapsed = time.perf_counter() - t
    WAL.setdefault(conn.info.dbname, []).append(_wal(conn) - before)
    conn.execute("UPDATE harvest.tasks SET due_at = harvest.now() WHERE queue = 'abr' AND status = 'pending'")
    return elapsed


def _claim(conn: psycopg.Connection) -> float:
    t = time.perf_counter()
    conn.execute("SELECT count(*) FROM harvest.claim_tasks('w', ARRAY['abc'], 50)")
    elapsed = time.perf_counter() - t
    conn.execute(
        "UPDATE harvest.tasks SET status = 'pending', lease_owner = NULL, lease_expires_at = NULL, "
        "due_at = harvest.now() WHERE queue = 'abc' AND status = 'running'"
    )
    return elapsed


def _override_cost(conn: psycopg.Connection, held: int) -> tuple[float, float, int]:
    # (1,000 activities a decision: a decision of 100,000 scheduled none.)
    for run in range(0, held, 1000):
        conn.execute("SELECT harvest.start_workflow('ab_wf', '[]', %s, 'abh_wf')", (f"abh{run}",))
        conn.execute(
            """SELECT harvest.complete_workflow_task(c.task_id, c.fencing_token, 1, (
                   SELECT jsonb_agg(jsonb_build_object('type', 'schedule_activity', 'seq', i, 'name', 'ab_paced',
                                                       'input', '[]'::jsonb, 'queue', 'abh', 'options', %(o)s::jsonb))
                   FROM generate_series(1, %(n)s) AS i))
               FROM harvest.claim_tasks('w', ARRAY['abh_wf']) AS c""",
            {"o": OPTIONS, "n": min(1000, held - run)},
        )
    # Held as a refusal leaves them: marked, due 5/s apart.
    conn.execute(
        "UPDATE harvest.tasks AS t SET due_at = r.due_at, rate_due_at = r.due_at "
        "FROM (SELECT id, harvest.now() + make_interval(secs => row_number() OVER (ORDER BY id) / 5.0) AS due_at "
        "      FROM harvest.tasks WHERE queue = 'abh') AS r "
        "WHERE t.id = r.id"
    )
    conn.execute("VACUUM ANALYZE harvest.tasks")
    marked = conn.execute(
        "SELECT count(*) FROM harvest.tasks WHERE status = 'pending' AND rate_due_at = due_at"
    ).fetchone()[0]
    print(f"held (marked) before the override: {marked}")
    t = time.perf_counter()
    conn.execute("SELECT * FROM harvest.set_rate_limit_override('ab_paced', 100, 10, 600)")
    batched = time.perf_counter() - t
    with conn.transaction(force_rollback=True):
        t = time.perf_counter()
        cur = conn.execute(
            "UPDATE harvest.tasks AS t SET due_at = s.due_at, rate_due_at = s.due_at FROM ("
            " SELECT h.id, harvest.now() + make_interval(secs => h.place / 100.0) AS due_at FROM ("
            "  SELECT l.id, row_number() OVER (ORDER BY l.due_at, l.id) AS place FROM ("
            "   SELECT x.id, x.due_at FROM harvest.tasks AS x WHERE x.rate_key = 'rate:ab_paced'"
            "   AND x.status = 'pending' AND x.rate_due_at = x.due_at AND x.due_at > harvest.now()"
            "   ORDER BY x.due_at, x.id FOR UPDATE SKIP LOCKED) AS l) AS h) AS s"
            " WHERE t.id = s.id AND t.due_at <> s.due_at"
        )
        whole = time.perf_counter() - t
        rows = cur.rowcount
    return batched, whole, rows


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pairs", type=int, default=8)
    parser.add_argument("--samples", type=int, default=30)
    parser.add_argument("--held", type=int, default=100_000)
    args = parser.parse_args()
    print("load before:", os.getloadavg())
    if True:
        server = EmbeddedPostgres()  # (its own directory, removed by stop)
        server.start()
        try:
            conns = {}
            for name in ("a", "b"):
                with psycopg.connect(server.dsn, autocommit=True) as admin:
                    admin.execute(f"CREATE DATABASE ab_{name}")
                dsn = server.dsn_for(f"ab_{name}")
                Migrator(dsn).run()
                conn = psycopg.connect(dsn, autocommit=True)
                if name == "b":
                    conn.execute("DROP INDEX harvest.tasks_rate_held")
                _fill(conn, "abr", 200, OPTIONS)
                _fill(conn, "abc", 200, "{}")
                conns[name] = conn
            results: dict[tuple[str, str], list[float]] = {}
            for pair in range(args.pairs):
                order = ("a", "b") if pair % 2 == 0 else ("b", "a")
                for name in order:
                    conn = conns[name]
                    for call, fn in (("refuse", _refuse), ("claim", _claim)):
                        samples = [fn(conn) for _ in range(args.samples)]
                        results.setdefault((call, name), []).append(statistics.median(samples) * 1000)
                        results.setdefault((call + " (min)", name), []).append(min(samples) * 1000)
                    conn.execute("VACUUM harvest.tasks")
            for call in ("refuse", "refuse (min)", "claim", "claim (min)"):
                a, b = results[(call, "a")], results[(call, "b")]
                ratios = [x / y for x, y in zip(a, b, strict=True)]
                print(
                    f"{call}: A (index) ms {[round(x, 3) for x in a]}\n"
                    f"{'':{len(call)}}  B (none)  ms {[round(x, 3) for x in b]}\n"
                    f"{'':{len(call)}}  A/B per pair {[round(r, 3) for r in ratios]}, "
                    f"median {statistics.median(ratios):.3f}"
                )
            print(
                "refuse, WAL bytes a call (median): "
                f"A {statistics.median(WAL['ab_a']):.0f}, B {statistics.median(WAL['ab_b']):.0f}"
            )
            batched, whole, rows = _override_cost(conns["a"], args.held)
            print(
                f"override over {args.held} held: {batched * 1000:.1f} ms (batch of 10,000); "
                f"every held task at once: {whole * 1000:.1f} ms ({rows} rows)"
            )
            for conn in conns.values():
                conn.close()
        finally:
            server.stop()
    print("load after:", os.getloadavg())


if __name__ == "__main__":
    main()
