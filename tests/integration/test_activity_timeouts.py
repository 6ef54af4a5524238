"""Heartbeats, heartbeat timeouts, schedule_to_close, bounded in-flight work, local activities."""

from __future__ import annotations

import asyncio
import threading
import time

import psycopg
import pytest
from psycopg.types.json import Jsonb

from harvest import ActivityError, App, Client, RetryPolicy, activity, workflow
from harvest.core.errors import WorkflowFailed

progress: dict[str, list] = {}


@activity(start_to_close="10s", heartbeat_timeout="0.5s")
async def long_with_heartbeats(ctx, rounds: int) -> dict:
    cancel_seen = False
    for i in range(rounds):
        await asyncio.sleep(0.1)
        cancel_seen = await ctx.aheartbeat({"done": i + 1}) or cancel_seen
    return {"rounds": rounds, "attempt": ctx.attempt(), "cancel": cancel_seen}


@activity(start_to_close="10s", heartbeat_timeout="0.3s", retry=RetryPolicy.none(), dead_letter=False)
async def silent(ctx) -> str:
    await asyncio.sleep(3)
    return "never"


@activity(start_to_close="10s", heartbeat_timeout="0.5s")
def sync_heartbeats(ctx, rounds: int) -> int:
    for i in range(rounds):
        time.sleep(0.1)
        ctx.heartbeat(i)
    return rounds


@activity(
    schedule_to_close="0.5s",
    retry=RetryPolicy.exponential(max_attempts=100, initial="100ms"),
    dead_letter=False,
)
async def always_fails(ctx) -> None:
    raise ConnectionError("still down")


@workflow
async def heartbeat_flow(ctx, rounds: int) -> dict:
    return await ctx.execute_activity(long_with_heartbeats, rounds)


@workflow
async def silent_flow(ctx) -> str:
    return await ctx.execute_activity(silent)


@workflow
async def sync_heartbeat_flow(ctx, rounds: int) -> int:
    return await ctx.execute_activity(sync_heartbeats, rounds)


@workflow
async def deadline_flow(ctx) -> None:
    await ctx.execute_activity(always_fails)


in_flight = {"now": 0, "max": 0}
in_flight_lock = threading.Lock()


@activity
async def occupy(ctx, i: int) -> int:
    with in_flight_lock:
        in_flight["now"] += 1
        in_flight["max"] = max(in_flight["max"], in_flight["now"])
    await asyncio.sleep(0.2)
    with in_flight_lock:
        in_flight["now"] -= 1
    return i


@workflow
async def fan_out(ctx, n: int) -> list:
    return list(await asyncio.gather(*(ctx.execute_activity(occupy, i) for i in range(n))))


@activity(local=True, retry=RetryPolicy.exponential(max_attempts=3, initial="10ms"))
async def local_lookup(ctx, key: str) -> dict:
    progress.setdefault(key, []).append(ctx.attempt())
    if ctx.attempt() < 2:
        raise ConnectionError("cache miss")
    return {"key": key, "idempotency_key": str(ctx.idempotency_key())}


@workflow
async def local_flow(ctx, key: str) -> dict:
    return await ctx.execute_activity(local_lookup, key)


def test_heartbeats_keep_a_long_activity_alive(start_worker, client: Client) -> None:
    start_worker(App(workflows=[heartbeat_flow], activities=[long_with_heartbeats]))
    handle = client.start_workflow(heartbeat_flow, 12)  # 1.2 s of work, 0.5 s heartbeat timeout
    assert handle.result(timeout=30) == {"rounds": 12, "attempt": 1, "cancel": False}


def test_sync_activity_heartbeats_from_its_thread(start_worker, client: Client) -> None:
    start_worker(App(workflows=[sync_heartbeat_flow], activities=[sync_heartbeats]))
    assert client.start_workflow(sync_heartbeat_flow, 10).result(timeout=30) == 10


def test_missing_heartbeats_time_out(start_worker, client: Client) -> None:
    start_worker(App(workflows=[silent_flow], activities=[silent]))
    with pytest.raises(WorkflowFailed) as info:
        client.start_workflow(silent_flow).result(timeout=30)
    assert info.value.failure["error_type"] == "HeartbeatTimeout"


def test_schedule_to_close_ends_retries(start_worker, client: Client) -> None:
    start_worker(App(workflows=[deadline_flow], activities=[always_fails]))
    with pytest.raises(WorkflowFailed) as info:
        client.start_workflow(deadline_flow).result(timeout=30)
    assert info.value.failure["error_type"] == "ScheduleToCloseTimeout"


def test_concurrency_bounds_in_flight_tasks(start_worker, client: Client) -> None:
    in_flight.update(now=0, max=0)
    start_worker(App(workflows=[fan_out], activities=[occupy]), concurrency=3)
    assert client.start_workflow(fan_out, 9).result(timeout=30) == list(range(9))
    assert in_flight["max"] <= 3


