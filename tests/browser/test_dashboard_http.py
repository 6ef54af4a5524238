"""The dashboard over HTTP without a browser (fast suite): every page with real runs, the
filters' 400s, paging, and each action done with its scope and refused without it, by the page
(no form) and by the POST handler (403), with the audit row it writes."""

from __future__ import annotations

import asyncio
import html
import json
import re
import socket
import urllib.parse
import uuid
from collections.abc import Iterator

import psycopg
import pytest
from dashboard_demo import Demo
from dashboard_helpers import TokenScopes, wait_for
from psycopg.types.json import Jsonb
from starlette.testclient import TestClient
from tests.web.web_helpers import rows_read

from harvest.web.ui import dashboard_app
from harvest.web.ui.app import MAX_FORM_BYTES

READ, OPERATE, ADMIN = ({"Authorization": f"Bearer {s}-token"} for s in ("read", "operate", "admin"))


@pytest.fixture
def ui(demo: Demo) -> Iterator[TestClient]:
    app = dashboard_app(dsn=demo.dsn, authorizer=TokenScopes(), timeout=3.0)
    with TestClient(app, base_url="http://testserver") as client:
        yield client


def test_every_page_renders_real_data_for_a_read_token(ui: TestClient, demo: Demo) -> None:
    page = ui.get("/workflows", headers=READ)
    assert page.status_code == 200
    for i in range(3):
        assert demo.ids[f"greet-{i}"] in page.text
    assert re.search(r'data-status="COMPLETED">.*?<span class="count">3</span>', page.text, re.S)

    run = ui.get(f"/workflows/{demo.ids['approval']}", headers=READ)
    assert run.status_code == 200
    assert "WorkflowStarted" in run.text and "ActivityCompleted" in run.text
    assert "redacted (" in run.text  # input redacted by default
    assert "order-7" not in run.text.split('id="input"')[1].split("</div>")[0]
    assert 'id="signal-form"' not in run.text  # no action for a read token
    assert re.search(r'id="updates"><li><strong>note</strong> <span class="mono">note-1</span>', run.text)

    dead = ui.get("/dead-letters", headers=READ)
    assert dead.status_code == 200
    assert "charge" in dead.text and "CardDeclined" in dead.text
    assert "/replay" not in dead.text

    workers = ui.get("/workers", headers=READ)
    assert workers.status_code == 200
    assert "worker-a" in workers.text
    assert 'class="banner Healthy"' in workers.text

    keys = ui.get("/concurrency", headers=READ)
    assert keys.status_code == 200 and ">acme<" in keys.text

    shards = ui.get("/shards", headers=READ)
    assert shards.status_code == 200 and 'data-shard="0"' in shards.text

    family = ui.get(f"/workflows/{demo.ids['family']}", headers=READ)
    assert 'id="tree"' in family.text and "approval" in family.text


def test_an_update_no_worker_has_accepted_is_listed_with_why(ui: TestClient, demo: Demo) -> None:
    """A run on a queue no live worker polls: its requested update waits, and the page says so
    (before, only accepted updates were listed, from the history)."""
    with psycopg.connect(demo.dsn, autocommit=True) as conn:
        started = "SELECT execution_id FROM harvest.start_workflow('parked', p_queue => 'nobody')"
        (run,) = conn.execute(started).fetchone()
        conn.execute("SELECT * FROM harvest.request_update(%s, 'approve', '\"yes\"', 'ask-1', 60)", (run,))
    page = ui.get(f"/workflows/{run}", headers=READ)
    assert page.status_code == 200
    assert re.search(
        r'id="requested-updates"><li><strong>approve</strong> <span class="mono">ask-1</span> '
        r'<span class="muted">requested .*?, no live worker polls queue nobody</span>',
        page.text,
    )


def test_an_update_whose_validator_waits_for_the_first_workflow_task_says_so(
    ui: TestClient, demo: Demo
) -> None:
    """A requested update a worker parked (status waiting: its validator needs the state the run's
    first workflow task builds) is listed with that reason, not as one no worker took."""
    with psycopg.connect(demo.dsn, autocommit=True) as conn:
        started = "SELECT execution_id FROM harvest.start_workflow('parked', p_queue => 'nobody')"
        (run,) = conn.execute(started).fetchone()
        conn.execute("SELECT * FROM harvest.request_update(%s, 'approve', '\"yes\"', 'ask-2', 60)", (run,))
        conn.execute("UPDATE harvest.query_requests SET status = 'waiting' WHERE update_id = 'ask-2'")
    page = ui.get(f"/workflows/{run}", headers=READ)
    assert page.status_code == 200
    assert re.search(
        r'id="requested-updates"><li><strong>approve</strong> <span class="mono">ask-2</span> '
        r'<span class="muted">requested .*?, its validator waits for the run'
        r"'s first workflow task</span>",
        page.text,
    )


def test_no_token_is_401_and_the_login_cookie_signs_in(ui: TestClient) -> None:
    assert ui.get("/workers").status_code == 401
    signed = ui.post("/login", data={"token": "read-token"}, follow_redirects=False)
    assert signed.status_code == 303
    assert "httponly" in signed.headers["set-cookie"].lower()
    assert "samesite=strict" in signed.headers["set-cookie"].lower()
    assert ui.get("/workers").status_code == 200  # the cookie is sent on as the Bearer token


def test_signing_in_goes_back_to_the_page_that_asked_and_never_to_another_site(ui: TestClient) -> None:
    """Signing in always landed on /workflows, whatever page had answered 401. The 401 page now
    links to the sign-in with the page's path, and the sign-in goes back there; a `next` that is
    not a path of this dashboard (another site, a backslash, a header's end) lands on /workflows."""
    refused = ui.get("/workers?status=active")
    assert refused.status_code == 401
    link = re.search(r'href="(/login\?next=[^"]+)"', refused.text).group(1)
    form = ui.get(html.unescape(link))
    assert 'name="next" value="/workers?status=active"' in form.text
    signed = ui.post(
        "/login", data={"token": "read-token", "next": "/workers?status=active"}, follow_redirects=False
    )
    assert signed.status_code == 303 and signed.headers["location"] == "/workers?status=active"
    for elsewhere in (
        "//evil.example/x",
        "https://evil.example/",
        "/\\evil.example",
        "/x\r\nSet-Cookie: a=b",
        "workers",
    ):
        landed = ui.post("/login", data={"token": "read-token", "next": elsewhere}, follow_redirects=False)
        assert landed.headers["location"] == "/workflows", elsewhere
    assert 'name="next"' not in ui.get("/login?next=//evil.example").text


def test_workers_filters_refuse_unknown_values(ui: TestClient) -> None:
    for query in ("status=sleeping", "stale=maybe", "shard=7", "shard=x", "limit=201", "limit=0", "page=0"):
        answer = ui.get(f"/workers?{query}", headers=READ)
        assert answer.status_code == 400, query
    assert ui.get("/workers?status=Active&stale=false&shard=0&limit=200", headers=READ).status_code == 200
    assert ui.get("/workflows?status=SLEEPING", headers=READ).status_code == 400
    assert ui.get("/workflows?cursor=garbage", headers=READ).status_code == 400


def test_workers_refresh_adds_the_meta_tag(ui: TestClient) -> None:
    page = ui.get("/workers?refresh=30", headers=READ)
    assert '<meta http-equiv="refresh" content="30">' in page.text
    assert 'http-equiv="refresh"' not in ui.get("/workers", headers=READ).text


def _every_page(ui: TestClient, url: str, pattern: str) -> list[str]:
    """What ``pattern`` finds on each page, following "Next page" from ``url`` to the last."""
    seen: list[str] = []
    while url:
        page = ui.get(url, headers=READ)
        assert page.status_code == 200
        seen += re.findall(pattern, page.text)
        # a later page links back to the first: the same query, no cursor
        first = re.search(r'<a href="([^"]*)">« First page</a>', page.text)
        assert bool(first) == ("cursor=" in url), url
        assert first is None or "cursor" not in first.group(1)
        found = re.search(r'id="next" rel="next" href="([^"]+)"', page.text)
        url = url.split("?")[0] + found.group(1).replace("&amp;", "&") if found else None
    return seen


def test_workflow_list_pages_with_the_cursor(ui: TestClient, demo: Demo) -> None:
    seen = _every_page(ui, "/workflows?workflow_name=greet&limit=1", r'href="/workflows/([0-9a-f-]{36})"')
    assert sorted(seen) == sorted(demo.ids[f"greet-{i}"] for i in range(3))
    page = ui.get("/workflows?workflow_name=greet&limit=1", headers=READ).text
    assert re.search(r'Next page »</a>\s*<span class="muted">1 shown</span>\s*</div>', page), page


def test_search_attribute_filter(ui: TestClient, demo: Demo) -> None:
    page = ui.get("/workflows?attr=tenant%3Dglobex", headers=READ)
    assert demo.ids["approval"] in page.text
    assert demo.ids["greet-0"] not in page.text


def _audit(dsn: str, operation: str) -> list[tuple]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT source, target FROM harvest.audit_log WHERE operation = %s", (operation,)
        ).fetchall()


def test_actions_need_their_scope(ui: TestClient, demo: Demo) -> None:
    run = demo.ids["approval"]
    # refused by the handler, not only hidden: nothing is written
    assert ui.post(f"/workflows/{run}/signal", headers=READ, data={"name": "approved"}).status_code == 403
    assert ui.post(f"/workflows/{run}/terminate", headers=OPERATE, data={}).status_code == 403
    assert ui.post(f"/workflows/{run}/reset", headers=OPERATE, data={"to_event": "3"}).status_code == 403
    page = ui.get(f"/workflows/{run}", headers=OPERATE).text
    assert 'id="signal-form"' in page and 'id="terminate-form"' not in page
    assert 'id="reset-form"' in ui.get(f"/workflows/{run}", headers=ADMIN).text

    dry = ui.post(
        f"/workflows/{run}/reset",
        headers=ADMIN,
        data={"to_event": "4", "reason": "drill", "signal_reapply": "drop", "dry_run": "on"},
    )
    assert dry.status_code == 200 and "<strong>Valid</strong>" in dry.text, dry.text
    assert _audit(demo.dsn, "workflow.reset") == []  # a dry run writes nothing

    sent = ui.post(
        f"/workflows/{run}/signal",
        headers=OPERATE,
        data={"name": "approved", "payload": "true"},
        follow_redirects=False,
    )
    assert sent.status_code == 303
    assert demo.client.get_handle(run).result(timeout=30) == {"order": "order-7", "approved": True}
    assert ui.post(f"/workflows/{run}/signal", headers=OPERATE, data={"name": ""}).status_code == 400

    family = demo.ids["family"]
    assert (
        ui.post(f"/workflows/{family}/cancel", headers=OPERATE, data={"reason": "drill"}).status_code == 200
    )
    assert _audit(demo.dsn, "workflow.cancel") == [("ui", family)]


