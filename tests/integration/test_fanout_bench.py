"""bench/common.py's ``database_backends_cpu``: the per-side server column of the fan-out A/B
(``bench/fanout_ab.py --together`` runs both sides' drains at once on one server, and reads
each side's own backends with it). It must count the busy backends of its database, not its
own connection and not another database's."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path

import psycopg
import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench"


def _common():
    """bench/common.py, loaded by path (bench/ is not a package)."""
    spec = importlib.util.spec_from_file_location("bench_common", BENCH / "common.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


COMMON = _common()
WORK = "SELECT count(*) FROM generate_series(1, 300000) AS g WHERE g % 7 = 3"


def test_database_backends_cpu_counts_this_databases_backends_only(db, fresh_db):
    with psycopg.connect(db, autocommit=True) as busy, psycopg.connect(fresh_db, autocommit=True) as other:
        busy_pid = busy.execute("SELECT pg_backend_pid()").fetchone()[0]
        other_pid = other.execute("SELECT pg_backend_pid()").fetchone()[0]
        if not os.path.exists(f"/proc/{busy_pid}/schedstat"):
            pytest.skip("the server's backends are not processes of this machine")
        before = COMMON.database_backends_cpu(db)
        busy.execute(WORK).fetchone()
        other.execute(WORK).fetchone()
        after = COMMON.database_backends_cpu(db)
    assert busy_pid in before and busy_pid in after
    assert after[busy_pid] > before[busy_pid]  # the work it did counts
    assert other_pid not in before and other_pid not in after  # another database's backend does not
