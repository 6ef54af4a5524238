"""A legal hold racing the calls that destroy payloads (docs/payloads.md, "Legal holds"): an
erasure and a retention run that took their snapshot before a hold committed must not destroy
the held run. The hold wins, or the destroying call is refused; never half."""

from __future__ import annotations

import psycopg
import pytest
from psycopg.types.json import Jsonb
from race_helpers import in_thread, session, wait_until_blocked

from harvest import Client
from harvest.core.errors import LegalHoldActive, TransactionConflict
from harvest.db.sqlapi import SqlApi

SECRET = "held-payload-078-05-1120"


def _ended_long_ago(db: str, client: Client, workflow_id: str) -> str:
    """A terminated run whose end is 40 days old: erasable, and past a 30-day window."""
    handle = client.start_workflow("nobody_runs_this", {"ssn": SECRET}, workflow_id=workflow_id)
    handle.terminate("done")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "UPDATE harvest.executions SET completed_at = completed_at - interval '40 days' WHERE id = %s",
            (handle.execution_id,),
        )
    return handle.execution_id


def _held_input(db: str, execution_id: str) -> object:
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute(
            "SELECT count(*) FROM harvest.legal_holds WHERE execution_id = %s", (execution_id,)
        ).fetchone() == (1,)
        return SqlApi(conn).get_execution(execution_id)["input"]


def test_an_erasure_whose_snapshot_predates_a_hold_is_refused(db, client):
    """An eraser in a REPEATABLE READ transaction took its snapshot; an admin then set a hold and
    committed. The erasure did not see the hold row and erased the held run: the hold must win."""
    run = _ended_long_ago(db, client, "hold-vs-erase")
    with session(db, "eraser") as eraser, session(db, "holder") as holder:
        eraser.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        eraser.execute("SELECT count(*) FROM harvest.legal_holds")  # the snapshot is taken
        SqlApi(holder).set_legal_hold(run, "case 7", "legal")
        with pytest.raises((LegalHoldActive, TransactionConflict, psycopg.errors.SerializationFailure)):
            SqlApi(eraser).erase_payloads(run, "ops")
        eraser.execute("ROLLBACK")
    assert _held_input(db, run) == [{"ssn": SECRET}]


def test_a_retention_run_whose_snapshot_predates_a_hold_keeps_the_held_run(db, client):
    """The same race with the janitor's batch: a hold committed after its snapshot was not seen,
    and the held run was deleted (its hold row left behind, holding nothing)."""
    run = _ended_long_ago(db, client, "hold-vs-retention")
    with session(db, "janitor") as janitor, session(db, "holder") as holder:
        janitor.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        janitor.execute("SELECT count(*) FROM harvest.legal_holds")
        SqlApi(holder).set_legal_hold(run, "case 8", "legal")
        try:
            deleted = SqlApi(janitor).run_retention("30 days")["deleted"]
        except (TransactionConflict, psycopg.errors.SerializationFailure):  # refused: retried later
            deleted = None
        janitor.execute("COMMIT" if deleted is not None else "ROLLBACK")
    assert deleted in (0, None)
    assert _held_input(db, run) == [{"ssn": SECRET}]


def test_a_payload_written_for_an_erased_run_is_stored_erased(db, client):
    """A writer that comes late (an activity attempt that outlived its run, its large result
    offloaded before its completion is refused as stale) stored its payload as the erased run's
    row, in full: the run's payloads were back after their erasure, until retention."""
    run = _ended_long_ago(db, client, "late-writer")
    with psycopg.connect(db, autocommit=True) as conn:
        sql = SqlApi(conn)
        sql.erase_payloads(run, "ops")
        [late] = sql.put_payloads(run, [{"ssn": SECRET}])
        stored = {str(k): v for k, v in sql.get_payloads([late]).items()}
    assert stored == {str(late): {"_harvest_erased": True}}


