"""`harvest shard owner-mode status|on|off`: owner mode (functions/owners.sql; docs/sharding.md,
"Owner mode") on every configured shard, or on one with ``--shard-id``; with no ``[shards]``,
on the one database.

``on``/``off`` make one audited ``set_owner_mode`` call per shard (admin only; a reader's role
is PermissionDenied and its exit code). A shard that cannot be reached is named on stderr and
the command exits 1: the others are switched, so run it again when the shard is up.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import click

from harvest.cli.output import (
    SHARD_NUMBER,
    database_url_option,
    emit,
    operator_id_option,
    output_option,
    table,
)
from harvest.cli.shards import each_shard, fail_if_unreached, shard_api
from harvest.core.errors import InvalidArgument

COLUMNS = ["shard_id", "enabled", "lease_secs", "owned", "partitions", "by_worker", "updated_at"]
shard_id_option = click.option(
    "--shard-id",
    type=SHARD_NUMBER,
    default=None,
    help="Only this shard (default: every configured shard; with no [shards], the one database).",
)


def _by_worker(api: Any) -> dict[str, int]:
    live = Counter(r["worker_id"] for r in api.list_partition_owners() if r["live"])
    return dict(sorted(live.items()))


def _status(api: Any) -> dict[str, Any]:
    return {**api.get_owner_mode(), "by_worker": _by_worker(api)}


def _on_shards(
    database_url: str | None, shard_id: int | None, call: Any, *, read_only: bool
) -> tuple[list[dict[str, Any]], list[int]]:
    """``call(api)`` on shard ``shard_id`` or on every shard: the rows (each with its
    shard_id) and the shards that could not be reached."""
    if shard_id is not None:
        with shard_api(database_url, shard_id, read_only=read_only) as api:
            return [{"shard_id": shard_id, **call(api)}], []
    fan = each_shard(database_url, call, read_only=read_only, none_is_error=False)
    rows = [{"shard_id": s, **row} for s, row in fan.results.items()]
    return rows, fan.unavailable_shards


def _render(rows: list[dict[str, Any]]) -> str:
    shown = [
        {
            **r,
            "enabled": "on" if r["enabled"] else "off",
            "by_worker": ", ".join(f"{w}={n}" for w, n in r["by_worker"].items()) if "by_worker" in r else "",
        }
        for r in rows
    ]
    return table(shown, COLUMNS)


def _finish(rows: list[dict[str, Any]], unavailable: list[int], output: str, what: str) -> None:
    emit({"shards": rows, "unavailable_shards": unavailable}, output, lambda d: _render(d["shards"]))
    fail_if_unreached(unavailable, what)


@click.group("owner-mode")
def owner_mode() -> None:
    """Owner mode per shard: status, on, off (docs/sharding.md "Owner mode")."""


@owner_mode.command("status")
@shard_id_option
@database_url_option
@output_option
def status(shard_id: int | None, database_url: str | None, output: str) -> None:
    """Per shard: enabled, lease_secs, partitions owned (live leases) and by which worker.
    Exit 1 when a shard could not be read (named on stderr)."""
    rows, unavailable = _on_shards(database_url, shard_id, _status, read_only=True)
    _finish(rows, unavailable, output, "were not read")


def _switch(
    enabled: bool,
    lease_secs: float | None,
    shard_id: int | None,
    operator: str | None,
    database_url: str | None,
    output: str,
) -> None:
    if not operator:
        raise InvalidArgument("--operator-id is required: who turns owner mode on or off, for the audit log")
    rows, unavailable = _on_shards(
        database_url,
        shard_id,
        lambda api: {**api.set_owner_mode(enabled, lease_secs, operator), "by_worker": _by_worker(api)},
        read_only=False,
    )
    _finish(rows, unavailable, output, "were not switched")


@owner_mode.command("on")
@click.option(
    "--lease-secs",
    type=click.FloatRange(0.1, 3600),
    default=None,
    help="Owner lease in seconds (0.1..3600; default: keep the current one). "
    "Keep it at least three worker heartbeat intervals.",
)
@shard_id_option
@operator_id_option
@database_url_option
@output_option
def on(
    lease_secs: float | None,
    shard_id: int | None,
    operator: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Turn owner mode on (admin, one audited call per shard)."""
    _switch(True, lease_secs, shard_id, operator, database_url, output)


@owner_mode.command("off")
@shard_id_option
@operator_id_option
@database_url_option
@output_option
def off(shard_id: int | None, operator: str | None, database_url: str | None, output: str) -> None:
    """Turn owner mode off (admin, one audited call per shard): every owner row is freed."""
    _switch(False, None, shard_id, operator, database_url, output)
