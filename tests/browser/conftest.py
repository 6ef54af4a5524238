"""Dashboard fixtures: real runs on a real worker, and headless Chromium (the shared pieces are
in dashboard_helpers.py).

Chromium is Debian's (``make chromium`` installs ``chromium`` and ``chromium-driver``); nothing
downloads a browser. Without it the browser tests skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import demo_app
import pytest
from dashboard_demo import Demo, start_demo
from dashboard_helpers import make_driver


@pytest.fixture
def demo(db: str) -> Iterator[Demo]:
    found, worker = start_demo(db)
    try:
        yield found
    finally:
        demo_app.RELEASE.set()
        worker.stop()
        found.client.close()


# -- the browser ---------------------------------------------------------------------------------
@pytest.fixture
def browser() -> Iterator[Any]:
    driver = make_driver()
    try:
        yield driver
    finally:
        driver.quit()
