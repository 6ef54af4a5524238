"""The deploy gate's checks (`harvest preflight`, ``GET /admin/preflight``): read-only.

Checks: database reachable, migrations applied (nothing pending), schema version, catalog
consistency of an App's declared dependencies (given an App), worker coverage of the App's
queues (given one) or of the queues the fleet registered (without), worker health, dead-letter
access, retention configured and swept. With a ``[shards]`` configuration the database checks run on
every configured shard (scope ``shard N``), each with an ``identity`` check (the database is
that shard), and a ``shards`` check says whether every writable shard is reachable, migrated
and itself. Over HTTP one more check, ``admin_auth_boundary``, says whether the API has one.
"""

from __future__ import annotations

from collections.abc import Container, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from harvest.core.errors import HarvestError
from harvest.db.connection import connect, read_only
from harvest.db.sqlapi import SqlApi, translated_errors

if TYPE_CHECKING:
    from harvest.declare.definitions import App

RANK = {"pass": 0, "skip": 0, "warn": 1, "fail": 2}
EXIT = {"pass": 0, "warn": 2, "fail": 1}


@dataclass
class Check:
    name: str
    status: str
    summary: str
    scope: str = "-"
    details: dict[str, Any] = field(default_factory=dict)
    remediation: str | None = None

    def to_json(self) -> dict[str, Any]:
        out = {
            "name": self.name,
            "status": self.status,
            "scope": self.scope,
            "summary": self.summary,
            "details": self.details,
        }
        if self.remediation:
            out["remediation"] = self.remediation
        return out


def _first_line(exc: Exception) -> str:
    return (str(exc).strip().splitlines() or [type(exc).__name__])[0]


def _resolves(name: str, catalog: Container[str]) -> bool:
    """A declared name resolves when it is registered as written (``billing.charge`` is a
    legal registered name), or, for a path like ``billing::charge``, by its last segment."""
    return name in catalog or name.split("::")[-1].split(".")[-1] in catalog


def _catalog_consistency(app: App) -> Check:
    failures = []
    checked = 0
    for name, definition in sorted(app.workflows.items()):
        activities = getattr(definition, "declared_activities", None)
        children = getattr(definition, "declared_children", None)
        if activities is None and children is None:
            continue
        checked += 1
        for activity in activities or ():
            if not _resolves(activity, app.activities):
                failures.append(f"workflow '{name}' references unregistered activity '{activity}'")
        for child in children or ():
            if not _resolves(child, app.workflows):
                failures.append(f"workflow '{name}' references unregistered child workflow '{child}'")
    dags = getattr(app, "dags", {})
    for dag in dags.values():  # App(dags=...) refuses these already; a check of the loaded App
        failures += dag.problems(app.activities, app.workflows)
    if failures:
        return Check(
            "catalog_consistency",
            "fail",
            "registered catalog contains unresolved workflow runtime references",
            details={"failures": failures},
            remediation="Register the named handler in App(activities=[...]) / App(workflows=[...]), "
            "or delete the stale entry from the workflow's declared dependencies.",
        )
    if not checked and not dags:
        return Check("catalog_consistency", "skip", "no workflow declares its dependencies")
    return Check(
        "catalog_consistency",
        "pass",
        f"{checked} workflow(s) declare dependencies and {len(dags)} DAG(s) their tasks; all resolve",
    )


