"""The dashboard's Held-back starts page (fast suite, over HTTP): every shard's held-back starts
listed to a read token, a Discard (through a confirmation) and the discard by filter (a dry run
first) to admin (as a dead letter's discard), refused to a read and an operate token and from
another site."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import psycopg
import pytest
from dashboard_helpers import TokenScopes
from psycopg.types.json import Jsonb
from starlette.testclient import TestClient

from harvest import App, Throttle, workflow
from harvest.web.ui import dashboard_app

READ = {"Authorization": "Bearer read-token"}
OPERATE = {"Authorization": "Bearer operate-token"}
ADMIN = {"Authorization": "Bearer admin-token"}
T0 = "2030-01-01T00:00:00+00:00"


@workflow(throttle=Throttle(rps=1, burst=1, key="input.tenant"))
async def paced_mail(ctx, order: dict) -> dict:
    return order


APP = App(workflows=[paced_mail])


def _hold(db: str, tenant: str, n: int) -> list[int]:
    """``n`` + 1 starts of ``tenant``: the first runs, the other ``n`` are held back (their ids)."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT set_config('harvest.fake_now', %s, false)", (T0,))
        conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(APP.flow_policies()),))
        for i in range(n + 1):
            conn.execute(
                "SELECT harvest.start_workflow('paced_mail', %s, %s, 'default')",
                (Jsonb([{"tenant": tenant, "secret": "s3cr3t-card"}]), f"mail-{tenant}-{i}"),
            )
        rows = conn.execute(
            "SELECT id FROM harvest.list_pending_starts('paced_mail') WHERE gate_key = %s ORDER BY id",
            (tenant,),
        ).fetchall()
    return [r[0] for r in rows]


def _waiting(db: str) -> list[int]:
    with psycopg.connect(db) as conn:
        return [r[0] for r in conn.execute("SELECT id FROM harvest.pending_starts ORDER BY id").fetchall()]


@pytest.fixture
def ui(db: str) -> Iterator[TestClient]:
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        yield client


def test_a_read_token_sees_the_list_with_no_input_and_no_discard(ui: TestClient, db: str) -> None:
    ids = _hold(db, "acme", 2)
    page = ui.get("/start-gates", headers=READ)
    assert page.status_code == 200, page.text
    table = page.text.split('id="start-gates"')[1].split("</table>")[0]
    assert "mail-acme-1" in table and "mail-acme-2" in table and "throttle" in table
    assert "s3cr3t-card" not in page.text  # (the list reads no input)
    assert "Discard" not in page.text and 'id="start-gates-bulk-form"' not in page.text
    assert 'href="/start-gates"' in page.text  # (in the navigation)
    for who in (READ, OPERATE):  # (discarding loses what the starters sent: an admin's)
        refused = ui.post(f"/start-gates/0/{ids[0]}/discard", data={"confirm": "yes"}, headers=who)
        assert refused.status_code == 403 and _waiting(db) == ids
        bulk = ui.post("/start-gates/discard", data={"gate_key": "acme", "dry_run": "on"}, headers=who)
        assert bulk.status_code == 403
    operate_page = ui.get("/start-gates", headers=OPERATE).text
    assert "Discard" not in operate_page and 'id="start-gates-bulk-form"' not in operate_page
    assert ui.get("/start-gates?kind=burst", headers=READ).status_code == 400
    assert "No start is held back" in ui.get("/start-gates?kind=debounce", headers=READ).text


def test_discard_one_through_its_confirmation(ui: TestClient, db: str) -> None:
    ids = _hold(db, "acme", 2)
    page = ui.get("/start-gates", headers=ADMIN).text
    assert f'action="/start-gates/0/{ids[0]}/discard"' in page
    confirm = ui.post(f"/start-gates/0/{ids[0]}/discard", data={}, headers=ADMIN)
    assert confirm.status_code == 200, confirm.text
    assert 'id="start-gate-confirm-form"' in confirm.text and "mail-acme-1" in confirm.text
    assert _waiting(db) == ids  # (the confirmation writes nothing)
    cross = ui.post(
        f"/start-gates/0/{ids[0]}/discard",
        data={"confirm": "yes"},
        headers={**ADMIN, "Origin": "https://evil.example"},
    )
    assert cross.status_code == 403 and _waiting(db) == ids
    done = ui.post(
        f"/start-gates/0/{ids[0]}/discard",
        data={"confirm": "yes", "reason": "sent twice"},
        headers=ADMIN,
        follow_redirects=False,
    )
    assert done.status_code == 303, done.text
    assert "discarded" in html.unescape(ui.get(done.headers["location"], headers=ADMIN).text)
    assert _waiting(db) == ids[1:]
    with psycopg.connect(db) as conn:
        actor, details = conn.execute(
            "SELECT actor, details FROM harvest.audit_log WHERE operation = 'pending_start.discard'"
        ).fetchone()
    assert actor == "admin-user" and details["reason"] == "sent twice"
    again = ui.post(f"/start-gates/0/{ids[0]}/discard", data={}, headers=ADMIN)
    assert again.status_code == 404 and "released" in again.text
    assert ui.post(f"/start-gates/7/{ids[1]}/discard", data={}, headers=ADMIN).status_code == 404


