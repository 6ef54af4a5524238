"""Pause and resume many runs by filter (harvest.pause_workflows, resume_workflows; `harvest workflow
bulk-pause` / `bulk-resume`; Client.pause_workflows / resume_workflows): a worker stops deciding
the paused runs and goes on after the resume; steps with a continued cursor and an audit row
each; a run that ends between the scan and the act; a run in the other state unchanged; a cursor
of another action refused; two shards, a moved run paused at its live copy (docs/lifecycle.md,
"Pausing many runs")."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import psycopg
import pytest
from operator_helpers import harvest, start
from test_workflow_batch import _acme_on_two_shards, _col, _harvest_env, _json, _quiescent, _raced

from harvest import App, Client, activity, workflow
from harvest.shard import ShardPools, ShardRouter


@activity(start_to_close="30s")
async def bp_step(ctx, tag: str) -> str:
    return f"{tag}!"


@workflow
async def gated(ctx, tag: str) -> str:
    """Wait for the signal "go", then one activity."""
    await ctx.wait_for_signal("go")
    return await ctx.execute_activity(bp_step, tag)


APP = App(workflows=[gated], activities=[bp_step])


def _types(db: str, execution_id: str) -> list[str]:
    return _col(
        db, "SELECT event_type FROM harvest.events WHERE execution_id = %s ORDER BY event_id", execution_id
    )


def _waiting(db: str, execution_id: str) -> bool:
    """Whether the run decided its first task and waits (no workflow task left)."""
    return (
        "WorkflowTaskCompleted" in _types(db, execution_id)
        and not _col(
            db,
            "SELECT count(*) FROM harvest.tasks WHERE execution_id = %s AND kind = 'workflow'",
            execution_id,
        )[0]
    )


def test_a_worker_stops_deciding_the_paused_runs_and_goes_on_after_the_resume(
    db: str, start_worker, client
) -> None:
    """Runs of one tenant paused by `bulk-pause --search-attr`, a run of another tenant beside them:
    signalled alike, the worker finishes the one beside and decides none of the paused ones; after
    `Client.resume_workflows` each takes its buffered signal and finishes."""
    import time

    held = [client.start_workflow(gated, f"h{i}", search_attributes={"tenant": "acme"}) for i in range(3)]
    beside = client.start_workflow(gated, "beside", search_attributes={"tenant": "globex"})
    start_worker(APP, poll_interval=0.2)
    for _ in range(300):  # until every run decided its first task (it waits for the signal)
        if all(_waiting(db, h.execution_id) for h in [*held, beside]):
            break
        time.sleep(0.05)
    else:
        raise AssertionError("the runs never reached their wait")

    paused = harvest(
        db,
        "workflow",
        "bulk-pause",
        "--search-attr",
        "tenant=acme",
        "--reason",
        "bad deploy",
        "--output",
        "json",
    )
    assert paused.returncode == 0, paused.stderr
    assert (_json(paused)["acted"], _json(paused)["unchanged"]) == (3, 0)
    for run in [*held, beside]:
        run.signal("go", None)
    assert beside.result(timeout=30) == "beside!"  # the worker decides what it may
    for run in held:
        assert run.describe()["status"] == "PAUSED"
        assert _types(db, run.execution_id)[-2:] == ["WorkflowPaused", "SignalReceived"]
        assert _col(db, "SELECT status FROM harvest.tasks WHERE execution_id = %s", run.execution_id) == [
            "paused"
        ]

    out = client.resume_workflows(search_attributes=["tenant=acme"], reason="fixed", operator_id="ops")
    assert (out["acted"], out["unchanged"], out["failed"]) == (3, 0, 0)
    assert [run.result(timeout=30) for run in held] == ["h0!", "h1!", "h2!"]
    resumed = _col(
        db, "SELECT event_data ->> 'reason' FROM harvest.events WHERE event_type = 'WorkflowResumed'"
    )
    assert resumed == ["fixed"] * 3


def test_bulk_pause_steps_with_its_cursor_audits_each_step_and_counts_paused_runs_unchanged(db, conn) -> None:
    runs = [start(conn, "send_digest", f"p-{i}") for i in range(3)]
    conn.execute("SELECT harvest.pause_workflow(%s, 'by hand')", (runs[0],))
    other = start(conn, "other", "o-1")

    done = harvest(
        db,
        "workflow",
        "bulk-pause",
        "--workflow-name",
        "send_digest",
        "--state",
        "RUNNING,PAUSED",
        "--batch",
        "2",
        "--reason",
        "incident 7",
        "--operator-id",
        "ops",
        "--output",
        "json",
    )
    assert done.returncode == 0, done.stderr
    summary = _json(done)
    assert (summary["matched"], summary["acted"], summary["unchanged"], summary["failed"]) == (3, 2, 1, 0)
    assert (
        _col(db, "SELECT status FROM harvest.executions WHERE workflow_name = 'send_digest'")
        == ["PAUSED"] * 3
    )
    assert _col(db, "SELECT status FROM harvest.executions WHERE id = %s", other) == ["RUNNING"]
    # One audit row a step (a step of 2, then the cursor's step of 1), none a run.
    rows = _col(
        db, "SELECT details FROM harvest.audit_log WHERE operation = 'workflow.bulk_pause' ORDER BY id"
    )
    assert [(r["acted"], r["unchanged"]) for r in rows] == [(1, 1), (1, 0)]
    assert {r["batch_id"] for r in rows} == {summary["batch_id"]} and {r["reason"] for r in rows} == {
        "incident 7"
    }
    assert _col(db, "SELECT count(*) FROM harvest.audit_log WHERE operation = 'workflow.pause'") == [1]
    reasons = _col(
        db, "SELECT event_data ->> 'reason' FROM harvest.events WHERE event_type = 'WorkflowPaused'"
    )
    assert sorted(reasons) == ["by hand", "incident 7", "incident 7"]

    # A resume selects the PAUSED runs; a dry run counts them, writing nothing.
    preview = _json(
        harvest(
            db, "workflow", "bulk-resume", "--workflow-name", "send_digest", "--dry-run", "--output", "json"
        )
    )
    assert (preview["matched"], preview["acted"]) == (3, 0)
    resumed = _json(
        harvest(
            db,
            "workflow",
            "bulk-resume",
            "--workflow-name",
            "send_digest",
            "--reason",
            "over",
            "--output",
            "json",
        )
    )
    assert (resumed["acted"], resumed["failed"]) == (3, 0)
    assert (
        _col(db, "SELECT status FROM harvest.executions WHERE workflow_name = 'send_digest'")
        == ["RUNNING"] * 3
    )
    again = _json(
        harvest(
            db,
            "workflow",
            "bulk-resume",
            "--workflow-name",
            "send_digest",
            "--state",
            "RUNNING",
            "--output",
            "json",
        )
    )
    assert (again["acted"], again["unchanged"]) == (0, 3)  # not paused: unchanged, not an error
    assert [
        d["acted"]
        for d in _col(
            db, "SELECT details FROM harvest.audit_log WHERE operation = 'workflow.bulk_resume' ORDER BY id"
        )
    ] == [3, 0]


def test_a_run_that_ends_between_the_scan_and_the_act_is_counted_and_the_others_paused(db, conn) -> None:
    runs = [start(conn, "send_digest", f"race-{i}") for i in range(3)]
    answer = _raced(
        db,
        runs[1],
        "SELECT harvest.terminate_workflow(%s, 'raced')",
        "pause_workflows(p_workflow_name => 'send_digest')",
    )
    assert (answer["acted"], answer["already_ended"], answer["failures"]) == (2, 1, [])
    assert sorted(answer["execution_ids"]) == sorted([runs[0], runs[2]])
    assert _col(db, "SELECT status FROM harvest.executions WHERE id = %s", runs[1]) == ["TERMINATED"]


def test_a_run_paused_between_the_scan_and_the_act_is_unchanged(db, conn) -> None:
    """Another session pauses a run the batch scanned RUNNING: once locked it is PAUSED, out of the
    pause's selection, and counted unchanged (one WorkflowPaused, not two)."""
    runs = [start(conn, "send_digest", f"twice-{i}") for i in range(2)]
    answer = _raced(
        db,
        runs[0],
        "SELECT harvest.pause_workflow(%s, 'first')",
        "pause_workflows(p_workflow_name => 'send_digest')",
    )
    assert (answer["acted"], answer["unchanged"], answer["execution_ids"]) == (1, 1, [runs[1]])
    assert _col(
        db,
        "SELECT count(*) FROM harvest.events WHERE execution_id = %s AND event_type = 'WorkflowPaused'",
        runs[0],
    ) == [1]


