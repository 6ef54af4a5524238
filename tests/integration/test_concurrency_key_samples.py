"""What the metrics sampler's concurrency keys cost once a fleet has many tenants, and that
their totals stay exact.

harvest.get_metric_samples exports the busiest ``p_max_keys`` concurrency keys
(``harvest_concurrency_in_flight`` / ``_pending``) and sums the rest under ``_other``. It read
every key's counts through list_concurrency_keys(NULL) on every scrape: each keyed activity
task a second time (the queue depths read every task already), every key grouped, sorted by
key and again by its counts, to keep ten of them. It now takes the keyed activity totals from
the queue depths' pass, ranks the keys with work in flight (read from the in-flight rows) and
counts only the keys it exports.
"""

from __future__ import annotations

from typing import Any

import psycopg
import pytest

from harvest.db.sqlapi import SqlApi
from harvest.telemetry.metrics import OTHER_KEYS, Metrics

TENANTS = 20_000  # each with a pending activity on its own key (max_concurrent 2)
HOT = 12  # keys with work in flight: hot:01 has 1 running activity, ..., hot:12 has 12
MAX_KEYS = 10


def _tenants(conn: psycopg.Connection, keyed: bool) -> None:
    """The tenants' runs and activities, on their keys or (the control) on none."""
    conn.execute("TRUNCATE harvest.tasks, harvest.executions CASCADE")
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at)"
        " SELECT gen_random_uuid(), 'tenant_job', 'job-' || g, 'RUNNING',"
        " '2030-01-01 00:00:00+00'::timestamptz + g * interval '1 second'"
        " FROM generate_series(1, %s) AS g",
        (TENANTS,),
    )
    conn.execute(
        "INSERT INTO harvest.tasks (execution_id, kind, queue, status, due_at, scheduled_at, seq,"
        " activity_name, concurrency_key, concurrency_limit)"
        " SELECT e.id, 'activity', 'default', 'pending', e.created_at, e.created_at, 1, 'charge',"
        " CASE WHEN %s THEN 'tenant:' || substr(e.workflow_id, 5) END, 2 FROM harvest.executions AS e"
        " WHERE e.workflow_name = 'tenant_job'",
        (keyed,),
    )
    # The hot keys: hot:NN has NN running activities and one pending, all on one run.
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at)"
        " VALUES (gen_random_uuid(), 'hot_job', 'hot', 'RUNNING', '2030-01-01')"
    )
    conn.execute(
        "INSERT INTO harvest.tasks (execution_id, kind, queue, status, due_at, scheduled_at, seq,"
        " activity_name, concurrency_key, concurrency_limit, lease_owner, lease_expires_at)"
        " SELECT e.id, 'activity', 'default', CASE WHEN i <= k THEN 'running' ELSE 'pending' END,"
        " e.created_at, e.created_at, k * 100 + i, 'charge',"
        " CASE WHEN %s THEN 'hot:' || lpad(k::text, 2, '0') END, 50,"
        " CASE WHEN i <= k THEN 'w1' END, CASE WHEN i <= k THEN '2030-01-01 00:05:00+00'::timestamptz END"
        " FROM harvest.executions AS e, generate_series(1, %s) AS k, generate_series(1, k + 1) AS i"
        " WHERE e.workflow_id = 'hot'",
        (keyed, HOT),
    )
    conn.execute("VACUUM ANALYZE harvest.executions")
    conn.execute("VACUUM ANALYZE harvest.tasks")


def _rows_read(conn: psycopg.Connection, table: str) -> int:
    """Rows this transaction read from ``table``: its sequential scans' rows and the entries its
    indexes returned (an index scan's and an index-only scan's alike)."""
    (n,) = conn.execute(
        "SELECT pg_stat_get_xact_tuples_returned(%(t)s::regclass)"
        " + coalesce((SELECT sum(pg_stat_get_xact_tuples_returned(i.indexrelid))"
        "   FROM pg_index AS i WHERE i.indrelid = %(t)s::regclass), 0)",
        {"t": table},
    ).fetchone()
    return int(n)


def _scrape(conn: psycopg.Connection) -> tuple[dict[str, Any], int]:
    """A sample of MAX_KEYS keys (the generic plan's: PL/pgSQL keeps one after five calls) and
    the task rows it read."""
    for _ in range(7):
        with conn.transaction():
            before = _rows_read(conn, "harvest.tasks")
            (samples,) = conn.execute("SELECT harvest.get_metric_samples(%s)", (MAX_KEYS,)).fetchone()
            read = _rows_read(conn, "harvest.tasks") - before
    return samples, read


