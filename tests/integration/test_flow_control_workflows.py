"""Per-key workflow concurrency (defer, latest wins), quotas and rate limits, on a real Postgres."""

from __future__ import annotations

import asyncio
import threading
import time

import psycopg
import pytest
from psycopg.types.json import Jsonb

from harvest import App, activity, workflow
from harvest.core.errors import ChildWorkflowError, PolicyConflict, QuotaExceeded
from harvest.declare.flow_control import Concurrency, Quota, RateLimit

gate = threading.Event()


@workflow(concurrency=Concurrency(key="input.tenant_id", limit=2, on_conflict="defer"))
async def deferred(ctx, order: dict) -> str:
    await ctx.sleep(0.3)
    return order["tenant_id"]


@workflow(concurrency=Concurrency(key="input.doc_id", limit=1, on_conflict="cancel_running"))
async def indexer(ctx, doc: dict) -> str:
    await ctx.sleep(3600)
    return "indexed"


@workflow(quota=Quota(key="input.tenant_id", max_active_executions=3))
async def metered(ctx, order: dict) -> str:
    await ctx.sleep(3600)
    return "done"


@activity(rate_limit=RateLimit(rps=5, burst=1))
async def paced(ctx, n: int) -> float:
    return time.monotonic()


@activity(rate_limit=RateLimit(rps=5, key="input.tenant"))
async def per_tenant(ctx, order: dict) -> None:
    return None


@workflow
async def pacer(ctx, n: int) -> list:
    return list(await asyncio.gather(*(ctx.execute_activity(paced, i) for i in range(n))))


APP = App(workflows=[deferred, indexer, metered, pacer], activities=[paced, per_tenant])


def declare(conn: psycopg.Connection) -> None:
    conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(APP.flow_policies()),))


def test_defer_runs_at_most_limit_per_key_and_all_finish(db, start_worker, client) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        declare(conn)
    handles = [client.start_workflow(deferred, {"tenant_id": "acme"}) for _ in range(5)]
    handles.append(client.start_workflow(deferred, {"tenant_id": "other"}))
    peaks: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        with psycopg.connect(db, autocommit=True) as conn:
            while not stop.is_set():
                peaks.append(
                    conn.execute(
                        "SELECT count(*) FROM harvest.workflow_slots AS s JOIN harvest.executions AS e "
                        "ON e.id = s.execution_id WHERE s.concurrency_key = 'acme' AND e.status = 'RUNNING'"
                    ).fetchone()[0]
                )
                time.sleep(0.01)

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        start_worker(APP, concurrency=10)
        results = [h.result(timeout=60) for h in handles]
    finally:
        stop.set()
        sampler.join()
    assert results == ["acme"] * 5 + ["other"]
    assert max(peaks) == 2, max(peaks)
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM harvest.workflow_slots").fetchone()[0] == 0, (
            "slots are given back when runs end"
        )


def test_defer_holds_the_first_task_while_the_key_is_full(db, client) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        declare(conn)
        ids = [client.start_workflow(deferred, {"tenant_id": "t"}).execution_id for _ in range(3)]
        claimed = [
            r[0]
            for r in conn.execute(
                "SELECT execution_id FROM harvest.claim_tasks('w', ARRAY['default'], 10)"
            ).fetchall()
        ]
        assert sorted(map(str, claimed)) == sorted(ids[:2])
        status = conn.execute(
            "SELECT key, task_type, max_concurrent, in_flight, pending, workflows "
            "FROM harvest.list_concurrency_keys('t')"
        ).fetchall()
        assert status == [("t", "workflow", 2, 2, 1, [{"workflow_name": "deferred", "on_conflict": "defer"}])]
        conn.execute("SELECT harvest.terminate_workflow(%s, 'make room')", (ids[0],))
        conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (time_plus(conn, 1),))
        later = [
            r[0]
            for r in conn.execute(
                "SELECT execution_id FROM harvest.claim_tasks('w', ARRAY['default'], 10)"
            ).fetchall()
        ]
        assert [str(x) for x in later] == [ids[2]]


