"""Dashboard fixtures: real runs on a real worker, and headless Chromium (the shared pieces are
in dashboard_helpers.py).

Chromium is Debian's (``make chromium`` installs ``chromium`` and ``chromium-driver``); nothing
downloads a browser. Without it the browser tests skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import demo_app
import psycopg
import pytest
from dashboard_demo import Demo, start_demo
from dashboard_helpers import TokenScopes, make_driver
from starlette.testclient import TestClient

from harvest.web.ui import dashboard_app


@pytest.fixture
def demo(db: str) -> Iterator[Demo]:
    found, worker = start_demo(db)
    try:
        yield found
    finally:
        demo_app.RELEASE.set()
        worker.stop()
        found.client.close()


@pytest.fixture
def client(db: str) -> Iterator[TestClient]:
    """The dashboard over one database (TokenScopes' tokens), which holds workflow schedule
    hourly/report (every hour, 2 active runs at most, queue reports): the schedule actions' and
    forms' tests."""
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(
            "SELECT harvest.create_schedule('hourly/report', 'report', p_interval_secs => 3600,"
            " p_max_active_runs => 2, p_queue => 'reports')"
        )
    app = dashboard_app(dsn=db, authorizer=TokenScopes())
    with TestClient(app, base_url="http://127.0.0.1:8080") as c:
        yield c


# -- the browser ---------------------------------------------------------------------------------
@pytest.fixture
def browser() -> Iterator[Any]:
    driver = make_driver()
    try:
        yield driver
    finally:
        driver.quit()
