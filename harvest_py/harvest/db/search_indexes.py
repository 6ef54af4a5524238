"""The schema owner's indexes on search attributes for range tests (docs/operations.md, "Indexing
a search attribute for range tests"): `harvest search-attr index|unindex|indexes` and, for the
ones declared, `harvest migrate run` (harvest.db.migrate).

A key's index is on the expression the filters' range tests are written on
(harvest._search_attr_ordered), partial on the key's existence, with statistics on the
expression; the server writes every statement, quoting the key and the names
(harvest._search_attr_index_sql). ``CREATE INDEX CONCURRENTLY`` blocks no start and no write but
cannot run in a transaction: each statement runs on an autocommit session of the owner's, with no
statement timeout (a build cancelled midway leaves an INVALID index) and no lock timeout (the
build's waits for older transactions block no one), its search_path pinned to pg_catalog
(:func:`pinned_search_path`). One builder at a time on a database (a session lock: two commands, or a
command and `harvest migrate run`, take turns), so an INVALID index of the key's name is an
interrupted build, never one in progress: it is dropped and built again. The choice is recorded in
harvest.search_attribute_indexes first, so a build that stops is finished by the next
`harvest migrate run`, which builds every declared index that is missing or INVALID.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Any

import psycopg
from psycopg.rows import dict_row

from harvest.core.errors import ConfigError, HarvestError, InvalidArgument, PermissionDenied, SchemaMismatch
from harvest.core.search_attrs import is_search_attr_key
from harvest.db import pooler
from harvest.db.connection import (
    connect,
    describe_dsn,
    failure_reason,
    pin_search_path,
    probe_connect,
    take_session_lock,
    unbound_statements,
)

INDEX_TYPES = ("number", "text")
# Outcomes, as `harvest search-attr index|unindex` prints them.
BUILT, REBUILT, ALREADY, DROPPED, NOT_INDEXED = (
    "built",
    "rebuilt",
    "already indexed",
    "dropped",
    "not indexed",
)
# The session lock of whoever builds or drops a search attribute's index on a database (`harvest
# search-attr index|unindex`, `harvest migrate run`'s build): one at a time, so that a build in
# progress, whose index is INVALID until it ends, is never taken for an interrupted one and
# dropped under it (docs/security.md, "Advisory locks").
# (A key past 2**31: no hashtext() of a concurrency or mutex key, the claim's one-argument
# keys, can be it.)
BUILD_LOCK_KEY = 0x6861727661747472  # "harvattr"


def check_key(name: str) -> None:
    """Refuse a key no filter can name (InvalidArgument, before any database is touched)."""
    if not is_search_attr_key(name):
        raise InvalidArgument(
            f"search attribute {name!r} cannot be indexed: a key a filter names is letters, digits, "
            "_, . and - only"
        )


@dataclass
class Outcome:
    name: str
    type: str | None
    index_name: str
    action: str
    seconds: float = 0.0


Say = Callable[[str], None]


@contextlib.contextmanager
def owner_session(dsn: str) -> Iterator[psycopg.Connection]:
    """An autocommit session for the owner's DDL: to ``dsn``'s session URL when one was declared
    (CONCURRENTLY needs a session of its own; a transaction-mode pooler is refused, as `harvest
    migrate run` refuses it), with no statement or lock timeout."""
    conn = connect(dsn, autocommit=True)
    try:
        target = pooler.session_dsn(dsn)
        if pooler.transaction_pooled(target, conn, probe_connect):
            # (its session settings would land on other clients' server connections)
            raise ConfigError(
                f"cannot index on {describe_dsn(target)}: it goes through a connection pooler in "
                "transaction mode, and the owner's DDL needs a session of its own: give the database's "
                f"direct URL, or set its session URL ({pooler.session_setting()}); nothing was changed"
            )
        unbound_statements(conn)
        conn.execute("SELECT pg_catalog.set_config('lock_timeout', '0', false)")
        with pinned_search_path(conn):
            yield conn
    finally:
        conn.close()


@contextlib.contextmanager
def pinned_search_path(conn: psycopg.Connection) -> Iterator[None]:
    """Only pg_catalog (and pg_temp, last) on ``conn``'s search_path (connection.pin_search_path),
    the session's own put back after. The helpers that write the statements (harvest._search_attr_index_sql,
    _search_attr_ordered, _search_attr_index_matches) run as invoker with no search_path of their
    own (helpers run inside an entry point, which pins it: functions/security.sql), and here the
    owner's session calls them itself: under the login's search_path ("$user", public by
    default) a function a lower role made in a schema on it (public, where every role may create
    before PostgreSQL 15) would be chosen over pg_catalog's ``format(text, VARIADIC "any")``: its
    body run with the owner's rights, and what it returns run by the owner as the statement."""
    was = conn.execute("SELECT pg_catalog.current_setting('search_path')").fetchone()[0]  # type: ignore[index]  # one row
    pin_search_path(conn)
    try:
        yield
    finally:
        if not conn.closed and not conn.broken:
            conn.execute("SELECT pg_catalog.set_config('search_path', %s, false)", (was,))


