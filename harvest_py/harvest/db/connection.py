"""Connections: where the DSN comes from, and errors a person can act on.

Every error and log line about a connection goes through :func:`redact`, so the
password never appears, whatever the DSN's form (URI or key=value, quoted,
percent-encoded, a ``?password=`` parameter) and even when libpq cannot parse
it and echoes it back (docs/security.md, "Connection strings").
"""

from __future__ import annotations

import contextlib
import hashlib
import ipaddress
import logging
import os
import re
import socket
import time
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any, LiteralString, Self, cast
from urllib.parse import unquote

import psycopg
from psycopg import conninfo

from harvest.core.errors import (
    ConfigError,
    ConnectionRejected,
    DatabaseUnavailable,
    HarvestError,
    InvalidArgument,
    SchemaMismatch,
    from_database_error,
    set_database_error_line,
)
from harvest.core.secret_files import env_secret
from harvest.db import jsoncodec, pooler
from harvest.telemetry.logs import add_handler_filter

DSN_ENV = "HARVEST_DATABASE_URL"
MASK = "****"

# The driver's names the layers above need, so that only harvest.db imports psycopg.
DatabaseError = psycopg.Error  # any error the driver raises
Connection = psycopg.Connection  # a caller's own connection (start inside its transaction)
AsyncConnection = psycopg.AsyncConnection

log = logging.getLogger("harvest.db")


def resolve_dsn(explicit: str | None = None) -> str:
    """The DSN from the argument, else ``HARVEST_DATABASE_URL``; never a silent default. With
    ``HARVEST_SESSION_URL`` set, the DSN is declared pooled (harvest.db.pooler.declare).

    For the Python API (Client, AsyncClient, Worker); the CLI resolves its own
    (harvest.config.database_url, which names --database-url)."""
    if explicit is not None and not isinstance(explicit, str):
        # (Client(5): "'int' object has no attribute 'encode'" from psycopg; Worker(app, 5)
        # took it and failed at run())
        raise ConfigError(
            f"the database URL must be a string such as 'postgresql://user@host/db', "
            f"got {type(explicit).__name__} {explicit!r}"
        )
    dsn = explicit or env_secret(DSN_ENV)
    if not dsn:
        raise ConfigError(
            f"no database given: set {DSN_ENV} or pass the database URL as the first argument "
            '(Client("postgresql://..."), AsyncClient.connect(...), Worker(app, ...))'
        )
    session = env_secret(pooler.SESSION_URL_ENV)
    # The DSN goes through a transaction-mode pooler (harvest.db.pooler): the session URL pairs
    # with HARVEST_DATABASE_URL (or, unset, the URL given), never with another URL given here (its
    # sessions would go to another database), nor with the session URL itself (a direct one).
    configured = env_secret(DSN_ENV)
    if session and dsn != session and (not configured or dsn == configured):
        pooler.declare(dsn, session)
    return dsn


def parse_dsn(dsn: str, what: str = "the database URL") -> dict[str, Any]:
    """libpq's reading of the DSN, or a ConfigError whose text has no password (libpq's
    parse errors quote the DSN)."""
    try:
        return conninfo.conninfo_to_dict(dsn)
    except psycopg.Error as exc:
        raise ConfigError(f"{what} cannot be used: {redact(one_line(exc), dsn)}") from None


def describe_dsn(dsn: str) -> str:
    """``host:port/dbname`` for messages; the password never appears."""
    try:
        params = conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return "<unparseable DSN>"
    host = params.get("host") or "localhost"
    port = params.get("port") or "5432"
    dbname = params.get("dbname") or params.get("user") or "?"
    # A password with a raw "@" in a URI spills into what libpq reads as the host.
    return redact(f"{host}:{port}/{dbname}", dsn, pieces_anywhere=True)


# -- redaction -----------------------------------------------------------------------------

# The DSN's secrets: the password, and sslpassword (the passphrase of the client's key,
# sslkey), in every spelling below.
_SECRET_KEYS = ("password", "sslpassword")
# Generic shapes, for text that quotes a DSN we were not handed: URI userinfo (greedy up
# to the last "@", a raw "@" may sit in the password), a ?password= (or ?sslpassword=)
# parameter, a password= (or sslpassword=) keyword with a quoted or bare value.
# The URI shape is tried token by token (no match spans a space or a quote), on a token's part
# up to its last "@", and only from the start of a run of scheme characters (the digits and
# signs before its first letter kept): tried at every position of a long word, it scanned the
# rest of the word each time, quadratic (an error echoing a megabyte-long name took hours).
_URI_TOKEN = re.compile(r"[^\s\"']+")
_URI_USERINFO = re.compile(
    r"(?<![a-z0-9+.-])([0-9+.-]*+[a-z][a-z0-9+.-]*+://[^\s:/@\"']*+:)[^\s\"']*@", re.IGNORECASE
)
_QUERY_PASSWORD = re.compile(r"([?&](?:ssl)?password=)[^&\s\"']*", re.IGNORECASE)
_KEYWORD_PASSWORD = re.compile(r"(\b(?:ssl)?password\s*=\s*)('(?:[^'\\]|\\.)*'?|[^\s\"'&]+)", re.IGNORECASE)
_QUOTED = re.compile(r"\"[^\"]*\"|'[^']*'")
_PIECE_CUTS = re.compile(r"[\s@/:?#&=]+")
# A secret this short would match inside ordinary words: replaced only as a whole token.
_SHORT_SECRET = 4


def _keyword_values(dsn: str) -> list[str]:
    """Every spelling of a ``password=`` (or ``sslpassword=``) keyword's value, parseable or not."""
    values = []
    for match in re.finditer(r"(?:^|\s)(?:ssl)?password\s*=\s*", dsn, re.IGNORECASE):
        rest = dsn[match.end() :]
        if rest.startswith("'"):
            # Quoted: up to the closing unescaped quote, or the end if it never closes.
            body = cast("re.Match[str]", re.match(r"'((?:[^'\\]|\\.)*)'?", rest)).group(1)  # always matches
            values += [body, re.sub(r"\\(.)", r"\1", body)]
        else:
            # Bare: libpq takes one token, but a password with a space was meant whole
            # (libpq then reports the rest as a stray keyword): take up to the next key=.
            whole = re.split(r"\s+[A-Za-z_]+\s*=", rest, maxsplit=1)[0].strip()
            values += [whole, rest.split()[0] if rest.split() else ""]
    return values


