"""Cancel, terminate and signal many runs by filter (harvest.cancel_workflows, terminate_workflows,
signal_workflows; harvest.client.batch; `harvest workflow bulk-*`; POST /workflows/{action}).

One database and two shards; a run a rebalance moved acted on at its live copy; runs that end
(or are sealed) between the scan and the act, raced on real connections; the refusal of a filter
that names nothing; the roles; a dry run that writes nothing.
"""

from __future__ import annotations

import json
import threading
import time

import psycopg
import pytest
from operator_helpers import harvest, start
from psycopg.types.json import Jsonb

from harvest import Client
from harvest.client.batch import run_batch
from harvest.db.connection import failure_reason
from harvest.db.sqlapi import translated_errors
from harvest.shard import ShardPools, ShardRouter
from harvest.shard.fanout import is_shard_failure


def _runs(conn: psycopg.Connection, name: str, n: int, prefix: str, **attrs: str) -> list[str]:
    return [start(conn, name, f"{prefix}-{i}", search_attributes=attrs or None) for i in range(n)]


def _col(dsn: str, sql: str, *args: object) -> list:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return [r[0] for r in conn.execute(sql, args or None).fetchall()]


def _json(result) -> dict:
    return json.loads(result.stdout)


# -- one database -------------------------------------------------------------------------------
def test_bulk_cancel_acts_on_the_filtered_live_runs_in_steps_and_audits_each_step(db, conn) -> None:
    early = _runs(conn, "send_digest", 3, "early")
    late = _runs(conn, "send_digest", 1, "late")
    other = _runs(conn, "other", 1, "other")
    ended = _runs(conn, "send_digest", 1, "ended")
    conn.execute("SELECT harvest.terminate_workflow(%s)", (ended[0],))
    conn.execute(
        "UPDATE harvest.executions SET created_at = created_at - interval '1 hour' WHERE id <> %s", (late[0],)
    )
    cut = conn.execute(
        "SELECT created_at - interval '1 minute' FROM harvest.executions WHERE id = %s", (late[0],)
    ).fetchone()[0]

    done = harvest(
        db,
        "workflow",
        "bulk-cancel",
        "--workflow-name",
        "send_digest",
        "--created-before",
        cut.isoformat(),
        "--batch",
        "2",
        "--reason",
        "incident 42",
        "--operator-id",
        "ops",
        "--output",
        "json",
    )
    assert done.returncode == 0, done.stderr
    summary = _json(done)
    assert (summary["matched"], summary["acted"], summary["already_ended"], summary["failed"]) == (3, 3, 0, 0)
    asked = _col(db, "SELECT id::text FROM harvest.executions WHERE cancel_requested ORDER BY 1")
    assert asked == sorted(early)  # not the later one, not the other workflow, not the ended one
    reasons = _col(
        db, "SELECT event_data ->> 'reason' FROM harvest.events WHERE event_type = 'WorkflowCancelRequested'"
    )
    assert reasons == ["incident 42"] * 3
    # One audit row a step (two steps of at most 2), naming the batch, the filter and the operator.
    rows = _col(
        db, "SELECT details FROM harvest.audit_log WHERE operation = 'workflow.bulk_cancel' ORDER BY id"
    )
    assert [r["acted"] for r in rows] == [2, 1]
    assert {r["batch_id"] for r in rows} == {summary["batch_id"]}
    assert rows[0]["workflow_name"] == "send_digest"
    assert _col(
        db, "SELECT DISTINCT operator_id FROM harvest.audit_log WHERE operation = 'workflow.bulk_cancel'"
    ) == ["ops"]

    again = _json(
        harvest(db, "workflow", "bulk-cancel", "--workflow-name", "send_digest", "--output", "json")
    )
    assert (again["acted"], again["unchanged"]) == (1, 3)  # asked already: unchanged, not an error
    assert other[0] not in asked


