"""Shard health and the stranded-work gauge (docs/sharding.md, "Shard health and adding a shard").

:func:`shard_health` reads every configured shard on its own connection (read-only, a short
connect timeout) and answers one row per shard: its roles, whether it answers, its schema and
identity, its live and stale workers, the declared queues no live worker polls, its scheduler
freshness, its queue and dead-letter pressure, its stranded work and its cross-shard children
both ways (``harvest.get_shard_health``, one round trip), with
machine-readable reason codes and a readiness of ``ready``, ``degraded`` or ``unavailable``.
``pressure=False`` reads only what the readiness gates on (``harvest.get_shard_readiness``: index
probes, where the per-queue counts read every task): ``/health/ready``'s read.
A shard that cannot be inspected is a row that says so, never an exception: the answer for the
other shards stands. ``harvest shard health`` and ``harvest preflight`` print it.
:func:`retire_check` reads from those rows whether a shard's cross-shard children let it be
retired (``harvest shard health --retiring-shard N``).

:func:`probe_shard` asks one shard whether it is alive as itself (``harvest shard
release-owed-ends N`` refuses to release the ends owed to a shard that is).

:func:`stranded_work` is the gauge alone (``harvest.count_stranded_tasks`` on each shard), for
a metrics exporter: per shard, claimable tasks per queue that no live worker of that shard
polls, or None for a shard that could not be read.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from datetime import UTC, datetime
from typing import Any

from harvest.core.errors import HarvestError
from harvest.db import SCHEMA_VERSION
from harvest.db.connection import (
    SERVER_FULL_WORDS,
    DatabaseError,
    connect,
    one_line,
    read_only,
    redact,
    schema_missing,
)
from harvest.db.migrate import FunctionDrift, read_function_drift, read_versions
from harvest.db.sqlapi import SqlApi, translated_errors
from harvest.db.steps import run_steps
from harvest.shard.router import ShardRouter

__all__ = [
    "READINESS",
    "REASONS",
    "overall_readiness",
    "probe_shard",
    "retire_check",
    "scheduler_freshness",
    "shard_health",
    "shard_roles",
    "stranded_work",
]

# Worst last: the overall readiness is the worst of the gating rows.
READINESS = ("ready", "degraded", "unavailable")

# Each reason code, and the readiness it leaves a shard at (at best).
REASONS = {
    "not_configured": "unavailable",  # no url for it in this process (shards.urls)
    "unreachable": "unavailable",  # the database did not answer
    "identity_mismatch": "unavailable",  # the database is another shard's
    "schema_migration_missing": "degraded",  # no Harvest schema, or migrations or function files pending
    "schema_ahead": "degraded",  # migrated by a newer Harvest than this one
    "no_live_worker": "degraded",  # no active, fresh worker polls this shard
    "queue_uncovered": "degraded",  # a declared queue with no live worker here
    "stranded_work": "degraded",  # claimable work on a queue no live worker here polls
    "scheduler_stale": "degraded",  # an unpaused schedule overdue: no scheduler ticks this shard
    # its schema version is this release's, its SQL functions are not: a file an older release's
    # run applied, a function replaced by hand since (releases change functions/ without a migration)
    "functions_stale": "degraded",
}

# A scheduler ticks each shard it polls with the scanner (every scan_interval, 1 s by default), and
# each tick moves every due schedule's next due time on (a slot fired, skipped or missed). An unpaused
# schedule due longer ago than this is one no scheduler has ticked: scheduler_stale.
SCHEDULER_STALE_AFTER_SECS = 60


def scheduler_freshness(schedules: Mapping[str, Any] | None, observed_at: str) -> dict[str, Any]:
    """A shard's scheduler freshness from ``get_shard_health``'s ``schedules`` (the unpaused
    schedules and the oldest due time among them) at its ``observed_at``: ``not_applicable`` with
    no unpaused schedule, else ``fresh`` or ``stale`` (overdue past SCHEDULER_STALE_AFTER_SECS);
    ``unknown`` without it (the shard's functions are of a release before it: the key came with
    no migration, so the schema version does not tell)."""
    if schedules is None:
        return {
            "status": "unknown",
            "reason": "this shard's harvest.get_shard_health predates scheduler freshness: "
            "run harvest migrate run against it",
        }
    active = int(schedules["active"])
    if not active:
        return {"status": "not_applicable", "reason": "no unpaused schedule on this shard", "active": 0}
    oldest = schedules["oldest_due_at"]
    overdue = max(0.0, (datetime.fromisoformat(observed_at) - datetime.fromisoformat(oldest)).total_seconds())
    return {
        "status": "stale" if overdue > SCHEDULER_STALE_AFTER_SECS else "fresh",
        "active": active,
        "oldest_due_at": oldest,
        "overdue_secs": round(overdue, 3),
        "stale_after_secs": SCHEDULER_STALE_AFTER_SECS,
    }


def shard_roles(router: ShardRouter, shard: int, candidate: int | None = None) -> list[str]:
    """The roles a shard has in this configuration (readable, writable, reserved, default,
    candidate)."""
    roles = [
        name
        for name, member in (
            ("readable", shard in router.readable),
            ("writable", shard in router.writable),
            ("reserved", shard in router.reserved),
            ("default", shard == router.default),
        )
        if member
    ]
    if shard == candidate:
        roles.append("candidate")
    return roles


def _first_line(exc: BaseException, dsn: str | None) -> str:
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return redact(text, dsn) if dsn else redact(text)


def _functions(drift: FunctionDrift | None, reasons: list[str]) -> dict[str, Any]:
    """A shard's functions against this release's (read where its schema version is this
    release's): ``fresh``, ``stale`` (functions_stale: `harvest migrate run` applies them) or
    ``newer`` (a newer release's run: this process is the one behind, as in a rolling deploy)."""
    if drift is None:
        return {"status": "fresh"}
    if drift.stale:
        reasons.append("functions_stale")
    return {**drift.to_json(), "reason": drift.describe()}


def _facts(sql: SqlApi, queues: list[str] | None, pressure: bool) -> Any:
    """``get_shard_health``'s facts, or with ``pressure`` False ``get_shard_readiness``'s (no
    per-queue counts); a shard whose functions predate it answers the full report."""
    if pressure:
        return sql.get_shard_health(queues)
    try:
        return sql.get_shard_readiness(queues)
    except DatabaseError as exc:
        if not schema_missing(exc):
            raise
    return sql.get_shard_health(queues)


def _children(facts: Mapping[str, Any]) -> dict[str, Any] | None:
    """A shard's cross-shard children both ways from ``get_shard_health``: ``driving`` (the
    children its pump drives, by ``target_shard``) and ``owed_ends`` (the child ends it owes, by
    ``parent_shard``); None from a shard whose functions predate them."""
    if "cross_shard_children" not in facts:
        return None
    return {"driving": facts["cross_shard_children"], "owed_ends": facts["owed_child_ends"]}


def retire_check(data: Mapping[str, Any], shard: int) -> dict[str, Any]:
    """Whether shard ``shard`` may be retired behind a shard-level forward as far as its
    cross-shard children go (docs/sharding.md, "Retiring the shard of a child"), from
    :func:`shard_health`'s rows: no child end owed on it to a parent elsewhere, and no other
    shard driving a child on it. ``clear`` is True or False, or None when a shard it needs could
    not be read (``unread``): it cannot tell.

    The shards it needs: N, every readable shard, and every other shard given a url (one out of
    ``shards.readable``, a shard on its way in or out, can still hold a parent driving a child on
    N). Each is read (:func:`shard_health` reads every shard with a url); one whose children
    could not be read (unreachable, or functions older than this release) is in ``unread``. A
    shard neither readable nor given a url (a candidate without one) is nothing to read.
    ``unread_reasons`` says why each was not read, as a reason code of its row
    (``not_configured`` for N itself when this process has no url for it)."""
    owed: list[dict[str, Any]] = []
    children: list[dict[str, Any]] = []
    unread: dict[int, str] = {}
    found = False
    for row in data["shards"]:
        facts = row.get("children")
        if row["shard_id"] == shard:
            found = True
        if facts is None:
            if row["shard_id"] == shard or _needed(row):
                unread[row["shard_id"]] = _unread_reason(row)
            continue
        if row["shard_id"] == shard:
            owed = [o for o in facts["owed_ends"] if o["parent_shard"] != shard]
        else:
            children += [
                {"parent_shard": row["shard_id"], "children": c["children"]}
                for c in facts["driving"]
                if c["target_shard"] == shard
            ]
    if not found:
        unread[shard] = "not_configured"
    clear = False if owed or children else (None if unread else True)
    return {
        "shard": shard,
        "clear": clear,
        "owed_ends": owed,
        "children": children,
        "unread": sorted(unread),
        "unread_reasons": [{"shard_id": n, "reason": unread[n]} for n in sorted(unread)],
    }


# Why a shard's children could not be read, from its row's reason codes, most telling first
# (a shard answering with functions older than this release's has none of them: functions_stale).
UNREAD_REASONS = (
    "not_configured",
    "unreachable",
    "identity_mismatch",
    "schema_migration_missing",
    "schema_ahead",
)


def _unread_reason(row: Mapping[str, Any]) -> str:
    """The reason code that says why ``row``'s children were not read (never a URL)."""
    codes = row.get("reason_codes") or []
    return next((code for code in UNREAD_REASONS if code in codes), "functions_stale")


def _needed(row: Mapping[str, Any]) -> bool:
    """Whether the retire check needs shard ``row``'s children: a readable shard, or one given
    a url (its row not ``not_configured``), readable or not."""
    return "readable" in row["roles"] or "not_configured" not in row["reason_codes"]


def _inspect(
    shard: int, dsn: str, queues: list[str] | None, row: dict[str, Any], connect_timeout: int, pressure: bool
) -> None:
    """Fill ``row`` with what the shard's database says (reasons appended as found); its
    ``queues`` and ``pressure`` only with ``pressure``."""
    reasons: list[str] = row["reason_codes"]
    try:
        conn = connect(dsn, autocommit=True, connect_timeout=connect_timeout)
    except HarvestError as exc:
        reasons.append("unreachable")
        row["error"] = _first_line(exc, dsn)
        return
    row["reachable"] = True
    with conn:
        read_only(conn, dsn)
        sql = SqlApi(conn)
        schema = row["schema"]
        found, functions = run_steps(read_versions(), sql)
        if found is None:
            reasons.append("schema_migration_missing")
            row["error"] = f"no Harvest schema: run harvest migrate run --shard-id {shard} against it"
            return
        schema["version"] = found
        if found < SCHEMA_VERSION:
            reasons.append("schema_migration_missing")
        elif found > SCHEMA_VERSION:
            reasons.append("schema_ahead")
        elif functions != found:
            # a migrate run stopped after its migrations: the older release's functions
            reasons.append("schema_migration_missing")
            row["error"] = (
                f"its last `harvest migrate run` did not finish (schema version {found}, the "
                f"functions of {functions or 'an older release'}): run harvest migrate run against it"
            )
        else:
            schema["functions"] = _functions(run_steps(read_function_drift(), sql), reasons)
        try:
            identity = sql.get_shard_id()
        except DatabaseError as exc:
            if not schema_missing(exc):
                raise
            identity = None  # migrated before shard identity: counted as a missing migration above
            if "schema_migration_missing" not in reasons:
                reasons.append("schema_migration_missing")
        schema["identity"] = identity
        schema["identity_matches"] = identity == shard if identity is not None else None
        if identity is not None and identity != shard:
            reasons.append("identity_mismatch")
            row["error"] = f"the database of shard {identity} is configured as shard {shard}"
            return
        try:
            facts = _facts(sql, queues, pressure)
        except DatabaseError as exc:
            if not schema_missing(exc):
                raise
            if "schema_migration_missing" not in reasons:
                reasons.append("schema_migration_missing")
            row["error"] = "harvest.get_shard_health is missing: run harvest migrate run against it"
            return
    schema["ready"] = not any(r.startswith("schema") or r == "functions_stale" for r in reasons)
    workers = facts["workers"]
    row["workers"] = {"live": workers["live"], "stale": workers["stale"], "draining": workers["draining"]}
    declared: list[str] | None = queues  # (a probe's: the registered queues are not listed)
    if pressure:
        declared = queues if queues is not None else sorted({q["queue"] for q in facts["queues"]})
        row["queues"] = facts["queues"]
        row["pressure"] = {
            "pending": sum(q["pending"] for q in facts["queues"]),
            "claimable": sum(q["claimable"] for q in facts["queues"]),
            "running": sum(q["running"] for q in facts["queues"]),
            "oldest_claimable_at": min(
                (q["oldest_claimable_at"] for q in facts["queues"] if q["oldest_claimable_at"]), default=None
            ),
            "dead_letters": facts["dead_letters"],
            # A queue past 10,000 pending tasks is a block sample's estimate (absent: an older
            # shard's functions, which counted every task).
            "estimated": any(q.get("estimated") for q in facts["queues"]),
        }
        row["children"] = _children(facts)
    row["queue_coverage"] = {"declared": declared, "unpolled": facts["unpolled_queues"]}
    row["stranded"] = facts["stranded"]
    row["stranded_pending"] = facts["stranded_pending"]
    if not workers["live"]:
        reasons.append("no_live_worker")
    elif facts["unpolled_queues"]:
        reasons.append("queue_uncovered")
    if facts["stranded_pending"]:
        reasons.append("stranded_work")
    row["scheduler"] = scheduler_freshness(facts.get("schedules"), facts["observed_at"])
    if row["scheduler"]["status"] == "stale":
        reasons.append("scheduler_stale")


def _readiness(reasons: Iterable[str]) -> str:
    return max((REASONS[r] for r in reasons), key=READINESS.index, default="ready")


def overall_readiness(rows: Iterable[Mapping[str, Any]]) -> str:
    """The worst readiness of the rows that gate: the writable shards and the candidate."""
    gating = [r["readiness"] for r in rows if r["gates"]]
    return max(gating, key=READINESS.index, default="ready")


def shard_health(
    router: ShardRouter,
    urls: Mapping[int, str],
    *,
    candidate: int | None = None,
    queues: list[str] | None = None,
    connect_timeout: int = 5,
    pressure: bool = True,
) -> dict[str, Any]:
    """One row per configured shard (the router's readable shards, every shard with a url, and
    the candidate), and the overall readiness of the writable shards and the candidate.

    ``queues``: the declared queues to check coverage of (an App's), else each shard's
    registered ones. ``pressure`` False: each row without its per-queue counts (``queues`` and
    ``pressure`` None; ``queue_coverage.declared`` is ``queues``), read at index-probe cost for a
    probe; the readiness is the same. Never raises for one shard: its row carries the reason."""
    shards: list[int] = sorted({*router.readable, *urls, *([candidate] if candidate is not None else [])})
    rows = []
    for shard in shards:
        roles = shard_roles(router, shard, candidate)
        row: dict[str, Any] = {
            "shard_id": shard,
            "roles": roles,
            "gates": "writable" in roles or shard == candidate,
            "reachable": False,
            "schema": {
                "version": None,
                "expected": SCHEMA_VERSION,
                "ready": False,
                "identity": None,
                "functions": None,
            },
            "workers": None,
            "queue_coverage": None,
            "scheduler": None,
            "pressure": None,
            "stranded": None,
            "stranded_pending": None,
            "children": None,
            "reason_codes": [],
        }
        dsn = urls.get(shard)
        if dsn is None:
            row["reason_codes"].append("not_configured")
            row["error"] = (
                f"no url for shard {shard}: set shards.urls.{shard} (HARVEST_SHARDS__URLS__{shard})"
            )
        else:
            try:
                _inspect(shard, dsn, queues, row, connect_timeout, pressure)
            except (HarvestError, DatabaseError) as exc:  # it answered something unexpected: say so, go on
                if row["reachable"]:
                    row["reason_codes"].append("unreachable")
                    row["reachable"] = False
                elif "unreachable" not in row["reason_codes"]:
                    row["reason_codes"].append("unreachable")
                row["error"] = _first_line(exc, dsn)
        row["readiness"] = _readiness(row["reason_codes"])
        rows.append(row)
    return {
        "readiness": overall_readiness(rows),
        "observed_at": datetime.now(UTC).isoformat(timespec="seconds").replace("+00:00", "Z"),
        "candidate_shard": candidate,
        "shards": rows,
    }


def probe_shard(
    router: ShardRouter, urls: Mapping[int, str], shard: int, *, connect_timeout: int = 5
) -> dict[str, Any]:
    """Whether shard ``shard`` is alive: not retired behind a forward (``shards.forwards``, which
    exists in the config only: its database, until dropped, still answers as itself), and its
    database (``urls``) answers as a migrated Harvest shard with that id. Answers ``{"shard_id",
    "alive", "reason", "detail"}``: ``reason`` is ``alive``, ``retired``, ``not_configured``,
    ``unreachable``, ``busy`` (its server answered but took no connection: at its connection
    limit, starting up, in recovery), ``schema_missing`` or ``identity_mismatch``; ``detail``
    says why in words, never a URL or a password. One short read-only connection; never raises."""

    def answer(reason: str, detail: str) -> dict[str, Any]:
        return {"shard_id": shard, "alive": reason == "alive", "reason": reason, "detail": detail}

    if shard in router.forwards:
        return answer("retired", f"retired: shards.forwards sends its ids to shard {router.forwards[shard]}")
    dsn = urls.get(shard)
    if dsn is None:
        return answer("not_configured", f"no url for it in this process (shards.urls.{shard})")
    try:
        with connect(dsn, autocommit=True, connect_timeout=connect_timeout) as conn:
            read_only(conn, dsn)
            sql = SqlApi(conn)
            found, _ = run_steps(read_versions(), sql)
            if found is None:
                return answer("schema_missing", "its database has no Harvest schema")
            try:
                identity = sql.get_shard_id()
            except DatabaseError as exc:
                if not schema_missing(exc):
                    raise
                return answer("schema_missing", "its database was migrated before shard identity")
    except (HarvestError, DatabaseError) as exc:
        cause = _cause(exc, dsn)
        if _SERVER_UP.search(cause):
            return answer("busy", f"its server answered but took no connection: {cause}")
        return answer("unreachable", f"unreachable: {cause}")
    if identity != shard:
        return answer("identity_mismatch", f"its url reaches the database of shard {identity}")
    return answer("alive", f"its database answers as shard {shard}")


# A connect the server itself turned away for now: it is up (a live shard at its connection limit,
# restarting, in recovery), not gone. libpq reports these with no SQLSTATE, in words
# (harvest.db.pools.database_unreachable); refused, not taken for a shard gone for good.
_SERVER_UP = re.compile(
    SERVER_FULL_WORDS + r"|the database system is "
    r"(?:starting up|shutting down|in recovery mode|not (?:yet )?accepting connections)",
    re.IGNORECASE,
)


def _cause(exc: BaseException, dsn: str) -> str:
    """Why a shard's database could not be read, in one line naming neither its host nor its
    password: a failed connect's driver error (connect's own message names host and database)."""
    cause = exc.__context__ if isinstance(exc, HarvestError) else exc
    if isinstance(cause, DatabaseError):
        return redact(one_line(cause), dsn)
    return type(exc).__name__


def stranded_work(urls: Mapping[int, str], *, connect_timeout: int = 5) -> dict[int, dict[str, int] | None]:
    """The stranded-work gauge of each shard: ``{shard: {queue: claimable tasks}}`` for the
    queues no live worker of that shard polls (``{}`` is healthy), None for a shard that could
    not be read. What ``harvest_shard_stranded_pending{shard, queue}`` exports."""
    out: dict[int, dict[str, int] | None] = {}
    for shard, dsn in sorted(urls.items()):
        try:
            with connect(dsn, autocommit=True, connect_timeout=connect_timeout) as conn:
                read_only(conn, dsn)
                with translated_errors():
                    out[shard] = {r["queue"]: r["pending"] for r in SqlApi(conn).count_stranded_tasks()}
        except (HarvestError, DatabaseError):
            out[shard] = None
    return out
