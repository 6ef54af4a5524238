"""The migration runner: ordered, versioned, exactly-once schema upgrades.

A migration is a plain ``NNNN_description.sql`` file. It runs in one transaction
together with its ledger row, so a failure leaves neither the change nor the
record (the runner owns the transaction: a file holding BEGIN, COMMIT or ROLLBACK is
refused). A file whose first lines carry ``-- harvest:no-transaction`` runs in
autocommit, one statement at a time (``CREATE INDEX CONCURRENTLY`` needs that);
it must be idempotent because nothing can roll it back.

Concurrent migrators are serialised by a session advisory lock held for the whole
run, so each migration applies once whoever runs it; the others wait for it between short
tries (see Migrator._lock). After Harvest's migrations (and before the included sets', which
may call the SQL API), every file in ``functions/`` (``CREATE OR REPLACE``, repeatable) is applied when its
checksum differs from the one recorded, so an unchanged file is not re-run; the files, their
checksums and the functions' grants commit as one step (Migrator._apply_all_functions), and a
run with Harvest migrations to apply marks every file stale before the first of them, so a run
stopped anywhere leaves the rest pending, never a ledger that says it is done.

A lock a migration needs is waited for at most ``lock_timeout`` seconds per try: DDL waiting
behind a long transaction queues every later query on its table behind it (PostgreSQL grants
locks in order), so a migrator that waited without limit could stop every worker. A try that
times out rolls back whole (a migration, or the functions' step) or, in a no-transaction file,
gives up its one statement; the next try follows a growing pause, until ``lock_wait`` seconds
in all, then the run stops naming the sessions it waited for (see Migrator._retrying). The wait
for the migrate lock itself (another migrator) blocks no one and stays unbounded.

The run's session has its search_path pinned to pg_catalog, pg_temp (connection.pin_search_path):
Harvest's migrations, its function files, harvest._secure_functions, harvest._audit and every
statement the runner writes run under it, never under the login's path, where a lower role's
function could be chosen over a built-in and run with the owner's rights (docs/security.md, "Whose
search_path"). An included set's file (``--include-dir``) runs under its login's path, as it was
written for it. Between files the session is reset (Migrator._reset_session) and pinned again: a
migration's plain SET (of search_path, a role) must not change what the next file, or the
functions' step, means.

A statement runs without a statement_timeout (Migrator._unbound_statements), whatever the login
or the DSN sets: cancelled midway, a data migration never applies and a concurrent index build
leaves an INVALID index. What must not run long is the wait for a lock, which lock_timeout bounds.

Each function file's ledger row names the release (the package's version) that applied it: a
release does not replace, nor retire, a file a newer release applied (two patch releases share
a schema version and differ in their functions/), unless told to (``allow_downgrade``).
"""

from __future__ import annotations

import functools
import hashlib
import importlib.metadata
import logging
import re
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar, cast

import psycopg
from psycopg.types.json import Jsonb

from harvest.core.durations import plain_number
from harvest.core.errors import ConfigError, HarvestError, SchemaMismatch, from_database_error
from harvest.core.ids import MAX_SHARD, is_shard_number
from harvest.db import (
    DEFAULT_LOCK_TIMEOUT,
    DEFAULT_LOCK_WAIT,
    SCHEMA_VERSION,
    paths,
    pooler,
    search_indexes,
    sqlapi,
)
from harvest.db.connection import (
    DatabaseError,
    connect,
    describe_dsn,
    failure_reason,
    pin_search_path,
    probe_connect,
    schema_missing,
    set_server_end,
    take_session_lock,
    unbound_statements,
)
from harvest.db.sqlapi import AsyncSqlApi, SqlApi
from harvest.db.steps import Sql, Steps, arun_steps, run_steps

log = logging.getLogger("harvest.db.migrate")

MIGRATION_NAME = re.compile(r"^(\d{4})_([a-z0-9_]+)\.sql$")
NO_TRANSACTION_MARK = "-- harvest:no-transaction"
CORE_SET = "harvest"
# Any constant works; it only has to be the same for every migrator.
MIGRATE_LOCK_KEY = 0x48415256  # "HARV"
# The function ledger's checksum of a file to apply again: what a run that has migrations to
# apply writes first, so that one stopped before its functions' step leaves them all pending.
STALE_CHECKSUM = "stale"
# How the function ledger reads (Migrator._function_ledger) a file whose live functions are not
# its text: replaced after it was applied, so not applied whatever its row says.
CHANGED_CHECKSUM = "changed since applied"
# PEP 440's public versions (what importlib.metadata answers for a built package), ordered as PEP
# 440 orders them, with no dependency on `packaging`: N(.N)*[{a|b|rc}N][.postN][.devN][+local],
# the local label ignored. Anything else ("unknown": a checkout run without being installed) and
# a ledger row from before migration 0085 (no release) count as the oldest release.
RELEASE_VERSION = re.compile(
    r"^v?(\d+(?:\.\d+)*)(?:(a|b|rc)(\d+))?(?:\.post(\d+))?(?:\.dev(\d+))?(?:\+[a-z0-9.]+)?$"
)
PRE_RELEASES = ("a", "b", "rc")
MIGRATION_NOT_RECORDED = "nothing from this file was recorded, fix it and run again"
FUNCTIONS_NOT_RECORDED = "no function file of this run was recorded, fix it and run again"
# the pause after a try that timed out, doubling up to the last: the queue behind it drains
FIRST_LOCK_PAUSE = 0.5
LAST_LOCK_PAUSE = 10.0
# A blocker's query is shown by its first line, quoted literals elided (a password in an ALTER
# ROLE of the same transaction must not reach a deploy log), at most this long.
BLOCKER_QUERY_CHARS = 120
QUOTED_LITERAL = re.compile(r"'(?:[^']|'')*'")
T = TypeVar("T")


class MigrationError(HarvestError):
    """A migration failed; nothing of it was recorded."""


# The oldest server the schema and the SQL API run on (docs/install.md, "Which database"):
# migration 0027's shard_arrivals.copied_events is an int8multirange, a type PostgreSQL 14 brought
# (on 13.23 the run stopped at 0027, its 25 migrations before it applied). Before, the floor was
# 13, for gen_random_uuid() (on 12 every start without a workflow id failed later).
MIN_SERVER_VERSION = 140000


def version_text(server_version_num: int) -> str:
    """``server_version_num`` as PostgreSQL names the release: 120022 -> 12.22, 90624 -> 9.6.24."""
    if server_version_num >= 100000:
        return f"{server_version_num // 10000}.{server_version_num % 10000}"
    return f"{server_version_num // 10000}.{server_version_num // 100 % 100}.{server_version_num % 100}"


def require_server_version(server_version_num: int) -> None:
    """Refuse a server older than MIN_SERVER_VERSION before anything is read or written."""
    if server_version_num < MIN_SERVER_VERSION:
        raise MigrationError(
            f"this server is PostgreSQL {version_text(server_version_num)}; Harvest needs PostgreSQL "
            f'{version_text(MIN_SERVER_VERSION).split(".")[0]} or newer (docs/install.md, "Which database"): '
            "nothing was changed"
        )


class LockTimedOut(Exception):
    """One try of a statement waited ``lock_timeout`` for a lock and gave up (SQLSTATE 55P03);
    Migrator._retrying tries the unit again or says who held the lock."""

    def __init__(self, where: str, not_recorded: str) -> None:
        super().__init__(where)
        self.where = where
        self.not_recorded = not_recorded


@dataclass(frozen=True)
class Blocker:
    """A session a migrator's statement waited for (pg_blocking_pids)."""

    pid: int
    login: str | None
    application: str | None
    state: str | None
    query: str | None
    transaction_secs: float | None

    def describe(self) -> str:
        first = (self.query or "").strip().splitlines()[0] if (self.query or "").strip() else ""
        first = QUOTED_LITERAL.sub("'…'", first)
        if len(first) > BLOCKER_QUERY_CHARS:
            first = first[: BLOCKER_QUERY_CHARS - 1] + "…"
        held = (
            f", in a transaction for {self.transaction_secs:.0f}s"
            if self.transaction_secs is not None
            else ""
        )
        query = f" running `{first}`" if first else " (its query is not visible to this login)"
        return (
            f"pid {self.pid} (login {self.login or '?'}, application {self.application or '-'}, "
            f"{self.state or 'state unknown'}{held}){query}"
        )


