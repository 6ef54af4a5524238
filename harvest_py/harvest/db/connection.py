"""Connections: where the DSN comes from, and errors a person can act on."""

from __future__ import annotations

import os

import psycopg
from psycopg import conninfo

from harvest.errors import ConfigError, DatabaseUnavailable

DSN_ENV = "HARVEST_DATABASE_URL"


def resolve_dsn(explicit: str | None = None) -> str:
    """The DSN from the argument, else ``HARVEST_DATABASE_URL``; never a silent default."""
    dsn = explicit or os.environ.get(DSN_ENV)
    if not dsn:
        raise ConfigError(
            f"no database given: set {DSN_ENV} (preferred: a command line is visible to ps) "
            "or pass --database-url")
    return dsn


def describe_dsn(dsn: str) -> str:
    """``host:port/dbname`` for messages; the password never appears."""
    try:
        params = conninfo.conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "<unparseable DSN>"
    host = params.get("host") or "localhost"
    port = params.get("port") or "5432"
    dbname = params.get("dbname") or params.get("user") or "?"
    return f"{host}:{port}/{dbname}"


def _one_line(exc: BaseException) -> str:
    """libpq's first line is the cause ("Connection refused"); later lines are hints."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    # libpq prefixes the cause with where it tried: keep only what went wrong.
    first = lines[0]
    return first.split(" failed: ", 1)[-1] if " failed: " in first else first


def connect(dsn: str, *, autocommit: bool = False, connect_timeout: int = 10) -> psycopg.Connection:
    """Open a connection, or raise DatabaseUnavailable naming host and database."""
    try:
        return psycopg.connect(dsn, autocommit=autocommit, connect_timeout=connect_timeout)
    except psycopg.OperationalError as exc:
        reason = _one_line(exc)
        # libpq may echo the DSN back; keep the password out of anything we print.
        password = conninfo.conninfo_to_dict(dsn).get("password")
        if password:
            reason = reason.replace(password, "****")
        raise DatabaseUnavailable(
            f"cannot connect to database {describe_dsn(dsn)}: {reason}") from None


async def connect_async(dsn: str, *, autocommit: bool = False,
                        connect_timeout: int = 10) -> psycopg.AsyncConnection:
    try:
        return await psycopg.AsyncConnection.connect(dsn, autocommit=autocommit,
                                                     connect_timeout=connect_timeout)
    except psycopg.OperationalError as exc:
        reason = _one_line(exc)
        password = conninfo.conninfo_to_dict(dsn).get("password")
        if password:
            reason = reason.replace(password, "****")
        raise DatabaseUnavailable(
            f"cannot connect to database {describe_dsn(dsn)}: {reason}") from None
