"""`harvest search-attr index|unindex|indexes`: the schema owner's indexes on search attributes
for range tests (harvest/db/search_indexes.py; docs/operations.md, "Indexing a search attribute
for range tests"), on the one database or on every shard of ``[shards]``, one at a time.

They connect as `harvest migrate run` does (HARVEST_DATABASE_URL or --database-url; with
``[shards]``, each shard's URL, to its session URL when one is declared), and need that login
to be the owner: another is refused in one line naming the role needed (on each shard where it is
not, the other shards going on as after any other failure). Over SQL only: no HTTP
route changes the schema. Progress on stderr (a line a shard), the outcome per shard on stdout;
exit 0 when every shard is done, 1 naming each shard that is not (the others are done: run it
again once that shard is fixed), 2 for a bad key or type, before any database is touched.
"""

from __future__ import annotations

import time
from typing import Any

import click

from harvest.cli.output import cli_config, cli_dsn, database_url_option, emit, output_option, scrub, table
from harvest.core.errors import HarvestError, PermissionDenied

TYPE_CHOICES = click.Choice(["number", "text"])


def _targets(database_url: str | None) -> dict[int, str]:
    """Shard number -> its database URL: every shard of ``[shards]`` (shard 0 on the DSN unless
    ``shards.urls`` names it), else ``{0: the DSN}``."""
    from harvest.config import shard_urls, shards_configured

    config = cli_config()
    if not shards_configured(config):
        return {0: cli_dsn(database_url)}
    dsn: str | None
    try:
        dsn = cli_dsn(database_url)
    except HarvestError:
        if not config.get("shards.urls"):
            raise
        dsn = None
    return shard_urls(config, dsn)


def _say(shard: int, line: str) -> None:
    click.echo(f"shard {shard}: {line}", err=True)


def _failed(failed: list[str], shard: int, reason: str) -> None:
    """A shard not done: its line, scrubbed once, in the answer's ``failed`` and on stderr alike."""
    line = f"shard {shard}: {scrub(reason)}"
    failed.append(line)
    click.echo(f"error: {line}", err=True)


def _each_shard(database_url: str | None, act: Any) -> tuple[list[dict[str, Any]], list[str]]:
    """``act(conn, say)`` as the owner on each shard in turn: its rows, and a line for each shard
    that failed (the others go on). A login that is not a shard's owner fails there as any other
    failure (the shards before it are reported done, the ones after it go on); on one database it
    is the command's one line."""
    from harvest.db.connection import DatabaseError, failure_reason
    from harvest.db.search_indexes import owner_session, require_owner

    rows: list[dict[str, Any]] = []
    failed: list[str] = []
    targets = _targets(database_url)
    for shard, url in targets.items():
        started = time.monotonic()
        try:
            with owner_session(url) as conn:
                require_owner(conn)
                outcome = act(conn, lambda line, shard=shard: _say(shard, line))
        except PermissionDenied as exc:
            if len(targets) > 1:
                _failed(failed, shard, str(exc))
                continue
            raise PermissionDenied(f"shard {shard}: {exc}") from None
        except (HarvestError, DatabaseError) as exc:
            _failed(failed, shard, failure_reason(exc, url))
            continue
        seconds = time.monotonic() - started
        _say(shard, f"{outcome.action} ({outcome.index_name}) in {seconds:.1f} s")
        rows.append(
            {
                "shard_id": shard,
                "name": outcome.name,
                "type": outcome.type,
                "index_name": outcome.index_name,
                "outcome": outcome.action,
                "seconds": round(seconds, 3),
            }
        )
    return rows, failed


