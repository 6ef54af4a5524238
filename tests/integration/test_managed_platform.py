"""Harvest on a managed PostgreSQL's limits (RDS, Cloud SQL, Supabase): the team's logins are not
superusers, and the database carries a statement_timeout the team cannot change for it
(docs/install.md, "On a managed PostgreSQL"). A step the timeout ends says so in one line, with
what was kept (nothing of that step) and what to do, and running it again resumes."""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from click.testing import CliRunner
from psycopg import conninfo

from harvest import App, Worker, workflow
from harvest.cli.main import main


@pytest.fixture
def platform_login(db: str, pg_server) -> Iterator[str]:
    """A LOGIN NOSUPERUSER granted harvest_admin (the team's janitor), whose sessions in this
    database get the platform's timeouts (as `ALTER DATABASE ... SET` would give every login; set
    for this role in this database, so the shared clone keeps no setting after the test)."""
    login = f"u_janitor_{uuid.uuid4().hex[:8]}"
    dbname = conninfo.conninfo_to_dict(db)["dbname"]
    with pg_server.admin() as admin:
        admin.execute(f'CREATE ROLE "{login}" LOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE')
        admin.execute(f'GRANT harvest_admin TO "{login}"')
        timeouts = (("statement_timeout", "300ms"), ("idle_in_transaction_session_timeout", "60s"))
        for setting, value in timeouts:
            admin.execute(f'ALTER ROLE "{login}" IN DATABASE "{dbname}" SET {setting} = \'{value}\'')
    try:
        yield conninfo.make_conninfo(db, user=login)
    finally:
        with pg_server.admin() as admin:
            admin.execute(f'DROP OWNED BY "{login}"')
            admin.execute(f'DROP ROLE IF EXISTS "{login}"')


def _harvest(dsn: str, *args: str):
    return CliRunner().invoke(main, list(args), env={"HARVEST_DATABASE_URL": dsn})


def _backlog(conn: psycopg.Connection, runs: int) -> None:
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at, completed_at)"
        " SELECT gen_random_uuid(), 'backlog', 'backlog-' || n, 'COMPLETED', now() - interval '50 days',"
        " now() - interval '40 days' FROM generate_series(1, %s) AS n",
        (runs,),
    )


def _runs(conn: psycopg.Connection) -> int:
    row = conn.execute("SELECT count(*) FROM harvest.executions WHERE workflow_name = 'backlog'").fetchone()
    return row[0] if row else 0


def test_a_retention_batch_the_statement_timeout_ends_says_so_keeps_nothing_and_resumes(
    db: str, platform_login: str
) -> None:
    """A batch held past the login's statement_timeout (here by a long transaction holding the
    retention settings' row, which the batch updates last, after its deletes): one line naming
    the timeout, that the batch was rolled back and what to do; exit 1; every run still there.
    Once the holder is gone, the same command deletes them all."""
    with psycopg.connect(db, autocommit=True) as owner:
        owner.execute("SELECT harvest.set_retention('30 days', 100, 'test')")
        _backlog(owner, 250)
        with psycopg.connect(db) as holder:  # a report left open: holds the row, then commits
            holder.execute("SELECT 1 FROM harvest.retention_config FOR UPDATE")
            done = _harvest(platform_login, "retention", "run-now")
            assert done.exit_code == 1, done.output
            [line] = [x for x in done.output.splitlines() if x.startswith("error:")]
            assert "statement timeout" in line and "statement_timeout" in line, line
            assert "rolled back" in line and "--batch-size" in line and "ALTER ROLE" in line, line
            assert _runs(owner) == 250  # nothing half-done: the batch's deletes went with it
        done = _harvest(platform_login, "retention", "run-now")
        assert done.exit_code == 0, done.output
        assert "deleted 250 execution(s) in 3 batch(es)" in done.output, done.output
        assert _runs(owner) == 0


def test_the_management_apis_pool_takes_its_size_from_web_pool_size(db: str) -> None:
    """`harvest serve` had no way to size its pool (10 a shard) for a server of 25 connections:
    `web.pool_size` (HARVEST_WEB__POOL_SIZE) bounds it; a bad value is refused naming the key."""
    from starlette.testclient import TestClient

    from harvest.config import load_config
    from harvest.core.errors import ConfigError
    from harvest.web.app import management_app

    config = load_config(env={"HARVEST_WEB__POOL_SIZE": "2", "HARVEST_DATABASE_URL": db})
    api = management_app(dsn=db, config=config, profile="dev")
    with TestClient(api) as http:
        assert http.get("/workflows").status_code == 200
        assert api.state.harvest.pool.max_size == 2
    with pytest.raises(ConfigError, match=r"web\.pool_size|WEB__POOL_SIZE"):
        load_config(env={"HARVEST_WEB__POOL_SIZE": "0"})


