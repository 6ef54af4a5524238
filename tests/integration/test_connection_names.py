"""Each kind of `harvest` process names its connections (application_name), so pg_stat_activity
tells a worker from a scheduler and both from an operator's command: a real `harvest worker`
process, its connections read from the server (docs/operations.md, "Connection names"). Every
process said harvest-cli, the CLI's name, which the audit log reads as the source cli."""

from __future__ import annotations

import os
import signal
import subprocess

import psycopg
import pytest
from worker_helpers import HARVEST, cli_env, run_in_cli_worker, wait_until

from harvest import App, Client, activity, workflow

OTHERS = (
    "SELECT coalesce(array_agg(DISTINCT application_name ORDER BY application_name), '{}')"
    " FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
)


@activity
def names_seen(ctx) -> list[str]:
    """The application names of the other sessions on this database, as the worker runs this
    (its own connection is named like the others of its process: PGAPPNAME is the process')."""
    with psycopg.connect(os.environ["HARVEST_DATABASE_URL"], application_name="probe") as conn:
        row = conn.execute(OTHERS).fetchone()
    return list(row[0]) if row else []


@workflow
async def report_names(ctx) -> list[str]:
    return await ctx.execute_activity(names_seen)


app = App(workflows=[report_names], activities=[names_seen])


def test_a_worker_process_connects_as_harvest_worker(
    db: str, client: Client, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PGAPPNAME", raising=False)  # (the process' environment is this one's)
    names, _ = run_in_cli_worker(db, client, "test_connection_names:app", report_names, [], {})
    assert "harvest-worker" in names
    assert "harvest-cli" not in names


def test_the_callers_own_pgappname_wins(db: str, client: Client) -> None:
    names, _ = run_in_cli_worker(
        db, client, "test_connection_names:app", report_names, [], {"PGAPPNAME": "orders-fleet"}
    )
    assert "orders-fleet" in names
    assert "harvest-worker" not in names and "harvest-cli" not in names


def test_a_process_that_runs_the_scheduler_alone_connects_as_harvest_scheduler(db: str) -> None:
    env = {k: v for k, v in cli_env(db, {}).items() if k != "PGAPPNAME"}
    proc = subprocess.Popen(
        [*HARVEST, "worker", "test_connection_names:app", "--no-worker", "--scheduler"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        with psycopg.connect(db, autocommit=True) as conn:

            def seen() -> list[str]:
                row = conn.execute(OTHERS).fetchone()
                return [n for n in (row[0] if row else []) if n.startswith("harvest-")]

            names = wait_until(seen, "the scheduler process' connections")
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    assert set(names) == {"harvest-scheduler"}
