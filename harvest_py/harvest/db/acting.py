"""One request's database identity: the role it runs as and what its audit rows say.

``acting_as(conn, role=..., actor=..., source=..., route=...)`` opens a transaction on an
autocommit connection, lowers it with ``SET LOCAL ROLE`` to the principal's role and sets the
audit context (``harvest.audit_actor``/``audit_source``/``audit_route``, transaction-local, read
by ``harvest._audit``); both end with the transaction, so a connection goes back to its pool
as it came. docs/auth.md, "Roles" and "Audit".
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import psycopg
from psycopg import sql

# The roles a request may run as (harvest.web.principal.ROLE_OF_SCOPE); never user input.
REQUEST_ROLES = ("harvest_reader", "harvest_operator", "harvest_admin")

SET_AUDIT_CONTEXT = (
    "SELECT set_config('harvest.audit_actor', %(actor)s, true), "
    "set_config('harvest.audit_source', %(source)s, true), "
    "set_config('harvest.audit_route', %(route)s, true)"
)


@asynccontextmanager
async def acting_as(
    conn: psycopg.AsyncConnection, *, role: str, actor: str, source: str, route: str | None = None
) -> AsyncIterator[psycopg.AsyncConnection]:
    """The connection inside one transaction as ``role`` with this audit context."""
    if role not in REQUEST_ROLES:
        raise ValueError(f"a request runs as one of {', '.join(REQUEST_ROLES)}, not {role!r}")
    async with conn.transaction():
        await conn.execute(sql.SQL("SET LOCAL ROLE {}").format(sql.Identifier(role)))
        await conn.execute(SET_AUDIT_CONTEXT, {"actor": actor, "source": source, "route": route or ""})
        yield conn
