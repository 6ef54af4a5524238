"""`harvest shard rebalance` and `harvest shard rebalance-resume`: move quiescent executions
between shards (harvest.shard.rebalance; docs/sharding.md "Rebalancing").

The commands connect to the shard databases directly (a rebalance is a two-database
operation): each shard's URL comes from ``shards.urls`` / ``HARVEST_SHARDS__URLS__<N>`` (shard
0 defaults to the database URL), or from ``--shard N=URL``, which wins for that shard.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from contextlib import ExitStack
from typing import TYPE_CHECKING, Any

import click

from harvest.cli.output import (
    SHARD_NUMBER,
    cli_config,
    emit,
    execution_ids_option,
    output_option,
    progress,
    table,
)
from harvest.core.errors import ConfigError, InvalidArgument

SHARD_HELP = "A shard's database: N=URL (repeatable; wins over shards.urls for that shard)."


if TYPE_CHECKING:
    from harvest.shard import ShardPools

# The replay half of a verification: (events, workflow name) -> (ok, error), or None when the
# App does not register that workflow.
Replay = Callable[[list[dict[str, Any]], str], "tuple[bool, Any] | None"]


def _shard_dsns(pairs: tuple[str, ...]) -> dict[int, str]:
    from harvest.config import database_url, shard_urls
    from harvest.db.connection import parse_dsn

    config = cli_config()
    try:
        default_url = database_url(None, config)
    except ConfigError:  # no database URL configured: the --shard pairs must name every shard
        default_url = None
    dsns = shard_urls(config, default_url)
    for pair in pairs:
        number, sep, url = pair.partition("=")
        if not sep or not number.strip().isdigit() or not url.strip():
            raise InvalidArgument(
                f"--shard expects N=URL (a shard number, '=', its database URL), got {number!r}=..."
            )
        parse_dsn(url.strip(), f"--shard {int(number)}=...")  # (the pools would blame shards.urls)
        dsns[int(number)] = url.strip()
    return dsns


def _pools(pairs: tuple[str, ...]) -> ShardPools:
    from harvest.shard import ShardPools, ShardRouter

    dsns = _shard_dsns(pairs)
    shards = sorted(dsns)
    if not shards:
        raise InvalidArgument("no shard databases: give --shard N=URL or shards.urls")
    # fail_fast: a shard whose server refuses is named at once with what the connect met, as by
    # every other command's pools (cli_pools), not after the 10 s acquire timeout.
    return ShardPools(ShardRouter(shards, shards, shards[0]), dsns, max_size=2, fail_fast=True)


def _replay_with(target: str | None) -> Replay | None:
    """The replay half of verification: the App's registered code, when --app is given."""
    if target is None:
        return None
    from harvest.cli.worker import load_app
    from harvest.testing import WorkflowReplayer

    app = load_app(target)
    replayer = WorkflowReplayer(app)

    def replay(events: list[dict[str, Any]], workflow_name: str) -> tuple[bool, Any] | None:
        try:
            app.workflow(workflow_name)
        except Exception:  # the App does not register this workflow: structural only
            return None
        result = replayer.replay(events, workflow=workflow_name)
        return result.ok, result.error

    return replay


def _render(report: dict[str, Any]) -> str:
    moves = report["moves"]
    # (rebalance-resume with no open move has no target: "-")
    to = f" -> {report['to']}" if report["to"] != "-" else ""
    head = f"{'dry run: ' if report.get('dry_run') else ''}shard {report['from']}{to}: " + ", ".join(
        f"{n} {o.replace('_', ' ')}" for o, n in report["counts"].items() if n
    )
    if not moves:
        return head + ("nothing to move" if "dry_run" in report else "no open move to settle")
    rows = [{**m, "blockers": m["blockers"] or None} for m in moves]
    columns = ["execution_id", "workflow_name", "workflow_id", "outcome", "blockers", "verification", "error"]
    return head + "\n" + table(rows, columns)


