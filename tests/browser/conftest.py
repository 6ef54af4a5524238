"""Dashboard fixtures: real runs on a real worker, the dashboard served by uvicorn on a free
loopback port, a token authorizer with one token per scope, and headless Chromium.

Chromium is Debian's (``make chromium`` installs ``chromium`` and ``chromium-driver``); nothing
downloads a browser. Without it the browser tests skip, except under ``CI=true``, where they fail.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import demo_app
import pytest
from starlette.exceptions import HTTPException

from harvest import Client, Worker
from harvest.web.principal import SCOPES, Principal

REPO = Path(__file__).resolve().parents[2]
SCREENSHOTS = REPO / "docs" / "img" / "dashboard"
TOKENS = {f"{scope}-token": scope for scope in SCOPES}  # read-token, operate-token, admin-token


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


# -- a worker in a thread ------------------------------------------------------------------------
class RunningWorker:
    """A Worker on its own event loop in a thread (as tests/integration's), stopped at teardown."""

    def __init__(self, worker: Worker):
        self.worker, self.loop, self.error = worker, None, None
        self._ready = threading.Event()
        self._thread = threading.Thread(target=self._main, daemon=True)

    def _main(self) -> None:
        async def go() -> None:
            self.loop = asyncio.get_running_loop()
            self._ready.set()
            await self.worker.run()

        try:
            asyncio.run(go())
        except BaseException as exc:
            self.error = exc
            self._ready.set()

    def start(self) -> RunningWorker:
        self._thread.start()
        self._ready.wait(10)
        return self

    def stop(self) -> None:
        if self.loop is not None and self._thread.is_alive():
            self.loop.call_soon_threadsafe(self.worker.request_stop)
        self._thread.join(30)


def wait_for(check: Callable[[], Any], what: str, timeout: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.1)
    raise AssertionError(f"timed out waiting for {what}")


@dataclass
class Demo:
    """The runs the pages show: ids by name, the database, the client."""

    dsn: str
    client: Client
    ids: dict[str, str] = field(default_factory=dict)

    def status(self, execution_id: str) -> str:
        return self.client.get_handle(execution_id).describe()["status"]


def start_demo(dsn: str, worker_id: str = "worker-a") -> tuple[Demo, RunningWorker]:
    """A worker and one run of each kind, each settled where the pages show it."""
    demo_app.RELEASE.clear()
    worker = RunningWorker(
        Worker(demo_app.app, dsn, worker_id=worker_id, poll_interval=0.5, scan_interval=0.2)
    ).start()
    client = Client(dsn)
    demo = Demo(dsn, client)
    for i in range(3):
        demo.ids[f"greet-{i}"] = client.start_workflow(
            "greet", f"user-{i}", workflow_id=f"greet-{i}", search_attributes={"tenant": "acme", "n": i}
        ).execution_id
    demo.ids["approval"] = client.start_workflow(
        "approval", "order-7", workflow_id="order-7", search_attributes={"tenant": "globex"}
    ).execution_id
    demo.ids["billing"] = client.start_workflow("billing", 42, workflow_id="invoice-42").execution_id
    demo.ids["family"] = client.start_workflow("family", "fam", workflow_id="family-1").execution_id
    for n in range(2):
        demo.ids[f"batch-{n}"] = client.start_workflow("batch", n, workflow_id=f"batch-{n}").execution_id
    with client.sql() as sql:
        wait_for(
            lambda: all(sql.get_execution(demo.ids[f"greet-{i}"])["status"] == "COMPLETED" for i in range(3)),
            "the greet runs to complete",
        )
        wait_for(lambda: sql.list_dead_letters(10), "the billing run's dead letter")
        wait_for(
            lambda: any(
                e["event_type"] == "ActivityCompleted" for e in sql.get_history(demo.ids["approval"])
            ),
            "the approval run to wait for its signal",
        )
        wait_for(lambda: sql.list_children(demo.ids["family"]), "the family run's child")
        wait_for(
            lambda: any(k["in_flight"] for k in sql.list_concurrency_keys("acme")),
            "the acme key to have work in flight",
        )
    return demo, worker


@pytest.fixture
def demo(db: str) -> Iterator[Demo]:
    found, worker = start_demo(db)
    try:
        yield found
    finally:
        demo_app.RELEASE.set()
        worker.stop()
        found.client.close()


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
def _chromium() -> tuple[str, str] | None:
    browser = shutil.which("chromium") or shutil.which("chromium-browser")
    driver = shutil.which("chromedriver") or (
        "/usr/bin/chromedriver" if os.path.exists("/usr/bin/chromedriver") else None
    )
    return (browser, driver) if browser and driver else None


@pytest.fixture(scope="session")
def chromium() -> tuple[str, str]:
    found = _chromium()
    if found is None:
        message = (
            "headless Chromium is not installed (Debian's chromium and chromium-driver): run "
            "'make chromium' (as root) or 'sudo apt-get install -y chromium chromium-driver'"
        )
        if os.environ.get("CI") == "true":
            pytest.fail(message + "; CI=true requires the browser tests to run")
        pytest.skip(message)
    return found


@pytest.fixture
def browser(chromium: tuple[str, str]) -> Iterator[Any]:
    """A headless Chromium driven by Selenium through Debian's chromedriver (no download)."""
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    binary, driver_path = chromium
    options = webdriver.ChromeOptions()
    options.binary_location = binary
    for arg in (
        "--headless=new",
        "--no-sandbox",
        "--disable-dev-shm-usage",
        "--disable-gpu",
        "--window-size=1280,900",
        "--force-prefers-reduced-motion",
    ):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(executable_path=driver_path), options=options)
    driver.set_page_load_timeout(60)
    try:
        yield driver
    finally:
        driver.quit()
