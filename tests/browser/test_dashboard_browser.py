"""The dashboard in headless Chromium (marker browser, the slow process): every page with real
runs, its filters and paging, the actions done with their scope and refused without it, no
console error on any page; each page saved as build/screenshots/dashboard/<page>.png
(HARVEST_UPDATE_SCREENSHOTS=1: docs/img/dashboard/, which docs/dashboard.md shows)."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import psycopg
import psycopg.types.json
import pytest
from dashboard_demo import Demo, demo_pages
from dashboard_helpers import (
    Served,
    TokenScopes,
    click_and_wait,
    console_errors,
    screenshot,
    sign_in,
    wait_for,
)
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

from harvest.web.ui import dashboard_app

pytestmark = pytest.mark.browser


@pytest.fixture
def site(demo: Demo) -> Iterator[str]:
    with Served(dashboard_app(dsn=demo.dsn, authorizer=TokenScopes(), timeout=3.0)) as served:
        yield served.url


def _text(driver: Any, css: str) -> str:
    return driver.find_element(By.CSS_SELECTOR, css).text


def _forms(driver: Any) -> set[str]:
    return {f.get_attribute("id") for f in driver.find_elements(By.CSS_SELECTOR, "form.action[id]")}


def test_every_page_with_a_read_token(browser: Any, site: str, demo: Demo) -> None:
    browser.get(f"{site}/workers")
    assert "Sign in needed" in _text(browser, "h1")  # no token: 401, with a link to sign in
    click_and_wait(browser, browser.find_element(By.LINK_TEXT, "Sign in with a token"))
    screenshot(browser, "login")
    console_errors(browser)  # the 401 above is expected in the console
    sign_in(browser, site, "read-token")

    browser.get(f"{site}/workflows")
    rows = browser.find_elements(By.CSS_SELECTOR, "#workflows tbody tr")
    assert len(rows) == len(demo.ids) + 1  # every run and the family's child
    assert "COMPLETED" in _text(browser, ".chips")
    screenshot(browser, "workflows")

    # filters: a status chosen in the form, then a search attribute
    Select(browser.find_element(By.NAME, "status")).select_by_value("COMPLETED")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "form.filters button"))
    statuses = {
        r.get_attribute("data-status") for r in browser.find_elements(By.CSS_SELECTOR, "#workflows tbody tr")
    }
    assert statuses == {"COMPLETED"}
    browser.get(f"{site}/workflows?attr=tenant%3Dglobex")
    assert [
        r.get_attribute("data-status") for r in browser.find_elements(By.CSS_SELECTOR, "#workflows tbody tr")
    ] == ["RUNNING"]

    # keyset paging: one row a page, following "Next page" to the end
    browser.get(f"{site}/workflows?workflow_name=greet&limit=1")
    seen = []
    while True:
        seen.append(_text(browser, "#workflows tbody tr td:nth-child(3)"))
        nxt = browser.find_elements(By.ID, "next")
        if not nxt:
            break
        click_and_wait(browser, nxt[0])
    assert sorted(seen) == ["greet-0", "greet-1", "greet-2"]

    browser.get(f"{site}/workflows/{demo.ids['approval']}")
    assert "ActivityCompleted" in _text(browser, "#history")
    assert "redacted" in _text(browser, "#input")
    assert not _forms(browser)  # a read token sees no action
    assert not browser.find_elements(By.ID, "show-payloads")
    screenshot(browser, "execution")

    browser.get(f"{site}/workflows/{demo.ids['family']}")
    assert "approval" in _text(browser, "#tree")

    browser.get(f"{site}/dead-letters")
    assert "CardDeclined" in _text(browser, "#dead-letter-groups")
    assert "charge" in _text(browser, "#dead-letters")
    assert not browser.find_elements(By.CSS_SELECTOR, "button[name=replay]")
    screenshot(browser, "dead-letters")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "#dead-letters a.dead-letter"))
    assert _text(browser, "#error-type") == "CardDeclined" and "redacted" in _text(browser, "#input")
    assert not _forms(browser) and not browser.find_elements(By.ID, "show-payloads")

    browser.get(f"{site}/workers")
    assert _text(browser, "#fleet-banner").startswith("Healthy — 1 workers | 1 active")
    assert "worker-a" in _text(browser, "#workers")
    screenshot(browser, "workers")
    Select(browser.find_element(By.NAME, "status")).select_by_value("draining")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "form.filters button"))
    assert "No workers match." in _text(browser, "#workers")
    assert console_errors(browser) == []
    browser.get(f"{site}/workers?status=sleeping")
    assert "Bad request" in _text(browser, "h1")
    assert ["400 (Bad Request)" in e["message"] for e in console_errors(browser)] == [True]  # that one only
    browser.get(f"{site}/workers/worker-a")
    assert "default" in _text(browser, "dl.facts")
    screenshot(browser, "worker")

    browser.get(f"{site}/concurrency")
    assert "acme" in _text(browser, "#concurrency-keys")
    assert "greet" in _text(browser, "#usage")
    screenshot(browser, "concurrency")

    browser.get(f"{site}/shards")
    assert "ready" in _text(browser, "#shards") or "degraded" in _text(browser, "#shards")
    screenshot(browser, "shards")

    # dark mode follows the system (prefers-color-scheme), no switch needed
    browser.execute_cdp_cmd(
        "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]}
    )
    browser.get(f"{site}/workflows/{demo.ids['approval']}")
    assert (
        browser.execute_script("return getComputedStyle(document.body).backgroundColor") == "rgb(22, 23, 21)"
    )
    assert "note" in _text(browser, "#updates")
    screenshot(browser, "execution-dark")
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})

    # a phone: the workers page at 390 px wide, nothing wider than the screen but the tables
    browser.set_window_size(390, 844)
    browser.get(f"{site}/workers")
    assert browser.execute_script("return document.body.scrollWidth") <= 390
    screenshot(browser, "workers-phone")
    assert console_errors(browser) == []


def test_actions_with_their_scope_and_refused_without_it(browser: Any, site: str, demo: Demo) -> None:
    sign_in(browser, site, "operate-token")
    run = demo.ids["approval"]
    browser.get(f"{site}/workflows/{run}")
    assert _forms(browser) == {"pause-form", "signal-form", "cancel-form"}  # no terminate, no reset

    sign_in(browser, site, "admin-token")
    browser.get(f"{site}/workflows/{run}")
    assert _forms(browser) == {"pause-form", "signal-form", "cancel-form", "terminate-form", "reset-form"}
    screenshot(browser, "execution-actions")

    # reset, dry run (checked by default): the plan, nothing written
    form = browser.find_element(By.ID, "reset-form")
    Select(form.find_element(By.NAME, "to_event")).select_by_value("4")
    form.find_element(By.NAME, "reason").send_keys("drill")
    click_and_wait(browser, form.find_element(By.CSS_SELECTOR, "button"))
    assert "Reset dry run" in _text(browser, "h1") and "Valid" in _text(browser, ".banner")
    screenshot(browser, "reset-dry-run")

    # the signal form: the run gets it and completes
    browser.get(f"{site}/workflows/{run}")
    form = browser.find_element(By.ID, "signal-form")
    form.find_element(By.NAME, "name").send_keys("approved")
    form.find_element(By.NAME, "payload").send_keys("true")
    click_and_wait(browser, form.find_element(By.CSS_SELECTOR, "button"))
    assert "signal approved sent" in _text(browser, ".flash")
    assert demo.client.get_handle(run).result(timeout=30) == {"order": "order-7", "approved": True}

    # a form drawn for an admin, submitted after signing in with a read token: the POST is refused
    browser.get(f"{site}/workflows/{demo.ids['batch-1']}")
    assert console_errors(browser) == []
    form = browser.find_element(By.ID, "terminate-form")
    browser.delete_cookie("harvest_ui_token")
    browser.add_cookie({"name": "harvest_ui_token", "value": "read-token", "path": "/"})
    click_and_wait(browser, form.find_element(By.CSS_SELECTOR, "button"))
    assert "Not allowed" in _text(browser, "h1")
    assert ["403 (Forbidden)" in e["message"] for e in console_errors(browser)] == [True]  # that one only
    with demo.client.sql() as sql:
        assert sql.get_execution(demo.ids["batch-1"])["status"] == "RUNNING"

    # with the admin token again: terminate, and the dead letter's replay and a bulk dry run
    browser.delete_cookie("harvest_ui_token")
    browser.add_cookie({"name": "harvest_ui_token", "value": "admin-token", "path": "/"})
    browser.get(f"{site}/workflows/{demo.ids['batch-1']}")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "#terminate-form button"))
    assert _text(browser, ".flash") == "terminated"
    with demo.client.sql() as sql:
        assert sql.get_execution(demo.ids["batch-1"])["status"] == "TERMINATED"

    browser.get(f"{site}/dead-letters")
    bulk = browser.find_element(By.ID, "bulk-form")
    bulk.find_element(By.NAME, "activity_name").send_keys("charge")
    click_and_wait(browser, bulk.find_element(By.CSS_SELECTOR, "button"))
    assert "dry run" in _text(browser, "h1")
    assert _text(browser, "#bulk-results tbody tr").split()[:3] == ["0", "1", "0"]  # shard, matched, acted on
    screenshot(browser, "bulk-dry-run")

    # the dead letter's own page, its payloads in full: replayed from there
    browser.get(f"{site}/dead-letters")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "#dead-letters a.dead-letter"))
    assert _forms(browser) == {"replay-form", "discard-form"}
    click_and_wait(browser, browser.find_element(By.ID, "show-payloads"))
    assert "redacted" not in _text(browser, "#input") and "CardDeclined" in _text(browser, "#error-type")
    screenshot(browser, "dead-letter")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "#replay-form button"))
    assert "replayed" in _text(browser, ".flash")
    assert console_errors(browser) == []
    with demo.client.sql() as sql:
        wait_for(lambda: sql.list_dead_letters(10), "the replayed activity to fail into a new dead letter")


def test_schedules_dags_and_a_paused_run(browser: Any, site: str, demo: Demo) -> None:
    sign_in(browser, site, "read-token")
    browser.get(f"{site}/workflows")
    click_and_wait(browser, browser.find_element(By.LINK_TEXT, "Schedules"))
    names = [
        r.get_attribute("data-name") for r in browser.find_elements(By.CSS_SELECTOR, "#schedules tbody tr")
    ]
    assert names == ["greet-yearly", "nightly_etl"]
    assert not _forms(browser)
    screenshot(browser, "schedules")
    Select(browser.find_element(By.NAME, "kind")).select_by_value("dag")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "form.filters button"))
    assert [
        r.get_attribute("data-name") for r in browser.find_elements(By.CSS_SELECTOR, "#schedules tbody tr")
    ] == ["nightly_etl"]

    # an operator triggers the workflow schedule: the firing links its run, which completes; the
    # missed range is what a scheduler that was down past a slot records (catchup off)
    with psycopg.connect(demo.dsn, autocommit=True) as conn:
        conn.execute(
            "INSERT INTO harvest.schedule_misses (schedule_id, first_slot_at, last_slot_at, slots, reason,"
            " recorded_at) SELECT id, '2026-01-01T02:00Z', '2026-01-01T02:00Z', 1, 'catchup_off', now()"
            " FROM harvest.schedules WHERE name = 'greet-yearly'"
        )
        conn.execute(
            "UPDATE harvest.schedules SET missed_slots = missed_slots + 1 WHERE name = 'greet-yearly'"
        )
    sign_in(browser, site, "operate-token")
    browser.get(f"{site}/schedules")
    click_and_wait(browser, browser.find_element(By.LINK_TEXT, "greet-yearly"))
    assert len(browser.find_elements(By.CSS_SELECTOR, "#upcoming li")) == 5
    assert _forms(browser) == {"pause-form", "trigger-form", "backfill-form", "edit-form", "delete-form"}
    assert "An App declares this schedule" in _text(browser, "#edit-declared")  # what an edit does then
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "#trigger-form button"))
    assert "triggered" in _text(browser, ".flash")
    with demo.client.sql() as sql:
        wait_for(
            lambda: [
                f for f in sql.get_schedule("greet-yearly")["firings"] if f["run_status"] == "COMPLETED"
            ],
            "the triggered run to complete",
        )
    browser.refresh()
    assert "COMPLETED" in _text(browser, "#firings")
    assert "catchup_off" in _text(browser, "#misses")
    screenshot(browser, "schedule")
    form = browser.find_element(By.ID, "pause-form")
    form.find_element(By.NAME, "note").send_keys("month-end freeze")
    click_and_wait(browser, form.find_element(By.CSS_SELECTOR, "button"))
    assert "month-end freeze" in _text(browser, "#paused-banner")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "#resume-form button"))
    assert not browser.find_elements(By.ID, "paused-banner")

    # a backfill of four past new years through its confirmation: the runs start and complete
    form = browser.find_element(By.ID, "backfill-form")
    form.find_element(By.NAME, "from").send_keys("2020-01-01")
    form.find_element(By.NAME, "to").send_keys("2024-01-01")
    Select(form.find_element(By.NAME, "overlap")).select_by_value("allow_all")
    click_and_wait(browser, form.find_element(By.CSS_SELECTOR, "button"))
    assert "holds 4 slots" in _text(browser, "#backfill-count")
    screenshot(browser, "schedule-backfill")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "#backfill-confirm-form button"))
    assert "backfilled 4 slots under allow_all: 4 started" in _text(browser, ".flash")
    with demo.client.sql() as sql:
        wait_for(
            lambda: (
                len([f for f in sql.get_schedule("greet-yearly")["firings"] if f["origin"] == "backfill"])
                == 4
            ),
            "the backfill's four firings",
        )

    # delete it: the confirmation names it and says the App declares it (a worker's boot brings it back)
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "#delete-form button"))
    assert "greet-yearly" in _text(browser, "h1") and browser.find_element(By.ID, "delete-declared")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "#delete-confirm-form button"))
    assert _text(browser, ".flash") == "deleted schedule greet-yearly on shard 0"
    assert [
        r.get_attribute("data-name") for r in browser.find_elements(By.CSS_SELECTOR, "#schedules tbody tr")
    ] == ["nightly_etl"]

    # a schedule made on the New schedule form (paused: it fires nothing here), then edited
    form = browser.find_element(By.ID, "create-form")
    form.find_element(By.NAME, "name").send_keys("greet-weekly")
    form.find_element(By.NAME, "workflow_name").send_keys("greet")  # (the demo's worker registered it)
    form.find_element(By.NAME, "cron").send_keys("0 9 * * 1")
    form.find_element(By.NAME, "tz").send_keys("Europe/Paris")
    form.find_element(By.NAME, "paused").click()
    click_and_wait(browser, form.find_element(By.CSS_SELECTOR, "button"))
    assert _text(browser, ".flash") == "created schedule greet-weekly on shard 0"
    assert "cron 0 9 * * 1 Europe/Paris" in _text(browser, ".facts")
    assert not browser.find_elements(By.ID, "edit-declared")  # made at run time: no App declares it
    form = browser.find_element(By.ID, "edit-form")
    most = form.find_element(By.NAME, "max_active_runs")
    most.clear()
    most.send_keys("3")
    click_and_wait(browser, form.find_element(By.CSS_SELECTOR, "button"))
    assert _text(browser, ".flash") == "updated: max_active_runs"
    assert (
        browser.find_element(By.ID, "edit-form")
        .find_element(By.NAME, "max_active_runs")
        .get_attribute("value")
        == "3"
    )

    # the DAGs, one DAG's runs, a run's graph
    click_and_wait(browser, browser.find_element(By.LINK_TEXT, "DAGs"))
    assert "FAILED" in _text(browser, "#dags")
    screenshot(browser, "dags")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "#dags a"))
    form = browser.find_element(By.ID, "trigger-form")
    form.find_element(By.NAME, "conf").send_keys('{"date": "2026-05-02"}')
    click_and_wait(browser, form.find_element(By.CSS_SELECTOR, "button"))
    assert _text(browser, ".flash") == "triggered"
    browser.get(f"{site}/dags/nightly_etl")
    assert len(browser.find_elements(By.CSS_SELECTOR, "#dag-runs tbody tr")) == 2
    screenshot(browser, "dag")
    browser.get(f"{site}/dags/nightly_etl/runs/{demo.ids['dag']}")
    states = {
        g.get_attribute("data-task"): g.get_attribute("data-state")
        for g in browser.find_elements(By.CSS_SELECTOR, "#dag-graph g.node")
    }
    assert states == {
        "extract": "success",
        "transform": "failed",
        "load": "upstream_failed",
        "page": "success",
    }
    # laid out left to right by level: each task's box starts right of its upstream task's
    x = {
        g.get_attribute("data-task"): g.find_element(By.TAG_NAME, "rect").rect["x"]
        for g in browser.find_elements(By.CSS_SELECTOR, "#dag-graph g.node")
    }
    assert x["extract"] < x["transform"] < x["load"] < x["page"]
    assert browser.find_element(By.ID, "retry-form")
    screenshot(browser, "dag-run")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "#retry-form button"))
    assert "retried" in _text(browser, ".flash")
    assert "carried over" in _text(browser, "#dag-tasks")

    browser.execute_cdp_cmd(
        "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": "dark"}]}
    )
    browser.get(f"{site}/dags/nightly_etl/runs/{demo.ids['dag']}")
    fill = browser.execute_script(
        "return getComputedStyle(document.querySelector('g.task-failed rect')).fill"
    )
    assert fill == "rgb(61, 27, 24)"  # the dark --bad-bg
    screenshot(browser, "dag-run-dark")
    browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})

    # pause a run, find it under PAUSED, resume it
    run = demo.ids["approval"]
    browser.get(f"{site}/workflows/{run}")
    form = browser.find_element(By.ID, "pause-form")
    form.find_element(By.NAME, "reason").send_keys("payments provider down")
    click_and_wait(browser, form.find_element(By.CSS_SELECTOR, "button"))
    assert "payments provider down" in _text(browser, "#paused")
    assert "resume-form" in _forms(browser)
    screenshot(browser, "execution-paused")
    browser.get(f"{site}/workflows")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, '.chips a[data-status="PAUSED"]'))
    assert [
        r.get_attribute("data-status") for r in browser.find_elements(By.CSS_SELECTOR, "#workflows tbody tr")
    ] == ["PAUSED"]
    browser.get(f"{site}/workflows/{run}")
    click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "#resume-form button"))
    assert _text(browser, ".flash") == "resumed"
    assert console_errors(browser) == []


def test_another_site_cannot_frame_the_dashboard_and_a_long_value_opens(browser: Any, db: str) -> None:
    """A page of another origin (another server, at localhost rather than 127.0.0.1) framing
    the dashboard gets no dashboard in its frame (clickjacking), while the dashboard itself
    renders under its policy: a long search attribute, cut on its line, opens with a click."""
    from starlette.applications import Starlette
    from starlette.responses import HTMLResponse
    from starlette.routing import Route

    whole = "tail-" * 40 + "the-end"
    with psycopg.connect(db, autocommit=True) as conn:
        (run,) = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow('wf', '[]', 'long', p_search_attributes => %s)",
            (f'{{"note": "{whole}"}}',),
        ).fetchone()
    with Served(dashboard_app(dsn=db, authorizer=TokenScopes(), timeout=3.0)) as served:

        async def framing(request: Any) -> HTMLResponse:
            return HTMLResponse(f"<iframe id='f' width=800 height=600 src='{served.url}/login'></iframe>")

        with Served(Starlette(routes=[Route("/", framing)])) as other:
            browser.get(other.url.replace("127.0.0.1", "localhost") + "/")
            browser.switch_to.frame(browser.find_element(By.ID, "f"))
            framed = browser.page_source
            browser.switch_to.default_content()
        assert "Harvest dashboard" not in framed  # (the login page, framed, says it)
        console_errors(browser)  # the refused frame is an expected console error

        sign_in(browser, served.url, "read-token")
        browser.get(f"{served.url}/workflows/{run}")
        summary = browser.find_element(By.CSS_SELECTOR, "details.whole summary")
        assert summary.text.endswith("…") and "the-end" not in summary.text
        summary.click()
        assert "the-end" in _text(browser, "details.whole[open] pre")
        assert console_errors(browser) == []  # no style or script the policy refused


def _wider_than_the_window(driver: Any) -> list[str]:
    """The page, or a table's sideways scroller, wider than the window: what a user made (an
    ID, a name, an error) must wrap, not push the page's columns and buttons off the screen."""
    return driver.execute_script(
        """const view = document.documentElement.clientWidth, out = [];
        if (document.documentElement.scrollWidth > view) out.push('the page');
        for (const s of document.querySelectorAll('.scroll'))
            if (s.scrollWidth > s.clientWidth + 1) out.push(s.firstElementChild.id || 'a table');
        for (const b of document.querySelectorAll('main button'))
            if (b.getBoundingClientRect().right > view) out.push('a button: ' + b.textContent);
        return out;"""
    )