def _finish(rows: list[dict[str, Any]], failed: list[str], output: str, what: str) -> None:
    emit(
        {"shards": rows, "failed": failed},
        output,
        lambda d: table(d["shards"], ["shard_id", "name", "type", "index_name", "outcome", "seconds"]),
    )
    done = ", ".join(f"{r['outcome']} on shard {r['shard_id']}" for r in rows) or "nothing done"
    click.echo(f"{what}: {done}", err=True)
    if failed:
        click.echo(
            f"error: {len(failed)} shard(s) not done ({'; '.join(failed)}): run the "
            "command again once fixed (the shards done say so again and change nothing)",
            err=True,
        )
        raise SystemExit(1)


@click.group("search-attr")
def search_attr() -> None:
    """Index a search attribute for range tests, drop its index, list them (the schema owner)."""


@search_attr.command("index")
@click.argument("name")
@click.option(
    "--type",
    "type_",
    type=TYPE_CHOICES,
    required=True,
    help="number: range tests compare the value as a number; text: as its text.",
)
@database_url_option
@output_option
def index(name: str, type_: str, database_url: str | None, output: str) -> None:
    """Index search attribute NAME for range tests (>, >=, <, <=) on every shard, CONCURRENTLY,
    and record it so `harvest migrate run` builds it on a database it migrates. Idempotent; an
    INVALID index an interrupted build left is dropped and built again."""
    from harvest.db.search_indexes import check_key, ensure_index

    check_key(name)
    rows, failed = _each_shard(database_url, lambda conn, say: ensure_index(conn, name, type_, say))
    _finish(rows, failed, output, f"search attribute {name} ({type_})")


@search_attr.command("unindex")
@click.argument("name")
@database_url_option
@output_option
def unindex(name: str, database_url: str | None, output: str) -> None:
    """Drop search attribute NAME's index (CONCURRENTLY) and statistics on every shard, and its
    record: `harvest migrate run` no longer builds it. The filters answer the same."""
    from harvest.db.search_indexes import check_key, drop_index

    check_key(name)
    rows, failed = _each_shard(database_url, lambda conn, say: drop_index(conn, name, say))
    _finish(rows, failed, output, f"search attribute {name}")


@search_attr.command("indexes")
@database_url_option
@output_option
def indexes(database_url: str | None, output: str) -> None:
    """Every search attribute indexed on any shard, and per shard its index's state (valid,
    invalid, missing; undeclared: recorded on another shard only) and size. Any login that
    reads Harvest may list; exit 1 naming a shard that could not be read."""
    from harvest.db.connection import DatabaseError, connect, failure_reason
    from harvest.db.search_indexes import list_indexes

    found: dict[int, list[dict[str, Any]]] = {}
    failed: list[str] = []
    for shard, url in _targets(database_url).items():
        try:
            with connect(url, autocommit=True) as conn:
                found[shard] = list_indexes(conn)
        except (HarvestError, DatabaseError) as exc:
            failed.append(f"shard {shard}: {scrub(failure_reason(exc, url))}")
    rows = []
    for name in sorted({r["name"] for rows in found.values() for r in rows}):
        # (a shard's own type: `harvest migrate run` keeps a key recorded as the other type on
        # another shard as it is; undeclared on a shard, the type the others recorded)
        recorded = {r["type"] for rows in found.values() for r in rows if r["name"] == name}
        for shard, shard_rows in found.items():
            row = next((r for r in shard_rows if r["name"] == name), None)
            rows.append(
                {
                    "name": name,
                    "type": row["type"] if row is not None else "|".join(sorted(recorded)),
                    "shard_id": shard,
                    "state": row["state"] if row is not None else "undeclared",
                    "size_bytes": row["size_bytes"] if row is not None else None,
                    "index_name": row["index_name"] if row is not None else None,
                }
            )
    emit(
        {"indexes": rows, "failed": failed},
        output,
        lambda d: (
            table(d["indexes"], ["name", "type", "shard_id", "state", "size_bytes", "index_name"])
            if d["indexes"]
            else "no search attribute is indexed"
        ),
    )
    if failed:
        click.echo(f"error: not read: {'; '.join(failed)}", err=True)
        raise SystemExit(1)
