"""Priority ageing and fairness keys: declared on @activity, applied inside claim_tasks."""

from __future__ import annotations

import asyncio
import threading

import psycopg
import pytest
from psycopg.types.json import Jsonb

from harvest import App, activity, workflow
from harvest.core.errors import InvalidArgument

started: list[str] = []
started_lock = threading.Lock()


@activity(start_to_close="30s", fairness_key="input.tenant_id")
async def tenant_job(ctx, job: dict) -> str:
    with started_lock:
        started.append(job["tenant_id"])
    return job["tenant_id"]


@activity(start_to_close="30s", priority=0, priority_aging_secs=1)
async def chore(ctx) -> None: ...


@activity(start_to_close="30s", priority=0)
async def chore_never_ages(ctx) -> None: ...


@workflow
async def tenant_batch(ctx, tenant_id: str, n: int) -> int:
    done = await asyncio.gather(
        *[ctx.execute_activity(tenant_job, {"tenant_id": tenant_id, "i": i}) for i in range(n)]
    )
    return len(done)


def schedule(conn: psycopg.Connection, queue: str, defn, inputs: list[list]) -> None:
    """Start a run on a workflow queue of its own; answer its first task with schedule_activity commands."""
    workflow_id = f"sched-{queue}-{len(inputs)}-{id(inputs)}"
    conn.execute("SELECT harvest.start_workflow('sched', '[]', %s, 'sched_wq')", (workflow_id,))
    task = conn.execute(
        "SELECT task_id, fencing_token FROM harvest.claim_tasks('setup', ARRAY['sched_wq'], 1)"
    ).fetchone()
    options = defn.__harvest_activity__.options_json()
    commands = [
        {
            "type": "schedule_activity",
            "seq": i + 1,
            "name": defn.__harvest_activity__.name,
            "input": args,
            "queue": queue,
            "options": options,
        }
        for i, args in enumerate(inputs)
    ]
    conn.execute("SELECT harvest.complete_workflow_task(%s, %s, 1, %s)", (task[0], task[1], Jsonb(commands)))


def test_options_carry_the_ageing_rate_and_the_key_path() -> None:
    assert tenant_job.__harvest_activity__.options_json()["fairness_key"] == "input.tenant_id"
    assert chore.__harvest_activity__.options_json()["priority_aging_secs"] == 1.0
    assert "fairness_key" not in chore.__harvest_activity__.options_json()
    assert "priority_aging_secs" not in tenant_job.__harvest_activity__.options_json()
    override = tenant_job.__harvest_activity__.with_options(priority_aging_secs="2m")
    assert override.options_json()["priority_aging_secs"] == 120.0

    async def f(ctx): ...

    with pytest.raises(InvalidArgument, match="fairness_key"):
        activity(fairness_key="tenant_id")(f)
    with pytest.raises(InvalidArgument, match="priority_aging_secs"):
        activity(priority_aging_secs=0)(f)


def test_a_tenant_flood_does_not_starve_another_tenant(db) -> None:
    """Tenant A schedules 2,000 tasks, then tenant B 3: B's all start within the first claim."""
    with psycopg.connect(db, autocommit=True) as conn:
        schedule(conn, "fair_q", tenant_job, [[{"tenant_id": "A", "i": i}] for i in range(2000)])
        schedule(conn, "fair_q", tenant_job, [[{"tenant_id": "B", "i": i}] for i in range(3)])
        keys = dict(
            conn.execute(
                "SELECT fairness_key, count(*) FROM harvest.tasks WHERE queue = 'fair_q' GROUP BY 1"
            ).fetchall()
        )
        assert keys == {"A": 2000, "B": 3}
        claims: list[list[str]] = []
        while len(claims) < 3:
            rows = conn.execute(
                "SELECT c.task_id, c.fencing_token, t.fairness_key "
                "FROM harvest.claim_tasks('w', ARRAY['fair_q'], 10) AS c "
                "JOIN harvest.tasks AS t ON t.id = c.task_id"
            ).fetchall()
            claims.append([key for _, _, key in rows])
            for task_id, token, _ in rows:
                conn.execute("SELECT harvest.complete_activity(%s, %s, 'null')", (task_id, token))
    assert claims[0].count("B") == 3, claims[0]
    assert all(len(batch) == 10 for batch in claims)
    assert claims[1] == ["A"] * 10


