"""Who is calling the management API, and the one question each route asks about them.

Every route declares the scope it needs (``read``, ``operate`` or ``admin``); an ``Authorizer``
turns a request into a ``Principal`` or refuses it. The principal's ``role`` is the Postgres role
the request's database calls run as, so a token can never do what its role cannot: the database
checks again what the route checked.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

if TYPE_CHECKING:
    from starlette.requests import Request

    from harvest.db.sqlapi import AsyncSqlApi

Scope = Literal["read", "operate", "admin"]

# Lowest to highest: each scope includes the ones before it (an admin token may operate and read).
SCOPES: tuple[Scope, ...] = ("read", "operate", "admin")

# The Postgres role each scope maps onto (functions/security.sql creates them).
ROLE_OF_SCOPE: dict[Scope, str] = {
    "read": "harvest_reader",
    "operate": "harvest_operator",
    "admin": "harvest_admin",
}


@dataclass(frozen=True)
class Principal:
    """An authenticated caller of one request."""

    actor: str  # the name audit rows record: a token's name, or "dev" in the dev profile
    scope: Scope  # the highest scope the caller holds
    source: str = "api"  # audit source: "api", "cli" (the CLI over HTTP) or "ui" (the dashboard)
    # False: a token made with payloads false (docs/security.md). Every answer the API gives it
    # is redacted (harvest.web.routes.Endpoint, the streams, the dashboard), whatever its scope.
    payloads: bool = True

    @property
    def role(self) -> str:
        """The Postgres role this caller's database calls run as."""
        return ROLE_OF_SCOPE[self.scope]

    def allows(self, needed: Scope) -> bool:
        return SCOPES.index(self.scope) >= SCOPES.index(needed)

    def shows_payloads(self, needed: Scope) -> bool:
        """Whether payloads may be shown to this caller in full where a face shows them to
        ``needed`` and above (the dashboard: operate): never to a token that sees none."""
        return self.payloads and self.allows(needed)

    async def resolved(self, sql: AsyncSqlApi, value: Any) -> Any:
        """``value`` with the default store's references read back on ``sql`` (the connection
        the value was read on: the run's shard, in this caller's role), its codec envelopes as
        stored (a face holds no keys): one ``get_payloads`` call for every reference in
        ``value``, none when it holds none (harvest.client.export_batch.resolved). A reference
        the store no longer holds (its row pruned) stays as it is; an erased row's reads as the
        erasure's marker. Nothing is read for a caller whose token sees no payloads (its answer
        is redacted: docs/http-api.md). The one resolver of the management API's reads and the
        dashboard's pages."""
        if not self.payloads:
            return value
        from harvest.client.export_batch import resolved
        from harvest.db.steps import arun_steps

        return await arun_steps(resolved(value), sql)


def refusal_status(exc: BaseException) -> int | None:
    """The HTTP status an authorizer's error carries (401, 403; a Harvest error's, Starlette's
    HTTPException's, or an ``status_code``/``status`` of its own), or None."""
    for name in ("http_status", "status_code", "status"):
        status = getattr(exc, name, None)
        if isinstance(status, int) and 400 <= status < 600:
            return status
    return None


class Authorizer(Protocol):
    """Turns a request into the principal making it, or raises the API's 401/403 error."""

    async def authorize(self, request: Request, needed: Scope) -> Principal: ...
