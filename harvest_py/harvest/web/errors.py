"""Every error of the management API as JSON: ``{"error": {"code", "message", ...}}``.

The status and the code come from the one mapping in ``harvest.core.errors`` (SQLSTATE ->
exception -> exit code -> HTTP status). A database error the SQL API has no class for is a 400
when the input was invalid (SQLSTATE class 22, or a NUL the driver would not send), a 503 when
the database could not be reached (harvest.db.pools.database_unreachable) or has no Harvest
schema (not migrated), a 504 when a statement timeout (or a cancel) ended the statement
(57014), else a 500 with the server's first line; never a stack trace. Retryable errors (a
shard down, a run being moved) carry ``Retry-After``.

A database that cannot be reached (:func:`outage_answer`, the one rule for the API, the
dashboard and the streams) is a 503 with a stable code, a request id and no word of what the
connect met: the token check needs the database too, so the caller may be anyone, and a failed
connect's text names the login, the host, the database. That text goes to the server's log
under the request id, bounded per cause (:class:`OutageLog`: the first request's line, then a
count every 10 s; the request ids of one outage share its first 8 characters). Connection
detail is an admin's (:func:`sees_connection_detail`): docs/security.md, "What an outage tells
a caller".
"""

from __future__ import annotations

import json
import logging
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from harvest.core.errors import (
    ConnectionRejected,
    ExecutionMigrated,
    HarvestError,
    NoShardReached,
    PayloadTooLarge,
    PermissionDenied,
    QuotaExceeded,
    SchemaMismatch,
    ShardUnavailable,
    UnknownWorkflow,
    WorkflowAlreadyExists,
    WrongShard,
    error_code,
    http_status,
    with_lookup_hint,
)
from harvest.core.json_values import json_default
from harvest.db.connection import (
    QUERY_CANCELED,
    DatabaseError,
    database_error_message,
    failure_reason,
    invalid_input,
    redact,
    schema_missing,
)
from harvest.db.pools import ServerUnreachable, outage
from harvest.shard.fanout import unreachable_reason

if TYPE_CHECKING:
    from starlette.requests import HTTPConnection

    from harvest.web.principal import Principal

log = logging.getLogger("harvest.web")

RETRY_AFTER_SECS = "1"


class UnsupportedMediaType(HTTPException):
    """A body the API does not read as sent (415): not declared JSON."""

    def __init__(self, message: str):
        super().__init__(415, message)


def compact_json(content: Any) -> bytes:
    """The API's JSON text of ``content`` (a streamed answer writes its pieces with it too)."""
    return json.dumps(content, default=json_default, ensure_ascii=False, separators=(",", ":")).encode()


class HarvestJSONResponse(JSONResponse):
    """JSON of the rows the SQL API returns (times, UUIDs, decimals: :func:`json_default`)."""

    def render(self, content: Any) -> bytes:
        return compact_json(content)


def _details(exc: HarvestError) -> dict[str, Any]:
    """The typed fields an error carries, beside code and message."""
    if isinstance(exc, WorkflowAlreadyExists):
        return {"existing_execution_id": exc.existing_execution_id, "existing_state": exc.existing_status}
    if isinstance(exc, QuotaExceeded):
        return {"quota": exc.quota, "key": exc.key, "usage": exc.usage, "limit": exc.limit}
    if isinstance(exc, PayloadTooLarge):
        return {"what": exc.what, "bytes": exc.bytes, "limit": exc.limit}
    if isinstance(exc, UnknownWorkflow):
        return {"workflow_name": exc.workflow_name, "queue": exc.queue, "registered": exc.registered}
    if isinstance(exc, ExecutionMigrated):
        return {"reason": exc.reason, "execution_id": exc.execution_id, "shard_id": exc.shard}
    if isinstance(exc, ShardUnavailable):
        return {"shard_id": exc.shard}
    if isinstance(exc, WrongShard):
        return {"requested_shard_id": exc.requested_shard, "shard_id": exc.shard}
    if isinstance(exc, PermissionDenied) and getattr(exc, "needs", None):
        return {"needs": exc.needs}  # (routes.no_payloads: the token's payloads, not its scope)
    field = getattr(exc, "field", None)
    return {"field": field} if field else {}


def error_body(code: str, message: str, **details: Any) -> dict[str, Any]:
    return {
        "error": {"code": code, "message": message, **{k: v for k, v in details.items() if v is not None}}
    }