def test_a_reset_fork_counts_against_its_key_like_the_run_it_replaces(db, client) -> None:
    """docs/flow-control.md (defer) and docs/lifecycle.md (reset): the fork of an admitted run takes
    over its slot, and the fork of a run still waiting for one waits for a slot too (the fork of a
    had none and was claimed beside the deferred run of the same key)."""
    with psycopg.connect(db, autocommit=True) as conn:
        declare(conn)
        ids = [client.start_workflow(deferred, {"tenant_id": "r"}).execution_id for _ in range(3)]

        def claim() -> list[str]:
            rows = conn.execute("SELECT execution_id FROM harvest.claim_tasks('w', ARRAY['default'], 10)")
            return [str(r[0]) for r in rows]

        assert sorted(claim()) == sorted(ids[:2])  # limit 2: the third waits
        admitted_fork = conn.execute("SELECT harvest.reset_workflow(%s, 1, 'stuck')", (ids[0],)).fetchone()[0]
        waiting_fork = conn.execute("SELECT harvest.reset_workflow(%s, 1, 'stuck')", (ids[2],)).fetchone()[0]
        conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (time_plus(conn, 1),))
        assert claim() == [admitted_fork["new_execution_id"]], "the waiting run's fork still waits"
        slots = conn.execute(
            "SELECT execution_id::text FROM harvest.workflow_slots AS s JOIN harvest.executions AS e "
            "ON e.id = s.execution_id WHERE s.concurrency_key = 'r' AND e.status = 'RUNNING' ORDER BY 1"
        ).fetchall()
        assert sorted(r[0] for r in slots) == sorted([admitted_fork["new_execution_id"], ids[1]])
        conn.execute("SELECT harvest.terminate_workflow(%s, 'make room')", (ids[1],))
        conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (time_plus(conn, 2),))
        assert claim() == [waiting_fork["new_execution_id"]]


def time_plus(conn: psycopg.Connection, secs: float) -> str:
    return conn.execute("SELECT (now() + make_interval(secs => %s))::text", (secs,)).fetchone()[0]


def test_latest_wins_cancels_the_oldest_run_of_the_same_key_only(db, client) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        declare(conn)
        a = client.start_workflow(indexer, {"doc_id": "d1"})
        other_key = client.start_workflow(indexer, {"doc_id": "d2"})
        b = client.start_workflow(indexer, {"doc_id": "d1"})
        rows = dict(conn.execute("SELECT id::text, status FROM harvest.executions").fetchall())
        assert rows[a.execution_id] == "CANCELLED"
        assert rows[b.execution_id] == "RUNNING" and rows[other_key.execution_id] == "RUNNING"
        event = conn.execute(
            "SELECT event_data FROM harvest.events WHERE execution_id = %s "
            "AND event_type = 'WorkflowCancelled'",
            (a.execution_id,),
        ).fetchone()[0]
        assert event == {"details": {"superseded_by": b.execution_id}}


def test_latest_wins_converges_under_concurrent_starts(db, client) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        declare(conn)
    errors: list[BaseException] = []

    def starter(n: int) -> None:
        try:
            for _ in range(5):
                client.start_workflow(indexer, {"doc_id": "hot"})
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=starter, args=(n,)) for n in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors
    with psycopg.connect(db, autocommit=True) as conn:
        running = conn.execute(
            "SELECT count(*) FROM harvest.executions WHERE concurrency_key = 'hot' AND status = 'RUNNING'"
        ).fetchone()[0]
        cancelled = conn.execute(
            "SELECT count(*) FROM harvest.executions WHERE concurrency_key = 'hot' AND status = 'CANCELLED'"
        ).fetchone()[0]
    assert (running, cancelled) == (1, 39)


def test_quota_refuses_the_start_naming_quota_key_and_usage(db, client) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        declare(conn)
    for _ in range(3):
        client.start_workflow(metered, {"tenant_id": "acme"})
    client.start_workflow(metered, {"tenant_id": "beta"})
    with pytest.raises(QuotaExceeded) as info:
        client.start_workflow(metered, {"tenant_id": "acme"})
    err = info.value
    assert (err.quota, err.key, err.usage, err.limit) == ("max_active_executions", "acme", 3, 3)
    assert "max_active_executions" in str(err) and '"acme"' in str(err) and "usage 3 of 3" in str(err)


