"""Every writing route of the management app, found by walking its routes (the API's, the
dashboard's under /ui, the streams'), not from a list kept by hand: a read token is refused
(403) on each and nothing is written; a request another site's page sends is refused (403) on
each, even with an admin token. A new writing route without a scope check fails here."""

from __future__ import annotations

import re
import uuid

import psycopg
from starlette.routing import Mount
from web_helpers import api_client

# The writing routes that need no token, on purpose: signing in (it checks nothing, it keeps the
# token typed for the next pages) and signing out (it forgets it).
ANONYMOUS_WRITES = {("POST", "/ui/login"), ("POST", "/ui/logout")}
SAFE = {"GET", "HEAD", "OPTIONS"}


def writing_routes(app) -> list[tuple[str, str]]:
    """(method, path template) of every route of ``app`` that takes a method other than a read,
    mounted apps walked (the dashboard's static files answer reads only)."""
    found: list[tuple[str, str]] = []

    def walk(routes, prefix: str) -> None:
        for route in routes:
            if isinstance(route, Mount):
                walk(route.routes or [], prefix + route.path)
                continue
            for method in sorted((getattr(route, "methods", None) or set()) - SAFE):
                found.append((method, prefix + route.path))

    walk(app.routes, "")
    return found


def concrete(template: str) -> str:
    """A path of ``template`` with each parameter given a value of its kind."""
    values = {
        "execution_id": str(uuid.uuid4()),
        "shard": "0",
        "shard_id": "0",
        "id": "1",
        "dead_letter_id": "1",
        "verb": "delete",
    }
    return re.sub(r"\{(\w+)(?::\w+)?\}", lambda m: values.get(m.group(1), "x"), template)


def _written(db: str) -> tuple[int, ...]:
    """What a write would leave: audit rows, schedules, runs, tokens."""
    with psycopg.connect(db) as conn:
        return tuple(
            conn.execute(f"SELECT count(*) FROM harvest.{table}").fetchone()[0]
            for table in ("audit_log", "schedules", "executions", "api_tokens")
        )


def test_a_read_token_is_refused_on_every_writing_route(db: str, tokens: dict[str, str]) -> None:
    read = {"Authorization": f"Bearer {tokens['read']}"}
    before = _written(db)
    with api_client(db, profile="production") as api:
        routes = writing_routes(api.app)
        assert len(routes) > 60 and ("POST", "/ui/schedules") in routes  # the walk saw the dashboard
        for method, template in routes:
            if (method, template) in ANONYMOUS_WRITES:
                continue
            path = concrete(template)
            for how in ({"json": {}}, {"data": {"action": "discard", "verb": "delete"}}):
                answer = api.request(method, path, headers=read, follow_redirects=False, **how)
                assert answer.status_code == 403, (method, template, answer.status_code, answer.text[:300])
                # the route's own check said no (TokenAuthorizer), not the database after it ran
                assert "has scope read; this route needs" in answer.text, (method, template)
    assert _written(db) == before


def test_a_write_another_sites_page_sends_is_refused_on_every_route(db: str, tokens: dict[str, str]) -> None:
    admin = {"Authorization": f"Bearer {tokens['admin']}"}
    before = _written(db)
    with api_client(db, profile="production") as api:
        for method, template in writing_routes(api.app):
            path = concrete(template)
            for sent_from in (
                {"Origin": "https://evil.example"},
                {"Origin": "null"},
                {"Sec-Fetch-Site": "cross-site"},
                {"Sec-Fetch-Site": "same-site"},
            ):
                answer = api.request(
                    method, path, headers={**admin, **sent_from}, data={"token": "t"}, follow_redirects=False
                )
                assert answer.status_code == 403, (method, template, sent_from, answer.text[:300])
                assert "set-cookie" not in answer.headers, (method, template)
    assert _written(db) == before
