"""The faces of the metrics: GET /admin/metrics (harvest/web/metrics.py) and `harvest metrics`;
the runs closed outside a decision, counted by the sampler and scraped from the route."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import time
from pathlib import Path

import cli_forks
import httpx
import psycopg
import pytest
from operator_helpers import HARVEST, REPO, harvest, start
from psycopg.types.json import Jsonb
from starlette.applications import Starlette
from starlette.exceptions import HTTPException

from harvest import App, Client, StartOptions, workflow
from harvest.core.errors import WorkflowTimedOut
from harvest.db.connection import connect_async
from harvest.db.sqlapi import AsyncSqlApi
from harvest.declare.flow_control import Concurrency
from harvest.telemetry.metrics import Metrics
from harvest.web.metrics import metrics_routes, run_samplers
from harvest.web.principal import Principal
from harvest.worker.sampler import MetricsSampler


async def _get(app, *headers: dict) -> list[httpx.Response]:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url="http://test") as http:
        return [await http.get("/admin/metrics", headers=h) for h in headers]


class TokenCheck:
    """A test Authorizer: token 'r' reads; anything else is refused."""

    def __init__(self) -> None:
        self.asked: list[str] = []

    async def authorize(self, request, needed):
        self.asked.append(needed)
        if request.headers.get("authorization") != "Bearer r":
            raise HTTPException(401, "no token")
        return Principal(actor="test", scope="read")


def test_the_route_serves_the_exposition_to_a_reader_only() -> None:
    metrics = Metrics()
    metrics.dispatched("q1", "activity", 0)
    authorizer = TokenCheck()
    app = Starlette(routes=metrics_routes(authorizer=authorizer, metrics=metrics))
    refused, ok = asyncio.run(_get(app, {}, {"authorization": "Bearer r"}))
    assert refused.status_code == 401
    assert ok.status_code == 200
    assert ok.headers["content-type"].startswith("text/plain; version=0.0.4")
    assert 'harvest_queue_dispatched_total{kind="activity",queue="q1"} 1.0' in ok.text
    assert authorizer.asked == ["read", "read"]


def test_without_an_authorizer_the_route_is_closed() -> None:
    (answer,) = asyncio.run(_get(Starlette(routes=metrics_routes()), {}))
    assert answer.status_code == 401
    assert answer.json()["error"]["code"] == "unauthenticated"


def test_harvest_metrics_prints_the_sampled_gauges(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        start(conn, "cli_metrics_wf", "cm-1", queue="cmq")
        start(conn, "cli_metrics_wf", "cm-2", queue="cmq")
    done = harvest(db, "metrics")
    assert done.returncode == 0, done.stderr
    assert 'harvest_queue_claimable{kind="workflow",queue="cmq",shard="0"} 2.0' in done.stdout
    assert 'harvest_shard_stranded_pending{queue="cmq",shard="0"} 2.0' in done.stdout
    assert 'harvest_schema_behind{shard="0"} 0.0' in done.stdout


def test_harvest_metrics_fails_when_no_database_answers() -> None:
    done = harvest("postgresql://nobody@127.0.0.1:1/none", "metrics")
    assert done.returncode == 1
    assert "error:" in done.stderr and "Traceback" not in done.stderr


def test_harvest_metrics_prints_the_sampled_gauges_only(db: str, tmp_path: Path) -> None:
    """A one-shot CLI has no counter to report: harvest_sampler_errors_total started at 0 on
    each run (1 at most: no rate() of it means anything), and the hot paths' counters and a
    worker's gauges were printed empty. A shard that cannot be read is named on stderr and has
    no harvest_sampler_last_success_timestamp_seconds (the alert pack's staleness check). (Its
    shard 1 refuses: named at once, though cli_timeout is 600 s and the run's bound 120.)"""
    (tmp_path / "harvest.toml").write_text(
        "[shards]\nreadable = [0, 1]\nwritable = [0]\ncli_timeout = 600\n"
        f'[shards.urls]\n0 = {json.dumps(db)}\n1 = "postgresql://alice@127.0.0.1:1/x"\n'
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARVEST_")}
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(REPO / "harvest_py"), str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if p
    )
    done = cli_forks.run(("metrics",), env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "shard 1 could not be sampled" in done.stderr
    assert 'harvest_sampler_last_success_timestamp_seconds{shard="0"}' in done.stdout
    assert 'harvest_sampler_last_success_timestamp_seconds{shard="1"}' not in done.stdout
    names = {line.split()[2] for line in done.stdout.splitlines() if line.startswith("# TYPE ")}
    assert "harvest_schema_behind" in names
    assert names.isdisjoint(
        {"harvest_sampler_errors", "harvest_queue_dispatched", "harvest_scanner_last_tick_timestamp_seconds"}
    ), names
    assert {line.split()[3] for line in done.stdout.splitlines() if line.startswith("# TYPE ")} == {"gauge"}


def test_harvest_metrics_refuses_json_output(db: str) -> None:
    """`-o json` is "for every command that prints one": Prometheus text is not JSON, so the
    command says so instead of printing text to a script that asked for JSON."""
    done = harvest(db, "-o", "json", "metrics")
    assert done.returncode == 2, done.stdout
    assert done.stdout == ""
    assert "prints Prometheus text only" in done.stderr and "Traceback" not in done.stderr


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_harvest_worker_serves_its_metrics_on_a_port(db: str) -> None:
    port = _free_port()
    path = os.pathsep.join(p for p in (str(Path(__file__).parent), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "HARVEST_DATABASE_URL": db, "PYTHONPATH": path}
    worker = subprocess.Popen(
        [*HARVEST, "worker", "telemetry_worker:app", "--metrics-port", str(port), "--log-format", "json"],
        env=env,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                text = httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=2).text
                if 'harvest_scanner_tick_total{outcome="ok",shard="0"}' in text:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline and worker.poll() is None, "no metrics served"
            time.sleep(0.2)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, stderr = worker.communicate(timeout=30)
    lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
    assert any(line["message"] == f"metrics on http://127.0.0.1:{port}/metrics" for line in lines), stderr


def test_a_web_process_can_run_the_sampler(db: str) -> None:
    metrics = Metrics()

    async def sample_a_while() -> None:
        task = asyncio.create_task(run_samplers({0: db}, interval=0.1, metrics=metrics))
        deadline = time.monotonic() + 20
        while metrics.registry.get_sample_value("harvest_schema_behind", {"shard": "0"}) is None:
            assert time.monotonic() < deadline and not task.done(), "no sample"
            await asyncio.sleep(0.05)
        task.cancel()

    asyncio.run(sample_a_while())
    assert metrics.registry.get_sample_value("harvest_timers_pending", {"shard": "0"}) == 0


@workflow
async def forced_waiter(ctx) -> None:
    await ctx.wait_for_signal("never")


@workflow(concurrency=Concurrency(key="input.doc", limit=1, on_conflict="cancel_running"))
async def forced_latest(ctx, doc: dict) -> None:
    await ctx.wait_for_signal("never")


FORCED = App(workflows=[forced_waiter, forced_latest])


def test_terminated_timed_out_and_superseded_runs_are_counted_and_scraped(
    db: str, start_worker, client: Client
) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(FORCED.flow_policies()),))
    start_worker(FORCED)  # its scanner times the run out
    metrics = Metrics()
    sampler = MetricsSampler(metrics, close_lag=0)

    async def sample() -> None:
        async with await connect_async(db, autocommit=True) as conn:
            await sampler.sample(AsyncSqlApi.on_connection(conn), 0)

    asyncio.run(sample())  # the first sample sets the cursor: nothing closed before counts
    terminated = client.start_workflow(forced_waiter)
    terminated.terminate("drill")
    timed_out = client.start_workflow(forced_waiter, options=StartOptions(execution_timeout="0.3s"))
    with pytest.raises(WorkflowTimedOut):
        timed_out.result(timeout=30)
    superseded = client.start_workflow(forced_latest, {"doc": "d1"})
    client.start_workflow(forced_latest, {"doc": "d1"})
    assert superseded.describe()["status"] == "CANCELLED"
    sizes = [len(h.history()) for h in (terminated, timed_out)]
    asyncio.run(sample())
    asyncio.run(sample())  # a second sample counts nothing again

    app = Starlette(routes=metrics_routes(authorizer=TokenCheck(), metrics=metrics))
    (scraped,) = asyncio.run(_get(app, {"authorization": "Bearer r"}))
    assert scraped.status_code == 200
    for line in (
        'harvest_workflow_terminal_total{status="TERMINATED",workflow_type="forced_waiter"} 1.0',
        'harvest_workflow_terminal_total{status="TIMED_OUT",workflow_type="forced_waiter"} 1.0',
        'harvest_workflow_terminal_total{status="CANCELLED",workflow_type="forced_latest"} 1.0',
        'harvest_concurrency_superseded_total{workflow="forced_latest"} 1.0',
        'harvest_workflow_history_size_count{workflow_type="forced_waiter"} 2.0',
        f'harvest_workflow_history_size_sum{{workflow_type="forced_waiter"}} {float(sum(sizes))}',
    ):
        assert line in scraped.text, line
