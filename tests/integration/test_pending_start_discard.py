"""Discarding a start a gate holds back (harvest.discard_pending_start / discard_pending_starts):
a discard and a release of the same start race on the gate's lock, and exactly one wins; the
offloaded row an admission is recording as its start's is kept from a discard or retention
racing it; the operator's faces (the SqlApi, the CLI) reach it."""

from __future__ import annotations

import json

import psycopg
import pytest
from click.testing import CliRunner
from psycopg.types.json import Jsonb
from race_helpers import (
    Racer,
    in_thread,
    race_behind_a_held_lock,
    wait_until_blocked,
    wait_until_done_or_blocked,
)

from harvest import App, Debounce, Throttle, workflow
from harvest.cli.main import main
from harvest.core.errors import InvalidArgument, NotFound


@workflow(throttle=Throttle(rps=1, burst=1, key="input.tenant"))
async def held_send(ctx, order: dict) -> dict:
    return order


@workflow(debounce=Debounce(quiet="5s", key="input.doc"))
async def held_reindex(ctx, change: dict) -> dict:
    return change


@workflow(debounce=Debounce(quiet="5s", key="input.doc"))
async def held_archive(ctx, change: dict) -> dict:
    return change


APP = App(workflows=[held_send, held_reindex, held_archive])
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
    first = cli(db, "start-gate", "list", "--workflow-name", "held_send", "--limit", "1", "--output", "json")
    assert first.exit_code == 0, first.output
    page = json.loads(first.stdout)
    assert [r["id"] for r in page["pending_starts"]] == [held[0]]
    assert page["pending_starts"][0]["input_bytes"] == len(json.dumps([{"tenant": "acme", "n": 1}]))
    assert page["pending_starts"][0]["offloaded_bytes"] == 0
    rest = cli(
        db,
        "start-gate",
        "list",
        "--workflow-name",
        "held_send",
        "--cursor",
        page["next_cursor"],
        "-o",
        "json",
    )
    assert rest.exit_code == 0, rest.output
    assert [r["id"] for r in json.loads(rest.stdout)["pending_starts"]] == [held[1]]
    assert json.loads(rest.stdout)["next_cursor"] is None
    shown = cli(db, "start-gate", "list", "--limit", "1")
    assert shown.exit_code == 0, shown.output
    assert "1 held-back start(s); next page: --cursor ps1." in shown.stdout
    other = cli(db, "start-gate", "list", "--workflow-name", "held_reindex", "--cursor", page["next_cursor"])
    assert other.exit_code != 0 and "other filters" in other.output
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


def test_a_discard_keeps_the_offloaded_row_another_gates_start_is_recording(db: str) -> None:
    """A discard erases the run-less rows its start owns unless another held-back start names
    them: an admission through another gate (its own lock, not this start's) that is recording
    the row as its own must be seen. It locks the row (FOR KEY SHARE) until it commits, and the
    discard locks the row before it reads the references: it waits, then keeps the row. Before,
    the discard did not see the uncommitted pending row and erased what that start had recorded."""
    with session(db, "setup") as conn:
        conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(APP.flow_policies()),))
        ref = conn.execute("SELECT (harvest.put_payloads(NULL, ARRAY['\"big\"'::jsonb]))[1]").fetchone()[0]
        arg = {"doc": "d1", "body": {"_harvest_ref": str(ref)}}
        conn.execute("SELECT harvest.start_workflow('held_reindex', %s, 'r-1', 'default')", (Jsonb([arg]),))
        held_id = conn.execute("SELECT id FROM harvest.pending_starts WHERE workflow_id = 'r-1'").fetchone()[
            0
        ]
    outcome: dict[str, object] = {}
    with session(db, "admitter") as admitter, session(db, "discarder") as discarder:
        admitter.execute("BEGIN")
        admitter.execute(
            "SELECT harvest.start_workflow('held_archive', %s, 'a-1', 'default')", (Jsonb([arg]),)
        )
        thread = in_thread(
            lambda: discarder.execute("SELECT harvest.discard_pending_start(%s)", (held_id,)).fetchone()[0],
            outcome,
        )
        with psycopg.connect(db, autocommit=True) as watcher:
            wait_until_done_or_blocked(watcher, thread, "discarder", "the row the admission recorded")
        admitter.execute("COMMIT")
        thread.join(20)
    done = outcome["result"]
    assert isinstance(done, dict) and done["workflow_id"] == "r-1", done
    assert done["payloads_erased"] == 0
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM harvest.payloads WHERE id = %s", (ref,)).fetchone()[0] == 1
        owned = conn.execute(
            "SELECT payload_ids FROM harvest.pending_starts WHERE workflow_id = 'a-1'"
        ).fetchone()[0]
    assert owned == [ref]  # the start that is left still owns it: its release hands it to its run


