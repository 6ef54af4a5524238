"""DAGs: list, trigger with a conf, pause, unpause, the runs of a DAG, one run with its tasks'
states, retry a run from its failed tasks (docs/dags.md). Thin over the SQL calls `harvest dag`
makes.

On shards each shard registers the DAGs and holds the runs triggered on it: the list and the
runs of a DAG are read on every shard (``shard_id`` on each row), a trigger runs on the default
shard (``shard_id`` names another), pause and unpause are written on every shard that has the
DAG, and a run is found by its execution id as any run is.
"""

from __future__ import annotations

from typing import Any, cast

from harvest.core.errors import NotFound
from harvest.shard.fanout import no_dag_anywhere
from harvest.telemetry import tracing
from harvest.web.routes import (
    ANY,
    BOOLEAN,
    FANOUT,
    ROWS,
    SHARD_ID,
    STRING,
    Call,
    Endpoint,
    Param,
    Reply,
    body,
    merged,
    path,
    shape,
)

DAG = path("dag_name", description="The DAG's name (its workflow type).")
RUN = path("execution_id", "uuid", "The DAG run's execution id.")
STARTED = shape(
    execution_id={"type": "string"},
    workflow_id={"type": "string"},
    status={"type": "string"},
    started_fresh=BOOLEAN,
)


async def list_dags(call: Call, args: dict[str, Any], _: Any) -> Any:
    return merged(call, await call.reads().list_dags(), "dags")


def _started(row: dict[str, Any]) -> Reply:
    """201 a new run, 200 the run the workflow id already named."""
    return Reply(row, 201 if row.get("started_fresh") else 200)


async def trigger_dag(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    name = args["dag_name"]
    conf = data.get("conf")
    # A start like a client's (docs/observability.md): the caller's span (its traceparent
    # header) is the start span's parent, and the run continues the start span.
    with tracing.start_span(name) as trace:
        row = await call.on_shard(
            data.get("shard_id"),
            lambda sql: sql.trigger_dag(
                name,
                {} if conf is None else conf,
                data.get("workflow_id"),
                call.operator_id,
                trace.traceparent,
            ),
        )
        trace.started(row.get("execution_id"), {"harvest.workflow": name, "harvest.dag": name})
    return _started(row)


async def _set_paused(call: Call, name: str, paused: bool) -> dict[str, Any]:
    """Pause or unpause on every shard that has the DAG, each shard to its own outcome as every
    write on every shard (Call.each_shard_write): shard_errors names the shards not reached and
    the ones that refused, status partial; none has it: 404; refused wherever it is: the first
    refusal, naming every shard's."""

    async def flip(sql: Any) -> bool | None:
        try:
            if paused:
                return cast("bool | None", await sql.pause_dag(name, call.operator_id))
            return cast("bool | None", await sql.unpause_dag(name, call.operator_id))
        except NotFound:
            if not call.sharded:  # one database: its own error (as `harvest dag pause`)
                raise
            return None  # not registered there: nothing to do, not a refusal

    done = await call.each_shard_write(flip, "nothing was changed")
    found = {s: changed for s, changed in done.results.items() if changed is not None}
    if not found:
        if done.refused:  # the shards that may have it said no
            done.raise_none_done("nothing was changed")
        raise no_dag_anywhere(name, done.unavailable_shards)
    return {
        "dag_name": name,
        "paused": paused,
        "changed": any(found.values()),
        "shards": {str(s): {"changed": c} for s, c in found.items()},
        **done.outcome(),
    }


async def pause_dag(call: Call, args: dict[str, Any], _: Any) -> Any:
    return await _set_paused(call, args["dag_name"], True)


async def unpause_dag(call: Call, args: dict[str, Any], _: Any) -> Any:
    return await _set_paused(call, args["dag_name"], False)


async def dag_runs(call: Call, args: dict[str, Any], _: Any) -> Any:
    """Every shard's runs merged newest first, paged by ``cursor`` (harvest.shard.fanout)."""
    found = await call.reads().list_dag_runs(args["dag_name"], args["limit"], None, args["cursor"])
    return merged(call, found, "runs")


async def get_dag_run(call: Call, args: dict[str, Any], _: Any) -> Any:
    execution_id = args["execution_id"]
    return await call.routed(execution_id, lambda sql: sql.get_dag_run(execution_id))


async def retry_dag_run(call: Call, args: dict[str, Any], _: Any) -> Any:
    execution_id = args["execution_id"]
    row = await call.routed(execution_id, lambda sql: sql.retry_dag_run(execution_id, call.operator_id))
    return _started(row)


REFUSED = {404: "No such DAG", 409: "The DAG is paused (HR017)", 429: "At max_active_runs (HR018)"}
ENDPOINTS = [
    Endpoint(
        "GET",
        "/dags",
        "read",
        list_dags,
        "The DAGs the workers registered, with their pause and runs, over every shard.",
        tag="dags",
        shape=shape(dags=ROWS, **FANOUT),
    ),
    Endpoint(
        "POST",
        "/dags/{dag_name}/trigger",
        "operate",
        trigger_dag,
        "Start a run of a DAG now with a conf (refused while paused or at max_active_runs).",
        (DAG,),
        body(
            {
                "conf": ANY,
                "workflow_id": STRING,
                "shard_id": SHARD_ID,
            }
        ),
        responses={200: "The run of that workflow_id", 201: "Started", **REFUSED},
        tag="dags",
        shape=STARTED,
    ),
    Endpoint(
        "POST",
        "/dags/{dag_name}/pause",
        "operate",
        pause_dag,
        "Pause a DAG on every shard: triggers and retries are refused until it is unpaused.",
        (DAG,),
        responses={200: "OK", 404: "No such DAG"},
        tag="dags",
        shape=shape(dag_name=STRING, paused=BOOLEAN, changed=BOOLEAN),
    ),
    Endpoint(
        "POST",
        "/dags/{dag_name}/unpause",
        "operate",
        unpause_dag,
        "Unpause a DAG on every shard.",
        (DAG,),
        responses={200: "OK", 404: "No such DAG"},
        tag="dags",
        shape=shape(dag_name=STRING, paused=BOOLEAN, changed=BOOLEAN),
    ),
    Endpoint(
        "GET",
        "/dags/{dag_name}/runs",
        "read",
        dag_runs,
        "The runs of a DAG over every shard, newest first, with their tasks' states counted.",
        (
            DAG,
            Param("limit", "integer", default=50, minimum=1, maximum=1000),
            Param("cursor", description="next_cursor of the previous page."),
        ),
        responses={200: "OK", 404: "No such DAG"},
        tag="dags",
        shape=shape(runs=ROWS, next_cursor={"type": ["string", "null"]}, **FANOUT),
    ),
    Endpoint(
        "GET",
        "/dag-runs/{execution_id}",
        "read",
        get_dag_run,
        "One DAG run: each task's state, attempts and timings (from the run's history).",
        (RUN,),
        responses={200: "OK", 404: "No such DAG run"},
        tag="dags",
    ),
    Endpoint(
        "POST",
        "/dag-runs/{execution_id}/retry",
        "operate",
        retry_dag_run,
        "Retry a failed DAG run from its failed tasks: a new run keeps the successful tasks' results.",
        (RUN,),
        responses={
            200: "The retry already started",
            201: "Started",
            404: "No such DAG run",
            409: "Not retryable (HR019) or paused (HR017)",
            429: "At max_active_runs (HR018)",
        },
        tag="dags",
        shape=STARTED,
    ),
]
