"""The held-back starts over HTTP (harvest.web.routes.start_gates): GET /start-gates/pending
lists every shard's, POST /start-gates/pending/{id}/discard discards one on the shard
``shard_id`` names, POST /start-gates/pending/discard discards by filter on every shard; read
lists, admin discards (harvest_admin in the database, as a dead letter's discard: an operate
token is refused); bad input is a 400 naming its
field; and `harvest start-gate` over --base-url prints what it prints over SQL."""

from __future__ import annotations

import json

import psycopg
import pytest
from psycopg.types.json import Jsonb
from test_cli_http import BASE, both, run, served  # noqa: F401  (fixtures)
from web_helpers import api_client

from harvest import App, Throttle, workflow


@workflow(throttle=Throttle(rps=1, burst=1, key="input.tenant"))
async def gated_send(ctx, order: dict) -> dict:
    return order


APP = App(workflows=[gated_send])
T0 = "2030-01-01T00:00:00+00:00"


def hold(dsn: str, tenant: str, n: int, prefix: str = "send", at: str = T0) -> list[int]:
    """``n`` + 1 throttled starts of ``tenant`` at ``at``: the first runs, ``n`` are held back
    (their ids)."""
    with psycopg.connect(dsn, autocommit=True) as conn:
        conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (at,))
        conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(APP.flow_policies()),))
        for i in range(n + 1):
            conn.execute(
                "SELECT harvest.start_workflow('gated_send', %s, %s, 'default')",
                (Jsonb([{"tenant": tenant, "n": i}]), f"{prefix}-{tenant}-{i}"),
            )
        rows = conn.execute(
            "SELECT id FROM harvest.list_pending_starts('gated_send') WHERE gate_key = %s ORDER BY id",
            (tenant,),
        ).fetchall()
    assert len(rows) == n
    return [r[0] for r in rows]


def waiting(dsn: str) -> list[int]:
    with psycopg.connect(dsn) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM harvest.pending_starts ORDER BY id").fetchall()]


def bearer(tokens: dict[str, str], scope: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {tokens[scope]}"}


def test_a_read_token_lists_and_an_admin_token_discards_one_audited(db: str, tokens: dict[str, str]) -> None:
    ids = hold(db, "acme", 2)
    with api_client(db, profile="production") as api:
        listed = api.get("/start-gates/pending", headers=bearer(tokens, "read"))
        assert listed.status_code == 200, listed.text
        body = listed.json()
        assert [r["id"] for r in body["pending_starts"]] == ids
        assert body["pending_starts"][0]["shard_id"] == 0 and body["next_cursor"] is None
        assert "input" not in body["pending_starts"][0]  # (what a start holds is never answered)
        assert body["pending_starts"][0]["input_bytes"] == len(json.dumps([{"tenant": "acme", "n": 1}]))
        one = api.get("/start-gates/pending", params={"limit": 1}, headers=bearer(tokens, "read")).json()
        assert [r["id"] for r in one["pending_starts"]] == ids[:1] and one["next_cursor"]

        path = f"/start-gates/pending/{ids[0]}/discard"
        for scope in ("read", "operate"):  # (it loses what the starters sent: an admin's, as erasure)
            refused = api.post(path, json={}, headers=bearer(tokens, scope))
            assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"
        assert waiting(db) == ids
        done = api.post(path, json={"reason": "sent twice"}, headers=bearer(tokens, "admin"))
        assert done.status_code == 200, done.text
        assert done.json()["id"] == ids[0] and done.json()["shard_id"] == 0
        assert done.json()["workflow_id"] == "send-acme-1"
        again = api.post(path, json={}, headers=bearer(tokens, "admin"))
        assert again.status_code == 404 and again.json()["error"]["code"] == "not_found", again.text
    assert waiting(db) == ids[1:]
    with psycopg.connect(db) as conn:
        actor, details = conn.execute(
            "SELECT actor, details FROM harvest.audit_log WHERE operation = 'pending_start.discard'"
        ).fetchone()
    assert actor == "t-admin" and details["reason"] == "sent twice"


def test_a_discard_by_filter_dry_runs_limits_and_discards(db: str, tokens: dict[str, str]) -> None:
    acme, other = hold(db, "acme", 3), hold(db, "zeta", 1)
    admin = bearer(tokens, "admin")
    with api_client(db, profile="production") as api:
        path = "/start-gates/pending/discard"
        for scope in ("read", "operate"):  # (the dry run too, as a dead letters' bulk discard)
            dry_run = {"gate_key": "acme", "dry_run": True}
            refused = api.post(path, json=dry_run, headers=bearer(tokens, scope))
            assert refused.status_code == 403, refused.text
        dry = api.post(path, json={"gate_key": "acme", "dry_run": True, "limit": 2}, headers=admin)
        assert dry.status_code == 200, dry.text
        assert dry.json()["matched"] == 3 and dry.json()["discarded"] == 0
        assert dry.json()["shards"]["0"]["ids"] == acme[:2] and dry.json()["status"] == "complete"
        assert waiting(db) == sorted(acme + other)
        done = api.post(path, json={"gate_key": "acme", "limit": 2, "operator_id": "ann"}, headers=admin)
        assert done.status_code == 200, done.text
        assert done.json()["discarded"] == 2 and done.json()["shard_errors"] == []
    assert waiting(db) == sorted(acme[2:] + other)


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        ({}, "workflow_name"),
        ({"kind": "batch"}, "workflow_name"),  # (a kind alone selects every held-back start)
        ({"workflow_name": ""}, "workflow_name"),
        ({"gate_key": "a", "kind": "burst"}, "kind"),
        ({"gate_key": "a", "limit": 0}, "limit"),
        ({"gate_key": "a", "limit": 1001}, "limit"),
        ({"gate_key": "a", "created_before": "yesterday"}, "created_before"),
        ({"gate_key": "a", "wokflow_name": "x"}, "wokflow_name"),
    ],
)
def test_a_bad_discard_by_filter_is_a_400_naming_its_field(db: str, payload: dict, field: str) -> None:
    ids = hold(db, "acme", 1)
    with api_client(db) as api:
        refused = api.post("/start-gates/pending/discard", json=payload)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert error["code"] == "invalid_argument" and field in error["message"], error
    assert waiting(db) == ids


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ({"workflow_name": ""}, "workflow_name"),
        ({"kind": "burst"}, "kind"),
        ({"limit": 0}, "limit"),
        ({"limit": 1001}, "limit"),
        ({"cursor": "ps1.nope"}, "cursor"),
    ],
)
def test_a_bad_list_parameter_is_a_400_naming_it(db: str, query: dict, field: str) -> None:
    with api_client(db) as api:
        refused = api.get("/start-gates/pending", params=query)
    assert refused.status_code == 400 and field in refused.json()["error"]["message"], refused.text