def test_a_scrape_of_many_keys_reads_the_exported_keys_not_every_key(conn: psycopg.Connection) -> None:
    """20,000 tenant keys, twelve of them with work in flight, max_keys 10: the keys add to a
    scrape's reads the in-flight rows and the ten exported keys' rows, not every keyed task
    again (to group and sort 20,000 keys and keep ten). The control is the same tasks on no key
    (the queue depths and the timers read every task either way)."""
    _tenants(conn, keyed=False)
    _, unkeyed = _scrape(conn)
    _tenants(conn, keyed=True)
    samples, keyed = _scrape(conn)
    assert keyed - unkeyed <= 300, f"{keyed} task rows read on keys, {unkeyed} on none"
    busiest = [f"hot:{k:02d}" for k in range(HOT, HOT - MAX_KEYS, -1)]
    assert [k["key"] for k in samples["concurrency"]] == busiest
    assert samples["other_keys"] == {"in_flight": 1 + 2, "pending": TENANTS + 2, "pending_estimated": False}


def test_a_scrape_reads_each_task_once_and_counts_every_timer(conn: psycopg.Connection) -> None:
    """The queue depths, the keyed totals and the timers read each task at most once: a count of
    the timers of its own read every task a second time. A paused run's timers count too (found
    through its PAUSED row; tasks_timers_due holds only the pending ones)."""
    _tenants(conn, keyed=False)
    conn.execute(
        "INSERT INTO harvest.tasks (execution_id, kind, queue, status, due_at, scheduled_at, seq)"
        " SELECT e.id, 'timer', 'default', CASE WHEN g % 2 = 0 THEN 'pending' ELSE 'paused' END,"
        " '2031-01-01', '2030-01-01', 5000 + g FROM harvest.executions AS e, generate_series(1, 6) AS g"
        " WHERE e.workflow_id = 'hot'"
    )
    # (a 'paused' task is a PAUSED run's: functions/lifecycle.sql)
    conn.execute("UPDATE harvest.executions SET status = 'PAUSED' WHERE workflow_id = 'hot'")
    (tasks,) = conn.execute("SELECT count(*) FROM harvest.tasks").fetchone()
    samples, read = _scrape(conn)
    assert read <= tasks + 300, f"{read} task rows read for {tasks} tasks"
    assert samples["timers_pending"] == 6
    assert all(q["kind"] != "timer" for q in samples["queues"])


def _expected(keys: list[dict[str, Any]], max_keys: int) -> tuple[list[dict[str, Any]], dict[str, Any]]:
    """The top max_keys of list_concurrency_keys(NULL) by in flight, pending, key, task type,
    and the others' count and sums."""
    ranked = sorted(keys, key=lambda k: (-k["in_flight"], -k["pending"], k["key"], k["task_type"]))
    top = [
        {"key": k["key"], "task_type": k["task_type"], "in_flight": k["in_flight"], "pending": k["pending"]}
        for k in ranked[:max_keys]
    ]
    rest = ranked[max_keys:]
    other = {
        "in_flight": sum(k["in_flight"] for k in rest),
        "pending": sum(k["pending"] for k in rest),
        "pending_estimated": False,
    }
    return top, other