def test_long_and_right_to_left_text_keeps_to_the_page(browser: Any, site: str, demo: Demo) -> None:
    """A run's ID, a signal's name and an error of thousands of characters without a space
    wrap where they are (the Replay button stays on the screen), and a right-to-left override
    (U+202E) in a name reverses that name only, not the text after it."""
    long_id = "L" * 900
    run = demo.client.start_workflow("greet", "x", workflow_id=long_id).execution_id
    billing = demo.client.start_workflow("billing", int("9" * 3000), workflow_id="invoice-long").execution_id
    demo.client.get_handle(demo.ids["approval"]).signal("\u202eevil-" + "S" * 300, 1)
    with demo.client.sql() as sql:
        wait_for(
            lambda: any(str(d["execution_id"]) == billing for d in sql.list_dead_letters(10)),
            "the long billing run's dead letter",
        )
    sign_in(browser, site, "admin-token")
    wide: dict[str, list[str]] = {}
    for page in (
        "/workflows?order=asc&workflow_name=greet",
        f"/workflows/{run}",
        f"/workflows/{demo.ids['approval']}",
        "/dead-letters",
    ):
        browser.get(site + page)
        wide[page] = _wider_than_the_window(browser)
    assert {page: what for page, what in wide.items() if what} == {}
    browser.get(f"{site}/workflows/{demo.ids['approval']}")
    # the override stays in the name: each piece of data is isolated from the text around it
    isolated = browser.execute_script(
        "return [...document.querySelectorAll('#signals strong, h1 .mono')]"
        ".map(e => getComputedStyle(e).unicodeBidi)"
    )
    assert set(isolated) == {"isolate"}
    assert console_errors(browser) == []


