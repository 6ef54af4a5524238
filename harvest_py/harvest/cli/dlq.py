"""`harvest dlq`: inspect, replay and discard dead letters (functions/dead_letters.sql)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click
from click.decorators import FC

from harvest.cli.output import (
    ISO_TIME,
    PAGE,
    ROW_ID,
    SHARD_NUMBER,
    database_url_option,
    emit,
    hidden_alias,
    mapping,
    operator_id_option,
    output_option,
    progress,
    table,
)
from harvest.cli.payloads import Reveal, app_option
from harvest.cli.shards import dead_letter_api, emit_merged, read_shards, shard_api, with_page_footer
from harvest.core.errors import InvalidArgument, failure_line, stored_traceback


@click.group()
def dlq() -> None:
    """Dead letters: activity invocations that exhausted their retries."""


@dlq.command("list")
@click.option("--activity-name", default=None)
@click.option("--workflow-name", default=None)
@click.option("--limit", default=100, show_default=True, type=PAGE, help="At most this many (max 1000).")
@click.option("--before-id", default=None, type=ROW_ID, help="Page on one shard: after this one.")
@click.option("--cursor", default=None, help="next_cursor from the previous page (every shard).")
@app_option
@database_url_option
@output_option
def list_(
    activity_name: str | None,
    workflow_name: str | None,
    limit: int,
    before_id: int | None,
    cursor: str | None,
    app_target: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """List dead letters over every shard, newest failure first (a failure's details decoded
    with --app's codecs)."""
    reveal = Reveal(app_target)

    def read(reads: Any) -> Any:
        merged = reads.list_dead_letters(limit, activity_name, workflow_name, cursor, before_id)
        # An encoded payload shows what it is, or decoded by --app on its shard (docs/payloads.md).
        merged.value = reveal.shown_rows(reads.apis, merged.value)
        return merged

    merged = read_shards(database_url, read)
    for row in merged.value:
        row["error"] = failure_line(row["failure"])

    def render(rows: list[dict[str, Any]]) -> str:
        text = table(
            rows,
            [
                "shard_id",
                "id",
                "activity_name",
                "workflow_name",
                "execution_id",
                "attempts",
                "failed_at",
                "error",
            ],
        )
        return with_page_footer(text, rows, "dead letter(s)", merged)

    emit_merged(merged, "dead_letters", output, render)


def shard_id_option(f: FC) -> FC:
    return click.option(
        "--shard-id",
        type=SHARD_NUMBER,
        default=None,
        help="The shard the dead letter is on (dlq list shows it). A dead letter's id is unique on "
        "its shard only: without it, every shard is searched and the one holding the id is used "
        "(refused when several do, or one cannot be searched).",
    )(f)


@dlq.command("get")
@click.argument("dead_letter_id", type=ROW_ID)
@shard_id_option
@app_option
@database_url_option
@output_option
def get(
    dead_letter_id: int, shard_id: int | None, app_target: str | None, database_url: str | None, output: str
) -> None:
    """Show one dead letter with its failure (its payloads decoded with --app's codecs)."""
    reveal = Reveal(app_target)
    with dead_letter_api(database_url, shard_id, dead_letter_id, read_only=True) as (sql, _):
        # An encoded payload shows what it is, or decoded by --app (docs/payloads.md).
        row = reveal.shown(sql, sql.get_dead_letter(dead_letter_id))
    emit(row, output, _dead_letter_text)


def _dead_letter_text(row: dict[str, Any]) -> str:
    """A dead letter's fields, its failure's traceback (when it records one, decoded) apart,
    after them, as Python prints one."""
    failure = row.get("failure")
    stack = stored_traceback(failure)
    if stack is None or not isinstance(failure, dict) or "traceback" not in failure:
        return mapping(row) + (f"\ntraceback:\n{stack}" if stack else "")
    shown = {**row, "failure": {k: v for k, v in failure.items() if k != "traceback"}}
    return f"{mapping(shown)}\ntraceback:\n{stack}"


@dlq.command("count")
@click.option(
    "--by",
    "group_by",
    type=click.Choice(["all", "activity", "workflow", "error_type"]),
    default="all",
    show_default=True,
)
@database_url_option
@output_option
def count(group_by: str, database_url: str | None, output: str) -> None:
    """Count dead letters by activity, workflow and error type, over every shard."""
    merged = read_shards(database_url, lambda reads: reads.count_dead_letters(group_by))
    emit_merged(
        merged,
        "groups",
        output,
        lambda d: table(
            d,
            [
                "activity_name",
                "workflow_name",
                "error_type",
                "dead_letters",
                "first_failed_at",
                "last_failed_at",
            ],
            ["activity", "workflow", "error_type", "count", "first_failed", "last_failed"],
        ),
    )


hidden_alias(dlq, count, "aggregate")  # the old name (CONTRIBUTING.md "Names")


@dlq.command("replay")
@click.argument("dead_letter_id", type=ROW_ID)
@shard_id_option
@database_url_option
@output_option
def replay(dead_letter_id: int, shard_id: int | None, database_url: str | None, output: str) -> None:
    """Re-enqueue one dead letter with a fresh attempt budget."""
    with dead_letter_api(database_url, shard_id, dead_letter_id, read_only=False) as (sql, shard):
        task_id = sql.replay_dead_letter(dead_letter_id)
        shard = _answered(sql, shard)
    emit(
        {"dead_letter_id": dead_letter_id, **_on(shard), "task_id": task_id},
        output,
        lambda d: f"replayed dead letter {dead_letter_id}{_on_text(shard)} as task {task_id}",
    )


@dlq.command("discard")
@click.argument("dead_letter_id", type=ROW_ID)
@shard_id_option
@database_url_option
@output_option
def discard(dead_letter_id: int, shard_id: int | None, database_url: str | None, output: str) -> None:
    """Discard one dead letter: its workflow receives the activity's failure."""
    with dead_letter_api(database_url, shard_id, dead_letter_id, read_only=False) as (sql, shard):
        sql.discard_dead_letter(dead_letter_id)
        shard = _answered(sql, shard)
    emit(
        {"dead_letter_id": dead_letter_id, **_on(shard), "discarded": True},
        output,
        lambda d: f"discarded dead letter {dead_letter_id}{_on_text(shard)}",
    )


def _answered(api: Any, shard: int | None) -> int | None:
    """The shard a dead letter was acted on: the one named or found here, else the one a
    sharded server says it found (None: one database)."""
    return shard if shard is not None else getattr(api, "answered_shard", None)


def _on(shard: int | None) -> dict[str, int]:
    return {} if shard is None else {"shard_id": shard}


def _on_text(shard: int | None) -> str:
    return "" if shard is None else f" on shard {shard}"


def _bulk_options(f: FC) -> FC:
    for option in reversed(
        [
            click.option("--activity-name", default=None),
            click.option("--workflow-name", default=None),
            click.option("--failed-after", default=None, type=ISO_TIME),
            click.option("--failed-before", default=None, type=ISO_TIME),
            click.option(
                "--limit", default=100, show_default=True, type=PAGE, help="Rows per call (max 1000)."
            ),
            click.option("--dry-run", is_flag=True, help="Write nothing: show what would be acted on."),
            operator_id_option,
            click.option(
                "--batch",
                default=50,
                show_default=True,
                type=click.IntRange(1, 1000),
                help="Rows per transaction (progress is shown per batch).",
            ),
            click.option(
                "--shard-id",
                type=SHARD_NUMBER,
                default=None,
                help="The shard to act on (default: the default shard); a bulk action reads one shard.",
            ),
            database_url_option,
            output_option,
        ]
    ):
        f = option(f)
    return f


def _bulk(
    action: str,
    activity_name: str | None,
    workflow_name: str | None,
    failed_after: datetime | None,
    failed_before: datetime | None,
    limit: int,
    dry_run: bool,
    operator: str | None,
    batch: int,
    shard_id: int | None,
    database_url: str | None,
    output: str,
) -> None:
    if not (activity_name or workflow_name or failed_after or failed_before):
        raise InvalidArgument(
            "a bulk action needs at least one of --activity-name, --workflow-name, "
            "--failed-after, --failed-before"
        )
    if limit < 1 or limit > 1000:
        raise InvalidArgument(f"--limit {limit} is out of range 1..1000")
    filters = {
        "activity_name": activity_name,
        "workflow_name": workflow_name,
        "failed_after": failed_after,
        "failed_before": failed_before,
    }
    with shard_api(database_url, shard_id, read_only=dry_run) as sql:
        preview = sql.bulk_dead_letters(action, **filters, limit=limit, dry_run=True)
        if dry_run:
            result = preview
        else:
            # Work through the limit in small transactions, so the bar moves and a
            # failure mid-way keeps what was done. Rows are taken oldest first.
            total = min(limit, preview["matched"])
            result = {
                "dry_run": False,
                "matched": preview["matched"],
                "acted_on": 0,
                "ids": [],
                "failures": [],
            }
            done = 0
            skip: set[int] = set()
            with progress(total, f"{action} dead letters", enabled=output != "json") as bar:
                while done < total:
                    step = sql.bulk_dead_letters(
                        action,
                        **filters,
                        limit=min(batch, total - done) + len(skip),
                        dry_run=False,
                        operator=operator,
                    )
                    fresh = [f for f in step["failures"] if f["id"] not in skip]
                    result["acted_on"] += step["acted_on"]
                    result["ids"] += step["ids"]
                    result["failures"] += fresh
                    skip.update(f["id"] for f in fresh)
                    moved = step["acted_on"] + len(fresh)
                    bar.update(moved)
                    done += moved
                    if moved == 0:
                        break
    if dry_run:

        def render(d: dict[str, Any]) -> str:
            return (
                f"dry run: {d['matched']} matched, {len(d['ids'])} would be {action}ed"
                + (
                    f" (ids {', '.join(map(str, d['ids'][:20]))}{' …' if len(d['ids']) > 20 else ''})"
                    if d["ids"]
                    else ""
                )
                + "".join(f"\n  would fail: {f['id']}: {f['error']}" for f in d["failures"])
            )
    else:

        def render(d: dict[str, Any]) -> str:
            return (
                f"{d['matched']} matched, {d['acted_on']} {action}ed, {len(d['failures'])} failed"
                + "".join(f"\n  failed: {f['id']}: {f['error']}" for f in d["failures"])
                + (
                    "\nmore remain: run again until matched is 0"
                    if d["matched"] > d["acted_on"] + len(d["failures"])
                    else ""
                )
            )

    emit(result, output, render)


@dlq.command("bulk-replay")
@_bulk_options
def bulk_replay(**options: Any) -> None:
    """Replay every dead letter matching the filter (at most --limit per call)."""
    _bulk("replay", **options)


@dlq.command("bulk-discard")
@_bulk_options
def bulk_discard(**options: Any) -> None:
    """Discard every dead letter matching the filter (at most --limit per call)."""
    _bulk("discard", **options)
