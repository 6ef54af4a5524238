"""The route table of the management API, declared once.

Each route is an :class:`Endpoint`: its method and path, the scope it needs, its query and path
parameters, its JSON body (a small JSON Schema) and its answers. The same declaration checks a
request (a bad parameter or body is a 400 naming the field, before anything runs), authorizes
it (``authorizer.authorize(request, scope)`` first), runs its handler on a :class:`Call` (the
request's database access under the caller's role) and writes ``/openapi.json``. Handlers hold no
engine logic: they call the SQL API (``harvest.db``), the fan-out reads (``harvest.shard``) and
the client, as the CLI does.
"""

from __future__ import annotations

import functools
import json
import math
import uuid
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import Response

from harvest.client import routing
from harvest.core.errors import InvalidArgument, NoShardReached, PermissionDenied
from harvest.core.ids import MAX_SHARD
from harvest.core.json_values import json_default
from harvest.core.payload import redact
from harvest.db.pools import RoledPool
from harvest.db.sqlapi import AsyncSqlApi
from harvest.shard.fanout import UNAVAILABLE, AsyncShardReads, Merged
from harvest.telemetry import tracing
from harvest.web.errors import (
    HarvestJSONResponse,
    UnsupportedMediaType,
    error_response,
    outages_of,
    withheld_detail,
)
from harvest.web.guards import NotJsonNumber, cross_site, is_json, parse_json, read_body

if TYPE_CHECKING:
    from harvest.client import AsyncClient, AsyncWorkflowHandle
    from harvest.web.app import HarvestState
    from harvest.web.principal import Principal, Scope

# -- parameters and bodies -------------------------------------------------------------------


@dataclass(frozen=True)
class Param:
    """A query or path parameter. ``kind``: string, integer, number, boolean, datetime, uuid,
    enum (``choices``; either case accepted, answered as declared). An empty value is absent,
    unless ``empty_is_absent`` is False: then it is a 400 naming the parameter (a filter whose
    empty value would otherwise select every row, as ``workflow_id``)."""

    name: str
    kind: str = "string"
    required: bool = False
    default: Any = None
    choices: tuple[str, ...] = ()
    minimum: float | None = None
    maximum: float | None = None
    description: str = ""
    where: str = "query"
    repeat: bool = False  # may be given several times (a list)
    # A path parameter that may hold a "/" (a schedule's name, ``billing/monthly``): routed across
    # path segments (Endpoint.route_paths), as the dashboard's pages route it.
    slash: bool = False
    empty_is_absent: bool = True

    def schema(self) -> dict[str, Any]:
        out: dict[str, Any] = {  # type: ignore[assignment]  # every schema is a dict
            "string": {"type": "string"},
            "integer": {"type": "integer"},
            "number": {"type": "number"},
            "boolean": {"type": "boolean"},
            "datetime": {"type": "string", "format": "date-time"},
            "uuid": {"type": "string", "format": "uuid"},
            "enum": {"type": "string", "enum": list(self.choices)},
        }[self.kind]
        if self.minimum is not None:
            out["minimum"] = self.minimum
        if self.maximum is not None:
            out["maximum"] = self.maximum
        if self.default is not None:
            out["default"] = self.default
        if self.repeat:
            return {"type": "array", "items": out}
        return out

    def parse(self, raw: str) -> Any:
        return parse_value(self.name, self.kind, raw, self)


def invalid(name: str, message: str) -> InvalidArgument:
    """A 400 naming the parameter or body field ``name``."""
    exc = InvalidArgument(f"{name}: {message}")
    exc.field = name  # type: ignore[attr-defined]
    return exc


def parse_datetime(name: str, raw: str) -> datetime:
    """An RFC 3339 time (UTC when it has no offset); a 400 naming ``name`` otherwise."""
    text = raw.strip()
    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        raise invalid(name, f"{raw!r} is not an RFC 3339 time such as 2026-05-08T15:00:00Z") from None
    if not 1 <= moment.year <= 9999 or (moment.tzinfo is None and moment.year in (1, 9999)):
        raise invalid(name, f"{raw!r} is out of range")
    return moment if moment.tzinfo is not None else moment.replace(tzinfo=UTC)


