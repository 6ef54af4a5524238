"""History export batches (docs/http-api.md "History export batches"): the document
`harvest history export-batch` writes, over HTTP, built by the same steps
(harvest.client.export_batch) on every shard's pool.

There is no route for ``WorkflowReplayer.replay_with_reset``: it replays a history against the
workflow code of whoever calls it (the build a release gate is about to deploy), which is not
the code a web replica runs, and a replay runs workflow code, which an API process does not.
Fetch the history here (or ``GET /workflows/{id}/history?payload_policy=full``) and replay it
where the new code is; ``POST /workflows/{id}/reset`` with ``dry_run`` checks the reset point
on the server.
"""

from __future__ import annotations

from typing import Any

from harvest.client.export_batch import MAX_LIMIT, STATE_GROUPS, assemble, shard_batch
from harvest.core.errors import DatabaseUnavailable
from harvest.db.steps import arun_steps
from harvest.shard.fanout import UNAVAILABLE
from harvest.web.routes import ROWS, Call, Endpoint, Param, shape


async def export_history_batch(call: Call, args: dict[str, Any], _: Any) -> Any:
    """The batch document; ``status`` partial (200) when a shard could not be read, 503 when none
    could."""
    full = args["payload_policy"] == "full"
    steps = (args["workflow_name"], args["state_group"], args["updated_after"], args["limit"], full)
    fan = await call.each_shard(lambda sql: arun_steps(shard_batch(*steps), sql))
    if fan.status == UNAVAILABLE:
        shards = ", ".join(str(s) for s in fan.unavailable_shards)
        raise DatabaseUnavailable(
            f"no shard could be read (shard(s) {shards} unreachable); retry when one is up"
        )
    return assemble(fan.results, fan.unavailable_shards, fan.status, args["payload_policy"], args["limit"])


ENDPOINTS = [
    Endpoint(
        "GET",
        "/history/export-batch",
        "read",
        export_history_batch,
        "A bounded batch of recent histories over every shard, for a release gate's replay "
        "(as harvest history export-batch).",
        (
            Param("workflow_name", description="Only runs of this workflow."),
            Param("state_group", "enum", default="terminal", choices=tuple(sorted(STATE_GROUPS))),
            Param(
                "updated_after",
                "datetime",
                description="Only runs that ended (or, running, started) after this instant (RFC 3339).",
            ),
            Param("limit", "integer", default=100, minimum=1, maximum=MAX_LIMIT),
            Param("payload_policy", "enum", default="redacted", choices=("redacted", "full")),
        ),
        responses={200: "The batch (status complete or partial)", 503: "No shard could be read"},
        tag="workflows",
        shape=shape(
            schema={"type": "string"},
            version={"type": "integer"},
            status={"type": "string", "enum": ["complete", "partial"]},
            payload_policy={"type": "string"},
            exports=ROWS,
            failures=ROWS,
            shard_coverage={"type": "object"},
        ),
    ),
]