def test_a_discard_by_id_names_a_shard_that_is_not_this_databases(db: str) -> None:
    ids = hold(db, "acme", 1)
    with api_client(db) as api:
        refused = api.post(f"/start-gates/pending/{ids[0]}/discard", params={"shard_id": 3}, json={})
        assert refused.status_code == 400 and "shard_id" in refused.json()["error"]["message"]
        assert api.post("/start-gates/pending/0/discard", json={}).status_code == 400
    assert waiting(db) == ids


def test_on_shards_the_list_names_each_rows_shard_and_the_discards_reach_them(two_shards) -> None:
    env = {
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0,1",
        "HARVEST_SHARDS__URLS__0": two_shards[0],
        "HARVEST_SHARDS__URLS__1": two_shards[1],
    }
    on0, on1 = hold(two_shards[0], "acme", 2, "s0"), hold(two_shards[1], "acme", 2, "s1")
    assert on0 == on1  # (ids are per shard: the same numbers on both)
    with api_client(None, env=env) as api:
        body = api.get("/start-gates/pending").json()
        assert [(r["shard_id"], r["id"]) for r in body["pending_starts"]] == [
            *((0, i) for i in on0),
            *((1, i) for i in on1),
        ]
        assert body["sharded"] is True and body["status"] == "complete"
        only1 = api.get("/start-gates/pending", params={"shard_id": 1}).json()["pending_starts"]
        assert {r["shard_id"] for r in only1} == {1}
        # By id: on the shard named (the default shard, 0, without one).
        done = api.post(f"/start-gates/pending/{on1[0]}/discard", params={"shard_id": 1}, json={})
        assert done.status_code == 200 and done.json()["shard_id"] == 1
        assert done.json()["workflow_id"] == "s1-acme-1"
        assert waiting(two_shards[0]) == on0 and waiting(two_shards[1]) == on1[1:]
        # By filter: every shard, each shard's answer by its number, the sums.
        many = api.post("/start-gates/pending/discard", json={"workflow_name": "gated_send"}).json()
        assert many["discarded"] == 3 and set(many["shards"]) == {"0", "1"}
        assert many["shards"]["1"]["discarded"] == 1 and many["shard_errors"] == []
    assert waiting(two_shards[0]) == [] and waiting(two_shards[1]) == []


# -- the CLI over HTTP -------------------------------------------------------------------------------
def test_start_gate_commands_print_the_same_over_sql_and_http(db: str, both) -> None:  # noqa: F811
    ids = hold(db, "acme", 3)
    both("start-gate", "list")
    both("start-gate", "list", "--workflow-name", "gated_send", "--output", "json")
    both("start-gate", "discard-many", "--gate-key", "acme", "--dry-run", "--limit", "2")
    both("start-gate", "discard-many")  # (no filter: the same refusal, the same exit code)
    web = run("--base-url", BASE, "start-gate", "discard", str(ids[0]), "--reason", "typo")
    assert web.exit_code == 0 and "send-acme-1" in web.stdout, (web.stdout, web.stderr)
    _, gone = both("start-gate", "discard", str(ids[0]))  # (discarded: not found on both)
    assert gone.exit_code == 1 and "no pending start has id" in gone.stderr, (gone.stdout, gone.stderr)
    many = run("--base-url", BASE, "start-gate", "discard-many", "--gate-key", "acme", "--output", "json")
    assert many.exit_code == 0 and '"discarded": 2' in many.stdout, (many.stdout, many.stderr)
    assert waiting(db) == []