@contextlib.contextmanager
def _one_builder(conn: psycopg.Connection, say: Say) -> Iterator[None]:
    """Hold BUILD_LOCK_KEY on ``conn`` (waiting for another builder of this database's search
    attribute indexes, said once), with the search_path pinned."""
    with pinned_search_path(conn):
        take_session_lock(
            conn,
            BUILD_LOCK_KEY,
            lambda: say(
                "waiting for another harvest search-attr index or unindex, or a harvest migrate run, "
                "building a search attribute's index on this database"
            ),
        )
        try:
            yield
        finally:
            if not conn.closed and not conn.broken:  # (a session that ended let go of it)
                conn.execute("SELECT pg_catalog.pg_advisory_unlock(%s)", (BUILD_LOCK_KEY,))


def require_owner(conn: psycopg.Connection) -> None:
    """Refuse a login that cannot act as the owner of harvest.executions (PermissionDenied, one
    line naming the role needed); SchemaMismatch before migration 0120."""
    row = conn.execute(
        "SELECT c.relowner::regrole::text, current_user::text,"
        " pg_catalog.pg_has_role(current_user, c.relowner, 'USAGE'),"
        " to_regclass('harvest.search_attribute_indexes') IS NOT NULL"
        " FROM pg_catalog.pg_class AS c WHERE c.oid = to_regclass('harvest.executions')"
    ).fetchone()
    if row is None:
        raise SchemaMismatch("this database has no Harvest schema: run harvest migrate run first")
    owner, login, may, recorded = row
    if not may:
        raise PermissionDenied(
            f"indexing a search attribute needs the owner of Harvest's schema, role {owner} (the role "
            f"harvest migrate run runs as), and this login is {login}: run it with HARVEST_DATABASE_URL "
            f"logging in as {owner}; nothing was changed"
        )
    if not recorded:
        raise SchemaMismatch(
            "this database is before migration 0120 (no harvest.search_attribute_indexes): run "
            "harvest migrate run first"
        )


def _statements(conn: psycopg.Connection, name: str, type_: str) -> dict[str, str]:
    cur = conn.cursor(row_factory=dict_row)
    return cur.execute("SELECT * FROM harvest._search_attr_index_sql(%s, %s)", (name, type_)).fetchone()  # type: ignore[return-value]  # one row


def _index(conn: psycopg.Connection, index_name: str) -> tuple[int, bool] | None:
    """The index named ``index_name`` in schema harvest: (its oid, valid), or None."""
    row = conn.execute(
        "SELECT c.oid::bigint, coalesce(i.indisvalid, false) FROM pg_catalog.pg_class AS c"
        " LEFT JOIN pg_catalog.pg_index AS i ON i.indexrelid = c.oid"
        " WHERE c.relname = %s AND c.relnamespace = 'harvest'::regnamespace",
        (index_name,),
    ).fetchone()
    return None if row is None else (row[0], row[1])