def parse_value(name: str, kind: str, raw: Any, spec: Param | None = None) -> Any:
    """One parameter value from its text (query, path) or its JSON value (a body field)."""
    text = raw if isinstance(raw, str) else None
    if kind in ("string", "enum", "uuid", "datetime") and not isinstance(raw, str):
        raise invalid(name, f"expected a string, got {json.dumps(raw, default=json_default)[:60]}")
    if kind == "string":
        if "\x00" in raw:
            raise invalid(name, "contains a NUL character")
        return raw
    if kind == "enum":
        choices = spec.choices if spec else ()
        for choice in choices:
            if raw.lower() == choice.lower():
                return choice
        raise invalid(name, f"{raw!r} is not one of {', '.join(choices)}")
    if kind == "uuid":
        try:
            return str(uuid.UUID(raw))
        except ValueError:
            raise invalid(name, f"{raw!r} is not an execution id (a UUID)") from None
    if kind == "datetime":
        return parse_datetime(name, raw)
    if kind == "boolean":
        if isinstance(raw, bool):
            return raw
        if text is not None and text.lower() in ("true", "1", "yes", "false", "0", "no"):
            return text.lower() in ("true", "1", "yes")
        raise invalid(name, f"{raw!r} is not true or false")
    if kind in ("integer", "number"):
        if isinstance(raw, bool):
            raise invalid(name, f"expected a number, got {raw!r}")
        try:
            value: Any = (int if kind == "integer" else float)(raw) if text is not None else raw
        except (TypeError, ValueError):
            raise invalid(
                name, f"{raw!r} is not {'an integer' if kind == 'integer' else 'a number'}"
            ) from None
        if kind == "integer" and (not isinstance(value, int) and not float(value).is_integer()):
            raise invalid(name, f"{raw!r} is not an integer")
        if not isinstance(value, int | float) or (isinstance(value, float) and not math.isfinite(value)):
            raise invalid(name, f"{raw!r} is not a finite number")
        value = int(value) if kind == "integer" else float(value)
        low = spec.minimum if spec else None
        high = spec.maximum if spec else None
        if (low is not None and value < low) or (high is not None and value > high):
            raise invalid(name, f"{raw!r} is out of range {_n(low)}..{_n(high)}")
        return value
    raise AssertionError(kind)


def _n(x: float | None) -> str:
    return "" if x is None else str(int(x)) if float(x).is_integer() else str(x)


# A body is a small JSON Schema: {"type": "object", "properties": {name: schema}, "required": [...]}.
# Field schemas use "type" (string, integer, number, boolean, object, array; absent: any JSON),
# "enum", "format" (date-time, uuid), "minimum", "maximum", "minLength" (a string), and for an
# array "maxItems" and "items" (of type string: each item checked).


def shape(**properties: dict[str, Any]) -> dict[str, Any]:
    """A success answer's schema for /openapi.json: an object with these fields, all required."""
    return {"type": "object", "required": sorted(properties), "properties": properties}


ROWS = {"type": "array", "items": {"type": "object"}}
# What every fan-out read's answer carries (fanout_keys; unavailable_reasons too when partial).
FANOUT: dict[str, Any] = {
    "status": {"type": "string", "enum": ["complete", "partial"]},
    "unavailable_shards": {"type": "array"},
    "sharded": {"type": "boolean"},
}


def body(properties: dict[str, dict[str, Any]], required: tuple[str, ...] = ()) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": properties}
    if required:
        out["required"] = list(required)
    return out


STRING = {"type": "string"}
NONEMPTY = {"type": "string", "minLength": 1}  # a name or key: "" is a 400 naming the field
INTEGER = {"type": "integer"}
BOOLEAN = {"type": "boolean"}
OBJECT = {"type": "object"}
ANY: dict[str, Any] = {}
DATETIME = {"type": "string", "format": "date-time"}
# A shard number in a body (a parameter: Param(..., "integer", minimum=0, maximum=MAX_SHARD)).
SHARD_ID = {"type": "integer", "minimum": 0, "maximum": MAX_SHARD}