def test_dead_letter_actions_and_bulk_dry_run(ui: TestClient, demo: Demo) -> None:
    page = ui.get("/dead-letters", headers=OPERATE).text
    assert "/replay" in page and "/discard" not in page
    shard, id_ = re.search(r"/dead-letters/(\d+)/(\d+)/replay", page).groups()
    assert ui.post(f"/dead-letters/{shard}/{id_}/discard", headers=OPERATE).status_code == 403
    assert (
        ui.post(
            "/dead-letters/bulk", headers=OPERATE, data={"action": "discard", "activity_name": "charge"}
        ).status_code
        == 403
    )

    dry = ui.post(
        "/dead-letters/bulk",
        headers=OPERATE,
        data={"action": "replay", "activity_name": "charge", "dry_run": "on"},
    )
    assert dry.status_code == 200 and 'id="bulk-results"' in dry.text
    assert re.search(r'<td class="num">0</td><td class="num">1</td><td class="num">0</td>', dry.text)
    assert ui.post("/dead-letters/bulk", headers=OPERATE, data={"action": "replay"}).status_code == 400

    replayed = ui.post(f"/dead-letters/{shard}/{id_}/replay", headers=OPERATE, follow_redirects=False)
    assert replayed.status_code == 303
    with demo.client.sql() as sql:  # the activity fails again: a new dead letter, the old one gone
        wait_for(lambda: [d for d in sql.list_dead_letters(10) if str(d["id"]) != id_], "a new dead letter")
    assert _audit(demo.dsn, "dead_letter.replay") == [("ui", id_)]


def test_workers_stale_first_within_active_draining_stopped_and_paged(ui: TestClient, demo: Demo) -> None:
    with psycopg.connect(demo.dsn, autocommit=True) as conn:
        for worker_id, interval in (
            ("a-fresh", 3600),
            ("b-stale", 60),
            ("c-draining", 3600),
            ("d-stopped", 3600),
        ):
            conn.execute(
                "SELECT harvest.register_worker(%s, ARRAY['default'], 'host', 1, %s, '{}')",
                (worker_id, interval),
            )
        # b-stale last heartbeated 3 minutes ago: more than 2 x its 60 s interval
        conn.execute(
            "UPDATE harvest.workers SET last_heartbeat_at = harvest.now() - interval '3 minutes'"
            " WHERE id = 'b-stale'"
        )
        conn.execute("SELECT harvest.begin_worker_drain('c-draining')")
        conn.execute("SELECT harvest.stop_worker('d-stopped')")
    page = ui.get("/workers", headers=READ).text
    order = re.findall(r'<a href="/workers/([^"]+)"', page)
    assert order == ["b-stale", "a-fresh", "worker-a", "c-draining", "d-stopped"]
    assert 'class="stale" data-status="active" data-health="stale"' in page and "(stale)" in page
    banner = re.search(r'id="fleet-banner"[^>]*>(.*?)</section>', page, re.S).group(1)
    assert " ".join(re.sub(r"<[^>]+>", "", banner).split()) == (
        "Degraded — 5 workers | 3 active | 1 draining | 1 stopped | 1 stale"
    )

    first = ui.get("/workers?limit=2", headers=READ).text
    assert re.findall(r'<a href="/workers/([^"]+)"', first) == ["b-stale", "a-fresh"]
    assert 'id="next"' in first and 'id="prev"' not in first
    last = ui.get("/workers?limit=2&page=3", headers=READ).text
    assert re.findall(r'<a href="/workers/([^"]+)"', last) == ["d-stopped"]
    assert 'id="next"' not in last and 'id="prev"' in last

    stale = ui.get("/workers?stale=true", headers=READ).text
    assert re.findall(r'<a href="/workers/([^"]+)"', stale) == ["b-stale"]
    draining = ui.get("/workers?status=DRAINING&stale=false", headers=READ).text
    assert re.findall(r'<a href="/workers/([^"]+)"', draining) == ["c-draining"]


def test_mounted_under_a_prefix_every_link_and_the_cookie_keep_it(demo: Demo) -> None:
    from starlette.applications import Starlette
    from starlette.routing import Mount

    ui_app = dashboard_app(dsn=demo.dsn, authorizer=TokenScopes(), timeout=3.0)
    outer = Starlette(routes=[Mount("/api/harvest/ui", app=ui_app)])
    with TestClient(outer) as client:
        page = client.get("/api/harvest/ui/workers", headers=READ)
        assert page.status_code == 200
        links = re.findall(r'(?:href|action)="(/[^"]*)"', page.text)
        assert links and all(link.startswith("/api/harvest/ui/") for link in links), links
        assert client.get("/api/harvest/ui/static/dashboard.css").status_code == 200
        signed = client.post("/api/harvest/ui/login", data={"token": "read-token"}, follow_redirects=False)
        assert signed.headers["location"] == "/api/harvest/ui/workflows"
        assert "path=/api/harvest/ui" in signed.headers["set-cookie"].lower()
        sent = client.post(
            f"/api/harvest/ui/workflows/{demo.ids['approval']}/cancel",
            headers=OPERATE,
            follow_redirects=False,
        )
        assert sent.headers["location"].startswith(f"/api/harvest/ui/workflows/{demo.ids['approval']}?msg=")
        # a mounted app's lifespan does not run: the app that mounts it closes the pools
        client.portal.call(ui_app.state.dashboard.close)


class _ApiError(Exception):
    """An authorizer's own error type with a status (as the management API's is)."""

    def __init__(self, status_code: int, message: str):
        super().__init__(message)
        self.status_code = status_code


class _Refusing:
    async def authorize(self, request, needed):
        raise _ApiError(403, f"token lacks {needed}")


def test_an_authorizers_own_error_keeps_its_status_and_no_authorizer_fails_closed(db: str) -> None:
    with TestClient(dashboard_app(dsn=db, authorizer=_Refusing())) as client:
        page = client.get("/workers")
        assert page.status_code == 403 and "token lacks read" in page.text
    with TestClient(dashboard_app(dsn=db, profile="production")) as client:
        assert client.get("/workers").status_code == 401
    with TestClient(dashboard_app(dsn=db, profile="dev")) as client:
        page = client.get("/workers")
        assert page.status_code == 200 and 'id="fleet-banner"' in page.text


def test_drain_a_worker_is_an_admins(ui: TestClient, demo: Demo) -> None:
    with psycopg.connect(demo.dsn, autocommit=True) as conn:
        conn.execute("SELECT harvest.register_worker('d-target', ARRAY['default'], 'host', 1, 60, '{}')")
    assert 'id="drain-form"' not in ui.get("/workers/d-target", headers=OPERATE).text
    assert 'id="drain-form"' in ui.get("/workers/d-target", headers=ADMIN).text
    assert ui.post("/workers/d-target/drain", headers=OPERATE).status_code == 403
    drained = ui.post("/workers/d-target/drain", headers=ADMIN, follow_redirects=False)
    assert drained.status_code == 303 and "shard+0%3A+accepted" in drained.headers["location"]
    page = ui.get("/workers/d-target", headers=ADMIN).text
    assert "draining" in page.lower() and 'id="drain-form"' not in page
    assert _audit(demo.dsn, "worker.drain") == [("ui", "d-target")]
    assert ui.post("/workers/nobody/drain", headers=ADMIN).status_code == 404


