"""Reads racing the retention janitor (docs/operations.md, "Retention"): a read that meets a run
retention deleted says so; it never answers as if the run had no history."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest
from click.testing import CliRunner

from harvest import Client
from harvest.cli.main import main
from harvest.core.errors import NotFound
from harvest.db.sqlapi import SqlApi


def _ended_long_ago(db: str, client: Client) -> str:
    handle = client.start_workflow("nobody_runs_this", {"n": 1}, workflow_id="exported")
    handle.terminate("done")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "UPDATE harvest.executions SET completed_at = completed_at - interval '40 days' WHERE id = %s",
            (handle.execution_id,),
        )
    return handle.execution_id


def test_an_export_whose_run_retention_deletes_midway_fails_and_writes_no_file(
    db: str, client: Client, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The export read the run, then its events in a transaction of their own: a retention batch
    committed in between left a file with the run and no events, and exit 0."""
    run = _ended_long_ago(db, client)
    original = SqlApi.iter_history

    def deleted_first(self: SqlApi, execution_id: str, page_size: int = 500):  # type: ignore[no-untyped-def]
        with psycopg.connect(db, autocommit=True) as janitor:
            assert SqlApi(janitor).run_retention("30 days")["deleted"] == 1
        return original(self, execution_id, page_size)

    monkeypatch.setattr(SqlApi, "iter_history", deleted_first)
    out = tmp_path / "export.json"
    r = CliRunner().invoke(main, ["history", "export", run, "--output-file", str(out), "--database-url", db])
    assert r.exit_code != 0 and "not found" in r.stderr, (r.exit_code, r.stderr)
    assert not out.exists()


def test_the_history_of_an_unknown_run_is_not_found(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn, pytest.raises(NotFound):
        SqlApi(conn).get_history("00000000-0000-0000-0000-000000000000")