def check_body(schema: dict[str, Any], data: Any) -> dict[str, Any]:
    """The body checked against ``schema``: each declared field typed (times parsed), or a 400
    naming the field. Undeclared fields are refused too (a typo must not be ignored)."""
    if not isinstance(data, dict):
        raise invalid("body", "expected a JSON object")
    props: dict[str, Any] = schema.get("properties", {})
    unknown = sorted(set(data) - set(props))
    if unknown:
        raise invalid(unknown[0], f"unknown field; the fields are {', '.join(sorted(props)) or 'none'}")
    for name in schema.get("required", ()):
        if data.get(name) is None:
            raise invalid(name, "is required")
    out: dict[str, Any] = {}
    for name, value in data.items():
        spec = props[name]
        if value is None:
            out[name] = None
            continue
        kind = spec.get("type")
        if "enum" in spec:
            out[name] = parse_value(name, "enum", value, Param(name, "enum", choices=tuple(spec["enum"])))
        elif kind == "string" and spec.get("format") == "date-time":
            out[name] = parse_value(name, "datetime", value)
        elif kind == "string" and spec.get("format") == "uuid":
            out[name] = parse_value(name, "uuid", value)
        elif kind in ("string", "boolean"):
            if kind == "boolean" and not isinstance(value, bool):
                raise invalid(name, f"expected true or false, got {json.dumps(value)[:60]}")
            out[name] = parse_value(name, kind, value)
            if kind == "string" and len(out[name]) < spec.get("minLength", 0):
                optional = name not in schema.get("required", ())
                raise invalid(
                    name, "is empty: pass a non-empty value" + (", or leave it out" if optional else "")
                )
        elif kind in ("integer", "number"):
            if not isinstance(value, int | float) or isinstance(value, bool):
                raise invalid(name, f"expected a number, got {json.dumps(value)[:60]}")
            limits = Param(name, kind, minimum=spec.get("minimum"), maximum=spec.get("maximum"))
            out[name] = parse_value(name, kind, value, limits)
        elif kind == "object":
            if not isinstance(value, dict):
                raise invalid(name, "expected a JSON object")
            out[name] = value
        elif kind == "array":
            out[name] = _array(name, spec, value)
        else:
            out[name] = value
    return out


def _array(name: str, spec: dict[str, Any], value: Any) -> list[Any]:
    """A body field of type array, its ``maxItems`` and its items' ``string`` type checked: a
    400 naming the field (a number among a text[]'s items reached the SQL as a smallint[], a
    503 schema_mismatch; an unbounded list of filters was an unbounded query)."""
    if not isinstance(value, list):
        raise invalid(name, "expected a JSON array")
    most = spec.get("maxItems")
    if most is not None and len(value) > most:
        raise invalid(name, f"{len(value)} items, more than {most}")
    if spec.get("items", {}).get("type") == "string":
        for i, item in enumerate(value):
            if not isinstance(item, str):
                got = json.dumps(item, default=json_default)[:60]
                raise invalid(name, f"item {i}: expected a string, got {got}")
            if "\x00" in item:
                raise invalid(name, f"item {i}: contains a NUL character")
    return value


# -- the request's database access -----------------------------------------------------------