def _has_statistics(conn: psycopg.Connection, index_name: str) -> bool:
    return bool(
        conn.execute(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_statistic_ext"
            " WHERE stxname = %s AND stxnamespace = 'harvest'::regnamespace)",
            (index_name,),
        ).fetchone()[0]  # type: ignore[index]  # one row
    )


def _run(conn: psycopg.Connection, statement: str) -> None:
    conn.execute(statement, prepare=False)  # pyright: ignore[reportArgumentType, reportCallIssue]  # the server's own text


def ensure_index(conn: psycopg.Connection, name: str, type_: str, say: Say) -> Outcome:
    """Record ``name`` as indexed as ``type_`` and make its index valid: built, built again over
    an INVALID one, or already there (its statistics made if they were not). Refused, nothing
    changed: the key recorded with the other type, or an index of its name on something else.
    One builder at a time on a database (_one_builder): what it finds is not another's build."""
    with _one_builder(conn, say):
        return _ensure_index(conn, name, type_, say)


def _ensure_index(conn: psycopg.Connection, name: str, type_: str, say: Say) -> Outcome:
    sql = _statements(conn, name, type_)
    index_name = sql["index_name"]
    row = conn.execute(
        "SELECT type FROM harvest.search_attribute_indexes WHERE name = %s", (name,)
    ).fetchone()
    if row is not None and row[0] != type_:
        raise HarvestError(
            f"search attribute {name} is indexed as {row[0]} here: harvest search-attr unindex {name} "
            f"first to index it as {type_}; nothing was changed"
        )
    found = _index(conn, index_name)
    earlier = False  # the key's index as an earlier release built it: built again
    if found is not None and found[1]:
        matches = conn.execute(
            "SELECT harvest._search_attr_index_matches(%s::bigint::oid::regclass, %s, %s)",
            (found[0], name, type_),
        ).fetchone()[0]  # type: ignore[index]  # one row
        # Recorded, it is the one this command built (a record is made only past this check):
        # an earlier release's predicate let in values no btree entry holds, refusing their starts.
        earlier = not matches and row is not None
        if not matches and not earlier:
            raise HarvestError(
                f"harvest.{index_name} exists and is not the index of search attribute {name} as {type_} "
                f"(another expression, or not on harvest.executions): drop it (DROP INDEX CONCURRENTLY "
                f"harvest.{index_name}) and run this again; nothing was changed"
            )
    conn.execute(
        "INSERT INTO harvest.search_attribute_indexes (name, type, index_name) VALUES (%s, %s, %s)"
        " ON CONFLICT (name) DO NOTHING",
        (name, type_, index_name),
    )
    started = time.monotonic()
    if found is not None and found[1] and not earlier:
        if not _has_statistics(conn, index_name):
            _run(conn, sql["create_statistics"])
            _run(conn, "ANALYZE harvest.executions")
        return Outcome(name, type_, index_name, ALREADY, time.monotonic() - started)
    if earlier:
        say(
            f"dropping harvest.{index_name}, built by an earlier release (it refused a start carrying "
            f"a value of {name} past 2000 bytes), to build it again"
        )
        _run(conn, sql["drop_index"])
    elif found is not None:
        say(f"dropping the INVALID index harvest.{index_name} an interrupted build left, to build it again")
        _run(conn, sql["drop_index"])
    say(f"building harvest.{index_name} on search attribute {name} ({type_}) ...")
    _run(conn, sql["create_index"])
    _run(conn, sql["create_statistics"])
    _run(conn, "ANALYZE harvest.executions")  # (the statistics are made by the table's ANALYZE)
    return Outcome(
        name, type_, index_name, REBUILT if found is not None else BUILT, time.monotonic() - started
    )


