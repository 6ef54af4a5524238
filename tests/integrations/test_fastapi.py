"""The FastAPI/Starlette lifespan (harvest.integrations.starlette): a real FastAPI app, its
lifespan run, requests through httpx's ASGI transport, on the test database."""

from __future__ import annotations

import asyncio
import json
import logging
import socket
import time
import urllib.error
import urllib.request
from typing import Any

import httpx
import pytest
from fastapi import FastAPI
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from harvest import App, Client, activity, workflow
from harvest.config import Config
from harvest.core.errors import ConfigError
from harvest.integrations.fastapi import HarvestClient, HarvestLifespan
from harvest.integrations.starlette import harvest_client

# An activity in flight when the app stops: the worker's drain lets it finish.
slow_started = asyncio.Event()


@activity
async def shout(ctx: Any, name: str) -> str:
    return name.upper()


@activity
async def slow(ctx: Any, name: str) -> str:
    slow_started.set()
    await asyncio.sleep(0.3)
    return f"slow {name}"


@workflow
async def greet(ctx: Any, name: str) -> str:
    return "hello " + await ctx.execute_activity(shout, name)


@workflow
async def lingering(ctx: Any, name: str) -> str:
    return await ctx.execute_activity(slow, name)


app = App(workflows=[greet, lingering], activities=[shout, slow])
FAST = {"poll_interval": 0.2, "scan_interval": 0.2, "shutdown_grace": 5.0}


def _fresh_started() -> None:
    """A new event for ``slow`` to set, on this test's loop (an Event waited on is bound to the
    loop of its first wait: the next test's asyncio.run could not wait on it)."""
    global slow_started
    slow_started = asyncio.Event()


def fastapi_app(db: str, **options: Any) -> FastAPI:
    options.setdefault("worker_options", FAST)
    options.setdefault("config", Config())
    harvest = HarvestLifespan(app, dsn=db, profile="dev", **options)
    api = FastAPI(lifespan=harvest)

    @api.post("/greet/{name}")
    async def start(name: str, client: HarvestClient) -> dict[str, Any]:
        handle = await client.start_workflow(greet, name, workflow_id=f"greet-{name}")
        return {"execution_id": handle.execution_id, "result": await handle.result(timeout=20)}

    @api.post("/linger/{name}")
    async def linger(name: str, client: HarvestClient) -> dict[str, Any]:
        handle = await client.start_workflow(lingering, name)
        return {"execution_id": handle.execution_id}

    return api


async def serve(api: Any, calls: Any) -> Any:
    """Run ``calls(http)`` inside the app's lifespan, as a server would."""
    async with api.router.lifespan_context(api):
        transport = httpx.ASGITransport(app=api)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
            return await calls(http)


def test_routes_start_workflows_the_in_process_worker_runs_and_the_api_is_mounted(db: str) -> None:
    api = fastapi_app(db, run_worker=True)

    async def calls(http: httpx.AsyncClient) -> dict[str, Any]:
        started = (await http.post("/greet/ann")).json()
        assert started["result"] == "hello ANN"
        # The management API, mounted at /api/harvest, sees the same run.
        run = await http.get(f"/api/harvest/workflows/{started['execution_id']}")
        assert run.status_code == 200, run.text
        assert run.json()["execution"]["status"] == "COMPLETED", run.json()
        assert (await http.get("/api/harvest/health/ready")).status_code == 200
        harvest = api.state.harvest
        assert harvest.worker is not None and harvest.management_api is not None
        assert harvest.management_api.state.harvest.opened  # its pools opened with the app
        return {"worker_id": harvest.worker.worker_id, "api": harvest.management_api}

    seen = asyncio.run(serve(api, calls))
    # Shut down cleanly: the worker stopped (its row says so), the client closed, the mount gone.
    with Client(db) as client, client.sql() as sql:
        assert sql.get_worker(seen["worker_id"])["status"] == "stopped"
    assert not seen["api"].state.harvest.opened  # the management API's pools closed
    with pytest.raises(RuntimeError, match="not started"):
        api.state.harvest.client  # noqa: B018
    assert not [r for r in api.router.routes if getattr(r, "path", "") == "/api/harvest"]