class Call:
    """One request: who makes it (``principal``) and the database under its role. Every SQL
    call made through it runs as ``principal.role`` (SET LOCAL in the call's own transaction:
    harvest.db.pools.RoledPool), so the database checks again what the route checked."""

    def __init__(self, request: Request, state: HarvestState, principal: Principal, endpoint: Endpoint):
        self.request, self.state, self.endpoint = request, state, endpoint
        self._bind(principal)

    def _bind(self, principal: Principal) -> None:
        """Every database access of the request, in ``principal``'s role."""
        self.principal = principal
        self._client: AsyncClient | None = None
        role, source = principal.role, principal.source
        # The audit row names the caller and the route (functions/audit.sql, _audit_context).
        endpoint = self.endpoint
        who = {"actor": principal.actor, "route": f"{endpoint.method} {endpoint.path}" if endpoint else None}
        if self.state.pools is not None:
            self._pools = self.state.pools.with_role(role, source, **who)
            self._sql: AsyncSqlApi | None = None
        else:  # _sql is set exactly when _pools is None (the ignores below where it is read)
            self._pools = None
            self._sql = AsyncSqlApi(RoledPool(self.state.pool, role, source, **who))

    @property
    def sharded(self) -> bool:
        return self._pools is not None

    @property
    def operator_id(self) -> str:
        """Who the audit log records as the operator: the principal's actor."""
        return self.principal.actor

    async def require(self, scope: Scope) -> None:
        """Ask the authorizer again for a higher scope (a start whose policy can cancel a live run
        needs admin): 403 when the caller does not hold it."""
        if not self.principal.allows(scope):
            self._bind(await self.state.authorizer.authorize(self.request, scope))

    def default_shard(self) -> int:
        return self.state.router.default

    def providers(self) -> Mapping[int, Any]:
        """Shard -> API provider for the fan-out reads (one database: shard 0)."""
        if self._pools is None:
            return {0: self._sql}
        return {s: functools.partial(self._pools.api, s) for s in self.state.router.readable}

    def reads(self) -> AsyncShardReads:
        return AsyncShardReads(self.providers(), timeout=self.state.shard_timeout if self.sharded else None)

    async def on_shard(self, shard: int | None, fn: Callable[[AsyncSqlApi], Awaitable[Any]]) -> Any:
        """``fn(sql)`` on one shard (None: the default; one database: the database, which must be
        that shard when a number is given)."""
        if self._pools is None:
            if shard is not None and shard != await self._sql.get_shard_id():  # type: ignore[union-attr]
                raise invalid("shard_id", f"{shard} is not this database's shard")
            return await fn(self._sql)  # type: ignore[arg-type]
        target = self.state.router.default if shard is None else shard
        if target not in self.state.router.readable:
            raise invalid("shard_id", f"{target} is not a shard of this deployment")
        async with self._pools.api(target) as sql:
            return await fn(sql)

    async def each_shard(
        self,
        fn: Callable[[AsyncSqlApi], Awaitable[Any]],
        undone: str = "nothing was read",
        shards: Iterable[int] | None = None,
        bounded: bool = True,
    ) -> Any:
        """``fn(sql)`` on every readable shard (or on ``shards`` of them): a :class:`FanOut`
        (one database: shard 0). No shard answering is a 503 (docs/http-api.md), never an
        empty answer: ``undone`` says what that left undone. ``bounded``: each shard's answer
        within ``shard_timeout`` (else unavailable); False for a write of many batches, which
        must not be cut off part way and called unreachable (reaching a shard stays bounded by
        its pool's acquire timeout)."""
        from harvest.shard.fanout import FanOut, fan_out_async

        if self._pools is None:
            return FanOut.of({0: await fn(self._sql)}, ())  # type: ignore[arg-type]
        timeout = self.state.shard_timeout if bounded else None
        fan = await fan_out_async(self.providers(), fn, shards=shards, timeout=timeout)
        if not fan.results:
            missed = ", ".join(str(s) for s in fan.unavailable_shards)
            raise NoShardReached(
                f"no shard could be reached (shard(s) {missed} unreachable): {undone}; retry when one is up"
            )
        return fan

    async def each_shard_write(
        self,
        fn: Callable[[AsyncSqlApi], Awaitable[Any]],
        undone: str,
        shards: Iterable[int] | None = None,
        bounded: bool = True,
    ) -> ShardWrites:
        """A write on every readable shard (or on ``shards``), every shard to its own outcome:
        done (its answer), refused (a HarvestError that is not an outage: not configured there,
        permission denied there) or unreachable, as the CLI over SQL does shard by shard
        (harvest.cli.shards.in_turn). One shard's refusal must not be the whole answer: the
        others' writes are made all the same, and the caller has to be told what they did.
        Nothing done anywhere: the first refusal, naming every shard's (its status), else a
        503. One database: its own error, as before."""
        # a refusal is an answer here
        fan = await self.each_shard(refusals_apart(fn, self.sharded), undone, shards, bounded)
        done = ShardWrites.of(fan)
        if not done.results:
            done.raise_none_done(undone)
        return done

    async def routed(self, execution_id: str, fn: Callable[[AsyncSqlApi], Awaitable[Any]]) -> Any:
        """``fn(sql)`` on the shard the execution lives on (its id's shard, then a moved run's
        forwarding pointer); one database: the database."""
        if self._pools is None:
            return await fn(self._sql)  # type: ignore[arg-type]

        async def attempt(shard: int) -> Any:
            async with self._pools.api(shard) as sql:  # pyright: ignore[reportOptionalMemberAccess]  # pools, above
                return await fn(sql)

        routing.route_id(self.state.router, execution_id)
        return await self._pools.follow(execution_id, attempt)

    def resident(self, row: dict[str, Any]) -> dict[str, Any]:
        """A row read by id, checked: on shards a seal of a moved run raises ExecutionMigrated
        (which :meth:`routed` follows); one database reads it as it is."""
        return routing.resident(row, self.sharded)

    def handle(self, execution_id: str) -> AsyncWorkflowHandle[Any]:
        """A handle on the run the path's execution id names (checked a UUID there). Not
        client().get_handle(id): its NotFound tells a Python caller that the id may be a
        workflow id and how to look one up (get_handle(workflow_id=...)), which is not the
        API's to say; a 404 here is the run's alone."""
        from harvest.client import AsyncWorkflowHandle

        return AsyncWorkflowHandle(self.client(), execution_id, "")

    def client(self) -> AsyncClient:
        """An AsyncClient whose every call runs in this request's role (no I/O to make one)."""
        if self._client is None:
            from harvest.client import AsyncClient
            from harvest.core.codecs import KeylessChain, Payloads
            from harvest.db.connection import dsn_with_role

            limit = self.state.max_payload_bytes
            # The API holds no keys: an encrypted answer (a query's, an update's) is answered as
            # stored, for the caller to decode (docs/payloads.md), not refused.
            keyless = Payloads(KeylessChain())
            if self._pools is not None:
                self._client = AsyncClient(None, None, limit, shards=self._pools, codecs=keyless)
            else:
                # one database: state.open() set its dsn, and _sql is set
                dsn = dsn_with_role(self.state.dsn, self.principal.role, self.principal.source)  # type: ignore[arg-type]
                self._client = AsyncClient(dsn, self._sql.pool, limit, codecs=keyless)  # type: ignore[union-attr]
            # Query and update waits share the process's LISTEN connections (HarvestState.hub).
            self._client.notifications = self.state.listener
            # A start by name places a debounce or a batch by the served App's declaration.
            self._client.app = self.state.app
        return self._client