def waits_harmlessly(node: dict[str, Any]) -> bool:
    """A statement (its parse tree: :func:`statements`) whose lock wait queues no one: CREATE
    INDEX, DROP INDEX and REINDEX CONCURRENTLY take a lock that reads and writes do not conflict
    with, and wait for the transactions before them. Given up midway they would leave an INVALID
    index behind (that a re-run's IF NOT EXISTS then skips), so they wait without limit."""
    for kind in ("IndexStmt", "DropStmt"):
        if node.get(kind, {}).get("concurrent"):
            return True
    params = node.get("ReindexStmt", {}).get("params", ())
    return any(p.get("DefElem", {}).get("defname") == "concurrently" for p in params)


class BlockerWatch:
    """Who a try waits for. The waiting session cannot ask (it is inside its statement), so a
    thread asks pg_blocking_pids from a second connection every ``interval`` while the try runs,
    opened at the first ask (a run whose units all finish quickly opens none) and kept for the
    run. The last non-empty answer is kept: the one that names the session to end."""

    def __init__(self, dsn: str, interval: float) -> None:
        self.dsn = dsn
        self.interval = interval
        self.conn: psycopg.Connection | None = None
        self.blockers: list[Blocker] = []

    @contextmanager
    def watching(self, pid: int) -> Iterator[None]:
        done = threading.Event()
        thread = threading.Thread(
            target=self._watch, args=(pid, done), name="harvest-lock-watch", daemon=True
        )
        thread.start()
        try:
            yield
        finally:
            done.set()
            thread.join()

    def _watch(self, pid: int, done: threading.Event) -> None:
        while not done.wait(self.interval):
            found = self._ask(pid)
            if found:
                self.blockers = found

    def _ask(self, pid: int) -> list[Blocker]:
        try:
            if self.conn is None:
                self.conn = connect(self.dsn, autocommit=True)
                pin_search_path(self.conn)  # (the owner's session too: unnest() is polymorphic)
            rows = self.conn.execute(
                "SELECT a.pid, a.usename, a.application_name, a.state, a.query,"
                " extract(epoch FROM now() - a.xact_start)::float8"
                " FROM unnest(pg_catalog.pg_blocking_pids(%s)) AS b(pid)"
                " JOIN pg_catalog.pg_stat_activity AS a ON a.pid = b.pid ORDER BY a.xact_start",
                (pid,),
            ).fetchall()
        except (psycopg.Error, HarvestError):  # a probe that fails says nothing; the run goes on
            return []
        return [Blocker(*row) for row in rows]

    def close(self) -> None:
        if self.conn is not None:
            self.conn.close()
            self.conn = None