def test_discard_by_filter_dry_run_first_then_confirmed(ui: TestClient, db: str) -> None:
    acme, zeta = _hold(db, "acme", 3), _hold(db, "zeta", 1)
    empty = ui.post("/start-gates/discard", data={"kind": "throttle", "dry_run": "on"}, headers=ADMIN)
    assert empty.status_code == 400 and "workflow_name" in empty.text
    assert ui.post("/start-gates/discard", data={"gate_key": "acme"}, headers=READ).status_code == 403
    dry = ui.post(
        "/start-gates/discard", data={"gate_key": "acme", "dry_run": "on", "limit": "2"}, headers=ADMIN
    )
    assert dry.status_code == 200, dry.text
    assert _waiting(db) == sorted(acme + zeta)
    confirm = dry.text.split('id="start-gates-bulk-confirm"')[1].split("</form>")[0]
    fields = dict(re.findall(r'<input type="hidden" name="([^"]+)" value="([^"]*)">', confirm))
    assert fields == {"gate_key": "acme", "limit": "2"} and "3 held-back starts match" in confirm
    done = ui.post("/start-gates/discard", data={**fields, "reason": "backlog"}, headers=ADMIN)
    assert done.status_code == 200, done.text
    assert 'id="start-gates-bulk-confirm"' not in done.text
    assert _waiting(db) == sorted(acme[2:] + zeta)


def test_the_page_goes_on_by_its_next_link_a_page_at_a_time_with_each_inputs_size(
    ui: TestClient, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The page shows ``limit`` starts oldest first and a Next page link (a cursor, as the
    Workflows page's) to the rest; each shard is asked for a page (limit + 1), the confirmation
    for its one row: a backlog was read whole, and every start beyond the first limit was out
    of reach. Each row says its input's size in bytes, never the input."""
    from harvest.db.sqlapi import AsyncSqlApi

    ids = _hold(db, "acme", 3)
    asked: list[object] = []
    real = AsyncSqlApi.list_pending_starts

    async def counted(self: AsyncSqlApi, *args: object, **kwargs: object) -> object:
        asked.append(kwargs.get("limit", args[2] if len(args) > 2 else None))
        return await real(self, *args, **kwargs)

    monkeypatch.setattr(AsyncSqlApi, "list_pending_starts", counted)
    seen, url = [], "/start-gates?limit=1"
    while url:
        page = ui.get(url, headers=READ)
        assert page.status_code == 200, page.text
        table = page.text.split('id="start-gates"')[1].split("</table>")[0]
        seen += re.findall(r"mail-acme-\d", table)
        size = len('[{"tenant": "acme", "secret": "s3cr3t-card"}]')
        assert f'<td class="num">{size}</td><td class="num">0</td>' in table  # (inline, offloaded)
        found = re.search(r'id="next" rel="next" href="([^"]+)"', page.text)
        url = "/start-gates" + html.unescape(found.group(1)) if found else None  # (relative: ?...)
    assert seen == ["mail-acme-1", "mail-acme-2", "mail-acme-3"]
    assert asked == [2, 2, 2]
    confirm = ui.post(f"/start-gates/0/{ids[1]}/discard", data={}, headers=ADMIN)
    assert confirm.status_code == 200 and "mail-acme-2" in confirm.text, confirm.text
    assert asked[-1] == 1
    assert ui.post(f"/start-gates/0/{ids[-1] + 99}/discard", data={}, headers=ADMIN).status_code == 404