def test_a_dry_run_counts_and_samples_and_writes_nothing(db, conn) -> None:
    runs = _runs(conn, "send_digest", 3, "d", tenant="acme")
    before = _col(db, "SELECT count(*) FROM harvest.events")[0]
    for action in ("bulk-cancel", "bulk-terminate"):
        shown = harvest(
            db, "workflow", action, "--search-attr", "tenant=acme", "--dry-run", "--output", "json"
        )
        assert shown.returncode == 0, shown.stderr
        doc = _json(shown)
        assert doc["dry_run"] and doc["matched"] == 3 and sorted(doc["execution_ids"]) == sorted(runs)
    text = harvest(db, "workflow", "bulk-cancel", "--search-attr", "tenant=acme", "--dry-run")
    assert "dry run: 3 live run(s) selected, nothing written" in text.stdout
    assert _col(db, "SELECT count(*) FROM harvest.events")[0] == before
    assert _col(db, "SELECT count(*) FROM harvest.audit_log WHERE operation LIKE 'workflow.bulk_%'") == [0]
    assert _col(
        db, "SELECT count(*) FROM harvest.executions WHERE status <> 'RUNNING' OR cancel_requested"
    ) == [0]


def test_a_filter_that_names_no_runs_is_refused_and_terminate_asks_first(db, conn) -> None:
    _runs(conn, "send_digest", 2, "r")
    for args in ([], ["--state", "RUNNING"], ["--filter", "  "]):
        refused = harvest(db, "workflow", "bulk-cancel", *args)
        assert refused.returncode == 2, refused
        assert "needs a filter" in refused.stderr
    ended_state = harvest(
        db, "workflow", "bulk-cancel", "--workflow-name", "send_digest", "--state", "COMPLETED"
    )
    assert ended_state.returncode == 2 and "only live runs" in ended_state.stderr
    # No terminal to ask on, no --yes: refused, nothing ended.
    unasked = harvest(db, "workflow", "bulk-terminate", "--workflow-name", "send_digest")
    assert unasked.returncode == 2 and "--yes" in unasked.stderr
    assert _col(db, "SELECT count(*) FROM harvest.executions WHERE status = 'RUNNING'") == [2]
    with psycopg.connect(db, autocommit=True) as c, pytest.raises(psycopg.Error, match="needs a filter"):
        c.execute("SELECT harvest.terminate_workflows()")
    ended = _json(
        harvest(
            db, "workflow", "bulk-terminate", "--workflow-name", "send_digest", "--yes", "--output", "json"
        )
    )
    assert ended["acted"] == 2
    assert _col(db, "SELECT DISTINCT status FROM harvest.executions") == ["TERMINATED"]


def test_bulk_signal_reaches_each_run_once_per_batch(db, conn) -> None:
    runs = _runs(conn, "send_digest", 2, "s")
    first = _json(
        harvest(
            db,
            "workflow",
            "bulk-signal",
            "wake",
            "--workflow-name",
            "send_digest",
            "--payload-json",
            '{"n": 1}',
            "--batch-id",
            "incident-42",
            "--reason",
            "wake the digests",
            "--output",
            "json",
        )
    )
    assert first["acted"] == 2 and first["batch_id"] == "incident-42"
    audited = "SELECT details ->> 'reason' FROM harvest.audit_log WHERE operation = 'workflow.bulk_signal'"
    assert _col(db, audited) == ["wake the digests"]  # (the reason in the step's audit row)
    again = _json(
        harvest(
            db,
            "workflow",
            "bulk-signal",
            "wake",
            "--workflow-name",
            "send_digest",
            "--batch-id",
            "incident-42",
            "--output",
            "json",
        )
    )
    assert (again["acted"], again["unchanged"]) == (0, 2)
    got = _col(
        db,
        "SELECT execution_id::text || ' ' || (event_data -> 'payload')::text FROM harvest.events"
        " WHERE event_type = 'SignalReceived' ORDER BY 1",
    )
    assert got == sorted(f'{r} {{"n": 1}}' for r in runs)


