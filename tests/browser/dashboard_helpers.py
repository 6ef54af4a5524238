"""What the dashboard tests share (tests/browser and the shard test in tests/shard): a token
authorizer with one token per scope, uvicorn serving an app on a free loopback port, and
headless Chromium (Debian's chromium and chromium-driver; nothing downloads a browser)."""

from __future__ import annotations

import os
import shutil
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from starlette.exceptions import HTTPException

from harvest.web.principal import SCOPES, Principal

REPO = Path(__file__).resolve().parents[2]
# Every run saves its screenshots under build/ (ignored by git), so a test run leaves the tree
# clean; HARVEST_UPDATE_SCREENSHOTS=1 writes them over the ones docs/dashboard.md shows.
SCREENSHOTS = (
    REPO / "docs" / "img" / "dashboard"
    if os.environ.get("HARVEST_UPDATE_SCREENSHOTS") == "1"
    else REPO / "build" / "screenshots" / "dashboard"
)
TOKENS = {f"{scope}-token": scope for scope in SCOPES}  # read-token, operate-token, admin-token


def wait_for(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


class TokenScopes:
    """A test authorizer: ``Authorization: Bearer <scope>-token`` is a principal of that scope
    (actor ``<scope>-user``); no token is 401, a lower scope 403, as the management API's."""

    async def authorize(self, request: Any, needed: str) -> Principal:
        header = request.headers.get("authorization", "")
        scope = TOKENS.get(header.removeprefix("Bearer ").strip())
        if scope is None:
            raise HTTPException(401, "no token, or an unknown one: sign in with an API token")
        principal = Principal(actor=f"{scope}-user", scope=scope, source="ui")
        if not principal.allows(needed):
            raise HTTPException(403, f"this needs a token with the {needed} scope; yours has {scope}")
        return principal


# -- the dashboard served by uvicorn ---------------------------------------------------------------
class Served:
    """An ASGI app served by uvicorn in a thread on 127.0.0.1 (a real HTTP server for the browser)."""

    def __init__(self, app: Any):
        import uvicorn

        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            self.port = probe.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        config = uvicorn.Config(app, host="127.0.0.1", port=self.port, log_level="warning", lifespan="on")
        self.server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self.server.run, daemon=True)

    def __enter__(self) -> Served:
        self._thread.start()
        wait_for(lambda: self.server.started, "the dashboard server to start", 15)
        return self

    def __exit__(self, *exc: object) -> None:
        self.server.should_exit = True
        self._thread.join(15)


# -- the browser ---------------------------------------------------------------------------------
def chromium_or_skip() -> tuple[str, str]:
    """(chromium, chromedriver) from Debian's packages; skip without them, fail under CI=true."""
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or (
        "/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None
    )
    if browser and driver:
        return browser, driver
    message = (
        "headless Chromium is not installed (Debian's chromium and chromium-driver): run "
        "'make chromium' (as root) or 'sudo apt-get install -y chromium chromium-driver'"
    )
    if os.environ.get("CI") == "true":
        pytest.fail(message + "; CI=true requires the browser tests to run")
    pytest.skip(message)


def make_driver(width: int = 1280, height: int = 900) -> Any:
    """A headless Chromium driven by Selenium through Debian's chromedriver (no download)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = chromium_or_skip()
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        f"--window-size={width},{height}",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    return driver


def console_errors(driver: Any) -> list[dict[str, Any]]:
    """The browser console's errors since the last call (a failed load, a script error)."""
    return [e for e in driver.get_log("browser") if e.get("level") == "SEVERE"]


def sign_in(driver: Any, base_url: str, token: str) -> None:
    """Sign in through the login form (the token goes into the dashboard's cookie)."""
    from selenium.webdriver.common.by import By

    driver.get(f"{base_url}/login")
    driver.find_element(By.NAME, "token").send_keys(token)
    click_and_wait(driver, driver.find_element(By.CSS_SELECTOR, "form.action button[type=submit]"))
    wait_for(lambda: "/workflows" in driver.current_url, "the sign-in redirect", 15)


def click_and_wait(driver: Any, element: Any) -> None:
    """Click a link or a form's button and wait until the next page has replaced this one."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions
    from selenium.webdriver.support.ui import WebDriverWait

    page = driver.find_element(By.TAG_NAME, "html")
    element.click()
    # WebDriverWait ignores only NoSuchElementException by default: list the errors that mean
    # "the old page is gone". Chromium, asked about a node while the new page replaces it,
    # answers "Node with given id does not belong to the document" as an unknown error (a
    # loaded machine hits that window) instead of a stale reference.
    WebDriverWait(driver, 20).until(_gone(expected_conditions.staleness_of(page)))


def _gone(stale: Callable[[Any], Any]) -> Callable[[Any], bool]:
    from selenium.common.exceptions import WebDriverException

    def check(driver: Any) -> bool:
        try:
            return bool(stale(driver))
        except WebDriverException as exc:
            if "does not belong to the document" in str(exc):
                return True
            raise

    return check


def screenshot(driver: Any, name: str) -> Path:
    """Save the page (its full height) as <name>.png under SCREENSHOTS."""
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    path = SCREENSHOTS / f"{name}.png"
    width = driver.execute_script("return document.documentElement.clientWidth")
    height = driver.execute_script("return document.documentElement.scrollHeight")
    size = driver.get_window_size()
    driver.set_window_size(size["width"], min(max(height + 100, 600), 4000))
    try:
        driver.save_screenshot(str(path))
    finally:
        driver.set_window_size(size["width"], size["height"])
    assert width > 0
    return path