def _mixed(conn: psycopg.Connection) -> None:
    """Every kind of keyed work the status view counts: running, pending and paused activities
    (a paused one is neither), a keyed workflow task running (not an activity), defer runs
    admitted (a slot) and not, a PAUSED run keeping its slot, cancel_running runs (all in
    flight), one key both an activity key and a workflow key, and ties."""
    conn.execute(
        "INSERT INTO harvest.flow_policies (kind, name, policy, updated_at) VALUES"
        ' (\'workflow\', \'latest\', \'{"concurrency": {"key": "input", "limit": 1,'
        ' "on_conflict": "cancel_running"}}\', now()),'
        ' (\'workflow\', \'deferred\', \'{"concurrency": {"key": "input", "limit": 2,'
        ' "on_conflict": "defer"}}\', now())'
    )
    runs = [
        # (workflow_id, workflow_name, status, key, admitted)
        ("d1", "deferred", "RUNNING", "k:a", True),
        ("d2", "deferred", "RUNNING", "k:a", True),
        ("d3", "deferred", "RUNNING", "k:a", False),
        ("d4", "deferred", "PAUSED", "k:b", True),
        ("d5", "deferred", "PAUSED", "k:b", False),
        ("d6", "deferred", "COMPLETED", "k:b", False),
        ("d7", "deferred", "RUNNING", "k:c", False),
        ("l1", "latest", "RUNNING", "k:c", False),
        ("l2", "latest", "RUNNING", "k:d", False),
        ("l3", "latest", "PAUSED", "k:d", False),
        ("u1", "unpolicied", "RUNNING", "k:e", False),
        ("x1", "acts", "RUNNING", None, False),
    ]
    for workflow_id, name, status, key, admitted in runs:
        conn.execute(
            "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, concurrency_key,"
            " created_at, completed_at) VALUES (gen_random_uuid(), %s, %s, %s, %s, '2030-01-01',"
            " CASE WHEN %s = 'COMPLETED' THEN '2030-01-01'::timestamptz END)",
            (name, workflow_id, status, key, status),
        )
        if admitted:
            conn.execute(
                "INSERT INTO harvest.workflow_slots (execution_id, concurrency_key, workflow_name,"
                " admitted_at)"
                " SELECT e.id, e.concurrency_key, e.workflow_name, '2030-01-01' FROM harvest.executions AS e"
                " WHERE e.workflow_id = %s",
                (workflow_id,),
            )
    activities = [
        # (key, status) on run x1
        ("k:a", "running"),
        ("k:a", "pending"),
        ("k:f", "running"),
        ("k:f", "running"),
        ("k:f", "paused"),
        ("k:g", "pending"),
        ("k:g", "pending"),
        ("k:g", "pending"),
        ("k:h", "pending"),
        ("k:i", "paused"),
        ("k:j", "running"),
        ("k:k", "pending"),
    ]
    for seq, (key, status) in enumerate(activities, start=1):
        conn.execute(
            "INSERT INTO harvest.tasks (execution_id, kind, queue, status, due_at, scheduled_at, seq,"
            " activity_name, concurrency_key, concurrency_limit, lease_owner, lease_expires_at)"
            " SELECT e.id, 'activity', 'default', %s, '2030-01-01', '2030-01-01', %s, 'charge', %s, 5,"
            " CASE WHEN %s = 'running' THEN 'w1' END,"
            " CASE WHEN %s = 'running' THEN '2030-01-01 00:05:00+00'::timestamptz END"
            " FROM harvest.executions AS e WHERE e.workflow_id = 'x1'",
            (status, seq, key, status, status),
        )
    # A keyed workflow task, running: in tasks_concurrency_running, but no activity's slot.
    conn.execute(
        "INSERT INTO harvest.tasks (execution_id, kind, queue, status, due_at, scheduled_at,"
        " concurrency_key, concurrency_limit, lease_owner, lease_expires_at)"
        " SELECT e.id, 'workflow', 'default', 'running', '2030-01-01', '2030-01-01', 'k:c', 2, 'w1',"
        " '2030-01-01 00:05:00+00' FROM harvest.executions AS e WHERE e.workflow_id = 'd7'"
    )


@pytest.mark.parametrize("max_keys", [0, 1, 2, 3, 4, 5, 6, 7, 8, 13, 1000])
def test_the_exported_keys_and_the_others_add_up_to_every_key(
    conn: psycopg.Connection, max_keys: int
) -> None:
    """Whether more or fewer than max_keys keys have work in flight, the exported keys are the
    busiest of list_concurrency_keys (in flight, then pending, then key), and the exported keys
    plus _other hold every key's in flight and pending: the totals stay exact."""
    _mixed(conn)
    keys = [
        dict(zip(("key", "task_type", "in_flight", "pending"), r, strict=True))
        for r in conn.execute(
            "SELECT key, task_type, in_flight, pending FROM harvest.list_concurrency_keys(NULL)"
        ).fetchall()
    ]
    assert len(keys) == 12
    top, other = _expected(keys, max_keys)
    for _ in range(7):  # the custom plans and the generic one
        samples = SqlApi(conn).get_metric_samples(max_keys)
        assert samples["concurrency"] == top
        assert samples["other_keys"] == other

    metrics = Metrics()
    metrics.apply_samples(samples)
    families = {f.name: f for f in metrics.registry.collect()}
    for field in ("in_flight", "pending"):
        name = f"harvest_concurrency_{field}"
        exported = {(s.labels["key"], s.labels["task_type"]): s.value for s in families[name].samples}
        assert sum(exported.values()) == sum(k[field] for k in keys), name
        # _other is there while the keys not exported hold any work.
        assert ((OTHER_KEYS, "any") in exported) == (other["in_flight"] + other["pending"] > 0)


