"""A real upgrade: a database exactly as the previous release left it, live runs included, is
migrated by this release and ends equal to a fresh install, and its runs finish on this
release's worker.

The previous release is frozen in tests/fixtures/previous_release/harvest_previous_release.sql
(generate.py made it from that release's commit with that release's own migrator, client and
worker; never read from git here, so a shallow clone runs this test). Its runs: done-1
completed; sleep-1 waiting on a timer; charge-1 whose activity was dead-lettered; slow-1 whose
activity was running when its worker was killed (the lease left behind); pending-1, a workflow
task no worker touched. CONTRIBUTING.md ("Upgrading from the previous release") says when to
make the file again.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path

import catalog
import psycopg
import pytest
from test_schema_equivalence import ledger_keys, schema_dump

from harvest import AsyncClient, Client, Worker
from harvest.core.errors import SchemaMismatch
from harvest.db import migrate as m

REPO = Path(__file__).resolve().parents[2]
FIXTURES = REPO / "tests" / "fixtures" / "previous_release"
DUMP = FIXTURES / "harvest_previous_release.sql"
sys.path.insert(0, str(FIXTURES))

from upgrade_app import QUEUE, app  # noqa: E402  (the fixture's workflows, on sys.path above)


@pytest.fixture
def previous_and_fresh(pg_server, template_dsn: str) -> Iterator[tuple[str, str]]:
    """The previous release's database (loaded from the fixture, not migrated yet), and an
    empty one. template_dsn: the cluster's harvest_* roles exist (the dump grants to them)."""
    names = [f"t_{uuid.uuid4().hex[:12]}" for _ in range(2)]
    previous, fresh = (pg_server.create_database(n) for n in names)
    with psycopg.connect(previous, autocommit=True) as conn:
        conn.execute(DUMP.read_text())
    yield previous, fresh
    for name in names:
        pg_server.drop_database(name)