def test_quota_holds_under_concurrent_starts(db, client) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        declare(conn)
    outcomes: list[str] = []

    def starter() -> None:
        for _ in range(3):
            try:
                client.start_workflow(metered, {"tenant_id": "race"})
                outcomes.append("started")
            except QuotaExceeded:
                outcomes.append("refused")

    threads = [threading.Thread(target=starter) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert outcomes.count("started") == 3 and outcomes.count("refused") == 21


def test_rate_limit_paces_claims(db, start_worker, client) -> None:
    start_worker(APP, concurrency=10)
    stamps = client.start_workflow(pacer, 6).result(timeout=60)
    span = max(stamps) - min(stamps)
    assert span >= 0.8, f"6 calls at 5/s with burst 1 take >= 1 s, took {span:.2f}s"


def test_a_keyed_rate_limit_does_not_gate_an_activity_whose_key_is_missing(db) -> None:
    """docs/flow-control.md, Key paths: two activities whose input has no tenant have no key, so
    no bucket paces them (they shared one, dyn-rate:input.tenant:(null))."""
    rate = {"rps": 0.001, "burst": 1, "key": "input.tenant"}
    options = {
        "start_to_close": 30,
        "retry": {"max_attempts": 1},
        "priority": 0,
        "dead_letter": True,
        "rate_limit": rate,
    }
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT * FROM harvest.start_workflow('by_hand', %s)", (Jsonb([]),))
        task_id, token = conn.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('w', ARRAY['default'], 1)"
        ).fetchone()
        commands = [
            {
                "type": "schedule_activity",
                "seq": n,
                "name": "sync_tenant",
                "input": [{"job": n}],
                "queue": "rated",
                "options": options,
            }
            for n in (1, 2)
        ]
        conn.execute(
            "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s)", (task_id, token, Jsonb(commands))
        )
        claimed = conn.execute("SELECT task_id FROM harvest.claim_tasks('w', ARRAY['rated'], 10)").fetchall()
        buckets = [r[0] for r in conn.execute("SELECT bucket_key FROM harvest.rate_limit_buckets")]
    assert len(claimed) == 2 and buckets == [], f"{len(claimed)} of 2 claimed; buckets {buckets}"


def test_pacing_override_set_read_clear_and_expiry(db) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        declare(conn)
        conn.execute("SET harvest.fake_now = '2030-01-01 00:00:00+00'")
        row = conn.execute(
            "SELECT rps, burst, override_rps, override_expires_at::text "
            "FROM harvest.set_rate_limit_override('paced', 50, 10, 60)"
        ).fetchone()
        assert row == (5.0, 1.0, 50.0, "2030-01-01 00:01:00+00")
        conn.execute("SET harvest.fake_now = '2030-01-01 00:01:01+00'")
        assert conn.execute("SELECT override_rps FROM harvest.get_rate_limit('paced')").fetchone() == (None,)
        conn.execute("SELECT harvest.set_rate_limit_override('paced', 50)")
        assert conn.execute("SELECT harvest.clear_rate_limit_override('paced')").fetchone() == (True,)
        assert conn.execute("SELECT override_rps FROM harvest.get_rate_limit('paced')").fetchone() == (None,)


def test_pacing_override_of_a_per_key_policy_is_a_conflict(db) -> None:
    from harvest.db.sqlapi import SqlApi

    with psycopg.connect(db, autocommit=True) as conn:
        declare(conn)
        with pytest.raises(PolicyConflict, match="per-key rate limit"):
            SqlApi(conn).set_rate_limit_override("per_tenant", 10)


def test_quota_holds_for_a_start_in_a_snapshot_transaction(db, client) -> None:
    """A start inside a caller's REPEATABLE READ transaction (a start on the caller's own
    connection) counted the key's usage with the snapshot its transaction took first: a start
    committed since was invisible, and the quota was exceeded (3 of 3 running, a fourth
    admitted). It now fails with a serialization failure (retryable: run the transaction
    again), and the retry sees the usage."""
    with psycopg.connect(db, autocommit=True) as conn:
        declare(conn)
    client.start_workflow(metered, {"tenant_id": "rr"})
    client.start_workflow(metered, {"tenant_id": "rr"})
    start = "SELECT * FROM harvest.start_workflow('metered', %s)"
    with psycopg.connect(db) as stale:
        stale.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        stale.execute("SELECT 1")  # its transaction's snapshot: two runs of the key
        client.start_workflow(metered, {"tenant_id": "rr"})  # the third, committed meanwhile
        with pytest.raises(psycopg.errors.SerializationFailure):
            stale.execute(start, (Jsonb([{"tenant_id": "rr"}]),))
        stale.rollback()
        with pytest.raises(psycopg.Error) as again:  # the retry (REPEATABLE READ again): refused
            stale.execute(start, (Jsonb([{"tenant_id": "rr"}]),))
        assert again.value.sqlstate == "HR006", again.value
    with psycopg.connect(db, autocommit=True) as conn:
        running = conn.execute(
            "SELECT count(*) FROM harvest.executions WHERE quota_key = 'rr' AND status = 'RUNNING'"
        ).fetchone()[0]
    assert running == 3