def database_error_status(exc: BaseException) -> int:
    """The status of a database error the SQL API has no class for: 400 when the value was
    invalid (the caller's input), 504 when a statement timeout ended it, else 500. The API and
    the dashboard both answer by it, and the CLI's exit code (2 or 1,
    harvest.db.connection.database_error_message) by the same rule."""
    if invalid_input(exc):
        return 400
    return 504 if getattr(exc, "sqlstate", None) == QUERY_CANCELED else 500


def sees_connection_detail(principal: Principal | None) -> bool:
    """Whether a caller may read what a failed connect met (a refused login names the login, a
    server down its host): an admin token's only, which manages the deployment and reads it at
    /admin/shards/health anyway. Not a caller not (yet) authenticated, nor a read or operate
    token (a script's, a CI job's), whose answer says which shard and a request id instead."""
    return principal is not None and principal.allows("admin")


# What a shard's reason says in a partial read to a caller that sees no connection detail.
UNREACHABLE_REASON = "cannot be reached now (the server's log has the cause)"


# An outage's log (OutageLog): at most one line per cause per this many seconds after its
# first, and a cause no request met for as long is over.
OUTAGE_LOG_INTERVAL = 10.0
# Causes one app follows at once; past it a new cause's requests are each logged whole (as
# before the log was bounded): never a cause unsaid, and no table that grows without end.
MAX_OUTAGES = 64


@dataclass
class _Outage:
    """One cause's outage as one app logs it: ``id`` starts each of its request ids."""

    id: str
    where: str
    reason: str
    first_at: float
    last_at: float  # (the last request that met it)
    line_at: float  # (its last line)
    since_line: int = 0  # requests not counted in a line yet
    total: int = 1


class OutageLog:
    """An app's log of the outages it answers 503 for (:func:`outage_answer`), bounded: a few
    hundred requests a second meeting one database down must not be as many log lines. One per
    process where the apps share it (:func:`app_outages`): the management API, its dashboard and
    the app that mounts it with ``HarvestLifespan``.

    A cause is the shard and what the connect met (``failure_reason``'s words), whichever face
    (``where``: the API, the dashboard) met it: its lines name the face of its first request.
    Its first request is logged at once, whole: ``request <id>: outage <8 hex> begins
    (...)``, and begins an outage whose 8 characters start the request id of every request
    that meets the cause after it, so the one line found by any of them names the cause. The
    next requests are counted: one line (``goes on: N more requests``) when a request meets the
    cause at least ``interval`` seconds after its last line. A cause no request met for
    ``interval`` seconds is over (``is over: ...``, when more than one request met it), said
    by the next answer the app gives (a success too, :meth:`tick`) or at its shutdown
    (:meth:`close`). So a cause gets at most one line per ``interval`` after its first, and
    one more when it is over. ``clock``: seconds, monotonic (a test's own)."""

    def __init__(self, clock: Callable[[], float] = time.monotonic, interval: float = OUTAGE_LOG_INTERVAL):
        self._clock = clock
        self._interval = interval
        self._open: dict[tuple[int | None, str], _Outage] = {}
        self._lock = threading.Lock()  # (a sync route's thread may answer too)

    def request_id(self, where: str, shard: int | None, reason: str, cause_key: str | None = None) -> str:
        """The id of a request an outage met, logging what is due (see the class). ``cause_key``:
        what makes two requests' causes one, where the faces word ``reason`` apart (default: it)."""
        now = self._clock()
        with self._lock:
            lines = self._over(now)
            key = (shard, reason if cause_key is None else cause_key)
            found = self._open.get(key)
            if found is None:
                outage_id = secrets.token_hex(4)
                request_id = outage_id + secrets.token_hex(4)
                said = f"request {request_id}"
                if len(self._open) < MAX_OUTAGES:
                    self._open[key] = _Outage(outage_id, where, reason, now, now, now)
                    said += (
                        f": outage {outage_id} begins (the ids of its requests start {outage_id}; "
                        f"they are counted, a line per {self._interval:g} s at most)"
                    )
                lines.append((where, said, reason))
            else:
                request_id = found.id + secrets.token_hex(4)
                found.total += 1
                found.since_line += 1
                found.last_at = now
                if now - found.line_at >= self._interval:
                    lines.append(self._count(found, "goes on"))
                    found.line_at, found.since_line = now, 0
        _log(lines)
        return request_id

    def tick(self) -> None:
        """An answer the app gave: says which outages are over."""
        if self._open:  # (every answer: nothing to do while no outage is open)
            with self._lock:
                lines = self._over(self._clock())
            _log(lines)

    def close(self) -> None:
        """The app stops: the counts not said yet, of every outage still open."""
        with self._lock:
            lines = [self._count(o, "at shutdown") for o in self._open.values() if o.since_line]
            self._open.clear()
        _log(lines)

    def _over(self, now: float) -> list[tuple[str, str, str]]:
        """The lines of the outages no request met for an interval, closed (under the lock)."""
        over = [key for key, o in self._open.items() if now - o.last_at >= self._interval]
        lines = []
        for key in over:
            ended = self._open.pop(key)
            if ended.total > 1:  # (one request's outage: its first line said it all)
                lines.append(self._count(ended, f"is over (no request met it for {self._interval:g} s)"))
        return lines

    @staticmethod
    def _count(outage: _Outage, how: str) -> tuple[str, str, str]:
        said = (
            f"outage {outage.id} {how}: {outage.since_line} more requests since its last line, "
            f"{outage.total} in all over {outage.last_at - outage.first_at:.0f} s"
        )
        return outage.where, said, outage.reason


