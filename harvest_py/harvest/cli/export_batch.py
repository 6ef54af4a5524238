"""`harvest history export-batch`: a bounded batch of histories for a release gate's replay
(docs/payloads.md "Exports", the spec's "Exporting a history fixture").

One JSON document ``{schema, version, status, exports, failures, shard_coverage}``: ``exports``
holds one ``harvest history export`` document per run (with its ``shard_id``); ``failures`` the
runs that matched but could not be exported; ``status`` is ``complete``, or ``partial`` /
``unavailable`` when a shard could not be read (``shard_coverage`` names which). A batch that is
not complete exits 1 after writing the file: treat it as a blocked release gate.
"""

from __future__ import annotations

import json
import sys
from datetime import datetime
from typing import Any

import click

from harvest.cli.http import http_session
from harvest.cli.output import database_url_option, json_default, output_file, selected
from harvest.cli.shards import each_shard
from harvest.client.export_batch import (
    MAX_LIMIT,
    STATE_GROUPS,
    assemble,
    newest,
    shard_candidates,
    shard_exports,
)
from harvest.db.steps import run_steps
from harvest.shard.fanout import COMPLETE, status_of


@click.command("export-batch")
@click.option("--workflow-name", default=None, help="Only runs of this workflow.")
@click.option("--state-group", type=click.Choice(sorted(STATE_GROUPS)), default="terminal", show_default=True)
@click.option(
    "--updated-after",
    type=click.DateTime(["%Y-%m-%dT%H:%M:%SZ", "%Y-%m-%dT%H:%M:%S%z", "%Y-%m-%d"]),
    default=None,
    help="Only runs that ended (or, still running, started) after this instant (UTC unless given).",
)
@click.option("--limit", type=click.IntRange(1, MAX_LIMIT), default=100, show_default=True)
@click.option(
    "--payload-policy", type=click.Choice(["redacted", "full"]), default="redacted", show_default=True
)
@click.option(
    "--output-file", "--file", "path", default="-", show_default=True, help="Write here (- for stdout)."
)
@database_url_option
def export_batch(
    workflow_name: str | None,
    state_group: str,
    updated_after: datetime | None,
    limit: int,
    payload_policy: str,
    path: str,
    database_url: str | None,
) -> None:
    """Export a bounded batch of recent histories (every shard) for replay in CI.

    Exit 0 when every shard was read; 1 (the file still written) when the batch is partial."""
    from datetime import UTC

    if updated_after is not None and updated_after.tzinfo is None:
        updated_after = updated_after.replace(tzinfo=UTC)
    settings = selected(database_url)
    if settings is not None:  # over the management API: the same document, built by the route
        params = {
            "workflow_name": workflow_name,
            "state_group": state_group,
            "updated_after": updated_after,
            "limit": limit,
            "payload_policy": payload_policy,
        }
        with http_session(settings) as http:
            _, batch = http.request("GET", "/history/export-batch", params=params)
        status, unavailable = batch["status"], list(batch["shard_coverage"].get("unavailable") or [])
    else:
        # The newest `limit` runs over every shard first, then each shard exports its own of them.
        full = payload_policy == "full"
        picks = each_shard(
            database_url,
            lambda api: run_steps(shard_candidates(workflow_name, state_group, updated_after, limit), api),
            none_is_error=False,
        )
        chosen = newest(picks.results, limit)
        exported: dict[int, Any] = {}
        unavailable = list(picks.unavailable_shards)
        if chosen:
            exports = each_shard(
                database_url, lambda api: run_steps(shard_exports(chosen, full), api), none_is_error=False
            )
            exported, unavailable = exports.results, sorted({*unavailable, *exports.unavailable_shards})
        read = set(picks.results) - set(unavailable)
        status = status_of(len(read), len(unavailable))
        batch = assemble(chosen, exported, read, unavailable, status, payload_policy)
    text = json.dumps(batch, default=json_default, indent=2) + "\n"
    with output_file(path, private=payload_policy == "full") as out:
        out.write(text)
    if path != "-":
        click.echo(f"wrote {path}: {len(batch['exports'])} export(s), status {status}", err=True)
    if status != COMPLETE:
        click.echo(
            f"warning: shard(s) {', '.join(map(str, unavailable))} could not be read: the "
            "batch is partial (a blocked release gate until they are exported or waived)",
            err=True,
        )
        sys.exit(1)