def test_local_activity_retries_inline_and_records_one_marker(start_worker, client: Client) -> None:
    start_worker(App(workflows=[local_flow], activities=[local_lookup]))
    handle = client.start_workflow(local_flow, "k")
    result = handle.result(timeout=30)
    assert progress["k"] == [1, 2]
    markers = [e for e in handle.history() if e["event_type"] == "MarkerRecorded"]
    assert len(markers) == 1 and markers[0]["event_data"]["kind"] == "local_activity"
    assert result["idempotency_key"] == markers[0]["event_data"]["value"]["result"]["idempotency_key"]
    assert not [e for e in handle.history() if e["event_type"] == "ActivityScheduled"]


slow_calls: list[str] = []


@activity(local=True, start_to_close="10s")
async def slow_local(ctx, key: str) -> str:
    slow_calls.append(key)
    await asyncio.sleep(1.5)  # the work: longer than the worker's workflow lease below
    return f"{key}:done"


@workflow
async def slow_local_flow(ctx, key: str) -> str:
    return await ctx.execute_activity(slow_local, key)


def test_a_local_activity_longer_than_the_workflow_lease_runs_once(start_worker, client: Client) -> None:
    """The workflow task running the local activity keeps its 0.6 s lease while it runs (the
    scanner, every 0.1 s, released it and the worker ran the local activity again)."""
    start_worker(
        App(workflows=[slow_local_flow], activities=[slow_local]), workflow_lease=0.6, scan_interval=0.1
    )
    handle = client.start_workflow(slow_local_flow, "k")
    assert handle.result(timeout=30) == "k:done"
    assert slow_calls == ["k"]
    markers = [e for e in handle.history() if e["event_type"] == "MarkerRecorded"]
    assert [m["event_data"]["value"]["result"] for m in markers] == ["k:done"]


@activity(start_to_close="30s", retry=RetryPolicy.none(), dead_letter=False)
async def own_timeout(ctx) -> None:
    # The activity's own client timed out after a moment: nowhere near its 30 s start_to_close.
    raise TimeoutError("upstream did not answer in 2s")


@workflow
async def own_timeout_flow(ctx) -> dict:
    try:
        await ctx.execute_activity(own_timeout)
    except ActivityError as err:
        return {"error_type": err.failure.error_type, "message": err.failure.message}
    return {}


def test_an_activity_s_own_timeout_error_is_recorded_as_raised_not_as_start_to_close(
    start_worker, client: Client
) -> None:
    """docs/activities.md: a plain exception is recorded with its class name and message;
    StartToCloseTimeout is only an attempt that ran longer than start_to_close."""
    start_worker(App(workflows=[own_timeout_flow], activities=[own_timeout]))
    got = client.start_workflow(own_timeout_flow).result(timeout=30)
    assert got == {"error_type": "TimeoutError", "message": "upstream did not answer in 2s"}


local_calls: dict[str, int] = {}


@activity(
    local=True,
    retry=RetryPolicy(max_attempts=3, initial_interval=0.01, non_retryable_errors=["ValueError: bad sku"]),
)
async def local_check(ctx, sku: str) -> str:
    local_calls["local_check"] = local_calls.get("local_check", 0) + 1
    raise ValueError("bad sku")


@workflow
async def local_check_flow(ctx, sku: str) -> str:
    try:
        return await ctx.execute_activity(local_check, sku)
    except ActivityError as err:
        return err.failure.error_type


def test_a_local_activity_does_not_retry_a_failure_whose_full_text_is_non_retryable(
    start_worker, client: Client
) -> None:
    """docs/activities.md, Retries: a failure is final when its full text is listed, the message
    or "ErrorType: message", for a local activity as for a queued one."""
    start_worker(App(workflows=[local_check_flow], activities=[local_check]))
    assert client.start_workflow(local_check_flow, "x").result(timeout=30) == "ValueError"
    assert local_calls["local_check"] == 1, f"retried {local_calls['local_check'] - 1} times"


def wait_for(predicate, timeout: float = 20.0):
    deadline = time.monotonic() + timeout
    while not (got := predicate()):
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)
    return got


@workflow
async def remote_call_flow(ctx) -> str:
    # Run by name on a queue this test claims by hand (no worker of ours polls it).
    return await ctx.execute_activity(
        "remote_act", queue="by_hand", start_to_close="10m", schedule_to_close="30s"
    )


def test_a_result_after_schedule_to_close_is_refused(db, start_worker, client: Client) -> None:
    """docs/activities.md: past schedule_to_close the failure is final. The lease of an attempt
    (start_to_close 10 min) never outlives the 30 s deadline, so a result 40 s in is refused
    (it was recorded: the lease ran past the deadline)."""
    start_worker(App(workflows=[remote_call_flow]))
    handle = client.start_workflow(remote_call_flow)
    with psycopg.connect(db, autocommit=True) as conn:
        wait_for(
            lambda: conn.execute(
                "SELECT 1 FROM harvest.tasks WHERE kind = 'activity' AND queue = 'by_hand'"
            ).fetchone()
        )
        task_id, token = conn.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('by-hand', ARRAY['by_hand'], 1)"
        ).fetchone()
        deadline, lease = conn.execute(
            "SELECT deadline_at, lease_expires_at FROM harvest.tasks WHERE id = %s", (task_id,)
        ).fetchone()
        assert lease == deadline
        later = conn.execute("SELECT (now() + interval '40 seconds')::text").fetchone()[0]
        conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (later,))
        with pytest.raises(psycopg.Error, match="lease expired"):
            conn.execute("SELECT harvest.complete_activity(%s, %s, %s)", (task_id, token, Jsonb("late")))
    assert "ActivityCompleted" not in [e["event_type"] for e in handle.history()]