def _log(lines: list[tuple[str, str, str]]) -> None:
    for line in lines:  # (outside the log's lock)
        log.warning("%s: %s: %s", *line)


def app_outages(app: Any) -> OutageLog:
    """A Starlette app's outage log (made at its first use, in ``app.state.harvest_outages``: a
    test sets its own there), or the log of the app named by ``app.state.harvest_outages_of``
    (a mounted app shares its parent's: the dashboard the management API's, the management API
    the app that mounts it with ``HarvestLifespan``, so one outage is one ``begins`` line per
    process); a log of its own for no app."""
    state = getattr(app, "state", None)
    if state is None:
        return OutageLog()
    shared = getattr(state, "harvest_outages_of", None)
    if shared is not None:
        return app_outages(shared)
    found = getattr(state, "harvest_outages", None)
    if found is None:
        found = state.harvest_outages = OutageLog()
    return found


def outages_of(request: HTTPConnection | None) -> OutageLog:
    """The outage log of the app that answers ``request`` (:func:`app_outages`)."""
    return app_outages(None if request is None else request.scope.get("app"))


def outage_answer(
    exc: BaseException,
    principal: Principal | None = None,
    where: str = "harvest",
    outages: OutageLog | None = None,
) -> tuple[str, str, dict[str, Any]]:
    """The code, message and fields a caller sees of an outage (harvest.db.pools.outage):
    ``shard_unavailable`` naming the shard, else ``database_unavailable``, and a request id, not
    what the connect met; that goes to the log (``outages``: the app's, :func:`outages_of`;
    bounded per cause, :class:`OutageLog`) under the request id (``where`` names the face), in
    :func:`harvest.db.connection.failure_reason`'s words (no password), and to an admin
    (:func:`sees_connection_detail`) as ``detail`` too. The one rule of the management API's
    503, the dashboard's and the event streams'."""
    reason = failure_reason(exc)
    shard = exc.shard if isinstance(exc, ShardUnavailable) else None
    # One outage is what the connect met, in the words a fan-out gives a shard it could not read
    # (unreachable_reason): the dashboard's pages say that (NoShardReached's connect_detail),
    # the management API's routes the connect's own error, logged as failure_reason words.
    cause, cause_key = reason, unreachable_reason(exc)
    if isinstance(exc, NoShardReached):
        # Its message names the call (a dead letter's id): the outage is what the connects met,
        # or every id would be an outage of its own, filling the log's places.
        cause = cause_key = exc.connect_detail or "no shard could be reached"
    request_id = (outages or OutageLog()).request_id(where, shard, cause, cause_key)
    code = "database_unavailable" if shard is None else error_code(exc)
    if isinstance(exc, NoShardReached):  # (which shards, what was not done: no connect's text)
        said = redact(exc.said)
    elif refused_login(exc):
        said = REFUSED_LOGIN.format(database="the database" if shard is None else f"shard {shard}'s database")
    elif shard is None:
        said = "the database could not be reached; retry"
    else:
        said = f"shard {shard} is unavailable; retry"
    # (the log names an outage by its ids' first 8 characters: the one thing to search it for)
    message = f"{said} (request {request_id}: the server's log has the cause under outage {request_id[:8]})"
    detail = reason if sees_connection_detail(principal) else None
    return code, message, {"shard_id": shard, "request_id": request_id, "detail": detail}