@dataclass(frozen=True)
class _Refused:
    error: Any  # the HarvestError one shard answered


def refusals_apart(fn: Callable[[Any], Awaitable[Any]], sharded: bool) -> Callable[[Any], Awaitable[Any]]:
    """``fn`` for a write on every shard, a shard's refusal (a HarvestError that is not an
    outage, or a database error: harvest.db.connection.database_refusal) kept as that shard's
    answer for :meth:`ShardWrites.of`, so it cannot stop the fan-out as the whole answer. One
    database (not ``sharded``): its own error, raised."""
    from harvest.core.errors import HarvestError
    from harvest.db.connection import DatabaseError, database_refusal
    from harvest.shard.fanout import is_shard_failure

    async def guarded(api: Any) -> Any:
        try:
            return await fn(api)
        except (HarvestError, DatabaseError) as exc:
            if not sharded or is_shard_failure(exc):
                raise
            # A database error with no Harvest class (that shard's schema behind: the function
            # missing there) is that shard's refusal too, not the whole answer.
            return _Refused(exc if isinstance(exc, HarvestError) else database_refusal(exc))

    return guarded


@dataclass
class ShardWrites:
    """A write's outcome on every shard (:meth:`Call.each_shard_write`): each done shard's
    answer, the shards not reached, and each refusal with its shard."""

    results: dict[int, Any]
    unavailable_shards: list[int]
    refused: list[tuple[int, Any]]

    @classmethod
    def of(cls, fan: Any) -> ShardWrites:
        """A fan-out of a :func:`refusals_apart` write, each shard's outcome sorted out."""
        return cls(
            {s: r for s, r in fan.results.items() if not isinstance(r, _Refused)},
            list(fan.unavailable_shards),
            [(s, r.error) for s, r in fan.results.items() if isinstance(r, _Refused)],
        )

    def refusals_said(self) -> str:
        """Every refusal in a sentence for an operator (the dashboard's notice): "shard 1
        refused: <its message>; ...", empty when none."""
        from harvest.db.connection import redact

        return "; ".join(f"shard {s} refused: {redact(str(exc))}" for s, exc in self.refused)

    @property
    def status(self) -> str:
        """complete (every shard done) or partial (some refused or not reached): the fan-out
        reads' convention; none done never answers (:meth:`raise_none_done`)."""
        from harvest.shard.fanout import status_of

        return status_of(len(self.results), len(self.unavailable_shards) + len(self.refused))

    def shard_errors(self) -> list[dict[str, Any]]:
        """Every shard not done, by shard: ``{"shard_id", "error": "unreachable"}``, or
        ``{"shard_id", "error": "refused", "code", "message"}`` (the code and message its own
        error would answer)."""
        from harvest.shard.fanout import shard_errors

        return shard_errors(self.unavailable_shards, self.refused)

    def outcome(self) -> dict[str, Any]:
        """The fields every such answer carries: status, unavailable_shards, shard_errors."""
        return {
            "status": self.status,
            "unavailable_shards": self.unavailable_shards,
            "shard_errors": self.shard_errors(),
        }

    def raise_none_done(self, undone: str) -> None:
        """No shard done: the first refusal, its message naming every shard's (and the shards
        not reached), so its status and code are the answer's, as the CLI over SQL raises it
        (harvest.cli.shards.fail_if_refused); no refusal: 503."""
        if self.refused:
            reasons = [f"shard {s}: {exc}" for s, exc in self.refused]
            if self.unavailable_shards:
                missed = ", ".join(map(str, self.unavailable_shards))
                reasons.append(f"shard(s) {missed} could not be reached")
            first = self.refused[0][1]
            first.args = ("; ".join(reasons), *first.args[1:])
            raise first
        missed = ", ".join(str(s) for s in self.unavailable_shards)
        raise NoShardReached(
            f"no shard could be reached (shard(s) {missed} unreachable): {undone}; retry when one is up"
        )