@click.command("rebalance")
@click.option("--from", "source", type=SHARD_NUMBER, required=True, help="The shard to move off.")
@click.option("--to", "target", type=SHARD_NUMBER, required=True, help="The shard to move to.")
@click.option("--workflow", "workflow_name", default=None, help="Only runs of this workflow name.")
@click.option(
    "--execution-id",
    "execution_ids",
    multiple=True,
    callback=execution_ids_option,
    help="Exactly these executions (repeatable).",
)
@click.option(
    "--limit", type=click.IntRange(1, 10000), default=100, show_default=True, help="At most this many."
)
@click.option(
    "--dry-run", is_flag=True, help="Walk the same path up to the first write; report what would move."
)
@click.option("--shard", "shard_pairs", multiple=True, help=SHARD_HELP)
@click.option(
    "--app", "app_target", default=None, help="module:attribute of the App: replay-verify under its code."
)
@click.option("--operator-id", "--actor", "operator", default=None, help="Who you are, for the audit log.")
@output_option
def rebalance(
    source: int,
    target: int,
    workflow_name: str | None,
    execution_ids: tuple[str, ...],
    limit: int,
    dry_run: bool,
    shard_pairs: tuple[str, ...],
    app_target: str | None,
    operator: str | None,
    output: str,
) -> None:
    """Move quiescent executions (waiting on a timer or a signal) from one shard to another.
    Exit 1 when a move failed."""
    from harvest.shard.rebalance import Rebalancer

    with _pools(shard_pairs) as pools, ExitStack() as bars:
        rebalancer = Rebalancer(pools, source, target, operator_id=operator, replay=_replay_with(app_target))
        bar: Any = None

        def advance(done: int, total: int) -> None:
            # A move is several round trips on two databases: a long run shows it goes on (stderr).
            nonlocal bar
            if bar is None:
                label = f"moving runs from shard {source} to shard {target}"
                bar = bars.enter_context(progress(total, label, enabled=output != "json" and total > 0))
            elif done:
                bar.update(1)

        report = rebalancer.run(
            workflow_name=workflow_name,
            execution_ids=execution_ids,
            limit=limit,
            dry_run=dry_run,
            on_move=None if dry_run else advance,
        ).as_dict()
    emit(report, output, _render)
    if report["counts"]["failed"]:
        sys.exit(1)


@click.command("rebalance-resume")
@click.option("--from", "source", type=SHARD_NUMBER, required=True, help="The source shard of the moves.")
@click.option("--to", "target", type=SHARD_NUMBER, default=None, help="Only moves to this shard.")
@click.option("--shard", "shard_pairs", multiple=True, help=SHARD_HELP)
@click.option(
    "--app", "app_target", default=None, help="module:attribute of the App: replay-verify under its code."
)
@click.option("--operator-id", "--actor", "operator", default=None, help="Who you are, for the audit log.")
@output_option
def rebalance_resume(
    source: int,
    target: int | None,
    shard_pairs: tuple[str, ...],
    app_target: str | None,
    operator: str | None,
    output: str,
) -> None:
    """Settle the source shard's moves that a crash or an interruption left open: before the
    cutover they are driven on (a run that woke since is declined, not sealed), past it the
    target copy is activated. Exit 1 when a move failed."""
    from harvest.shard.rebalance import Rebalancer

    with _pools(shard_pairs) as pools:
        with pools.api(source) as sql:
            # Every open move's target (one without a URL is refused loudly), and the targets of
            # recent failed moves this process can reach (their leftover staged copies).
            targets = sorted(
                {r["target_shard"] for r in sql.list_migrations(["open"], 10000)}
                | {
                    r["target_shard"]
                    for r in sql.list_migrations(["failed"], 1000)
                    if r["target_shard"] in pools.shards
                }
            )
        if target is not None:
            targets = [t for t in targets if t == target]
        moves: list[dict[str, Any]] = []
        for to in targets:
            rebalancer = Rebalancer(pools, source, to, operator_id=operator, replay=_replay_with(app_target))
            moves.extend(m.as_dict() for m in rebalancer.resume())
    outcomes = ("moved", "declined", "failed")
    report: dict[str, Any] = {
        "from": source,
        "to": target if target is not None else ",".join(map(str, targets)) or "-",
        "counts": {o: sum(1 for m in moves if m["outcome"] == o) for o in outcomes},
        "moves": moves,
    }
    emit(report, output, _render)
    if report["counts"]["failed"]:
        sys.exit(1)
