"""``python -m examples.standalone_worker``: the worker service as its own process, and a drain.

On the embedded PostgreSQL (or ``HARVEST_DATABASE_URL``): start ``harvest worker`` with this
directory's harvest.toml, start three reports from a client, send the worker SIGTERM while it
renders, watch it finish what it holds and exit 0, then start a second worker that does the
rest, and read the three results.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from examples._runner import database, say
from examples.standalone_worker.client import start_reports
from harvest import Client

HERE = Path(__file__).resolve().parent
CONFIG = HERE / "harvest.toml"
ROOT = HERE.parents[1]


@dataclass
class DrainDemo:
    first_exit_code: int
    in_flight_at_sigterm: list[str]  # reports whose render had started when SIGTERM was sent
    finished_by_first: list[str]  # reports the first worker finished rendering
    results: dict[str, str]
    first_log: str


def harvest_command() -> list[str]:
    """The ``harvest`` entry point of this interpreter's environment."""
    script = Path(sys.executable).parent / "harvest"
    return [str(script)] if script.exists() else ["harvest"]


def start_worker(dsn: str, log_path: Path) -> subprocess.Popen[bytes]:
    """``harvest worker --config harvest.toml examples.standalone_worker.app:app``, as a service
    manager would run it (the database URL in the environment, never on the command line)."""
    # The inherited PYTHONPATH stays after the root: a worktree's run imports its own library.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "HARVEST_DATABASE_URL": dsn, "PYTHONPATH": path}
    with log_path.open("ab") as log:
        return subprocess.Popen(
            [*harvest_command(), "worker", "--config", str(CONFIG), "examples.standalone_worker.app:app"],
            cwd=ROOT,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


def wait_for(predicate: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} did not happen within {timeout:.0f}s")
        time.sleep(0.02)


def demo(dsn: str, out_dir: Path, count: int = 3, work_seconds: float = 1.0) -> DrainDemo:
    first_log, second_log = out_dir / "worker-1.log", out_dir / "worker-2.log"
    first = start_worker(dsn, first_log)
    try:
        with Client(dsn) as client:
            handles = start_reports(client, count, str(out_dir), work_seconds)
            say(f"started {count} reports; worker 1 (pid {first.pid}) renders two at a time")
            wait_for(lambda: any(out_dir.glob("*.started")), 60, "a render starting")
            in_flight = sorted(p.stem for p in out_dir.glob("*.started"))
            say(f"SIGTERM to worker 1 while it renders {', '.join(in_flight)}")
            first.send_signal(signal.SIGTERM)
            code = first.wait(timeout=60)
            finished = sorted(p.stem for p in out_dir.glob("*.report"))
            say(f"worker 1 exited {code} after finishing {', '.join(finished) or 'nothing'}")
            second = start_worker(dsn, second_log)
            try:
                results = {h.workflow_id or "": h.result(timeout=60) for h in handles}
            finally:
                second.send_signal(signal.SIGTERM)
                second.wait(timeout=60)
    finally:
        if first.poll() is None:
            first.kill()
            first.wait()
    for workflow_id, result in results.items():
        say(f"  {workflow_id}: {result}")
    return DrainDemo(code, in_flight, finished, results, first_log.read_text())


def main() -> int:
    with database() as dsn, tempfile.TemporaryDirectory(prefix="reports-") as out:
        result = demo(dsn, Path(out))
        drain_lines = [line for line in result.first_log.splitlines() if "in-flight" in line]
        say("worker 1's log: " + (drain_lines[0].strip() if drain_lines else "(no drain line)"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