@workflow
async def idle(ctx: object) -> None:
    return None


def _janitor_lines(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == "harvest.worker" and r.levelno == level and "statement_timeout" in r.getMessage()
    ]


def test_the_janitor_halves_its_batch_past_the_statement_timeout_warns_once_a_size_and_deletes(
    db: str, platform_login: str, pg_server, caplog: pytest.LogCaptureFixture
) -> None:
    """The janitor in a worker whose login has a 300 ms statement_timeout, configured for batches
    of 32 over 40 expired runs (oldest first), the 20th held: a batch that reaches it waits on a
    lock past the timeout and is rolled back. It halves its batch (32, 16: runs 1..16 go; 16,
    10, the floor: refused again), one WARNING a new size and one at the floor, never one a
    round; once the lock is gone, the batches of 10 delete the rest. It used to retry the
    configured 32 every round with a bare "canceling statement" line, deleting nothing."""
    caplog.set_level(logging.DEBUG, logger="harvest.worker")
    with pg_server.admin() as admin:  # the worker this janitor runs in registers itself
        admin.execute(f'GRANT harvest_worker TO "{conninfo.conninfo_to_dict(platform_login)["user"]}"')
    with psycopg.connect(db, autocommit=True) as owner:
        owner.execute("SELECT harvest.set_retention('30 days', 32, 'test')")
        owner.execute(
            "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at,"
            " completed_at)"
            " SELECT gen_random_uuid(), 'backlog', 'backlog-' || n, 'COMPLETED', now() - interval '50 days',"
            " now() - interval '40 days' + n * interval '1 second' FROM generate_series(1, 40) AS n"
        )
        owner.execute(
            "CREATE FUNCTION public.janitor_test_wait() RETURNS trigger LANGUAGE plpgsql AS"
            " $$BEGIN PERFORM pg_advisory_xact_lock_shared(727272); RETURN OLD; END$$"
        )
        owner.execute(
            "CREATE TRIGGER janitor_test_wait BEFORE DELETE ON harvest.executions FOR EACH ROW"
            " WHEN (OLD.workflow_id = 'backlog-20') EXECUTE FUNCTION public.janitor_test_wait()"
        )
        holder = psycopg.connect(db, autocommit=True)
        holder.execute("SELECT pg_advisory_lock(727272)")
        try:

            async def main() -> None:
                worker = Worker(
                    App(workflows=[idle]),
                    platform_login,
                    run_worker=False,
                    run_scanner=False,
                    run_retention=True,
                    retention_interval=0.1,
                )
                task = asyncio.create_task(worker.run())
                try:
                    deadline = time.monotonic() + 30
                    # Three rounds at the floor, each refused again: logged at DEBUG only.
                    while len(_janitor_lines(caplog, logging.DEBUG)) < 3 and time.monotonic() < deadline:
                        await asyncio.sleep(0.05)
                    assert _runs(owner) == 24  # runs 1..16, in the batch of 16 that fitted
                    warnings = _janitor_lines(caplog, logging.WARNING)
                    assert len(warnings) == 3, warnings
                    assert "now 16 execution(s)" in warnings[0] and "now 10 execution(s)" in warnings[1]
                    assert "a batch of 10 execution(s)" in warnings[2]
                    for line in warnings:
                        assert "rolled back" in line and "ALTER ROLE" in line and "57014" in line, line
                    holder.close()  # the lock gone: the batches of 10 fit
                    while _runs(owner) and time.monotonic() < deadline:
                        await asyncio.sleep(0.05)
                    assert _runs(owner) == 0
                    assert len(_janitor_lines(caplog, logging.WARNING)) == 3
                    assert not [r for r in caplog.records if "retention run failed" in r.getMessage()]
                finally:
                    worker.request_stop()
                    await asyncio.wait_for(task, 20)

            asyncio.run(main())
        finally:
            holder.close()
            owner.execute("DROP TRIGGER janitor_test_wait ON harvest.executions")
            owner.execute("DROP FUNCTION public.janitor_test_wait()")
