"""Paired A/B of what a relay's write costs the server: two checkouts of Harvest (a baseline and a
candidate), alternating, each run on a fresh clone of its side's template (sql_path_ab.py's
pairs), one embedded server.

A run starts ``--n`` parents (RUNNING, a workflow task each) and then times, as the backend's CPU
around one ``CALL`` (a commit every 50):

- ``child_end``: a child's end reaching its parent, ``harvest._queue_relay(parent, 'child_closed',
  ...)`` for each parent, as ``_relay_close`` makes it: the relay inserted, delivered at once
  (the parent's ChildWorkflowCompleted, its task ensured) and deleted;
- ``signal_row``: a relay row of an external signal sent to another shard (a target and a
  source), inserted and then deleted, as the pump's path writes and completes one (no delivery):
  the row's own writes and nothing else, so an index's entries are the largest share of it.

    python bench/relay_write_ab.py --base /tmp/old_tree --candidate . --pairs 6
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg
from run import SERVER_SETTINGS
from sql_path_ab import cpu_seconds, migrate_templates, paired_runs

from harvest.db.embedded import EmbeddedPostgres

PROCEDURES = """
CREATE SCHEMA IF NOT EXISTS bench;
CREATE OR REPLACE PROCEDURE bench.child_ends(p_parents uuid[])
LANGUAGE plpgsql
AS $$
BEGIN
    FOR k IN 1 .. cardinality(p_parents) LOOP
        PERFORM harvest._queue_relay(p_parents[k], 'child_closed', jsonb_build_object(
            'seq', 1, 'child_execution_id', gen_random_uuid(), 'status', 'COMPLETED', 'result', k));
        IF k % 50 = 0 THEN
            COMMIT;
        END IF;
    END LOOP;
END;
$$;
CREATE OR REPLACE PROCEDURE bench.signal_rows(p_parents uuid[])
LANGUAGE plpgsql
AS $$
DECLARE
    v_ids bigint[] := '{}';
    v_id bigint;
BEGIN
    FOR k IN 1 .. cardinality(p_parents) LOOP
        INSERT INTO harvest.relays (target_execution_id, kind, payload, created_at, source_execution_id,
                                    source_seq, target_shard, remote)
        VALUES (gen_random_uuid(), 'external_signal', jsonb_build_object('signal_name', 'go', 'payload', k),
                harvest.now(), p_parents[k], k, 1, true)
        RETURNING id INTO v_id;
        v_ids := v_ids || v_id;
        IF k % 50 = 0 THEN
            COMMIT;
            DELETE FROM harvest.relays WHERE id = ANY(v_ids);
            COMMIT;
            v_ids := '{}';
        END IF;
    END LOOP;
    DELETE FROM harvest.relays WHERE id = ANY(v_ids);
END;
$$;
"""


def one_run(dsn: str, n: int) -> dict[str, float]:
    """Backend CPU in microseconds per relay of each path."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute(PROCEDURES)
        parents = [
            r[0]
            for r in conn.execute(
                "SELECT execution_id FROM harvest.start_workflows((SELECT jsonb_agg(jsonb_build_object("
                "'workflow_name', 'parent', 'input', '[]'::jsonb, 'queue', 'q')) FROM generate_series(1, %s)))",
                [n],
            ).fetchall()
        ]
        conn.execute("VACUUM ANALYZE harvest.relays")
        pid = conn.execute("SELECT pg_backend_pid()").fetchone()[0]  # type: ignore[index]
        out = {}
        for name in ("child_ends", "signal_rows"):
            before = cpu_seconds(pid)
            conn.execute(f"CALL bench.{name}(%s)", [parents])
            out[name] = (cpu_seconds(pid) - before) * 1e6 / n
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--base", required=True, type=Path)
    parser.add_argument("--candidate", default=Path("."), type=Path)
    parser.add_argument("--pairs", type=int, default=6)
    parser.add_argument("--n", type=int, default=10000)
    args = parser.parse_args()
    sides = {"base": args.base.resolve(), "cand": args.candidate.resolve()}
    pairs: list[dict[str, Any]] = []
    with (
        EmbeddedPostgres(settings=dict(SERVER_SETTINGS, autovacuum="off")) as server,
        psycopg.connect(server.dsn, autocommit=True) as admin,
    ):
        migrate_templates(admin, server, sides)
        for row in paired_runs(admin, server, args.pairs, False, lambda key, dsn: one_run(dsn, args.n)):
            pairs.append(row)
            print(
                f"pair {row['pair']} ({row['first']} first): "
                + "  ".join(
                    f"{k}: base {row['base'][k]:.1f} cand {row['cand'][k]:.1f} us/relay"
                    f" ({row['cand'][k] / row['base'][k]:.3f})"
                    for k in row["base"]
                )
                + f"  load {os.getloadavg()[0]:.1f}",
                flush=True,
            )
    summary = {
        k: {
            "median_base_us": round(statistics.median(p["base"][k] for p in pairs), 1),
            "median_cand_us": round(statistics.median(p["cand"][k] for p in pairs), 1),
            "ratios": [round(p["cand"][k] / p["base"][k], 3) for p in pairs],
            "median_ratio": round(statistics.median(p["cand"][k] / p["base"][k] for p in pairs), 3),
        }
        for k in pairs[0]["base"]
    }
    print(json.dumps(summary), flush=True)


if __name__ == "__main__":
    main()
