"""A claimed row's decoding, client CPU per row (issue 20, docs/performance.md "Cheaper Python,
seventh cut"): rows shaped like ``claim_tasks``' (``execution_id``, ``input``, ``options``) read
the way the worker reads them, with ``execution_id`` as ``uuid`` and ``options`` as ``jsonb``
(the claim before the cut), with only ``execution_id`` as text, and with both as text and
``options`` decoded by ``harvest.db.sqlapi.claimed_rows`` (the claim after it). One embedded
server with bench/run.py's settings, the pools' JSON loader on the connection; the three ways
take turns, round by round.

    python bench/claim_row_decode.py --rounds 10
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any, LiteralString

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import psycopg
from psycopg.rows import dict_row
from run import SERVER_SETTINGS

from harvest.db.embedded import EmbeddedPostgres
from harvest.db.jsoncodec import use_on
from harvest.db.sqlapi import claimed_rows

ROWS = 500
FETCHES = 20
# A canonical activity's options as the database prints them (bench/canonical.py's noop).
OPTIONS = (
    '{"retry": {"backoff": 2.0, "max_attempts": 3, "max_interval": 100, "initial_interval": 1, '
    '"non_retryable_errors": []}, "priority": 0, "dead_letter": true, "start_to_close": 300, '
    '"heartbeat_timeout": null, "schedule_to_close": null}'
)
WAYS: dict[str, tuple[LiteralString, Callable[[list[dict[str, Any]]], list[dict[str, Any]]]]] = {
    "uuid_jsonb": (
        (
            "SELECT gen_random_uuid() AS execution_id, '[5]'::jsonb AS input, %(o)s::jsonb AS options"
            " FROM generate_series(1, %(n)s)"
        ),
        lambda rows: rows,
    ),
    "text_id_only": (
        (
            "SELECT gen_random_uuid()::text AS execution_id, '[5]'::jsonb AS input, %(o)s::jsonb AS options"
            " FROM generate_series(1, %(n)s)"
        ),
        lambda rows: rows,
    ),
    "text_claimed_rows": (
        (
            "SELECT gen_random_uuid()::text AS execution_id, '[5]'::jsonb AS input,"
            " %(o)s::jsonb::text AS options FROM generate_series(1, %(n)s)"
        ),
        claimed_rows,
    ),
}


def per_row_us(conn: psycopg.Connection[Any], way: str) -> float:
    sql, shape = WAYS[way]
    with conn.cursor(row_factory=dict_row) as cur:
        started = time.process_time()
        for _ in range(FETCHES):
            cur.execute(sql, {"o": OPTIONS, "n": ROWS})
            for row in shape(cur.fetchall()):
                str(row["execution_id"])  # what the worker does with them
                (row.get("options") or {}).get("start_to_close")
        return (time.process_time() - started) / (FETCHES * ROWS) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=10)
    args = parser.parse_args()
    figures: dict[str, list[float]] = {way: [] for way in WAYS}
    with (
        EmbeddedPostgres(settings=SERVER_SETTINGS) as server,
        psycopg.connect(server.dsn, autocommit=True) as conn,
    ):
        use_on(conn)
        for _ in range(args.rounds):
            for way in WAYS:
                figures[way].append(round(per_row_us(conn, way), 2))
    for way, values in figures.items():
        print(f"{way:18s} us/row {values} median {statistics.median(values):.2f}")
    print(json.dumps({way: statistics.median(values) for way, values in figures.items()}))


if __name__ == "__main__":
    main()
