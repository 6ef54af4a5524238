"""``/openapi.json``: the OpenAPI 3.1 document, generated from the route table (each route
declares its method, path, scope, parameters, body and answers once, in harvest/web/routes)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from harvest.web.routes import SAFE_METHODS, Endpoint, Param

if TYPE_CHECKING:
    from harvest.web.principal import Scope

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "field": {"type": "string", "description": "a 400's: the parameter or body field refused"},
                "needs": {
                    "type": "string",
                    "enum": ["payloads"],
                    "description": "a 403's: what the token lacks when no scope would help (payloads: false)",
                },
                # an outage's 503 (docs/security.md, "What an outage tells a caller")
                "request_id": {"type": "string", "description": "the server log line's key"},
                "shard_id": {"type": "integer"},
                "detail": {"type": "string", "description": "what the connect met: admin only"},
            },
        }
    },
}


@dataclass(frozen=True)
class Mounted:
    """A route mounted beside the declared Endpoints (the event streams, the metrics): declared
    once here, it makes its Starlette route (:meth:`route`) and its /openapi.json entry. Its
    handler checks its own request; ``media_type`` is what a 200 answers (an error is JSON)."""

    method: str
    path: str  # the OpenAPI form: /workflows/{execution_id}/events/stream
    operation_id: str
    summary: str
    scope: Scope | None
    media_type: str
    params: tuple[Param, ...] = ()
    responses: dict[int, str] = field(default_factory=lambda: {200: "OK"})
    tag: str = ""
    schema: dict[str, Any] = field(default_factory=lambda: {"type": "string"})

    def route(self, endpoint: Callable[[Request], Awaitable[Response]]) -> Route:
        """The Starlette route of ``endpoint`` at :attr:`path` (a uuid path parameter converted)."""
        starlette_path = self.path
        for p in self.params:
            if p.where == "path" and p.kind == "uuid":
                starlette_path = starlette_path.replace("{" + p.name + "}", "{" + p.name + ":uuid}")
        return Route(starlette_path, endpoint, methods=[self.method], name=self.operation_id)


def _parameter(p: Param) -> dict[str, Any]:
    return {
        "name": p.name,
        "in": p.where,
        "required": p.required,
        "schema": p.schema(),
        **({"description": p.description} if p.description else {}),
        **({"explode": True, "style": "form"} if p.repeat else {}),
    }


def _mounted(route: Mounted) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": route.operation_id,
        "summary": route.summary,
        "tags": [route.tag] if route.tag else [],
        "parameters": [_parameter(p) for p in route.params],
        "responses": {},
    }
    responses = dict(route.responses)
    if route.scope is not None:
        op["x-harvest-scope"] = route.scope
        op["security"] = [{"bearer": [route.scope]}]
        responses.setdefault(401, "No token, or an unknown, revoked or expired one")
    for status, description in sorted(responses.items()):
        if status < 400:
            content = {route.media_type: {"schema": route.schema}}
        else:
            content = {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}}
        op["responses"][str(status)] = {"description": description, "content": content}
    op["responses"]["default"] = {
        "description": "An error: {error: {code, message, ...}}",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    return op


def _operation(endpoint: Endpoint) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": endpoint.operation_id,
        "summary": endpoint.summary,
        "tags": [endpoint.tag] if endpoint.tag else [],
        "parameters": [_parameter(p) for p in endpoint.params],
        "responses": {},
    }
    if endpoint.aliases:  # the same operation served at these paths too (the spec's spelling)
        op["x-harvest-aliases"] = list(endpoint.aliases)
    if endpoint.scope is not None:
        op["x-harvest-scope"] = endpoint.scope
        op["security"] = [{"bearer": [endpoint.scope]}]
        # Its answer to a token made with payloads false (harvest.web.routes.PAYLOAD_ANSWERS).
        op["x-harvest-payloads"] = endpoint.payloads
    if endpoint.body is not None:
        op["requestBody"] = {
            "required": False,
            "content": {"application/json": {"schema": {**endpoint.body, "additionalProperties": False}}},
        }
    # What the guards in front of every route answer (harvest/web/guards.py), stated once here
    # rather than on each route: a write another site's page sent, a body not sent as JSON.
    # So are the statuses every route of its kind can answer (docs/http-api.md, "Answers and
    # errors"), so a client generated from this document has a typed error for each: a bad or
    # unknown parameter, no or a dead token, a scope below the route's, what a path names missing,
    # a body over the limit, the database out of reach.
    responses = dict(endpoint.responses)
    responses.setdefault(400, "A bad or unknown parameter or body field (named in error.field)")
    if endpoint.scope is not None:
        responses.setdefault(401, "No token, or an unknown, revoked or expired one")
        responses.setdefault(503, "The database (a shard) cannot be reached now: retry after Retry-After")
    if endpoint.method not in SAFE_METHODS:
        responses.setdefault(403, "Permission denied, or a write another site's page sent")
    elif endpoint.scope not in (None, "read"):
        responses.setdefault(403, f"Permission denied: the token's scope is below {endpoint.scope}")
    if any(p.where == "path" for p in endpoint.params):
        responses.setdefault(404, "What the path names does not exist")
    if endpoint.body is not None:
        responses.setdefault(413, "A request body over 64 MiB, or a payload over max_payload_bytes")
        responses.setdefault(415, "A body not sent as Content-Type: application/json")
    for status, description in sorted(responses.items()):
        if status == 204:
            op["responses"][str(status)] = {"description": description}
        else:
            shape = {"$ref": "#/components/schemas/Error"} if status >= 400 else endpoint.shape
            content: dict[str, Any] = {"application/json": {"schema": shape}}
            if status < 400:
                content.update({media: {"schema": {"type": "string"}} for media in endpoint.also})
            op["responses"][str(status)] = {"description": description, "content": content}
    op["responses"]["default"] = {
        "description": "An error: {error: {code, message, ...}}",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    return op


def document(
    endpoints: Sequence[Endpoint], server: str = "/", mounted: Sequence[Mounted] = ()
) -> dict[str, Any]:
    """The OpenAPI document of ``endpoints`` and of the ``mounted`` routes beside them."""
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in endpoints:
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = _operation(endpoint)
    for route in mounted:
        paths.setdefault(route.path, {})[route.method.lower()] = _mounted(route)
    # The two routes that need no token and answer a JSON object: this document and the index.
    for where, operation_id, summary in (
        ("/openapi.json", "openapi", "This document."),
        ("/", "index", "The base URL: where this document, the docs, the probe and the dashboard are."),
    ):
        json_object = {"application/json": {"schema": {"type": "object"}}}
        paths[where] = {
            "get": {
                "operationId": operation_id,
                "summary": summary,
                "responses": {"200": {"description": "OK", "content": json_object}},
            }
        }
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "Harvest management API",
            "version": "1",
            "description": "Workflows, dead letters, workers and administration of a Harvest deployment "
            "(docs/http-api.md). Every error is {error: {code, message}}.",
        },
        "servers": [{"url": server}],
        "paths": paths,
        "components": {
            "schemas": {"Error": ERROR_SCHEMA},
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer"}},
        },
    }


def route(endpoints: Sequence[Endpoint], mounted: Sequence[Mounted] = ()) -> Any:
    async def openapi(request: Request) -> JSONResponse:
        root = request.scope.get("root_path", "") or "/"
        return JSONResponse(document(endpoints, root, mounted))

    return openapi