def test_shutdown_drains_the_activity_in_flight(db: str) -> None:
    api = fastapi_app(db, run_worker=True)

    async def calls(http: httpx.AsyncClient) -> str:
        _fresh_started()
        execution_id = (await http.post("/linger/bo")).json()["execution_id"]
        await asyncio.wait_for(slow_started.wait(), 10)
        return execution_id  # the app stops now, with the activity running

    execution_id = asyncio.run(serve(api, calls))
    with Client(db) as client:
        events = [e["event_type"] for e in client.get_handle(execution_id).history()]
    assert "ActivityCompleted" in events, events  # finished in the drain, not released


def test_a_shutdown_that_waits_for_work_in_flight_says_so(db: str, caplog: pytest.LogCaptureFixture) -> None:
    """A stop (SIGTERM, a --reload) waited up to worker.shutdown_grace for the activities in
    flight with no line a server's log shows (the worker's is INFO): it looked hung."""
    # An idle stop says nothing (first: no work of this test's is left for its worker to claim).
    with caplog.at_level(logging.WARNING, logger="harvest.integrations"):
        asyncio.run(serve(fastapi_app(db, run_worker=True), lambda http: asyncio.sleep(0)))
    assert not [r for r in caplog.records if "in flight" in r.getMessage()]

    api = fastapi_app(db, run_worker=True)

    async def calls(http: httpx.AsyncClient) -> None:
        _fresh_started()
        await http.post("/linger/di")
        await asyncio.wait_for(slow_started.wait(), 10)

    with caplog.at_level(logging.WARNING, logger="harvest.integrations"):
        asyncio.run(serve(api, calls))
    said = [r.getMessage() for r in caplog.records if r.name == "harvest.integrations"]
    assert any("1 task(s) in flight finish, within worker.shutdown_grace = 5 s" in m for m in said), said


def test_without_a_worker_runs_wait_for_one_and_the_api_can_stay_unmounted(db: str) -> None:
    api = fastapi_app(db, run_worker=False, mount_path=None)

    async def calls(http: httpx.AsyncClient) -> None:
        handle = await api.state.harvest.client.start_workflow(greet, "cy")
        assert (await handle.describe())["status"] == "RUNNING"
        assert api.state.harvest.worker is None
        assert (await http.get("/api/harvest/health/ready")).status_code == 404

    asyncio.run(serve(api, calls))


def test_the_mounted_api_reports_the_runtimes_this_process_runs(db: str) -> None:
    """HarvestLifespan(run_worker=False) runs no runtime, but its management API reported the
    role's (combined by default: all three on) in /admin/config and /admin/retention, and swept
    from POST /admin/retention/run-now as if it ran the janitor."""
    idle = fastapi_app(db, run_worker=False)
    narrowed = fastapi_app(db, run_worker=True, worker_options={**FAST, "run_retention": False})

    async def read(http: httpx.AsyncClient) -> tuple[dict[str, Any], dict[str, Any], httpx.Response]:
        config = (await http.get("/api/harvest/admin/config")).json()
        retention = (await http.get("/api/harvest/admin/retention")).json()
        return config, retention, await http.post("/api/harvest/admin/retention/run-now", json={})

    config, retention, swept = asyncio.run(serve(idle, read))
    assert {name: r["value"] for name, r in config["runtimes"].items()} == dict.fromkeys(
        ("worker.enabled", "scheduler.enabled", "retention.enabled"), False
    ), config["runtimes"]
    assert config["runtimes"]["worker.enabled"]["source"] == "off (HarvestLifespan(run_worker=False))"
    assert config["retention"]["runs_here"] is False and retention["placed_elsewhere"] is True
    assert swept.status_code == 503 and "run_worker=True" in swept.json()["error"]["message"], swept.text
    config, retention, swept = asyncio.run(serve(narrowed, read))
    runtimes = config["runtimes"]
    assert (runtimes["worker.enabled"]["value"], runtimes["scheduler.enabled"]["value"]) == (True, True)
    assert runtimes["retention.enabled"] == {
        "value": False,
        "source": "explicit (HarvestLifespan worker_options)",
    }
    assert retention["placed_elsewhere"] is True and swept.status_code == 503
    # It advised run_worker=True, which this app has: the worker_options turn the janitor off.
    advice = swept.json()["error"]["message"]
    assert "run_worker=True" not in advice and "run_retention" in advice, advice
    # retention.enabled = true set, and the process runs no janitor: the refusal names why
    # (run_worker=False), not run_on, which the switch overrides anyway.
    switched_on = fastapi_app(
        db, run_worker=False, config=Config().with_overrides({"retention.enabled": (True, "harvest.toml")})
    )
    _, _, swept = asyncio.run(serve(switched_on, read))
    message = swept.json()["error"]["message"]
    assert swept.status_code == 503 and "run_worker=True" in message and "run_on" not in message, swept.text