def test_a_bulk_cancel_cursor_is_refused_to_a_pause(db, conn) -> None:
    for i in range(3):
        start(conn, "send_digest", f"c-{i}")
    step = conn.execute(
        "SELECT harvest.cancel_workflows(p_workflow_name => 'send_digest', p_status => 'RUNNING',"
        " p_limit => 1)"
    ).fetchone()[0]
    assert step["next_cursor"]
    with pytest.raises(psycopg.Error, match="another action or filter") as refused:
        conn.execute(
            "SELECT harvest.pause_workflows(p_workflow_name => 'send_digest', p_cursor => %s)",
            (step["next_cursor"],),
        )
    assert refused.value.sqlstate == "HR001"
    assert _col(db, "SELECT count(*) FROM harvest.executions WHERE status = 'PAUSED'") == [0]


def test_pause_and_resume_by_filter_are_an_operators_not_a_readers(db, conn) -> None:
    start(conn, "send_digest", "role-1")
    for role, allowed in (("harvest_reader", False), ("harvest_operator", True)):
        with psycopg.connect(db, autocommit=True) as c:
            c.execute(f"SET ROLE {role}")
            for call in ("pause_workflows", "resume_workflows"):
                sql = f"SELECT harvest.{call}(p_workflow_name => 'send_digest', p_dry_run => true)"
                if allowed:
                    c.execute(sql)
                else:
                    with pytest.raises(psycopg.errors.InsufficientPrivilege):
                        c.execute(sql)