def test_the_status_chips_count_up_to_a_cap(
    ui: TestClient, demo: Demo, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Each view of the workflows page counted every run of every status (0.8 s over 2M runs):
    the chips count up to STATUS_COUNT_CAP a status and say "N+" past it (migration 0114)."""
    import harvest.web.ui.app as ui_module

    monkeypatch.setattr(ui_module, "STATUS_COUNT_CAP", 2)
    page = ui.get("/workflows", headers=READ).text
    chip = r'data-status="COMPLETED"><span[^>]*>[^<]*</span> <span class="count" title="at least 2'
    assert re.search(chip, page)
    assert re.search(r'data-status="COMPLETED">.*?<span class="count"[^>]*>2\+</span>', page, re.S)
    assert re.search(r"all \d+\+</span>", page)
    monkeypatch.setattr(ui_module, "STATUS_COUNT_CAP", 10_000)
    page = ui.get("/workflows", headers=READ).text
    assert re.search(r'data-status="COMPLETED">.*?<span class="count">3</span>', page, re.S)
    assert not re.search(r"all \d+\+</span>", page)


def test_a_long_history_shows_its_tail_and_a_link_to_older_events(
    ui: TestClient, demo: Demo, monkeypatch: pytest.MonkeyPatch
) -> None:
    import harvest.web.ui.app as ui_module

    monkeypatch.setattr(ui_module, "HISTORY_SHOWN", 3)
    run = demo.ids["approval"]
    page = ui.get(f"/workflows/{run}", headers=READ).text
    shown = re.findall(r'<li class="[a-z]+" id="event-(\d+)">', page)
    total = int(re.search(r"History <span class=\"muted\">\((\d+) events\)", page).group(1))
    assert total > 3 and shown == [str(n) for n in range(total - 2, total + 1)]
    older = re.search(r'id="older-history" href="([^"]+)"', page)
    assert older is not None and f"history_before={total - 2}" in older.group(1)
    # The demo's run may go on between the two pages (CI saw 7 events, then 9): the older page
    # is the three events before the first one shown, whatever came after.
    before = ui.get(f"/workflows/{run}" + html.unescape(older.group(1)), headers=READ).text
    assert re.findall(r'id="event-(\d+)"', before) == [str(n) for n in range(total - 5, total - 2) if n >= 1]


def test_dead_letters_page_with_the_cursor_and_filter(ui: TestClient, demo: Demo) -> None:
    for n in (43, 44):
        demo.client.start_workflow("billing", n, workflow_id=f"invoice-{n}")
    with demo.client.sql() as sql:
        wait_for(lambda: len(sql.list_dead_letters(10)) == 3, "three dead letters")
    seen = _every_page(ui, "/dead-letters?activity_name=charge&limit=1", r"card declined for (\d+)")
    assert sorted(seen) == ["42", "43", "44"]
    assert "card declined" not in ui.get("/dead-letters?activity_name=hello", headers=READ).text
    groups = (
        ui.get("/dead-letters", headers=READ).text.split('id="dead-letter-groups"')[1].split("</table>")[0]
    )
    assert re.search(r"CardDeclined</td><td class=\"num\">3</td>", groups)


def test_payloads_in_full_need_operate(ui: TestClient, demo: Demo) -> None:
    run = demo.ids["approval"]

    def shown_input(headers: dict[str, str], query: str = "") -> str:
        page = ui.get(f"/workflows/{run}{query}", headers=headers).text
        return page.split('id="input"')[1].split("</div>")[0]

    assert "order-7" not in shown_input(READ, "?payloads=full")  # asking is not enough
    assert 'id="show-payloads"' not in ui.get(f"/workflows/{run}", headers=READ).text
    assert 'id="show-payloads"' in ui.get(f"/workflows/{run}", headers=OPERATE).text
    assert "redacted (" in shown_input(OPERATE)
    assert "order-7" in shown_input(OPERATE, "?payloads=full")


def test_built_before_its_database_is_known_and_says_so_on_the_first_page(tmp_path) -> None:
    from harvest.config import load_config

    empty = tmp_path / "harvest.toml"
    empty.write_text("")
    app = dashboard_app(config=load_config(empty, env={}), profile="dev")  # no database URL yet
    with TestClient(app) as client:
        page = client.get("/workers")
        assert page.status_code == 500 and "HARVEST_DATABASE_URL" in page.text


# -- schedules, DAGs, PAUSED runs ------------------------------------------------------------------
def test_schedules_pages_both_kinds_with_fire_times_firings_and_misses(ui: TestClient, demo: Demo) -> None:
    listed = ui.get("/schedules", headers=READ)
    assert listed.status_code == 200
    table = listed.text.split('id="schedules"')[1].split("</table>")[0]
    assert re.findall(r'<tr data-name="([^"]+)"', table) == ["greet-yearly", "nightly_etl"]
    assert "cron 0 3 1 1 * Europe/Paris" in table and "kind-dag" in table
    dag_only = ui.get("/schedules?kind=dag", headers=READ).text
    assert re.findall(r'<tr data-name="([^"]+)"', dag_only) == ["nightly_etl"]
    for query in ("kind=cron", "paused=maybe"):
        assert ui.get(f"/schedules?{query}", headers=READ).status_code == 400, query
    assert ui.get("/schedules/0/greet-yearly?limit=0", headers=READ).status_code == 400
    assert ui.get("/schedules/0/nobody", headers=READ).status_code == 404
    assert ui.get("/schedules/7/greet-yearly", headers=READ).status_code == 404

    # a missed range, as a scheduler that was down past the slot records it (catchup off)
    with psycopg.connect(demo.dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO harvest.schedule_misses (schedule_id, first_slot_at, last_slot_at, slots, reason,"
            " recorded_at) SELECT id, '2025-01-01T02:00Z', '2025-01-01T02:00Z', 1, 'catchup_off', now()"
            " FROM harvest.schedules WHERE name = 'greet-yearly'"
        )
        conn.execute(
            "UPDATE harvest.schedules SET missed_slots = missed_slots + 1 WHERE name = 'greet-yearly'"
        )
    page = ui.get("/schedules/0/greet-yearly", headers=READ).text
    upcoming = re.findall(r"<li>(\d{4})-01-01 02:00:00Z", page.split('id="upcoming"')[1])
    assert len(upcoming) == 5 and upcoming == sorted(upcoming)  # 03:00 Paris is 02:00 UTC in winter
    misses = page.split('id="misses"')[1].split("</table>")[0]
    assert "catchup_off" in misses and "2025-01-01 02:00:00Z" in misses
    assert "No firing yet." in page
    assert 'id="trigger-form"' not in page and 'id="pause-form"' not in page  # a read token

    # trigger, then the firing is listed with its run and the run's outcome
    assert ui.post("/schedules/0/greet-yearly/trigger", headers=READ).status_code == 403
    fired = ui.post("/schedules/0/greet-yearly/trigger", headers=OPERATE, data={}, follow_redirects=False)
    assert fired.status_code == 303 and "started" in urllib.parse.unquote_plus(fired.headers["location"])
    assert (
        ui.post("/schedules/0/greet-yearly/trigger", headers=OPERATE, data={"overlap": "x"}).status_code
        == 400
    )
    with demo.client.sql() as sql:
        firing = wait_for(
            lambda: [
                f for f in sql.get_schedule("greet-yearly")["firings"] if f["run_status"] == "COMPLETED"
            ],
            "the triggered run to complete",
        )[0]
    page = ui.get("/schedules/0/greet-yearly", headers=OPERATE).text
    row = page.split('id="firings"')[1].split("</table>")[0]
    assert f'href="/workflows/{firing["execution_id"]}"' in row and "COMPLETED" in row and "trigger" in row

    # pause with a note, then resume: operate, each audited with the source ui
    paused = ui.post("/schedules/0/greet-yearly/pause", headers=OPERATE, data={"note": "freeze"})
    assert paused.status_code == 200 and 'id="paused-banner"' in paused.text and "freeze" in paused.text
    assert "None while paused." in paused.text and 'id="resume-form"' in paused.text
    assert 'data-paused="true"' in ui.get("/schedules?paused=true", headers=READ).text
    assert ui.post("/schedules/0/greet-yearly/resume", headers=OPERATE).status_code == 200
    assert ui.post("/schedules/0/greet-yearly/rename", headers=OPERATE).status_code == 404
    assert _audit(demo.dsn, "schedule.pause") == [("ui", "greet-yearly")]
    assert _audit(demo.dsn, "schedule.resume") == [("ui", "greet-yearly")]
    assert _audit(demo.dsn, "schedule.trigger") == [("ui", "greet-yearly")]


def test_dags_pages_and_the_run_graph(ui: TestClient, demo: Demo) -> None:
    listed = ui.get("/dags", headers=READ)
    assert listed.status_code == 200
    row = listed.text.split('data-dag="nightly_etl"')[1].split("</tr>")[0]
    assert ">4<" in row and ">2<" in row and "FAILED" in row  # tasks, max runs, last run
    assert "cron 30 2 1 1 * UTC" in row  # as the schedules page spells it (describe_row)
    assert ui.get("/dags?paused=sometimes", headers=READ).status_code == 400
    assert "nightly_etl" not in ui.get("/dags?paused=true", headers=READ).text.split('id="dags"')[1]
    for page in ("/dags", "/schedules"):  # one paused filter (_macros.html), keeping its choice
        shown = ui.get(f"{page}?paused=false", headers=READ).text.split('<select name="paused">')[1]
        assert re.findall(r'<option value="([^"]*)" selected>', shown.split("</select>")[0]) == ["false"]

    dag = ui.get("/dags/nightly_etl", headers=READ)
    assert dag.status_code == 200 and f"/dags/nightly_etl/runs/{demo.ids['dag']}" in dag.text
    assert 'id="trigger-form"' not in dag.text
    for query in ("status=sleeping", "limit=0", "limit=201"):
        assert ui.get(f"/dags/nightly_etl?{query}", headers=READ).status_code == 400, query
    assert "No runs of that status." in ui.get("/dags/nightly_etl?status=completed", headers=READ).text
    assert ui.get("/dags/nobody", headers=READ).status_code == 404

    run = ui.get(f"/dags/nightly_etl/runs/{demo.ids['dag']}", headers=READ)
    assert run.status_code == 200
    nodes = dict(re.findall(r'<g class="node [^"]+" data-task="([^"]+)" data-state="([^"]+)"', run.text))
    assert nodes == {
        "extract": "success",
        "transform": "failed",
        "load": "upstream_failed",
        "page": "success",
    }
    levels = dict(re.findall(r'data-task="([^"]+)" data-state="[^"]+" data-level="(\d)"', run.text))
    assert levels == {"extract": "0", "transform": "1", "load": "2", "page": "3"}
    edges = re.findall(r'data-from="([^"]+)" data-to="([^"]+)"', run.text)
    assert sorted(edges) == [
        ("extract", "transform"),
        ("load", "page"),
        ("transform", "load"),
        ("transform", "page"),
    ]
    assert "CardDeclined" in run.text.split('id="dag-tasks"')[1]
    assert 'id="retry-form"' not in run.text
    assert ui.get(f"/dags/greet/runs/{demo.ids['dag']}", headers=READ).status_code == 404
    assert ui.get(f"/dags/nightly_etl/runs/{demo.ids['greet-0']}", headers=READ).status_code == 404


def test_a_dags_runs_page_on_to_the_last(ui: TestClient, demo: Demo) -> None:
    """The DAG page showed the newest `limit` runs and no way past them, though the API pages
    them by cursor: it links to the next page as the workflow and dead-letter lists do, and
    walking the pages shows every run once."""
    with demo.client.sql() as sql:
        sql.trigger_dag("nightly_etl", {"date": "2026-05-02"})
    row = r'<tr data-status="[A-Z_]+">\s*<td class="mono"><a href="/dags/nightly_etl/runs/([0-9a-f-]{36})"'
    every = ui.get("/dags/nightly_etl?limit=200", headers=READ).text
    runs = re.findall(row, every)
    assert len(runs) >= 2 and 'id="next"' not in every
    assert _every_page(ui, "/dags/nightly_etl?limit=1", row) == runs
    assert ui.get("/dags/nightly_etl?cursor=garbage", headers=READ).status_code == 400


def test_a_dag_runs_conf_and_a_schedules_input_are_payloads_a_read_principal_does_not_see(
    ui: TestClient, demo: Demo
) -> None:
    """A DAG run's conf is its run's input, and a schedule's input every started run's: the run's
    page shows a read principal their size only, while these two pages showed them whole."""
    triggered = ui.post(
        "/dags/nightly_etl/trigger",
        headers=OPERATE,
        data={"conf": '{"token": "hunter2"}'},
        follow_redirects=False,
    )
    run_page = triggered.headers["location"].split("?")[0]
    with psycopg.connect(demo.dsn, autocommit=True) as conn:
        conn.execute(
            "SELECT harvest.create_schedule('secret-input', 'greet', p_cron => '0 3 * * *', "
            "p_input => '[\"hunter2\"]')"
        )
    for page in (run_page, "/schedules/0/secret-input"):
        read = ui.get(page, headers=READ)
        assert read.status_code == 200 and "hunter2" not in read.text and "redacted" in read.text, page
        assert "hunter2" in ui.get(page, headers=OPERATE).text, page


def test_dag_actions_need_operate(ui: TestClient, demo: Demo) -> None:
    run = demo.ids["dag"]
    assert ui.post("/dags/nightly_etl/trigger", headers=READ, data={"conf": "{}"}).status_code == 403
    assert ui.post("/dags/nightly_etl/pause", headers=READ).status_code == 403
    assert ui.post(f"/dags/nightly_etl/runs/{run}/retry", headers=READ).status_code == 403
    page = ui.get(f"/dags/nightly_etl/runs/{run}", headers=OPERATE).text
    assert 'id="retry-form"' in page
    assert ui.post("/dags/nightly_etl/trigger", headers=OPERATE, data={"conf": "[1]"}).status_code == 400
    assert ui.post("/dags/nightly_etl/trigger", headers=OPERATE, data={"conf": "{oops"}).status_code == 400

    triggered = ui.post(
        "/dags/nightly_etl/trigger",
        headers=OPERATE,
        data={"conf": '{"date": "2026-05-02"}', "workflow_id": "etl-0502"},
        follow_redirects=False,
    )
    assert triggered.status_code == 303
    new_run = re.search(r"/dags/nightly_etl/runs/([0-9a-f-]{36})", triggered.headers["location"]).group(1)
    with demo.client.sql() as sql:
        assert sql.get_dag_run(new_run)["conf"] == {"date": "2026-05-02"}
    assert _audit(demo.dsn, "dag.pause") == []

    paused = ui.post("/dags/nightly_etl/pause", headers=OPERATE)
    assert (
        paused.status_code == 200
        and 'id="paused-banner"' in paused.text
        and 'id="unpause-form"' in paused.text
    )
    refused = ui.post("/dags/nightly_etl/trigger", headers=OPERATE, data={"conf": "{}"})
    assert refused.status_code == 409 and "paused" in refused.text  # DagPaused, nothing started
    assert ui.post("/dags/nightly_etl/unpause", headers=OPERATE).status_code == 200
    assert ui.post("/dags/nobody/pause", headers=OPERATE).status_code == 404

    retried = ui.post(f"/dags/nightly_etl/runs/{run}/retry", headers=OPERATE, follow_redirects=False)
    assert retried.status_code == 303
    again = re.search(r"/runs/([0-9a-f-]{36})", retried.headers["location"]).group(1)
    assert again != run
    with demo.client.sql() as sql:
        tasks = {t["task"]: t for t in sql.get_dag_run(again)["tasks"]}
    assert tasks["extract"]["reused_from"] == run  # carried over, not run again
    assert _audit(demo.dsn, "dag.pause") == [("ui", "nightly_etl")]
    assert _audit(demo.dsn, "dag.unpause") == [("ui", "nightly_etl")]
    assert _audit(demo.dsn, "dag.retry") == [("ui", "nightly_etl")]


def test_pause_and_resume_a_run(ui: TestClient, demo: Demo) -> None:
    run = demo.ids["approval"]
    assert 'id="pause-form"' not in ui.get(f"/workflows/{run}", headers=READ).text
    assert 'id="pause-form"' in ui.get(f"/workflows/{run}", headers=OPERATE).text
    assert ui.post(f"/workflows/{run}/pause", headers=READ, data={"reason": "x"}).status_code == 403
    paused = ui.post(f"/workflows/{run}/pause", headers=OPERATE, data={"reason": "provider down"})
    assert paused.status_code == 200 and "paused" in paused.text
    assert 'id="paused-banner"' in paused.text and "provider down" in paused.text
    assert re.search(r'id="paused">since .*by operate-user: provider down', paused.text)
    assert 'id="resume-form"' in paused.text and 'id="pause-form"' not in paused.text
    assert 'id="signal-form"' in paused.text  # a paused run keeps its signals

    listed = ui.get("/workflows?status=PAUSED", headers=READ).text
    assert re.findall(r'href="/workflows/([0-9a-f-]{36})"', listed) == [run]
    assert re.search(r'data-status="PAUSED">.*?<span class="count">1</span>', listed, re.S)
    assert '<option value="PAUSED" selected>' in listed
    assert ui.get("/workflows?status=paused", headers=READ).status_code == 200

    assert ui.post(f"/workflows/{run}/resume", headers=READ).status_code == 403
    resumed = ui.post(f"/workflows/{run}/resume", headers=OPERATE, data={"reason": "back"})
    assert resumed.status_code == 200 and 'id="paused-banner"' not in resumed.text
    assert 'id="pause-form"' in resumed.text
    assert _audit(demo.dsn, "workflow.pause") == [("ui", run)]
    assert _audit(demo.dsn, "workflow.resume") == [("ui", run)]
    assert ui.post(f"/workflows/{demo.ids['greet-0']}/pause", headers=OPERATE).status_code == 409


def test_navigation_links_the_new_pages(ui: TestClient) -> None:
    nav = ui.get("/workers", headers=READ).text.split('<nav aria-label="pages">')[1].split("</nav>")[0]
    assert re.findall(r'href="/([a-z-]+)"', nav) == [
        "workflows",
        "schedules",
        "dags",
        "workers",
        "dead-letters",
        "start-gates",
        "concurrency",
        "shards",
    ]


# -- what a request must be before the dashboard acts on it (docs/dashboard.md, "Sign in") --------
def _started(db: str, workflow_id: str, queue: str = "default") -> str:
    """A run of workflow ``wf`` no worker polls for."""
    with psycopg.connect(db, autocommit=True) as conn:
        started = "SELECT execution_id FROM harvest.start_workflow('wf', p_workflow_id => %s, p_queue => %s)"
        return str(conn.execute(started, (workflow_id, queue)).fetchone()[0])


def _drive(app, path: str, offered: int, *, declared: bool) -> tuple[int, int]:
    """POST ``offered`` bytes to ``path`` with no token, in 64 KiB chunks (with or without a
    Content-Length): the answer's status and how many bytes the app pulled from the client."""
    consumed = sent = 0
    status = 0

    async def receive():
        nonlocal consumed, sent
        if sent >= offered:
            return {"type": "http.request", "body": b"", "more_body": False}
        piece = min(64 * 1024, offered - sent)
        sent += piece
        consumed += piece
        return {"type": "http.request", "body": b"a" * piece, "more_body": sent < offered}

    async def send(message):
        nonlocal status
        if message["type"] == "http.response.start":
            status = message["status"]

    headers = [(b"host", b"testserver"), (b"content-type", b"application/x-www-form-urlencoded")]
    if declared:
        headers.append((b"content-length", str(offered).encode()))
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "root_path": "",
        "query_string": b"",
        "headers": headers,
        "client": ("127.0.0.1", 1),
        "server": ("testserver", 80),
        "state": {},
    }
    asyncio.run(app(scope, receive, send))
    return status, consumed


