"""Pause and resume with real workers (docs/lifecycle.md), and an activity completed by task token
from another process: a paused run's work is not claimed while a run beside it moves on, a timer
that fell due while paused fires once after the resume, signals sent meanwhile arrive in order;
a late completion by token is refused."""

from __future__ import annotations

import json
import time

import psycopg
import pytest
from operator_helpers import harvest
from psycopg.conninfo import make_conninfo

from harvest import App, Client, activity, workflow
from harvest.core.errors import StaleTask, WorkflowPaused

T0 = "2030-01-01T00:00:00+00:00"
T_OVERDUE = "2030-01-01T02:00:00+00:00"  # the 1 h timer started at T0 is overdue


def at(dsn: str, fake_now: str) -> str:
    """``dsn`` whose every session runs on the engine's test clock, stopped at ``fake_now``."""
    return make_conninfo(dsn, options=f"-c harvest.fake_now={fake_now}")


@activity(start_to_close="30s")
async def step(ctx, tag: str) -> str:
    return f"{tag}!"


@workflow
async def sleeper(ctx, n: int) -> list:
    """Sleep an hour, then take n signals "item", oldest first."""
    await ctx.sleep(3600)
    return [await ctx.wait_for_signal("item") for _ in range(n)]


@workflow
async def collector(ctx, n: int) -> list:
    """Take n signals "item", oldest first, one step each (an activity between them)."""
    got = []
    for _ in range(n):
        got.append(await ctx.wait_for_signal("item"))
        await ctx.execute_activity(step, got[-1])
    return got


@workflow
async def one_step(ctx, tag: str) -> str:
    return await ctx.execute_activity(step, tag)


handed: list[str] = []


@activity(start_to_close="60s")
async def elsewhere(ctx, tag: str) -> str:
    handed.append(ctx.task_token)
    raise ctx.complete_async()


@workflow
async def external(ctx, tag: str) -> str:
    return await ctx.execute_activity(elsewhere, tag)


APP = App(workflows=[sleeper, one_step, external, collector], activities=[step, elsewhere])


@pytest.fixture
def clocked_worker(db: str, start_worker):
    """clocked_worker(fake_now, worker_id) -> a RunningWorker whose sessions read the engine's
    test clock stopped at ``fake_now``; stopped after the test."""

    def start(fake_now: str, worker_id: str):
        return start_worker(APP, at(db, fake_now), worker_id=worker_id, poll_interval=0.2)

    return start


def events(db: str, execution_id: str) -> list[tuple[str, dict]]:
    with psycopg.connect(db) as conn:
        rows = conn.execute(
            "SELECT event_type, event_data FROM harvest.events WHERE execution_id = %s ORDER BY event_id",
            (execution_id,),
        ).fetchall()
    return [(t, d) for t, d in rows]


def types(db: str, execution_id: str) -> list[str]:
    return [t for t, _ in events(db, execution_id)]


def test_a_paused_run_is_not_claimed_while_a_run_beside_it_finishes(db: str, start_worker, client) -> None:
    paused = client.start_workflow(one_step, "paused")
    assert paused.pause("maintenance", operator_id="ann") is True
    assert paused.describe()["status"] == "PAUSED"
    beside = client.start_workflow(one_step, "beside")
    start_worker(APP)
    assert beside.result(timeout=30) == "beside!"  # the worker claimed and ran everything it could
    assert types(db, paused.execution_id) == ["WorkflowStarted", "WorkflowPaused"]
    with psycopg.connect(db) as conn:
        [(status,)] = conn.execute(
            "SELECT status FROM harvest.tasks WHERE execution_id = %s", (paused.execution_id,)
        ).fetchall()
    assert status == "paused"
    with pytest.raises(WorkflowPaused, match="resume it first") as refused:
        paused.update("anything")
    assert str(refused.value).count("resume it first") == 1, refused.value  # (its message, its hint)
    assert paused.resume("done", operator_id="ann") is True
    assert paused.result(timeout=30) == "paused!"
    assert types(db, paused.execution_id)[:3] == ["WorkflowStarted", "WorkflowPaused", "WorkflowResumed"]