def test_a_plain_starlette_app_and_a_lifespan_of_its_own(db: str) -> None:
    harvest = HarvestLifespan(app, dsn=db, config=Config(), profile="dev")
    opened: list[str] = []

    async def count(request: Request) -> JSONResponse:
        result = await harvest_client(request).sql.count_executions()
        return JSONResponse({"groups": len(result)})

    import contextlib

    @contextlib.asynccontextmanager
    async def lifespan(asgi_app: Starlette) -> Any:
        async with harvest(asgi_app):  # Harvest inside the app's own lifespan
            opened.append("mine")
            yield

    api = Starlette(routes=[Route("/count", count)], lifespan=lifespan)

    async def calls(http: httpx.AsyncClient) -> None:
        assert (await http.get("/count")).status_code == 200
        assert (await http.get("/api/harvest/openapi.json")).status_code == 200

    asyncio.run(serve(api, calls))
    assert opened == ["mine"]


def test_bad_arguments_are_refused_at_construction() -> None:
    with pytest.raises(ValueError, match="needs the App"):
        HarvestLifespan(run_worker=True)
    with pytest.raises(ValueError, match="must start with /"):
        HarvestLifespan(app, mount_path="api/")
    # A mistyped worker option was Python's own TypeError from WorkerOptions, at startup.
    with pytest.raises(
        TypeError, match=r"'concurency' is not a WorkerOptions field \(did you mean 'concurrency'\?\)"
    ):
        HarvestLifespan(app, run_worker=True, worker_options={"concurency": 4})
    with pytest.raises(ValueError, match=r"health_port=.*needs run_worker=True .*/api/harvest/health/live"):
        HarvestLifespan(app, health_port=8081)


def test_an_app_stopped_at_once_stops_its_worker(db: str) -> None:
    # Shutdown right after startup, before the worker task has run far enough to hand over
    # its Worker: the stop must still reach it (it used to wait for a worker never asked to
    # stop, and the app never shut down).
    api = fastapi_app(db, run_worker=True)

    async def nothing(http: httpx.AsyncClient) -> None:
        return None

    async def stopped() -> None:
        await asyncio.wait_for(serve(api, nothing), 20)

    asyncio.run(stopped())
    assert api.state.harvest.worker is None


@pytest.mark.parametrize(
    ("statement", "missing", "extra"),
    [
        ("import harvest.integrations.fastapi", "fastapi", "fastapi"),
        ("import harvest.integrations.starlette", "starlette", "web"),
        ("import harvest.integrations.starlette", "jinja2", "web"),
        ("from harvest.web import management_app", "starlette", "web"),
        ("from harvest.web import management_app", "jinja2", "web"),
        ("from harvest.web.ui import dashboard_app", "jinja2", "web"),
        ("from harvest.web.streams import stream_routes", "starlette", "web"),
        ("from harvest.web.metrics import metrics_routes", "starlette", "web"),
        ("import harvest.integrations.django", "django", "django"),
        ("from harvest.telemetry.tracing import configure; configure()", "opentelemetry", "otel"),
    ],
)
def test_a_missing_extra_is_named_with_its_install_line(statement: str, missing: str, extra: str) -> None:
    """docs/integrations.md: an ImportError naming the missing package and the pip line, once."""
    import subprocess
    import sys

    code = f"import sys; sys.modules[{missing!r}] = None; {statement}"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode != 0
    last = done.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError") and f"pip install 'harvest-workflows[{extra}]'" in last, last
    assert f"No module named {missing!r}" in last and last.count("pip install") == 1, last


