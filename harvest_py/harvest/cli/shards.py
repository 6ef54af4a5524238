"""The CLI's one door to every shard: :func:`shard_apis` (the seam), and reading and printing a
fan-out read (harvest/shard/fanout.py, docs/sharding.md "Fan-out reads").

Every command that lists or counts across shards goes through :func:`read_shards`, which gets
its APIs from :func:`shard_apis` and nowhere else.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import Any

import click

from harvest.cli.output import cli_config, emit, sql_api
from harvest.config import Config
from harvest.core.errors import DatabaseUnavailable
from harvest.shard.fanout import PARTIAL, UNAVAILABLE, Merged, ShardReads


@contextlib.contextmanager
def shard_apis(config: Config, database_url: str | None = None) -> Iterator[Mapping[int, Any]]:
    """Shard number -> API provider (an API, or a zero-argument callable returning a context
    manager that yields one), for the fan-out reads.

    THE SEAM: today one database, shard 0, on one read-only connection opened here (so a
    database that cannot be reached fails the command as before, with its own message). With
    [shards] configured, this is where ShardPools comes in: a provider per readable shard,
    ``functools.partial(pools.api, shard)``, each opened when read and closed after."""
    del config  # the [shards] section is read here once ShardPools lands
    with sql_api(database_url, read_only=True) as sql:
        yield {0: sql}


def read_shards(database_url: str | None, read: Callable[[ShardReads], Merged[Any]]) -> Merged[Any]:
    """``read`` over every shard. No shard answering is an error (exit code of
    DatabaseUnavailable); some answering is a partial answer, printed with a warning."""
    with shard_apis(cli_config(), database_url) as apis:
        merged = read(ShardReads(apis))
    if merged.status == UNAVAILABLE:
        shards = ", ".join(str(s) for s in merged.unavailable_shards)
        raise DatabaseUnavailable(
            f"no shard could be read (shard(s) {shards} unreachable); retry when one is up"
        )
    return merged


def warn_partial(merged: Merged[Any]) -> None:
    """The one-line warning on stderr for a partial answer (stdout stays the answer)."""
    if merged.status == PARTIAL:
        shards = ", ".join(str(s) for s in merged.unavailable_shards)
        click.echo(
            f"warning: partial: shard(s) {shards} could not be read; the output holds the other shards only",
            err=True,
        )


def emit_merged(merged: Merged[Any], key: str | None, output: str, render: Callable[[Any], str]) -> None:
    """JSON: the value under ``key`` with status and unavailable_shards (next_cursor when
    paginated), or, with ``key`` None, the value's own keys plus those two; table: render(value)
    and, when partial, the warning. Partial exits 0: a read that shows what it could is an answer."""
    if output == "json":
        if key is None:
            data = {**merged.value, "status": merged.status, "unavailable_shards": merged.unavailable_shards}
        else:
            data = merged.envelope(key)
        emit(data, output, render)
    else:
        emit(merged.value, output, render)
    warn_partial(merged)