def test_overdue_timer_fires_once_after_resume_and_signals_arrive_in_order(db: str, clocked_worker) -> None:
    """Workers on the engine's test clock (harvest.fake_now): the first at T0 starts the 1 h
    timers, the second runs two hours later, when both are overdue. The run beside the paused one
    proves the second worker fires due timers; the paused run's fires only after the resume."""
    with Client(db) as client:
        paused = client.start_workflow(sleeper, 3)
        beside = client.start_workflow(sleeper, 0)
        first = clocked_worker(T0, "at-t0")
        for handle in (paused, beside):
            _wait(lambda h=handle: "TimerStarted" in types(db, h.execution_id), "the timer to start")
        first.stop()
        assert paused.pause("hold it") is True
        for item in ("a", "b", "c"):
            paused.signal("item", item)

        clocked_worker(T_OVERDUE, "two-hours-later")
        assert beside.result(timeout=30) == []  # its overdue timer fired: the worker fires due timers
        assert "TimerFired" not in types(db, paused.execution_id)
        assert paused.describe()["status"] == "PAUSED"

        assert paused.resume() is True
        assert paused.result(timeout=30) == ["a", "b", "c"]
    history = types(db, paused.execution_id)
    assert history.count("TimerFired") == 1
    assert (
        history.index("WorkflowPaused") < history.index("SignalReceived") < history.index("WorkflowResumed")
    )
    assert history.index("WorkflowResumed") < history.index("TimerFired")


def _wait(check, what: str, timeout: float = 30.0) -> None:
    import time

    deadline = time.monotonic() + timeout
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def test_pause_and_resume_through_the_cli(db: str, client) -> None:
    handle = client.start_workflow(one_step, "cli")
    r = harvest(db, "workflow", "pause", handle.execution_id, "--reason", "ops", "--output", "json")
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout) == {"execution_id": handle.execution_id, "status": "PAUSED", "changed": True}
    r = harvest(db, "workflow", "pause", handle.execution_id)
    assert r.returncode == 0 and "paused already" in r.stdout
    r = harvest(db, "workflow", "stack", handle.execution_id)
    assert r.returncode == 0 and "paused since" in r.stdout and ": ops (harvest workflow resume)" in r.stdout
    r = harvest(db, "workflow", "list", "--status", "paused", "--output", "json")
    assert r.returncode == 0, r.stderr
    assert handle.execution_id in r.stdout
    r = harvest(db, "workflow", "resume", handle.execution_id, "--operator-id", "bob")
    assert r.returncode == 0 and r.stdout.strip() == f"resumed {handle.execution_id}"
    r = harvest(db, "workflow", "resume", handle.execution_id)
    assert r.returncode == 0 and r.stdout.strip() == f"resumed {handle.execution_id} (it was not paused)"
    r = harvest(db, "workflow", "resume", handle.execution_id, "--output", "json")
    assert json.loads(r.stdout) == {
        "execution_id": handle.execution_id,
        "status": "RUNNING",
        "changed": False,
    }
    handle.terminate("done")
    r = harvest(db, "workflow", "pause", handle.execution_id)
    assert r.returncode != 0 and "already TERMINATED" in r.stderr
    with psycopg.connect(db) as conn:
        audited = conn.execute(
            "SELECT operation, operator_id, source FROM harvest.audit_log WHERE target = %s ORDER BY id",
            (handle.execution_id,),
        ).fetchall()
    assert audited[:3] == [
        ("workflow.pause", None, "cli"),
        ("workflow.pause", None, "cli"),
        ("workflow.resume", "bob", "cli"),
    ]


def test_an_activity_completed_by_token_from_the_cli_and_a_late_token_refused(
    db: str, clocked_worker, client
) -> None:
    handed.clear()
    clocked_worker(T0, "at-t0")
    done = client.start_workflow(external, "x")
    _wait(lambda: len(handed) == 1, "the activity to hand out its token")
    # The completer reads the worker's clock (a heartbeat at another time would move the lease).
    r = harvest(at(db, T0), "activity", "heartbeat", handed[0], "--details-json", '{"pct": 50}')
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr
    r = harvest(at(db, T0), "activity", "complete", handed[0], "--result-json", '"from the cli"')
    assert r.returncode == 0 and r.stdout.strip() == "completed", r.stderr
    assert done.result(timeout=30) == "from the cli"

    late = client.start_workflow(external, "y")
    _wait(lambda: len(handed) == 2, "the second token")
    # A completer whose clock reads past the attempt's start_to_close (60 s) is refused.
    late_clock = at(db, "2030-01-01T00:05:00+00:00")
    with Client(late_clock) as later, pytest.raises(StaleTask, match="lease expired"):
        later.complete_activity(handed[1], "too late")
    r = harvest(db, "activity", "complete", "not-a-token")
    assert r.returncode == 2 and "not a Harvest task token" in r.stderr
    with Client(at(db, T0)) as in_time:
        assert in_time.complete_activity(handed[1], "in time") == "completed"
    assert late.result(timeout=30) == "in time"