def test_without_a_fairness_key_the_flood_goes_first(db) -> None:
    """The control: the same flood with no key keeps tenant B waiting behind all of A."""
    with psycopg.connect(db, autocommit=True) as conn:
        schedule(conn, "plain_q", chore_never_ages, [[{"tenant_id": "A"}] for _ in range(300)])
        schedule(conn, "plain_q", chore_never_ages, [[{"tenant_id": "B"}] for _ in range(3)])
        first = conn.execute(
            "SELECT c.input -> 0 ->> 'tenant_id' FROM harvest.claim_tasks('w', ARRAY['plain_q'], 10) AS c"
        ).fetchall()
    assert [r[0] for r in first] == ["A"] * 10


def test_a_worker_starts_tenant_b_promptly_behind_a_flood(db, start_worker, client) -> None:
    started.clear()
    app = App(workflows=[tenant_batch], activities=[tenant_job])
    flood = client.start_workflow(tenant_batch, "A", 400)
    with psycopg.connect(db, autocommit=True) as conn:  # decide A's run by hand: its 400 tasks are queued
        task = conn.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('setup', ARRAY['default'], 1)"
        ).fetchone()
        commands = [
            {
                "type": "schedule_activity",
                "seq": i + 1,
                "name": "tenant_job",
                "input": [{"tenant_id": "A", "i": i}],
                "queue": "default",
                "options": tenant_job.__harvest_activity__.options_json(),
            }
            for i in range(400)
        ]
        conn.execute(
            "SELECT harvest.complete_workflow_task(%s, %s, 1, %s)", (task[0], task[1], Jsonb(commands))
        )
    few = client.start_workflow(tenant_batch, "B", 3)
    start_worker(app, concurrency=4)
    assert few.result(timeout=60) == 3
    assert flood.result(timeout=120) == 400
    # B's first workflow task and its 3 activities run behind at most a few claims of A.
    assert started.index("B") < 40 and len([t for t in started[:60] if t == "B"]) == 3, started[:60]


@pytest.mark.parametrize(("defn", "bound"), [(chore, 12), (chore_never_ages, None)])
def test_a_steady_high_priority_flood_does_not_starve_an_aged_task(db, defn, bound) -> None:
    """Each second 10 new priority-10 tasks arrive and one claim takes 10: the flood alone uses
    all the capacity. A priority-0 task ageing 1 step per second is claimed once it has aged
    past the flood, (10 - 0) * 1 s, plus one tick; one that does not age never is."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SET harvest.fake_now = '2030-01-01 00:00:00+00'")
        schedule(conn, "age_q", defn, [[]])
        run = conn.execute("SELECT execution_id FROM harvest.tasks WHERE queue = 'age_q'").fetchone()[0]
        claimed_at = None
        for tick in range(1, 41):
            conn.execute(f"SET harvest.fake_now = '2030-01-01 00:00:{tick:02d}+00'")
            conn.execute(
                "INSERT INTO harvest.tasks (execution_id, kind, queue, priority, due_at, scheduled_at, "
                "seq, activity_name) SELECT %s, 'activity', 'age_q', 10, harvest.now(), harvest.now(), "
                "1000 * %s + g, 'flood' FROM generate_series(1, 10) AS g",
                (run, tick),
            )
            rows = conn.execute(
                "SELECT c.task_id, c.fencing_token, c.activity_name "
                "FROM harvest.claim_tasks('w', ARRAY['age_q'], 10) AS c"
            ).fetchall()
            assert len(rows) == 10
            if any(name == defn.__harvest_activity__.name for _, _, name in rows):
                claimed_at = tick
                break
            conn.execute("DELETE FROM harvest.tasks WHERE id = ANY(%s)", ([r[0] for r in rows],))
    if bound is None:
        assert claimed_at is None
    else:
        assert claimed_at is not None and claimed_at <= bound, claimed_at
