"""API tokens through a real app (issue 16): every scope against every level, 401/403 in the API's
error shape, revocation at once, no secret in any log or error, and the database refusing what
the token's role lacks even when the route let the request through."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import subprocess

import cli_forks
import httpx
import psycopg
import pytest
from web_helpers import authorizer_for, make_app

from harvest.core.errors import PermissionDenied
from harvest.db.connection import set_role
from harvest.db.sqlapi import AsyncSqlApi
from harvest.web.principal import ROLE_OF_SCOPE

SCOPES = ("read", "operate", "admin")


def run(coro):
    return asyncio.run(coro)


async def _get(app, path: str, token: str | None = None, headers: dict | None = None) -> httpx.Response:
    headers = dict(headers or {})
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://test") as client:
        return await client.get(path, headers=headers)


def test_each_scope_against_each_level(db: str, tokens: dict[str, str]) -> None:
    async def main() -> dict:
        authorizer = authorizer_for(db)
        app = make_app(authorizer)
        try:
            return {
                (have, need): await _get(app, f"/{need}", tokens[have]) for have in SCOPES for need in SCOPES
            }
        finally:
            await authorizer.aclose()

    answers = run(main())
    for (have, need), response in answers.items():
        if SCOPES.index(have) >= SCOPES.index(need):
            assert response.status_code == 200, (have, need, response.text)
            assert response.json() == {"actor": f"t-{have}", "scope": have, "role": ROLE_OF_SCOPE[have]}
        else:
            assert response.status_code == 403, (have, need)
            assert response.json() == {
                "error": {
                    "code": "permission_denied",
                    "message": f"token 't-{have}' has scope {have}; this route needs {need}",
                }
            }


def test_no_unknown_or_malformed_token_is_401_and_no_secret_is_logged(
    db: str, tokens: dict[str, str], caplog: pytest.LogCaptureFixture
) -> None:
    guess = "hvt_" + "0" * 64
    caplog.set_level(logging.DEBUG)

    async def main() -> list[httpx.Response]:
        authorizer = authorizer_for(db)
        app = make_app(authorizer)
        try:
            return [
                await _get(app, "/read"),
                await _get(app, "/read", guess),
                await _get(app, "/read", headers={"Authorization": f"Basic {tokens['admin']}"}),
                await _get(app, "/read", headers={"Authorization": "Bearer "}),
                await _get(app, "/admin", tokens["read"]),
            ]
        finally:
            await authorizer.aclose()

    missing, unknown, basic, empty, low = run(main())
    for response in (missing, unknown, basic, empty):
        assert response.status_code == 401
        assert set(response.json()["error"]) == {"code", "message"}
        assert response.json()["error"]["code"] == "unauthenticated"
    assert "Bearer <token>" in missing.json()["error"]["message"]
    assert unknown.json()["error"]["message"] == (
        "the API token is unknown or revoked: "
        "pass a live token (harvest token create) as Authorization: Bearer <token>"
    )
    everything = caplog.text + "".join(r.text for r in (missing, unknown, basic, empty, low))
    for secret in (*tokens.values(), guess):
        assert secret not in everything
        assert secret[4:20] not in everything


def test_a_revoked_token_is_refused_at_the_next_request(db: str, tokens: dict[str, str]) -> None:
    async def main() -> list[int]:
        authorizer = authorizer_for(db)
        app = make_app(authorizer)
        try:
            before = await _get(app, "/operate", tokens["operate"])
            async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
                await conn.execute("SELECT harvest.revoke_api_token('t-operate')")
            after = await _get(app, "/operate", tokens["operate"])
            return [before.status_code, after.status_code]
        finally:
            await authorizer.aclose()

    assert run(main()) == [200, 401]


def test_an_expired_token_is_refused_and_says_so(db: str) -> None:
    """A token made with a lifetime authenticates until then and is refused (401) after, with a
    message naming its expiry and what to do, never its secret."""
    made = _harvest(db, "token", "create", "nightly", "--scope", "read", "--expires-in", "90d", "-o", "json")
    assert made.returncode == 0, made.stderr
    secret, expires = json.loads(made.stdout)["secret"], json.loads(made.stdout)["expires_at"]
    bad = _harvest(db, "token", "create", "never", "--scope", "read", "--expires-in", "0s")
    assert bad.returncode == 2 and "--expires-in: '0s' is not a positive finite duration" in bad.stderr
    with psycopg.connect(db, autocommit=True) as conn:
        lifetime = conn.execute(
            "SELECT expires_at - created_at FROM harvest.api_tokens WHERE name = 'nightly'"
        )
        assert lifetime.fetchone()[0].days == 90 and expires is not None

    async def main() -> list[httpx.Response]:
        authorizer = authorizer_for(db)
        app = make_app(authorizer)
        try:
            before = await _get(app, "/read", secret)
            async with await psycopg.AsyncConnection.connect(db, autocommit=True) as conn:
                past = "UPDATE harvest.api_tokens SET expires_at = '2026-01-02 03:04:05+00' WHERE name = %s"
                await conn.execute(past, ("nightly",))
            return [before, await _get(app, "/read", secret)]
        finally:
            await authorizer.aclose()

    before, after = run(main())
    assert (before.status_code, after.status_code) == (200, 401)
    message = after.json()["error"]["message"]
    assert message.startswith(
        "the API token expired at 2026-01-02T03:04:05+00:00: an admin creates a new token"
    )
    assert secret not in after.text
    listed = json.loads(_harvest(db, "token", "list", "-o", "json").stdout)
    assert [(t["name"], t["expires_at"] is not None) for t in listed["tokens"]] == [("nightly", True)]
    assert listed["next_cursor"] is None


def test_the_database_refuses_what_the_tokens_role_lacks(db: str, web_login: str) -> None:
    """A request lowered to harvest_reader (SET ROLE by the web login) cannot cancel: the
    database says no (42501) even if a route forgot its scope; as harvest_operator it can, and
    the audit row carries the token's name, the login, the role it acted as, api and the route."""
    with psycopg.connect(db, autocommit=True) as admin:
        run_id = admin.execute(
            "SELECT execution_id FROM harvest.start_workflow('wf', '[]', 'r1', 'q')"
        ).fetchone()[0]

    async def main() -> tuple:
        async with await psycopg.AsyncConnection.connect(web_login, autocommit=True) as conn:
            api = AsyncSqlApi.on_connection(conn)
            with pytest.raises(PermissionDenied):
                async with set_role(conn, "harvest_reader", "api", actor="t-read", route="x"):
                    await api.cancel_workflow(str(run_id), "no")
            async with set_role(
                conn,
                "harvest_operator",
                "api",
                actor="t-operate",
                route="POST /workflows/{execution_id}/cancel",
            ):
                await api.cancel_workflow(str(run_id), "yes")
                assert (await (await conn.execute("SELECT current_user")).fetchone())[0] == "harvest_operator"
            # The role and the audit context are RESET when the block ends.
            row = await (
                await conn.execute("SELECT current_user, current_setting('harvest.audit_actor', true)")
            ).fetchone()
            return row, conninfo_user(web_login)

    (user_after, actor_after), login = run(main())
    assert user_after == login and not actor_after
    with psycopg.connect(db, autocommit=True) as admin:
        rows = admin.execute(
            "SELECT operation, actor, login, acting_role, source, route FROM harvest.audit_log"
        ).fetchall()
    assert rows == [
        (
            "workflow.cancel",
            "t-operate",
            login,
            "harvest_operator",
            "api",
            "POST /workflows/{execution_id}/cancel",
        )
    ]


