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
under the request id. Connection detail is an admin's (:func:`sees_connection_detail`):
docs/security.md, "What an outage tells a caller".
"""

from __future__ import annotations

import json
import logging
import uuid
from typing import TYPE_CHECKING, Any

from starlette.exceptions import HTTPException
from starlette.responses import JSONResponse

from harvest.core.errors import (
    ExecutionMigrated,
    HarvestError,
    NoShardReached,
    PayloadTooLarge,
    QuotaExceeded,
    SchemaMismatch,
    ShardUnavailable,
    UnknownWorkflow,
    WorkflowAlreadyExists,
    WrongShard,
    error_code,
    http_status,
)
from harvest.core.json_values import json_default
from harvest.db.connection import (
    DatabaseError,
    database_error_message,
    failure_reason,
    invalid_input,
    redact,
    schema_missing,
)
from harvest.db.pools import outage

if TYPE_CHECKING:
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
    field = getattr(exc, "field", None)
    return {"field": field} if field else {}


def error_body(code: str, message: str, **details: Any) -> dict[str, Any]:
    return {
        "error": {"code": code, "message": message, **{k: v for k, v in details.items() if v is not None}}
    }


# 57014 query_canceled: the server's statement_timeout ended the statement (or a cancel request
# did). The database is there and answered: a 504 (the call took too long), not a 503.
QUERY_CANCELED = "57014"


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


def outage_answer(
    exc: BaseException, principal: Principal | None = None, where: str = "harvest"
) -> tuple[str, str, dict[str, Any]]:
    """The code, message and fields a caller sees of an outage (harvest.db.pools.outage):
    ``shard_unavailable`` naming the shard, else ``database_unavailable``, and a request id, not
    what the connect met; that goes to the log under the request id (``where`` names the face),
    in :func:`harvest.db.connection.failure_reason`'s words (no password), and to an admin
    (:func:`sees_connection_detail`) as ``detail`` too. The one rule of the management API's
    503, the dashboard's and the event streams'."""
    request_id = uuid.uuid4().hex[:16]
    reason = failure_reason(exc)
    log.warning("%s: request %s: %s", where, request_id, reason)
    shard = exc.shard if isinstance(exc, ShardUnavailable) else None
    code = "database_unavailable" if shard is None else error_code(exc)
    if isinstance(exc, NoShardReached):  # (which shards, what was not done: no connect's text)
        said = redact(exc.said)
    elif shard is None:
        said = "the database could not be reached; retry"
    else:
        said = f"shard {shard} is unavailable; retry"
    message = f"{said} (request {request_id}: the server's log has the cause)"
    detail = reason if sees_connection_detail(principal) else None
    return code, message, {"shard_id": shard, "request_id": request_id, "detail": detail}


def withheld_detail(answer: Any, principal: Principal | None) -> Any:
    """``answer`` with a partial read's ``unavailable_reasons`` (what each shard's connect met)
    said as :data:`UNREACHABLE_REASON` unless the caller sees connection detail."""
    reasons = answer.get("unavailable_reasons") if isinstance(answer, dict) else None
    if not reasons or sees_connection_detail(principal):
        return answer
    return {**answer, "unavailable_reasons": dict.fromkeys(reasons, UNREACHABLE_REASON)}


def error_response(exc: BaseException, principal: Principal | None = None) -> JSONResponse:
    """The JSON answer for any exception a handler raised; ``principal``: who asked, once the
    authorizer said (None before, or on a route without one)."""
    headers: dict[str, str] = {}
    if outage(exc):  # (before HarvestError: DatabaseUnavailable's text may say what the connect met)
        status = 503
        code, message, details = outage_answer(exc, principal)
        content = error_body(code, message, **details)
        headers["Retry-After"] = RETRY_AFTER_SECS
    elif isinstance(exc, HarvestError):
        status = http_status(exc)
        content = error_body(error_code(exc), redact(str(exc)), **_details(exc))
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
    return JSONResponse(content, status_code=status, headers=headers)
