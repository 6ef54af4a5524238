"""`harvest shard health [--candidate-shard N]`: the readiness gate for adding a shard
(harvest/shard/health.py; docs/sharding.md, "Shard health and adding a shard").

Exit 0 when every writable shard and the candidate are ready, 2 when the worst of them is
degraded, 1 when one is unavailable (preflight's codes: 0 pass, 2 warn, 1 fail).
"""

from __future__ import annotations

import sys
from typing import Any

import click

from harvest.cli.output import (
    SHARD_NUMBER,
    cli_config,
    cli_dsn,
    database_url_option,
    emit,
    operator_id_option,
    output_option,
    progress,
    table,
)
from harvest.core.errors import ConfigError, InvalidArgument

EXIT = {"ready": 0, "degraded": 2, "unavailable": 1}


def shard_targets(database_url: str | None, *, required: bool = True) -> tuple[Any, dict[int, str]]:
    """The configured router and each shard's url (shard 0 on the database url unless
    ``shards.urls.0`` names it): what `shard health` and `preflight` inspect. No database url and
    no ``shards.urls.0``: ConfigError, or with ``required`` False no url for shard 0."""
    from harvest.config import shard_urls
    from harvest.shard.router import ShardRouter

    config = cli_config()
    router = ShardRouter.from_config(config)
    try:
        dsn = cli_dsn(database_url)
    except ConfigError:
        if required and "0" not in (config.get("shards.urls") or {}):
            raise
        dsn = None
    return router, shard_urls(config, dsn)


@click.group("shard")
def shard() -> None:
    """Shards: health and readiness, rebalancing, owner mode, owed child ends (docs/sharding.md)."""


def _render(data: dict[str, Any]) -> str:
    rows = []
    for row in data["shards"]:
        workers = row["workers"] or {}
        pressure = row["pressure"] or {}
        coverage = row["queue_coverage"] or {}
        rows.append(
            {
                "shard": row["shard_id"],
                "roles": row["roles"],
                "reachable": "yes" if row["reachable"] else "NO",
                "schema": row["schema"]["version"],
                "live": workers.get("live"),
                "stale": workers.get("stale"),
                "unpolled": coverage.get("unpolled"),
                # (~: a queue past 10,000 pending tasks is an estimate, named below the table)
                "pending": f"~{pressure['pending']}"
                if pressure.get("estimated")
                else pressure.get("pending"),
                "dlq": pressure.get("dead_letters"),
                "stranded": row["stranded_pending"],
                "scheduler": (row.get("scheduler") or {}).get("status"),
                "readiness": row["readiness"],
                "reasons": row["reason_codes"],
            }
        )
    columns = list(rows[0]) if rows else ["shard"]
    lines = [f"readiness: {data['readiness']}", f"observed_at: {data['observed_at']}"]
    if data["candidate_shard"] is not None:
        lines.append(f"candidate_shard: {data['candidate_shard']}")
    lines += ["", table(rows, columns), ""]
    for row in data["shards"]:
        if row.get("error"):
            lines.append(f"shard {row['shard_id']}: {row['error']}")
        functions = row["schema"].get("functions")  # (None from a server of a release before it)
        if functions and functions.get("reason"):
            lines.append(f"shard {row['shard_id']}: {functions['reason']}")
        estimated = [q["queue"] for q in row.get("queues") or [] if q.get("estimated")]
        if estimated:
            lines.append(
                f"shard {row['shard_id']}: ~ pending is an estimate: queue(s) "
                + ", ".join(f"'{q}'" for q in estimated)
                + " past 10,000 pending tasks counted from a block sample of the tasks table"
            )
        for stranded in row["stranded"] or []:
            lines.append(
                f"shard {row['shard_id']}: {stranded['pending']} claimable task(s) on queue "
                f"'{stranded['queue']}' and no live worker polls it"
            )
    for row in data["shards"]:
        scheduler = row.get("scheduler")
        if scheduler and scheduler["status"] == "stale":
            lines.append(
                f"scheduler freshness: shard {row['shard_id']}: stale, {scheduler['active']} unpaused "
                f"schedule(s), the oldest due {scheduler['overdue_secs']:.0f} s ago: no scheduler ticks "
                "this shard (run a worker or `harvest serve` whose role runs the scheduler)"
            )
    if data.get("retiring"):
        if lines[-1]:  # (one blank line before it, whether or not a shard had a line to say)
            lines.append("")
        lines += _render_retiring(data["retiring"])
    return "\n".join(lines).rstrip()