def test_a_form_is_refused_before_more_than_its_limit_is_read(db: str) -> None:
    """An anonymous client must not make the server buffer an unbounded body: a form that says
    it is over MAX_FORM_BYTES is a 413 before a byte is read; an action is authorized before its
    body is read (401: nothing read); /login, which needs no token, reads at most the limit."""
    app = dashboard_app(dsn=db, authorizer=TokenScopes())
    offered, limit = 16 * MAX_FORM_BYTES, MAX_FORM_BYTES + 64 * 1024
    action = f"/workflows/{uuid.uuid4()}/terminate"
    assert _drive(app, action, offered, declared=True) == (413, 0)
    assert _drive(app, "/login", offered, declared=True) == (413, 0)
    assert _drive(app, action, offered, declared=False) == (401, 0)
    status, consumed = _drive(app, "/login", offered, declared=False)
    assert status == 413 and consumed <= limit, (status, consumed)


def test_a_post_another_site_s_page_sends_is_refused(db: str) -> None:
    """A POST whose Origin is another site's, or null (a sandboxed frame, a redirect from
    elsewhere), or whose Sec-Fetch-Site is not same-origin, is refused (403); under the dev
    profile no cookie is needed, so this is all that keeps any page the developer opens from
    acting. Sign out too: another site must not sign the user out."""
    execution_id = _started(db, "csrf")
    cancel = f"/workflows/{execution_id}/cancel"
    with TestClient(dashboard_app(dsn=db, profile="dev"), base_url="http://127.0.0.1:8080") as client:
        for sent_from in (
            {"Origin": "https://evil.example"},
            {"Origin": "null"},
            {"Sec-Fetch-Site": "cross-site"},
            {"Sec-Fetch-Site": "same-site", "Origin": "http://127.0.0.1:8080"},  # another port
        ):
            refused = client.post(cancel, data={"reason": "evil"}, headers=sent_from, follow_redirects=False)
            assert refused.status_code == 403, sent_from
            signed_out = client.post("/logout", headers=sent_from, follow_redirects=False)
            assert signed_out.status_code == 403 and "set-cookie" not in signed_out.headers, sent_from
        with psycopg.connect(db, autocommit=True) as conn:
            row = conn.execute(
                "SELECT cancel_requested FROM harvest.executions WHERE id = %s", (execution_id,)
            )
            assert row.fetchone()[0] is False
        ours = {"Origin": "http://127.0.0.1:8080", "Sec-Fetch-Site": "same-origin"}
        done = client.post(cancel, data={"reason": "ours"}, headers=ours, follow_redirects=False)
        assert done.status_code == 303
        assert client.post("/logout", headers=ours, follow_redirects=False).status_code == 303


def test_a_read_principal_never_sees_a_failure_s_details_on_the_run_card(db: str) -> None:
    """A failure's details are a payload: redacted to their size for a read principal on the
    run card, as in the timeline; its error type and message stay."""
    secret = "card-4111111111111111-cvv-123"
    execution_id = _started(db, "fails-with-details", "wq_details")
    with psycopg.connect(db, autocommit=True) as conn:
        task = conn.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('decider', %s, 1)", (["wq_details"],)
        ).fetchone()
        failure = {
            "error_type": "Declined",
            "message": "declined",
            "non_retryable": True,
            "details": {"pan": secret},
        }
        conn.execute(
            "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s)",
            (task[0], task[1], Jsonb([{"type": "fail_workflow", "failure": failure}])),
        )
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        page = client.get(f"/workflows/{execution_id}", headers=READ)
        assert page.status_code == 200 and "WorkflowFailed" in page.text and "Declined" in page.text
        assert secret not in page.text
        full = client.get(f"/workflows/{execution_id}?payloads=full", headers=OPERATE)
        assert secret in full.text  # shown in full to whom may see payloads


def test_a_value_the_database_calls_invalid_is_a_400_page(db: str) -> None:
    """A NUL in a filter or a name never reaches the database (the driver refuses it): a 400
    page, as the management API answers, not a 500."""
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        answers = {
            url: client.get(url, headers=READ).status_code
            for url in (
                "/workflows?workflow_name=a%00b",
                "/dead-letters?activity_name=a%00b",
                "/concurrency?key=a%00b",
                "/workers/a%00b",
                "/schedules/0/a%00b",
            )
        }
    assert set(answers.values()) == {400}, answers


def test_a_dead_letter_id_past_bigint_is_a_404(db: str) -> None:
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        for verb, token in (("replay", OPERATE), ("discard", ADMIN)):
            page = client.post(f"/dead-letters/0/99999999999999999999999/{verb}", headers=token)
            assert page.status_code == 404, (verb, page.status_code)


def test_a_payload_nested_past_the_parser_s_depth_is_a_400_page(db: str) -> None:
    execution_id = _started(db, "deep-signal")
    deep = "[" * 100_000 + "]" * 100_000  # 200 KB, under MAX_FORM_BYTES
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes()), raise_server_exceptions=False) as client:
        signal = client.post(
            f"/workflows/{execution_id}/signal", data={"name": "s", "payload": deep}, headers=OPERATE
        )
        assert signal.status_code == 400 and "not valid JSON" in signal.text
        trigger = client.post("/dags/nightly/trigger", data={"conf": deep}, headers=OPERATE)
        assert trigger.status_code == 400 and "not valid JSON" in trigger.text


class _Recording(TokenScopes):
    def __init__(self) -> None:
        self.asked: list[str] = []

    async def authorize(self, request, needed):
        self.asked.append(needed)
        return await super().authorize(request, needed)


def test_bulk_discard_in_any_spelling_asks_the_authorizer_for_admin(db: str) -> None:
    """Bulk discard is an admin's: the action is read once (either case), and its scope chosen
    from what was read."""
    recording = _Recording()
    with TestClient(dashboard_app(dsn=db, authorizer=recording)) as client:
        form = {"action": " DISCARD", "workflow_name": "wf"}
        assert client.post("/dead-letters/bulk", data=form, headers=OPERATE).status_code == 403
        assert recording.asked == ["operate", "admin"]
        done = client.post("/dead-letters/bulk", data={**form, "dry_run": "on"}, headers=ADMIN)
        assert done.status_code == 200 and 'id="bulk-results"' in done.text


def test_the_token_database_down_is_a_503_page() -> None:
    """The default authorizer (API tokens) cannot reach its database: a 503 page, as the
    management API's 503 database_unavailable, not a bare 500."""
    with socket.socket() as probe:  # a port nothing listens on
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    dsn = f"postgresql://harvest@127.0.0.1:{port}/harvest?connect_timeout=1"
    app = dashboard_app(dsn=dsn, profile="production", timeout=1.0)
    with TestClient(app, raise_server_exceptions=False) as client:
        page = client.get("/workers", headers={"Authorization": "Bearer hvt_x"})
    assert page.status_code == 503 and "could not be reached" in page.text


# -- a run's data as it is: values that look like the page's own markers, unicode, offload --------
def _signalled(db: str, workflow_id: str, payload: object, **start: object) -> str:
    """A run of ``wf`` (no worker) that received signal ``s`` with ``payload``."""
    with psycopg.connect(db, autocommit=True) as conn:
        (run,) = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow('wf', %s, %s, p_search_attributes => %s)",
            (Jsonb(start.get("input", [])), workflow_id, Jsonb(start.get("attrs", {}))),
        ).fetchone()
        conn.execute("SELECT harvest.signal_workflow(%s, 's', %s)", (run, Jsonb(payload)))
    return str(run)


def test_a_payload_shaped_like_a_redaction_is_shown_as_it_is(db: str) -> None:
    """A signal's payload that happens to hold a "redacted" key (a redaction workflow's own
    data) is the payload, not the page's size marker: shown in full it was read as a marker
    without a size, and the page was a 500."""
    run = _signalled(db, "looks-redacted", {"redacted": ["ssn"], "text": "kept"})
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes()), raise_server_exceptions=False) as client:
        full = client.get(f"/workflows/{run}?payloads=full", headers=OPERATE)
        assert full.status_code == 200
        signals = full.text.split('id="signals"')[1].split("</ul>")[0]
        assert "ssn" in signals and "kept" in signals and "redacted (" not in signals
        redacted = client.get(f"/workflows/{run}", headers=READ)
        signals = redacted.text.split('id="signals"')[1].split("</ul>")[0]
        assert "redacted (" in signals and "kept" not in signals