def declared_queue(call: Call, workflow_name: str, given: str | None) -> str | None:
    """The queue of a run this request starts, now (a start) or later (a schedule): the one
    given, else the served App's declared queue of the workflow (:func:`app_queue`)."""
    return app_queue(call.state.app, workflow_name, given)


def app_queue(app: Any, workflow_name: str, given: str | None) -> str | None:
    """The queue a run of ``workflow_name`` goes to: ``given``, else ``app``'s (the served
    App's, None when there is none) declared queue of the workflow (it goes where its code's
    workers poll), else None, the client's or the SQL's default. The management API's starts and
    schedules and the dashboard's schedules alike."""
    if given is not None or app is None:
        return given
    definition = app.workflows.get(workflow_name)
    return definition.queue if definition is not None else None


def merged(call: Call, value: Merged[Any], key: str | None) -> dict[str, Any]:
    """A fan-out read's JSON: the value under ``key`` (next_cursor for the paginated ones) with
    the keys of :func:`fanout_keys`; no shard answering is a 503."""
    if value.status == UNAVAILABLE:
        shards = ", ".join(str(s) for s in value.unavailable_shards)
        raise NoShardReached(f"no shard could be read (shard(s) {shards} unreachable); retry when one is up")
    out = dict(value.value) if key is None else value.envelope(key)
    return {**out, **fanout_keys(call, value)}


def fanout_keys(call: Call, read: Any, *, status: str = "status") -> dict[str, Any]:
    """The keys every fan-out read's answer carries (a Merged's or a FanOut's; docs/http-api.md,
    "Answers and errors"): status, unavailable_shards, unavailable_reasons when a shard was not
    read, and sharded (whether the server has [shards]). ``status``: the read's status under
    another key, for an answer whose own row has a status (a worker's: read_status). The reasons
    say why each shard could not be read (no secret: fanout.unreachable_reason; an admin's to
    read, withheld_detail)."""
    reasons = {"unavailable_reasons": {str(s): r for s, r in read.reasons.items()}} if read.reasons else {}
    return {
        status: read.status,
        "unavailable_shards": read.unavailable_shards,
        **reasons,
        "sharded": call.sharded,
    }


# -- routes ------------------------------------------------------------------------------------

# (call, query parameters, the JSON body: None for a route without one)
Handler = Callable[[Call, dict[str, Any], Any], Awaitable[Any]]


@dataclass(frozen=True)
class Reply:
    """A handler's answer with a status other than 200, or headers."""

    data: Any
    status: int = 200
    headers: dict[str, str] = field(default_factory=dict)


# What a route's answer is to a caller whose token sees no payloads (Principal.payloads false,
# docs/security.md): Endpoint.payloads.
#   filtered: JSON passed through harvest.core.payload.redact (the fields erasure erases, at any
#     depth), marked "redacted": true; a route that answers anything but JSON is refused to such
#     a caller (a route added later cannot leak by streaming its answer past the filter).
#   whole: the answer is a payload (a query's, an update's): refused (403) before it runs.
#   redacts: a streamed answer that redacts its payloads itself unless payload_policy=full.
#   none: an answer other than JSON that holds no payload (Prometheus text of counts).
# payload_policy=full is refused to such a caller on every route.
PAYLOAD_ANSWERS = ("filtered", "whole", "redacts", "none")


def no_payloads(principal: Principal, what: str) -> PermissionDenied:
    """The 403 of a caller whose token sees no payloads asking for ``what``; its answer says
    ``"needs": "payloads"`` (a higher scope would not help, which the CLI then does not say)."""
    refused = PermissionDenied(
        f"token {principal.actor!r} was made with payloads: false: it sees no payload, and {what}; "
        "use a token made without --no-payloads"
    )
    refused.needs = "payloads"
    return refused