def test_the_roles_reader_cannot_and_operator_cannot_terminate(db, conn) -> None:
    _runs(conn, "send_digest", 1, "role")
    for role, call, allowed in (
        ("harvest_reader", "cancel_workflows(p_workflow_name => 'send_digest')", False),
        ("harvest_reader", "signal_workflows('x', p_workflow_name => 'send_digest')", False),
        ("harvest_operator", "terminate_workflows(p_workflow_name => 'send_digest')", False),
        ("harvest_operator", "cancel_workflows(p_workflow_name => 'send_digest', p_dry_run => true)", True),
        ("harvest_admin", "terminate_workflows(p_workflow_name => 'send_digest', p_dry_run => true)", True),
    ):
        with psycopg.connect(db, autocommit=True) as c:
            c.execute(f"SET ROLE {role}")
            if allowed:
                c.execute(f"SELECT harvest.{call}")
            else:
                with pytest.raises(psycopg.errors.InsufficientPrivilege):
                    c.execute(f"SELECT harvest.{call}")


# -- races: runs that end, or are sealed, between the scan and the act ------------------------------
def _until_waiting(db: str, call: str) -> None:
    """Until a session running ``call`` (a batch's SQL function) waits on a lock."""
    with psycopg.connect(db, autocommit=True) as watch:
        for _ in range(600):
            waiting = watch.execute(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' AND query LIKE %s"
                " AND pid <> pg_backend_pid()",
                (f"%{call}%",),
            ).fetchone()[0]
            if waiting:
                return
            time.sleep(0.05)
    raise AssertionError(f"the batch ({call}) never waited on the held row")


def _raced(
    db: str, run: str, change: str, call: str = "cancel_workflows(p_workflow_name => 'send_digest')"
) -> dict:
    """``call`` (cancel_workflows over the send_digest runs) while another session holds ``run``'s
    row and then makes ``change`` to it: the batch scanned ``run`` live, waits on its lock, and
    acts after the change commits."""
    holder = psycopg.connect(db)
    holder.execute("SELECT 1 FROM harvest.executions WHERE id = %s FOR UPDATE", (run,))
    answer: dict = {}

    def batch() -> None:
        with psycopg.connect(db, autocommit=True) as c:
            answer.update(c.execute(f"SELECT harvest.{call}").fetchone()[0])

    thread = threading.Thread(target=batch)
    thread.start()
    try:
        _until_waiting(db, call.split("(")[0])
        holder.execute(change, (run,))
        holder.commit()
    finally:
        holder.close()
        thread.join(30)
    return answer


def test_a_run_that_ends_between_the_scan_and_the_act_is_counted_not_an_error(db, conn) -> None:
    runs = _runs(conn, "send_digest", 3, "race")
    answer = _raced(db, runs[1], "SELECT harvest.terminate_workflow(%s, 'raced')")
    assert (answer["acted"], answer["already_ended"], answer["failures"]) == (2, 1, [])
    assert sorted(answer["execution_ids"]) == sorted([runs[0], runs[2]])


def test_a_run_that_leaves_the_filter_between_the_scan_and_the_act_is_left_alone(db, conn) -> None:
    """A batch of the PAUSED runs scans a run paused, and another session resumes it before the
    batch locks it: the run no longer matches the filter when acted on, so it is left alone
    (unchanged), as a run of another state would have been."""
    runs = _runs(conn, "send_digest", 2, "leave")
    for run in runs:
        conn.execute("SELECT harvest.pause_workflow(%s)", (run,))
    answer = _raced(
        db,
        runs[0],
        "SELECT harvest.resume_workflow(%s)",
        "terminate_workflows(p_workflow_name => 'send_digest', p_status => 'PAUSED')",
    )
    assert (answer["acted"], answer["unchanged"], answer["execution_ids"]) == (1, 1, [runs[1]])
    assert _col(db, "SELECT status FROM harvest.executions WHERE id = %s", runs[0]) == ["RUNNING"]


