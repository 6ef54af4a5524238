"""examples/standalone_worker: ``harvest worker`` as its own process with the example's config
file; SIGTERM drains it (the renders it holds finish, once, and it exits 0) and a second
worker does the rest. Real processes, a real signal."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

from examples.standalone_worker.__main__ import CONFIG, demo
from examples.standalone_worker.app import app
from examples.standalone_worker.client import start_reports
from harvest import App, Client
from harvest.testing import WorkflowEnvironment


@pytest.fixture
def harvest_app() -> App:
    return app


def test_sigterm_drains_the_worker_and_a_second_one_finishes(db: str, tmp_path: Path):
    result = demo(db, tmp_path, count=3, work_seconds=1.0)

    assert result.first_exit_code == 0
    assert result.in_flight_at_sigterm  # it was rendering when the signal came ...
    assert set(result.in_flight_at_sigterm) <= set(result.finished_by_first)  # ... and finished it
    assert "finishing" in result.first_log and "in-flight" in result.first_log
    assert result.results == {f"report-{n}": f"published report-{n}.report" for n in (1, 2, 3)}
    # Every render ran exactly once: the drain handed nothing back half done.
    for n in (1, 2, 3):
        assert (tmp_path / f"report-{n}.started").read_text() == "attempt 1\n"
    with Client(db) as client:
        for n in (1, 2, 3):
            events = client.get_handle(workflow_id=f"report-{n}").history()
            completed = [e["event_data"]["attempt"] for e in events if e["event_type"] == "ActivityCompleted"]
            assert completed == [1, 1]
            assert not [e for e in events if e["event_type"] == "ActivityFailed"]
    with psycopg.connect(db) as conn:
        statuses = [row[0] for row in conn.execute("SELECT status FROM harvest.workers ORDER BY started_at")]
    assert statuses == ["stopped", "stopped"]  # both drained, neither left stale


def test_the_config_file_is_what_the_worker_loads():
    from harvest.config import load_config

    config = load_config(str(CONFIG), env={})
    assert config.get("role") == "worker"
    assert config.get("worker.queues") == ["reports"]
    assert (config.get("worker.concurrency"), config.get("worker.shutdown_grace")) == (2, 20)


def test_the_client_command_works_with_an_out_dir_that_does_not_exist_yet(
    harvest_env: WorkflowEnvironment, tmp_path: Path
):
    """client.py's docstring runs it with `--out /tmp/reports`, a directory nobody made: the
    render made no directory, failed three times with FileNotFoundError and was dead-lettered,
    and `--wait` hung. The worker now makes it (it may run on another machine than the client)."""
    out = tmp_path / "reports"
    handles = start_reports(harvest_env.client, 1, str(out), 0.0)
    assert handles[0].result(timeout=30) == "published report-1.report"
    assert (out / "report-1.report").read_text() == "report report-1\n"
