"""`harvest dag list|trigger|pause|unpause|runs|get|retry`: DAGs (functions/dags.sql, docs/dags.md).

On shards (SQL: a ``[shards]`` configuration; HTTP: a sharded server) each shard registers the
DAGs its workers poll and holds the runs triggered on it, and each command does the same over
either transport: ``list`` and ``runs`` read every shard, ``pause`` and ``unpause`` write every
shard that has the DAG, ``trigger`` starts a run on the default shard, ``get`` and ``retry``
go where the run lives (its execution id).
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from harvest.cli.output import (
    PAGE,
    SHARD_NUMBER,
    database_url_option,
    emit,
    execution_id_argument,
    mapping,
    operator_id_option,
    output_option,
    table,
)
from harvest.cli.shards import (
    InTurn,
    deployment_read,
    emit_merged,
    read_shards,
    report_shard_write,
    routed_call,
    routed_read,
    shard_api,
    with_page_footer,
)
from harvest.cli.workflow import read_json_option
from harvest.core.errors import NotFound
from harvest.shard.fanout import PARTIAL, no_dag_anywhere


@click.group()
def dag() -> None:
    """DAGs: list, trigger, pause, and their runs with each task's state."""


@dag.command("list")
@database_url_option
@output_option
def list_(database_url: str | None, output: str) -> None:
    """The DAGs the workers registered, with their pause and runs, over every shard (a DAG
    registered on two shards is a row for each, with that shard's pause)."""
    merged = read_shards(database_url, lambda reads: reads.list_dags())
    emit_merged(
        merged,
        "dags",
        output,
        lambda r: table(
            r,
            [
                "dag_name",
                "queue",
                "paused",
                "tasks",
                "running_runs",
                "max_active_runs",
                "last_run_at",
                "last_run_status",
                "schedule",
                "shard_id",
            ],
            [
                "dag",
                "queue",
                "paused",
                "tasks",
                "running",
                "max_active",
                "last_run_at",
                "last_status",
                "schedule",
                "shard_id",
            ],
        ),
    )