def test_a_multi_kb_dead_letter_error_keeps_the_dead_letters_table_in_the_page(browser: Any, db: str) -> None:
    """A dead letter's traceback of many KB was shown whole in its row, and the table grew as
    tall and as wide as the traceback (its longest line); the row shows the first line now, and
    the whole opens on a click."""
    frames = "".join(
        f'  File "/srv/app/billing.py", line {i}, in charge_{i}\n    step_{i}()\n' for i in range(150)
    )
    message = "CardDeclined: the card was declined\n" + frames + "x" * 3000
    with psycopg.connect(db, autocommit=True) as conn:
        (run,) = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow('billing', '[]', 'tb')"
        ).fetchone()
        conn.execute(
            "INSERT INTO harvest.dead_letters (execution_id, workflow_name, queue, attempts, failure,"
            " scheduled_at, failed_at, kind) VALUES (%s, 'billing', 'q', 1, %s, now(), now(), 'workflow')",
            (run, psycopg.types.json.Jsonb({"error_type": "CardDeclined", "message": message})),
        )
    with Served(dashboard_app(dsn=db, authorizer=TokenScopes(), timeout=3.0)) as served:
        sign_in(browser, served.url, "read-token")
        browser.get(f"{served.url}/dead-letters")
        row = browser.find_element(By.CSS_SELECTOR, "#dead-letters tbody tr")
        viewport = browser.execute_script("return document.documentElement.clientWidth")
        assert row.size["height"] < 200, row.size  # one line, not 300 lines
        assert browser.execute_script("return document.documentElement.scrollWidth") <= viewport
        assert "step_3()" not in row.text and "CardDeclined: the card was declined" in row.text
        row.find_element(By.CSS_SELECTOR, "details.whole summary").click()
        assert "step_3()" in row.find_element(By.CSS_SELECTOR, "details.whole pre").text
        assert browser.execute_script("return document.documentElement.scrollWidth") <= viewport
        assert console_errors(browser) == []