def test_a_signals_time_and_its_redacted_payload_are_two_words(db: str) -> None:
    """A signal's line reads "event 4, just now redacted (8 bytes)", not "...just
    nowredacted" (the size marker was glued to the time before it)."""
    run = _signalled(db, "glued-1", {"a": 1})
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        page = client.get(f"/workflows/{run}", headers=READ).text
        signals = page.split('id="signals"')[1].split("</ul>")[0]
        text = " ".join(re.sub(r"<[^>]+>", "", signals).split())
        assert re.search(r"event \d+, .+ redacted \(8 bytes\)", text), text


def test_unicode_in_payloads_and_attributes_is_shown_as_written(db: str) -> None:
    """Names, payloads and search attributes in any script are shown as written, not as JSON's
    \\u escapes (a read principal sees the attributes; an operator the payloads)."""
    run = _signalled(db, "unicode-1", {"to": "Zoë 🎉"}, input=["Ünïcödé"], attrs={"city": "Zürich"})
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        read = client.get(f"/workflows/{run}", headers=READ).text
        assert "Zürich" in read and "\\u00fc" not in read
        full = client.get(f"/workflows/{run}?payloads=full", headers=OPERATE).text
        assert "Zoë 🎉" in full and "Ünïcödé" in full
        assert "\\u00" not in full and "\\ud83c" not in full


def test_a_pages_offloaded_payloads_are_read_back_a_bounded_batch_at_a_time(db: str, monkeypatch) -> None:
    """In full, the run page reads its offloaded payloads back in batches bounded as a full
    export's are (RESOLVE_BYTES): it was one get_payloads call for the whole page, however
    large its payloads."""
    from harvest.client import history_export

    values = ["a" * 3000, "b" * 3000, "c" * 3000]
    with psycopg.connect(db, autocommit=True) as conn:
        stored = conn.execute(
            "SELECT harvest.put_payloads(NULL, ARRAY[%s::jsonb, %s::jsonb, %s::jsonb])",
            [Jsonb(v) for v in values],
        )
        ref = [{"_harvest_ref": str(i), "bytes": 3002} for i in stored.fetchone()[0]]
        run = _started(db, "bounded-read-back")
        for r in ref:
            conn.execute("SELECT harvest.signal_workflow(%s, 'big', %s)", (run, Jsonb(r)))
    monkeypatch.setattr(history_export, "RESOLVE_BYTES", 4000)  # two payloads pass it
    calls = rows_read(monkeypatch, "get_payloads")
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        full = client.get(f"/workflows/{run}?payloads=full", headers=OPERATE)
        assert full.status_code == 200, full.text
    assert len(calls) > 1 and max(calls) <= 2, calls  # a batch ends once its references pass the bound
    signals = full.text.split('id="signals"')[1].split("</ul>")[0]
    assert all(v in signals for v in values), signals


def test_names_with_a_slash_open_their_pages_and_actions(db: str) -> None:
    """A schedule, a DAG or a worker whose name holds a "/" (``billing/monthly``): its link on
    the list opens its page and its actions reach it (the path was cut at the "/": a 404 or a
    405 for the page, the actions unreachable)."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.create_schedule('billing/monthly', 'wf', p_interval_secs => 3600)")
        dag = [{"dag_name": "etl/nightly", "queue": "default", "tasks": [], "max_active_runs": 1}]
        conn.execute("SELECT harvest.register_dags(%s::jsonb)", (Jsonb(dag),))
        conn.execute("SELECT harvest.register_worker('pod/a-1', ARRAY['default'], 'h', 1, 10, '{}')")

    def followed(client: TestClient, listing: str, pattern: str) -> str:
        (href,) = re.findall(pattern, client.get(listing, headers=ADMIN).text)
        page = client.get(href.replace("&amp;", "&"), headers=ADMIN)
        assert page.status_code == 200, (href, page.status_code)
        return page.text

    def acted(client: TestClient, page: str, form: str) -> str:
        action = re.search(rf'id="{form}" method="post" action="([^"]+)"', page).group(1)
        done = client.post(action, headers=ADMIN, data={})
        assert done.status_code == 200, (action, done.status_code)
        return done.text

    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        schedule = followed(client, "/schedules", r'href="(/schedules/0/billing[^"]+)"')
        assert "Schedule billing/monthly" in schedule
        assert 'id="paused-banner"' in acted(client, schedule, "pause-form")
        dag = followed(client, "/dags", r'href="(/dags/etl[^"]+)"')
        assert "DAG etl/nightly" in dag
        assert 'id="unpause-form"' in acted(client, dag, "pause-form")
        worker = followed(client, "/workers", r'href="(/workers/pod[^"]+)"')
        assert "pod/a-1" in worker
        assert "shard 0: " in acted(client, worker, "drain-form")
        for listing in ("/dags", "/workers"):  # an empty name is no name: the list's address
            trailing = client.get(f"{listing}/", headers=ADMIN, follow_redirects=False)
            assert trailing.status_code == 307 and trailing.headers["location"].endswith(listing)
    with psycopg.connect(db, autocommit=True) as conn:
        one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
        assert one("SELECT paused FROM harvest.schedules WHERE name = 'billing/monthly'")
        assert one("SELECT paused FROM harvest.dags WHERE dag_name = 'etl/nightly'")
        assert one("SELECT status FROM harvest.workers WHERE id = 'pod/a-1'") != "active"


def test_an_offloaded_payload_shows_its_own_size_and_what_it_is(db: str) -> None:
    """A payload kept in the offload store (docs/payloads.md): the history holds a reference
    with the payload's size. Redacted, the page gave the reference's size (some 60 bytes for
    200 KB); in full, the reference's JSON. It says the payload's size, and in full what it is
    (offloaded, as `harvest workflow history --full`), an encrypted one its key."""
    big = "x" * 200_000
    with psycopg.connect(db, autocommit=True) as conn:
        run = _started(db, "offloaded")
        stored = conn.execute("SELECT harvest.put_payloads(%s, ARRAY[%s::jsonb])", (run, Jsonb(big)))
        (ids,) = stored.fetchone()
        ref = {"_harvest_ref": str(ids[0]), "bytes": len(json.dumps(big))}
        conn.execute("SELECT harvest.signal_workflow(%s, 'big', %s)", (run, Jsonb(ref)))
        sealed = {"_harvest_codec": ["zlib", "aesgcm:k7"], "data": "c2VjcmV0"}
        conn.execute("SELECT harvest.signal_workflow(%s, 'sealed', %s)", (run, Jsonb(sealed)))
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        redacted = client.get(f"/workflows/{run}", headers=READ).text
        signals = redacted.split('id="signals"')[1].split("</ul>")[0]
        assert f"redacted ({len(json.dumps(big))} bytes)" in signals
        full = client.get(f"/workflows/{run}?payloads=full", headers=OPERATE).text
        signals = full.split('id="signals"')[1].split("</ul>")[0]
        assert big in signals and "_harvest_ref" not in signals  # read back from the store
        assert "encrypted (key k7)" in signals and "c2VjcmV0" not in signals


def test_a_runs_offloaded_payloads_are_read_back_for_operate_in_one_call(db: str, monkeypatch) -> None:
    """The page showed an offloaded input or signal payload as ``<offloaded (n bytes, ref ...)>``
    even to operate asking for payloads in full, while the API answered its value. In full it is
    the value, read back on the page's connection in the principal's role, one get_payloads call
    for the whole page; one the store no longer holds (pruned) stays its reference; to read,
    sizes only, and nothing read back."""
    big_in, big_signal, pruned = ("i" * 3000 + "-input", "s" * 3000 + "-signal", "p" * 3000 + "-pruned")
    with psycopg.connect(db, autocommit=True) as conn:
        stored = conn.execute(
            "SELECT harvest.put_payloads(NULL, ARRAY[%s::jsonb, %s::jsonb, %s::jsonb])",
            (Jsonb(big_in), Jsonb(big_signal), Jsonb(pruned)),
        )
        ids = [str(i) for i in stored.fetchone()[0]]
        ref = [
            {"_harvest_ref": i, "bytes": len(json.dumps(v))}
            for i, v in zip(ids, (big_in, big_signal, pruned), strict=True)
        ]
        started = "SELECT execution_id FROM harvest.start_workflow('wf', %s, 'offloaded-read-back')"
        run = str(conn.execute(started, (Jsonb([ref[0]]),)).fetchone()[0])
        conn.execute("SELECT harvest.signal_workflow(%s, 'big', %s)", (run, Jsonb(ref[1])))
        conn.execute("SELECT harvest.signal_workflow(%s, 'gone', %s)", (run, Jsonb(ref[2])))
        conn.execute("DELETE FROM harvest.payloads WHERE id = %s", (ids[2],))
    calls = rows_read(monkeypatch, "get_payloads")
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        full = client.get(f"/workflows/{run}?payloads=full", headers=OPERATE)
        assert full.status_code == 200, full.text
        assert calls == [2], calls  # one call: the input and the signal found, the pruned one not
        shown_input = full.text.split('id="input"')[1].split("</div>")[0]
        assert big_in in shown_input and "offloaded" not in shown_input, shown_input
        signals = full.text.split('id="signals"')[1].split("</ul>")[0]
        assert big_signal in signals, signals
        assert (
            f"offloaded ({len(json.dumps(pruned))} bytes, ref {ids[2]})" in signals and pruned not in signals
        )
        calls.clear()
        for asked in ("", "?payloads=full"):  # read: sizes, whatever it asks
            page = client.get(f"/workflows/{run}{asked}", headers=READ).text
            assert big_in not in page and big_signal not in page
            assert (
                f"redacted ({len(json.dumps([big_in]))} bytes)"
                in page.split('id="input"')[1].split("</div>")[0]
            )
            assert f"redacted ({len(json.dumps(big_signal))} bytes)" in page.split('id="signals"')[1]
        assert calls == [], calls


def test_an_actions_message_is_said_once_not_carried_on_by_the_pages_links(db: str) -> None:
    """An action's message (``?msg=``, after its redirect) is the page it lands on: the links on
    that page (show payloads, all the history, a count, the next page) do not carry it on, or
    the next page read said "cancel requested" again for nothing done."""
    runs = [_started(db, f"msg-{n}") for n in range(2)]
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        done = client.post(f"/workflows/{runs[0]}/cancel", headers=OPERATE, data={"reason": "x"})
        assert done.status_code == 200 and "cancel requested" in done.text
        listed = client.get("/workflows?limit=1&msg=cancel+requested", headers=OPERATE).text
        for page in (done.text, listed):
            hrefs = re.findall(r'href="([^"]*\?[^"]*)"', page)
            assert hrefs and not [h for h in hrefs if "msg=" in h], hrefs


def test_a_message_in_a_link_from_elsewhere_is_not_shown(db: str) -> None:
    """Every page showed ``?msg=`` as the dashboard's own banner, so any site could link a user
    to the dashboard saying "Your session expired, sign in at evil.example". Only a message
    the dashboard itself set on an action's redirect (signed by this dashboard) is shown; a
    forged, altered or unsigned one is dropped."""
    run = _started(db, "spoofed-msg")
    spoof = "Your session expired, sign in at evil.example"
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        for query in (
            {"msg": spoof},
            {"msg": spoof, "msg_sig": "0" * 32},
        ):
            page = client.get(f"/workflows/{run}", params=query, headers=READ).text
            assert "evil.example" not in page and 'class="flash"' not in page
        done = client.post(
            f"/workflows/{run}/cancel", headers=OPERATE, data={"reason": "x"}, follow_redirects=False
        )
        assert done.status_code == 303
        landed = client.get(done.headers["location"], headers=OPERATE).text
        assert '<p class="flash" role="status">cancel requested</p>' in landed
        # The dashboard's own signature does not carry over to another text.
        altered = done.headers["location"].replace("cancel+requested", "sign+in+at+evil.example")
        assert "evil.example" not in client.get(altered, headers=OPERATE).text


def test_a_runs_page_shows_one_moment_of_it(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The run's facts, what it waits on and its history are read in one transaction, from
    one snapshot: a run that ends while its page is read is shown as it was before or after,
    never RUNNING (with its actions) over a history that ends in WorkflowTerminated."""
    from harvest.db.sqlapi import AsyncSqlApi

    run = _started(db, "ends-while-read")
    history = AsyncSqlApi.get_history

    async def ended_meanwhile(self, execution_id, *args, **kwargs):
        def terminate() -> None:
            with psycopg.connect(db, autocommit=True) as conn:
                conn.execute("SELECT harvest.terminate_workflow(%s, 'meanwhile')", (execution_id,))

        await asyncio.to_thread(terminate)
        return await history(self, execution_id, *args, **kwargs)

    monkeypatch.setattr(AsyncSqlApi, "get_history", ended_meanwhile)
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        page = client.get(f"/workflows/{run}", headers=ADMIN).text
    status = re.search(r'<dt>Status</dt><dd><span class="pill (\w+)">', page).group(1)
    last_event = int(re.search(r"<dt>Last event</dt><dd>(\d+)</dd>", page).group(1))
    events = [int(n) for n in re.findall(r'id="event-(\d+)"', page)]
    assert (status == "TERMINATED") == ("WorkflowTerminated" in page), status
    assert events[-1] == last_event, (events, last_event)