def live_state(dsn: str) -> dict[str, tuple]:
    """Each fixture run: its status, what its tasks are doing, and whether it has a dead letter."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT e.workflow_id, e.status,"
            " coalesce((SELECT array_agg(t.kind || ':' || t.status ||"
            "  CASE WHEN t.lease_expires_at < now() THEN ':lease-expired' ELSE '' END ORDER BY t.id)"
            "  FROM harvest.tasks AS t WHERE t.execution_id = e.id), '{}'),"
            " EXISTS (SELECT 1 FROM harvest.dead_letters AS d WHERE d.execution_id = e.id)"
            " FROM harvest.executions AS e ORDER BY 1"
        ).fetchall()
    return {workflow_id: (status, tasks, dead) for workflow_id, status, tasks, dead in rows}


def test_the_fixture_holds_the_previous_release_with_live_runs(previous_and_fresh) -> None:
    """What the upgrade below starts from: the previous schema, mid-flight."""
    previous, _ = previous_and_fresh
    assert live_state(previous) == {
        "charge-1": ("RUNNING", [], True),
        "done-1": ("COMPLETED", [], False),
        "pending-1": ("RUNNING", ["workflow:pending"], False),
        "sleep-1": ("RUNNING", ["timer:pending"], False),
        "slow-1": ("RUNNING", ["activity:running:lease-expired"], False),
    }
    with psycopg.connect(previous, autocommit=True) as conn:
        version = conn.execute("SELECT max(version) FROM harvest.schema_migrations").fetchone()[0]
        columns = {
            r[0]
            for r in conn.execute(
                "SELECT attname FROM pg_attribute"
                " WHERE attrelid = 'harvest.executions'::regclass AND attnum > 0"
            ).fetchall()
        }
    assert version < m.latest_core_version() and "task_queue" in columns  # an older schema indeed


def test_upgrading_the_previous_release_equals_a_fresh_install(previous_and_fresh) -> None:
    previous, fresh = previous_and_fresh
    report = m.Migrator(previous).run()
    assert report.applied, "the fixture is the previous release: some migrations must be new to it"
    m.Migrator(fresh).run()
    # Catalog (tables, columns, constraints, indexes, functions and their comments, ...).
    catalog.assert_same(catalog.snapshot(fresh), catalog.snapshot(previous), "fresh install", "upgraded")
    # The ledgers: the same migrations and the same functions/ files with their checksums; the
    # rows of the files the previous release had and this one does not are gone.
    assert ledger_keys(previous) == ledger_keys(fresh)
    assert set(report.functions_retired) >= {"fleet.sql", "zz_security.sql"}
    assert schema_dump(previous) == schema_dump(fresh)
    # A second run has nothing left to do.
    again = m.Migrator(previous).run()
    assert not (again.applied or again.functions_applied or again.functions_retired)


def _run_worker(dsn: str, stop: threading.Event, errors: list[BaseException]) -> None:
    async def go() -> None:
        worker = Worker(app, dsn, queues=[QUEUE], poll_interval=0.2, scan_interval=0.2)
        task = asyncio.ensure_future(worker.run())
        while not stop.is_set() and not task.done():
            await asyncio.sleep(0.05)
        worker.request_stop()
        await task

    try:
        asyncio.run(go())
    except BaseException as exc:
        errors.append(exc)


def _run_worker_until(dsn: str, done: Callable[[], bool]) -> None:
    """This release's worker on ``dsn`` until ``done()`` (at most a minute); its errors raised."""
    stop, errors = threading.Event(), []
    thread = threading.Thread(target=_run_worker, args=(dsn, stop, errors), daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not errors and not done():
            time.sleep(0.2)
    finally:
        stop.set()
        thread.join(30)
    assert not errors, errors


def test_the_live_runs_complete_on_the_current_worker(previous_and_fresh) -> None:
    previous, _ = previous_and_fresh
    m.Migrator(previous).run()
    with psycopg.connect(previous, autocommit=True) as conn:
        # The operator replays the dead letter with this release's SQL API.
        (dead_letter,) = conn.execute("SELECT id FROM harvest.dead_letters").fetchone()
        conn.execute("SELECT harvest.replay_dead_letter(%s)", (dead_letter,))
    _run_worker_until(
        previous, lambda: all(status != "RUNNING" for status, _, _ in live_state(previous).values())
    )
    with psycopg.connect(previous, autocommit=True) as conn:
        results = dict(
            conn.execute(
                "SELECT workflow_id, status || ' ' || output::text FROM harvest.executions"
            ).fetchall()
        )
        slow_attempts = conn.execute(
            "SELECT (event_data ->> 'attempt')::integer FROM harvest.events AS ev"
            " JOIN harvest.executions AS e ON e.id = ev.execution_id"
            " WHERE e.workflow_id = 'slow-1' AND ev.event_type = 'ActivityCompleted'"
        ).fetchall()
    assert results == {
        "done-1": "COMPLETED 2",
        "sleep-1": "COMPLETED 6",
        "charge-1": "COMPLETED " + json.dumps("charged o-1"),
        "slow-1": "COMPLETED 40",
        "pending-1": "COMPLETED 42",
    }
    assert slow_attempts == [(2,)], "the killed worker's attempt expired and was retried once"


def test_a_start_held_back_at_the_upgrade_is_released_by_the_current_worker(previous_and_fresh) -> None:
    """A debounced start the previous release held back (a pending_starts row, in its columns)
    is released once due by this release's scanner and runs: the migrations that changed the
    table since (0126 added the logins that made a start, NULL on such a row) keep it
    releasable."""
    previous, _ = previous_and_fresh
    with psycopg.connect(previous, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO harvest.pending_starts (kind, workflow_name, gate_key, workflow_id, task_queue,"
            " input, created_at, updated_at, release_at)"
            " VALUES ('debounce', 'upgrade_add_one', 'k', 'held-1', %s, '[41]', now(), now(), now())",
            (QUEUE,),
        )
    m.Migrator(previous).run()
    with psycopg.connect(previous, autocommit=True) as conn:
        assert conn.execute("SELECT logins FROM harvest.pending_starts").fetchall() == [(None,)]
    _run_worker_until(previous, lambda: live_state(previous).get("held-1", ("",))[0] == "COMPLETED")
    with psycopg.connect(previous, autocommit=True) as conn:
        assert conn.execute(
            "SELECT status, output FROM harvest.executions WHERE workflow_id = 'held-1'"
        ).fetchall() == [("COMPLETED", 42)]
        assert conn.execute("SELECT count(*) FROM harvest.pending_starts").fetchone()[0] == 0


# A migrator killed (SIGKILL) as it starts on the function files: every migration applied, the
# functions still the previous release's (0080 has dropped its start_workflow).
KILLED_AT_THE_FUNCTIONS = """
import os, signal, sys
from harvest.db import migrate as m

def progress(line):
    if line.startswith("applying functions/"):
        os.kill(os.getpid(), signal.SIGKILL)

m.Migrator(sys.argv[1], progress=progress).run()
"""


@pytest.mark.chaos
def test_workers_and_clients_refuse_a_database_whose_migrator_died_before_the_functions(
    previous_and_fresh,
) -> None:
    """The schema version is the newest migration's as soon as it commits; the functions come
    after. A worker or a client must not take the database for this release's in between."""
    previous, _ = previous_and_fresh
    env = {**os.environ, "PYTHONPATH": str(REPO / "harvest_py")}
    killed = subprocess.run(
        [sys.executable, "-c", KILLED_AT_THE_FUNCTIONS, previous],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    with psycopg.connect(previous, autocommit=True) as conn:
        assert conn.execute("SELECT harvest.schema_version()").fetchone()[0] == m.latest_core_version()
    with pytest.raises(SchemaMismatch) as worker_error:
        asyncio.run(Worker(app, previous, queues=[QUEUE]).run())
    with pytest.raises(SchemaMismatch) as client_error:
        Client(previous)
    with pytest.raises(SchemaMismatch) as async_error:
        asyncio.run(AsyncClient.connect(previous))
    for info in (worker_error, client_error, async_error):
        message = str(info.value)
        assert "did not finish" in message and "run `harvest migrate run` against it" in message, message
    # The next run finishes the upgrade, and the database is this release's.
    m.Migrator(previous).run()
    Client(previous).close()
