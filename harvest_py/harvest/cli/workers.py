"""`harvest worker list|get|health|drain|drain-preview`: the worker fleet (functions/workers.sql).

`harvest worker module:app` (run a worker) stays what it was: the group below
treats a first argument that is not one of its subcommands as that target.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

import click

from harvest.cli.output import (
    ISO_TIME,
    database_url_option,
    emit,
    mapping,
    operator_id_option,
    output_option,
    sql_api,
    table,
)
from harvest.cli.shards import (
    InTurn,
    deployment_read,
    each_shard,
    emit_merged,
    fail_if_unreached,
    read_shards,
    report_shard_write,
)
from harvest.config import shards_configured
from harvest.core.errors import InvalidArgument, NotFound
from harvest.shard.fanout import WORKER_LIMIT, WORKER_LIMIT_MAX, FanOut, no_worker_anywhere

WORKER_COLUMNS = [
    "worker_id",
    "status",
    "health",
    "queues",
    "hostname",
    "pid",
    "last_heartbeat_at",
    "in_flight",
]
WORKER_FIELDS = [
    "worker_id",
    "status",
    "health",
    "queues",
    "hostname",
    "pid",
    "started_at",
    "last_heartbeat_at",
    "heartbeat_interval_secs",
    "drain_deadline",
    "claimed_task_ids",
    "metadata",
]
DRAIN_FIELDS = ["worker_id", "outcome", "status", "in_flight", "drain_deadline", "queues"]
PREVIEW_COLUMNS = ["worker_id", "status", "health", "queues", "in_flight", "outcome", "uncovered_queues"]


def _sharded() -> bool:
    from harvest.cli.output import cli_config

    return shards_configured(cli_config())


def _tag(fan: Any) -> list[dict[str, Any]]:
    return [{**row, "shard_id": s} for s, row in fan.results.items() if row is not None]


def _worker_or_none(api: Any, worker_id: str) -> dict[str, Any] | None:
    try:
        return cast("dict[str, Any]", api.get_worker(worker_id))
    except NotFound:
        return None


def get_worker_shards(worker_id: str, database_url: str | None, output: str) -> None:
    """`worker get`: one database's form, or on shards (SQL: [shards]; HTTP: a sharded server)
    the worker's row on every shard that has one (one per shard it polls), each with its
    shard_id."""
    sharded, fan = deployment_read(
        database_url, lambda api: _worker_or_none(api, worker_id), lambda api: api.get_worker(worker_id)
    )
    if not sharded:
        emit(fan.results[0], output, lambda d: mapping(d, WORKER_FIELDS))
        return
    rows = _tag(fan)
    if not rows:
        raise no_worker_anywhere(worker_id, fan.unavailable_shards)
    merged = fan.merged(rows)
    emit_merged(
        merged, "workers", output, lambda d: "\n\n".join(mapping(r, ["shard_id", *WORKER_FIELDS]) for r in d)
    )


def drain_worker_shards(fan: FanOut[Any], output: str) -> None:
    """`worker drain` on shards (SQL: [shards]; HTTP: a sharded server): the worker's row
    drained on every shard, each with its shard_id (each shard audits its own drain). A shard
    that could not be reached is named and the command exits 1."""
    rows = _tag(fan)
    merged = fan.merged(rows)

    def show() -> None:  # (a write: the shards not drained are named by report_shard_write)
        emit_merged(merged, "workers", output, lambda d: table(d, [*DRAIN_FIELDS, "shard_id"]), warn=False)

    report_shard_write(InTurn(fan.results, fan.unavailable_shards, fan.refused), show, "were not drained")
    if all(r["outcome"] == "not_found" for r in rows):
        raise SystemExit(1)


def list_workers(
    queue: str | None,
    status: str | None,
    health: str | None,
    database_url: str | None,
    output: str,
    shard_id: int | None = None,
    limit: int = WORKER_LIMIT,
) -> None:
    def read(reads: Any) -> Any:
        # Over HTTP (no apis: the shards are the server's) the route names a shard it lacks.
        if shard_id is not None and reads.apis and shard_id not in reads.apis:
            shards = ", ".join(str(s) for s in sorted(reads.apis))
            raise InvalidArgument(f"--shard-id {shard_id}: no such shard; the shards here are {shards}")
        return reads.list_workers(queue, status, health, shard_id, limit)

    merged = read_shards(database_url, read)

    def render(d: Any) -> str:
        total = merged.total if merged.total is not None else len(d)
        more = f" of {total} (--limit up to {WORKER_LIMIT_MAX})" if total > len(d) else ""
        return table(d, [*WORKER_COLUMNS, "shard_id"]) + f"\n{len(d)}{more} worker(s)"

    emit_merged(merged, "workers", output, render)


def register(group: click.Group) -> None:
    """Add the fleet subcommands to the `harvest worker` group."""

    @group.command("list")
    @click.option("--queue", default=None)
    @click.option("--status", default=None, help="active, draining or stopped.")
    @click.option("--health", default=None, help="healthy, stale or stopped.")
    @click.option(
        "--shard-id", default=None, type=int, help="Only workers on this shard (the shard they poll)."
    )
    @click.option(
        "--limit",
        type=click.IntRange(1, WORKER_LIMIT_MAX),
        default=WORKER_LIMIT,
        show_default=True,
        help="Workers at most (the first in the list's order; the total is said).",
    )
    @database_url_option
    @output_option
    def list_(
        queue: str | None,
        status: str | None,
        health: str | None,
        shard_id: int | None,
        limit: int,
        database_url: str | None,
        output: str,
    ) -> None:
        """List registered workers (stale first within each status): the first --limit, and how
        many matched."""
        list_workers(queue, status, health, database_url, output, shard_id, limit)

    @group.command("get")
    @click.argument("worker_id")
    @database_url_option
    @output_option
    def get(worker_id: str, database_url: str | None, output: str) -> None:
        """Show one worker, with the ids of the tasks it holds (with [shards]: its row on every
        shard it polls, each with shard_id)."""
        get_worker_shards(worker_id, database_url, output)

    @group.command("health")
    @database_url_option
    @output_option
    def health(database_url: str | None, output: str) -> None:
        """The fleet roll-up over every shard: healthy, stale, draining; workers per queue and per
        shard (not stopped), split by health."""
        merged = read_shards(database_url, lambda reads: reads.get_worker_health())

        def render(d: dict[str, Any]) -> str:
            text = mapping(d, ["healthy", "stale", "draining", "stopped", "total", "by_shard"])
            split = d.get("by_queue_health") or {}
            queues = [
                {"queue": q, "workers": n, **split.get(q, {})} for q, n in sorted(d["by_queue"].items())
            ]
            return text + (
                "\n\n" + table(queues, ["queue", "workers", "healthy", "draining", "stale"]) if queues else ""
            )

        emit_merged(merged, None, output, render)

    @group.command("drain")
    @click.argument("worker_id")
    @click.option(
        "--deadline",
        default=None,
        type=ISO_TIME,
        help="When the drain must be done: the worker then releases what is still in flight "
        "(ISO 8601; UTC unless it carries an offset).",
    )
    @operator_id_option
    @database_url_option
    @output_option
    def drain(
        worker_id: str, deadline: datetime | None, operator: str | None, database_url: str | None, output: str
    ) -> None:
        """Ask a worker to stop claiming, finish its in-flight work and stop (by --deadline, if given)."""
        if _sharded():
            drain = each_shard(
                database_url,
                lambda api: api.drain_worker(worker_id, deadline, operator),
                read_only=False,
                refusals_apart=True,
            )
            drain_worker_shards(drain, output)
            return
        with sql_api(database_url, read_only=False) as sql:
            data = sql.drain_worker(worker_id, deadline, operator)
        if not isinstance(data, dict):  # a sharded server's rows (cli.http.PerShard): as with [shards]
            fan = FanOut.of(data.results, data.unavailable)
            fan.refused = list(data.refused)
            drain_worker_shards(fan, output)
            return
        # Over HTTP, the shards the server could not reach: named and exit 1, as with [shards].
        unreached = data.pop("unavailable_shards", [])
        emit(data, output, lambda d: mapping(d, DRAIN_FIELDS))
        fail_if_unreached(unreached, "were not drained")
        if data["outcome"] == "not_found":
            raise SystemExit(1)

    @group.command("drain-preview")
    @click.option("--queue", default=None)
    @click.option("--worker-id", default=None)
    @database_url_option
    @output_option
    def drain_preview(
        queue: str | None, worker_id: str | None, database_url: str | None, output: str
    ) -> None:
        """Who a drain would affect, their in-flight work, and queues left uncovered, over every
        shard (each row with its shard_id). Writes nothing."""
        sharded, fan = deployment_read(database_url, lambda api: api.preview_drain(queue, worker_id))
        if not sharded:
            rows = fan.results[0]
            emit(rows, output, lambda d: table(d, PREVIEW_COLUMNS) + f"\n{len(d)} worker(s)")
            return
        rows = [{**r, "shard_id": s} for s, found in sorted(fan.results.items()) for r in found]
        emit_merged(
            fan.merged(rows),
            "workers",
            output,
            lambda d: table(d, [*PREVIEW_COLUMNS, "shard_id"]) + f"\n{len(d)} worker(s)",
        )


class WorkerGroup(click.Group):
    """`harvest worker SUBCOMMAND ...` for the fleet, else `harvest worker TARGET [options]` runs a worker."""

    def __init__(self, *args: Any, run_command: click.Command, **kwargs: Any):
        kwargs.setdefault("context_settings", {})
        kwargs["context_settings"].update(ignore_unknown_options=True, allow_extra_args=True)
        super().__init__(*args, **kwargs)
        self.run_command = run_command

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        if args and args[0] not in self.commands and args[0] not in ("--help", "-h"):
            # Everything belongs to the run command: keep the group from parsing its options.
            ctx.meta["harvest.worker.run_args"] = list(args)
            args = ["__run__"]
        return super().parse_args(ctx, args)

    def resolve_command(
        self, ctx: click.Context, args: list[str]
    ) -> tuple[str | None, click.Command | None, list[str]]:
        run_args = ctx.meta.get("harvest.worker.run_args")
        if run_args is not None:
            return "run", self.run_command, run_args
        return super().resolve_command(ctx, args)

    def format_usage(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        formatter.write_usage("harvest worker", "TARGET [OPTIONS] | COMMAND [ARGS]...")


def worker_group(run_command: click.Command) -> click.Group:
    group = WorkerGroup(
        "worker",
        run_command=run_command,
        help=(
            "Run a worker (`harvest worker module:app [OPTIONS]`, see `harvest worker run --help`), "
            "or inspect and drain the fleet."
        ),
    )
    group.add_command(run_command, "run")
    register(group)
    return group
