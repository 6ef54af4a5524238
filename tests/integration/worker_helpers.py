"""A real worker on its own event loop in a background thread (the integration and web suites),
and a real `harvest worker` process running one workflow."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.request
from pathlib import Path
from typing import Any

from harvest import Client, Worker

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent


def wait_until(check: Any, what: str, timeout: float = 30.0) -> Any:
    """Poll ``check`` every 50 ms until it answers something true, and answer that; an
    AssertionError naming ``what`` after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not (got := check()):
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)
    return got


def worker_process(db: str, module: str, options: str, *, stderr: Any = None) -> subprocess.Popen:
    """A worker process running ``module.APP`` (a test module beside this file) on ``db`` with
    the Worker arguments ``options`` (Python source), in a session of its own, to be killed or
    frozen; its logging at WARNING goes to ``stderr``."""
    code = (
        f"import asyncio, logging, harvest, {module} as t; logging.basicConfig(level=logging.WARNING); "
        f"asyncio.run(harvest.Worker(t.APP, {db!r}, {options}).run())"
    )
    path = os.pathsep.join(p for p in (str(HERE), os.environ.get("PYTHONPATH")) if p)
    return subprocess.Popen(
        [sys.executable, "-c", code],
        env={**os.environ, "PYTHONPATH": path},
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=stderr,
        start_new_session=True,
    )


HARVEST = [sys.executable, "-c", "from harvest.cli import main; main()"]


class RunningWorker:
    """A Worker on its own event loop in a thread; stopped (drained) at teardown."""

    def __init__(self, worker: Worker):
        self.worker = worker
        self.loop: asyncio.AbstractEventLoop | None = None
        self.error: BaseException | None = None
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
        if self.error is not None:
            raise self.error


def cli_env(db: str, env: dict[str, str]) -> dict[str, str]:
    """The environment of a `harvest` process on ``db``: this one's without its HARVEST_*
    variables, the tests' modules (beside this file) importable, then ``env`` over it."""
    run_env = {k: v for k, v in os.environ.items() if not k.startswith("HARVEST_")}
    run_env["HARVEST_DATABASE_URL"] = db
    run_env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "harvest_py"), str(HERE), run_env.get("PYTHONPATH")) if p
    )
    run_env.update(env)
    return run_env


def run_in_cli_worker(
    db: str, client: Client, target: str, workflow: Any, args: list[str], env: dict[str, str]
) -> tuple[Any, str]:
    """Run `harvest worker TARGET ARGS` (TARGET's module beside this file) with ENV over a clean
    HARVEST_* environment, start WORKFLOW and wait for its result, then stop the process with
    SIGTERM and check it exited cleanly: (the result, the process' stderr)."""
    run_env = cli_env(db, {"HARVEST_SCHEDULER__ENABLED": "false", **env})
    proc = subprocess.Popen(
        [*HARVEST, "worker", target, *args],
        env=run_env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        result = client.start_workflow(workflow).result(timeout=60)
    finally:
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr
    return result, stderr


def drain_over_http(base: str, worker_id: str) -> None:
    """POST /workers/{id}/drain to the management API at ``base``, as the dashboard's button
    does; the answer must accept it."""
    drain = urllib.request.Request(
        f"{base}/workers/{worker_id}/drain",
        data=b"{}",
        headers={"Content-Type": "application/json"},
        method="POST",
    )
    with urllib.request.urlopen(drain, timeout=5) as response:
        assert json.load(response)["outcome"] == "accepted"
