"""Discarding a start a gate holds back (harvest.discard_pending_start / discard_pending_starts):
a discard and a release of the same start race on the gate's lock, and exactly one wins; the
operator's faces (the SqlApi, the CLI) reach it."""

from __future__ import annotations

import json

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.types.json import Jsonb
from race_helpers import in_thread, wait_until_blocked

from harvest import App, Debounce, Throttle, workflow
from harvest.cli.main import main
from harvest.core.errors import InvalidArgument, NotFound


@workflow(throttle=Throttle(rps=1, burst=1, key="input.tenant"))
async def held_send(ctx, order: dict) -> dict:
    return order


@workflow(debounce=Debounce(quiet="5s", key="input.doc"))
async def held_reindex(ctx, change: dict) -> dict:
    return change


APP = App(workflows=[held_send, held_reindex])
T0 = "2030-01-01T00:00:00+00:00"
LATER = "2030-01-01T00:10:00+00:00"


def session(db: str, name: str, at: str = T0) -> psycopg.Connection:
    conn = psycopg.connect(db, autocommit=True, application_name=name)
    conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (at,))
    return conn


@pytest.fixture
def held(db: str) -> tuple[int, int]:
    """Two throttled starts of one tenant held back (the first took the burst's token): their ids."""
    with session(db, "setup") as conn:
        conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(APP.flow_policies()),))
        for n in range(3):
            conn.execute(
                "SELECT harvest.start_workflow('held_send', %s, %s, 'default')",
                (Jsonb([{"tenant": "acme", "n": n}]), f"send-{n}"),
            )
        rows = conn.execute("SELECT id, workflow_id FROM harvest.list_pending_starts('held_send')").fetchall()
    assert [r[1] for r in rows] == ["send-1", "send-2"]
    return rows[0][0], rows[1][0]


def cli(db: str, *args: str):
    return CliRunner().invoke(main, list(args), env={"HARVEST_DATABASE_URL": db})


def runs_of(db: str, workflow_id: str) -> int:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT count(*) FROM harvest.executions WHERE workflow_id = %s", (workflow_id,)
        ).fetchone()[0]


def test_a_discard_holding_the_gate_keeps_the_release_from_starting_it(
    db: str, held: tuple[int, int]
) -> None:
    with session(db, "discarder") as discarder, session(db, "scanner", LATER) as scanner:
        discarder.execute("BEGIN")
        dropped = discarder.execute(
            "SELECT harvest.discard_pending_start(%s, 'op-1')", (held[0],)
        ).fetchone()[0]
        assert dropped["workflow_id"] == "send-1"
        # The scanner tries the gate (pg_try_): held, it skips the key this pass and never waits.
        assert scanner.execute("SELECT harvest.release_pending_starts()").fetchone()[0] == 0
        discarder.execute("COMMIT")
        # The next pass finds the row gone: only the start behind it runs.
        assert scanner.execute("SELECT harvest.release_pending_starts()").fetchone()[0] == 1
    assert runs_of(db, "send-1") == 0
    assert runs_of(db, "send-2") == 1


def test_a_release_holding_the_gate_wins_and_the_discard_waiting_on_it_finds_nothing(
    db: str, held: tuple[int, int]
) -> None:
    outcome: dict[str, object] = {}
    with session(db, "scanner", LATER) as scanner, session(db, "discarder") as discarder:
        scanner.execute("BEGIN")
        assert scanner.execute("SELECT harvest.release_pending_starts()").fetchone()[0] == 1  # (send-1, FIFO)
        # The discard waits on the gate the release holds (not a chance interleaving: asserted).
        thread = in_thread(
            lambda: discarder.execute("SELECT harvest.discard_pending_start(%s)", (held[0],)).fetchone(),
            outcome,
        )
        with psycopg.connect(db, autocommit=True) as watcher:
            wait_until_blocked(watcher, "discarder", "the gate's advisory lock")
        scanner.execute("COMMIT")
        thread.join(20)
    err = outcome["result"]
    assert isinstance(err, psycopg.Error) and err.sqlstate == "HR002", err
    assert "released" in str(err.diag.message_hint)
    assert runs_of(db, "send-1") == 1  # the release won: its run stands, nothing was erased


def test_the_sql_api_discards_by_id_and_by_filter_and_refuses_bad_input(db: str, client, held) -> None:
    with client.sql() as sql:
        listed = sql.list_pending_starts("held_send")
        assert [r["id"] for r in listed] == list(held)
        assert sql.discard_pending_start(held[0], operator_id="op-2")["workflow_id"] == "send-1"
        with pytest.raises(NotFound):
            sql.discard_pending_start(held[0])
        with pytest.raises(InvalidArgument):
            sql.discard_pending_starts()  # no filter: it would select every held-back start
        dry = sql.discard_pending_starts(workflow_name="held_send", dry_run=True)
        assert (dry["matched"], dry["discarded"]) == (1, 0)
        done = sql.discard_pending_starts(workflow_name="held_send", gate_key="acme", operator_id="op-2")
        assert (done["discarded"], done["ids"]) == (1, [held[1]])
    with psycopg.connect(db, autocommit=True) as conn:
        audit = conn.execute(
            "SELECT operation, operator_id FROM harvest.audit_log"
            " WHERE operation LIKE 'pending_start.%' ORDER BY id"
        ).fetchall()
    assert audit == [("pending_start.discard", "op-2"), ("pending_start.discard_many", "op-2")]


def test_the_cli_lists_and_discards_held_back_starts(db: str, held: tuple[int, int]) -> None:
    listed = cli(db, "start-gate", "list", "--workflow-name", "held_send", "--output", "json")
    assert listed.exit_code == 0, listed.output
    assert [r["id"] for r in json.loads(listed.stdout)] == list(held)
    one = cli(db, "start-gate", "discard", str(held[0]), "--operator-id", "op-3", "--output", "json")
    assert one.exit_code == 0, one.output
    assert json.loads(one.stdout)["workflow_id"] == "send-1"
    again = cli(db, "start-gate", "discard", str(held[0]))
    assert again.exit_code != 0 and "no pending start has id" in again.output
    nofilter = cli(db, "start-gate", "discard-many")
    assert nofilter.exit_code != 0 and "needs a filter" in nofilter.output
    many = cli(
        db,
        "start-gate",
        "discard-many",
        "--workflow-name",
        "held_send",
        "--operator-id",
        "op-3",
        "--output",
        "json",
    )
    assert many.exit_code == 0, many.output
    assert json.loads(many.stdout)["discarded"] == 1
