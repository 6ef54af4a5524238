"""Dead letters: list, get, count, replay and discard one, replay and discard by filter with a
dry run (functions/dead_letters.sql; docs/http-api.md, "Dead letters"). A dead letter's id is
unique on its shard only: ``shard_id`` names the shard; without it, a sharded server searches
every shard and acts only when exactly one holds the id, naming it (``shard_id`` in the answer)."""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from harvest.core.codecs import refs_in
from harvest.core.errors import DatabaseUnavailable
from harvest.core.ids import MAX_SHARD, ROW_ID_MAX
from harvest.web.routes import (
    BOOLEAN,
    DATETIME,
    FANOUT,
    ROWS,
    SHARD_ID,
    STRING,
    Call,
    Endpoint,
    Param,
    body,
    invalid,
    merged,
    shape,
)

ID = Param("dead_letter_id", "integer", required=True, minimum=1, maximum=ROW_ID_MAX, where="path")
SHARD = Param(
    "shard_id",
    "integer",
    minimum=0,
    maximum=MAX_SHARD,
    description="The dead letter's shard (none: the one shard that holds the id, searched).",
)


async def list_dead_letters(call: Call, args: dict[str, Any], _: Any) -> Any:
    found = await call.reads().list_dead_letters(
        args["limit"], args["activity_name"], args["workflow_name"], args["cursor"], args["before_id"]
    )
    out = merged(call, found, "dead_letters")
    out["dead_letters"] = await _resolved_rows(call, out["dead_letters"])
    return out