def _secrets(dsn: str) -> set[str]:
    """Every spelling of the DSN's password (and sslpassword) that an error message could echo."""
    found: set[str] = set()
    try:
        params = conninfo.conninfo_to_dict(dsn)
        found.update(cast(str, params[key]) for key in _SECRET_KEYS if params.get(key))
    except psycopg.Error:
        pass  # unparseable: the tolerant readings below still find it
    userinfo = re.match(r"\s*[a-z][a-z0-9+.-]*://(.*)@", dsn, re.IGNORECASE | re.DOTALL)
    if userinfo and ":" in userinfo.group(1):
        found.add(userinfo.group(1).split(":", 1)[1])
    found.update(m.group(1) for m in re.finditer(r"[?&](?:ssl)?password=([^&]*)", dsn, re.IGNORECASE))
    found.update(_keyword_values(dsn))
    found |= {unquote(s) for s in found}  # libpq echoes either the raw or the decoded form
    return {s for s in found if s}


def _mask_uri_userinfo(text: str) -> str:
    """``scheme://user:password@`` with the password masked (greedy up to the token's last "@",
    a raw "@" may sit in the password), in time linear in ``text``."""

    def token(match: re.Match[str]) -> str:
        word = match.group(0)
        end = word.rfind("@") + 1
        if not end or "://" not in word:
            return word
        return _URI_USERINFO.sub(rf"\1{MASK}@", word[:end]) + word[end:]

    return _URI_TOKEN.sub(token, text)


def redact(text: str, dsn: str | None = None, *, pieces_anywhere: bool = False) -> str:
    """``text`` without the DSN's password, in any spelling; also any password-shaped part.

    ``pieces_anywhere`` masks the pieces of a password libpq cut apart in all of ``text``, not
    only in its quoted fragments (for short texts made of DSN fields, such as a host name)."""
    if dsn:
        secrets = sorted(_secrets(dsn), key=len, reverse=True)
        for secret in secrets:
            if len(secret) >= _SHORT_SECRET:
                text = text.replace(secret, MASK)
            else:
                text = re.sub(rf"(?<![\w%]){re.escape(secret)}(?![\w%])", MASK, text)
        # A password libpq cut apart (at a space: 'missing "=" after "ret"'; at a raw "@" of
        # a URI: the rest became the host) reaches its messages piecemeal: each piece is
        # masked inside the quoted fragments, where libpq echoes the DSN.
        pieces = {p for s in secrets for p in _PIECE_CUTS.split(s) if p and p != s}
        if pieces:
            long = [re.escape(p) for p in sorted(pieces, key=len, reverse=True) if len(p) >= _SHORT_SECRET]
            short = [re.escape(p) for p in pieces if len(p) < _SHORT_SECRET]
            patterns = ([f"(?:{'|'.join(long)})"] if long else []) + (
                [rf"(?<![\w%])(?:{'|'.join(short)})(?![\w%])"] if short else []
            )
            piece = re.compile("|".join(patterns))
            if pieces_anywhere:
                text = piece.sub(MASK, text)
            else:
                text = _QUOTED.sub(lambda quoted: piece.sub(MASK, quoted.group(0)), text)
    text = _mask_uri_userinfo(text)
    text = _QUERY_PASSWORD.sub(rf"\1{MASK}", text)
    return _KEYWORD_PASSWORD.sub(rf"\1{MASK}", text)


# -- errors --------------------------------------------------------------------------------

# libpq reports a refused login as text with no SQLSTATE (the server's error never reaches a
# result), so the cause is read from the message. These are answers, not outages: retrying
# cannot change them (28P01/28000 authentication, 3D000 unknown database, 42501 CONNECT
# privilege, a TLS setup the server or the client refuses).
_PERMANENT_SQLSTATES = frozenset({"28P01", "28000", "3D000", "42501"})
_PERMANENT = re.compile(
    r"authentication failed|no password supplied|no pg_hba\.conf entry|does not exist"
    r"|not permitted to log in|permission denied for database|certificate|does not support SSL"
    r"|\binvalid\b.*\b(?:value|option)\b|SCRAM|channel binding",
    re.IGNORECASE,
)