def _queue_coverage(sql: SqlApi, app: App | None, shard: int | None, writable: Iterable[int] | None) -> Check:
    """Each queue with no live worker, by the rule ``harvest queue coverage`` and GET
    /admin/queue-coverage share (harvest.config.merge_coverage): a drained shard (``shard`` not in
    ``writable``) takes no new run, so its gaps do not count. With --app the App's declared
    queues; without it the declared queues are unknown, and the check reports the queues the
    fleet registered (every worker row, stopped and stale too: a queue whose workers all died is
    exactly the one to report) with no live worker, else skips (it cannot see a queue no worker
    ever registered). No registered worker at all warns: a gate fails closed on unknown."""
    from harvest.config import coverage_facts, declared_queues, merge_coverage

    declared = declared_queues(app) if app is not None else None
    key = 0 if shard is None else shard
    data = merge_coverage({key: coverage_facts(sql)}, declared, None if shard is None else writable)
    if str(key) not in data["unpolled_by_shard"]:  # not counted: a drained shard
        return Check(
            "queue_coverage",
            "skip",
            f"shard {shard} is drained (not in shards.writable): it takes no new run, so its "
            "queues need no live worker",
            details={"source": "app" if app is not None else "fleet", "declared": declared, "uncovered": []},
        )
    gaps = data["unpolled_by_shard"][str(key)]
    if app is not None:
        queues, source, what = declared or [], "app", "declared"
    else:
        queues, source, what = data["registered_queues"], "fleet", "registered"
        if not queues:
            return Check(
                "queue_coverage",
                "warn",
                "no worker has registered: queue coverage is unknown",
                details={"source": source, "declared": [], "uncovered": None},
                remediation="start the workers before this gate, or pass --app module:app "
                "to check the queues the App declares",
            )
    details = {"source": source, "declared": queues, "uncovered": gaps}
    if gaps:
        return Check(
            "queue_coverage",
            "warn",
            f"{len(gaps)} {what} queue(s) have no live worker",
            details=details,
            remediation="start a worker polling: " + ", ".join(gaps),
        )
    if app is None:
        return Check(
            "queue_coverage",
            "skip",
            f"every registered queue has a live worker ({', '.join(queues)}), but the declared "
            "queues are unknown without --app: a queue no worker ever registered is not seen",
            details=details,
            remediation="pass --app module:app to check the queues the App declares",
        )
    return Check(
        "queue_coverage",
        "pass",
        f"every {what} queue has a live worker ({', '.join(queues)})",
        details=details,
    )


def run_checks(dsn: str, app: Any = None, app_error: Check | None = None) -> list[Check]:
    """The checks of one database (no [shards] configuration). ``app``: the App whose queues
    and declared dependencies to check; ``app_error``: the check saying it could not be loaded."""
    return _database_checks(dsn, app, {"app_error": app_error})


def run_shard_checks(
    router: Any, urls: dict[int, str], app: Any = None, app_error: Check | None = None
) -> list[Check]:
    """The checks of every configured shard, each scoped ``shard N`` (reachability, migrations,
    schema version, identity, workers, coverage, dead letters, retention), then one ``shards``
    check: every writable shard reachable and on this schema with its own identity."""
    app_cache: dict[str, Any] = {"app_error": app_error}
    checks: list[Check] = []
    broken: list[str] = []
    for shard in sorted({*router.readable, *urls}):
        scope = f"shard {shard}"
        dsn = urls.get(shard)
        if dsn is None:
            found = [
                Check(
                    "database",
                    "fail",
                    f"no url for shard {shard}",
                    scope=scope,
                    remediation=f"set shards.urls.{shard} (HARVEST_SHARDS__URLS__{shard})",
                )
            ]
        else:
            found = _database_checks(dsn, app, app_cache, scope=scope, shard=shard, writable=router.writable)
        checks += found
        if shard in router.writable and any(
            c.status == "fail" and c.name in ("database", "migrations", "schema_version", "identity")
            for c in found
        ):
            broken.append(str(shard))
    writable = ", ".join(map(str, router.writable))
    if broken:
        checks.append(
            Check(
                "shards",
                "fail",
                f"writable shard(s) {', '.join(broken)} cannot take work",
                details={"writable": list(router.writable), "not_ready": [int(b) for b in broken]},
                remediation="see the shard's checks above; harvest shard health shows each shard's reasons",
            )
        )
    else:
        checks.append(
            Check(
                "shards",
                "pass",
                f"every writable shard ({writable}) is reachable, migrated and itself",
                details={"writable": list(router.writable), "readable": list(router.readable)},
            )
        )
    return checks


