"""Start throttle, debounce and batch, and the usage report, with a real worker on a real Postgres."""

from __future__ import annotations

import contextlib
import datetime as dt
import time

import psycopg
import pytest
from psycopg.types.json import Jsonb

from harvest import App, Batch, Debounce, Throttle, activity, workflow
from harvest.core.errors import InvalidArgument, WorkflowFailed


@workflow(throttle=Throttle(rps=2, burst=2))
async def paced_start(ctx, n: int) -> int:
    return n


@workflow(debounce=Debounce(quiet="0.6s", key="input.doc"))
async def reindex(ctx, change: dict) -> dict:
    return change


@workflow(batch=Batch(max_size=3, window="0.6s"))
async def bulk(ctx, items: list) -> list:
    return items


@activity(start_to_close="10s")
async def touch(ctx, n: int) -> int:
    return n


@workflow
async def metered_work(ctx, n: int) -> int:
    await ctx.execute_activity(touch, n)
    if n == 3:
        raise ValueError("three is bad")
    return n


APP = App(workflows=[paced_start, reindex, bulk, metered_work], activities=[touch])


def declare(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(APP.flow_policies()),))


def runs(db: str, name: str) -> list[tuple]:
    with psycopg.connect(db, autocommit=True) as conn:
        return conn.execute(
            "SELECT workflow_id, id::text, input, status, created_at FROM harvest.executions "
            "WHERE workflow_name = %s ORDER BY created_at, id",
            (name,),
        ).fetchall()


def started_in_stream_order(db: str, name: str) -> list[str]:
    """The workflow ids of ``name``'s runs in the order their WorkflowStarted went into the event stream."""
    with psycopg.connect(db, autocommit=True) as conn:
        return [
            r[0]
            for r in conn.execute(
                "SELECT e.workflow_id FROM harvest.events AS v "
                "JOIN harvest.executions AS e ON e.id = v.execution_id "
                "WHERE e.workflow_name = %s AND v.event_type = 'WorkflowStarted' ORDER BY v.global_id",
                (name,),
            ).fetchall()
        ]