def one_line(exc: BaseException) -> str:
    """libpq's first line is the cause ("Connection refused"); later lines are hints."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    if not lines:
        return type(exc).__name__
    # libpq prefixes the cause with where it tried: keep only what went wrong.
    first = lines[0].rsplit(" failed: ", 1)[-1]
    return re.sub(r"^FATAL:\s+", "", first)


def is_permanent(exc: BaseException) -> bool:
    """Whether a connection error is an answer (wrong password, unknown database, bad DSN)
    rather than an outage that may pass (server not up yet, network)."""
    if isinstance(exc, psycopg.ProgrammingError | ConfigError | ConnectionRejected):
        return True
    if getattr(exc, "sqlstate", None) in _PERMANENT_SQLSTATES:
        return True
    return refused_connect(str(exc))


def refused_connect(text: str) -> bool:
    """Whether a failed connect's text (libpq's, or its one line) is the server's refusal of the
    login, the database or the TLS setup, which retrying cannot change, not an outage."""
    return bool(_PERMANENT.search(text))


def connection_error(exc: psycopg.Error, dsn: str) -> ConfigError | DatabaseUnavailable:
    """The HarvestError for a failed connect: one line, the cause named, no password."""
    reason = redact(one_line(exc), dsn)
    if isinstance(exc, psycopg.ProgrammingError):
        return ConfigError(
            f"the database URL cannot be used: {reason} (check its syntax: "
            "percent-encode special characters in a URI, quote values with spaces)"
        )
    where = describe_dsn(dsn)
    if is_permanent(exc):
        return ConnectionRejected(
            f"cannot connect to database {where}: {reason} "
            "(retrying will not help: check the DSN's user, password and database)"
        )
    return DatabaseUnavailable(f"cannot connect to database {where}: {reason}")


def invalid_input(exc: BaseException) -> bool:
    """Whether a database error says the caller's value was invalid: the server's SQLSTATE class
    22 (data exception), or the driver's refusal of a value it cannot send (a NUL in a text
    value, which never reaches the server). Both are psycopg's DataError.

    The one rule for an error the SQL API has no class for: a rejected argument (the CLI's exit
    2, :func:`database_error_message`; the management API's 400, harvest.web.errors), else
    exit 1 and a 500."""
    return isinstance(exc, psycopg.DataError) or (getattr(exc, "sqlstate", None) or "").startswith("22")


# SQLSTATEs of a database that lacks the Harvest schema, or a table or function of it: not
# migrated (or behind this Harvest), not a wrong call.
SCHEMA_MISSING = frozenset({"3F000", "42P01", "42883"})


def schema_missing(exc: BaseException) -> bool:
    """Whether a database error says the schema (or a table or function of it) is not there: a
    database not migrated to this Harvest (the management API's 503 ``schema_mismatch``)."""
    return getattr(exc, "sqlstate", None) in SCHEMA_MISSING


def database_error_message(exc: psycopg.Error) -> tuple[str, int]:
    """One line and an exit code for a database error: the Harvest exception's, when the
    SQLSTATE is one of ours, else the server's first line and 2 for a value it refused
    (:func:`invalid_input`), 1 for anything else (the CLI prints it); a schema, table or
    function of Harvest's missing (:func:`schema_missing`) says to migrate."""
    mapped = from_database_error(exc)
    if mapped is not None:
        return str(mapped), mapped.exit_code
    line = (exc.diag.message_primary or str(exc)).strip().splitlines()[0]
    if schema_missing(exc):  # the server's line alone ('schema "harvest" does not exist') said no remedy
        return f"{line}: the database is not migrated to this Harvest; run `harvest migrate run` on it", 1
    if exc.sqlstate == QUERY_CANCELED:  # the server's line alone said neither what was kept nor what to do
        return f"{line} (SQLSTATE {QUERY_CANCELED}): {QUERY_CANCELED_ADVICE}", 1
    return line, InvalidArgument.exit_code if invalid_input(exc) else 1


# 57014 query_canceled: the session's statement_timeout ended the statement (a managed
# platform's database setting, often 30 s, that the team's login cannot change for the database
# but can override for its own roles), or a cancel request did. The statement rolled back.
QUERY_CANCELED = "57014"
QUERY_CANCELED_ADVICE = (
    "the statement ran past the session's statement_timeout (the login's, its database's or the "
    "URL's), or a cancel request ended it, and was rolled back: nothing of it was kept. Make each "
    "step smaller (a command's --batch-size or --batch), or give this login a longer timeout "
    "(ALTER ROLE <login> SET statement_timeout = '5min', which overrides the database's)"
)


def database_refusal(exc: psycopg.Error) -> HarvestError:
    """A database error as the HarvestError its answer is, for a write on every shard that
    keeps each shard's refusal apart (harvest.web.routes.refusals_apart, harvest.cli.shards):
    a Harvest SQLSTATE's class; Harvest's schema missing or behind, SchemaMismatch; a value the
    server refused, InvalidArgument; else a HarvestError. Its message is
    :func:`database_error_message`'s one line (the server's first, never its DETAIL), the one
    the management API and the CLI answer such an error with; so are its status and exit code."""
    mapped = from_database_error(exc)
    if mapped is not None:
        return mapped
    message, _ = database_error_message(exc)
    if schema_missing(exc):
        return SchemaMismatch(message)
    return InvalidArgument(message) if invalid_input(exc) else HarvestError(message)


# A connect the server turned away for want of a slot (SQLSTATE 53300 too_many_connections:
# max_connections reached, or only reserved slots left). libpq reports it in the server's words
# with no SQLSTATE. The server is up: the advice is not "is it down?" but "raise max_connections
# or lower the pools' sizes" (harvest.shard.health reads the same words as "busy").
SERVER_FULL_WORDS = r"too many (?:connections|clients)|connection slots are reserved"
_SERVER_FULL = re.compile(SERVER_FULL_WORDS, re.IGNORECASE)
SERVER_FULL_ADVICE = (
    "the server is up but full: it refuses new connections at max_connections (SQLSTATE 53300); "
    "raise max_connections, or lower the pools' sizes (worker concurrency, the API's pools)"
)


def server_full(exc: BaseException) -> bool:
    """Whether ``exc`` is a connect refused because the server has no connection slot left
    (53300): the server is up, and full."""
    if not isinstance(exc, psycopg.OperationalError) or exc.sqlstate not in (None, "53300"):
        return False
    return exc.sqlstate == "53300" or bool(_SERVER_FULL.search(str(exc)))


def failure_reason(exc: BaseException, dsn: str | None = None) -> str:
    """A failure in one line for a log line or a stored last_error (every reader's to SELECT):
    its class, then Harvest's own message, else :func:`error_line` (a database error's first
    line and SQLSTATE, never its DETAIL or CONTEXT, which quote values: a payload's), redacted
    (``dsn``: its password in any spelling too)."""
    text = str(exc) if isinstance(exc, HarvestError) else error_line(exc)
    return f"{type(exc).__name__}: {redact(text, dsn)}"


def error_line(exc: BaseException) -> str:
    """An error in one line for a log: the server's first line and its SQLSTATE ("canceling
    statement due to lock timeout (SQLSTATE 55P03)"), else the client's first line. Neither
    carries the DSN: the server's message never does, and libpq's "connection to server at
    ... failed:" prefix is cut (:func:`one_line`)."""
    sqlstate = getattr(exc, "sqlstate", None)
    diag = getattr(exc, "diag", None)
    if sqlstate is None or diag is None:
        return one_line(exc)
    lines = (diag.message_primary or str(exc)).strip().splitlines()
    return f"{lines[0] if lines else type(exc).__name__} (SQLSTATE {sqlstate})"


class DatabaseTextFilter(logging.Filter):
    """Renders a logged traceback with each database error in its chain (the logged exception,
    its ``__cause__``, its ``__context__``, a group's members) by :func:`error_line`, redacted:
    a non-database error raised from or while handling one (``raise RuntimeError(...) from
    exc``) would print the database error whole, DETAIL, CONTEXT and any DSN it quotes. The
    stacks stay. On the loggers that log tracebacks (:data:`TRACEBACK_LOGGERS`) and on the
    handler of :func:`harvest.telemetry.logs.configure_logging`, which every line of a Harvest
    process passes (asyncio's, a library's)."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None and not record.exc_text and _chain_holds_database_error(exc):
            # (a Formatter prints exc_text when set, instead of formatting exc_info again)
            record.exc_text = traceback_text(exc)
        return True


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    todo = [exc]
    while todo:
        one = todo.pop()
        if any(one is known for known in seen):
            continue
        seen.append(one)
        todo.extend(e for e in (one.__cause__, one.__context__) if e is not None)
        todo.extend(getattr(one, "exceptions", None) or ())
    return seen


def _chain_holds_database_error(exc: BaseException) -> bool:
    return any(isinstance(one, DatabaseError) for one in _chain(exc))


def traceback_text(exc: BaseException) -> str:
    """``exc``'s traceback as logging prints it, each database error of its chain in one line."""
    import traceback

    shown = traceback.TracebackException.from_exception(exc)
    todo: list[tuple[traceback.TracebackException, BaseException]] = [(shown, exc)]
    seen: list[BaseException] = []
    while todo:
        te, one = todo.pop()
        if any(one is known for known in seen):
            continue
        seen.append(one)
        if isinstance(one, DatabaseError):
            # _str: the message TracebackException prints after the class (stable, 3.11 to 3.14)
            te._str = redact(error_line(one))  # type: ignore[attr-defined]
            te.__notes__ = None
        if te.__cause__ is not None and one.__cause__ is not None:
            todo.append((te.__cause__, one.__cause__))
        if te.__context__ is not None and one.__context__ is not None:
            todo.append((te.__context__, one.__context__))
        todo.extend(zip(te.exceptions or (), getattr(one, "exceptions", None) or (), strict=False))
    return "".join(shown.format()).rstrip("\n")


DATABASE_TEXT_FILTER = DatabaseTextFilter()
add_handler_filter(DATABASE_TEXT_FILTER)  # (a Harvest process' handler: every line it prints)
# A failure's recorded traceback says a database error as a log line does (core/errors.py).
set_database_error_line(lambda exc: redact(error_line(exc)) if isinstance(exc, DatabaseError) else None)

# The loggers Harvest logs a traceback on (the worker's crash lines, the management API's last
# resort, the workflow loop's) and those it lends to workflow and activity code (``ctx.logger``)
# carry the filter themselves: a program that logs through handlers of its own
# (``logging.basicConfig``, a framework's, set up before or after its Worker) has no handler of
# configure_logging's, and prints what ``harvest worker`` prints all the same. Each is named: a
# logger's filter runs for the records logged on it, not for those of its children
# (``harvest``'s would not see ``harvest.worker``'s).
TRACEBACK_LOGGERS = (
    "harvest.worker",
    "harvest.web",
    "harvest.runtime",
    "harvest.workflow",
    "harvest.activity",
)
for _name in TRACEBACK_LOGGERS:
    logging.getLogger(_name).addFilter(DATABASE_TEXT_FILTER)


# -- a peer that goes silent --------------------------------------------------------------------

# A server lost without a word (a failover that moves its address, a host that dies, a NAT or
# firewall that forgets the flow) leaves a TCP connection with nothing to read. libpq turns
# keepalives on but leaves their timing to the OS, whose first probe comes after two hours,
# and a statement sent into the silence is retransmitted for about 15 minutes (Linux's
# tcp_retries2) before the call fails: a worker's calls, its LISTEN connections and a client's
# wait would hang that long. The server is as blind the other way: the session of a worker
# whose host died or was cut off stays open until the server's own keepalives notice, holding
# a connection slot, its session locks (the metrics sampler's leadership) and any transaction it
# had open (a claim waiting, up to 20 ms, for its decision).
# So every session Harvest opens gives a silent peer up after about 30 s on both ends, idle or
# not: keepalive probes after 10 s of quiet, one every 5 s, and a TCP user timeout of 30 s,
# which on Linux ends both the probing and a wait for data never acknowledged (elsewhere the
# probes' count does, at 25 s). A peer that is only slow is unaffected: its kernel acknowledges
# and answers the probes whatever the process is doing (docs/operations.md, "A database that
# goes silent"). The Redis dispatch's socket has the same timings (harvest.db.redis_channel).
KEEPALIVE_IDLE_SECS = 10
KEEPALIVE_INTERVAL_SECS = 5
KEEPALIVE_COUNT = 3
SILENT_PEER_SECS = 30

# The same as socket options (IPPROTO_TCP level), each where the platform has it (macOS names
# the idle time TCP_KEEPALIVE and has no TCP_USER_TIMEOUT: its probes' count ends it): the
# Redis dispatch's socket (harvest.db.redis_channel) and the management API's listening socket,
# whose accepted connections inherit them (harvest.cli.serve.listening_sockets).
_IDLE_OPTION = getattr(socket, "TCP_KEEPIDLE", None) or getattr(socket, "TCP_KEEPALIVE", None)
SOCKET_KEEPALIVE_OPTIONS: Mapping[int, int] = {
    option: value
    for option, value in (
        (_IDLE_OPTION, KEEPALIVE_IDLE_SECS),
        (getattr(socket, "TCP_KEEPINTVL", None), KEEPALIVE_INTERVAL_SECS),
        (getattr(socket, "TCP_KEEPCNT", None), KEEPALIVE_COUNT),
        (getattr(socket, "TCP_USER_TIMEOUT", None), SILENT_PEER_SECS * 1000),
    )
    if option is not None
}

# This end's, as libpq settings.
NETWORK_DEFAULTS: Mapping[str, str] = {
    "keepalives_idle": str(KEEPALIVE_IDLE_SECS),
    "keepalives_interval": str(KEEPALIVE_INTERVAL_SECS),
    "keepalives_count": str(KEEPALIVE_COUNT),
    "tcp_user_timeout": str(SILENT_PEER_SECS * 1000),  # milliseconds
}
# The server's end, set by the session itself once connected (any role may set them), and only
# where the server has none of the four from anywhere else: its configuration, ALTER SYSTEM,
# ROLE or DATABASE, or the DSN's options. (Sent in the startup options instead, they would
# override all of that, and connection poolers refuse startup options they do not know.)
# Every name and operator schema-qualified: the session's search_path (the login role's to set)
# may put a schema before pg_catalog.
_SET_SERVER_END = """
SELECT pg_catalog.set_config(v.name, v.value, false)
FROM (VALUES ('tcp_keepalives_idle', %(idle)s), ('tcp_keepalives_interval', %(interval)s),
             ('tcp_keepalives_count', %(count)s), ('tcp_user_timeout', %(user_timeout)s)) AS v (name, value)
WHERE NOT EXISTS (
    SELECT FROM pg_catalog.pg_settings AS s
    WHERE s.name OPERATOR(pg_catalog.=) ANY (ARRAY['tcp_keepalives_idle', 'tcp_keepalives_interval',
                                                   'tcp_keepalives_count', 'tcp_user_timeout'])
      AND s.source OPERATOR(pg_catalog.<>) 'default')
"""
_SERVER_END_VALUES = {
    "idle": str(KEEPALIVE_IDLE_SECS),
    "interval": str(KEEPALIVE_INTERVAL_SECS),
    "count": str(KEEPALIVE_COUNT),
    "user_timeout": str(SILENT_PEER_SECS * 1000),
}


def _given(dsn: str) -> dict[str, Any] | None:
    """The DSN's own parameters (None when it does not parse: connecting reports it)."""
    try:
        return conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return None


def network_options(dsn: str) -> dict[str, Any]:
    """This end's :data:`NETWORK_DEFAULTS` for a connection to ``dsn``, unless the DSN sets any of
    them or ``keepalives=0`` (then all are the DSN's or the OS's: on Linux the user timeout decides
    when the probes give up, so one default kept beside slower probes would cut them at 30 s).
    None with a service (``service=``, ``PGSERVICE``): its file, which this cannot read, may set
    them."""
    return _network_options(_given(dsn))


def _network_options(given: dict[str, Any] | None) -> dict[str, Any]:
    if given is None or given.get("service") or os.environ.get("PGSERVICE"):
        return {}
    if str(given.get("keepalives", "1")).strip() == "0" or any(key in given for key in NETWORK_DEFAULTS):
        return {}
    return dict(NETWORK_DEFAULTS)


# Every connect is given this long (for each host and address it tries) unless the DSN or
# PGCONNECT_TIMEOUT gives a limit: psycopg's own default is 130 s, and a server that accepts the
# TCP connection but never answers (a stopped or hung server, a proxy with no server behind it)
# would hold each of a pool's connect attempts that long, the keepalives being answered by its
# kernel. (psycopg enforces the limit itself and reads no service file for it.)
CONNECT_TIMEOUT_SECS = 10


def connect_timeout_option(dsn: str) -> dict[str, Any]:
    """``connect_timeout`` for a connection to ``dsn``: none when the DSN or ``PGCONNECT_TIMEOUT``
    gives one, else :data:`CONNECT_TIMEOUT_SECS`."""
    return _connect_timeout_option(_given(dsn))


def _connect_timeout_option(given: dict[str, Any] | None) -> dict[str, Any]:
    if given is None or "connect_timeout" in given or os.environ.get("PGCONNECT_TIMEOUT"):
        return {}
    return {"connect_timeout": CONNECT_TIMEOUT_SECS}


def connection_options(dsn: str, connect_timeout: int | None = None) -> dict[str, Any]:
    """What every connection Harvest opens to ``dsn`` is given beside it, from one parse of it:
    :func:`network_options` and :func:`connect_timeout_option` (``connect_timeout``: a caller's
    own limit, a probe's, instead)."""
    given = _given(dsn)
    if connect_timeout is None:
        return {**_network_options(given), **_connect_timeout_option(given)}
    return {**_network_options(given), "connect_timeout": connect_timeout}


_server_end_warned = False


def _server_end_refused(exc: psycopg.Error) -> None:
    """A refusal (a statement_timeout of a few microseconds, a role denied pg_settings): the
    settings are a safeguard and the connection works without them, so a warning, once."""
    global _server_end_warned
    if not _server_end_warned:
        _server_end_warned = True
        log.warning("the server's keepalives of this session could not be set: %s", error_line(exc))


def _over_tcp(conn: psycopg.Connection | psycopg.AsyncConnection) -> bool:
    return bool(conn.info.hostaddr)  # empty over a Unix socket: nothing to set


def set_server_end(conn: psycopg.Connection) -> None:
    """The server's end of ``conn`` gives a silent client up as this end does (``_SET_SERVER_END``),
    in one round trip outside any transaction. A refusal is logged and leaves the connection as it
    was; a connection lost meanwhile, or an interrupt, closes ``conn`` and raises (the caller's
    connect failed)."""
    if _over_tcp(conn):
        _set_on_idle(conn, _SET_SERVER_END, _SERVER_END_VALUES, _server_end_refused)


def _set_on_idle(
    conn: psycopg.Connection, sql: LiteralString, params: Any, refused: Callable[[psycopg.Error], None]
) -> None:
    """Run a session setting's ``sql`` on ``conn`` just connected, outside any transaction, and
    put its autocommit back: a refusal goes to ``refused`` (the connection works without the
    setting), a connection lost meanwhile or an interrupt closes ``conn`` and raises."""
    autocommit = conn.autocommit
    try:
        conn.autocommit = True  # idle: a client-side switch, no BEGIN/COMMIT round trips
        conn.execute(sql, params)
    except psycopg.Error as exc:
        if conn.closed:
            raise
        refused(exc)
    except BaseException:
        conn.close()
        raise
    conn.autocommit = autocommit


async def _set_on_idle_async(
    conn: psycopg.AsyncConnection, sql: LiteralString, params: Any, refused: Callable[[psycopg.Error], None]
) -> None:
    """:func:`_set_on_idle` for an asyncio connection."""
    autocommit = conn.autocommit
    try:
        await conn.set_autocommit(True)
        await conn.execute(sql, params)
    except psycopg.Error as exc:
        if conn.closed:
            raise
        refused(exc)
    except BaseException:
        await conn.close()
        raise
    await conn.set_autocommit(autocommit)


async def set_server_end_async(conn: psycopg.AsyncConnection) -> None:
    """:func:`set_server_end` for an asyncio connection (cancelled: a pool closing while it fills,
    a worker stopping during a reconnect)."""
    if _over_tcp(conn):
        await _set_on_idle_async(conn, _SET_SERVER_END, _SERVER_END_VALUES, _server_end_refused)


def caller_connection(value: Any, *, asynchronous: bool) -> Any:
    """``value``, a caller's connection a start runs on (``StartOptions.connection``), or None;
    ``InvalidArgument`` for anything else, which failed inside with an AttributeError."""
    kind = psycopg.AsyncConnection if asynchronous else psycopg.Connection
    if value is None or isinstance(value, kind):
        return value
    raise InvalidArgument(
        f"connection: expected a psycopg {kind.__name__} (the start runs in its transaction) "
        f"or None, got {type(value).__name__} {value!r}"
    )


def connect(dsn: str, *, autocommit: bool = False, connect_timeout: int | None = None) -> psycopg.Connection:
    """Open a connection, or raise a HarvestError naming host and database, never the password.
    ``connect_timeout``: the caller's limit (a probe's), else the DSN's (connect_timeout_option).
    A connection held as a session of its own (LISTEN, a session lock, a migration): to a pooled
    ``dsn``'s session URL when one was declared (harvest.db.pooler)."""
    dsn = pooler.session_dsn(dsn)  # a session of its own: not through a transaction-mode pooler
    warn_if_unverified_tls(dsn)
    try:
        options = {**connection_options(dsn, connect_timeout), **_POOLED_OPTIONS[pooler.is_pooled(dsn)]}
        conn = psycopg.connect(dsn, autocommit=autocommit, **options)
        _check_startup_role(conn, dsn)
        if _found_pooled(dsn, conn, autocommit):
            return conn  # (prepares nothing; its session settings would land on others' server connections)
        set_server_end(conn)
    except psycopg.Error as exc:
        raise connection_error(exc, dsn) from None
    return conn


def unbound_statements(conn: psycopg.Connection) -> None:
    """No statement_timeout (nor, on PostgreSQL 17+, transaction_timeout) for ``conn``'s session,
    whatever the login, its database or the DSN set (often for an application's own queries):
    for the owner's DDL (a migration, a search attribute's index), which a timeout would cancel
    midway (a CREATE INDEX CONCURRENTLY cancelled leaves an INVALID index)."""
    conn.execute(
        "SELECT pg_catalog.set_config('statement_timeout', '0', false),"
        " CASE WHEN pg_catalog.current_setting('transaction_timeout', true) IS NOT NULL"
        " THEN pg_catalog.set_config('transaction_timeout', '0', false) END"
    )


# The search_path of a session of the owner's (or an admin's) that runs Harvest's own SQL: the
# migrator's (Harvest's migrations, its function files, harvest._secure_functions and _audit),
# a search attribute's index statements, backup verify's checks of its scratch copy. Every
# Harvest name in that SQL is schema-qualified, so only pg_catalog, and pg_temp last (first, a
# temporary table would shadow a table of the same name). Under the login's own path ("$user",
# public by default) a function a lower role made in a schema on it (public, where every role
# may create before PostgreSQL 15) is chosen over pg_catalog's wherever it matches the call
# better (format(text, text, text) beats pg_catalog's format(text, VARIADIC "any"), whatever the
# order of the path): run with the session's rights, or bound for good into a view, a default or
# a function with a SQL-standard body created meanwhile (docs/security.md, "Whose search_path").
PINNED_SEARCH_PATH = "pg_catalog, pg_temp"


def pin_search_path(conn: psycopg.Connection) -> None:
    """Set ``conn``'s search_path to PINNED_SEARCH_PATH for the rest of its session (until a RESET)."""
    conn.execute("SELECT pg_catalog.set_config('search_path', %s, false)", (PINNED_SEARCH_PATH,))


def take_session_lock(conn: psycopg.Connection, key: int, waiting: Callable[[], None]) -> None:
    """Take the session advisory lock ``key`` on ``conn`` (autocommit), waiting for its holder
    between short tries, never inside a statement: a session waiting in pg_advisory_lock holds a
    snapshot, which a CREATE INDEX CONCURRENTLY of the holder waits for, while the waiter waits
    for its lock (PostgreSQL ends one of the two as a deadlock). ``waiting()`` once, when the
    first try finds it held."""
    pause, said = 0.05, False
    while not conn.execute("SELECT pg_catalog.pg_try_advisory_lock(%s)", (key,)).fetchone()[0]:  # type: ignore[index]  # one row
        if not said:
            waiting()
            said = True
        time.sleep(pause)
        pause = min(pause * 2, 1.0)


def probe_connect(dsn: str, connect_timeout: int = 10) -> psycopg.Connection:
    """A plain connection to ``dsn`` itself, not to its session URL: a check made through a
    pooler (migrate's, harvest.db.pooler's probe for it). Autocommit, no prepared statement,
    nothing set; a failed connect is :func:`connect`'s HarvestError (host and database named, the
    cause in one line, no password)."""
    try:
        options = connection_options(dsn, connect_timeout)
        return psycopg.connect(dsn, autocommit=True, prepare_threshold=None, **options)
    except psycopg.Error as exc:
        raise connection_error(exc, dsn) from None


def _found_pooled(dsn: str, conn: psycopg.Connection, autocommit: bool) -> bool:
    """Whether ``dsn`` goes through a transaction-mode pooler with no session URL, asked once a
    process (harvest.db.pooler.detect: on ``conn`` when it is autocommit, else on a connection of
    its own, so ``conn`` opens no transaction): then ``conn`` prepares no statement. A command's
    one connection (the CLI's writes and batch loops) found it as a pool's first connection does."""
    if not pooler.detect(dsn, conn if autocommit else None):
        return False
    conn.prepare_threshold = None
    return True


async def connect_async(
    dsn: str, *, autocommit: bool = False, connect_timeout: int | None = None
) -> psycopg.AsyncConnection:
    dsn = pooler.session_dsn(dsn)  # (as connect's)
    warn_if_unverified_tls(dsn)
    try:
        options = {**connection_options(dsn, connect_timeout), **_POOLED_OPTIONS[pooler.is_pooled(dsn)]}
        conn = await psycopg.AsyncConnection.connect(dsn, autocommit=autocommit, **options)
        await _check_startup_role_async(conn, dsn)
        if await pooler.detect_async(dsn, conn if autocommit else None):  # (as connect's _found_pooled)
            conn.prepare_threshold = None
            return conn
        await set_server_end_async(conn)
    except psycopg.Error as exc:
        raise connection_error(exc, dsn) from None
    return conn


def read_only(conn: psycopg.Connection, dsn: str) -> None:
    """Make ``conn`` (from :func:`connect` on ``dsn``, autocommit and idle) refuse writes: a
    read-only command cannot write by accident. Set for the session, except behind a pooler that
    shares server connections (harvest.db.pooler, found here if need be) with no session URL:
    there ``default_transaction_read_only`` stayed on the server connection that ran the SET,
    and the next client lent it (a worker's scan, a start) failed with ReadOnlySqlTransaction;
    so the connection runs its calls in one read-only transaction instead (``BEGIN READ ONLY``,
    rolled back when it closes), holding its server connection until then."""
    if pooler.detect(dsn, conn) and pooler.needs_session(dsn):
        conn.read_only = True
        conn.autocommit = False
        return
    conn.execute("SET default_transaction_read_only = on")


# A pooled connection's calls run READ COMMITTED whatever the role's or database's
# default_transaction_isolation: every Harvest function is written for it, and a claim in a
# snapshot transaction admits no task of a concurrency key (functions/flow_concurrency.sql,
# _admit_candidates), so under a REPEATABLE READ default a worker ran no keyed work. Set by the
# session once connected, outside any transaction (a startup option would be refused by
# poolers that do not know it); nothing when the default is READ COMMITTED already.
_SET_READ_COMMITTED = """
SELECT pg_catalog.set_config('default_transaction_isolation', 'read committed', false)
WHERE pg_catalog.current_setting('default_transaction_isolation') OPERATOR(pg_catalog.<>) 'read committed'
"""
_read_committed_warned = False


def _read_committed_refused(exc: psycopg.Error) -> None:
    global _read_committed_warned
    if not _read_committed_warned:
        _read_committed_warned = True
        log.warning(
            "the pooled session's default_transaction_isolation could not be set to read committed "
            "(its claims admit no task of a concurrency key): %s",
            error_line(exc),
        )


# A pooled connection behind a pooler that shares server connections (harvest.db.pooler): no
# prepared statement (psycopg prepares a statement run 5 times; the next transaction's server
# connection has another client's _pg3_0, or none), and nothing set for the session (it would
# land on whichever server connection ran it, another client's next). Harvest's calls state
# their isolation themselves where it matters (an open claim's BEGIN ISOLATION LEVEL READ COMMITTED).
_POOLED_OPTIONS: Mapping[bool, Mapping[str, Any]] = {False: {}, True: {"prepare_threshold": None}}


class RedactingConnection(psycopg.Connection):
    """The connection class for pools: psycopg_pool logs every failed connect attempt with
    the error's text, so that text must not carry the password. Its ``json``/``jsonb`` values
    are read with :func:`harvest.db.jsoncodec.loads` (``json.loads``, cheaper per value), and
    both its ends give a silent peer up as :func:`connect`'s do (``network_options``,
    ``set_server_end``), its connect is bounded as theirs is (``connection_options``), and its
    calls run READ COMMITTED whatever the session's default (``_SET_READ_COMMITTED``). Behind a
    pooler that shares server connections, it prepares and sets nothing (``_POOLED_OPTIONS``):
    the first connection to a URL in a process finds such a pooler (harvest.db.pooler.detect),
    before any statement could be prepared."""

    pooled = False  # behind a pooler that shares server connections (harvest.db.pooler)

    @classmethod
    def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
        pooled = pooler.is_pooled(conninfo)
        try:
            options = {**connection_options(conninfo), **kwargs, **_POOLED_OPTIONS[pooled]}
            conn = super().connect(conninfo, **options)
        except psycopg.Error as exc:
            raise type(exc)(redact(str(exc), conninfo)) from None
        jsoncodec.use_on(conn)
        if not pooled:  # (detect asks once a process and URL: one read)
            try:
                pooled = pooler.detect(conninfo, conn)
            except BaseException:
                conn.close()
                raise
            if pooled:
                conn.prepare_threshold = None
        conn.pooled = pooled
        if pooled:
            return conn
        try:
            set_server_end(conn)
            _set_on_idle(conn, _SET_READ_COMMITTED, None, _read_committed_refused)
        except psycopg.Error as exc:  # lost meanwhile: the pool tries again
            raise type(exc)(redact(str(exc), conninfo)) from None
        return conn


class RedactingAsyncConnection(psycopg.AsyncConnection):
    """:class:`RedactingConnection` for asyncio pools."""

    pooled = False  # behind a pooler that shares server connections (harvest.db.pooler)

    @classmethod
    async def connect(cls, conninfo: str = "", **kwargs: Any) -> Self:
        pooled = pooler.is_pooled(conninfo)
        try:
            options = {**connection_options(conninfo), **kwargs, **_POOLED_OPTIONS[pooled]}
            conn = await super().connect(conninfo, **options)
        except psycopg.Error as exc:
            raise type(exc)(redact(str(exc), conninfo)) from None
        jsoncodec.use_on(conn)
        if not pooled:  # (as RedactingConnection's)
            try:
                pooled = await pooler.detect_async(conninfo, conn)
            except BaseException:
                await conn.close()
                raise
            if pooled:
                conn.prepare_threshold = None
        conn.pooled = pooled
        if pooled:
            return conn
        try:
            await set_server_end_async(conn)
            await _set_on_idle_async(conn, _SET_READ_COMMITTED, None, _read_committed_refused)
        except psycopg.Error as exc:  # lost meanwhile: the pool tries again
            raise type(exc)(redact(str(exc), conninfo)) from None
        return conn


# -- TLS -----------------------------------------------------------------------------------

_tls_warned: set[str] = set()


def is_local_host(host: str) -> bool:
    """A unix socket directory, localhost or a loopback address (``[::1]`` too): this machine.
    The one test of it (a DSN's hosts, `harvest dev`'s database, the dev profile's Host)."""
    host = host.strip()
    if not host or host.startswith(("/", "@")) or host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False


def tls_warning(dsn: str, env: Mapping[str, str] | None = None) -> str | None:
    """The warning this DSN deserves, or None: a server off this machine reached with an
    sslmode below verify-full, where libpq does not check that the certificate names the host
    (or checks no certificate at all). ``env`` stands for libpq's PG* variables."""
    env = os.environ if env is None else env
    try:
        params = conninfo.conninfo_to_dict(dsn)
    except psycopg.Error:
        return None  # connecting reports the DSN itself
    # libpq connects to hostaddr when given (host then only names the certificate).
    hosts = cast(
        str, params.get("hostaddr") or params.get("host") or env.get("PGHOSTADDR") or env.get("PGHOST") or ""
    )
    remote = [h.strip() for h in hosts.split(",") if not is_local_host(h)]
    if not remote:
        return None
    sslmode = params.get("sslmode") or env.get("PGSSLMODE")
    rootcert = params.get("sslrootcert") or env.get("PGSSLROOTCERT")
    if not sslmode:
        # libpq's default is prefer, except that sslrootcert=system implies verify-full.
        sslmode = "verify-full" if rootcert == "system" else None
    if sslmode == "verify-full":
        return None
    shown = f"sslmode={sslmode}" if sslmode else "no sslmode (libpq then uses prefer)"
    unchecked = (
        "the server's host name is not checked against its certificate"
        if sslmode == "verify-ca"
        else "the server's certificate and host name are not verified"
    )
    return (
        f"the database {describe_dsn(dsn)} is not on this machine and the DSN sets {shown}: "
        f"{unchecked}, so the connection (and the password) can be intercepted. Use "
        "sslmode=verify-full with sslrootcert=<the CA file> or sslrootcert=system "
        "(docs/security.md, TLS)"
    )


def warn_if_unverified_tls(dsn: str) -> None:
    """Log :func:`tls_warning` once per DSN in this process."""
    key = hashlib.sha256(dsn.encode()).hexdigest()
    if key in _tls_warned:
        return
    _tls_warned.add(key)
    message = tls_warning(dsn)
    if message:
        log.warning("%s", message)


# -- roles: a face's request runs as its caller's role ------------------------------------------

# The roles a face may switch a connection to (functions/security.sql creates them), and the
# application names of the faces (the audit log's source: harvest._audit_source).
# The roles a face may lower a request to (harvest.web.principal.ROLE_OF_SCOPE); never the worker.
FACE_ROLES = frozenset({"harvest_reader", "harvest_operator", "harvest_admin"})
FACE_APPLICATION_NAMES = {"api": "harvest-api", "cli": "harvest-cli", "ui": "harvest-ui"}
# The application names Harvest's long-running processes give their connections, so an operator
# tells them apart in pg_stat_activity (docs/operations.md, "Connection names"): `harvest worker`
# by what its role runs, `harvest serve` and `harvest dev`. None is a face's: what they do that
# the audit log records has source cli with the name in details, as any non-face client's.
PROCESS_APPLICATION_NAMES = {
    "worker": "harvest-worker",  # the claim loop (and the scheduler and janitor beside it)
    "scheduler": "harvest-scheduler",  # the scheduler (and the janitor) without a claim loop
    "retention": "harvest-retention",  # the retention janitor alone
    "web": "harvest-web",  # harvest serve's own connections (its requests': harvest-api / -ui)
    "dev": "harvest-dev",  # harvest dev: every runtime in one process
}
assert not set(PROCESS_APPLICATION_NAMES.values()) & set(FACE_APPLICATION_NAMES.values())


def process_application_name(*, worker: bool, scheduler: bool) -> str:
    """The application name of a process that runs the claim loop (``worker``), else the
    scheduler, else (neither) the retention janitor alone."""
    kind = "worker" if worker else "scheduler" if scheduler else "retention"
    return PROCESS_APPLICATION_NAMES[kind]


def _application_name(role: str, source: str) -> str:
    """``source``'s application name, once ``role`` and ``source`` are known to be a face's."""
    if role not in FACE_ROLES:
        raise ValueError(f"unknown role {role!r}: a request runs as one of {', '.join(sorted(FACE_ROLES))}")
    if source not in FACE_APPLICATION_NAMES:
        raise ValueError(f"unknown audit source {source!r}")
    return FACE_APPLICATION_NAMES[source]


# The role, the audit source (application_name) and the audit context a face asserts for its own
# calls (harvest._audit_context, functions/audit.sql: caller-asserted text for audit rows only,
# recorded beside the real login), for the transaction only: set_config(..., true) is SET LOCAL.
# One statement; the role goes through the same check as SET ROLE's (membership, existence: 22023).
_SET_ROLE_LOCAL = (
    "SELECT pg_catalog.set_config('role', %(role)s, true), "
    "pg_catalog.set_config('application_name', %(application_name)s, true), "
    "pg_catalog.set_config('harvest.audit_actor', %(actor)s, true), "
    "pg_catalog.set_config('harvest.audit_route', %(route)s, true)"
)


def role_settings(
    role: str, source: str = "api", *, actor: str | None = None, route: str | None = None
) -> tuple[LiteralString, dict[str, Any]]:
    """The statement and its parameters that make the rest of a transaction run as ``role`` with
    the audit source ``source`` and the audit ``actor`` and ``route`` (:func:`set_role`'s, and a
    face's one-call transaction's: harvest.db.pools.RoledPool). ValueError for a role or source
    that is not a face's."""
    application_name = _application_name(role, source)
    return _SET_ROLE_LOCAL, {
        "role": role,
        "application_name": application_name,
        "actor": actor or "",
        "route": route or "",
    }


def role_missing(exc: BaseException, role: str) -> SchemaMismatch | None:
    """The SchemaMismatch a failed :func:`role_settings` statement means when ``role`` does not
    exist on the server (a cluster Harvest was never migrated on: 22023), else None."""
    if isinstance(exc, psycopg.errors.InvalidParameterValue) and f'role "{role}" does not exist' in str(exc):
        return SchemaMismatch(
            f"role {role} does not exist on this server: Harvest's roles are created by its "
            "migrations (harvest migrate run)"
        )
    return None


@contextlib.asynccontextmanager
async def set_role(
    conn: psycopg.AsyncConnection,
    role: str,
    source: str = "api",
    *,
    actor: str | None = None,
    route: str | None = None,
) -> AsyncIterator[Any]:
    """Run the calls made on ``conn`` inside the block as ``role`` with the audit source
    ``source`` (api, cli or ui, through ``application_name``) and the audit ``actor`` and
    ``route`` (docs/auth.md, "Audit"). The one place a face lowers a connection to its caller's
    role: the EXECUTE grants and ``_session_has_role`` then see that role
    (functions/security.sql). The login role must be a member of ``role`` (docs/http-api.md,
    "Roles"); a role that does not exist (a cluster Harvest was never migrated on) is a
    SchemaMismatch.

    All of them are SET LOCAL (:func:`role_settings`), always: in the caller's transaction when
    ``conn`` is in one, else in a transaction of the block's own (committed when the block ends,
    rolled back when it raises). They end with that transaction, on the server connection that
    ran it, whatever stands between: behind a pooler that shares server connections (PgBouncer
    in transaction mode), found or not (harvest.db.pooler), a role set for the session stayed on
    the server connection that ran the SET, which the pooler lent the next client (then running
    as ``role``), and the block's calls ran on another, as the login role. Nothing is left to
    RESET when the connection goes back to its pool."""
    statement, params = role_settings(role, source, actor=actor, route=route)  # (before anything is sent)
    async with contextlib.AsyncExitStack() as stack:
        if conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE:
            await stack.enter_async_context(conn.transaction())
        try:
            await conn.execute(statement, params)
        except psycopg.Error as exc:
            if (missing := role_missing(exc, role)) is None:
                raise
            raise missing from None
        yield conn


def dsn_with_role(dsn: str, role: str, source: str = "api") -> str:
    """``dsn`` for a connection of its own that starts as ``role`` with the audit source
    ``source`` (libpq ``options``, appended to any the DSN has): for a LISTEN connection a
    request opens (a result, query or update wait), the same rights as :func:`set_role`. A
    pooled ``dsn``'s session URL (harvest.db.pooler), as :func:`connect` would: a LISTEN needs a
    session, and PgBouncer refuses the ``options`` startup parameter."""
    options = f"-c role={role} -c application_name={_application_name(role, source)}"
    return with_startup_options(pooler.session_dsn(dsn), options)


# The role a DSN's libpq options start the session as (``-c role=...``, the last one wins).
_STARTUP_ROLE = re.compile(r"(?:^|\s)-c\s*role=(\S+)")
_CURRENT_USER: LiteralString = "SELECT current_user"  # (SQL syntax: no search_path can shadow it)


def startup_role(dsn: str) -> str | None:
    """The face's role ``dsn``'s libpq ``options`` start its session as (:func:`dsn_with_role`'s),
    else None."""
    options = conninfo.conninfo_to_dict(dsn).get("options")
    found = _STARTUP_ROLE.findall(str(options)) if options else []
    return found[-1] if found and found[-1] in FACE_ROLES else None


def _role_not_taken(role: str) -> ConfigError:
    # (no host or login named: a wait's connection fails in an HTTP caller's request)
    return ConfigError(
        f"a connection asked to run as {role} (libpq options -c role=...) runs as another role: "
        "something between ignored the options startup parameter (PgBouncer does with options in "
        "ignore_startup_parameters). Point the session URL (session_url, HARVEST_SESSION_URL, "
        "shards.session_urls.N) at the database itself or at a pooler that applies options, or "
        'take options out of ignore_startup_parameters (docs/security.md, "A role set at connect")'
    )


def _check_startup_role(conn: psycopg.Connection, dsn: str) -> None:
    """Refuse (ConfigError, ``conn`` closed) a connection whose DSN starts it as a face's role
    (:func:`dsn_with_role`) and that does not run as it. One round trip, once a connection, and
    only on such a DSN; nothing left open (a transaction is rolled back)."""
    role = startup_role(dsn)
    if role is None:
        return
    try:
        row = conn.execute(_CURRENT_USER).fetchone()
        if not conn.autocommit:
            conn.rollback()
    except BaseException:
        conn.close()
        raise
    if row is None or row[0] != role:
        conn.close()
        raise _role_not_taken(role)


async def _check_startup_role_async(conn: psycopg.AsyncConnection, dsn: str) -> None:
    """:func:`_check_startup_role` for an asyncio connection."""
    role = startup_role(dsn)
    if role is None:
        return
    try:
        row = await (await conn.execute(_CURRENT_USER)).fetchone()
        if not conn.autocommit:
            await conn.rollback()
    except BaseException:
        await conn.close()
        raise
    if row is None or row[0] != role:
        await conn.close()
        raise _role_not_taken(role)


def with_startup_options(dsn: str, extra: str) -> str:
    """``dsn`` whose libpq ``options`` (settings the server applies at the session's start) end
    with ``extra``, after its own, or after ``PGOPTIONS`` when it has none (libpq reads that
    only when the DSN gives no ``options``: appending to nothing would drop it)."""
    params = conninfo.conninfo_to_dict(dsn)
    own = str(params["options"] if "options" in params else os.environ.get("PGOPTIONS", ""))
    params["options"] = f"{own} {extra}".strip()
    return conninfo.make_conninfo("", **params)