def test_a_failed_runs_page_keeps_to_a_phones_width(browser: Any, site: str, demo: Demo) -> None:
    """A failed run's failure (pretty JSON in the Run card's facts) whose message is a line wider
    than a phone: the facts' value column took the line's width, and the Run card, the
    Input and output card beside it and the page went past the screen (111 px at 390); the
    failure now scrolls sideways in its own box."""
    sign_in(browser, site, "read-token")
    browser.set_window_size(390, 844)
    try:
        browser.get(f"{site}/workflows/{demo.ids['dag']}")  # FAILED: DagRunFailed with a long message
        assert "FAILED" in _text(browser, "h1")
        assert _wider_than_the_window(browser) == []
        failure = browser.find_element(By.CSS_SELECTOR, "dl.facts pre")
        assert browser.execute_script("return arguments[0].scrollWidth > arguments[0].clientWidth", failure)
    finally:
        browser.set_window_size(1280, 900)
    assert console_errors(browser) == []


_CONTRAST = """
const rgb = s => (s.match(/[\\d.]+/g) || []).map(Number);
const lum = c => {
  const [r, g, b] = c.slice(0, 3).map(v => {
    v /= 255;
    return v <= 0.03928 ? v / 12.92 : ((v + 0.055) / 1.055) ** 2.4;
  });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
};
const background = e => {
  for (; e; e = e.parentElement) {
    const c = rgb(getComputedStyle(e).backgroundColor);
    if (c.length === 3 || c[3] > 0) return c;
  }
  return [255, 255, 255];
};
const out = [];
for (const e of document.querySelectorAll('.pill, button, .flash, .banner')) {
  if (!e.offsetParent) continue;
  const a = lum(rgb(getComputedStyle(e).color)), b = lum(background(e));
  const ratio = (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05);
  const what = e.tagName + '.' + e.className + ' "' + e.textContent.trim().slice(0, 20) + '" ';
  if (ratio < 4.5) out.push(what + ratio.toFixed(2));
}
return out;
"""