@dag.command("trigger")
@click.argument("name")
@click.option("--conf-json", default=None, help="The run's conf: any JSON value (default {}).")
@click.option("--conf-file", default=None, help="Read the conf JSON from a file (- for stdin).")
@click.option("--workflow-id", default=None, help="The run's workflow id (default: a new UUID).")
@click.option(
    "--shard-id",
    "shard",
    type=SHARD_NUMBER,
    default=None,
    help="On shards, the shard to start the run on (it must have the DAG; default: the default shard).",
)
@operator_id_option
@database_url_option
@output_option
def trigger(
    name: str,
    conf_json: str | None,
    conf_file: str | None,
    workflow_id: str | None,
    shard: int | None,
    operator: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Start a run of DAG NAME now (refused while it is paused or at its max_active_runs); on
    shards, on the default shard unless --shard-id names another."""
    conf = read_json_option(conf_json, conf_file, "conf")
    with shard_api(database_url, shard, read_only=False) as sql:
        row = sql.trigger_dag(name, conf, workflow_id, operator)
    emit(row, output, lambda r: mapping(r, ["execution_id", "workflow_id", "status", "started_fresh"]))


@dag.command("pause")
@click.argument("name")
@operator_id_option
@database_url_option
@output_option
def pause(name: str, operator: str | None, database_url: str | None, output: str) -> None:
    """Pause DAG NAME: triggers and retries are refused until it is unpaused. On shards, on
    every shard that has it; a shard that refused or could not be reached is named and the
    command exits non-zero (1 for one not reached), after what the others did."""
    _set_paused(name, True, operator, database_url, output)


@dag.command("unpause")
@click.argument("name")
@operator_id_option
@database_url_option
@output_option
def unpause(name: str, operator: str | None, database_url: str | None, output: str) -> None:
    """Unpause DAG NAME (on shards, on every shard that has it: as `dag pause`)."""
    _set_paused(name, False, operator, database_url, output)


def _set_paused(name: str, paused: bool, operator: str | None, database_url: str | None, output: str) -> None:
    """One database: its answer (its own errors). On shards, over SQL (each shard here) or HTTP
    (the server, the same rule): every shard that has the DAG; wherever it is registered,
    ``changed`` as from one database; a shard that refused or was not reached: each done
    shard's row, then those named as every write on every shard ends (report_shard_write)."""

    def flip(api: Any) -> Any:
        return api.pause_dag(name, operator) if paused else api.unpause_dag(name, operator)

    def flip_if_registered(api: Any) -> Any:
        try:
            return flip(api)
        except NotFound:
            return None  # not registered on this shard: nothing to do there, not a refusal

    _, fan = deployment_read(database_url, flip_if_registered, flip, read_only=False, refusals_apart=True)
    found = {s: changed for s, changed in fan.results.items() if changed is not None}
    if not found and not fan.refused:
        raise no_dag_anywhere(name, fan.unavailable_shards)
    if not fan.refused and not fan.unavailable_shards:
        emit(
            {"dag_name": name, "paused": paused, "changed": any(found.values())}, output, lambda d: mapping(d)
        )
        return
    rows = [{"shard_id": s, "changed": changed} for s, changed in sorted(found.items())]
    data = {
        "dag_name": name,
        "paused": paused,
        "changed": any(found.values()),
        "shards": rows,
        "status": PARTIAL,
        "unavailable_shards": fan.unavailable_shards,
    }

    def show() -> None:
        keys = ["dag_name", "paused", "changed", "status"]
        emit(data, output, lambda d: f"{mapping(d, keys)}\n{table(d['shards'], ['shard_id', 'changed'])}")

    done = InTurn(found, fan.unavailable_shards, fan.refused)
    report_shard_write(done, show, f"were not {'paused' if paused else 'unpaused'}")


def _counts(counts: dict[str, int] | None) -> str:
    return " ".join(f"{state}={n}" for state, n in sorted((counts or {}).items())) or "-"


@dag.command("runs")
@click.argument("name")
@click.option("--limit", default=50, show_default=True, type=PAGE)
@click.option("--cursor", default=None, help="next_cursor from the previous page (every shard).")
@database_url_option
@output_option
def runs(name: str, limit: int, cursor: str | None, database_url: str | None, output: str) -> None:
    """The runs of DAG NAME over every shard, newest first, with their tasks' states counted;
    page with --cursor."""
    merged = read_shards(database_url, lambda reads: reads.list_dag_runs(name, limit, None, cursor))
    emit_merged(
        merged,
        "runs",
        output,
        lambda r: with_page_footer(
            table(
                [{**x, "tasks": _counts(x["counts"])} for x in r],
                ["execution_id", "status", "created_at", "completed_at", "retry_of", "tasks", "shard_id"],
            ),
            r,
            "run(s)",
            merged,
        ),
    )


def _when(value: Any) -> Any:
    """A JSON timestamp as a datetime, so the table prints it to the second (secs has the rest)."""
    return datetime.fromisoformat(value) if isinstance(value, str) else value


def _run_text(run: dict[str, Any]) -> str:
    head = mapping(
        {
            **run,
            "tasks": _counts(run.get("counts")),
            "created_at": _when(run.get("created_at")),
            "completed_at": _when(run.get("completed_at")),
        },
        [
            "execution_id",
            "dag_name",
            "workflow_id",
            "status",
            "created_at",
            "completed_at",
            "retry_of",
            "conf",
            "tasks",
        ],
    )
    rows = [
        {
            **t,
            "scheduled_at": _when(t.get("scheduled_at")),
            "finished_at": _when(t.get("finished_at")),
            "error": (t.get("failure") or {}).get("error_type"),
            "reused": "yes" if t.get("reused_from") else None,
        }
        for t in run["tasks"]
    ]
    body = table(
        rows,
        [
            "task",
            "state",
            "attempts",
            "kind",
            "target",
            "trigger_rule",
            "scheduled_at",
            "finished_at",
            "duration_secs",
            "error",
            "reused",
        ],
        [
            "task",
            "state",
            "attempts",
            "kind",
            "runs",
            "rule",
            "scheduled_at",
            "finished_at",
            "secs",
            "error",
            "reused",
        ],
    )
    return f"{head}\n\n{body}"


@dag.command("get")
@click.argument("execution_id", callback=execution_id_argument)
@database_url_option
@output_option
def get(execution_id: str, database_url: str | None, output: str) -> None:
    """One DAG run: each task's state, attempts and timings (from the run's history), read where
    the run lives."""
    run = routed_read(
        database_url, execution_id, lambda sql, resident: resident(sql.get_dag_run(execution_id))
    )
    emit(run, output, _run_text)


@dag.command("retry")
@click.argument("execution_id", callback=execution_id_argument)
@operator_id_option
@database_url_option
@output_option
def retry(execution_id: str, operator: str | None, database_url: str | None, output: str) -> None:
    """Retry a failed DAG run from its failed tasks: a new run that keeps the successful
    tasks' results and runs the rest (where the failed run lives)."""
    row = routed_call(database_url, execution_id, lambda sql: sql.retry_dag_run(execution_id, operator))
    emit(row, output, lambda r: mapping(r, ["execution_id", "workflow_id", "status", "started_fresh"]))