def test_a_run_sealed_between_the_scan_and_the_act_is_named_moved_untouched(db, conn) -> None:
    runs = _runs(conn, "send_digest", 2, "seal")
    seal = "UPDATE harvest.executions SET status = 'MIGRATED', migrated_to_shard = 1 WHERE id = %s"
    answer = _raced(db, runs[0], seal)
    assert answer["moved"] == [runs[0]] and answer["execution_ids"] == [runs[1]]
    assert _col(
        db,
        "SELECT count(*) FROM harvest.events WHERE execution_id = %s"
        " AND event_type = 'WorkflowCancelRequested'",
        runs[0],
    ) == [0]


# -- two shards -----------------------------------------------------------------------------------
def _quiescent(dsn: str, name: str, workflow_id: str, **attrs: str) -> str:
    """A run on ``dsn`` that decided its first task and waits with no task (a rebalance moves it)."""
    with psycopg.connect(dsn, autocommit=True) as c:
        run = start(c, name, workflow_id, queue=f"q-{workflow_id}", search_attributes=attrs or None)
        task = c.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('decider', %s, 1)",
            ([f"q-{workflow_id}"],),
        ).fetchone()
        c.execute(
            "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s)", (task[0], task[1], Jsonb([]))
        )
    return run


def _move(two_shards: dict[int, str], run: str) -> None:
    from harvest.shard.rebalance import Rebalancer

    with ShardPools(ShardRouter([0, 1], [0, 1], 0), two_shards, max_size=2) as pools:
        move = Rebalancer(pools, 0, 1, operator_id="ops@test").move(run)
    assert move.outcome == "moved", move


def _acme_on_two_shards(two_shards: dict[int, str]) -> tuple[list[str], str, list[str]]:
    """Tenant acme's send_digest runs: two on shard 0, two on shard 1 and one moved from 0 to 1
    (its seal left on 0); a globex run on 1 beside them. (The runs on 0, the moved one, on 1.)"""
    on0 = [_quiescent(two_shards[0], "send_digest", f"a{i}", tenant="acme") for i in range(2)]
    moved = _quiescent(two_shards[0], "send_digest", "moved", tenant="acme")
    on1 = [_quiescent(two_shards[1], "send_digest", f"b{i}", tenant="acme") for i in range(2)]
    _quiescent(two_shards[1], "send_digest", "globex", tenant="globex")
    _move(two_shards, moved)
    return on0, moved, on1


def test_over_two_shards_every_shard_is_acted_on_and_a_moved_run_at_its_live_copy(two_shards) -> None:
    on0, moved, on1 = _acme_on_two_shards(two_shards)
    assert _col(two_shards[0], "SELECT status FROM harvest.executions WHERE id = %s", moved) == ["MIGRATED"]

    done = _harvest_env(
        two_shards,
        "workflow",
        "bulk-terminate",
        "--search-attr",
        "tenant=acme",
        "--yes",
        "--batch",
        "1",
        "--output",
        "json",
    )
    assert done.returncode == 0, done.stderr
    summary = _json(done)
    assert (summary["matched"], summary["acted"], summary["failed"]) == (5, 5, 0)
    assert {s["shard_id"]: s["acted"] for s in summary["shards"]} == {0: 2, 1: 3}
    assert summary["unavailable_shards"] == [] and summary["status"] == "complete"
    # The live copy on shard 1 is terminated; the seal on shard 0 is left as it was.
    assert _col(two_shards[1], "SELECT status FROM harvest.executions WHERE id = %s", moved) == ["TERMINATED"]
    assert _col(two_shards[0], "SELECT status FROM harvest.executions WHERE id = %s", moved) == ["MIGRATED"]
    for run in on1:
        assert _col(two_shards[1], "SELECT status FROM harvest.executions WHERE id = %s", run) == [
            "TERMINATED"
        ]
    for run in on0:
        assert _col(two_shards[0], "SELECT status FROM harvest.executions WHERE id = %s", run) == [
            "TERMINATED"
        ]
    assert _col(two_shards[1], "SELECT status FROM harvest.executions WHERE workflow_id = 'globex'") == [
        "RUNNING"
    ]