def test_start_throttle_pacing_override_through_the_cli(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT harvest.declare_flow_policies(%s)",
            (
                json.dumps(
                    {
                        "workflows": {
                            "imports": {"throttle": {"rps": 1, "burst": 1}},
                            "per_tenant": {"throttle": {"rps": 1, "key": "input.t"}},
                        }
                    }
                ),
            ),
        )
    r = harvest(
        db,
        "throttle",
        "override",
        "imports",
        "--rps",
        "20",
        "--ttl-secs",
        "600",
        "--operator-id",
        "ann",
        "--output",
        "json",
    )
    assert r.returncode == 0, r.stderr
    [row] = json.loads(r.stdout)["shards"]
    assert (row["shard_id"], row["rps"], row["override_rps"], row["override_burst"]) == (0, 1, 20, 20)
    r = harvest(db, "throttle", "get", "imports")
    assert r.returncode == 0 and "20" in r.stdout, r.stderr
    r = harvest(db, "throttle", "clear-override", "imports", "--output", "json")
    assert r.returncode == 0 and json.loads(r.stdout)["shards"][0]["was_live"] is True
    r = harvest(db, "throttle", "override", "per_tenant", "--rps", "5")
    assert r.returncode != 0 and "per-key start throttle" in r.stderr
    with psycopg.connect(db) as conn:
        audited = conn.execute(
            "SELECT operation, operator_id FROM harvest.audit_log WHERE target = 'imports' ORDER BY id"
        ).fetchall()
    assert audited == [("start_throttle.override", "ann"), ("start_throttle.clear_override", None)]
    # The table says whether an override was dropped (it showed the get's columns, all "-").
    r = harvest(db, "throttle", "clear-override", "imports")
    assert r.returncode == 0, r.stderr
    header, row = r.stdout.splitlines()[:2]
    assert header.split() == ["SHARD_ID", "WORKFLOW_NAME", "WAS_LIVE"]
    assert row.split() == ["0", "imports", "False"]