def test_latest_wins_holds_for_a_start_in_a_snapshot_transaction(db, client) -> None:
    """The same for on_conflict = "cancel_running": a start in a REPEATABLE READ transaction
    looked for the runs to supersede with its transaction's snapshot and missed a run of the
    key started since, so two ran under a limit of 1."""
    with psycopg.connect(db, autocommit=True) as conn:
        declare(conn)
    start = "SELECT * FROM harvest.start_workflow('indexer', %s)"
    with psycopg.connect(db) as stale:
        stale.isolation_level = psycopg.IsolationLevel.REPEATABLE_READ
        stale.execute("SELECT 1")  # its transaction's snapshot: no run of the key
        client.start_workflow(indexer, {"doc_id": "rr-doc"})  # committed meanwhile
        with pytest.raises(psycopg.errors.SerializationFailure):
            stale.execute(start, (Jsonb([{"doc_id": "rr-doc"}]),))
        stale.rollback()
        stale.execute(start, (Jsonb([{"doc_id": "rr-doc"}]),))  # the retry supersedes it
        stale.commit()
    with psycopg.connect(db, autocommit=True) as conn:
        statuses = conn.execute(
            "SELECT status, count(*) FROM harvest.executions WHERE concurrency_key = 'rr-doc' GROUP BY 1"
        ).fetchall()
    assert dict(statuses) == {"RUNNING": 1, "CANCELLED": 1}


def test_a_start_waiting_on_the_quota_key_counts_the_start_it_waited_for(db, client) -> None:
    """Two connections at the limit, deterministically: the second start waits on the key's
    row while the first is uncommitted, and counts it once it commits (HR006)."""
    with psycopg.connect(db, autocommit=True) as conn:
        declare(conn)
    client.start_workflow(metered, {"tenant_id": "two"})
    client.start_workflow(metered, {"tenant_id": "two"})
    start = "SELECT * FROM harvest.start_workflow('metered', %s)"
    outcome: list[BaseException | None] = []
    with psycopg.connect(db) as first, psycopg.connect(db, autocommit=True) as second:
        first.execute(start, (Jsonb([{"tenant_id": "two"}]),))  # the third, not committed yet
        pid = second.info.backend_pid

        def second_start() -> None:
            try:
                second.execute(start, (Jsonb([{"tenant_id": "two"}]),))
                outcome.append(None)
            except psycopg.Error as exc:
                outcome.append(exc)

        waiter = threading.Thread(target=second_start)
        waiter.start()
        with psycopg.connect(db, autocommit=True) as look:
            deadline = time.monotonic() + 30
            while not look.execute(
                "SELECT wait_event_type = 'Lock' FROM pg_stat_activity WHERE pid = %s", (pid,)
            ).fetchone()[0]:
                assert time.monotonic() < deadline, "the second start never waited on the key"
        first.commit()
        waiter.join(30)
    assert len(outcome) == 1 and isinstance(outcome[0], psycopg.Error), outcome
    assert outcome[0].sqlstate == "HR006", outcome[0]


@workflow(quota=Quota(key="input.tenant_id", max_active_executions=1))
async def tenant_job(ctx, order: dict) -> str:
    await ctx.sleep(3600)
    return "done"


@workflow
async def fans_tenant_jobs(ctx, tenant: str) -> list:
    """Two children of one tenant under a quota of one live run: the first starts, the second
    is refused, and the parent hears it typed."""
    await ctx.start_child_workflow(tenant_job, {"tenant_id": tenant})  # ends with the parent
    try:
        await ctx.execute_child_workflow(tenant_job, {"tenant_id": tenant})
    except ChildWorkflowError as err:
        return [err.status, (err.failure or {}).get("error_type"), (err.failure or {}).get("details")]
    return ["started"]


def test_a_child_over_its_tenants_quota_is_a_typed_failed_start(db, start_worker, client) -> None:
    app = App(workflows=[tenant_job, fans_tenant_jobs])
    start_worker(app)
    status, error_type, details = client.start_workflow(fans_tenant_jobs, "kid").result(timeout=30)
    assert (status, error_type) == ("START_FAILED", "QuotaExceeded")
    assert (details["quota"], details["key"], details["usage"], details["limit"]) == (
        "max_active_executions",
        "kid",
        1,
        1,
    )