async def _resolved_rows(call: Call, rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The page's rows with their offloaded payloads read back, each on its own shard: one read
    per shard whose rows hold a reference (none for the others), the shards read at once. A
    shard that answered the page and cannot be reached now keeps its rows as read (a reference
    shows what it is), not the whole page refused."""
    by_shard: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        if refs_in(row):
            by_shard.setdefault(int(row["shard_id"]), []).append(i)

    async def resolve(shard: int, at: list[int]) -> None:
        with contextlib.suppress(DatabaseUnavailable):
            found = await call.on_shard(
                shard if call.sharded else None,
                lambda sql: call.principal.resolved(sql, [rows[i] for i in at]),
            )
            for i, row in zip(at, found, strict=True):
                rows[i] = row

    await asyncio.gather(*(resolve(shard, at) for shard, at in by_shard.items()))
    return rows


async def count_dead_letters(call: Call, args: dict[str, Any], _: Any) -> Any:
    return merged(call, await call.reads().count_dead_letters(args["group_by"]), "groups")


async def _home(call: Call, args: dict[str, Any]) -> int | None:
    """The shard of the dead letter the path names: ``shard_id`` when given; over shards with
    none, the one readable shard that holds the id (refused when several do, one cannot be
    searched, or none does: harvest.shard.fanout.dead_letter_home); one database: None."""
    named: int | None = args["shard_id"]
    if named is not None or not call.sharded:
        return named
    from harvest.shard.fanout import dead_letter_home, fan_out_async, holds_dead_letter

    found = await fan_out_async(
        call.providers(), holds_dead_letter(args["dead_letter_id"]), timeout=call.state.shard_timeout
    )
    return dead_letter_home(args["dead_letter_id"], found)


async def get_dead_letter(call: Call, args: dict[str, Any], _: Any) -> Any:
    shard = await _home(call, args)

    async def read(sql: Any) -> Any:  # (its offloaded input or details read back on its shard)
        return await call.principal.resolved(sql, await sql.get_dead_letter(args["dead_letter_id"]))

    row = await call.on_shard(shard, read)
    return {**row, "shard_id": shard if shard is not None else call.default_shard()}


def _acted_on(shard: int | None) -> dict[str, Any]:
    """The shard an action by id was made on, when the deployment has shards or one was named."""
    return {} if shard is None else {"shard_id": shard}


async def replay_dead_letter(call: Call, args: dict[str, Any], _: Any) -> Any:
    shard = await _home(call, args)
    task_id = await call.on_shard(shard, lambda sql: sql.replay_dead_letter(args["dead_letter_id"]))
    return {"dead_letter_id": args["dead_letter_id"], **_acted_on(shard), "task_id": task_id}


async def discard_dead_letter(call: Call, args: dict[str, Any], _: Any) -> Any:
    shard = await _home(call, args)
    await call.on_shard(shard, lambda sql: sql.discard_dead_letter(args["dead_letter_id"]))
    return {"dead_letter_id": args["dead_letter_id"], **_acted_on(shard), "discarded": True}


def _bulk(action: str) -> Any:
    async def handler(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
        filters = {
            k: data.get(k) for k in ("activity_name", "workflow_name", "failed_after", "failed_before")
        }
        if not any(v is not None for v in filters.values()):
            raise invalid(
                "activity_name",
                "a bulk action needs one of activity_name, workflow_name, failed_after, failed_before",
            )
        limit = data.get("limit") or 100
        dry_run = bool(data.get("dry_run"))
        operator = data.get("operator_id") or call.operator_id
        return await call.on_shard(
            data.get("shard_id"),
            lambda sql: sql.bulk_dead_letters(
                action, **filters, limit=limit, dry_run=dry_run, operator=operator
            ),
        )

    handler.__name__ = f"{action}_dead_letters"
    return handler


BULK = body(
    {
        "activity_name": STRING,
        "workflow_name": STRING,
        "failed_after": DATETIME,
        "failed_before": DATETIME,
        "limit": {"type": "integer", "minimum": 1, "maximum": 1000},
        "dry_run": BOOLEAN,
        "operator_id": STRING,
        "shard_id": SHARD_ID,
    }
)

ENDPOINTS = [
    Endpoint(
        "GET",
        "/dead-letters",
        "read",
        list_dead_letters,
        "Dead letters over every shard, newest failure first (payloads as stored, offloaded ones "
        "resolved on each row's shard).",
        (
            Param("limit", "integer", default=100, minimum=1, maximum=1000),
            Param("activity_name"),
            Param("workflow_name"),
            Param("cursor", description="next_cursor of the previous page."),
            Param("before_id", "integer", minimum=1, maximum=ROW_ID_MAX, description="One shard: after it."),
        ),
        tag="dead-letters",
        shape=shape(dead_letters=ROWS, next_cursor={"type": ["string", "null"]}, **FANOUT),
    ),
    Endpoint(
        "GET",
        "/dead-letters/aggregate",
        "read",
        count_dead_letters,
        "Dead letters counted per activity, workflow and error type, over every shard.",
        (Param("group_by", "enum", default="all", choices=("all", "activity", "workflow", "error_type")),),
        tag="dead-letters",
    ),
    Endpoint(
        "POST",
        "/dead-letters/replay",
        "operate",
        _bulk("replay"),
        "Replay every dead letter matching the filter (at most limit; dry_run writes nothing).",
        body=BULK,
        tag="dead-letters",
    ),
    Endpoint(
        "POST",
        "/dead-letters/discard",
        "admin",
        _bulk("discard"),
        "Discard every dead letter matching the filter (at most limit; dry_run writes nothing).",
        body=BULK,
        tag="dead-letters",
    ),
    Endpoint(
        "GET",
        "/dead-letters/{dead_letter_id}",
        "read",
        get_dead_letter,
        "One dead letter (payloads as stored, offloaded ones resolved).",
        (ID, SHARD),
        tag="dead-letters",
    ),
    Endpoint(
        "POST",
        "/dead-letters/{dead_letter_id}/replay",
        "operate",
        replay_dead_letter,
        "Re-enqueue one dead letter with a fresh attempt budget.",
        (ID, SHARD),
        tag="dead-letters",
    ),
    Endpoint(
        "POST",
        "/dead-letters/{dead_letter_id}/discard",
        "admin",
        discard_dead_letter,
        "Discard one dead letter: its workflow receives the activity's failure.",
        (ID, SHARD),
        tag="dead-letters",
    ),
]