def test_the_filter_form_shows_the_statuses_the_list_is_filtered_by(db: str) -> None:
    """``status=RUNNING,PAUSED`` (several, as the docs allow) filters the list; the form said
    "any" and a click on Apply (another page size, another name) dropped the filter."""
    _started(db, "filtered-1")
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        page = client.get("/workflows?status=running,PAUSED", headers=READ).text
    select = page.split('<select name="status">')[1].split("</select>")[0]
    assert re.findall(r'<option value="([^"]*)" selected>', select) == ["RUNNING,PAUSED"]


def test_a_tree_deeper_than_the_page_draws_says_so(db: str) -> None:
    """A run's tree is drawn 10 levels deep; a child at the last level that has children of
    its own says so and links to them (it was drawn as a leaf: the tree cut without a word)."""
    chain = [_started(db, "tree-0")]
    with psycopg.connect(db, autocommit=True) as conn:
        for n in range(1, 12):
            child = conn.execute(
                "SELECT execution_id FROM harvest._start_workflow('wf', p_workflow_id => %s, "
                "p_parent_id => %s)",
                (f"tree-{n}", chain[-1]),
            )
            chain.append(str(child.fetchone()[0]))
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        page = client.get(f"/workflows/{chain[0]}", headers=READ).text
    tree = page.split('id="tree"')[1].split("</section>")[0]
    assert chain[10][-12:] in tree and chain[11][-12:] not in tree  # 10 levels drawn
    deeper = re.search(r'<a class="deeper" href="/workflows/([0-9a-f-]{36})">', tree)
    assert deeper and deeper.group(1) == chain[10], tree


def test_a_run_with_many_descendants_draws_a_bounded_tree_and_says_so(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run page read and drew every descendant of the run, ten levels down (a fan-out of
    100,000 children: a page of 100,000 links, each view). It draws at most TREE_NODES of them,
    breadth first, and says the tree was cut."""
    import harvest.web.ui.app as ui_module

    monkeypatch.setattr(ui_module, "TREE_NODES", 4)
    parent = _started(db, "wide-0")
    with psycopg.connect(db, autocommit=True) as conn:
        for n in range(1, 7):
            conn.execute(
                "SELECT harvest._start_workflow('wf', p_workflow_id => %s, p_parent_id => %s)",
                (f"wide-{n}", parent),
            )
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        page = client.get(f"/workflows/{parent}", headers=READ).text
        small = client.get(f"/workflows/{_started(db, 'narrow')}", headers=READ).text
    tree = page.split('id="tree"')[1].split("</section>")[0]
    assert len(re.findall(r"<li>wf <a", tree)) == 4, tree
    assert 'id="tree-truncated"' in page
    assert 'id="tree-truncated"' not in small


def test_a_runs_waiting_on_lists_draw_a_bounded_number_and_count_the_rest(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run page drew every open activity, timer and running child of the run (a fan-out
    of 20,000 activities: 20,000 table rows a view): at most STACK_SHOWN of each, and a line
    with the total."""
    import harvest.web.ui.app as ui_module

    monkeypatch.setattr(ui_module, "STACK_SHOWN", 2)
    parent = _started(db, "wide-stack")
    with psycopg.connect(db, autocommit=True) as conn:
        for n in range(1, 4):
            conn.execute(
                "SELECT harvest._start_workflow('wf', p_workflow_id => %s, p_parent_id => %s)",
                (f"wide-stack-{n}", parent),
            )
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        page = client.get(f"/workflows/{parent}", headers=READ).text
    stack = page.split('id="stack"')[1].split("</section>")[0]
    assert len(re.findall(r"<li>wf <a", stack)) == 2, stack
    assert re.search(r'id="stack-more-children">The first 2 of 3 running children', stack), stack


def test_the_concurrency_page_draws_a_page_of_keys_and_links_the_next(db: str) -> None:
    """The concurrency page drew every key with live work (100,000 tenants: 100,000 rows a
    view): a page of keys in key order (limit, default 50) and a link to the next."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO harvest.executions"
            " (id, workflow_name, workflow_id, status, concurrency_key, created_at)"
            " SELECT gen_random_uuid(), 'wf', 'keyed-' || g, 'RUNNING', 'tenant-' || g, now()"
            " FROM generate_series(1, 5) AS g"
        )
    drawn: list[str] = []
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        url = "/concurrency?limit=2"
        while url:
            page = client.get(url, headers=READ).text
            table = page.split('id="concurrency-keys"')[1].split("</table>")[0]
            keys = re.findall(r'<td class="mono">(tenant-\d)</td>', table)
            assert len(keys) <= 2, table
            drawn += keys
            more = re.search(r'id="next" rel="next" href="([^"]+)"', page)
            url = "/concurrency" + html.unescape(more.group(1)) if more else ""
    assert drawn == [f"tenant-{n}" for n in range(1, 6)]


def test_the_schedules_page_draws_a_page_of_schedules_and_links_the_next(db: str) -> None:
    """The schedules page drew every schedule of every shard (a schedule a tenant: 100,000
    rows a view): a page by name (limit, default 50) and a link to the next, filters kept."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO harvest.schedules (name, workflow_name, interval_secs, paused, anchor_at,"
            " created_at, updated_at)"
            " SELECT 'paged-' || g, 'wf', 3600, g % 2 = 0, now(), now(), now()"
            " FROM generate_series(1, 7) AS g"
        )
    drawn: list[str] = []
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        url = "/schedules?limit=2&paused=false"
        while url:
            page = client.get(url, headers=READ).text
            names = re.findall(r'<tr data-name="(paged-\d)"', page)
            assert len(names) <= 2, page
            drawn += names
            assert ("« First page</a>" in page) == ("cursor=" in url), url
            more = re.search(r'id="next" rel="next" href="([^"]+)"', page)
            url = "/schedules" + html.unescape(more.group(1)) if more else ""
    assert drawn == ["paged-1", "paged-3", "paged-5", "paged-7"]


def test_the_workers_page_reads_the_workers_up_to_its_page(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers page read every registered worker to draw a page of them (a churning fleet:
    a row a pod until retention): it reads the rows up to its page and counts the rest."""

    fetched = rows_read(monkeypatch, "list_workers")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO harvest.workers (id, queues, hostname, pid, status, started_at, last_heartbeat_at)"
            " SELECT 'pod-' || lpad(g::text, 4, '0'), ARRAY['default'], 'h', g, 'stopped', now(), now()"
            " FROM generate_series(1, 300) AS g"
        )
        conn.execute("UPDATE harvest.workers SET status = 'active' WHERE id IN ('pod-0007', 'pod-0009')")
        conn.execute(
            "UPDATE harvest.workers SET last_heartbeat_at = now() - interval '1 hour' WHERE id = 'pod-0009'"
        )
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        page = client.get("/workers?limit=2&page=2", headers=READ).text
        assert re.findall(r'<a href="/workers/([^"]+)"', page) == ["pod-0001", "pod-0002"]
        assert "300 worker(s) match" in page and 'id="next"' in page
        assert max(fetched) <= 5, fetched
        fetched.clear()
        fresh = client.get("/workers?limit=2&stale=false", headers=READ).text
        assert re.findall(r'<a href="/workers/([^"]+)"', fresh) == ["pod-0007", "pod-0001"]
        assert "299 worker(s) match" in fresh and max(fetched) <= 4, fetched


def test_the_usage_table_draws_a_bounded_number_of_groups_and_counts_them(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The concurrency page's usage table drew every group (grouped by a tenant attribute: a
    row a tenant): the first USAGE_SHOWN by name and a line with how many there are."""
    import harvest.web.ui.app as ui_module

    monkeypatch.setattr(ui_module, "USAGE_SHOWN", 2)
    with psycopg.connect(db, autocommit=True) as conn:
        for n in range(1, 4):
            conn.execute("SELECT harvest.start_workflow('wf', '[]', %s, 'default')", (f"usage-{n}",))
        conn.execute(
            "UPDATE harvest.executions SET search_attributes = jsonb_build_object('tenant', workflow_id)"
        )
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        page = client.get("/concurrency?group_by=search_attr:tenant", headers=READ).text
    table = page.split('id="usage"')[1].split("</table>")[0]
    assert re.findall(r"<tr><td>(usage-\d)</td>", table) == ["usage-1", "usage-2"], table
    assert re.search(r'id="usage-more">The first 2 of 3 groups', page), page


def test_a_timers_fire_time_in_the_history_is_in_utc_as_the_page_is(db: str) -> None:
    """A TimerStarted event's fire_at is written in the deciding session's time zone (JSON
    keeps its offset): the timeline's line said 17:30+05:30 beside event times in UTC. Every
    time on the page is UTC."""
    execution_id = _started(db, "timer-zone", "wq_zone")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SET TIME ZONE 'Asia/Kolkata'")
        task = conn.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('decider', %s, 1)", (["wq_zone"],)
        ).fetchone()
        conn.execute(
            "SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s)",
            (task[0], task[1], Jsonb([{"type": "start_timer", "seq": 1, "duration": 3600}])),
        )
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        page = client.get(f"/workflows/{execution_id}", headers=READ).text
    line = re.search(r"<strong>TimerStarted</strong>(.*?)</summary>", page).group(1)
    assert re.search(r"fire_at=\d{4}-\d\d-\d\d \d\d:\d\d:\d\dZ", line), line