@dataclass(frozen=True)
class Migration:
    set_name: str
    version: str
    name: str
    path: Path
    sql: str
    transactional: bool

    @property
    def checksum(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()

    @property
    def label(self) -> str:
        return f"{self.set_name}/{self.path.name}"


@dataclass
class MigrationStatus:
    migration: Migration
    applied_at: datetime | None
    # applied, and its file differs from the one recorded: it is not run again
    changed: bool = False


@dataclass(frozen=True)
class UnknownMigration:
    """A ledger row of a set this run knows, whose file this package (or directory) lacks."""

    set_name: str
    version: str
    name: str
    applied_at: datetime

    @property
    def label(self) -> str:
        return f"{self.set_name}/{self.version}_{self.name}.sql"


@dataclass
class StatusReport:
    migrations: list[MigrationStatus]
    stale_functions: list[Path]
    # ledger rows of function files this package no longer has (moved or removed): a run deletes them
    retired_functions: list[str]
    unknown: list[UnknownMigration]  # applied, and not in this package: the database is ahead
    # the refusal, when some set's database version is the newer, or (same schema) function
    # files this package would replace were applied by a newer release
    ahead: SchemaMismatch | None
    # each recorded function file and the release that applied it (None: before migration 0085)
    function_releases: dict[str, str | None] = field(default_factory=dict)
    # functions whose live body is not their file's although the ledger says it is applied
    # (replaced after the run: by hand, or from another release's file); their files are stale
    changed_functions: list[str] = field(default_factory=list)


@dataclass
class RunReport:
    applied: list[Migration] = field(default_factory=list)
    applied_non_transactional: list[Migration] = field(default_factory=list)
    functions_applied: list[str] = field(default_factory=list)
    functions_retired: list[str] = field(default_factory=list)
    # applied (or retired) over a newer release's rows, with allow_downgrade: {file: that release}
    functions_downgraded: dict[str, str] = field(default_factory=dict)
    # run(shard_id=N): harvest.set_shard_id's answer {shard_id, previous_shard_id, changed}
    # (a dry run: what it would be, "changed" meaning it would change)
    shard: dict[str, Any] | None = None
    # the declared search attribute indexes built (or built again over an INVALID one) after
    # migrating: {key: "built" | "rebuilt" | "already indexed" (built meanwhile by a `harvest
    # search-attr index` it waited for, or made by hand)} (harvest.db.search_indexes.build_declared);
    # a dry run's, those it would build: {key: type}
    search_attr_indexes: dict[str, str] = field(default_factory=dict)


# A row of the migration ledger (set_name, version, name, applied_at, checksum), and the function
# ledger: each file's checksum and the release that applied it.
LedgerRow = tuple[str, str, str, datetime, str]
FunctionLedger = dict[str, tuple[str, str | None]]


def is_transactional(sql: str) -> bool:
    head = [line.strip() for line in sql.splitlines()[:5]]
    return NO_TRANSACTION_MARK not in head


def load_set(directory: Path, set_name: str) -> list[Migration]:
    """Read one migration set; reject names that would make the order ambiguous."""
    try:
        listed = sorted(directory.glob("*.sql")) if directory.is_dir() else None
    except OSError as exc:  # (a name too long, a directory it may not read)
        raise ConfigError(f"migration directory {directory} cannot be read: {exc.strerror or exc}") from None
    if listed is None:
        raise ConfigError(f"migration directory {directory} does not exist")
    found: dict[str, Migration] = {}
    for path in listed:
        match = MIGRATION_NAME.match(path.name)
        if not match:
            raise ConfigError(
                f"{path}: migration files must be named NNNN_description.sql "
                "(four digits, lowercase words joined by _)"
            )
        version, name = match.groups()
        if version in found:
            raise ConfigError(f"{path}: version {version} is also used by {found[version].path.name}")
        try:
            sql = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise ConfigError(f"{path} cannot be read as UTF-8 text: {exc}") from None
        found[version] = Migration(set_name, version, name, path, sql, is_transactional(sql))
    return [found[v] for v in sorted(found)]


def discover(include_dirs: Iterable[Path] = ()) -> list[Migration]:
    own = paths.migrations_dir()
    migrations = load_set(own, CORE_SET)
    seen: dict[str, Path] = {}
    for directory in include_dirs:
        directory = Path(directory)
        set_name = directory.resolve().name
        # Under another set's name, Harvest's own files would all run a second time.
        if directory.resolve() == own.resolve():
            raise ConfigError(
                f"--include-dir {directory} is Harvest's own migrations directory, which every run "
                "applies: leave it out (--include-dir is for an application's own sets)"
            )
        # The ledger keys a set by its directory's name: a set named like Harvest's own, or
        # like another included one, would mix its versions into theirs.
        if set_name == CORE_SET:
            raise ConfigError(
                f"--include-dir {directory}: a migration set may not be named "
                f"{CORE_SET!r}, Harvest's own set has that name; rename the directory"
            )
        if set_name in seen:
            raise ConfigError(
                f"--include-dir {directory} and {seen[set_name]} have the same name "
                f"{set_name!r}: the ledger would mix their versions; rename one"
            )
        seen[set_name] = directory
        migrations.extend(load_set(directory, set_name))
    return migrations


def latest_core_version() -> str:
    """The newest migration's version, read from the files (the migrator's view; what a client
    or a worker requires is the baked-in ``harvest.db.SCHEMA_VERSION``, equal to it)."""
    return load_set(paths.migrations_dir(), CORE_SET)[-1].version


@dataclass(frozen=True)
class Statement:
    """One statement of a file: the line it starts on (a failure's place), its text, its parse
    tree (what transaction_control and waits_harmlessly read): libpg_query's JSON form, one key
    naming the statement's node type, e.g. ``{"TransactionStmt": {"kind": "TRANS_STMT_BEGIN"}}``."""

    line: int
    text: str
    node: dict[str, Any]


def statements(sql: str) -> list[Statement]:
    """Split SQL into its statements, parsing it once (ParseError: a syntax error anywhere).

    The tree is read as libpg_query's JSON (a tenth of the CPU of pglast's Python objects: 0.06
    against 0.36 s for Harvest's migrations and function files, parsed at each fresh install);
    its locations count UTF-8 bytes, so the file is cut as bytes."""
    import json

    import pglast.parser  # the parser is needed only when a migrator runs: `import harvest` stays light

    data = sql.encode()
    result = []
    for raw in json.loads(pglast.parser.parse_sql_json(sql)).get("stmts", ()):
        start = raw.get("stmt_location", 0)  # (a zero is left out of the JSON)
        # (the last statement, with no ";", has no length: it runs to the end; blanks after are cut)
        end = start + raw["stmt_len"] if raw.get("stmt_len") else len(data)
        text = data[start:end].decode().rstrip()
        result.append(Statement(data.count(b"\n", 0, start) + 1, text, raw["stmt"]))
    return result


# The TransactionStmt kinds that stay inside the runner's transaction.
_INSIDE_A_TRANSACTION = frozenset({"TRANS_STMT_SAVEPOINT", "TRANS_STMT_RELEASE", "TRANS_STMT_ROLLBACK_TO"})


def transaction_control(parsed: list[Statement]) -> tuple[int, str] | None:
    """The line and keyword of the first statement that would end or open the runner's
    transaction (BEGIN, COMMIT, ROLLBACK, PREPARE TRANSACTION, ...), or None. A COMMIT
    in a file kept its first half with no ledger row when a later statement failed; a ROLLBACK
    undid the file and the runner recorded it as applied; a BEGIN in a no-transaction file wrapped
    the rest in a block. Savepoints stay inside the transaction and are allowed."""
    for statement in parsed:
        node, text = statement.node.get("TransactionStmt"), statement.text
        if node is not None and node.get("kind") not in _INSIDE_A_TRANSACTION:
            # (the location may point at the whitespace before)
            blank = text[: len(text) - len(text.lstrip())]
            return statement.line + blank.count("\n"), text.split(None, 1)[0].rstrip(";").upper()
    return None


def function_files() -> list[Path]:
    return sorted(paths.functions_dir().glob("*.sql"))


def file_checksum(path: Path) -> str:
    """The ledger checksum of a functions/ file: SHA-256 of its bytes, exactly as on disk."""
    return hashlib.sha256(path.read_bytes()).hexdigest()


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


@dataclass(frozen=True)
class ShippedFunctions:
    """This package's functions/ files as a process compares them with a database's
    (harvest.get_function_state): each file's ledger checksum, and for each function of schema
    harvest the files define, the file and (one whose body is text, not SQL-standard) the digest
    of its bodies (sha-256 of its bodies' sha-256s in order, an overload each), and the digest of
    them all (sha-256 of "name:digest" in name order)."""

    checksums: dict[str, str]
    files_of: dict[str, str]
    digests: dict[str, str]
    digest: str

    @property
    def names(self) -> list[str]:
        return sorted(self.digests)


@functools.cache
def shipped_functions() -> ShippedFunctions:
    """This package's :class:`ShippedFunctions`, read once per process (its files are parsed by
    libpg_query, as PostgreSQL reads them: a body is the text between its dollar quotes, what
    pg_proc.prosrc keeps; about 0.15 s)."""
    import json

    import pglast.parser  # (only when a check asks: `import harvest` stays light)

    checksums: dict[str, str] = {}
    files_of: dict[str, str] = {}
    bodies: dict[str, list[str]] = {}
    for path in function_files():
        data = path.read_bytes()
        checksums[path.name] = hashlib.sha256(data).hexdigest()
        tree = json.loads(pglast.parser.parse_sql_json(data.decode()))
        for raw in tree.get("stmts", ()):
            create = raw["stmt"].get("CreateFunctionStmt")
            if create is None:
                continue
            name = [part["String"]["sval"] for part in create["funcname"]]
            body = [
                option["DefElem"]["arg"]["List"]["items"][0]["String"]["sval"]
                for option in create.get("options", ())
                if option["DefElem"]["defname"] == "as"
            ]
            if len(name) != 2 or name[0] != "harvest":
                continue
            files_of.setdefault(name[1], path.name)
            if body:  # (a SQL-standard body, RETURN ..., is no text: pg_proc.prosrc is empty)
                bodies.setdefault(name[1], []).append(_sha256(body[0]))
    digests = {name: _sha256(",".join(sorted(shas))) for name, shas in bodies.items()}
    digest = _sha256(",".join(f"{name}:{d}" for name, d in sorted(digests.items())))
    return ShippedFunctions(checksums, files_of, digests, digest)


def listed(names: list[str], most: int = 3) -> str:
    """The first ``most`` names, then how many more (a one-line message's list)."""
    return ", ".join(names[:most]) + (f" and {len(names) - most} more" if len(names) > most else "")


@dataclass(frozen=True)
class FunctionDrift:
    """How a database's SQL functions differ from this package's (:func:`function_drift`)."""

    # function files the ledger does not record as applied with this package's text (an older or
    # newer release's, a run that did not finish), and recorded files this package lacks
    files: list[str] = field(default_factory=list)
    # functions whose live body is not this package's: replaced after `harvest migrate run`
    # (by hand, or from another release's file) although the ledger says their file is applied
    functions: list[str] = field(default_factory=list)
    # the releases newer than this one that applied a file of ``files``
    newer: list[str] = field(default_factory=list)
    # harvest.get_function_state is missing: the functions are a release's from before it
    unreadable: bool = False
    # something differs that a newer release's run does not explain: the database's functions
    # are behind this release's (False: only a newer release's files, a rolling deploy ahead)
    stale: bool = True

    def to_json(self) -> dict[str, Any]:
        return {
            "files": self.files,
            "functions": self.functions,
            "newer_releases": self.newer,
            "unreadable": self.unreadable,
            "status": "stale" if self.stale else "newer",
        }

    def describe(self) -> str:
        """One line: what differs, and what to do."""
        ours = _package_version()
        if self.unreadable:
            return (
                "its SQL functions are an older release's (harvest.get_function_state is missing), "
                f"this is Harvest {ours}: run `harvest migrate run` against it"
            )
        said = []
        if self.files:
            said.append(
                f"{len(self.files)} function file(s) not applied as this release ships them "
                f"({listed([f'functions/{f}' for f in self.files])})"
            )
        if self.functions:
            said.append(
                f"{len(self.functions)} function(s) replaced since `harvest migrate run` applied them "
                f"({listed([f'harvest.{f}' for f in self.functions])})"
            )
        text = f"its SQL functions are not those of Harvest {ours}: " + "; ".join(said)
        if not self.stale:
            return text + (
                f", applied by the newer Harvest {', '.join(self.newer)}: expected while a rolling "
                f"deploy replaces this process, otherwise upgrade it to {self.newer[-1]}"
            )
        return text + ": run `harvest migrate run` against it (it applies those files again)"


def function_drift(state: dict[str, Any], shipped: ShippedFunctions | None = None) -> FunctionDrift | None:
    """Judge harvest.get_function_state's answer against this package: None when the database's
    functions are this package's (the ledger records each file with this package's checksum and
    nothing else, and the live bodies are the files')."""
    shipped = shipped or shipped_functions()
    recorded: dict[str, dict[str, Any]] = state.get("files") or {}
    files = sorted(
        name
        for name, checksum in shipped.checksums.items()
        if (recorded.get(name) or {}).get("checksum") != checksum
    )
    files += sorted(set(recorded) - set(shipped.checksums))
    ours = release_order(_package_version())
    by_newer = {
        name: release
        for name in files
        if (release := (recorded.get(name) or {}).get("release")) and release_order(release) > ours
    }
    live: dict[str, str] = state.get("functions") or {}
    functions = (
        []
        if state.get("definitions") == shipped.digest
        # (a function of a file the ledger already lists differs as that file does: not named)
        else sorted(
            name
            for name, d in shipped.digests.items()
            if live.get(name) != d and shipped.files_of[name] not in files
        )
    )
    if not files and not functions:
        return None
    # (a newer release's file changes the bodies of its functions: that is not this one's lag)
    behind = [f for f in files if f not in by_newer] + [
        n for n in functions if shipped.files_of[n] not in by_newer
    ]
    newer = sorted(set(by_newer.values()), key=release_order)
    return FunctionDrift(files, functions, newer, stale=bool(behind))


def read_function_drift() -> Steps[FunctionDrift | None]:
    """The database's :class:`FunctionDrift` from this package (None: its functions are this
    package's), in one call of harvest.get_function_state: read it where the schema version is
    this package's (a schema behind or ahead is said first, and its functions differ anyway)."""
    shipped = shipped_functions()
    try:
        state = yield Sql(sqlapi.get_function_state, shipped.names, shipped.digest)
    except DatabaseError as exc:
        if not schema_missing(exc):
            raise
        return FunctionDrift(unreadable=True)
    return function_drift(state, shipped)


async def read_function_drift_for_boot(sql: AsyncSqlApi, what: str) -> FunctionDrift | None:
    """:func:`read_function_drift` for a boot's warning about ``what``: a read the login may not
    make (EXECUTE granted function by function, not through harvest_worker or harvest_reader) or
    that fails otherwise is one warning line, never a failed boot: the comparison is a warning's."""
    try:
        return await arun_steps(read_function_drift(), sql)
    except (DatabaseError, HarvestError) as exc:
        log.warning(
            "harvest: %s: could not compare its SQL functions with this release's (%s); "
            "`harvest migrate status` lists them",
            what,
            failure_reason(exc),
        )
        return None


def release_order(version: str | None) -> tuple[Any, ...]:
    """A sort key of a release's version: a newer release's is greater; two versions with equal
    keys are the same release; unknown versions (and None) are equal and below every other."""
    match = RELEASE_VERSION.match((version or "").strip().lower())
    if not match:
        return (0,)
    release, phase, pre, post, dev = match.groups()
    numbers = [int(n) for n in release.split(".")]
    while len(numbers) > 1 and numbers[-1] == 0:  # 1.2 is 1.2.0
        numbers.pop()
    if phase:
        stage = (1, PRE_RELEASES.index(phase), int(pre))
    elif dev is not None and post is None:
        stage = (0, 0, 0)  # 1.0.dev1 comes before 1.0a1
    else:
        stage = (2, 0, 0)  # the final release after its pre-releases
    return (
        1,
        tuple(numbers),
        stage,
        -1 if post is None else int(post),
        (0, int(dev)) if dev is not None else (1, 0),
    )


@dataclass(frozen=True)
class NewerFunctionFile:
    """A function file a run would replace (or retire) that a newer release applied."""

    file_name: str
    package_version: str


def downgrade_message(newer: list[NewerFunctionFile], ours: str) -> str:
    """Refusing to put this older release's function files back over a newer release's."""
    releases = sorted({f.package_version for f in newer}, key=release_order)
    newest = releases[-1]
    names = [f"functions/{f.file_name}" for f in newer]
    listed = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
    this = (
        f"Harvest {ours}"
        if release_order(ours) != (0,)
        else f"Harvest of an unknown version ({ours!r}: "
        + ("a checkout that is not installed)" if ours == "unknown" else "not a PEP 440 version)")
    )
    return (
        f"the database's SQL functions are a newer release's: {listed} applied by Harvest "
        f"{', '.join(releases)}, "
        f"this is {this}, which would put its older files back. Upgrade Harvest (the "
        f"package) to {newest} or later; to roll the functions back on purpose, run `harvest migrate "
        "run --allow-downgrade`"
    )


class Migrator:
    def __init__(
        self,
        dsn: str,
        include_dirs: Iterable[Path] = (),
        progress: Callable[[str], None] | None = None,
        *,
        lock_timeout: float = DEFAULT_LOCK_TIMEOUT,
        lock_wait: float = DEFAULT_LOCK_WAIT,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.monotonic,
    ):
        if not (lock_timeout >= 0 and lock_wait >= 0):  # (NaN too)
            raise ConfigError(
                f"--lock-timeout {lock_timeout} and --lock-wait {lock_wait} must be 0 or more seconds"
            )
        self.dsn = dsn
        self.migrations = discover(include_dirs)
        self.progress = progress or (lambda _msg: None)
        self.lock_timeout = lock_timeout
        self.lock_wait = lock_wait
        self.sleep = sleep
        self.clock = clock
        # what the last read of the function ledger found replaced (_function_ledger)
        self.changed_functions: list[str] = []

    @property
    def target(self) -> str:
        """The URL its session connects to: ``dsn``'s session URL when ``dsn`` was declared to go
        through a transaction-mode pooler with one (harvest.db.pooler), else ``dsn``: what a
        report names."""
        return pooler.session_dsn(self.dsn)

    # -- reading -----------------------------------------------------------------------
    # A pass reads each ledger once (_ledger, _function_ledger) and hands the rows to the
    # helpers that judge them, rather than each helper reading it again.
    def _ledger(self, conn: psycopg.Connection) -> list[LedgerRow]:
        exists = conn.execute("SELECT to_regclass('harvest.schema_migrations') IS NOT NULL").fetchone()[0]  # type: ignore[index]  # one row
        if not exists:
            return []
        return conn.execute(
            "SELECT set_name, version, name, applied_at, checksum FROM harvest.schema_migrations"
            " ORDER BY set_name, version"
        ).fetchall()

    def _applied(self, ledger: list[LedgerRow]) -> dict[tuple[str, str], datetime]:
        return {(s, v): at for s, v, _name, at, _checksum in ledger}

    def _changed(self, ledger: list[LedgerRow]) -> list[Migration]:
        """Applied migrations whose file is not the one recorded (edited since): never run
        again, so the edit does nothing where the file was applied."""
        recorded = {(s, v): checksum for s, v, _name, _at, checksum in ledger}
        return [m for m in self.migrations if recorded.get((m.set_name, m.version), m.checksum) != m.checksum]

    def _note_changed(self, ledger: list[LedgerRow]) -> None:
        for m in self._changed(ledger):
            self.progress(
                f"note: {m.label} changed since it was applied; an applied migration is not run "
                "again: put the change in a new migration"
            )

    def _unknown(self, ledger: list[LedgerRow]) -> list[UnknownMigration]:
        """Applied migrations of this run's sets that this run does not have. Rows of other
        sets (an app's set not included this time) are not ours to judge."""
        known = {(m.set_name, m.version) for m in self.migrations}
        sets = {m.set_name for m in self.migrations} | {CORE_SET}
        return [
            UnknownMigration(s, v, n, at)
            for s, v, n, at, _checksum in ledger
            if s in sets and (s, v) not in known
        ]

    def _ahead(self, unknown: list[UnknownMigration]) -> SchemaMismatch | None:
        """The refusal when the database holds a set's migration newer than our newest: an
        older Harvest must not migrate it, nor apply its older functions/ over the newer ones."""
        latest: dict[str, str] = {}
        for m in self.migrations:
            latest[m.set_name] = max(latest.get(m.set_name, m.version), m.version)
        newer = [u for u in unknown if u.version > latest.get(u.set_name, "")]
        if not newer:
            return None
        top = max(newer, key=lambda u: (u.set_name == CORE_SET, u.version))
        if top.set_name == CORE_SET:
            return SchemaMismatch(ahead_message(top.version, latest[CORE_SET], [u.label for u in newer]))
        return SchemaMismatch(
            f"the database is ahead of migration set {top.set_name!r}: it has {top.label} applied "
            f"(version {top.version}), the included directory goes up to {latest[top.set_name]}; "
            "run the newer release that has it, not this one"
        )

    def _function_ledger(self, conn: psycopg.Connection) -> FunctionLedger:
        """Each recorded function file's checksum and the release that applied it (None before
        migration 0085 added the column, and in the rows it found)."""
        columns = {
            name
            for (name,) in conn.execute(
                "SELECT attname FROM pg_catalog.pg_attribute WHERE attnum > 0 AND NOT attisdropped"
                " AND attrelid = to_regclass('harvest.function_files')"
            ).fetchall()
        }
        if not columns:
            return {}
        release = "package_version" if "package_version" in columns else "NULL::text"
        rows = conn.execute(f"SELECT file_name, checksum, {release} FROM harvest.function_files").fetchall()  # pyright: ignore[reportArgumentType, reportCallIssue]  # one of two literals
        recorded = {name: (checksum, version) for name, checksum, version in rows}
        # A file whose functions were replaced after it was applied (by hand, or from another
        # release's file) is not applied whatever its row says: read as changed, so that
        # `status` lists it and a run applies it again.
        self.changed_functions = self._changed_functions(conn)
        for function in self.changed_functions:
            name = shipped_functions().files_of[function]  # (read once per process)
            if name in recorded:
                recorded[name] = (CHANGED_CHECKSUM, recorded[name][1])
        return recorded

    def _changed_functions(self, conn: psycopg.Connection) -> list[str]:
        """The functions whose live body is not their file's though the ledger says the file is
        applied (harvest.get_function_state; nothing to compare before it exists), and those
        bound to another schema's function (_bound_elsewhere)."""
        exists = conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_proc AS p"
            " JOIN pg_catalog.pg_namespace AS n ON n.oid = p.pronamespace"
            " WHERE n.nspname = 'harvest' AND p.proname = 'get_function_state')"
        ).fetchone()[0]  # type: ignore[index]  # one row
        if not exists:
            return []
        shipped = shipped_functions()
        drift = function_drift(SqlApi(conn).get_function_state(shipped.names, shipped.digest), shipped)
        changed = set(drift.functions if drift else ()) | set(self._bound_elsewhere(conn))
        return sorted(changed & set(shipped.files_of))

    def _bound_elsewhere(self, conn: psycopg.Connection) -> list[str]:
        """Harvest functions whose body is bound to a function or an operator of a schema other
        than pg_catalog and harvest: a SQL-standard body (RETURN ...) created, by a run from
        before the pinned search_path, under a login's path on which a lower role's look-alike
        matched better (docs/security.md, "Whose search_path"). Their files read as changed, so
        the next run applies them again, under the pinned path. (On the run's pinned session.)"""
        return [
            name
            for (name,) in conn.execute(
                "SELECT DISTINCT f.proname::text FROM pg_catalog.pg_depend AS d"
                " JOIN pg_catalog.pg_proc AS f ON f.oid = d.objid"
                " LEFT JOIN pg_catalog.pg_proc AS p"
                "   ON d.refclassid = 'pg_catalog.pg_proc'::pg_catalog.regclass AND p.oid = d.refobjid"
                " LEFT JOIN pg_catalog.pg_operator AS o"
                "   ON d.refclassid = 'pg_catalog.pg_operator'::pg_catalog.regclass AND o.oid = d.refobjid"
                " JOIN pg_catalog.pg_namespace AS n ON n.oid = f.pronamespace AND n.nspname = 'harvest'"
                " JOIN pg_catalog.pg_namespace AS r ON r.oid = coalesce(p.pronamespace, o.oprnamespace)"
                " WHERE d.classid = 'pg_catalog.pg_proc'::pg_catalog.regclass"
                " AND r.nspname NOT IN ('pg_catalog', 'harvest')"
            ).fetchall()
        ]

    def _stale_functions(self, recorded: FunctionLedger) -> list[Path]:
        return [p for p in function_files() if recorded.get(p.name, ("", None))[0] != file_checksum(p)]

    def _newer_functions(
        self, recorded: FunctionLedger, retired: list[str], core_pending: bool
    ) -> list[NewerFunctionFile]:
        """The function files this run would replace or retire whose ledger rows a newer release
        wrote (a run with Harvest migrations to apply replaces every file)."""
        ours = release_order(_package_version())
        touched = {p.name for p in (function_files() if core_pending else self._stale_functions(recorded))}
        touched.update(retired)
        return [
            NewerFunctionFile(name, version)
            for name, (_checksum, version) in sorted(recorded.items())
            if name in touched and version is not None and release_order(version) > ours
        ]

    def _retired_functions(self, conn: psycopg.Connection) -> list[str]:
        """Ledger rows of files no longer in functions/ (a file renamed, merged or removed).
        Left behind they would make an upgraded ledger differ from a fresh one."""
        exists = conn.execute("SELECT to_regclass('harvest.function_files') IS NOT NULL").fetchone()[0]  # type: ignore[index]  # one row
        if not exists:
            return []
        current = [p.name for p in function_files()]
        return [
            name
            for (name,) in conn.execute(
                "SELECT file_name FROM harvest.function_files WHERE NOT (file_name = ANY(%s)) ORDER BY 1",
                (current,),
            ).fetchall()
        ]

    def status(self) -> tuple[list[MigrationStatus], list[Path]]:
        """Every migration with its applied time (None = pending), and stale function files."""
        report = self.inspect()
        return report.migrations, report.stale_functions

    def inspect(self) -> StatusReport:
        """:meth:`status` plus the applied migrations this package does not know."""
        with connect(self.dsn, autocommit=True) as conn:
            pin_search_path(conn)
            ledger, recorded = self._ledger(conn), self._function_ledger(conn)
            retired = self._retired_functions(conn)
        applied = self._applied(ledger)
        stale = self._stale_functions(recorded)
        unknown = self._unknown(ledger)
        changed = {(m.set_name, m.version) for m in self._changed(ledger)}
        releases = {name: version for name, (_checksum, version) in recorded.items()}
        ahead = self._ahead(unknown)
        if ahead is None:
            core_pending = any(
                m.set_name == CORE_SET and (m.set_name, m.version) not in applied for m in self.migrations
            )
            newer = self._newer_functions(recorded, retired, core_pending)
            if newer:
                ahead = SchemaMismatch(downgrade_message(newer, _package_version()))
        rows = [
            MigrationStatus(m, applied.get((m.set_name, m.version)), (m.set_name, m.version) in changed)
            for m in self.migrations
        ]
        return StatusReport(
            rows, stale, retired, unknown, ahead, dict(sorted(releases.items())), self.changed_functions
        )

    # -- writing -----------------------------------------------------------------------
    def run(
        self,
        dry_run: bool = False,
        *,
        shard_id: int | None = None,
        operator_id: str | None = None,
        allow_downgrade: bool = False,
        search_attr_indexes: Iterable[tuple[str, str]] = (),
    ) -> RunReport:
        """Apply what is pending; then, with ``shard_id``, make the database that shard
        (``harvest.set_shard_id``: idempotent, refused with WrongShard when the database holds
        executions of another shard, audited as ``operator_id``). Function files a newer release
        applied are refused (SchemaMismatch), or with ``allow_downgrade`` replaced by this
        release's, each said in a progress line and the whole audited as ``operator_id``. Last,
        build each declared search attribute index (harvest.search_attribute_indexes, and the
        ``(key, type)`` pairs of ``search_attr_indexes``: those other shards declare) that is
        missing or INVALID, CONCURRENTLY, a progress line each (_build_search_attr_indexes)."""
        if shard_id is not None and not is_shard_number(shard_id):
            raise ConfigError(f"--shard-id {shard_id} is not a shard number 0..{MAX_SHARD}")
        report = RunReport()
        with connect(self.dsn, autocommit=True) as conn:
            require_server_version(conn.info.server_version)
            self._unbound_statements(conn)
            pin_search_path(conn)
            self._refuse_another_shards_session(conn)
            if dry_run:
                ledger = self._ledger(conn)
                ahead = self._ahead(self._unknown(ledger))
                if ahead:
                    raise SchemaMismatch(f"{ahead}; nothing was changed")
                self._note_changed(ledger)
                applied = self._applied(ledger)
                report.applied = [m for m in self.migrations if (m.set_name, m.version) not in applied]
                # (a run with Harvest migrations to apply applies every function file again: run())
                core = any(m.set_name == CORE_SET for m in report.applied)
                recorded, retired = self._function_ledger(conn), self._retired_functions(conn)
                report.functions_downgraded = self._refuse_downgrade(
                    recorded, retired, core, allow_downgrade, say=False
                )
                stale = function_files() if core else self._stale_functions(recorded)
                report.functions_applied = [p.name for p in stale]
                report.functions_retired = retired
                if shard_id is not None:
                    current = self._current_shard(conn)
                    report.shard = {
                        "shard_id": shard_id,
                        "previous_shard_id": current,
                        "changed": current != shard_id,
                    }
                report.search_attr_indexes = search_indexes.to_build(conn, search_attr_indexes)
                return report
            _refuse_pooler(conn, self.dsn)
            self._lock(conn)
            watch = BlockerWatch(self.dsn, max(self.lock_timeout / 2, 0.01))
            try:
                # Under the lock and before anything is written: a newer Harvest's schema is
                # refused whole (its functions/ too), never downgraded.
                ledger = self._ledger(conn)
                ahead = self._ahead(self._unknown(ledger))
                if ahead:
                    raise SchemaMismatch(f"{ahead}; nothing was changed")
                # The ledgers' one definition is sql/ledger.sql (a fresh install's first file).
                # (It creates what is missing and changes no row: the rows read above stand.)
                ledger_sql = paths.ledger_file().read_text()
                self._retrying(conn, watch, "sql/ledger.sql", lambda: conn.execute(ledger_sql))  # pyright: ignore[reportArgumentType, reportCallIssue]  # our own file
                self._note_changed(ledger)
                applied = self._applied(ledger)
                pending = [m for m in self.migrations if (m.set_name, m.version) not in applied]
                core_pending = any(m.set_name == CORE_SET for m in pending)
                # Also before anything is written: the lock keeps another release from applying
                # files between this check and this run's functions' step.
                report.functions_downgraded = self._refuse_downgrade(
                    self._function_ledger(conn), self._retired_functions(conn), core_pending, allow_downgrade
                )
                if core_pending:
                    # From Harvest's first migration until the functions' step commits, the
                    # functions are not this run's (0080 drops one its start.sql brings back): a
                    # run stopped anywhere in between leaves every file pending, for `status` to
                    # say and the next run to apply (with the grants a new table needs too).
                    self._retrying(
                        conn,
                        watch,
                        "the function ledger",
                        lambda: conn.execute(
                            "UPDATE harvest.function_files SET checksum = %s", (STALE_CHECKSUM,)
                        ),
                    )
                # Harvest's migrations, its functions, then the included sets: an app's migration
                # may call the SQL API, which is this release's only once the files are applied
                # (a Harvest migration may drop a function whose new signature they bring back).
                self._apply_migrations(conn, watch, [m for m in pending if m.set_name == CORE_SET], report)
                self._retrying(
                    conn,
                    watch,
                    "the functions' step",
                    lambda: self._apply_all_functions(conn, report, operator_id),
                    FUNCTIONS_NOT_RECORDED.split(",")[0],
                )
                included = [m for m in pending if m.set_name != CORE_SET]
                self._apply_migrations(conn, watch, included, report)
                if included:
                    # What they made in schema harvest gets the options and grants every function
                    # there has, as when they ran before the functions' step.
                    def secure() -> None:
                        with conn.transaction():
                            self._secure_functions(conn)

                    self._retrying(conn, watch, "securing the functions", secure)
                if shard_id is not None:
                    set_shard = lambda: self._set_shard_id(conn, shard_id, operator_id)  # noqa: E731
                    report.shard = self._retrying(conn, watch, "setting the shard id", set_shard)
                self._build_search_attr_indexes(conn, report, search_attr_indexes)
            finally:
                watch.close()
                # A session the server ended took its lock with it; unlocking there would raise
                # "the connection is closed" over the error that says which file and why.
                if not conn.broken:
                    conn.execute("SELECT pg_catalog.pg_advisory_unlock(%s)", (MIGRATE_LOCK_KEY,))
        return report

    def _build_search_attr_indexes(
        self, conn: psycopg.Connection, report: RunReport, also: Iterable[tuple[str, str]]
    ) -> None:
        """The declared search attribute indexes this database lacks, built CONCURRENTLY (each
        waits for the transactions before it, blocking no one: no lock timeout). One that cannot
        be built is a progress line, not a failed run: the schema is migrated, and `harvest
        search-attr indexes` shows the index missing."""
        self._set_lock_timeout(conn, 0)
        outcomes = search_indexes.build_declared(conn, self.progress, also)
        report.search_attr_indexes = {o.name: o.action for o in outcomes}

    def _apply_migrations(
        self, conn: psycopg.Connection, watch: BlockerWatch, migrations: list[Migration], report: RunReport
    ) -> None:
        for migration in migrations:
            self.progress(
                f"applying {migration.label}" + ("" if migration.transactional else " (non-transactional)")
            )
            if migration.set_name != CORE_SET:
                # An application's set runs under its login's search_path, which its unqualified
                # names were written for (docs/security.md, "Whose search_path"); Harvest's own
                # under the pinned one. (_reset_session pins it again after the file.)
                conn.execute("RESET search_path")
            if migration.transactional:
                # A try that timed out on a lock rolled back whole: the next one runs the file again.
                self._retrying(
                    conn, watch, str(migration.path), functools.partial(self._apply, conn, migration)
                )
            else:
                self._apply(conn, migration, watch)
            self._reset_session(conn)
            (report.applied if migration.transactional else report.applied_non_transactional).append(
                migration
            )

    def _refuse_downgrade(
        self, recorded: FunctionLedger, retired: list[str], core_pending: bool, allow: bool, say: bool = True
    ) -> dict[str, str]:
        """Refuse a run that would replace or retire function files a newer release applied
        (SchemaMismatch, nothing changed); with ``allow``, the files it will put back and the
        release each one replaces, ``say``-ing each as a progress line (a dry run's plan
        lists them instead)."""
        newer = self._newer_functions(recorded, retired, core_pending)
        if newer and not allow:
            raise SchemaMismatch(f"{downgrade_message(newer, _package_version())}; nothing was changed")
        for f in newer if say else ():
            self.progress(
                f"downgrading functions/{f.file_name}: Harvest {f.package_version} applied it, "
                f"this is Harvest {_package_version()} (--allow-downgrade)"
            )
        return {f.file_name: f.package_version for f in newer}

    def _apply_all_functions(
        self, conn: psycopg.Connection, report: RunReport, operator_id: str | None = None
    ) -> None:
        """The functions' step, in one transaction: the changed files with their checksums,
        the retired files' rows, and the options and grants (harvest._secure_functions). One
        step, because a ledger that says a file is applied must mean its functions are usable:
        CREATE OR REPLACE resets what it replaces to SECURITY INVOKER with no search_path, and
        a new function is anyone's to call, until they are secured. A run stopped before the
        commit leaves the files pending; a run stopped after it has nothing left to do."""
        # (a try again after a lock timeout starts from an empty list)
        report.functions_applied, report.functions_retired = [], []
        with conn.transaction():
            # Function files reference each other; bodies are checked when first called.
            conn.execute("SET LOCAL check_function_bodies = off")
            for path in self._stale_functions(self._function_ledger(conn)):
                self.progress(f"applying functions/{path.name}")
                self._apply_functions(conn, path)
                report.functions_applied.append(path.name)
            # After the files that took over their functions were applied: the ledger
            # names exactly the files of this package, as a fresh install's does.
            report.functions_retired = self._retired_functions(conn)
            if report.functions_retired:
                self.progress("retiring functions/" + ", functions/".join(report.functions_retired))
                conn.execute(
                    "DELETE FROM harvest.function_files WHERE file_name = ANY(%s)",
                    (report.functions_retired,),
                )
            if report.applied or report.applied_non_transactional or report.functions_applied:
                # CREATE OR REPLACE reset the options of what it replaced: pin search_path,
                # SECURITY DEFINER and the role grants again (functions/security.sql).
                self._secure_functions(conn)
            if report.functions_downgraded:
                # An operator's choice that changes what every worker runs: in the audit log,
                # committed with the files it put back.
                conn.execute(
                    "SELECT harvest._audit('functions.downgrade', 'functions', %s, %s)",
                    (
                        operator_id,
                        Jsonb(
                            {
                                "package_version": _package_version(),
                                "replaced": report.functions_downgraded,
                            }
                        ),
                    ),
                )

    def _lock(self, conn: psycopg.Connection) -> None:
        """Take the migration lock, waiting for another migrator between short tries, never
        inside a statement: a session waiting in pg_advisory_lock holds a snapshot, which a
        CREATE INDEX CONCURRENTLY of the migrator holding the lock waits for, while the waiter
        waits for its lock (PostgreSQL ends one of the two as a deadlock)."""
        take_session_lock(conn, MIGRATE_LOCK_KEY, lambda: self.progress(self._waiting_line(conn)))

    def _waiting_line(self, conn: psycopg.Connection) -> str:
        """What the wait for the migrate lock says once: who holds it, when it can tell. Any
        session of the database may take an advisory lock (docs/security.md, "Advisory locks"),
        so the holder may be a stray session rather than another migrator."""
        holder = conn.execute(
            "SELECT a.pid, a.usename, a.application_name FROM pg_catalog.pg_locks AS l"
            " JOIN pg_catalog.pg_stat_activity AS a ON a.pid = l.pid"
            " WHERE l.locktype = 'advisory' AND l.granted AND l.database = a.datid"
            " AND a.datname = current_database() AND l.objsubid = 1"
            " AND (l.classid::bigint << 32 | l.objid::bigint) = %s",
            (MIGRATE_LOCK_KEY,),
        ).fetchone()
        if holder is None:  # let go meanwhile, or not visible to this login
            return "waiting for another `harvest migrate run` to finish"
        pid, login, application = holder
        return (
            f"waiting for the migrate lock, held by pid {pid} (login {login}, application"
            f" {application or '-'}): another `harvest migrate run`, or a session to end"
            " (docs/security.md, Advisory locks)"
        )

    def _current_shard(self, conn: psycopg.Connection) -> int | None:
        """The database's shard number; None before shard identity exists (0023 pending)."""
        # (qualified: a probe through the pooler is not the run's pinned session)
        found = conn.execute("SELECT pg_catalog.to_regclass('harvest.shard_identity') IS NOT NULL").fetchone()
        if not found[0]:  # type: ignore[index]  # one row
            return None
        return cast(
            "int | None",
            conn.execute("SELECT shard_id FROM harvest.shard_identity WHERE id").fetchone()[0],  # type: ignore[index]  # one row
        )

    def _refuse_another_shards_session(self, conn: psycopg.Connection) -> None:
        """Refuse a session URL (``conn``'s) that reaches another shard's database than the pooled
        URL it was declared for (a swapped ``shards.session_urls`` entry would migrate, and with
        --shard-id renumber, the other shard). Known only where both databases have a shard id:
        one connect through the pooler, one read."""
        if self.target == self.dsn:
            return
        with probe_connect(self.dsn) as pooled:
            theirs = self._current_shard(pooled)
        ours = self._current_shard(conn)
        if None not in (ours, theirs) and ours != theirs:
            raise ConfigError(
                f"the session URL of {describe_dsn(self.dsn)} reaches {describe_dsn(self.target)}, the "
                f"database of shard {ours}, and {describe_dsn(self.dsn)} itself shard {theirs}'s: point "
                f"its session URL (shards.session_urls.{theirs}, or session_url for shard 0) at shard "
                f"{theirs}'s database; nothing was changed"
            )

    def _set_shard_id(
        self, conn: psycopg.Connection, shard_id: int, operator_id: str | None
    ) -> dict[str, Any]:
        try:
            with conn.transaction():
                return cast(
                    "dict[str, Any]",
                    conn.execute(  # type: ignore[index]  # one row
                        "SELECT harvest.set_shard_id(%s, %s)", (shard_id, operator_id), prepare=False
                    ).fetchone()[0],
                )
        except psycopg.errors.LockNotAvailable:
            raise  # (a lock wait that timed out: Migrator._retrying tries again)
        except psycopg.Error as exc:
            mapped = from_database_error(exc)
            if mapped is not None:
                raise mapped from None
            raise MigrationError(
                f"setting shard id {shard_id} failed: {(exc.diag.message_primary or str(exc)).strip()}"
            ) from None

    def _secure_functions(self, conn: psycopg.Connection) -> None:
        exists = conn.execute("SELECT to_regprocedure('harvest._secure_functions()') IS NOT NULL").fetchone()[  # type: ignore[index]  # one row
            0
        ]
        if exists:
            conn.execute("SELECT harvest._secure_functions()")

    def _run_statements(
        self,
        conn: psycopg.Connection,
        path: Path,
        sql: str,
        not_recorded: str = MIGRATION_NOT_RECORDED,
        watch: BlockerWatch | None = None,
    ) -> None:
        """Run a file's statements; with ``watch`` (a no-transaction file), each one is its own
        unit of lock-wait tries: the statements before it are committed and idempotent."""
        import pglast

        try:
            parsed = statements(sql)
        except pglast.parser.ParseError as exc:
            # A syntax error anywhere in the file: nothing has run yet.
            offset = exc.args[1] if len(exc.args) > 1 and isinstance(exc.args[1], int) else 0
            line = sql.count("\n", 0, offset) + 1
            raise MigrationError(
                f"{path} line {line}: {exc.args[0]}; {not_recorded}"  # pyright: ignore[reportGeneralTypeIssues]
            ) from None
        # The runner owns the transaction (the functions' step's, a migration's, or none).
        control = transaction_control(parsed)
        if control:
            line, word = control
            raise MigrationError(
                f"{path} line {line}: {word} is not allowed here, the runner owns the transaction "
                f"(remove it); {not_recorded}"
            )
        for statement in parsed:
            line, stmt = statement.line, statement.text
            if watch is None:
                self._run_statement(conn, path, line, stmt, not_recorded)
                continue
            unbounded = waits_harmlessly(statement.node)

            def attempt(line: int = line, stmt: str = stmt, unbounded: bool = unbounded) -> None:
                if unbounded:
                    self._set_lock_timeout(conn, 0)
                self._run_statement(conn, path, line, stmt, not_recorded)

            self._retrying(conn, watch, f"{path} line {line}", attempt, not_recorded.split(",")[0])

    def _run_statement(
        self, conn: psycopg.Connection, path: Path, line: int, stmt: str, not_recorded: str
    ) -> None:
        try:
            conn.execute(stmt, prepare=False)  # pyright: ignore[reportArgumentType, reportCallIssue]  # our own files
        except psycopg.Error as exc:
            message = (exc.diag.message_primary or str(exc)).strip()
            position = exc.diag.statement_position
            if position and position.isdigit():
                # The server points into the statement (1-based characters): name that line.
                line += stmt.count("\n", 0, int(position) - 1)
            if isinstance(exc, psycopg.errors.LockNotAvailable):
                raise LockTimedOut(f"{path} line {line}", not_recorded.split(",")[0]) from None
            raise MigrationError(f"{path} line {line}: {message}; {not_recorded}") from None

    def _set_lock_timeout(self, conn: psycopg.Connection, seconds: float) -> None:
        conn.execute(
            "SELECT pg_catalog.set_config('lock_timeout', %s, false)", (f"{round(seconds * 1000)}ms",)
        )

    def _reset_session(self, conn: psycopg.Connection) -> None:
        """Undo what a file SET for the session (search_path, a role, a plain SET that outlived
        its transaction): the next file, and the functions' step, run as the run began, with the
        search_path pinned (an included set's file too: it runs under the login's path)."""
        conn.execute("RESET SESSION AUTHORIZATION; RESET ROLE; RESET ALL")
        set_server_end(conn)  # (RESET ALL undid the keepalives connect() set)
        self._unbound_statements(conn)  # (and brought back the login's statement_timeout)
        pin_search_path(conn)  # (and the login's search_path)

    def _unbound_statements(self, conn: psycopg.Connection) -> None:
        """No statement_timeout for the run's session (connection.unbound_statements): a migration
        statement cancelled midway never applied (a data migration rolled back on every run) or, a
        CREATE INDEX CONCURRENTLY, left an INVALID index that a re-run's IF NOT EXISTS skipped.
        Lock waits stay bounded by the runner's lock_timeout (_retrying)."""
        unbound_statements(conn)

    def _retrying(
        self,
        conn: psycopg.Connection,
        watch: BlockerWatch,
        what: str,
        attempt: Callable[[], T],
        not_recorded: str = MIGRATION_NOT_RECORDED.split(",")[0],
    ) -> T:
        """``attempt`` (one unit: it rolls back whole when it fails) under a lock_timeout, tried
        again after a growing pause while a try times out on a lock, until lock_wait seconds have
        passed; then MigrationError naming the sessions it waited for."""
        started, pause, tries = self.clock(), FIRST_LOCK_PAUSE, 0
        pid = conn.info.backend_pid
        while True:
            tries += 1
            self._set_lock_timeout(conn, self.lock_timeout)
            watch.blockers = []
            try:
                with watch.watching(pid) if self.lock_timeout else nullcontext():
                    return attempt()
            except (LockTimedOut, psycopg.errors.LockNotAvailable) as exc:
                where = exc.where if isinstance(exc, LockTimedOut) else what
                said = exc.not_recorded if isinstance(exc, LockTimedOut) else not_recorded
            blockers = "; ".join(b.describe() for b in watch.blockers) or (
                "the session holding it was not seen (it let go, or this login cannot see it)"
            )
            waited = self.clock() - started
            if waited + pause > self.lock_wait:
                pids = ", ".join(str(b.pid) for b in watch.blockers)
                end = f" (SELECT pg_terminate_backend({pids.split(', ')[0]}))" if pids else ""
                raise MigrationError(
                    f"{where}: gave up waiting for a lock after {tries} tr{'y' if tries == 1 else 'ies'} in "
                    f"{waited:.1f}s (lock timeout {plain_number(self.lock_timeout)}s a try, lock wait "
                    f"{plain_number(self.lock_wait)}s in all): blocked by {blockers}. Let that transaction "
                    f"finish or end it{end}, or run again with a longer --lock-wait; {said}"
                )
            self.progress(
                f"{where}: waited {plain_number(self.lock_timeout)}s for a lock, blocked by {blockers}; "
                f"trying again in {plain_number(pause)}s"
            )
            self.sleep(pause)
            pause = min(pause * 2, LAST_LOCK_PAUSE)

    def _apply(
        self, conn: psycopg.Connection, migration: Migration, watch: BlockerWatch | None = None
    ) -> None:
        """One migration and its ledger row; a no-transaction one with ``watch``, its statements
        each tried on their own (a transactional one is tried whole by _apply_migrations)."""
        ledger = (
            "INSERT INTO harvest.schema_migrations (set_name, version, name, checksum, transactional)"
            " VALUES (%s, %s, %s, %s, %s)"
        )
        args = (
            migration.set_name,
            migration.version,
            migration.name,
            migration.checksum,
            migration.transactional,
        )
        if not migration.transactional:
            self._run_statements(conn, migration.path, migration.sql, watch=watch)
            # (as the run began: a role the file SET might not write the ledger)
            self._reset_session(conn)
            conn.execute(ledger + " ON CONFLICT DO NOTHING", args)
            return
        with conn.transaction():
            self._run_statements(conn, migration.path, migration.sql)
            conn.execute("RESET ROLE")  # the ledger row is written as the run's login, whatever the file SET
            conn.execute(ledger, args)

    def _apply_functions(self, conn: psycopg.Connection, path: Path) -> None:
        """One file and its ledger row, inside the functions' step (_apply_all_functions)."""
        data = path.read_bytes()
        # Record the checksum of the bytes read, the same one _stale_functions compares
        # (read_text() would turn CRLF into LF and the file would never look applied).
        self._run_statements(conn, path, data.decode(), FUNCTIONS_NOT_RECORDED)
        conn.execute(
            "INSERT INTO harvest.function_files (file_name, checksum, package_version) VALUES (%s, %s, %s)"
            " ON CONFLICT (file_name) DO UPDATE SET checksum = excluded.checksum,"
            " package_version = excluded.package_version, applied_at = clock_timestamp()",
            (path.name, hashlib.sha256(data).hexdigest(), _package_version()),
        )