def test_a_run_admitted_per_tenant_is_counted_once_a_sample(conn: psycopg.Connection) -> None:
    """The documented per-tenant key is a workflow's: 20,000 tenants, each with a run admitted on
    its key (a slot) and one deferred, are 20,000 keys in flight: more than 10,000 slots, so no
    run is read to find the keys in flight (to be counted again after): every key is counted
    once, each keyed run read once, and the totals are its sums, exact. (A guard: the sample
    read each keyed run once before too.)"""
    conn.execute(
        "INSERT INTO harvest.flow_policies (kind, name, policy, updated_at) VALUES ('workflow', 'tenant_job',"
        ' \'{"concurrency": {"key": "input.tenant", "limit": 1, "on_conflict": "defer"}}\', now())'
    )
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, concurrency_key, created_at)"
        " SELECT gen_random_uuid(), 'tenant_job', 'job-' || g || '-' || n, 'RUNNING',"
        " 'tenant:' || lpad(g::text, 6, '0'), '2030-01-01 00:00:00+00'::timestamptz + g * interval '1 second'"
        " FROM generate_series(1, %s) AS g, generate_series(1, 2) AS n",
        (TENANTS,),
    )
    conn.execute(
        "INSERT INTO harvest.workflow_slots (execution_id, concurrency_key, workflow_name, admitted_at)"
        " SELECT e.id, e.concurrency_key, e.workflow_name, e.created_at FROM harvest.executions AS e"
        " WHERE e.workflow_id LIKE '%%-1'"
    )
    conn.execute("VACUUM ANALYZE harvest.executions")
    conn.execute("VACUUM ANALYZE harvest.workflow_slots")
    for _ in range(7):
        with conn.transaction():
            before = _rows_read(conn, "harvest.executions")
            (samples,) = conn.execute("SELECT harvest.get_metric_samples(%s)", (MAX_KEYS,)).fetchone()
            read = _rows_read(conn, "harvest.executions") - before
    assert samples["concurrency"] == [
        {"key": f"tenant:{g:06d}", "task_type": "workflow", "in_flight": 1, "pending": 1}
        for g in range(1, MAX_KEYS + 1)
    ]
    assert samples["other_keys"] == {
        "in_flight": TENANTS - MAX_KEYS,
        "pending": TENANTS - MAX_KEYS,
        "pending_estimated": False,
    }
    assert read <= 2 * TENANTS + 100, f"{read} run rows read for {2 * TENANTS} keyed runs"


IN_FLIGHT_KEYS = 5_000  # under the 10,000 in-flight rows: the sample ranks from the keys in flight
MANY_MAX_KEYS = 50  # the sampler's default


def test_a_scrape_that_ranks_the_keys_in_flight_reads_each_keyed_run_once(conn: psycopg.Connection) -> None:
    """5,000 tenant keys, each with a run admitted (a slot) and one deferred, max_keys 50: the
    sample ranks from the keys in flight. It read the live keyed runs three times (the slots' runs
    to find the keys in flight, those keys' runs to count them, every run for the totals) and the
    slots four (their count, and beside each of those reads): 30,007 run rows and 20,006 slot
    rows. Now each keyed run is read once, with the others' totals on the same pass, and the slots
    twice (their keys, then the in-flight rule's lookup); the totals stay exact."""
    conn.execute(
        "INSERT INTO harvest.flow_policies (kind, name, policy, updated_at) VALUES ('workflow', 'tenant_job',"
        ' \'{"concurrency": {"key": "input.tenant", "limit": 1, "on_conflict": "defer"}}\', now())'
    )
    conn.execute(
        "INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, concurrency_key, created_at)"
        " SELECT gen_random_uuid(), 'tenant_job', 'job-' || g || '-' || n, 'RUNNING',"
        " 'tenant:' || lpad(g::text, 6, '0'), '2030-01-01 00:00:00+00'::timestamptz + g * interval '1 second'"
        " FROM generate_series(1, %s) AS g, generate_series(1, 2) AS n",
        (IN_FLIGHT_KEYS,),
    )
    conn.execute(
        "INSERT INTO harvest.workflow_slots (execution_id, concurrency_key, workflow_name, admitted_at)"
        " SELECT e.id, e.concurrency_key, e.workflow_name, e.created_at FROM harvest.executions AS e"
        " WHERE e.workflow_id LIKE '%%-1'"
    )
    conn.execute("VACUUM ANALYZE harvest.executions")
    conn.execute("VACUUM ANALYZE harvest.workflow_slots")
    for _ in range(7):  # the custom plans and the generic one
        with conn.transaction():
            before = _rows_read(conn, "harvest.executions"), _rows_read(conn, "harvest.workflow_slots")
            (samples,) = conn.execute("SELECT harvest.get_metric_samples(%s)", (MANY_MAX_KEYS,)).fetchone()
            runs = _rows_read(conn, "harvest.executions") - before[0]
            slots = _rows_read(conn, "harvest.workflow_slots") - before[1]
        assert samples["concurrency"] == [
            {"key": f"tenant:{g:06d}", "task_type": "workflow", "in_flight": 1, "pending": 1}
            for g in range(1, MANY_MAX_KEYS + 1)
        ]
        assert samples["other_keys"] == {
            "in_flight": IN_FLIGHT_KEYS - MANY_MAX_KEYS,
            "pending": IN_FLIGHT_KEYS - MANY_MAX_KEYS,
            "pending_estimated": False,
        }
        assert runs <= 2 * IN_FLIGHT_KEYS + 100, f"{runs} run rows read for {2 * IN_FLIGHT_KEYS} keyed runs"
        assert slots <= 2 * IN_FLIGHT_KEYS + 100, f"{slots} slot rows read for {IN_FLIGHT_KEYS} slots"