def test_a_filter_form_keeps_the_pages_auto_refresh(db: str) -> None:
    """``?refresh=N`` (every page takes it): Apply on a page's filters kept it on the workers
    page only; elsewhere the filtered page stopped reloading without a word."""
    with psycopg.connect(db, autocommit=True) as conn:
        dag = [{"dag_name": "refreshed", "queue": "default", "tasks": [], "max_active_runs": 1}]
        conn.execute("SELECT harvest.register_dags(%s::jsonb)", (Jsonb(dag),))
    pages = ("/workflows", "/dead-letters", "/schedules", "/dags", "/dags/refreshed", "/concurrency")
    pages += ("/workers",)
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        for path in pages:
            page = client.get(f"{path}?refresh=30", headers=READ).text
            form = page.split('<form class="filters" method="get"')[1].split("</form>")[0]
            assert '<input type="hidden" name="refresh" value="30">' in form, path


def test_a_run_with_many_signals_lists_their_tail_as_its_history(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A long history shows its last events and a link to all; the signals list drew every
    signal the run ever received (10,000 signals, each payload in full for an operator: a page
    of hundreds of megabytes). It lists the last as many as the history shows, says how many
    there are, and links to the history's first page, where the others are (paged)."""
    import harvest.web.ui.app as ui_module

    monkeypatch.setattr(ui_module, "HISTORY_SHOWN", 3)
    run = _started(db, "many-signals")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT harvest.signal_workflow(%s, 'sig-' || g, to_jsonb(g)) FROM generate_series(1, 5) AS g",
            (run,),
        )
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        page = client.get(f"/workflows/{run}?payloads=full", headers=OPERATE).text

    def listed(html: str) -> list[str]:
        return re.findall(r"<li><strong>(sig-\d)</strong>", html.split('id="signals"')[1].split("</ul>")[0])

    assert listed(page) == ["sig-3", "sig-4", "sig-5"]
    assert 'id="all-signals"' in page and "5 signals" in page
    # The others are in the history, paged: the link goes to its first page.
    assert re.search(r'id="all-signals" href="[^"]*history_from=1[^"]*"', page)


def test_a_long_history_pages_and_never_renders_all_of_it(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """?history=all rendered every event of the run (a run of 100,000 events: a page of
    100,000 rows, held in memory). The history is paged: at most HISTORY_SHOWN events a page,
    the tail first, with links to the older and newer pages; walking them lists each event
    once, and no query string renders more than a page."""
    import harvest.web.ui.app as ui_module

    monkeypatch.setattr(ui_module, "HISTORY_SHOWN", 3)
    run = _started(db, "paged-history")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT harvest.signal_workflow(%s, 'sig-' || g, to_jsonb(g)) FROM generate_series(1, 8) AS g",
            (run,),
        )
        total = conn.execute(
            "SELECT count(*) FROM harvest.events WHERE execution_id = %s", (run,)
        ).fetchone()[0]

    def shown(html: str) -> list[int]:
        return [int(n) for n in re.findall(r'<li class="[a-z]+" id="event-(\d+)">', html)]

    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        assert len(shown(client.get(f"/workflows/{run}?history=all", headers=READ).text)) <= 3
        page = client.get(f"/workflows/{run}", headers=READ).text
        assert shown(page) == [total - 2, total - 1, total] and 'id="newer-history"' not in page
        seen: list[int] = []
        while True:
            seen = shown(page) + seen
            older = re.search(r'id="older-history" href="([^"]+)"', page)
            if older is None:
                break
            page = client.get(f"/workflows/{run}" + html.unescape(older.group(1)), headers=READ).text
            assert len(shown(page)) <= 3
        assert seen == list(range(1, total + 1))
        first = client.get(f"/workflows/{run}?history_from=1", headers=READ).text
        assert shown(first) == [1, 2, 3] and 'id="older-history"' not in first
        newer = re.search(r'id="newer-history" href="([^"]+)"', first)
        assert newer is not None
        assert shown(client.get(f"/workflows/{run}" + html.unescape(newer.group(1)), headers=READ).text) == [
            4,
            5,
            6,
        ]
        assert client.get(f"/workflows/{run}?history_from=0", headers=READ).status_code == 400


