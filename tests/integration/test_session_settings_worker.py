"""The worker and the client in sessions with hostile settings (docs/security.md, "Session
settings"): a run with a retried activity, a timer and a signal ends with the same result and
the same history as in sessions with the server's defaults."""

from __future__ import annotations

import uuid
from typing import Any

import psycopg
from psycopg import conninfo

from harvest import App, Client, RetryPolicy, activity, workflow

attempts: dict[str, int] = {}


@activity(
    start_to_close="10.5s",
    heartbeat_timeout="5.25s",
    retry=RetryPolicy.exponential(max_attempts=3, initial="0.15s", backoff=1.5),
)
async def flaky_double(ctx, key: str, x: float) -> float:
    attempts[key] = attempts.get(key, 0) + 1
    await ctx.aheartbeat({"progress": 0.1})
    if attempts[key] == 1:
        raise ConnectionError("once")
    return x * 2


@workflow
async def settings_flow(ctx, key: str, x: float) -> dict:
    await ctx.sleep(0.25)
    y = await ctx.execute_activity(flaky_double, key, x)
    return {"y": y, "x": x}


APP = App(workflows=[settings_flow], activities=[flaky_double])

# What a client or worker deployment may put in its DSN (any login may): test_session_settings'
# hostile values that psycopg reads (it reads times only in DateStyle ISO: a client of its own
# with DateStyle SQL fails to read a timestamptz, "can't parse timestamptz with DateStyle").
HOSTILE_OPTIONS = {
    "extra_float_digits": "-15",
    "IntervalStyle": "iso_8601",
    "TimeZone": "Pacific/Apia",
    "standard_conforming_strings": "off",
    "escape_string_warning": "off",
    "bytea_output": "escape",
    "enable_seqscan": "off",
    "plan_cache_mode": "force_custom_plan",
    "search_path": "pg_temp",
}


def _history(db: str, workflow_id: str) -> list[tuple[str, Any]]:
    with psycopg.connect(db, autocommit=True) as conn:
        rows = conn.execute(
            "SELECT ev.event_type, ev.event_data FROM harvest.events AS ev JOIN harvest.executions AS e"
            " ON e.id = ev.execution_id WHERE e.workflow_id = %s ORDER BY ev.event_id",
            (workflow_id,),
        ).fetchall()
    return [(t, _normalise(d)) for t, d in rows]


def _normalise(value: Any) -> Any:
    if isinstance(value, dict):
        return {
            k: _normalise(v)
            for k, v in value.items()
            if k not in {"started_at", "worker_id", "fire_at", "workflow_id"}
        }
    if isinstance(value, list):
        return [_normalise(v) for v in value]
    return value


def test_a_worker_and_client_with_hostile_settings_store_and_answer_the_same(db: str, start_worker) -> None:
    """One run with the defaults, then one with every connection of the worker and the client
    opened with HOSTILE_OPTIONS (the first worker stopped before: each run is the work of
    one); the results and the histories (less worker ids, wall-clock times and random ids)
    are the same."""
    hostile = conninfo.make_conninfo(db, options=" ".join(f"-c {k}={v}" for k, v in HOSTILE_OPTIONS.items()))
    results = {}
    for label, dsn in (("default", db), ("hostile", hostile)):
        worker = start_worker(APP, dsn=dsn)
        with Client(dsn) as client:
            workflow_id = f"{label}-{uuid.uuid4().hex[:6]}"
            attempts.clear()
            result = client.execute_workflow(
                settings_flow, "k", 1.25, workflow_id=workflow_id, result_timeout=60
            )
        worker.stop()
        results[label] = (result, _history(db, workflow_id))
    assert results["hostile"][0] == results["default"][0] == {"y": 2.5, "x": 1.25}
    assert results["hostile"][1] == results["default"][1]