def wait_for(predicate, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out waiting"
        time.sleep(0.05)


def test_throttle_admits_the_burst_and_defers_the_rest_in_order(db, start_worker, client) -> None:
    declare(db)
    handles = [client.start_workflow(paced_start, n, workflow_id=f"p{n}") for n in range(6)]
    assert [h.deferred for h in handles] == [False, False, True, True, True, True]
    assert all(h.execution_id is None for h in handles[2:])
    assert [h.workflow_id for h in handles] == [f"p{n}" for n in range(6)]
    with pytest.raises(InvalidArgument, match="deferred"):
        handles[3].result(timeout=1)
    start_worker(APP, concurrency=4)
    wait_for(
        lambda: (
            len(runs(db, "paced_start")) == 6 and all(r[3] == "COMPLETED" for r in runs(db, "paced_start"))
        )
    )
    # The order the runs started in is the event stream's (WorkflowStarted by global_id,
    # docs/event-streams.md), not (created_at, id): a scan that comes a second or more late
    # (CI's load) finds two tokens and releases two starts in one transaction, with one
    # created_at and ids that share their clock bytes, so their random bytes ordered them.
    assert started_in_stream_order(db, "paced_start") == [f"p{n}" for n in range(6)], "released FIFO"
    rows = runs(db, "paced_start")
    # 4 deferred starts at 2 per second: the last starts >= 1.5 s after the first
    assert (rows[-1][4] - rows[0][4]).total_seconds() >= 1.4
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM harvest.pending_starts").fetchone()[0] == 0


def test_debounce_collapses_a_burst_per_key_into_one_run_with_the_latest_input(
    db, start_worker, client
) -> None:
    declare(db)
    start_worker(APP, concurrency=4)
    handles = [client.start_workflow(reindex, {"doc": "a", "v": v}) for v in range(1, 6)]
    handles.append(client.start_workflow(reindex, {"doc": "b", "v": 9}))
    assert all(h.deferred for h in handles)
    assert len({h.workflow_id for h in handles[:5]}) == 1, "one burst, one workflow_id"
    wait_for(lambda: len(runs(db, "reindex")) == 2 and all(r[3] == "COMPLETED" for r in runs(db, "reindex")))
    time.sleep(1.0)  # nothing else is released later
    got = {r[2][0]["doc"]: (r[0], r[2][0]["v"]) for r in runs(db, "reindex")}
    assert got == {"a": (handles[0].workflow_id, 5), "b": (handles[5].workflow_id, 9)}


def test_a_start_whose_key_value_is_missing_is_not_gated(db, client) -> None:
    """docs/flow-control.md, Key paths: a missing value means no key, and no gate for that run
    (it was deferred and merged under the key '', losing all but the latest input)."""
    declare(db)
    first = client.start_workflow(reindex, {"v": 1})
    second = client.start_workflow(reindex, {"v": 2})
    assert not first.deferred and not second.deferred
    assert first.execution_id is not None and second.execution_id is not None
    assert sorted(r[2][0]["v"] for r in runs(db, "reindex")) == [1, 2]
    with psycopg.connect(db, autocommit=True) as conn:
        assert conn.execute("SELECT count(*) FROM harvest.pending_starts").fetchone()[0] == 0


def test_batch_gathers_starts_into_one_run(db, start_worker, client) -> None:
    declare(db)
    first = [client.start_workflow(bulk, item) for item in ("x", "y")]
    assert all(h.deferred for h in first)
    filled = client.start_workflow(bulk, "z")
    assert not filled.deferred and filled.started_fresh
    start_worker(APP, concurrency=4)
    assert filled.result(timeout=20) == ["x", "y", "z"]
    late = client.start_workflow(bulk, "w")
    assert late.deferred
    wait_for(lambda: len(runs(db, "bulk")) == 2)
    assert runs(db, "bulk")[1][2] == [["w"]]


def test_a_conflict_policy_with_a_start_gate_is_refused(db, client) -> None:
    declare(db)
    for wf, arg in ((paced_start, 1), (reindex, {"doc": "a"}), (bulk, "x")):
        with pytest.raises(InvalidArgument, match="conflict_policy"):
            client.start_workflow(wf, arg, workflow_id="c1", conflict_policy="use_existing")
    # signal_with_start passes no policy of its caller's: the refusal says which it uses.
    with pytest.raises(InvalidArgument, match=r"\(which signal_with_start and update_with_start use\)"):
        client.signal_with_start(paced_start, 1, workflow_id="c2", signal="go")


def test_usage_report_from_durable_events(db, start_worker, client) -> None:
    before = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
    handles = [
        client.start_workflow(metered_work, n, search_attributes={"tenant": "acme"} if n < 3 else {})
        for n in range(1, 5)
    ]
    start_worker(APP, concurrency=4)
    for h in handles:
        with contextlib.suppress(WorkflowFailed):  # run 3 fails on purpose
            h.result(timeout=30)
    after = dt.datetime.now(dt.UTC) + dt.timedelta(minutes=1)
    with client.sql() as sql:
        by_name = sql.count_usage(before, after)
        by_tenant = sql.count_usage(before, after, "search_attr:tenant")
        with pytest.raises(InvalidArgument, match="ceiling"):
            sql.count_usage(before - dt.timedelta(days=100), after)
    row = next(r for r in by_name if r["group_name"] == "metered_work")
    assert (row["workflow_starts"], row["completed"], row["failed"]) == (4, 3, 1)
    assert (row["activity_executions"], row["activity_executions_failed"]) == (4, 0)
    assert row["activity_compute_seconds"] >= 0
    tenants = {r["group_name"]: (r["workflow_starts"], r["failed"]) for r in by_tenant}
    assert tenants["acme"] == (2, 0)
    assert tenants["(unattributed)"][0] >= 2 and tenants["(unattributed)"][1] == 1


def test_concurrent_starts_collapse_and_never_over_admit(db, client) -> None:
    """8 connections at once: one debounce row per key; the throttle admits exactly its burst."""
    import threading

    declare(db)
    errors: list[BaseException] = []
    barrier = threading.Barrier(8)

    def hammer(i: int) -> None:
        try:
            with psycopg.connect(db, autocommit=True) as conn:
                barrier.wait()
                for j in range(5):
                    conn.execute(
                        "SELECT * FROM harvest.start_workflow('reindex', %s)",
                        (Jsonb([{"doc": "z", "v": i * 10 + j}]),),
                    )
                    conn.execute("SELECT * FROM harvest.start_workflow('paced_start', %s)", (Jsonb([i]),))
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=hammer, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    with psycopg.connect(db, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT kind, count(*), sum(starts) FROM harvest.pending_starts GROUP BY kind ORDER BY kind"
        ).fetchall()
        started = conn.execute(
            "SELECT count(*) FROM harvest.executions WHERE workflow_name = 'paced_start'"
        ).fetchone()[0]
    assert ("debounce", 1, 40) in rows
    throttle = next(r for r in rows if r[0] == "throttle")
    # burst 2 plus at most the tokens refilled at 2/s while the 40 starts ran
    assert started + throttle[1] == 40 and 2 <= started <= 2 + 2 * 5


@pytest.mark.parametrize(
    ("key", "first"),
    [
        ("input.doc.id", {"doc": {"id": "d-1"}}),
        ("input.doc.id", {"doc": {"id": 7}}),
        ("input.doc.id", {"doc": {"id": None}}),
        ("input.doc.id", {"doc": "d"}),
        ("input.items.1", {"items": ["a", "b", "c"]}),
        ("input.items.7", {"items": ["a", "b", "c"]}),
        ("input.items.-1", {"items": ["a", "b", "c"]}),
        ("input.items.-3", {"items": ["a", "b", "c"]}),
        ("input.items.-4", {"items": ["a", "b", "c"]}),
        ("input.0", ["x", "y"]),
        ("input.-2", ["x", "y"]),
        ("input.0", {"0": "zero"}),
        ("input.items.--1", {"items": ["a", "b", "c"]}),
    ],
)
def test_the_client_resolves_a_gate_key_where_the_database_does(db: str, key: str, first: object) -> None:
    """A sharded client places a debounce's burst by its gate's key (client/routing.py, gate_key):
    it must find a value exactly where harvest._start_gate_key does, or a burst the database
    gates is spread over the shards by random ids and never collapses."""
    from harvest.client import routing

    @workflow(name="keyed_gate", debounce=Debounce(quiet=5, key=key))
    async def keyed_gate(ctx, change) -> None:
        return None

    definition = keyed_gate.__harvest_workflow__
    policy = {"debounce": {"key": key}}
    with psycopg.connect(db, autocommit=True) as conn:
        found = conn.execute(
            "SELECT harvest._start_gate_key(%s, %s)", (Jsonb(policy), Jsonb([first]))
        ).fetchone()[0]
    assert (routing.gate_key(definition, [first]) is None) == (found is None), (found, key, first)