def _database_checks(
    dsn: str,
    app: Any,
    once: dict[str, Any],
    *,
    scope: str = "-",
    shard: int | None = None,
    writable: Iterable[int] | None = None,
) -> list[Check]:
    from harvest.db.migrate import Migrator, latest_core_version, listed

    checks: list[Check] = []
    try:
        conn = connect(dsn, autocommit=True, connect_timeout=5)
    except HarvestError as exc:
        return [
            Check(
                "database",
                "fail",
                str(exc),
                scope=scope,
                remediation="check HARVEST_DATABASE_URL and the server"
                if shard is None
                else f"check shards.urls.{shard} and the server",
            )
        ]
    with conn:
        read_only(conn, dsn)
        sql = SqlApi(conn)
        checks.append(Check("database", "pass", "database reachable"))
        try:
            report = Migrator(dsn).inspect()
            rows, stale = report.migrations, report.stale_functions
            pending = [r.migration.label for r in rows if r.applied_at is None]
            if report.ahead:
                checks.append(
                    Check(
                        "migrations",
                        "fail",
                        str(report.ahead),
                        details={"unknown": [u.label for u in report.unknown]},
                        remediation="upgrade Harvest (the package) to the release that wrote "
                        "them; do not migrate with this one",
                    )
                )
            elif pending or stale:
                changed = report.changed_functions
                checks.append(
                    Check(
                        "migrations",
                        "fail",
                        f"{len(pending)} migration(s) and {len(stale)} function file(s) pending"
                        + (
                            f" ({len(changed)} function(s) replaced since `harvest migrate run` "
                            f"applied them: {listed([f'harvest.{f}' for f in changed])})"
                            if changed
                            else ""
                        ),
                        details={
                            "pending": pending,
                            "stale_function_files": [p.name for p in stale],
                            "changed_functions": changed,
                        },
                        remediation="run `harvest migrate run` before rolling replicas",
                    )
                )
            else:
                checks.append(
                    Check("migrations", "pass", f"{len(rows)} migration(s) applied, nothing pending")
                )
        except Exception as exc:
            checks.append(
                Check("migrations", "fail", f"cannot read the migration ledger: {exc}".splitlines()[0])
            )
        expected = latest_core_version()
        found: str | None
        error: str | None
        try:
            with translated_errors():
                found = sql.schema_version()
        except Exception as exc:
            found, error = None, str(exc).splitlines()[0]
        else:
            error = None
        if found == expected:
            checks.append(Check("schema_version", "pass", f"schema version {found}"))
        else:
            checks.append(
                Check(
                    "schema_version",
                    "fail",
                    error or f"database has schema version {found}, this Harvest needs {expected}",
                    details={"found": found, "expected": expected},
                    remediation="upgrade Harvest (the package)"
                    if found and found > expected
                    else "run `harvest migrate run`",
                )
            )
        if shard is not None:
            checks.append(_identity(sql, shard))
        first = not once.get("done")
        if first:  # the App's own checks, with the first database's
            once["done"] = True
            if once.get("app_error") is not None:
                checks.append(once["app_error"])
            elif app is not None:
                checks.append(_catalog_consistency(app))
        health = None
        try:
            health = sql.get_worker_health()
        except Exception as exc:
            checks.append(Check("worker_health", "fail", _first_line(exc)))
        if health is not None:
            status = "warn" if health["stale"] else "pass"
            checks.append(
                Check(
                    "worker_health",
                    status,
                    f"{health['healthy']} healthy, {health['stale']} stale, {health['draining']} draining",
                    details=health,
                )
            )
            checks.append(_queue_coverage(sql, app, shard, writable))
        checks.append(_schedules(sql, app, declared=app is not None and first))
        try:
            dead = sql.count_dead_letters("all")
            total = sum(r["dead_letters"] for r in dead)
            checks.append(
                Check(
                    "dead_letters",
                    "pass",
                    f"dead letters readable ({total} parked)",
                    details={"count": total},
                )
            )
        except Exception as exc:
            checks.append(Check("dead_letters", "fail", _first_line(exc)))
        try:
            retention = sql.get_retention_status()
            if retention["configured"]:
                checks.append(_janitor(retention, sql.list_workers(None, "active", "healthy")))
            else:
                checks.append(
                    Check(
                        "retention",
                        "warn",
                        "retention is not configured: history grows forever",
                        details=retention,
                        remediation="harvest retention set --max-age '30 days'",
                    )
                )
        except Exception as exc:
            checks.append(Check("retention", "fail", _first_line(exc)))
    if shard is not None:
        for check in checks:
            if check.scope == "-":
                check.scope = scope
    return checks


# How long a janitor may go without a round before preflight says none runs: two rounds of the
# slowest janitor placed, and a minute for the clocks and the start; when no worker places one,
# a day (`harvest retention run-now` from a daily cron sweeps as the documented alternative).
_JANITOR_GRACE_SECS = 60.0
_NO_JANITOR_ROUND_SECS = 43_200.0


