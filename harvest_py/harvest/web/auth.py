"""API tokens for the management API (docs/auth.md): ``Authorization: Bearer <token>``.

``TokenAuthorizer`` hashes the presented token (SHA-256) and asks the database which live token
has that hash (``harvest.authenticate_api_token``) on every request: there is no cache, so a
revoked token is refused from the next request on. No token or an unknown or revoked one is
``Unauthenticated`` (HTTP 401); a token whose scope is below the route's is ``PermissionDenied``
(HTTP 403). Neither message, nor any log line here, carries the token.
"""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING, Any, cast

from harvest.core.errors import PermissionDenied, Unauthenticated
from harvest.core.shared_attempt import SharedAttempt
from harvest.db.pools import open_async_pool
from harvest.db.sqlapi import AsyncSqlApi
from harvest.web.guards import foreign_host
from harvest.web.principal import SCOPES, Principal, Scope

if TYPE_CHECKING:
    from starlette.requests import Request

log = logging.getLogger("harvest.web")

DEV_PROFILE = "dev"

# The face a request says it comes through (audit source); anything else is the API.
SOURCE_HEADER = "harvest-source"
_SOURCES = ("api", "cli", "ui")

# How long opening an API pool waits for its database before giving up (then: 503, and the next
# request tries again): the API's own pool (harvest.web.app) and the token authorizer's. One
# value, so a request never waits longer on its token check than on the call the check guards.
OPEN_SECS = 5.0


def token_hash(token: str) -> bytes:
    """What the database stores of a token: the SHA-256 of its text."""
    return hashlib.sha256(token.encode("utf-8")).digest()


def bearer_token(request: Request) -> str:
    """The token of ``Authorization: Bearer <token>``, or Unauthenticated."""
    header = request.headers.get("authorization")
    if not header:
        raise Unauthenticated(
            "no API token: send Authorization: Bearer <token> (harvest token create makes one)"
        )
    scheme, _, token = header.strip().partition(" ")
    token = token.strip()
    if scheme.lower() != "bearer" or not token or " " in token:
        raise Unauthenticated("the Authorization header is not of the form Bearer <token>")
    return token


class TokenAuthorizer:
    """``principal.Authorizer`` over the database's API tokens.

    ``TokenAuthorizer(pool)`` uses an async pool the app already holds (``harvest.db.pools``);
    ``TokenAuthorizer(dsn="...")`` opens its own small pool on the first request (close it with
    ``aclose()``), giving up after ``open_timeout`` seconds (``OPEN_SECS``, as the API's own
    pool) when the token database does not answer. The login behind either only needs
    ``harvest_reader``.
    """

    def __init__(
        self,
        pool: Any = None,
        *,
        dsn: str | None = None,
        pool_size: int = 4,
        open_timeout: float | None = None,
    ):
        if (pool is None) == (dsn is None):
            raise TypeError("TokenAuthorizer takes a pool or a dsn")
        self._pool, self._dsn, self._pool_size = pool, dsn, pool_size
        self._open_timeout = open_timeout
        self._own_pool = pool is None
        # One open at a time, its outcome shared: the requests that arrive while the pool opens
        # (a burst at boot) wait for that open and use its pool, or fail with its error (a token
        # database down: one wait, not one a request in turn); the next request tries again.
        # Without it each opened its own pool, and all but the last stayed open, never closed,
        # holding their connections.
        self._opening: SharedAttempt[None] = SharedAttempt()

    async def _open(self) -> None:
        if self._pool is None:
            timeout = OPEN_SECS if self._open_timeout is None else self._open_timeout
            # Fail-fast, as the API's shard pools: with the token database refusing (the default
            # shard down), a request's check is told at once, not after the pool's 30 s wait.
            self._pool = await open_async_pool(
                cast(str, self._dsn), max_size=self._pool_size, timeout=timeout, fail_fast=True
            )

    async def _api(self) -> AsyncSqlApi:
        if self._pool is None:
            await self._opening.run(self._open)
        return AsyncSqlApi(self._pool)

    async def authorize(self, request: Request, needed: Scope) -> Principal:
        if needed not in SCOPES:
            raise ValueError(f"unknown scope {needed!r}")
        token = bearer_token(request)
        found = await (await self._api()).authenticate_api_token(token_hash(token))
        source = request.headers.get(SOURCE_HEADER, "api").strip().lower()
        principal = Principal(
            actor=found["name"],
            scope=found["scope"],
            source=source if source in _SOURCES else "api",
            payloads=found["payloads"],
        )
        if not principal.allows(needed):
            raise PermissionDenied(
                f"token {principal.actor!r} has scope {principal.scope}; this route needs {needed}"
            )
        return principal

    async def aclose(self) -> None:
        if self._own_pool and self._pool is not None:
            await self._pool.close()
            self._pool = None


class DevAuthorizer:
    """The dev profile's authorizer: every caller is admin, recorded as actor ``dev``. Never
    use it where the socket is reachable beyond localhost."""

    def __init__(self, source: str = "api"):
        self.source = source

    async def authorize(self, request: Request, needed: Scope) -> Principal:
        refused = foreign_host(request)  # (DNS rebinding: another site's page acting as admin here)
        if refused is not None:
            raise PermissionDenied(refused)
        return Principal(actor="dev", scope="admin", source=self.source)


class FailClosedAuthorizer:
    """No way to check a token (no database URL to read them from): every request is 401."""

    async def authorize(self, request: Request, needed: Scope) -> Principal:
        raise Unauthenticated(
            "the management API has no authorizer: pass authorizer= (a TokenAuthorizer), give it "
            "a database URL to read API tokens from, or run with profile dev on localhost"
        )


def token_database(dsn: str | None, config: Any = None) -> str | None:
    """The database a web face reads API tokens from: ``dsn``, else the configured database URL;
    on shards the default shard's (``shards.default``: where the token routes and ``harvest
    token`` over SQL write them), shard 0 on ``dsn`` unless ``shards.urls`` names it. None if
    none."""
    from harvest.config import database_url, load_config, shard_urls, shards_configured
    from harvest.core.errors import ConfigError

    config = config if config is not None else load_config()
    if not dsn:
        try:
            dsn = database_url(None, config)
        except ConfigError:
            dsn = None
    if not shards_configured(config):
        return dsn
    from harvest.shard.router import ShardRouter

    return shard_urls(config, dsn).get(ShardRouter.from_config(config).default)


def default_authorizer(profile: str | None, token_dsn: str | None, *, source: str = "api") -> Any:
    """The authorizer of a web face given none: the dev profile serves everyone as admin (with a
    warning); any other profile checks API tokens in ``token_dsn`` (no token, no access), or
    refuses everything when there is no database to read them from (fail closed)."""
    if profile == DEV_PROFILE:
        log.warning(
            "harvest: the %s serves every caller as admin (profile dev, no authorizer): do not "
            "expose this process beyond localhost",
            "dashboard" if source == "ui" else "management API",
        )
        return DevAuthorizer(source)
    if token_dsn:
        return TokenAuthorizer(dsn=token_dsn)
    return FailClosedAuthorizer()