def _harvest_env(two_shards: dict[int, str], *args: str):
    import os

    import cli_forks
    from operator_helpers import REPO

    env = os.environ.copy()
    env["HARVEST_DATABASE_URL"] = two_shards[0]
    env.update({f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in two_shards.items()})
    env["PYTHONPATH"] = str(REPO / "harvest_py")
    return cli_forks.run(args, env, timeout=120)


def test_a_run_named_moved_is_followed_from_its_origin_to_where_it_lives(two_shards) -> None:
    """The executor's per-target dispatch: a run a step names as moved (sealed since the scan) is
    acted on by its id, which carries shard 0, through the seal there to its live copy on 1."""
    moved = _quiescent(two_shards[0], "send_digest", "followed")
    _move(two_shards, moved)
    with ShardPools(ShardRouter([0, 1], [0, 1], 0), two_shards, max_size=2) as pools:

        def on_shard(shard, fn):
            with pools.api(shard) as sql, translated_errors():
                answer = fn(sql)
            if shard == 0:  # as if the seal had come between this step's scan and its act
                answer = {**answer, "moved": [moved]}
            return answer

        def follow(execution_id, fn):
            return pools.follow(execution_id, lambda shard: (shard, on_shard(shard, fn)))

        tally = run_batch(
            [0],
            on_shard,
            follow,
            "cancel",
            {"workflow_name": "send_digest"},
            is_outage=is_shard_failure,
            failure_text=failure_reason,
        )
    out = tally.as_dict()
    assert (out["acted"], out["failed"]) == (1, 0), json.dumps(out)
    assert {s["shard_id"]: (s["acted"], s["followed"]) for s in out["shards"]} == {0: (0, 0), 1: (1, 1)}
    assert _col(two_shards[1], "SELECT cancel_requested FROM harvest.executions WHERE id = %s", moved) == [
        True
    ]
    assert _col(two_shards[0], "SELECT cancel_requested FROM harvest.executions WHERE id = %s", moved) == [
        False
    ]


def test_a_shard_that_cannot_be_reached_is_reported_and_the_others_done(two_shards) -> None:
    runs = [_quiescent(two_shards[0], "send_digest", f"u{i}") for i in range(2)]
    dead = "postgresql://nobody@127.0.0.1:1/none"
    with (
        ShardPools(
            ShardRouter([0, 1], [0, 1], 0), {0: two_shards[0], 1: dead}, max_size=2, acquire_timeout=2
        ) as pools,
        Client(shards=pools) as client,
    ):
        out = client.cancel_workflows(workflow_name="send_digest", reason="r")
    assert out["acted"] == 2 and out["unavailable_shards"] == [1] and out["status"] == "partial"
    assert _col(two_shards[0], "SELECT count(*) FROM harvest.executions WHERE cancel_requested") == [2]
    assert runs


def test_the_async_client_acts_on_many_runs_as_the_client_does(db, conn) -> None:
    import asyncio

    from harvest import AsyncClient

    runs = _runs(conn, "send_digest", 2, "async")

    async def go() -> dict:
        client = await AsyncClient.connect(db)
        try:
            preview = await client.terminate_workflows(workflow_name="send_digest", dry_run=True)
            assert preview["matched"] == 2 and sorted(preview["execution_ids"]) == sorted(runs)
            return await client.signal_workflows("go", {"n": 2}, workflow_name="send_digest", batch_size=1)
        finally:
            await client.close()

    out = asyncio.run(go())
    assert (out["acted"], out["failed"], out["shards"][0]["matched"]) == (2, 0, 2)
    with Client(db) as client:
        assert client.cancel_workflows(workflow_name="send_digest")["acted"] == 2
    with pytest.raises(psycopg.Error, match="needs a filter"), psycopg.connect(db, autocommit=True) as c:
        c.execute("SELECT harvest.signal_workflows('go', p_status => 'RUNNING')")