def test_a_page_of_a_long_history_reads_and_redacts_that_page_only(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The run page drew one page of the history but read the whole of it from the database
    (a stream of every event) and redacted every signal's payload on the way, to keep the last
    few: a run of 100,000 events cost 100,000 rows and as many redactions a page view. It reads
    the page, the last signals and reset points, the pending updates and the counts, and redacts
    what it shows; the rows it fetches do not grow with the history."""
    import harvest.web.ui.app as ui_module
    import harvest.web.ui.views as views_module
    from harvest.web.ui.source import Source

    monkeypatch.setattr(ui_module, "HISTORY_SHOWN", 3)
    run = _started(db, "long-history")
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT harvest.signal_workflow(%s, 'sig-' || g, to_jsonb(g)) FROM generate_series(1, 400) AS g",
            (run,),
        )
    fetched = redacted = 0

    def counted(value: object) -> object:
        nonlocal fetched
        fetched += len(value) if isinstance(value, list) else 1
        return value

    class Counting:
        """An API whose every answer counts its rows (a list's length, a stream's items)."""

        def __init__(self, api: object) -> None:
            self.api = api

        def __getattr__(self, name: str) -> object:
            method = getattr(self.api, name)

            def call(*args: object, **kwargs: object) -> object:
                answer = method(*args, **kwargs)
                if hasattr(answer, "__aiter__"):

                    async def stream():
                        async for item in answer:
                            yield counted(item)

                    return stream()

                async def awaited() -> object:
                    return counted(await answer)

                return awaited()

            return call

    routed = Source.routed

    async def counting_routed(self, execution_id, principal, fn, **kw):
        return await routed(self, execution_id, principal, lambda api: fn(Counting(api)), **kw)

    redact = views_module.redact

    def counting_redact(value: object) -> object:
        nonlocal redacted
        redacted += 1
        return redact(value)

    monkeypatch.setattr(Source, "routed", counting_routed)
    monkeypatch.setattr(views_module, "redact", counting_redact)
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        page = client.get(f"/workflows/{run}", headers=READ).text
        assert "401 events" in page and "400 signals" in page
        assert re.findall(r'id="event-(\d+)"', page) == ["399", "400", "401"]
        # The page: three events, three signals, the counts, the run and its stack.
        assert fetched <= 20, fetched
        # Three events, three signals, the run's input, output and failure.
        assert redacted <= 10, redacted
        fetched = redacted = 0
        older = client.get(f"/workflows/{run}?history_before=200", headers=READ).text
        assert re.findall(r'id="event-(\d+)"', older) == ["197", "198", "199"]
        assert fetched <= 20 and redacted <= 10, (fetched, redacted)


def test_an_erased_payload_says_erased_not_a_size(db: str) -> None:
    """A finished run's payloads erased (docs/payloads.md) are {"_harvest_erased": true}: the
    page told a read principal "redacted (24 bytes)", a payload that is no longer anywhere. It
    says erased, redacted or in full."""
    run = _signalled(db, "erased-1", {"card": "4111"}, input=["secret"])
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.terminate_workflow(%s, 'done')", (run,))
        conn.execute("SELECT harvest.erase_payloads(%s, 'dpo')", (run,))
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        for headers, query in ((READ, ""), (OPERATE, "?payloads=full")):
            page = client.get(f"/workflows/{run}{query}", headers=headers).text
            for part in ('id="input"', 'id="signals"'):
                shown = page.split(part)[1].split("</div>" if part == 'id="input"' else "</ul>")[0]
                assert "erased" in shown and "bytes)" not in shown, (query, part, shown)


# -- long values, unknown pages --------------------------------------------------------------------
def test_a_long_value_is_cut_on_the_line_and_opens_in_full_escaped(db: str) -> None:
    """A value longer than a line (a search attribute, a schedule's input) was cut at 120
    characters with no way to see the rest. It is still cut on its line, and it opens (a
    <details>) to the whole value, escaped; a read principal still sees a payload's size only."""
    tail = "<script>alert('x')</script>-the-end"
    run = _signalled(db, "long-attrs", None, attrs={"note": "n" * 200 + tail})
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT harvest.create_schedule('long-input', 'wf', p_interval_secs => 3600, p_input => %s)",
            (Jsonb(["i" * 200 + tail]),),
        )
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        page = client.get(f"/workflows/{run}", headers=READ).text
        attrs = page.split("<dt>Search attributes</dt>")[1].split("</dd>")[0]
        assert "<details" in attrs and "…" in attrs
        assert tail in html.unescape(attrs.split("<pre>")[1])  # the whole value, opened
        assert "&lt;script&gt;alert(" in attrs and "<script>" not in page
        full = client.get("/schedules/0/long-input", headers=OPERATE).text
        shown = full.split("<dt>Input</dt>")[1].split("</dd>")[0]
        assert "<details" in shown and "-the-end" in shown and "<script>" not in full
        redacted = client.get("/schedules/0/long-input", headers=READ).text
        shown = redacted.split("<dt>Input</dt>")[1].split("</dd>")[0]
        assert "-the-end" not in shown and "iiii" not in shown


def test_an_unknown_page_is_the_dashboards_own_404(db: str) -> None:
    """A path the dashboard has no page for answered Starlette's plain text "Not Found" (a GET
    of an action's path: "Method Not Allowed"): now the dashboard's error page, with its
    navigation, as every other refusal."""
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        for path, method, status in (
            ("/no/such/page?x=<b>", "GET", 404),
            ("/static/missing.css", "GET", 404),
            ("/workflows/00000000-0000-0000-0000-000000000000/cancel", "GET", 405),
        ):
            page = client.request(method, path, headers=READ)
            assert page.status_code == status, path
            assert page.headers["content-type"].startswith("text/html"), path
            assert 'aria-label="pages"' in page.text and 'role="alert"' in page.text, path
            assert "<b>" not in page.text
        assert (
            "POST"
            in client.get("/workflows/00000000-0000-0000-0000-000000000000/cancel", headers=READ).headers[
                "allow"
            ]
        )


def test_a_name_with_dot_segments_acts_on_its_own_page_only(db: str) -> None:
    """A name is one path segment of its page's address. A schedule named ``../../dags/etl``
    kept its "/" in its form's action (``/schedules/0/../../dags/etl/pause``), which a browser
    resolves to ``/dags/etl/pause``: pausing the schedule paused the DAG instead (a DAG or a
    worker id could point at a schedule alike). Its "/" is now %2F, and the action acts on it."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.create_schedule('../../dags/etl', 'wf', p_interval_secs => 3600)")
        dag = [{"dag_name": "etl", "queue": "default", "tasks": [], "max_active_runs": 1}]
        conn.execute("SELECT harvest.register_dags(%s::jsonb)", (Jsonb(dag),))
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        listed = client.get("/schedules", headers=ADMIN).text
        (href,) = re.findall(r'href="(/schedules/0/[^"]*dags[^"]*)"', listed)
        page = client.get(urllib.parse.urljoin("http://testserver/", html.unescape(href)), headers=ADMIN)
        assert page.status_code == 200 and "Schedule ../../dags/etl" in page.text
        form = re.search(r'id="pause-form" method="post" action="([^"]+)"', page.text)
        action = html.unescape(form.group(1))
        resolved = urllib.parse.urljoin("http://testserver/", action)  # as a browser resolves it
        done = client.post(resolved, headers=ADMIN, data={})
        assert done.status_code == 200, (resolved, done.status_code)
    with psycopg.connect(db, autocommit=True) as conn:
        one = lambda sql: conn.execute(sql).fetchone()[0]  # noqa: E731
        assert one("SELECT paused FROM harvest.schedules WHERE name = '../../dags/etl'")
        assert not one("SELECT paused FROM harvest.dags WHERE dag_name = 'etl'")


def test_hostile_names_and_messages_are_text_on_every_page(db: str) -> None:
    """Every value a user or a workflow chooses (a workflow id, name and queue, search
    attributes, a failure's message, a signal's name, a pause's reason, a worker's id and
    metadata, a schedule's and a DAG's name and description) is shown as text on every page
    that shows it: the markup it holds never reaches the page as markup."""
    evil = "\"'><svg onload=alert(1)>"
    with psycopg.connect(db, autocommit=True) as conn:
        (run,) = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow(%s, '[]', %s, %s, p_search_attributes => %s)",
            (f"wf{evil}", f"id{evil}", f"q{evil}", Jsonb({f"k{evil}": f"v{evil}"})),
        ).fetchone()
        conn.execute("SELECT harvest.signal_workflow(%s, %s, '1')", (run, f"sig{evil}"))
        conn.execute("SELECT harvest.pause_workflow(%s, %s, %s)", (run, f"why{evil}", f"op{evil}"))
        started = "SELECT execution_id FROM harvest.start_workflow('wf2', '[]', 'ended')"
        (ended,) = conn.execute(started).fetchone()
        conn.execute("SELECT harvest.terminate_workflow(%s, %s)", (ended, f"reason{evil}"))
        conn.execute(
            "SELECT harvest.register_worker(%s, ARRAY[%s], %s, 1, 10, %s)",
            (f"w{evil}", f"q{evil}", f"h{evil}", Jsonb({"m": evil})),
        )
        conn.execute("SELECT harvest.create_schedule(%s, 'wf', p_interval_secs => 3600)", (f"s{evil}",))
        dag = [{"dag_name": f"d{evil}", "queue": "default", "tasks": [], "description": f"about{evil}"}]
        conn.execute("SELECT harvest.register_dags(%s::jsonb)", (Jsonb(dag),))
        conn.execute(
            "INSERT INTO harvest.dead_letters (execution_id, workflow_name, seq, activity_name, queue,"
            " attempts, failure, scheduled_at, failed_at) VALUES (%s, %s, 1, %s, 'q', 3, %s, now(), now())",
            (run, f"wf{evil}", f"act{evil}", Jsonb({"error_type": f"E{evil}", "message": f"m{evil}"})),
        )
    seg = urllib.parse.quote
    pages = [
        "/workflows",
        "/workflows?status=TERMINATED",
        f"/workflows/{run}",
        f"/workflows/{run}?payloads=full",
        f"/workflows/{ended}",
        "/dead-letters",
        "/workers",
        f"/workers/{seg('w' + evil, safe='')}",
        "/schedules",
        f"/schedules/0/{seg('s' + evil, safe='')}",
        "/dags",
        f"/dags/{seg('d' + evil, safe='')}",
        "/concurrency",
        f"/workflows?workflow_name={seg(evil, safe='')}",
        f"/no/such/{seg(evil, safe='')}",
    ]
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        for path in pages:
            page = client.get(path, headers=ADMIN)
            assert page.status_code in (200, 404), (path, page.status_code)
            assert "<svg" not in page.text, path
        shown = client.get(f"/workflows/{run}", headers=ADMIN).text
        assert "why" + evil in html.unescape(shown) and "sig" + evil in html.unescape(shown)  # as text


def test_every_response_forbids_framing_and_scripts(db: str) -> None:
    """Another site could frame the dashboard and have a user click its buttons (clickjacking:
    under the dev profile, or behind a proxy that signs in with a cookie of its own, the framed
    page is signed in). Every response now forbids framing (X-Frame-Options, CSP frame-ancestors)
    and scripts (the pages have none), and says its type is its type (nosniff)."""
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        for path, status in (("/workflows", 200), ("/login", 200), ("/workers", 401), ("/nope", 404)):
            page = client.get(path, headers=READ if status != 401 else {})
            assert page.status_code == status, path
            assert page.headers["x-frame-options"] == "DENY", path
            policy = page.headers["content-security-policy"]
            assert "frame-ancestors 'none'" in policy and "script-src 'none'" in policy, path
            assert page.headers["x-content-type-options"] == "nosniff", path
        assert client.get("/static/dashboard.css").headers["x-frame-options"] == "DENY"


def test_a_dags_status_filter_finds_runs_older_than_the_newest_thousand(db: str) -> None:
    """The DAG page filtered by status read each shard's newest 1000 runs and filtered those:
    a FAILED run older than a thousand newer ones was not listed ("no runs"). The status now
    filters in the database, before the limit."""
    with psycopg.connect(db, autocommit=True) as conn:
        dag = [{"dag_name": "busy", "queue": "nobody", "tasks": [], "max_active_runs": 2000}]
        conn.execute("SELECT harvest.register_dags(%s::jsonb)", (Jsonb(dag),))
        conn.execute("SELECT set_config('harvest.fake_now', '2030-01-01T00:00:00Z', false)")
        (old,) = conn.execute("SELECT execution_id FROM harvest.trigger_dag('busy')").fetchone()
        conn.execute("SELECT harvest.terminate_workflow(%s, 'old')", (old,))
        conn.execute("SELECT set_config('harvest.fake_now', '2030-01-02T00:00:00Z', false)")
        conn.execute("SELECT harvest.trigger_dag('busy') FROM generate_series(1, 1001)")
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        page = client.get("/dags/busy?status=terminated&limit=5", headers=READ)
        assert page.status_code == 200
        assert str(old)[-12:] in page.text
        assert client.get("/dags/busy?status=nope", headers=READ).status_code == 400


def test_a_runs_own_dead_letter_is_named_and_offers_no_replay(db: str) -> None:
    """A dead letter of kind workflow (a run that failed at a history hard cap) has no activity:
    its rows said "None", its group linked to a filter that dropped the activity filter, and it
    offered Replay, which the database refuses for such a letter (HR001, a 400 page)."""
    with psycopg.connect(db, autocommit=True) as conn:
        started = "SELECT execution_id FROM harvest.start_workflow('capped', '[]', 'c1')"
        (run,) = conn.execute(started).fetchone()
        conn.execute(
            "INSERT INTO harvest.dead_letters (execution_id, workflow_name, queue, attempts, failure,"
            " scheduled_at, failed_at, kind) VALUES (%s, 'capped', 'q', 1, %s, now(), now(), 'workflow')",
            (run, Jsonb({"error_type": "HistoryCap", "message": "the history is at its cap"})),
        )
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        page = client.get("/dead-letters", headers=OPERATE).text
        assert "None" not in page and page.count("the run itself") == 2
        assert "/replay" not in page


def test_a_dead_letters_long_error_is_cut_on_its_row_and_opens_in_full(db: str) -> None:
    """A dead letter's error message was shown whole in its row: a traceback of many KB (many
    lines, long ones) stretched the table past the page. Its first line is shown, cut at the
    line's width, and it opens (a <details>, as a long JSON value does) to the whole text,
    escaped; a short one-line message is shown as it is."""
    frames = "".join(
        f'  File "/srv/app/billing.py", line {i}, in charge_{i}\n    step_{i}()\n' for i in range(120)
    )
    message = (
        "CardDeclined: the card was declined <script>alert(1)</script>\nTraceback:\n" + frames + "-the-end"
    )
    assert len(message) > 8000
    with psycopg.connect(db, autocommit=True) as conn:
        started = "SELECT execution_id FROM harvest.start_workflow('billing', '[]', %s)"
        for workflow_id, text in (("long", message), ("short", "no funds")):
            (run,) = conn.execute(started, (workflow_id,)).fetchone()
            conn.execute(
                "INSERT INTO harvest.dead_letters (execution_id, workflow_name, queue, attempts,"
                " failure, scheduled_at, failed_at, kind)"
                " VALUES (%s, 'billing', 'q', 1, %s, now(), now(), 'workflow')",
                (run, Jsonb({"error_type": "CardDeclined", "message": text})),
            )
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        page = client.get("/dead-letters", headers=READ).text
    table = page.split('id="dead-letters"')[1].split("</table>")[0]
    rows = [r for r in table.split("<tr>")[1:] if "CardDeclined" in r]
    (long_row,) = [r for r in rows if "<details" in r]
    summary = long_row.split("<summary>")[1].split("</summary>")[0]
    assert len(html.unescape(summary)) <= 122 and "Traceback" not in summary, summary
    assert html.unescape(summary).startswith("CardDeclined: the card was declined <script>")
    assert html.unescape(long_row.split("<pre>")[1].split("</pre>")[0]) == message  # the whole, opened
    assert "<script>" not in page
    (short_row,) = [r for r in rows if "<details" not in r]
    assert "no funds" in short_row


def test_the_shards_page_names_a_shards_connect_error_to_an_admin_only(db: str) -> None:
    """What a shard's connect met (a refused login names the login) is an admin's to read
    (docs/security.md, "What an outage tells a caller"); a read token sees the shard unavailable
    and its reason code."""
    from psycopg import conninfo

    from harvest.config import load_config

    login = "login_of_shard_1_x7"
    env = {
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0",
        "HARVEST_SHARDS__URLS__0": db,
        "HARVEST_SHARDS__URLS__1": conninfo.make_conninfo(db, user=login),
    }
    app = dashboard_app(config=load_config(env=env), authorizer=TokenScopes(), timeout=3.0)
    with TestClient(app, base_url="http://testserver") as client:
        seen = {who: client.get("/shards", headers=h) for who, h in (("read", READ), ("admin", ADMIN))}
    for who, page in seen.items():
        assert page.status_code == 200 and "Shard 1 unavailable" in page.text, page.text
        assert (login in page.text) is (who == "admin"), (who, page.text)


def test_a_run_waiting_for_signals_names_them_and_a_stray_signal_says_so(db: str) -> None:
    """ "Waiting on" showed a run blocked in ctx.wait_for_signal as a timer at most (or nothing):
    it names each awaited signal, since when and its timeout; a signal sent from the page under
    another name is sent, and the notice says the run waits for others."""
    run = _started(db, "awaits-signals")
    waits = [
        {"type": "await_signals", "signals": [{"name": "approve", "timer_seq": 1}, {"name": "reject"}]},
        {"type": "start_timer", "seq": 1, "duration": 3600},
    ]
    with psycopg.connect(db, autocommit=True) as conn:
        task = conn.execute(
            "SELECT task_id, fencing_token FROM harvest.claim_tasks('w', ARRAY['default'], 1)"
        ).fetchone()
        conn.execute("SELECT * FROM harvest.complete_workflow_task(%s, %s, 1, %s)", (*task, Jsonb(waits)))
    with TestClient(dashboard_app(dsn=db, authorizer=TokenScopes())) as client:
        page = client.get(f"/workflows/{run}", headers=READ).text
        stack = page.split('id="stack"')[1].split("</section>")[0]
        awaited = stack.split('id="awaited-signals"')[1].split("</ul>")[0]
        assert re.search(
            r"signal <strong>approve</strong>, waited for since .*, times out .*\(timer 1\)", awaited
        )
        assert re.search(r"signal <strong>reject</strong>, waited for since .*, no timeout", awaited)
        sent = client.post(
            f"/workflows/{run}/signal", headers=OPERATE, data={"name": "aprove", "payload": "1"}
        )
        assert sent.status_code == 200, sent.text
        assert "signal aprove sent" in sent.text
        assert "not awaited: the run waits for approve, reject" in sent.text