def _janitor(retention: dict[str, Any], live: list[dict[str, Any]]) -> Check:
    """Retention is configured: pass, unless the live workers, each saying whether it runs the
    janitor (its registry row's metadata), show that none has swept for two of its rounds since
    the age was set and they started: every one placing it stopped it (its login lacks
    harvest_admin: "retention janitor stopped" in its log), or none places it. A process that
    registers no row (a scheduler alone) and sweeps keeps last_run_at fresh: no warning then.
    Workers of a release before this one say nothing: no warning either."""
    kept = Check("retention", "pass", f"terminal executions kept {retention['max_age']}", details=retention)
    if not live or any("janitor" not in (w.get("metadata") or {}) for w in live):
        return kept
    placing = [w for w in live if (w["metadata"] or {}).get("janitor")]
    round_secs = max((float(w["metadata"]["janitor"]) for w in placing), default=_NO_JANITOR_ROUND_SECS)
    # (now on the database's clock: the freshest heartbeat of a healthy worker)
    since = max(w["last_heartbeat_at"] for w in live) - timedelta(
        seconds=2 * round_secs + _JANITOR_GRACE_SECS
    )
    started = min(w["started_at"] for w in placing or live)
    last = retention.get("last_run_at")
    if isinstance(last, str):
        last = datetime.fromisoformat(last)
    updated = retention.get("updated_at")
    if isinstance(updated, str):
        updated = datetime.fromisoformat(updated)
    if (last is not None and last >= since) or started > since or (updated is not None and updated > since):
        return kept
    ran = "never" if last is None else f"last at {last.isoformat()}"
    if placing:
        summary = (
            f"retention is configured but no janitor sweeps ({ran}): {len(placing)} live worker(s) place it "
            "and none ran a round in two of its intervals (a login without harvest_admin stops it: "
            "'retention janitor stopped' in the worker's log)"
        )
        fix = (
            "connect the processes that run the janitor as a login with harvest_admin (docs/security.md), "
            "or run it where one does (retention.run_on, retention.enabled)"
        )
    else:
        summary = (
            f"retention is configured but no janitor sweeps ({ran}): none of the {len(live)} live worker(s) "
            "places it (retention.enabled, retention.run_on, the process role)"
        )
        fix = (
            "run the janitor on a process whose login has harvest_admin (role combined or worker, "
            "retention.enabled unset or true; or retention.run_on = 'all')"
        )
    details = {**retention, "janitor_workers": [w["worker_id"] for w in placing]}
    return Check("retention", "warn", summary, details=details, remediation=fix)


def _schedules(sql: SqlApi, app: Any, *, declared: bool) -> Check:
    """Every schedule resolves to a workflow: the App's declared ones to a workflow the App
    registers (with --app), the database's to a workflow a worker registered on its queue
    (docs/schedules.md). An unregistered one fails: each of its firings would fail to start."""
    failures = []
    if declared:
        for item in getattr(app, "schedules", {}).values():
            if item.workflow_name not in app.workflows:
                failures.append(
                    f"declared schedule '{item.name}' starts unregistered workflow '{item.workflow_name}'"
                )
    try:
        rows = sql.list_schedules()
    except Exception as exc:
        return Check("schedules", "fail", _first_line(exc))
    unknown = []
    for row in rows:
        if row["workflow_registered"] is False:
            failures.append(
                f"schedule '{row['name']}' starts workflow '{row['workflow_name']}', which no worker "
                f"registered on queue '{row['queue']}'"
            )
        elif row["workflow_registered"] is None and not row["paused"]:
            unknown.append(row["name"])
    details = {"schedules": len(rows), "failures": failures, "unverified": unknown}
    if failures:
        return Check(
            "schedules",
            "fail",
            f"{len(failures)} schedule(s) start a workflow that is not registered",
            details=details,
            remediation="register the workflow in the App its workers run (App(workflows=[...])), or "
            "fix the schedule (harvest schedule update NAME --workflow ...)",
        )
    if not rows and not declared:
        return Check("schedules", "skip", "no schedule", details=details)
    if unknown:
        return Check(
            "schedules",
            "warn",
            f"{len(unknown)} schedule(s) on queues no worker registered: their workflows are unverified",
            details=details,
            remediation="start the workers of those queues before this gate",
        )
    return Check("schedules", "pass", f"{len(rows)} schedule(s); every workflow resolves", details=details)


def _identity(sql: SqlApi, shard: int) -> Check:
    """The database is the shard it is configured as (harvest.get_shard_id)."""
    try:
        found = sql.get_shard_id()
    except Exception as exc:
        return Check(
            "identity",
            "fail",
            _first_line(exc),
            remediation=f"run harvest migrate run --shard-id {shard} against it",
        )
    if found != shard:
        return Check(
            "identity",
            "fail",
            f"the database of shard {found} is configured as shard {shard}",
            details={"configured": shard, "found": found},
            remediation=f"point shards.urls.{shard} at shard {shard}'s database",
        )
    return Check("identity", "pass", f"the database is shard {shard}", details={"shard_id": found})


def overall(checks: list[Check]) -> str:
    worst = max((RANK[c.status] for c in checks), default=0)
    return {0: "pass", 1: "warn", 2: "fail"}[worst]
