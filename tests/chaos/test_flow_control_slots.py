"""SIGKILL workers that hold capped slots: no slot leaks, and the cap is never exceeded meanwhile."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import psycopg
import pytest
from harness import wait_until

pytestmark = pytest.mark.chaos

CAP = 3

APP_MODULE = textwrap.dedent(f"""
    import asyncio, logging, os, sys
    import harvest
    from harvest import App, RetryPolicy, activity, workflow

    @activity(max_concurrent={CAP}, concurrency_key="scarce", start_to_close="3s",
              retry=RetryPolicy(max_attempts=10, initial_interval=0.1))
    async def hold(ctx, n: int) -> int:
        await asyncio.sleep(60)
        return n

    @workflow
    async def many(ctx, n: int) -> list:
        return list(await asyncio.gather(*(ctx.execute_activity(hold, i) for i in range(n))))

    app = App(workflows=[many], activities=[hold])

    if __name__ == "__main__":
        logging.basicConfig(level=logging.INFO)
        worker = harvest.Worker(app, os.environ["HARVEST_DATABASE_URL"], concurrency=10,
                                scan_interval=0.2, poll_interval=0.3, shutdown_grace=0.5)
        asyncio.run(worker.run(install_signal_handlers=True))
""")


def running(dsn: str) -> list[tuple[str, int]]:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute(
            "SELECT lease_owner, id FROM harvest.tasks WHERE concurrency_key = 'scarce' "
            "AND status = 'running'"
        ).fetchall()


def test_killed_workers_slots_come_back_after_their_leases_expire(db: str, tmp_path: Path) -> None:
    (tmp_path / "fcapp.py").write_text(APP_MODULE)
    # (the inherited PYTHONPATH kept after the app's folder: a worktree's run imports its own library)
    path = os.pathsep.join(p for p in (str(tmp_path), os.environ.get("PYTHONPATH")) if p)
    env = dict(os.environ, HARVEST_DATABASE_URL=db, PYTHONPATH=path, PYTHONUNBUFFERED="1")
    procs: list[subprocess.Popen] = []

    def spawn() -> subprocess.Popen:
        log = open(tmp_path / f"worker-{len(procs)}.log", "wb")  # noqa: SIM115 - closed with the process
        proc = subprocess.Popen(
            [sys.executable, str(tmp_path / "fcapp.py")],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        procs.append(proc)
        return proc

    peaks: list[int] = []
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            peaks.append(len(running(db)))
            time.sleep(0.02)

    sampler = threading.Thread(target=sample)
    try:
        a, a2 = spawn(), spawn()
        import harvest

        with harvest.Client(db) as client:
            wait_until(lambda: running(db) or a.poll() is not None or _started(db), 20, "workers up")
            client.start_workflow("many", 8)
        sampler.start()
        held = wait_until(lambda: (r := running(db)) and len(r) == CAP and r, 30, "the cap to be reached")
        owners = {owner for owner, _ in held}
        for proc in (a, a2):
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)
        # Killed: the slots stay taken (their leases are live) ...
        assert len(running(db)) == CAP
        b = spawn()
        # ... until the leases expire; then the new worker fills the cap again.
        again = wait_until(
            lambda: (r := running(db)) and len(r) == CAP and all(o not in owners for o, _ in r) and r,
            40,
            "the cap to be reached again",
        )
        assert all(str(b.pid) in owner for owner, _ in again)
        time.sleep(1.0)
    finally:
        stop.set()
        if sampler.is_alive():
            sampler.join()
        for proc in procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait(10)
    assert peaks and max(peaks) <= CAP, max(peaks)


def _started(dsn: str) -> bool:
    with psycopg.connect(dsn, autocommit=True) as conn:
        return conn.execute("SELECT count(*) >= 2 FROM harvest.workers WHERE status = 'active'").fetchone()[0]