def test_one_notification_per_queue_per_transaction(db: str, client: Client) -> None:
    """A decision enqueueing many activities notifies once, not once per row."""
    with psycopg.connect(db, autocommit=True) as listener, psycopg.connect(db, autocommit=True) as conn:
        listener.execute("LISTEN harvest_tasks")
        conn.execute("SELECT harvest.register_worker('sleeper', ARRAY['default'], 'h', 1)")
        conn.execute("SELECT harvest.set_worker_sleeping('sleeper', true)")
        handle = client.start_workflow(fan_out, 20)
        task = conn.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('t', ARRAY['default'], 1)"
        ).fetchone()
        commands = [
            {"type": "schedule_activity", "seq": i + 1, "name": "occupy", "input": [i]} for i in range(20)
        ]
        conn.execute(
            "SELECT harvest.complete_workflow_task(%s, %s, 1, %s::jsonb)",
            (task[0], task[1], psycopg.types.json.Jsonb(commands)),
        )
        notes = list(listener.notifies(timeout=0.5))
    # One from the start, one from the decision that enqueued 20 activity tasks.
    assert [n.payload for n in notes] == ["default", "default"]
    assert handle.describe()["status"] == "RUNNING"


def test_no_notification_while_no_worker_sleeps(db: str, client: Client) -> None:
    """NOTIFY serialises commits, so producers skip it while every worker is busy."""
    with psycopg.connect(db, autocommit=True) as listener, psycopg.connect(db, autocommit=True) as conn:
        listener.execute("LISTEN harvest_tasks")
        conn.execute("SELECT harvest.register_worker('busy', ARRAY['default'], 'h', 1)")
        client.start_workflow(fan_out, 1)
        assert list(listener.notifies(timeout=0.3)) == []
        conn.execute("SELECT harvest.set_worker_sleeping('busy', true)")
        client.start_workflow(fan_out, 1)
        assert [n.payload for n in listener.notifies(timeout=0.5)] == ["default"]


def test_a_batch_of_plain_starts_wakes_each_of_its_queues_once(db: str) -> None:
    """start_workflows' plain batch notifies once per distinct queue: a one-queue batch (and a
    single start) takes the path without the distinct-queues query, a two-queue batch the loop."""
    with psycopg.connect(db, autocommit=True) as listener, psycopg.connect(db, autocommit=True) as conn:
        listener.execute("LISTEN harvest_tasks")
        conn.execute("SELECT harvest.register_worker('sleeper', ARRAY['qa', 'qb'], 'h', 1)")
        conn.execute("SELECT harvest.set_worker_sleeping('sleeper', true)")

        def start(*queues: str) -> list[str]:
            starts = [{"workflow_name": "plain_wf", "queue": q} for q in queues]
            rows = conn.execute(
                "SELECT status FROM harvest.start_workflows(%s)", (psycopg.types.json.Jsonb(starts),)
            ).fetchall()
            assert [r[0] for r in rows] == ["RUNNING"] * len(queues)
            return sorted(n.payload for n in listener.notifies(timeout=0.5))

        assert start("qa") == ["qa"]
        assert start("qb", "qb", "qb") == ["qb"]
        assert start("qb", "qa", "qb") == ["qa", "qb"]
        tasks = conn.execute(
            "SELECT queue, count(*) FROM harvest.tasks WHERE kind = 'workflow' GROUP BY 1 ORDER BY 1"
        ).fetchall()
        assert tasks == [("qa", 2), ("qb", 5)]


def test_a_closing_run_notifies_only_a_waiting_client(db: str, client: Client) -> None:
    """harvest_done costs a serialised commit, so it is sent only when result() waits."""
    with psycopg.connect(db, autocommit=True) as listener, psycopg.connect(db, autocommit=True) as conn:
        listener.execute("LISTEN harvest_done")
        unwatched = client.start_workflow(fan_out, 1)
        watched = client.start_workflow(fan_out, 1)
        conn.execute("SELECT harvest.wait_for_result(%s, gen_random_uuid())", (watched.execution_id,))
        unwatched.terminate("x")
        watched.terminate("x")
        assert [n.payload for n in listener.notifies(timeout=0.5)] == [watched.execution_id]


def test_worker_wakes_on_notify_not_on_its_poll(start_worker, client: Client) -> None:
    start_worker(App(workflows=[fan_out], activities=[occupy]), poll_interval=120)
    time.sleep(0.3)  # let it go idle on its 120 s poll
    assert client.start_workflow(fan_out, 2).result(timeout=20) == [0, 1]