def _package_version() -> str:
    try:
        return importlib.metadata.version("harvest-workflows")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def ahead_message(found: str, expected: str, labels: Iterable[str] = ()) -> str:
    """What to do when the database's schema is newer than this package's newest migration."""
    applied = ", ".join(labels)
    return (
        f"the database is ahead of this Harvest: it has schema version {found}"
        + (f" ({applied} applied)" if applied else "")
        + f", this Harvest {_package_version()} knows migrations up to {expected}. Upgrade "
        f"Harvest (the package) to the release that has {found}; `harvest migrate run` from "
        "this older one would refuse"
    )


def schema_mismatch(found: str | None, expected: str, who: str = "this Harvest") -> SchemaMismatch:
    """The refusal of a schema this package does not match, with the right remedy."""
    if found and found > expected:
        return SchemaMismatch(ahead_message(found, expected))
    have = f"schema version {found}" if found else "no Harvest schema"
    return SchemaMismatch(
        f"the database has {have}, {who} needs {expected}: run `harvest migrate run` against it"
    )


def unfinished_migration(found: str, functions: str | None, who: str = "this Harvest") -> SchemaMismatch:
    """The refusal of a database whose migrations are this release's and whose functions are not:
    a `harvest migrate run` stopped after its migrations, before the function files."""
    have = f"those of {functions}" if functions else "an older release's"
    return SchemaMismatch(
        f"the database's last `harvest migrate run` did not finish: it has schema version {found} "
        f"but its SQL functions are {have}, {who} needs {found}: run `harvest migrate run` against it"
    )