def test_the_cli_over_http_on_a_sharded_server_names_each_shard(two_shards, monkeypatch) -> None:
    """`harvest start-gate` over --base-url to a server with [shards]: the list names each row's
    shard, discard --shard-id reaches that shard, discard-many every shard (each shard's row)."""
    from harvest.cli import http as cli_http

    env = {
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0,1",
        "HARVEST_SHARDS__URLS__0": two_shards[0],
        "HARVEST_SHARDS__URLS__1": two_shards[1],
    }
    on0, on1 = hold(two_shards[0], "acme", 1, "s0"), hold(two_shards[1], "acme", 2, "s1")
    with api_client(None, env=env) as api:
        monkeypatch.setattr(cli_http, "TRANSPORT", api._transport)
        listed = run("--base-url", BASE, "start-gate", "list", "--output", "json")
        assert listed.exit_code == 0, (listed.stdout, listed.stderr)
        rows = json.loads(listed.stdout)["pending_starts"]
        assert [(r["shard_id"], r["workflow_id"]) for r in rows] == [
            (0, "s0-acme-1"),
            (1, "s1-acme-1"),
            (1, "s1-acme-2"),
        ]
        one = run("--base-url", BASE, "start-gate", "discard", str(on1[0]), "--shard-id", "1")
        assert one.exit_code == 0 and "s1-acme-1" in one.stdout, (one.stdout, one.stderr)
        many = run("--base-url", BASE, "start-gate", "discard-many", "--gate-key", "acme", "--output", "json")
        assert many.exit_code == 0, (many.stdout, many.stderr)
        shards = {r["shard_id"]: r["discarded"] for r in json.loads(many.stdout)["shards"]}
        assert shards == {0: 1, 1: 1}
    assert waiting(two_shards[0]) == [] and waiting(two_shards[1]) == [] and on0


def test_the_list_pages_by_cursor_over_every_shard_oldest_first(two_shards) -> None:
    """GET /start-gates/pending merges every shard's starts oldest first (ties by shard, then
    id) and pages them by next_cursor, each shard from its own (created_at, id): a start
    discarded between two pages moves no other onto a page already read or off the next (an
    offset would), and each shard is read a page at a time, never its whole backlog. A cursor
    made for other filters, or no cursor of this route's, is a 400 naming it."""
    env = {
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0,1",
        "HARVEST_SHARDS__URLS__0": two_shards[0],
        "HARVEST_SHARDS__URLS__1": two_shards[1],
    }
    a = hold(two_shards[0], "a", 2, "s0", at="2030-01-01T00:00:00+00:00")
    b = hold(two_shards[1], "b", 2, "s1", at="2030-01-01T00:00:01+00:00")
    c = hold(two_shards[0], "c", 1, "s0", at="2030-01-01T00:00:02+00:00")
    with api_client(None, env=env) as api:
        first = api.get("/start-gates/pending", params={"limit": 2}).json()
        assert [(r["shard_id"], r["id"]) for r in first["pending_starts"]] == [(0, a[0]), (0, a[1])]
        with psycopg.connect(two_shards[1], autocommit=True) as conn:  # (gone before the next page)
            conn.execute("SELECT harvest.discard_pending_start(%s)", (b[0],))
        second = api.get("/start-gates/pending", params={"limit": 2, "cursor": first["next_cursor"]}).json()
        assert [(r["shard_id"], r["id"]) for r in second["pending_starts"]] == [(1, b[1]), (0, c[0])]
        assert second["next_cursor"] is None and second["status"] == "complete"
        one = api.get("/start-gates/pending", params={"limit": 1, "workflow_name": "gated_send"}).json()
        other = api.get(
            "/start-gates/pending", params={"limit": 1, "kind": "debounce", "cursor": one["next_cursor"]}
        )
        assert other.status_code == 400 and "cursor" in other.json()["error"]["message"], other.text
        alien = api.get(
            "/start-gates/pending", params={"cursor": first["next_cursor"].replace("ps1.", "dl2.")}
        )
        assert alien.status_code == 400 and "cursor" in alien.json()["error"]["message"], alien.text
        # shard_id is a filter as the others are: a cursor of every shard's list, passed to one
        # shard's, named the other shard unavailable on every page, and next_cursor never ended.
        mixed = api.get("/start-gates/pending", params={"shard_id": 1, "cursor": first["next_cursor"]})
        assert mixed.status_code == 400 and "cursor" in mixed.json()["error"]["message"], mixed.text
        only = api.get("/start-gates/pending", params={"shard_id": 0, "limit": 2}).json()
        assert [(r["shard_id"], r["id"]) for r in only["pending_starts"]] == [(0, a[0]), (0, a[1])]
        end = api.get("/start-gates/pending", params={"shard_id": 0, "cursor": only["next_cursor"]}).json()
        assert [(r["shard_id"], r["id"]) for r in end["pending_starts"]] == [(0, c[0])]
        assert end["next_cursor"] is None and end["unavailable_shards"] == [], end