def drop_index(conn: psycopg.Connection, name: str, say: Say) -> Outcome:
    """Forget ``name``'s record, then drop its index (CONCURRENTLY) and statistics: dropped, or
    not indexed when there was neither a record nor an index (one builder at a time, as
    :func:`ensure_index`)."""
    with _one_builder(conn, say):
        return _drop_index(conn, name, say)


def _drop_index(conn: psycopg.Connection, name: str, say: Say) -> Outcome:
    row = conn.execute(
        "DELETE FROM harvest.search_attribute_indexes WHERE name = %s RETURNING type", (name,)
    ).fetchone()
    type_ = row[0] if row is not None else None
    sql = _statements(conn, name, type_ or "number")  # (the type changes no name)
    index_name = sql["index_name"]
    found = _index(conn, index_name)
    statistics = _has_statistics(conn, index_name)
    started = time.monotonic()
    if found is not None:
        say(f"dropping harvest.{index_name} ...")
        _run(conn, sql["drop_index"])
    _run(conn, sql["drop_statistics"])
    action = DROPPED if (row is not None or found is not None or statistics) else NOT_INDEXED
    return Outcome(name, type_, index_name, action, time.monotonic() - started)


def list_indexes(conn: psycopg.Connection) -> list[dict[str, Any]]:
    """harvest.list_search_attribute_indexes(): each declared key, its index's state and size."""
    cur = conn.cursor(row_factory=dict_row)
    return cur.execute("SELECT * FROM harvest.list_search_attribute_indexes()").fetchall()


def _declared_here(conn: psycopg.Connection) -> dict[str, dict[str, Any]]:
    """This database's recorded keys and their states; none before migration 0120."""
    if not conn.execute(
        "SELECT pg_catalog.to_regclass('harvest.search_attribute_indexes') IS NOT NULL"
    ).fetchone()[0]:  # type: ignore[index]  # one row
        return {}
    return {r["name"]: r for r in list_indexes(conn)}


def to_build(conn: psycopg.Connection, also: Iterable[tuple[str, str]] = ()) -> dict[str, str]:
    """What :func:`build_declared` would build, changing nothing (`migrate run --dry-run`):
    {key: type}."""
    declared = _declared_here(conn)
    wanted = {name: row["type"] for name, row in declared.items() if row["state"] != "valid"}
    wanted.update({name: type_ for name, type_ in also if name not in declared})
    return dict(sorted(wanted.items()))


def build_declared(conn: psycopg.Connection, say: Say, also: Iterable[tuple[str, str]] = ()) -> list[Outcome]:
    """`harvest migrate run`'s step: record ``also`` (the keys other shards declare; one this
    database declares with another type keeps its own, said), then build every declared index
    that is missing or INVALID, a line each."""
    declared = _declared_here(conn)
    for name, type_ in also:
        if name in declared:
            if declared[name]["type"] != type_:
                say(
                    f"search attribute {name}: indexed as {type_} on another shard, as "
                    f"{declared[name]['type']} here; kept as it is here"
                )
            continue
        declared[name] = {"name": name, "type": type_, "state": "missing"}
    outcomes = []
    for name, row in sorted(declared.items()):
        if row["state"] == "valid":
            continue
        try:
            outcome = ensure_index(conn, name, row["type"], say)
        except (HarvestError, psycopg.Error) as exc:
            # The schema is migrated: an index that cannot be built is said, not a failed run.
            say(
                f"warning: search attribute {name}: its declared index was not built: "
                f"{failure_reason(exc)}; harvest search-attr indexes lists it, harvest search-attr index "
                f"{name} --type {row['type']} builds it"
            )
            continue
        say(
            f"search attribute {name}: index harvest.{outcome.index_name} {outcome.action} "
            f"in {outcome.seconds:.1f} s"
        )
        outcomes.append(outcome)
    return outcomes