def read_versions() -> Steps[tuple[str | None, str | None]]:
    """The database's schema version (None: no Harvest schema) and, when it is this package's,
    the migration its functions were written for (None: an older release's functions, or a
    schema that is not this package's). The one reader of both, for every driver: the client,
    the worker, the readiness probe and the shard health check."""
    try:
        found = yield Sql(sqlapi.schema_version)
    except DatabaseError as exc:
        if not schema_missing(exc):
            raise
        return None, None
    if found != SCHEMA_VERSION:
        return found, None
    try:
        functions = yield Sql(sqlapi.functions_version)
    except DatabaseError as exc:
        if not schema_missing(exc):
            raise
        functions = None
    return found, functions


def read_function_releases() -> Steps[list[str] | None]:
    """The releases that applied the database's function files; None when its functions are a
    release's from before harvest.get_function_releases() (nothing to compare)."""
    try:
        releases = yield Sql(sqlapi.get_function_releases)
    except DatabaseError as exc:
        if not schema_missing(exc):
            raise
        return None
    return list(releases or ())


# the releases already warned about: once per process, not once per shard lane or reconnect
_release_warnings: set[tuple[str, ...]] = set()


def release_warning(releases: list[str] | None, ours: str, who: str) -> str | None:
    """What to say when the function files are another release's than this process' (same
    schema version: two patch releases). A warning, never a refusal: in a rolling deploy the
    processes of the old release keep running (and restart) against the new release's functions
    until they are replaced, and a patch release's functions serve its neighbours' processes
    (docs/install.md, "Which release's functions a process runs against")."""
    if not releases or release_order(ours) == (0,):  # (a checkout of unknown version: no release)
        return None
    mine = release_order(ours)
    newer = [r for r in releases if release_order(r) > mine]
    older = [r for r in releases if release_order(r) < mine]
    if not newer and not older:
        return None
    said = (
        f"the database's SQL functions were applied by Harvest {', '.join(releases)}, {who} is "
        f"Harvest {ours}: "
    )
    if newer:
        return said + (
            "expected while a rolling deploy replaces this process; one that is not being "
            f"replaced should be upgraded to {max(newer, key=release_order)}"
        )
    return said + (
        f"the fixes of {ours}'s functions are not in effect until `harvest migrate run` of "
        f"{ours} applies them; if the functions were rolled back on purpose (--allow-downgrade), "
        "roll this process back too"
    )


