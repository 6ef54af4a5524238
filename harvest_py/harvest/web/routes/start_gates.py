"""Held-back starts: the starts a throttle, a debounce or a batch holds back, listed over every
shard, discarded by id on its shard or by filter on every shard (functions/flow_throttle.sql;
docs/http-api.md, "Held-back starts"; `harvest start-gate` over HTTP). An id is unique on its
shard only: ``shard_id`` names it, the default shard without it, as `start-gate discard
--shard-id` does. The discards need the admin scope (harvest_admin in the database: they lose
for good what the starters sent, as a dead letter's discard)."""

from __future__ import annotations

from typing import Any

from harvest.core.ids import MAX_SHARD, ROW_ID_MAX
from harvest.shard.fanout import MAX_PAGE, AsyncShardReads
from harvest.web.routes import (
    BOOLEAN,
    DATETIME,
    FANOUT,
    ROWS,
    STRING,
    Call,
    Endpoint,
    Param,
    body,
    invalid,
    merged,
    shape,
)

LIST_LIMIT = 100
KINDS = ("throttle", "debounce", "batch")
# The fields of a discard by filter that select (a kind alone would select every held-back start).
SELECTING = ("workflow_name", "gate_key", "created_after", "created_before")

ID = Param("pending_start_id", "integer", required=True, minimum=1, maximum=ROW_ID_MAX, where="path")
SHARD = Param(
    "shard_id",
    "integer",
    minimum=0,
    maximum=MAX_SHARD,
    description="The start's shard (GET /start-gates/pending names it); none: the default shard.",
)
NON_EMPTY = {"type": "string", "minLength": 1}


async def list_pending_starts(call: Call, args: dict[str, Any], _: Any) -> Any:
    """Every readable shard's held-back starts merged oldest first, each row with its shard_id,
    paged by ``cursor`` (harvest.shard.fanout.list_pending_starts, as GET /dead-letters)."""
    only = args["shard_id"]
    reads = call.reads()
    if only is not None:
        if not call.sharded:  # (one database: it must be that shard)
            await call.on_shard(only, lambda sql: sql.get_shard_id())
        else:
            if only not in reads.apis:
                raise invalid("shard_id", f"{only} is not a shard of this deployment")
            reads = AsyncShardReads({only: reads.apis[only]}, timeout=reads.timeout)
    limit = args["limit"] if args["limit"] is not None else LIST_LIMIT
    found = await reads.list_pending_starts(
        args["workflow_name"], args["kind"], limit, args["cursor"], shard_id=only
    )
    return merged(call, found, "pending_starts")


async def discard_pending_start(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    shard, start_id = args["shard_id"], args["pending_start_id"]
    operator = data.get("operator_id") or call.operator_id
    done = await call.on_shard(
        shard, lambda sql: sql.discard_pending_start(start_id, operator, data.get("reason"))
    )
    return {**done, "shard_id": shard if shard is not None else call.default_shard()}


async def discard_pending_starts(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    """A discard by filter on every shard (each one call, audited there), as `start-gate
    discard-many`: each shard's answer by shard number, their sums, and the shards not done."""
    if all(data.get(k) is None for k in SELECTING):
        raise invalid(
            "workflow_name",
            "a discard by filter needs one of workflow_name, gate_key, created_after, created_before "
            "(a kind alone would select every held-back start)",
        )
    dry_run = bool(data.get("dry_run"))
    operator = data.get("operator_id") or call.operator_id
    limit = data.get("limit") or 100

    def on(sql: Any) -> Any:
        return sql.discard_pending_starts(
            data.get("workflow_name"),
            data.get("gate_key"),
            data.get("kind"),
            data.get("created_after"),
            data.get("created_before"),
            limit,
            dry_run,
            operator,
            data.get("reason"),
        )

    done = await call.each_shard_write(on, "no held-back start was discarded")
    sums = {k: sum(int(r.get(k) or 0) for r in done.results.values()) for k in SUMMED}
    return {
        "dry_run": dry_run,
        **sums,
        "shards": {str(s): r for s, r in sorted(done.results.items())},
        **done.outcome(),
        "sharded": call.sharded,
    }


SUMMED = ("matched", "discarded", "skipped", "payloads_erased")

ENDPOINTS = [
    Endpoint(
        "GET",
        "/start-gates/pending",
        "read",
        list_pending_starts,
        "The starts a throttle, debounce or batch holds back, over every shard, oldest first (each row "
        "with its shard_id, the id a discard takes and its input's size: input_bytes inline, offloaded_bytes "
        "referenced): a page of at most limit, the rest by next_cursor. No input is answered.",
        (
            Param("workflow_name", empty_is_absent=False),
            Param("kind", "enum", choices=KINDS),
            Param("shard_id", "integer", minimum=0, maximum=MAX_SHARD, description="Only this shard's."),
            Param(
                "limit",
                "integer",
                minimum=1,
                maximum=MAX_PAGE,
                description=f"Rows at most (default {LIST_LIMIT}).",
            ),
            Param("cursor", description="next_cursor of the previous page, with the same filters."),
        ),
        tag="start-gates",
        shape=shape(pending_starts=ROWS, next_cursor={"type": ["string", "null"]}, **FANOUT),
    ),
    Endpoint(
        "POST",
        "/start-gates/pending/discard",
        "admin",
        discard_pending_starts,
        "Discard the held-back starts a filter selects on every shard, oldest first, at most limit a "
        "shard (audited; dry_run counts and writes nothing; shard_errors names a shard not done).",
        body=body(
            {
                "workflow_name": NON_EMPTY,
                "gate_key": STRING,
                "kind": {"type": "string", "enum": list(KINDS)},
                "created_after": DATETIME,
                "created_before": DATETIME,
                "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
                "dry_run": BOOLEAN,
                "operator_id": STRING,
                "reason": STRING,
            }
        ),
        tag="start-gates",
    ),
    Endpoint(
        "POST",
        "/start-gates/pending/{pending_start_id}/discard",
        "admin",
        discard_pending_start,
        "Discard one held-back start by its id on its shard, with the offloaded input it owns "
        "(audited); 404 when released or discarded already.",
        (ID, SHARD),
        body({"operator_id": STRING, "reason": STRING}),
        tag="start-gates",
    ),
]