def test_the_clients_step_by_default_in_the_batch_module_step(db, conn) -> None:
    """Client.act_on_workflows (and AsyncClient's) without batch_size step BATCH_STEP runs a
    transaction, as the CLI and the route do: not 100, past the 64 subtransactions a backend
    caches (harvest.client.batch)."""
    import asyncio

    from harvest import AsyncClient
    from harvest.client.batch import BATCH_STEP

    _runs(conn, "send_digest", BATCH_STEP + 1, "step")
    with Client(db) as client:
        assert client.cancel_workflows(workflow_name="send_digest")["acted"] == BATCH_STEP + 1

    async def signal() -> dict:
        client = await AsyncClient.connect(db)
        try:
            return await client.signal_workflows("go", workflow_name="send_digest")
        finally:
            await client.close()

    assert asyncio.run(signal())["acted"] == BATCH_STEP + 1
    steps = "SELECT count(*) FROM harvest.audit_log WHERE operation = %s"
    assert _col(db, steps, "workflow.bulk_cancel") == [2] and _col(db, steps, "workflow.bulk_signal") == [2]


def _deadlocked_terminate(db: str, held_task: str, wanted_run: str, timeouts: tuple[str, str]) -> dict:
    """A step of `terminate_workflows` over send_digest meeting another session in a cycle: the
    other session holds ``held_task``'s run's task, and once the step waits on it, asks for
    ``wanted_run``'s row (which the step holds), then commits. ``timeouts``: the step's
    deadlock_timeout and the other session's (who waited first and longer is the one aborted).
    The server checks a wait for a cycle once, when its deadlock_timeout ends: the step's must
    end after the other session joins the cycle (this thread sees the step wait, by polling,
    then asks), so it is seconds, not milliseconds (50 ms lost that race under a loaded CI, and
    the other session's own check, 10 min later, aborted it instead).
    The step's answer; the other session's error, if any, is raised."""
    other = psycopg.connect(db)
    other.execute(f"SET deadlock_timeout = '{timeouts[1]}'")
    other.execute("SELECT 1 FROM harvest.tasks WHERE execution_id = %s FOR UPDATE", (held_task,))
    answer: dict = {}
    errors: list[BaseException] = []

    def batch() -> None:
        try:
            with psycopg.connect(db, autocommit=True) as c:
                c.execute(f"SET deadlock_timeout = '{timeouts[0]}'")
                call = (
                    "SELECT harvest.terminate_workflows(p_workflow_name => 'send_digest', p_reason => 'dl')"
                )
                answer.update(c.execute(call).fetchone()[0])
        except BaseException as exc:  # (reported by the assertion below)
            errors.append(exc)

    thread = threading.Thread(target=batch)
    thread.start()
    try:
        _until_waiting(db, "terminate_workflows")
        # The cycle: this session wants a row the step holds.
        other.execute("SELECT 1 FROM harvest.executions WHERE id = %s FOR UPDATE", (wanted_run,))
        other.commit()
    finally:
        other.close()
        thread.join(30)
    assert not errors, errors
    return answer


def test_a_deadlock_on_one_run_is_retried_in_place_not_counted_failed(db, conn) -> None:
    """A real deadlock on one run of a step: another session holds the run's task (as a worker
    closing it would) and then wants the run's row, which the batch's terminate holds while it
    drops that task. The batch's session is the one the deadlock check aborts (its
    deadlock_timeout is the short one); the run's subtransaction alone rolls back, the other
    session goes on and commits, and the run is terminated on its next attempt, not failed."""
    run = _runs(conn, "send_digest", 1, "deadlock")[0]
    assert _col(db, "SELECT count(*) FROM harvest.tasks WHERE execution_id = %s", run) == [1]
    answer = _deadlocked_terminate(db, run, run, ("2s", "1min"))
    assert (answer["acted"], answer["failures"], answer["execution_ids"]) == (1, [], [run]), answer
    assert _col(db, "SELECT status FROM harvest.executions WHERE id = %s", run) == ["TERMINATED"]


