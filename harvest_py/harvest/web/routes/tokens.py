"""API tokens: list, create, revoke (docs/auth.md). Thin over the SQL calls `harvest token`
makes; admin only. Tokens live in the default database (on shards, the default shard, where the
token authorizer reads them). The secret is in the create's answer only (with ``Cache-Control:
no-store``); the list never carries a secret or a hash."""

from __future__ import annotations

from typing import Any

from harvest.core.errors import InvalidArgument
from harvest.shard.fanout import TOKEN_PAGE, TOKEN_PAGE_MAX, token_after, token_page
from harvest.web.routes import BOOLEAN, ROWS, STRING, Call, Endpoint, Param, Reply, body, invalid, path, shape

SCOPE = {"type": "string", "enum": ["read", "operate", "admin"]}
# A token's life in seconds (absent or null: until revoked); at most 100 years of 365.25 days,
# as the SQL and the CLI's durations count them.
LIFETIME = {"type": "number", "minimum": 0.001, "maximum": 3_155_760_000}


async def list_tokens(call: Call, args: dict[str, Any], _: Any) -> Any:
    include_revoked = args["include_revoked"]
    limit = args["limit"] if args["limit"] is not None else TOKEN_PAGE
    try:
        after = token_after(args["cursor"], include_revoked)
    except InvalidArgument:
        raise invalid(
            "cursor", "pass the next_cursor of a previous page unchanged, with the same include_revoked"
        ) from None
    # One more than the page says whether there is a next one.
    rows = await call.on_shard(None, lambda sql: sql.list_api_tokens(include_revoked, after, limit + 1))
    rows, next_cursor = token_page(rows, limit, include_revoked)
    return {"tokens": rows, "next_cursor": next_cursor}


async def create_token(call: Call, args: dict[str, Any], data: dict[str, Any]) -> Any:
    lifetime, payloads = data.get("expires_in_secs"), data.get("payloads")
    payloads = True if payloads is None else payloads
    made = await call.on_shard(
        None, lambda sql: sql.create_api_token(data["name"], data["scope"], lifetime, payloads)
    )
    return Reply(made, 201, {"Cache-Control": "no-store"})


async def revoke_token(call: Call, args: dict[str, Any], _: Any) -> Any:
    name = args["name"]
    token_id = await call.on_shard(None, lambda sql: sql.revoke_api_token(name))
    return {"name": name, "token_id": token_id, "revoked": True}


ENDPOINTS = [
    Endpoint(
        "GET",
        "/admin/tokens",
        "admin",
        list_tokens,
        "The API tokens (live ones by name; include_revoked: revoked ones after them), never a secret: "
        "a page of at most limit, the rest by next_cursor.",
        (
            Param("include_revoked", "boolean", default=False),
            Param(
                "limit",
                "integer",
                minimum=1,
                maximum=TOKEN_PAGE_MAX,
                description=f"Tokens at most (default {TOKEN_PAGE}).",
            ),
            Param("cursor", description="next_cursor of the previous page, with the same include_revoked."),
        ),
        tag="admin",
        shape=shape(tokens=ROWS, next_cursor={"type": ["string", "null"]}),
    ),
    Endpoint(
        "POST",
        "/admin/tokens",
        "admin",
        create_token,
        "Create a token; its secret is in this answer only (the database keeps its SHA-256). "
        "payloads false: the API shows the token no payload, only states and metadata "
        "(docs/security.md).",
        body=body(
            {"name": STRING, "scope": SCOPE, "expires_in_secs": LIFETIME, "payloads": BOOLEAN},
            ("name", "scope"),
        ),
        responses={201: "Created", 409: "A live token has that name (HR021)"},
        tag="admin",
        shape=shape(token_id={"type": "integer"}, name=STRING, scope=STRING, secret=STRING, payloads=BOOLEAN),
    ),
    Endpoint(
        "DELETE",
        "/admin/tokens/{name}",
        "admin",
        revoke_token,
        "Revoke the live token of that name: the next request that presents it is refused (401).",
        (path("name", description="The token's name."),),
        responses={200: "Revoked", 404: "No live token has that name"},
        tag="admin",
        shape=shape(name=STRING, token_id={"type": "integer"}, revoked=BOOLEAN),
    ),
]
