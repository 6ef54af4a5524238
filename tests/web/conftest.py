"""Fixtures for the web tests: a live token per scope, and a login like the web process's."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import psycopg
import pytest
from psycopg import conninfo


@pytest.fixture
def tokens(db: str) -> dict[str, str]:
    """One live token per scope: {scope: secret}."""
    with psycopg.connect(db, autocommit=True) as conn:
        return {
            scope: conn.execute(
                "SELECT secret FROM harvest.create_api_token(%s, %s)", (f"t-{scope}", scope)
            ).fetchone()[0]
            for scope in ("read", "operate", "admin")
        }


@pytest.fixture
def web_login(pg_server, db: str) -> Iterator[str]:
    """The DSN of a login that is a member of the three request roles, as the web process's is."""
    user = f"u_web_{uuid.uuid4().hex[:8]}"
    with pg_server.admin() as admin:
        admin.execute(f'CREATE ROLE "{user}" LOGIN')
        admin.execute(f'GRANT harvest_reader, harvest_operator, harvest_admin TO "{user}"')
    yield conninfo.make_conninfo(db, user=user, password="")
    with pg_server.admin() as admin:
        admin.execute(f'DROP ROLE IF EXISTS "{user}"')