def test_status_chips_and_buttons_are_readable_in_light_and_dark_mode(
    browser: Any, site: str, demo: Demo
) -> None:
    """Every status chip, button and banner has a text contrast of 4.5:1 at least (WCAG AA) in
    both modes: the danger buttons (Terminate, Discard, Delete...) were white on the dark mode's
    light red, 2.28:1."""
    sign_in(browser, site, "admin-token")
    pages = demo_pages(demo)
    faint: dict[str, list[str]] = {}
    try:
        for mode in ("light", "dark"):
            browser.execute_cdp_cmd(
                "Emulation.setEmulatedMedia", {"features": [{"name": "prefers-color-scheme", "value": mode}]}
            )
            for page in pages:
                browser.get(site + page)
                if found := browser.execute_script(_CONTRAST):
                    faint[f"{mode} {page}"] = found
    finally:
        browser.execute_cdp_cmd("Emulation.setEmulatedMedia", {"features": []})
    assert faint == {}


def test_the_keyboard_skips_the_header_to_the_page(browser: Any, site: str, demo: Demo) -> None:
    """Keyboard only: the first Tab is a *Skip to the page* link, shown while it has the focus;
    following it, the next Tab is the page's first control (*Show them*, the payloads), not the
    header's nine links and sign out."""
    from selenium.webdriver.common.action_chains import ActionChains
    from selenium.webdriver.common.keys import Keys

    sign_in(browser, site, "admin-token")
    browser.get(f"{site}/workflows/{demo.ids['approval']}")
    ActionChains(browser).send_keys(Keys.TAB).perform()
    skip = browser.switch_to.active_element
    assert (skip.tag_name, skip.text) == ("a", "Skip to the page")
    box = browser.execute_script("const r = arguments[0].getBoundingClientRect(); return [r.x, r.y]", skip)
    assert box[0] >= 0 and box[1] >= 0  # on the screen while focused
    ActionChains(browser).send_keys(Keys.ENTER).perform()
    ActionChains(browser).send_keys(Keys.TAB).perform()
    first = browser.switch_to.active_element
    assert first.get_attribute("id") == "show-payloads"
    assert console_errors(browser) == []