def conninfo_user(dsn: str) -> str:
    return psycopg.conninfo.conninfo_to_dict(dsn)["user"]


def test_set_role_takes_only_the_request_roles(db: str) -> None:
    async def main() -> None:
        async with (
            await psycopg.AsyncConnection.connect(db, autocommit=True) as conn,
            set_role(conn, "harvest_worker", "api", actor="a"),
        ):
            pass

    with pytest.raises(ValueError, match="unknown role 'harvest_worker'"):
        run(main())


def _harvest(db: str, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "HARVEST_DATABASE_URL": db}
    return cli_forks.run(args, env, timeout=60)


def test_the_token_cli_creates_lists_and_revokes(db: str, web_login: str) -> None:
    made = _harvest(db, "token", "create", "ci-deploy", "--scope", "operate", "--output", "json")
    assert made.returncode == 0, made.stderr
    secret = json.loads(made.stdout)["secret"]
    assert secret.startswith("hvt_")
    listed = _harvest(db, "token", "list")
    assert "ci-deploy" in listed.stdout and "operate" in listed.stdout and secret not in listed.stdout
    again = _harvest(db, "token", "create", "ci-deploy", "--scope", "read")
    assert again.returncode == 1 and 'a live API token named "ci-deploy" exists' in again.stderr
    revoked = _harvest(db, "token", "revoke", "ci-deploy")
    assert revoked.returncode == 0 and "revoked token 'ci-deploy'" in revoked.stdout
    assert "ci-deploy" not in _harvest(db, "token", "list").stdout
    assert "ci-deploy" in _harvest(db, "token", "list", "--all").stdout
    with psycopg.connect(db, autocommit=True) as conn:
        rows = conn.execute("SELECT operation, source FROM harvest.audit_log ORDER BY id").fetchall()
    assert rows == [("token.create", "cli"), ("token.revoke", "cli")]


def test_only_an_admin_login_manages_tokens(pg_server, db: str) -> None:
    import uuid

    user = f"u_op_{uuid.uuid4().hex[:8]}"
    with pg_server.admin() as admin:
        admin.execute(f'CREATE ROLE "{user}" LOGIN')
        admin.execute(f'GRANT harvest_operator TO "{user}"')
    try:
        dsn = psycopg.conninfo.make_conninfo(db, user=user, password="")
        refused = _harvest(dsn, "token", "create", "sneaky", "--scope", "admin")
        assert refused.returncode == 1
        assert "permission denied" in refused.stderr
    finally:
        with pg_server.admin() as admin:
            admin.execute(f'DROP ROLE IF EXISTS "{user}"')