def _knows_its_release() -> bool:
    """Whether this package has a release to compare (a checkout of unknown version has none,
    and release_warning says nothing for it): only then is the ledger's release read, a round
    trip more on each connect's schema check."""
    return release_order(_package_version()) != (0,)


def _warn_release(releases: list[str] | None, who: str) -> None:
    key = tuple(releases or ())
    message = release_warning(releases, _package_version(), who)
    if message is not None and key not in _release_warnings:
        _release_warnings.add(key)
        log.warning("%s", message)


# the function drift already warned about: once per process and database, not once per reconnect
_drift_warnings: set[tuple[str, str]] = set()


async def warn_function_drift_async(sql: AsyncSqlApi, what: str) -> None:
    """Warn, once per process and database (``what``), when a database on this release's schema
    runs SQL functions behind this release's (:class:`FunctionDrift`): a process's boot, after
    :func:`check_schema_async`. A newer release's functions are release_warning's to say."""
    drift = await read_function_drift_for_boot(sql, what)
    if drift is None or not drift.stale:
        return
    key = (what, drift.describe())
    if key not in _drift_warnings:
        _drift_warnings.add(key)
        log.warning("harvest: %s: %s", what, drift.describe())


def version_mismatch(found: str | None, functions: str | None, who: str) -> SchemaMismatch | None:
    """Why a database whose :func:`read_versions` answered ``found`` and ``functions`` cannot
    serve this package (its schema version is not SCHEMA_VERSION, behind or ahead; or its
    functions_version() is not, a migrate run that stopped before the function files), with the
    remedy; None when both are this package's. The one judgement of the worker's and the
    client's refusal and of the readiness probe."""
    if found != SCHEMA_VERSION:
        return schema_mismatch(found, SCHEMA_VERSION, who)
    if functions != SCHEMA_VERSION:
        return unfinished_migration(found, functions, who)
    return None


