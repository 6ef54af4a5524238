"""The runs list's bulk cancel in headless Chromium (marker browser): the list filtered, its runs
counted, the act confirmed with a reason, continued page by page, and its summary; an operator
is offered no bulk terminate; a signal by filter with its name and JSON payload. Screenshots:
bulk-runs-confirm, bulk-runs-progress, bulk-runs-done, bulk-signal-confirm."""

from __future__ import annotations

from typing import Any

import psycopg
import pytest
from dashboard_helpers import Served, TokenScopes, click_and_wait, console_errors, screenshot, sign_in
from selenium.webdriver.common.by import By

from harvest.web.ui import app as ui_app
from harvest.web.ui import dashboard_app

pytestmark = pytest.mark.browser


def _runs(db: str, name: str, n: int) -> list[str]:
    with psycopg.connect(db, autocommit=True) as conn:
        return [
            str(
                conn.execute(
                    "SELECT execution_id FROM harvest.start_workflow(%s, p_workflow_id => %s, "
                    "p_queue => 'nobody', p_search_attributes => '{\"tenant\": \"acme\"}')",
                    (name, f"{name}-{i}"),
                ).fetchone()[0]
            )
            for i in range(n)
        ]


def _text(driver: Any, css: str) -> str:
    return driver.find_element(By.CSS_SELECTOR, css).text


def test_cancel_the_runs_a_filter_selects_count_confirm_continue_summary(
    browser: Any, db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(ui_app, "RUN_BULK_STEPS", 1)  # a step a page: the Continue is clicked
    runs = _runs(db, "send_digest", 3)
    spared = _runs(db, "report", 1)
    with Served(dashboard_app(dsn=db, authorizer=TokenScopes(), timeout=3.0)) as served:
        site = served.url
        sign_in(browser, site, "operate-token")
        browser.get(f"{site}/workflows?workflow_name=send_digest&status=RUNNING")
        assert len(browser.find_elements(By.CSS_SELECTOR, "#workflows tbody tr")) == 3
        buttons = browser.find_elements(By.CSS_SELECTOR, "#bulk-runs-count button")
        offered = [b.get_attribute("value") for b in buttons]
        assert offered == ["cancel", "signal", "pause", "resume"]  # no terminate for operate
        click_and_wait(browser, buttons[0])

        assert _text(browser, "h1") == "Cancel 3 runs?"
        assert "send_digest" in _text(browser, "#bulk-filter") and "RUNNING" in _text(browser, "#bulk-filter")
        assert len(browser.find_elements(By.CSS_SELECTOR, "#bulk-sample li")) == 3
        browser.find_element(By.NAME, "reason").send_keys("incident 42")
        limit = browser.find_element(By.NAME, "limit")
        limit.clear()
        limit.send_keys("2")
        screenshot(browser, "bulk-runs-confirm")
        click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "#bulk-runs-form button"))

        assert _text(browser, "h1") == "Cancel runs: 2 cancelled so far"
        screenshot(browser, "bulk-runs-progress")
        click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "#bulk-continue-form button"))

        assert _text(browser, "h1") == "Cancel runs: done"
        summary = _text(browser, "#bulk-summary")
        assert summary.startswith("3 cancelled, 0 already ended, 0 unchanged"), summary
        assert "3 counted at the confirmation" in summary
        assert not browser.find_elements(By.ID, "bulk-continue-form")
        screenshot(browser, "bulk-runs-done")
        click_and_wait(browser, browser.find_element(By.ID, "bulk-back"))
        assert "workflow_name=send_digest" in browser.current_url
        assert console_errors(browser) == []

    with psycopg.connect(db, autocommit=True) as conn:
        asked = dict(
            conn.execute(
                "SELECT id::text, cancel_requested FROM harvest.executions WHERE id = ANY(%s::uuid[])",
                (runs + spared,),
            ).fetchall()
        )
    assert asked == {**dict.fromkeys(runs, True), **dict.fromkeys(spared, False)}


def test_signal_the_runs_a_filter_selects_with_a_name_and_a_payload(browser: Any, db: str) -> None:
    runs = _runs(db, "send_digest", 2)
    with Served(dashboard_app(dsn=db, authorizer=TokenScopes(), timeout=3.0)) as served:
        site = served.url
        sign_in(browser, site, "operate-token")
        browser.get(f"{site}/workflows?workflow_name=send_digest")
        signal = browser.find_element(By.CSS_SELECTOR, '#bulk-runs-count button[value="signal"]')
        click_and_wait(browser, signal)

        assert _text(browser, "h1") == "Signal 2 runs?"
        browser.find_element(By.NAME, "signal_name").send_keys("approved")
        browser.find_element(By.NAME, "payload").send_keys('{"by": "ops"}')
        browser.find_element(By.NAME, "reason").send_keys("rollout 7")
        screenshot(browser, "bulk-signal-confirm")
        click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "#bulk-runs-form button"))

        assert _text(browser, "h1") == "Signal runs: done"
        assert _text(browser, "#bulk-summary").startswith("2 signalled, 0 already ended, 0 unchanged")
        assert _text(browser, "#bulk-signal-name") == "approved"
        assert console_errors(browser) == []

    with psycopg.connect(db, autocommit=True) as conn:
        got = conn.execute(
            "SELECT execution_id::text, event_data -> 'payload' FROM harvest.events"
            " WHERE event_type = 'SignalReceived' AND event_data ->> 'name' = 'approved'"
        ).fetchall()
    assert sorted(r for r, _ in got) == sorted(runs) and {p["by"] for _, p in got} == {"ops"}


def test_discard_a_held_back_start_then_the_rest_by_filter(browser: Any, db: str) -> None:
    """The Held-back starts page: one start discarded through its confirmation, the rest by
    filter, a dry run first, then Discard them."""
    from test_dashboard_start_gates import _hold, _waiting

    ids = _hold(db, "acme", 3)
    with Served(dashboard_app(dsn=db, authorizer=TokenScopes(), timeout=3.0)) as served:
        site = served.url
        sign_in(browser, site, "admin-token")
        browser.get(f"{site}/start-gates")
        assert len(browser.find_elements(By.CSS_SELECTOR, "#start-gates tbody tr")) == 3
        click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "#start-gates tbody tr button"))
        assert _text(browser, "h1") == f"Discard held-back start 0:{ids[0]}?"
        browser.find_element(By.NAME, "reason").send_keys("sent twice")
        click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "#start-gate-confirm-form button"))
        assert "discarded" in _text(browser, ".flash")
        assert len(browser.find_elements(By.CSS_SELECTOR, "#start-gates tbody tr")) == 2

        bulk = browser.find_element(By.ID, "start-gates-bulk-form")
        bulk.find_element(By.NAME, "gate_key").send_keys("acme")
        click_and_wait(browser, bulk.find_element(By.CSS_SELECTOR, "button"))
        assert "dry run" in _text(browser, "h1")
        assert _waiting(db) == ids[1:]
        screenshot(browser, "start-gates-dry-run")
        click_and_wait(browser, browser.find_element(By.CSS_SELECTOR, "#start-gates-bulk-confirm button"))
        assert _text(browser, "#start-gates-bulk-results tbody tr").split()[:3] == ["0", "2", "2"]
        assert console_errors(browser) == []
    assert _waiting(db) == []