def test_a_deadlock_while_an_earlier_run_is_held_fails_the_run_not_the_other_session(db, conn) -> None:
    """Two runs: the step terminates r0 (its row stays locked to the step's commit), then r1,
    whose task another session holds; that session then wants r0's row: a cycle, which the
    step's deadlock check breaks first (it waited first). Retrying r1 in place re-enters the cycle
    while r0 stays held: the step pauses with r0 locked and fails r1 anyway, or the other session,
    waiting the longer, is the one its own check aborts (40P01 in a worker's or a caller's
    transaction). r1 counts as failed at once (one attempt); the other session commits."""
    r0, r1 = _runs(conn, "send_digest", 2, "held")
    # (the same timeout both sides: the step, which waited first, is the one aborted)
    answer = _deadlocked_terminate(db, r1, r0, ("2s", "2s"))
    assert answer["execution_ids"] == [r0], answer
    [failure] = answer["failures"]
    assert (failure["execution_id"], failure["sqlstate"], failure["attempts"]) == (r1, "40P01", 1), answer
    statuses = (
        "SELECT id::text, status FROM harvest.executions WHERE id = ANY(%s::uuid[]) ORDER BY created_at"
    )
    with psycopg.connect(db, autocommit=True) as c:
        assert c.execute(statuses, ([r0, r1],)).fetchall() == [(r0, "TERMINATED"), (r1, "RUNNING")]


def test_both_clients_report_progress_after_each_step(db, conn) -> None:
    """Client.act_on_workflows and AsyncClient's take progress(shard, matched so far), told after
    each step (the one batch flow both drive, harvest.client.batch)."""
    import asyncio

    from harvest import AsyncClient

    _runs(conn, "send_digest", 5, "progress")
    told: list[tuple[int, int]] = []
    with Client(db) as client:
        out = client.cancel_workflows(
            workflow_name="send_digest", batch_size=2, progress=lambda *a: told.append(a)
        )
    assert out["acted"] == 5 and told == [(0, 2), (0, 4), (0, 5)]

    async def signal() -> tuple[dict, list]:
        seen: list[tuple[int, int]] = []
        client = await AsyncClient.connect(db)
        try:
            done = await client.signal_workflows(
                "go", workflow_name="send_digest", batch_size=3, progress=lambda *a: seen.append(a)
            )
        finally:
            await client.close()
        return done, seen

    done, seen = asyncio.run(signal())
    assert done["acted"] == 5 and seen == [(0, 3), (0, 5)]


def test_a_serialization_failure_is_not_retried_in_the_same_snapshot(db, conn) -> None:
    """A 40001 on one run (a step in a REPEATABLE READ transaction whose run was updated after its
    snapshot) counts in failures at once: a retry inside the same transaction reads the same
    snapshot and meets the same conflict, so the step only paused (holding the locks of the runs
    before it) to fail the run three times. Only a deadlock is retried in place."""
    run = _runs(conn, "send_digest", 1, "rr")[0]
    touch = "UPDATE harvest.executions SET search_attributes = search_attributes WHERE id = %s"
    with psycopg.connect(db, autocommit=True) as batch, psycopg.connect(db, autocommit=True) as writer:
        batch.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
        batch.execute("SELECT count(*) FROM harvest.executions")  # (the snapshot is taken)
        writer.execute(touch, (run,))
        answer = batch.execute(
            "SELECT harvest.terminate_workflows(p_workflow_name => 'send_digest', p_reason => 'rr')"
        ).fetchone()[0]
        batch.execute("ROLLBACK")
    assert answer["acted"] == 0 and len(answer["failures"]) == 1, answer
    failure = answer["failures"][0]
    assert failure["sqlstate"] == "40001" and failure.get("attempts", 1) == 1, failure