@shard.command("health")
@click.option(
    "--candidate-shard",
    type=SHARD_NUMBER,
    default=None,
    help="A shard about to become writable: its row gates the exit code too (added if not configured).",
)
@click.option(
    "--retiring-shard",
    type=SHARD_NUMBER,
    default=None,
    help="A shard to retire behind a forward: the exit code says whether its cross-shard children let it "
    "(0 clear, 2 not yet, 1 a shard could not be read).",
)
@click.option(
    "--app",
    "app_target",
    default=None,
    help="module:app whose declared queues each shard must cover (default: each shard's registered queues).",
)
@database_url_option
@output_option
def health(
    candidate_shard: int | None,
    retiring_shard: int | None,
    app_target: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """One row per configured shard: roles, reachability, schema, live workers, queue coverage,
    pressure, stranded work, cross-shard children and reason codes. Exit 0 = every writable
    shard and the candidate ready, 2 = degraded, 1 = unavailable; with --retiring-shard N the
    exit code is N's retire check instead: 0 = no child on N for a parent elsewhere and no end
    owed on N, 2 = some left, 1 = a shard could not be read."""
    from harvest.cli.http import http_session
    from harvest.cli.output import selected
    from harvest.shard.health import shard_health

    settings = selected(database_url)
    if settings is not None:  # the server's shards, as it sees them
        if app_target:
            raise InvalidArgument(
                "--app is not sent over HTTP: the server checks each shard's registered queues"
            )
        with http_session(settings) as http:
            params = {"candidate_shard": candidate_shard}
            data = http.request("GET", "/admin/shards/health", params=params, scope="admin")[1]
        _finish(data, retiring_shard, output)
    queues = None
    if app_target:
        from harvest.cli.worker import load_app
        from harvest.config import declared_queues

        queues = declared_queues(load_app(app_target))
    router, urls = shard_targets(database_url)
    data = shard_health(router, urls, candidate=candidate_shard, queues=queues)
    _finish(data, retiring_shard, output)


RETIRE_EXIT = {True: 0, False: 2, None: 1}


def _finish(data: dict[str, Any], retiring_shard: int | None, output: str) -> None:
    """Print the report and exit with its readiness, or with ``--retiring-shard`` its retire
    check's answer (added to the report as ``retiring``)."""
    from harvest.shard.health import retire_check

    if retiring_shard is None:
        emit(data, output, _render)
        sys.exit(EXIT[data["readiness"]])
    data["retiring"] = retire_check(data, retiring_shard)
    emit(data, output, _render)
    sys.exit(RETIRE_EXIT[data["retiring"]["clear"]])


def _render_retiring(check: dict[str, Any]) -> list[str]:
    shard = check["shard"]
    if check["clear"]:
        return [f"retiring shard {shard}: clear: no cross-shard child on it, no child end owed on it"]
    lines = []
    for c in check["children"]:
        lines.append(
            f"retiring shard {shard}: NOT clear: shard {c['parent_shard']} drives {c['children']} "
            f"cross-shard child(ren) on it"
        )
    for o in check["owed_ends"]:
        lines.append(
            f"retiring shard {shard}: NOT clear: it owes {o['ended'] + o['running']} child end(s) to "
            f"parents on shard {o['parent_shard']} ({o['running']} still running)"
        )
    if check["unread"]:  # named whether or not a child or an end was found on another shard
        # (from a server of a release before unread_reasons: the shards without their reasons)
        why = check.get("unread_reasons") or [{"shard_id": n, "reason": None} for n in check["unread"]]
        verdict, more = ("cannot tell:", "") if not lines else ("NOT clear, and", ": more may be left there")
        for unread in why:
            lines.append(
                f"retiring shard {shard}: {verdict} shard {unread['shard_id']} not read "
                f"({UNREAD_WHY.get(unread['reason'], UNREAD_WHY[None]).format(n=unread['shard_id'])}){more}"
            )
    return lines


# What to say of a shard the retire check could not read, by its reason (retire_check's
# unread_reasons): the cause and what to do, never a URL.
UNREAD_WHY = {
    "not_configured": "no url for it in this process: add shards.urls.{n} (HARVEST_SHARDS__URLS__{n})",
    "unreachable": "unreachable: its database did not answer; run this again once it is up",
    "identity_mismatch": "its url reaches another shard's database: check shards.urls.{n}",
    "schema_migration_missing": "not migrated to this release: run harvest migrate run against it",
    "schema_ahead": "migrated by a newer Harvest than this one: run this with that release",
    "functions_stale": "its functions are older than this release: run harvest migrate run against it",
    None: "unreachable, not configured, or functions older than this release: harvest migrate run",
}


@shard.command("release-owed-ends")
@click.argument("parent_shard", type=SHARD_NUMBER)
@click.option(
    "--include-running",
    is_flag=True,
    help="Also release the children still running (their ends would otherwise be kept when they end).",
)
@click.option(
    "--batch-size",
    default=500,
    show_default=True,
    type=click.IntRange(1, 10_000),
    help="Runs released per transaction (1..10000).",
)
@click.option(
    "--max-batches",
    default=1000,
    show_default=True,
    type=click.IntRange(1, 1_000_000),
    help="Stop after this many batches on a shard.",
)
@click.option(
    "--dry-run", is_flag=True, help="Write nothing: show, per shard, the ends owed to PARENT_SHARD."
)
@click.option(
    "--force",
    is_flag=True,
    help="Release even if PARENT_SHARD answers as itself (a shard being restored to before the "
    "children's starts); recorded in the audit rows.",
)
@operator_id_option
@database_url_option
@output_option
def release_owed_ends(
    parent_shard: int,
    include_running: bool,
    batch_size: int,
    max_batches: int,
    dry_run: bool,
    force: bool,
    operator: str | None,
    database_url: str | None,
    output: str,
) -> None:
    """Let retention take the ended cross-shard children whose ends are owed to PARENT_SHARD, a
    shard gone for good (retired, lost, restored to before their starts): on every readable
    shard but PARENT_SHARD, batch by batch, audited (admin). A parent still there would never
    get those ends: PARENT_SHARD is probed first, and one that answers as itself and is not
    retired behind shards.forwards is refused (exit 2, nothing released; --dry-run warns;
    --force skips the probe). Exit 1 naming a shard that could not be reached (run it again
    when it is up). Over HTTP the server probes and releases to the end and the CLI waits at
    least 300 s (--http-timeout-secs for longer); past that it exits 1 saying the server goes
    on and how to see what is still owed."""
    from harvest.cli.http import BULK_WRITE_SECS, http_session
    from harvest.cli.output import selected
    from harvest.cli.shards import fail_if_refused_over_http, fail_if_unreached
    from harvest.shard.children import parent_check

    settings = selected(database_url)
    if settings is not None:  # the server probes the parent's shard and releases on its shards
        body = {
            "include_running": include_running,
            "batch_size": batch_size,
            "max_batches": max_batches,
            "dry_run": dry_run,
            "force": force,
            "operator_id": operator,
        }
        with http_session(settings) as http:
            budget = max(http.settings.timeout, BULK_WRITE_SECS)
            path = f"/admin/shards/{parent_shard}/release-owed-ends"
            goes_on = (
                "with the release to its end, each batch committed as it is made: see what is still "
                f"owed with `harvest shard release-owed-ends {parent_shard} --dry-run`, what was done "
                "with `harvest audit list --operation retention.release_owed_child_ends`"
            )
            answer = http.post(path, body, scope="admin", timeout=budget, goes_on=goes_on)
        if "parent_check" in answer:  # (a server of a release before the probe answers none)
            click.echo(parent_check(answer["parent_check"], dry_run), err=True)
        # Printed as over SQL: the totals of the shards done (harvest.shard.children.release_totals).
        data = {k: v for k, v in answer.items() if k not in ("status", "shard_errors")}
        fail_if_refused_over_http(answer, lambda: emit(data, output, _render_release))
    else:
        probe = None if force else _probe_parent(database_url, parent_shard)
        click.echo(parent_check(probe, dry_run), err=True)  # (ParentShardAlive: nothing released)
        data = _release_over_sql(
            database_url,
            parent_shard,
            include_running,
            batch_size,
            max_batches,
            dry_run,
            probe,
            operator,
            output,
        )
    emit(data, output, _render_release)
    fail_if_unreached(data.get("unavailable_shards") or [], f"keep the ends owed to shard {parent_shard}")


def _probe_parent(database_url: str | None, parent: int) -> dict[str, Any]:
    """Whether shard ``parent`` is alive, from this process's shards (as `shard health` reads
    them): harvest.shard.health.probe_shard."""
    from harvest.shard.health import probe_shard

    router, urls = shard_targets(database_url, required=False)  # (none for shard 0: not_configured)
    return probe_shard(router, urls, parent)


def _release_over_sql(
    database_url: str | None,
    parent: int,
    include_running: bool,
    batch_size: int,
    max_batches: int,
    dry_run: bool,
    probe: dict[str, Any] | None,
    operator: str | None,
    output: str,
) -> dict[str, Any]:
    """Each shard in turn (cli.shards.in_turn: a release may take many batches, so no shard is
    cut off by shards.cli_timeout, and each has its own progress bar; a shard that refuses is
    named and the others are released all the same), then the totals."""
    from harvest.cli.output import sql_api
    from harvest.cli.shards import fail_if_refused, in_turn, shard_writers
    from harvest.config import shards_configured
    from harvest.shard.children import release_totals

    force = probe is None  # (the probe skipped: --force)

    def on(shard: int, sql: Any) -> dict[str, Any]:
        return release_owed_on_shard(
            sql,
            shard,
            parent,
            include_running,
            batch_size,
            max_batches,
            dry_run,
            operator,
            output,
            force=force,
        )

    config = cli_config()
    if not shards_configured(config):
        with sql_api(database_url, read_only=dry_run) as sql:
            return release_totals(parent, include_running, dry_run, {0: on(0, sql)}, [], probe)
    with shard_writers(config, database_url) as apis:
        # (Nothing is owed to the parent's shard itself.)
        done = in_turn(apis, sorted(s for s in apis if s != parent), on)
    totals = release_totals(parent, include_running, dry_run, done.results, done.unavailable, probe)
    fail_if_refused(done, lambda: emit(totals, output, _render_release))
    return totals


def release_owed_on_shard(
    sql: Any,
    shard: int,
    parent: int,
    include_running: bool,
    batch_size: int,
    max_batches: int,
    dry_run: bool,
    operator: str | None,
    output: str = "json",
    *,
    force: bool = False,
) -> dict[str, Any]:
    """On one (child's) shard: the ends owed to ``parent`` (a dry run), or their release, batch
    by batch until a batch releases nothing (release_owed_child_ends skips the rows a
    concurrent step holds: a short batch is not the end), with a progress bar on stderr;
    ``force`` recorded in each batch's audit row."""
    from harvest.db.steps import run_steps
    from harvest.shard.children import owed_to, release_owed_steps

    owed = owed_to(sql.get_retention_status(), parent)
    if dry_run:
        return owed
    total = owed["ended"] + (owed["running"] if include_running else 0)
    label = f"shard {shard}: releasing ends owed to shard {parent}"
    with progress(total, label, enabled=output != "json" and total > 0) as bar:
        steps = release_owed_steps(
            parent, batch_size, include_running, max_batches, operator, force=force, on_batch=bar.update
        )
        return run_steps(steps, sql)


def _render_release(d: dict[str, Any]) -> str:
    parent = d["parent_shard"]
    if d["dry_run"]:
        head = (
            f"dry run: {d['ended']} ended child(ren) whose end is owed to shard {parent} would be released"
            + (f", and {d['running']} running" if d["include_running"] else f"; {d['running']} running kept")
        )
        lines = [f"  shard {r['shard_id']}: {r['ended']} ended, {r['running']} running" for r in d["shards"]]
    else:
        head = f"released {d['released']} end(s) owed to shard {parent} in {d['batches']} batch(es)"
        lines = [
            f"  shard {r['shard_id']}: released {r['released']} in {r['batches']} batch(es)"
            for r in d["shards"]
        ]
    return "\n".join([head, *lines])