def test_the_api_is_reached_past_a_catch_all_route_of_the_app(db: str) -> None:
    # A single-page app's fallback (a route matching every path) declared by the app before the
    # lifespan mounts the management API must not swallow the API's paths.
    api = fastapi_app(db, run_worker=False)

    @api.get("/{path:path}")
    async def fallback(path: str) -> dict[str, str]:
        return {"page": path}

    async def calls(http: httpx.AsyncClient) -> None:
        ready = await http.get("/api/harvest/health/ready")
        assert ready.status_code == 200 and "page" not in ready.json(), ready.text
        assert (await http.get("/elsewhere")).json() == {"page": "elsewhere"}

    asyncio.run(serve(api, calls))


def test_a_route_of_an_app_whose_lifespan_did_not_run_says_so(db: str) -> None:
    # A test's TestClient(api) without `with`, or httpx's ASGITransport alone, runs no lifespan:
    # the app has a HarvestLifespan, and the error said it had none.
    api = fastapi_app(db, run_worker=False)

    async def call() -> None:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=api), base_url="http://app") as http:
            await http.post("/greet/x")

    with pytest.raises(RuntimeError) as raised:
        asyncio.run(call())
    message = str(raised.value)
    assert "has not started" in message and "lifespan_context" in message, message
    assert "has no HarvestLifespan" not in message, message


def test_no_database_names_the_lifespans_own_argument(monkeypatch: pytest.MonkeyPatch) -> None:
    # It said "or pass --database-url", a flag of the CLI's, not of HarvestLifespan.
    monkeypatch.delenv("HARVEST_DATABASE_URL", raising=False)
    api = FastAPI(lifespan=HarvestLifespan(app, config=Config()))

    async def start() -> None:
        async with api.router.lifespan_context(api):
            pass

    with pytest.raises(ConfigError) as raised:
        asyncio.run(start())
    message = str(raised.value)
    assert "HarvestLifespan(dsn=...)" in message and "--database-url" not in message, message


def test_a_path_the_mounted_api_lacks_points_to_its_own_openapi_document(db: str) -> None:
    # The 404 said "see /openapi.json": under a mount that is the app's own document (FastAPI's,
    # without the API's routes) or nothing; the API's is at <mount_path>/openapi.json.
    api = fastapi_app(db, run_worker=False)

    async def calls(http: httpx.AsyncClient) -> None:
        missing = await http.get("/api/harvest/nothing")
        assert missing.status_code == 404, missing.text
        message = missing.json()["error"]["message"]
        assert "see /api/harvest/openapi.json" in message, message
        document = (await http.get("/api/harvest/openapi.json")).json()
        assert "/health/ready" in document["paths"]

    asyncio.run(serve(api, calls))


def test_an_unreachable_redis_fails_the_lifespan_startup(db: str) -> None:
    """redis.url set and its Redis unreachable: the startup fails with RedisUnavailable (the
    boot is strict in every mode: docs/redis-dispatch.md), naming the endpoint and not the
    password. It used to start serving, the in-process worker's failure only logged, so the app
    looked healthy and nothing ran its queues."""
    import socket

    pytest.importorskip("redis")
    from harvest.config import load_config
    from harvest.core.errors import RedisUnavailable

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    config = load_config(env={"HARVEST_REDIS__URL": f"redis://:s3cret@127.0.0.1:{port}/0"})
    served = []

    async def calls(http: httpx.AsyncClient) -> None:
        served.append(True)

    with pytest.raises(RedisUnavailable) as refused:
        asyncio.run(serve(fastapi_app(db, run_worker=True, config=config), calls))
    assert not served, "the app served without its worker"
    assert f"redis://127.0.0.1:{port}/0 cannot be reached" in str(refused.value)
    assert "s3cret" not in str(refused.value)