def withheld(data: Any) -> Any:
    """An answer for a caller whose token sees no payloads: every payload replaced by its size
    (redact), an object marked ``"redacted": true``."""
    out = redact(data)
    if isinstance(out, dict):
        out["redacted"] = True
    return out


@dataclass(frozen=True)
class Endpoint:
    """One route: declared once, it checks, authorizes, runs and documents itself."""

    method: str
    path: str
    scope: Scope | None  # None: no authorization (health probes)
    handler: Handler
    summary: str
    params: tuple[Param, ...] = ()
    body: dict[str, Any] | None = None
    responses: dict[int, str] = field(default_factory=lambda: {200: "OK"})
    tag: str = ""
    shape: dict[str, Any] = field(default_factory=lambda: {"type": "object"})  # a success's JSON
    also: tuple[str, ...] = ()  # other media types a success may answer (text, its schema a string)
    payloads: str = "filtered"  # its answer to a token that sees no payloads (PAYLOAD_ANSWERS)
    # Other spellings of its path served by this same route (same handler, scope and answers;
    # the audit names :attr:`path`): the spec's, where it spells a path otherwise. /openapi.json
    # lists them on this operation (x-harvest-aliases), not as operations of their own.
    aliases: tuple[str, ...] = ()
    # A query parameter the route does not take, but another route does: its refusal says where
    # (GET /workflows?workflow_id=: the run of a workflow id is GET /workflows/current's).
    elsewhere: dict[str, str] = field(default_factory=dict)

    @property
    def operation_id(self) -> str:
        return self.handler.__name__

    @property
    def route_paths(self) -> tuple[str, ...]:
        """:attr:`path` and its aliases as Starlette routes them: a ``slash`` path parameter by the
        dashboard's ``name`` convertor (harvest.web.ui.app: one character or more, a "/" included;
        the server decodes %2F before routing), so ``/admin/schedules/billing%2Fmonthly/pause``
        reaches ``billing/monthly`` (it was no route). /openapi.json keeps :attr:`path`."""
        out = []
        for spelled in (self.path, *self.aliases):
            for p in self.params:
                if p.where == "path" and p.slash:
                    spelled = spelled.replace("{" + p.name + "}", "{" + p.name + ":name}")
            out.append(spelled)
        return tuple(out)

    async def __call__(self, request: Request) -> Response:
        state: HarvestState = request.app.state.harvest
        principal: Principal | None = None  # (none yet: an outage before it is known says no detail)
        call: Call | _Anonymous | None = None
        try:
            if not state.opened and self.scope is not None:  # mounted, or the database was down at boot
                await state.open()  # (the probes open what they need themselves)
            if self.method not in SAFE_METHODS and (refused := cross_site(request)):
                # With no token to send (profile dev), or an authorizer that trusts the caller's
                # network, a page of another site must not make the browser act for it.
                raise PermissionDenied(refused)
            principal = None if self.scope is None else await state.authorizer.authorize(request, self.scope)
            args = self._arguments(request)
            if principal is not None and not principal.payloads:
                if self.payloads == "whole":
                    raise no_payloads(principal, f"{self.method} {self.path} answers only a payload")
                if args.get("payload_policy") == "full":
                    raise no_payloads(principal, "payload_policy=full shows them")
            data = None
            if self.body is not None:
                raw = await read_body(request, MAX_BODY_BYTES)
                if raw.strip():
                    if not is_json(request):  # (a browser sends no JSON to another site unasked)
                        raise UnsupportedMediaType("send the body as JSON: Content-Type: application/json")
                    coding = request.headers.get("content-encoding", "identity").strip().lower()
                    if coding != "identity":  # (RFC 7694: a coding the server does not read is a 415)
                        raise UnsupportedMediaType(
                            f"a body with Content-Encoding {coding} is not read here: send it uncompressed"
                        )
                    try:
                        decoded = parse_json(raw)
                    except NotJsonNumber as exc:  # NaN, Infinity, 1e999: where it was
                        raise invalid(exc.field, str(exc)) from None
                    except ValueError as exc:
                        deep = "nested deeper" in str(exc)  # (the parser's own text says little)
                        raise invalid("body", f"is {exc}" if deep else "is not valid JSON") from None
                else:
                    decoded = {}
                data = check_body(self.body, decoded)
            call = _Anonymous(request, state) if principal is None else Call(request, state, principal, self)
            # a route with no scope (the probes) is handed an _Anonymous: request and state only
            if tracing.ACTIVE:  # the caller's traceparent header, when it sends one
                with tracing.continue_incoming(request.headers):
                    answer = await self.handler(call, args, data)  # type: ignore[arg-type]
            else:
                answer = await self.handler(call, args, data)  # type: ignore[arg-type]
            if isinstance(call, Call) and not call.principal.payloads:
                answer = self._withheld(call.principal, answer)
            if isinstance(call, Call):  # (a shard's unavailable_reasons: an admin's to read)
                principal = call.principal  # (a raised scope: the principal it has now)
                if isinstance(answer, Reply):
                    answer = replace(answer, data=withheld_detail(answer.data, principal))
                else:
                    answer = withheld_detail(answer, principal)
        except Exception as exc:  # every failure becomes the JSON error shape
            return error_response(exc, call.principal if isinstance(call, Call) else principal, request)
        outages_of(request).tick()  # (an outage no request met for a while is over: its line)
        if isinstance(answer, Response):
            return answer
        if not isinstance(answer, Reply):
            answer = Reply(answer)
        if answer.status == 204:
            return Response(status_code=204, headers=answer.headers)
        return HarvestJSONResponse(answer.data, status_code=answer.status, headers=answer.headers)

    def _withheld(self, principal: Principal, answer: Any) -> Any:
        """``answer`` for a caller whose token sees no payloads: JSON redacted; another answer
        only from a route that declares it redacted or payload free."""
        if isinstance(answer, Response):
            if self.payloads in ("redacts", "none"):
                return answer
            raise no_payloads(principal, f"{self.method} {self.path} cannot withhold them from its answer")
        if isinstance(answer, Reply):
            return Reply(withheld(answer.data), answer.status, answer.headers)
        return withheld(answer)

    def _arguments(self, request: Request) -> dict[str, Any]:
        refuse_undeclared(request, self.params, self.elsewhere)
        args: dict[str, Any] = {}
        for p in self.params:
            if p.where == "path":
                args[p.name] = p.parse(request.path_params[p.name])
                continue
            raw = request.query_params.getlist(p.name)
            if not p.empty_is_absent and "" in raw:
                raise invalid(p.name, "is empty: pass a non-empty value, or leave it out")
            raw = [r for r in raw if r != ""]
            if not raw:
                if p.required:
                    raise invalid(p.name, "is required")
                args[p.name] = [] if p.repeat else p.default
            elif p.repeat:
                args[p.name] = [p.parse(r) for r in raw]
            elif len(raw) > 1:
                raise invalid(p.name, "given more than once: pass it once")
            else:
                args[p.name] = p.parse(raw[0])
        return args