def test_retention_keeps_the_offloaded_row_a_start_is_being_admitted_with(db: str) -> None:
    """Retention's run-less sweep deletes a row past its window that no held-back start names. A
    start admitted at that moment with a reference to such a row (a client that stored its input
    long ago) locks it until it commits: the sweep skips it (SKIP LOCKED), and reads the
    references only after it locked its batch. Before, it read them first, did not see the
    admission's uncommitted row, and deleted the input the start had just recorded."""
    later = "2030-01-03T00:00:00+00:00"
    with session(db, "setup") as conn:
        conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(APP.flow_policies()),))
        ref = conn.execute("SELECT (harvest.put_payloads(NULL, ARRAY['\"old\"'::jsonb]))[1]").fetchone()[0]
    arg = {"doc": "d9", "body": {"_harvest_ref": str(ref)}}
    outcome: dict[str, object] = {}
    with session(db, "admitter", later) as admitter, session(db, "sweeper", later) as sweeper:
        admitter.execute("BEGIN")
        admitter.execute(
            "SELECT harvest.start_workflow('held_reindex', %s, 'r-9', 'default')", (Jsonb([arg]),)
        )
        thread = in_thread(
            lambda: sweeper.execute("SELECT harvest.run_retention('1 day')").fetchone()[0], outcome
        )
        with psycopg.connect(db, autocommit=True) as watcher:
            wait_until_done_or_blocked(watcher, thread, "sweeper", "the row the admission recorded")
        admitter.execute("COMMIT")
        thread.join(20)
    report = outcome["result"]
    assert isinstance(report, dict) and report["runless_payloads_deleted"] == 0, report
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM harvest.payloads WHERE id = %s", (ref,)).fetchone()[0] == 1


def test_retention_sweeps_past_the_offloaded_rows_held_back_starts_keep(db: str) -> None:
    """A run-less row a held-back start names is kept, and takes no place in the sweep's batch:
    one older than every other expired row, and a batch of one, still lets the next row go.
    Locked first and judged after, the kept rows filled every batch (the oldest first), and a
    backlog of them at least a batch long stopped the run-less sweep for good."""
    with session(db, "setup") as conn:
        conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(APP.flow_policies()),))
        kept = conn.execute("SELECT (harvest.put_payloads(NULL, ARRAY['\"kept\"'::jsonb]))[1]").fetchone()[0]
        arg = {"doc": "d5", "body": {"_harvest_ref": str(kept)}}
        conn.execute("SELECT harvest.start_workflow('held_reindex', %s, 'r-5', 'default')", (Jsonb([arg]),))
    with session(db, "writer", LATER) as conn:
        stray = conn.execute("SELECT (harvest.put_payloads(NULL, ARRAY['1'::jsonb]))[1]").fetchone()[0]
    with session(db, "sweeper", "2030-01-03T00:00:00+00:00") as sweeper:
        report = sweeper.execute("SELECT harvest.run_retention('1 day', 1)").fetchone()[0]
        left = {r[0] for r in sweeper.execute("SELECT id FROM harvest.payloads").fetchall()}
    assert report["runless_payloads_deleted"] == 1, report
    assert left == {kept}, (left, stray)


def test_a_discard_by_filter_locks_every_offloaded_row_in_id_order(db: str) -> None:
    """A discard by filter locks the offloaded rows of all its starts in one id order before it
    erases any (docs/internals.md, "Lock order", 1), as a discard by id does its start's. Locked
    start by start, it held the higher row of its first start while it waited for the lower row
    of its second; a discard by id of a start owning both (lower first) held that one and waited
    for the higher: a deadlock (40P01), one of the two discards lost."""
    with session(db, "setup") as conn:
        conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(APP.flow_policies()),))
        refs = sorted(
            conn.execute(
                "SELECT unnest(harvest.put_payloads(NULL, ARRAY['1'::jsonb, '2'::jsonb]))"
            ).fetchall()
        )
        low, high = (str(r[0]) for r in refs)

        def hold_back(doc: str, at: str, *owned: str) -> int:
            conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (at,))
            arg = {"doc": doc, "body": [{"_harvest_ref": ref} for ref in owned]}
            conn.execute(
                "SELECT harvest.start_workflow('held_reindex', %s, %s, 'default')", (Jsonb([arg]), doc)
            )
            return conn.execute(
                "SELECT id FROM harvest.pending_starts WHERE workflow_id = %s", (doc,)
            ).fetchone()[0]

        hold_back("a", "2030-01-01T00:00:00+00:00", high)  # (the filter's first start: the higher row)
        hold_back("b", "2030-01-01T00:00:01+00:00", low)  # (its second: the lower)
        both = hold_back("c", "2030-01-01T00:00:05+00:00", low, high)
    with psycopg.connect(db, autocommit=True) as watcher:
        outcome = race_behind_a_held_lock(
            db,
            watcher,
            lambda holder: holder.execute("SELECT 1 FROM harvest.payloads WHERE id = %s FOR SHARE", (low,)),
            Racer(
                "by_id",
                lambda c: c.execute("SELECT harvest.discard_pending_start(%s)", (both,)).fetchone()[0],
                "the lower row",
            ),
            Racer(
                "by_filter",
                lambda c: c.execute(
                    "SELECT harvest.discard_pending_starts(p_workflow_name => 'held_reindex', "
                    "p_created_before => '2030-01-01T00:00:02+00:00')"
                ).fetchone()[0],
                "the lower row, holding the higher before the fix",
            ),
        )
    assert outcome["by_id"]["workflow_id"] == "c", outcome
    assert outcome["by_filter"]["discarded"] == 2, outcome
