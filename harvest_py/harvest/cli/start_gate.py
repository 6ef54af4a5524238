"""`harvest start-gate list|discard|discard-many`: the starts a throttle, a debounce or a batch
holds back (functions/flow_throttle.sql; docs/flow-control.md, "Discarding a held-back start").

Each database (shard) has its own held-back starts, and an id is unique on its shard only: the
list names each row's shard, `discard` takes `--shard-id` on a sharded deployment (the default
shard without it), and `discard-many` asks every shard, one audited call each.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from harvest.cli.output import (
    ISO_TIME,
    PAGE,
    ROW_ID,
    SHARD_NUMBER,
    database_url_option,
    emit,
    mapping,
    non_empty_option,
    operator_id_option,
    output_option,
    table,
)
from harvest.cli.shards import (
    InTurn,
    each_shard,
    emit_merged,
    read_shards,
    report_shard_write,
    shard_api,
    with_page_footer,
)
from harvest.core.errors import InvalidArgument

LIST_COLUMNS = [
    "shard_id",
    "id",
    "kind",
    "workflow_name",
    "gate_key",
    "workflow_id",
    "starts",
    "created_at",
    "release_at",
    "attempts",
    "input_bytes",
    "offloaded_bytes",
    "last_error",
]
KINDS = ["throttle", "debounce", "batch"]  # what holds a start back (list_pending_starts' kind)
MANY_COLUMNS = ["shard_id", "matched", "discarded", "skipped", "payloads_erased", "ids"]


@click.group("start-gate")
def start_gate() -> None:
    """Starts held back by a throttle, debounce or batch: list them, discard them."""


@start_gate.command("list")
@click.option(
    "--workflow-name", default=None, callback=non_empty_option, help="Only this workflow's held-back starts."
)
@click.option(
    "--kind", type=click.Choice(KINDS), default=None, help="Only those this kind of gate holds back."
)
@click.option("--limit", default=100, show_default=True, type=PAGE, help="At most this many (max 1000).")
@click.option("--cursor", default=None, help="next_cursor from the previous page (every shard).")
@database_url_option
@output_option
def list_(
    workflow_name: str | None,
    kind: str | None,
    limit: int,
    cursor: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Held-back starts (a throttled start, a debounce's or a batch's gathered burst) over every
    shard, oldest first, with each one's input size; page with --cursor."""
    merged = read_shards(
        database_url, lambda reads: reads.list_pending_starts(workflow_name, kind, limit, cursor)
    )

    def render(rows: list[dict[str, Any]]) -> str:
        return with_page_footer(table(rows, LIST_COLUMNS), rows, "held-back start(s)", merged)

    emit_merged(merged, "pending_starts", output, render)


@start_gate.command("discard")
@click.argument("pending_start_id", type=ROW_ID)
@click.option(
    "--shard-id",
    type=SHARD_NUMBER,
    default=None,
    help="The shard the start waits on (start-gate list shows it); default: the default shard.",
)
@click.option("--reason", default=None, help="Why, for the audit log.")
@operator_id_option
@database_url_option
@output_option
def discard(
    pending_start_id: int,
    shard_id: int | None,
    reason: str | None,
    operator: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Discard one held-back start by its id, and the offloaded input it owns (admin; audited).
    Exit 1 when no start has the id: released already (its run is found by its workflow_id) or
    discarded."""
    with shard_api(database_url, shard_id, read_only=False) as api:
        done = api.discard_pending_start(pending_start_id, operator, reason)
    emit(done, output, mapping)


@start_gate.command("discard-many")
@click.option("--workflow-name", default=None, help="The workflow whose held-back starts to discard.")
@click.option("--gate-key", default=None, help="Only the starts of this gate key (list shows it).")
@click.option("--kind", type=click.Choice(KINDS), default=None)
@click.option("--created-after", type=ISO_TIME, default=None, help="Held back at or after (RFC 3339).")
@click.option("--created-before", type=ISO_TIME, default=None, help="Held back before (RFC 3339): their age.")
@click.option(
    "--limit",
    type=click.IntRange(1, 1000),
    default=100,
    show_default=True,
    help="At most this many a shard (oldest first); run again for the rest.",
)
@click.option("--dry-run", is_flag=True, help="Count what the filter selects; discard nothing.")
@click.option("--reason", default=None, help="Why, for the audit log.")
@operator_id_option
@database_url_option
@output_option
def discard_many(
    workflow_name: str | None,
    gate_key: str | None,
    kind: str | None,
    created_after: datetime | None,
    created_before: datetime | None,
    limit: int,
    dry_run: bool,
    reason: str | None,
    operator: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Discard the held-back starts a filter selects on every shard (admin; audited). One of
    --workflow-name, --gate-key, --created-after, --created-before is needed."""
    if workflow_name is None and gate_key is None and created_after is None and created_before is None:
        # (refused here, so the same line over SQL and over HTTP, nothing asked of any shard)
        raise InvalidArgument(
            "a discard of held-back starts needs a filter: give one of --workflow-name, --gate-key, "
            "--created-after, --created-before (nothing, or a --kind alone, would select every one)"
        )

    def call(api: Any) -> Any:
        return api.discard_pending_starts(
            workflow_name, gate_key, kind, created_after, created_before, limit, dry_run, operator, reason
        )

    fan = each_shard(database_url, call, read_only=dry_run, none_is_error=False, refusals_apart=True)
    rows = [{"shard_id": s, **row} for s, row in sorted(fan.results.items())]

    def emit_rows() -> None:
        if len(rows) == 1 and not fan.unavailable_shards and not fan.refused:
            emit(rows[0], output, mapping)  # (one database: its answer)
            return
        emit(
            {"shards": rows, "status": fan.status, "unavailable_shards": fan.unavailable_shards},
            output,
            lambda d: table(d["shards"], MANY_COLUMNS),
        )

    report_shard_write(
        InTurn(fan.results, fan.unavailable_shards, fan.refused),
        emit_rows,
        "were not reached (run it again when they are up)",
    )