# What a 503 says when the database refused the server's own connection (its login, its
# database, its TLS setup): the configuration's fault, which no retry mends, said with nothing of
# the connect (which login, which host: the log's, and an admin's to read as ``detail``).
REFUSED_LOGIN = (
    "{database} refused this server's connection, which retrying will not change: the server's"
    " operator must check its database URL (user, password, database name) and the database's"
    " access rules (pg_hba.conf, TLS)"
)


def refused_login(exc: BaseException) -> bool:
    """Whether an outage is the database's refusal of the server's connection (not a server
    down): ConnectionRejected, or a fail-fast pool's of a refused connect (ServerUnreachable,
    and a shard's ShardUnavailable of one: harvest.shard.pools.unreachable)."""
    if isinstance(exc, ConnectionRejected):
        return True
    return isinstance(exc, ServerUnreachable | ShardUnavailable) and exc.refused


def withheld_detail(answer: Any, principal: Principal | None) -> Any:
    """``answer`` with a partial read's ``unavailable_reasons`` (what each shard's connect met)
    said as :data:`UNREACHABLE_REASON` unless the caller sees connection detail."""
    reasons = answer.get("unavailable_reasons") if isinstance(answer, dict) else None
    if not reasons or sees_connection_detail(principal):
        return answer
    return {**answer, "unavailable_reasons": dict.fromkeys(reasons, UNREACHABLE_REASON)}


# What a 401 asks for: a bearer token (docs/auth.md).
WWW_AUTHENTICATE = 'Bearer realm="harvest"'


def http_lookup_hint(message: str) -> str:
    """``message`` with the SQL's lookup by workflow id said as the API's route."""
    return with_lookup_hint(
        message, lambda given: f"GET /workflows/current?{urlencode({'workflow_id': given})}"
    )


def error_response(
    exc: BaseException, principal: Principal | None = None, request: HTTPConnection | None = None
) -> JSONResponse:
    """The JSON answer for any exception a handler raised; ``principal``: who asked, once the
    authorizer said (None before, or on a route without one); ``request``: what it answers (its
    app's :class:`OutageLog` logs an outage)."""
    headers: dict[str, str] = {}
    if outage(exc):  # (before HarvestError: DatabaseUnavailable's text may say what the connect met)
        status = 503
        code, message, details = outage_answer(exc, principal, outages=outages_of(request))
        content = error_body(code, message, **details)
        headers["Retry-After"] = RETRY_AFTER_SECS
    elif isinstance(exc, HarvestError):
        status = http_status(exc)
        content = error_body(error_code(exc), http_lookup_hint(redact(str(exc))), **_details(exc))
        if isinstance(exc, WorkflowAlreadyExists):
            # The spec's 409 body names the existing run at the top level too.
            content["existing_execution_id"] = exc.existing_execution_id
            content["existing_state"] = exc.existing_status
        if status == 503 or getattr(exc, "retryable", False):
            headers["Retry-After"] = RETRY_AFTER_SECS
        if status >= 500 and status not in (503, 504):
            log.error("harvest: %s", redact(str(exc)))
    elif isinstance(exc, HTTPException):  # an authorizer or a mounted route may raise Starlette's own
        status = exc.status_code
        code = {
            401: "unauthenticated",
            403: "permission_denied",
            404: "not_found",
            415: "unsupported_media_type",
        }.get(status, "http_error")
        content = error_body(code, str(exc.detail))
        headers.update(exc.headers or {})
    elif isinstance(exc, DatabaseError):
        message, _ = database_error_message(exc)
        if schema_missing(exc):  # not migrated (or behind this Harvest): answers after harvest migrate
            status, code = 503, error_code(SchemaMismatch(message))
            headers["Retry-After"] = RETRY_AFTER_SECS
        elif database_error_status(exc) == 400:
            status, code = 400, "invalid_argument"
        elif database_error_status(exc) == 504:
            status, code = 504, "query_canceled"
        else:
            status, code = 500, "database_error"
            log.error("harvest: database error %s: %s", getattr(exc, "sqlstate", None), redact(message))
        content = error_body(code, redact(message))
    else:
        log.exception("harvest: unexpected error in the management API", exc_info=exc)
        status = 500
        content = error_body("internal_error", "an unexpected error happened; the server log has the details")
    if status == 401:  # (RFC 9110 15.5.2: a 401 names the scheme it wants; RFC 6750 3: Bearer)
        headers.setdefault("WWW-Authenticate", WWW_AUTHENTICATE)
    return JSONResponse(content, status_code=status, headers=headers)
