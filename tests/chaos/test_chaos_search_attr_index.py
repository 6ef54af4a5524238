"""`harvest search-attr index` (CREATE INDEX CONCURRENTLY) under writes, raced by a second index
and an unindex of the same key, and killed mid-build (docs/operations.md, "Indexing a search
attribute for range tests"): writers starting runs that carry the key (short values and a long
one) go on while the build waits and none fails; the killed build's INVALID index is mended by the
next run; in the end the index is valid and recorded, or gone and not recorded, never one without
the other."""

from __future__ import annotations

import json
import os
import random
import signal
import string
import subprocess
import sys
import threading

import psycopg
import pytest
from harness import query, wait_until

pytestmark = pytest.mark.chaos

COLD = [sys.executable, "-c", "from harvest.cli import main; main()"]
INDEX = "executions_attr_note"


def _cli(db: str, *args: str) -> subprocess.Popen:
    env = {**os.environ, "HARVEST_DATABASE_URL": db}
    return subprocess.Popen(
        [*COLD, *args, "-o", "json"], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _index(db: str) -> tuple[bool] | None:
    rows = query(
        db,
        "SELECT i.indisvalid FROM pg_class AS c JOIN pg_index AS i ON i.indexrelid = c.oid"
        " WHERE c.relname = %s AND c.relnamespace = 'harvest'::regnamespace",
        (INDEX,),
    )
    return (rows[0]["indisvalid"],) if rows else None


def _recorded(db: str) -> bool:
    return bool(query(db, "SELECT 1 FROM harvest.search_attribute_indexes WHERE name = 'note'"))


def _long_value() -> str:
    """A value past a btree entry's bound (2704 bytes) even compressed: random letters."""
    rng = random.Random(7)
    return "".join(rng.choice(string.ascii_letters) for _ in range(6000))


def test_an_index_build_under_writes_raced_by_index_and_unindex_and_killed_ends_consistent(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at,"
            " search_attributes) SELECT gen_random_uuid(), 'w', 'r-' || g, 'COMPLETED', now(),"
            " jsonb_build_object('note', 'n' || g)"
            " FROM generate_series(1, 3000) AS g"
        )
    stop = threading.Event()
    writes: list[int] = [0]
    failures: list[BaseException] = []

    def writer(long: bool) -> None:
        # Starts carrying the key, one transaction each: a long value now and then.
        with psycopg.connect(db, autocommit=True) as conn:
            n = 0
            while not stop.is_set():
                n += 1
                value = _long_value() if long and n % 5 == 0 else f"w{n}"
                try:
                    conn.execute(
                        "SELECT harvest.start_workflow('w', p_search_attributes => %s::jsonb)",
                        (json.dumps({"note": value}),),
                    )
                    writes[0] += 1
                except psycopg.Error as exc:
                    failures.append(exc)
                    return

    threads = [threading.Thread(target=writer, args=(long,), daemon=True) for long in (False, True)]
    for t in threads:
        t.start()
    # An open transaction that wrote: the first build waits for it, its INVALID index in the catalog.
    with psycopg.connect(db) as holder:
        holder.execute("SELECT harvest.start_workflow('w', p_search_attributes => '{\"note\": \"held\"}')")
        first = _cli(db, "search-attr", "index", "note", "--type", "text")
        wait_until(lambda: _index(db) == (False,), 60, "the first build's INVALID index")
        before = writes[0]
        wait_until(lambda: writes[0] >= before + 20 or failures, 30, "writes while the build waits")
        second = _cli(db, "search-attr", "index", "note", "--type", "text")
        unindex = _cli(db, "search-attr", "unindex", "note")
        # Killed mid-build: the command, then its session (as a crash or a restart ends it).
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
        killed = query(
            db,
            "SELECT count(*) FILTER (WHERE pg_terminate_backend(pid)) AS n FROM pg_stat_activity"
            " WHERE query LIKE 'CREATE INDEX CONCURRENTLY%%' AND datname = current_database()",
        )[0]["n"]
        assert killed == 1
        holder.rollback()
    outs = [p.communicate(timeout=120) for p in (second, unindex)]
    assert all(p.returncode == 0 for p in (second, unindex)), outs
    # Whichever went last decided; what is recorded is what is built.
    assert (_index(db) == (True,)) == _recorded(db) and _index(db) in (None, (True,)), outs
    last = _cli(db, "search-attr", "index", "note", "--type", "text")
    _, err = last.communicate(timeout=120)
    assert last.returncode == 0, err
    before = writes[0]
    wait_until(lambda: writes[0] >= before + 20 or failures, 30, "writes after the build")
    stop.set()
    for t in threads:
        t.join(20)
    assert not failures, failures[:1]
    assert _index(db) == (True,) and _recorded(db)
    listed = query(db, "SELECT name, state FROM harvest.list_search_attribute_indexes()")
    assert listed == [{"name": "note", "state": "valid"}], listed