# -- two shards -----------------------------------------------------------------------------------
@contextlib.contextmanager
def _sharded(two_shards: dict[int, str]) -> Iterator[Client]:
    """A Client over both shards."""
    with (
        ShardPools(ShardRouter([0, 1], [0, 1], 0), two_shards, max_size=2) as pools,
        Client(shards=pools) as client,
    ):
        yield client


def test_over_two_shards_each_shard_is_paused_in_steps_a_moved_run_at_its_live_copy(two_shards) -> None:
    on0, moved, on1 = _acme_on_two_shards(two_shards)

    done = _harvest_env(
        two_shards,
        "workflow",
        "bulk-pause",
        "--search-attr",
        "tenant=acme",
        "--batch",
        "1",
        "--output",
        "json",
    )
    assert done.returncode == 0, done.stderr
    summary = _json(done)
    assert (summary["matched"], summary["acted"], summary["failed"]) == (5, 5, 0)
    assert {s["shard_id"]: s["acted"] for s in summary["shards"]} == {0: 2, 1: 3}
    status = "SELECT status FROM harvest.executions WHERE id = %s"
    assert [_col(two_shards[0], status, r)[0] for r in on0] == ["PAUSED"] * 2
    assert [_col(two_shards[1], status, r)[0] for r in [*on1, moved]] == ["PAUSED"] * 3
    assert _col(two_shards[0], status, moved) == ["MIGRATED"]  # the seal left as it was
    assert _col(two_shards[1], "SELECT status FROM harvest.executions WHERE workflow_id = 'globex'") == [
        "RUNNING"
    ]
    # Steps of one run: two on shard 0, three on shard 1 (each continued by its cursor).
    assert (
        len(_col(two_shards[0], "SELECT 1 FROM harvest.audit_log WHERE operation = 'workflow.bulk_pause'"))
        >= 2
    )
    assert (
        len(_col(two_shards[1], "SELECT 1 FROM harvest.audit_log WHERE operation = 'workflow.bulk_pause'"))
        >= 2
    )

    with _sharded(two_shards) as client:
        out = client.resume_workflows(search_attributes=["tenant=acme"], reason="fixed", batch_size=1)
    assert (out["acted"], out["failed"]) == (5, 0)
    assert [_col(two_shards[0], status, r)[0] for r in on0] == ["RUNNING"] * 2
    assert [_col(two_shards[1], status, r)[0] for r in [*on1, moved]] == ["RUNNING"] * 3


def test_over_two_shards_a_run_that_ends_between_the_scan_and_the_act_on_one(two_shards) -> None:
    """The race on shard 1 while shard 0 is paused as usual: counted already_ended there."""
    on0 = _quiescent(two_shards[0], "send_digest", "r0")
    on1 = [_quiescent(two_shards[1], "send_digest", f"r1-{i}") for i in range(2)]
    answer = _raced(
        two_shards[1],
        on1[0],
        "SELECT harvest.terminate_workflow(%s, 'raced')",
        "pause_workflows(p_workflow_name => 'send_digest')",
    )
    assert (answer["acted"], answer["already_ended"]) == (1, 1)
    with _sharded(two_shards) as client:
        out = client.pause_workflows(workflow_name="send_digest")
    assert {s["shard_id"]: (s["acted"], s["already_ended"]) for s in out["shards"]} == {0: (1, 0), 1: (0, 0)}
    assert _col(two_shards[0], "SELECT status FROM harvest.executions WHERE id = %s", on0) == ["PAUSED"]