# A request body larger than this is refused before it is parsed (a payload the engine takes is
# bounded by harvest.engine_settings.max_payload_bytes, checked again by the client and the SQL).
MAX_BODY_BYTES = 64 * 1024 * 1024
SAFE_METHODS = ("GET", "HEAD", "OPTIONS")  # read only: another site's page may send these


class _Anonymous:
    """The request of a route that needs no authorization (health probes): the process's
    state and the unswitched pools."""

    def __init__(self, request: Request, state: HarvestState):
        self.request, self.state = request, state


def refuse_undeclared(
    request: Request, params: Iterable[Param], elsewhere: Mapping[str, str] | None = None
) -> None:
    """InvalidArgument (400) naming a query parameter of ``request`` that ``params`` does not
    declare, and listing those they do, as an unknown body field is refused: a misspelt filter
    (?workflow_id=, ?status_=) must not answer every run as if unfiltered, nor a misspelt resume
    position (?last_event=) a stream from now. The Endpoints' and the event streams' one check.
    ``elsewhere``: a parameter's pointer to the route that takes it (?workflow_id= on a list)."""
    known = [p.name for p in params if p.where == "query"]
    unknown = sorted(set(request.query_params) - set(known))
    if unknown:
        listed = ", ".join(sorted(known)) or "none"
        there = f"; {elsewhere[unknown[0]]}" if elsewhere and unknown[0] in elsewhere else ""
        raise invalid(unknown[0], f"unknown query parameter; the parameters are {listed}{there}")


def path(name: str, kind: str = "string", description: str = "", *, slash: bool = False) -> Param:
    return Param(name, kind, required=True, where="path", description=description, slash=slash)