def _refuse_mismatch(found: str | None, functions: str | None, who: str) -> None:
    if (mismatch := version_mismatch(found, functions, who)) is not None:
        raise mismatch


def check_schema(conn: psycopg.Connection, who: str = "this Harvest") -> None:
    """Refuse to work against a schema this package does not match: its migrations (the
    ledger's newest), and its functions (the migration they were written for: the function
    files come after the migrations, and a run can stop in between). ``conn`` is autocommit
    (a pool's): a read that fails ends the reads. Then warn, once per process, when another
    release of the same schema applied the functions (release_warning)."""
    _refuse_mismatch(*run_steps(read_versions(), SqlApi(conn)), who)
    if _knows_its_release():
        _warn_release(run_steps(read_function_releases(), SqlApi(conn)), who)


async def check_schema_async(sql: AsyncSqlApi, who: str) -> None:
    """:func:`check_schema` over an AsyncSqlApi (the worker's pool, the async client's connection)."""
    _refuse_mismatch(*await arun_steps(read_versions(), sql), who)
    if _knows_its_release():
        _warn_release(await arun_steps(read_function_releases(), sql), who)


def _refuse_pooler(conn: psycopg.Connection, dsn: str) -> None:
    """Refuse to migrate through a pooler that shares server connections (transaction mode):
    the migrate lock is a session's (it would be held by a server connection other clients are
    lent, two migrators both holding it), and so are the resets between files. ``conn``: the
    run's connection (to ``dsn``'s session URL when one was declared: harvest.db.pooler)."""
    target = pooler.session_dsn(dsn)
    if pooler.transaction_pooled(target, conn, probe_connect):
        raise ConfigError(
            f"cannot migrate {describe_dsn(target)}: it goes through a connection pooler in transaction "
            "mode (two sessions were lent one server connection), and a migration needs a session of its "
            "own (the migrate lock, the session's resets between files). Run harvest migrate run on the "
            "database's direct URL or a session-mode pool's (--database-url), or set its session URL, "
            f'{pooler.session_setting()}, to it (docs/operations.md, "Behind a connection pooler"); '
            "nothing was changed"
        )