def test_version_usage_reports_a_status_and_filters_by_workflow_and_shard(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        for key, name in (("va", "billing"), ("vb", "shipping")):
            conn.execute("SELECT * FROM harvest.start_workflow(%s, '[]', %s, 'vq')", (name, key))
            [(task, token)] = conn.execute(
                "SELECT task_id, fencing_token FROM harvest.claim_tasks('w', ARRAY['vq'], 1)"
            ).fetchall()
            conn.execute(
                "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s)",
                (
                    task,
                    token,
                    json.dumps(
                        [
                            {
                                "type": "record_marker",
                                "seq": 1,
                                "kind": "version",
                                "value": {"change_id": "tax", "version": 2},
                            }
                        ]
                    ),
                ),
            )

    def usage(*args: str) -> dict:
        r = harvest(db, "version-usage", "--change-id", "tax", *args, "--output", "json")
        assert r.returncode == 0, r.stderr
        return json.loads(r.stdout)

    every = usage()
    assert every["status"] == "complete" and every["unavailable_shards"] == []
    assert [(u["version"], u["executions"]) for u in every["usage"]] == [(2, 2)]
    one = usage("--workflow-name", "billing")
    assert (one["workflow_name"], [u["executions"] for u in one["usage"]]) == ("billing", [1])
    assert usage("--workflow-name", "nobody")["status"] == "no_matches"
    assert usage("--shard-id", "0")["status"] == "complete"
    r = harvest(db, "version-usage", "--change-id", "tax", "--shard-id", "3")
    assert r.returncode != 0 and "this database is shard 0" in r.stderr


def test_a_worker_that_keeps_the_run_cached_resumes_it_with_the_signals_in_order(
    db: str, start_worker, client
) -> None:
    """The same worker decides before and after the pause, from its cached run: the events
    WorkflowPaused, the signals and WorkflowResumed reach it as one batch."""
    start_worker(APP)
    handle = client.start_workflow(collector, 3)
    _wait(lambda: "WorkflowTaskCompleted" in types(db, handle.execution_id), "the first decision")
    assert handle.pause() is True
    for item in ("x", "y", "z"):
        handle.signal("item", item)
    beside = client.start_workflow(one_step, "beside")
    assert beside.result(timeout=30) == "beside!"  # the worker is claiming: the paused run waits
    history = types(db, handle.execution_id)
    assert history.count("WorkflowTaskCompleted") == 1 and history[-1] == "SignalReceived"
    assert handle.resume() is True
    assert handle.result(timeout=30) == ["x", "y", "z"]


def test_the_async_client_pauses_resumes_and_completes_by_token(db: str, start_worker) -> None:
    import asyncio

    from harvest import AsyncClient

    handed.clear()
    start_worker(APP)

    async def go() -> dict:
        async with await AsyncClient.connect(db) as aclient:
            handle = await aclient.start_workflow(external, "async")
            while not handed:
                await asyncio.sleep(0.05)
            seen = {"id": handle.execution_id, "paused": await handle.pause("hold", operator_id="ann")}
            seen["status"] = (await handle.describe())["status"]
            # A paused run's activity may still complete by its token: it is work in flight.
            seen["outcome"] = await aclient.complete_activity(handed[0], "done")
            seen["again"] = await aclient.complete_activity(handed[0], "done")
            with pytest.raises(StaleTask, match=r"cannot heartbeat activity 1 .* it was already completed"):
                await aclient.heartbeat_activity(handed[0])
            seen["resumed"] = await handle.resume()
            seen["result"] = await handle.result(timeout=30)
            return seen

    seen = asyncio.run(go())
    assert {k: v for k, v in seen.items() if k != "id"} == {
        "paused": True,
        "status": "PAUSED",
        "outcome": "completed",
        "again": "already_completed",
        "resumed": True,
        "result": "done",
    }
    history = types(db, seen["id"])
    assert (
        history.index("WorkflowPaused")
        < history.index("ActivityCompleted")
        < history.index("WorkflowResumed")
    )


def test_a_repeated_completion_by_token_through_an_encrypting_codec_is_harmless(db: str, start_worker):
    """docs/lifecycle.md: "Sending the same result again for the same attempt answers
    already_completed". AES-GCM encrypts each send under a fresh nonce, so the database saw
    another result in every repeat and raised StaleTask: a client that resent a completion it
    did not know had committed was refused. A different result is still refused."""
    import asyncio

    from harvest import AsyncClient
    from harvest.core.codecs import AesGcmCodec

    codecs = [AesGcmCodec({"k1": bytes(range(32))})]
    handed.clear()
    start_worker(App(workflows=[external], activities=[elsewhere], codecs=codecs))
    with Client(db, codecs=codecs) as client:
        handle = client.start_workflow(external, "enc")
        while not handed:
            time.sleep(0.05)
        assert client.complete_activity(handed[0], "approved") == "completed"
        assert client.complete_activity(handed[0], "approved") == "already_completed"
        with pytest.raises(StaleTask, match="with another result"):
            client.complete_activity(handed[0], "declined")

        async def again() -> str:
            async with await AsyncClient.connect(db, codecs=codecs) as aclient:
                return await aclient.complete_activity(handed[0], "approved")

        assert asyncio.run(again()) == "already_completed"
        assert handle.result(timeout=30) == "approved"


def test_a_token_whose_attempt_was_failed_and_retried_is_refused_naming_that_failure(
    db: str, start_worker, client
) -> None:
    """The refusal says what became of the attempt: one failed by its token and retried was
    refused as "its lease ran out", sending the operator after a timeout that never happened."""
    from harvest import ActivityFailure

    handed.clear()
    start_worker(APP)
    run = client.start_workflow(external, "z")
    _wait(lambda: len(handed) == 1, "the activity to hand out its token")
    assert client.fail_activity(handed[0], ActivityFailure("Declined", "not yet")) == "retry_scheduled"
    with pytest.raises(StaleTask) as refused:
        client.complete_activity(handed[0], "late")
    assert "Declined: not yet" in str(refused.value) and "retried" in str(refused.value)
    assert "lease" not in str(refused.value)
    _wait(lambda: len(handed) == 2, "the retry's token")
    assert client.complete_activity(handed[1], "done") == "completed"
    assert run.result(timeout=30) == "done"