def test_a_worker_that_cannot_start_fails_the_lifespan_startup(pg_server: Any, db: str) -> None:
    """The in-process worker cannot start (here its login may read and operate but is not a
    harvest_worker: its registration is refused; alike a database that went away after the
    client connected, a schema check the worker's pool fails): the startup fails with the
    worker's own error, before the app serves. It used to serve, the worker's failure only
    logged, so the app looked healthy and nothing ran its queues."""
    import uuid

    from psycopg import conninfo

    user = f"u_noworker_{uuid.uuid4().hex[:8]}"
    with pg_server.admin() as admin:
        admin.execute(f'CREATE ROLE "{user}" LOGIN')
        admin.execute(f'GRANT harvest_reader, harvest_operator, harvest_admin TO "{user}"')
    served = []

    async def calls(http: httpx.AsyncClient) -> None:
        served.append(True)

    try:
        api = fastapi_app(conninfo.make_conninfo(db, user=user, password=""), run_worker=True)
        with pytest.raises(Exception, match="permission denied"):
            asyncio.run(serve(api, calls))
        assert not served, "the app served without its worker"
        assert api.state.harvest.worker is None
    finally:
        with pg_server.admin() as admin:
            admin.execute(f'DROP ROLE IF EXISTS "{user}"')


def test_a_worker_that_dies_after_startup_fails_the_probes_and_the_shutdown(
    db: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The in-process worker ends by itself while the app serves (a bug, a refusal at run time):
    the error is logged, HarvestLifespan.worker_failure holds it, every health probe of the
    mounted API answers 503 naming the error's type (not its text: probes are unauthenticated),
    and the shutdown raises it. It used to be one log line, the probes said ok."""
    from harvest.worker.worker import Worker

    async def broken_claim_loop(self: Worker) -> None:
        raise RuntimeError("the claim loop broke")

    monkeypatch.setattr(Worker, "_claim_loop", broken_claim_loop)
    api = fastapi_app(db, run_worker=True)

    seen: dict[str, Any] = {}

    async def calls(http: httpx.AsyncClient) -> None:
        # (recorded, asserted after: the shutdown's own error would hide an assertion's here)
        harvest = api.state.harvest
        for _ in range(500):
            if harvest.worker_failure is not None:
                break
            await asyncio.sleep(0.01)
        seen["failure"] = harvest.worker_failure
        for probe in ("/health", "/health/live", "/health/ready"):
            seen[probe] = await http.get(f"/api/harvest{probe}")

    with pytest.raises(RuntimeError, match="the claim loop broke"):
        asyncio.run(serve(api, calls))
    assert isinstance(seen["failure"], RuntimeError)
    for probe in ("/health", "/health/live", "/health/ready"):
        answer = seen[probe]
        assert answer.status_code == 503, (probe, answer.text)
        body = answer.json()
        assert body["status"] == "worker_stopped" and "RuntimeError" in body["error"]["message"], body
        assert "claim loop broke" not in answer.text
    assert "the in-process worker stopped: the claim loop broke" in caplog.text


def test_a_startup_cancelled_during_the_worker_boot_stops_the_worker(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The server gives up its startup (a signal, a startup timeout) while the worker still boots
    (a slow database): the worker is asked to stop and awaited, not left running beside a
    lifespan that closed its client and pools under it."""
    from harvest.worker.worker import Worker

    booting: list[Worker] = []

    async def slow_open_lanes(self: Worker) -> None:
        booting.append(self)
        await self._stopping.wait()
        raise RuntimeError("stopped while booting")

    monkeypatch.setattr(Worker, "_open_lanes", slow_open_lanes)

    async def nothing(http: httpx.AsyncClient) -> None:
        raise AssertionError("served")

    async def scenario() -> bool:
        startup = asyncio.create_task(serve(fastapi_app(db, run_worker=True), nothing))
        for _ in range(1000):
            if booting:
                break
            await asyncio.sleep(0.01)
        assert booting, "the worker never began its boot"
        startup.cancel()
        with pytest.raises(asyncio.CancelledError):
            await startup
        return booting[0].stopping

    assert asyncio.run(scenario()), "the worker was left booting after the startup was cancelled"


def test_a_remote_drain_of_the_in_process_worker_is_reported_and_the_app_serves_on(db: str) -> None:
    """A drain of HarvestLifespan's worker (`harvest worker drain`, the dashboard's button)
    stops the worker, not the app: the mounted API said `runs_here: true` after it, though the
    claim loop, the scheduler and the janitor had stopped."""
    api = fastapi_app(
        db,
        run_worker=True,
        worker_options={**FAST, "heartbeat_interval": 0.1, "worker_id": "lifespan-drained"},
    )

    async def calls(http: httpx.AsyncClient) -> dict[str, Any]:
        drained = await http.post("/api/harvest/workers/lifespan-drained/drain", json={})
        assert drained.json()["outcome"] == "accepted", drained.text
        deadline = time.monotonic() + 60  # (a bound, not a timing: the drain takes about 0.3 s)
        config = (await http.get("/api/harvest/admin/config")).json()
        while config["worker"]["drained"] is None and time.monotonic() < deadline:
            await asyncio.sleep(0.02)
            config = (await http.get("/api/harvest/admin/config")).json()
        return {
            "config": config,
            "ready": await http.get("/api/harvest/health/ready"),
        }

    seen = asyncio.run(serve(api, calls))
    worker = seen["config"]["worker"]
    assert worker["runs_here"] is False and worker["drained"]["worker_id"] == "lifespan-drained", worker
    assert all(not r["value"] for r in seen["config"]["runtimes"].values()), seen["config"]["runtimes"]
    ready = seen["ready"]
    assert ready.status_code == 200 and ready.json()["runtimes"] == "drained", ready.text
    assert ready.json()["drained_at"] == worker["drained"]["at"]


def test_an_app_answering_with_harvest_error_handler_logs_an_outages_count_at_shutdown(
    db: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A route of the app meeting a database down answers with harvest_error_handler's 503: the
    outage's first request is logged, the rest counted, and the count not said yet is logged when
    the app stops (HarvestLifespan closes the app's outage log, as the management API's lifespan
    closes its own). It was never said: no shutdown line for the app's own routes."""
    import logging

    from harvest.core.errors import DatabaseUnavailable, HarvestError
    from harvest.integrations.starlette import harvest_error_handler

    async def down(request: Request) -> JSONResponse:
        raise DatabaseUnavailable("the database cannot be reached now (Connection refused)")

    api = Starlette(
        routes=[Route("/down", down)],
        lifespan=HarvestLifespan(app, dsn=db, config=Config(), profile="dev", run_worker=False),
        exception_handlers={HarvestError: harvest_error_handler},
    )
    caplog.set_level(logging.WARNING, logger="harvest.web")

    async def calls(http: httpx.AsyncClient) -> list[str]:
        return [(await http.get("/down")).json()["error"]["request_id"] for _ in range(3)]

    ids = asyncio.run(serve(api, calls))
    said = [r.getMessage() for r in caplog.records if r.name == "harvest.web" and "outage" in r.getMessage()]
    assert len(said) == 2 and f"request {ids[0]}: outage {ids[0][:8]} begins" in said[0], said
    assert f"outage {ids[0][:8]} at shutdown: 2 more requests" in said[1], said


def _probe(port: int, path: str) -> tuple[int, dict[str, Any]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, json.load(response)
    except urllib.error.HTTPError as exc:
        return exc.code, json.load(exc)


def test_health_port_serves_the_in_process_workers_probes_and_closes_with_the_app(db: str) -> None:
    """HarvestLifespan(health_port=P): the in-process worker's liveness and readiness, as
    `harvest worker --health-port` serves them (there were none but the app's own, which say
    nothing of a draining worker or one whose heartbeats no longer reach the database)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    api = fastapi_app(db, run_worker=True, health_port=port)

    async def calls(http: httpx.AsyncClient) -> Any:
        ready = await asyncio.to_thread(_probe, port, "/health/ready")
        live = await asyncio.to_thread(_probe, port, "/health/live")
        return ready, live, api.state.harvest.worker.worker_id

    ready, live, worker_id = asyncio.run(serve(api, calls))
    assert ready == (200, {"status": "ready", "worker_id": worker_id})
    assert live == (200, {"status": "ok"})
    with pytest.raises(urllib.error.URLError):  # closed with the app: its port is free again
        _probe(port, "/health/live")