def test_a_payload_written_while_its_run_is_erased_is_erased_too(db, client):
    """The late writer read the run before an erasure committed and stored its row after: the
    erasure had not seen the row, and the row kept its payload."""
    run = _ended_long_ago(db, client, "racing-writer")
    outcome: dict = {}
    with session(db, "eraser") as eraser, session(db, "writer") as writer:
        eraser.execute("BEGIN")
        SqlApi(eraser).erase_payloads(run, "ops")  # the run's row stays locked until the commit
        thread = in_thread(lambda: SqlApi(writer).put_payloads(run, [{"ssn": SECRET}]), outcome)
        wait_until_blocked(eraser, "writer", "the run's row")
        eraser.execute("COMMIT")
        thread.join(20)
        [late] = outcome["result"]
        stored = {str(k): v for k, v in SqlApi(eraser).get_payloads([late]).items()}
    assert stored == {str(late): {"_harvest_erased": True}}


def _ended_chain(db: str, workflow_id: str, runs: int = 4) -> list[str]:
    """A continue-as-new chain of ``runs`` runs whose last ended 40 days ago (past a 30-day
    window), first run first."""
    with psycopg.connect(db, autocommit=True) as conn:
        ids = [
            str(row[0])
            for row in conn.execute("SELECT gen_random_uuid() FROM generate_series(1, %s)", (runs,))
        ]
        for n, run in enumerate(ids):
            last = n == runs - 1
            conn.execute(
                "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, output,"
                " continued_from, created_at, completed_at) VALUES (%s, 'chained', %s, %s, %s, %s,"
                " now() - interval '50 days' + %s * interval '1 day',"
                " now() - interval '49 days' + %s * interval '1 day')",
                (
                    run,
                    workflow_id,
                    "COMPLETED" if last else "CONTINUED_AS_NEW",
                    None if last else Jsonb({"continued_as_new": ids[n + 1]}),
                    ids[n - 1] if n else None,
                    n,
                    n,
                ),
            )
    return ids


def _left(db: str, ids: list[str]) -> list[int]:
    """Which runs of the chain (by position) are still there."""
    with psycopg.connect(db, autocommit=True) as conn:
        here = {
            str(r[0])
            for r in conn.execute("SELECT id FROM harvest.executions WHERE id = ANY(%s::uuid[])", (ids,))
        }
    return [n for n, run in enumerate(ids) if run in here]


def test_a_retention_batch_walking_up_a_chain_skips_a_run_being_held(db):
    """A batch takes the runs before each run it deletes in its chain. A hold being set on one of
    them (its row locked, not committed) stops the walk there: the held run and those before it
    stay (kept by their successor), and the batch does not wait for the holder."""
    ids = _ended_chain(db, "chain-vs-hold")
    with session(db, "holder") as holder, session(db, "janitor") as janitor:
        holder.execute("BEGIN")
        SqlApi(holder).set_legal_hold(ids[1], "case 9", "legal")  # the row locked until the commit
        first = SqlApi(janitor).run_retention("30 days")
        holder.execute("COMMIT")
        second = SqlApi(janitor).run_retention("30 days")
    assert (first["deleted"], second["deleted"]) == (2, 0), (first, second)
    assert _left(db, ids) == [0, 1]


def test_a_retention_batch_whose_snapshot_predates_a_hold_on_a_chain_run_keeps_it(db):
    """The same walk in a REPEATABLE READ batch whose snapshot predates the hold's commit: the
    hold it cannot see refuses the batch (retried later), and the next batch stops at the held
    run, as when it saw the hold."""
    ids = _ended_chain(db, "chain-vs-hold-rr")
    with session(db, "janitor") as janitor, session(db, "holder") as holder:
        janitor.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        janitor.execute("SELECT count(*) FROM harvest.legal_holds")
        SqlApi(holder).set_legal_hold(ids[1], "case 10", "legal")
        try:
            deleted = SqlApi(janitor).run_retention("30 days")["deleted"]
        except (TransactionConflict, psycopg.errors.SerializationFailure):  # refused: retried later
            deleted = None
        janitor.execute("COMMIT" if deleted is not None else "ROLLBACK")
        again = SqlApi(janitor).run_retention("30 days")["deleted"]
    assert (deleted, again) == (None, 2)
    assert _left(db, ids) == [0, 1]
