"""`harvest worker --health-port`: a real worker process's liveness and readiness probes. The
liveness goes 503 while an async activity blocks the event loop (a sync ``time.sleep``) and 200
again once it returns; the readiness is 503 while the worker boots, drains or cannot reach its
database (a scratch server frozen with SIGSTOP), answering at once all the same; a SIGTERM
during the boot's connection retries exits 0."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from outage_helpers import migrated_server
from worker_helpers import HARVEST, REPO

from harvest import App, Client, activity, workflow


@activity(start_to_close="120s")
async def block(ctx, secs: float) -> str:
    time.sleep(secs)  # a blocking call in async code: the event loop does not turn meanwhile
    return "done"


@activity(start_to_close="120s")
async def hold(ctx, folder: str) -> str:
    Path(folder, "started").touch()
    while not Path(folder, "go").exists():
        await asyncio.sleep(0.05)
    return "held"


@workflow
async def blocks(ctx, secs: float) -> str:
    return await ctx.execute_activity(block, secs)


@workflow
async def holds(ctx, folder: str) -> str:
    return await ctx.execute_activity(hold, folder)


app = App(workflows=[blocks, holds], activities=[block, hold])


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def probed() -> Iterator[Any]:
    """Start `harvest worker test_worker_probes:app --health-port P` on a database: (process, P)."""
    started: list[subprocess.Popen[str]] = []

    def start(dsn: str, **env: str) -> tuple[subprocess.Popen[str], int]:
        port = free_port()
        run_env = {k: v for k, v in os.environ.items() if not k.startswith("HARVEST_")}
        run_env |= {
            "HARVEST_DATABASE_URL": dsn,
            "HARVEST_SCHEDULER__ENABLED": "false",
            "HARVEST_WORKER__HEARTBEAT_INTERVAL": "0.5",
            "HARVEST_WORKER__LIVENESS_STALL_AFTER": "2",
            **env,
        }
        here = str(Path(__file__).resolve().parent)
        run_env["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(REPO / "harvest_py"), here, run_env.get("PYTHONPATH")) if p
        )
        proc = subprocess.Popen(
            [*HARVEST, "worker", "test_worker_probes:app", "--health-port", str(port)],
            env=run_env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        started.append(proc)
        return proc, port

    try:
        yield start
    finally:
        for proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.communicate(timeout=30)


def probe(port: int, path: str) -> tuple[int | None, dict[str, Any]]:
    """(status, body) of GET path; (None, {}) while nothing listens. A probe that does not answer
    within 5 s raises: the probes must answer whatever the loop or the database do."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)
    except (ConnectionRefusedError, urllib.error.URLError) as exc:
        if isinstance(exc, urllib.error.URLError) and not isinstance(exc.reason, ConnectionRefusedError):
            raise
        return None, {}


def until(
    proc: subprocess.Popen[str], port: int, path: str, status: int, reason: str | None = None
) -> dict[str, Any]:
    """Poll the probe until it answers ``status`` (and ``reason``, when given); the body."""
    deadline = time.monotonic() + 60
    seen: tuple[int | None, dict[str, Any]] = (None, {})
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise AssertionError(f"the worker exited {proc.returncode}: {proc.communicate()[1][-2000:]}")
        seen = probe(port, path)
        if seen[0] == status and (reason is None or seen[1].get("reason") == reason):
            return seen[1]
        time.sleep(0.05)
    raise AssertionError(f"{path} never answered {status} {reason or ''}; last {seen}")


def stopped(proc: subprocess.Popen[str]) -> str:
    """SIGTERM the worker; it must exit 0. Its stderr."""
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr[-3000:]
    return stderr


def test_liveness_fails_while_the_event_loop_is_blocked_and_recovers(db: str, probed, client: Client) -> None:
    proc, port = probed(db)
    until(proc, port, "/health/ready", 200)
    assert probe(port, "/health/live") == (200, {"status": "ok"})
    handle = client.start_workflow(blocks, 6.0)
    stalled = until(proc, port, "/health/live", 503)
    assert stalled["status"] == "stalled" and "has not turned" in stalled["reason"], stalled
    assert "worker.liveness_stall_after = 2 s" in stalled["reason"]
    until(proc, port, "/health/live", 200)
    assert handle.result(timeout=60) == "done"
    until(proc, port, "/health/ready", 200)
    stopped(proc)


def test_readiness_while_booting_and_a_sigterm_during_the_connection_retries_exits_0(probed) -> None:
    """A database that refuses connections (nothing listens): the boot retries for up to 30 s;
    the probes answer meanwhile (live, not ready: booting), and a SIGTERM ends the retries with
    exit 0 (it exited 1 with the last connection error)."""
    nowhere = f"postgresql://postgres@127.0.0.1:{free_port()}/harvest"
    proc, port = probed(nowhere)
    until(proc, port, "/health/ready", 503, "booting")
    assert probe(port, "/health/live")[0] == 200
    stderr = stopped(proc)
    assert "stopped while it waited for its database" in stderr, stderr[-3000:]


def test_readiness_while_draining(db: str, probed, client: Client, tmp_path: Path) -> None:
    proc, port = probed(db, HARVEST_WORKER__SHUTDOWN_GRACE="120")
    until(proc, port, "/health/ready", 200)
    client.start_workflow(holds, str(tmp_path))
    deadline = time.monotonic() + 60
    while not (tmp_path / "started").exists():
        assert time.monotonic() < deadline, "the activity never started"
        time.sleep(0.05)
    proc.send_signal(signal.SIGTERM)
    draining = until(proc, port, "/health/ready", 503, "draining")
    assert "claims no new work" in draining["message"]
    # Live all the same: a failed liveness would have the kubelet kill the drain before its grace.
    assert probe(port, "/health/live") == (200, {"status": "draining"})
    (tmp_path / "go").touch()  # (the run's next workflow task waits for another worker)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 0, stderr[-3000:]


def _postgres_processes(data_dir: Path) -> list[int]:
    """The postmaster of the data directory and its children (the backends)."""
    postmaster = int((data_dir / "postmaster.pid").read_text().split()[0])
    pids = [postmaster]
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            if int(stat.rsplit(")", 1)[1].split()[1]) == postmaster:
                pids.append(int(entry.name))
    return pids


@pytest.mark.chaos
def test_readiness_answers_503_at_once_while_the_database_is_frozen(probed) -> None:
    with migrated_server() as pg:
        proc, port = probed(pg.dsn)
        until(proc, port, "/health/ready", 200)
        frozen = _postgres_processes(pg.data_dir)
        for pid in frozen:
            os.kill(pid, signal.SIGSTOP)
        try:
            unreachable = until(proc, port, "/health/ready", 503, "database_unreachable")
            assert "no heartbeat reached the database" in unreachable["message"]
            assert probe(port, "/health/live")[0] == 200  # a restart would not bring the database back
        finally:
            for pid in frozen:
                os.kill(pid, signal.SIGCONT)
        until(proc, port, "/health/ready", 200)
        stopped(proc)
