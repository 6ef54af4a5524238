"""``/openapi.json``: the OpenAPI 3.1 document, generated from the route table (each route
declares its method, path, scope, parameters, body and answers once, in harvest/web/routes)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse

from harvest.web.routes import Endpoint

ERROR_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {"code": {"type": "string"}, "message": {"type": "string"}},
        }
    },
}


def _operation(endpoint: Endpoint) -> dict[str, Any]:
    op: dict[str, Any] = {
        "operationId": endpoint.operation_id,
        "summary": endpoint.summary,
        "tags": [endpoint.tag] if endpoint.tag else [],
        "parameters": [
            {
                "name": p.name,
                "in": p.where,
                "required": p.required,
                "schema": p.schema(),
                **({"description": p.description} if p.description else {}),
                **({"explode": True, "style": "form"} if p.repeat else {}),
            }
            for p in endpoint.params
        ],
        "responses": {},
    }
    if endpoint.scope is not None:
        op["x-harvest-scope"] = endpoint.scope
        op["security"] = [{"bearer": [endpoint.scope]}]
    if endpoint.body is not None:
        op["requestBody"] = {
            "required": False,
            "content": {"application/json": {"schema": {**endpoint.body, "additionalProperties": False}}},
        }
    for status, description in sorted(endpoint.responses.items()):
        if status == 204:
            op["responses"][str(status)] = {"description": description}
        else:
            shape = {"$ref": "#/components/schemas/Error"} if status >= 400 else endpoint.shape
            op["responses"][str(status)] = {
                "description": description,
                "content": {"application/json": {"schema": shape}},
            }
    op["responses"]["default"] = {
        "description": "An error: {error: {code, message, ...}}",
        "content": {"application/json": {"schema": {"$ref": "#/components/schemas/Error"}}},
    }
    return op


def document(endpoints: Sequence[Endpoint], server: str = "/") -> dict[str, Any]:
    """The OpenAPI document of ``endpoints``."""
    paths: dict[str, dict[str, Any]] = {}
    for endpoint in endpoints:
        paths.setdefault(endpoint.path, {})[endpoint.method.lower()] = _operation(endpoint)
    paths["/openapi.json"] = {
        "get": {
            "operationId": "openapi",
            "summary": "This document.",
            "responses": {
                "200": {"description": "OK", "content": {"application/json": {"schema": {"type": "object"}}}}
            },
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


def route(endpoints: Sequence[Endpoint]) -> Any:
    async def openapi(request: Request) -> JSONResponse:
        root = request.scope.get("root_path", "") or "/"
        return JSONResponse(document(endpoints, root))

    return openapi
