"""`harvest serve` and `harvest dev` serve the management API over real HTTP."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

import pytest
from worker_helpers import drain_over_http

HARVEST = [sys.executable, "-c", "from harvest.cli import main; main()"]


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _get(url: str, timeout: float = 30) -> tuple[int, dict]:
    deadline = time.monotonic() + timeout
    while True:
        try:
            with urllib.request.urlopen(url, timeout=5) as response:
                return response.status, json.loads(response.read())
        except urllib.error.HTTPError:
            raise
        except OSError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.2)


def _run(args: list[str], env: dict[str, str]) -> subprocess.Popen:
    return subprocess.Popen(
        [*HARVEST, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _stop(process: subprocess.Popen) -> tuple[str, str]:
    process.send_signal(signal.SIGINT)
    try:
        return process.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        process.kill()
        return process.communicate()


def test_serve_answers_as_a_web_replica(db: str) -> None:
    port = _free_port()
    env = {**os.environ, "HARVEST_DATABASE_URL": db, "HARVEST_PROFILE": "dev"}
    process = _run(["serve", "--port", str(port)], env)
    try:
        base = f"http://127.0.0.1:{port}/api/harvest"
        assert _get(f"{base}/health/ready")[0] == 200
        status, config = _get(f"{base}/admin/config")
        assert status == 200 and config["role"] == "web" and config["retention"]["runs_here"] is False
    finally:
        _, err = _stop(process)
    assert f"http://127.0.0.1:{port}/api/harvest" in err
    # The web replica's startup line, and the one note that its retention runs elsewhere.
    runtimes = [x for x in err.splitlines() if "harvest runtimes: " in x]
    assert len(runtimes) == 1, err
    assert "role=web (source: explicit (harvest serve))" in runtimes[0]
    assert "worker.enabled=false (source: role web)" in runtimes[0]
    notes = [x for x in err.splitlines() if "retention runs where the scheduler runs" in x]
    assert len(notes) == 1 and "run_on=scheduler" in notes[0] and "RUN_ON=all" in notes[0], err
    assert "nothing to do" in notes[0], err  # a new user read the old note as a fault


def test_serve_runs_the_runtimes_its_plan_places_here(db: str) -> None:
    """run_on = "all" places the janitor in every process, and an explicit scheduler.enabled the
    scheduler: `harvest serve` reported them (/admin/config, placed_elsewhere false) but ran
    neither, so a fleet whose run_on = "all" group was its web replicas swept nothing."""
    import psycopg

    with psycopg.connect(db, autocommit=True) as conn:
        row = conn.execute("SELECT execution_id FROM harvest.start_workflow('pinger', '[1]', 'old', 'alpha')")
        execution_id = row.fetchone()[0]
        conn.execute("SELECT harvest.terminate_workflow(%s, 'done')", (execution_id,))
        conn.execute("SELECT harvest.set_retention('1 day')")
        conn.execute(
            "UPDATE harvest.executions SET completed_at = completed_at - interval '2 days' WHERE id = %s",
            (execution_id,),
        )
        port = _free_port()
        env = {
            **os.environ,
            "HARVEST_DATABASE_URL": db,
            "HARVEST_PROFILE": "dev",
            "HARVEST_RETENTION__RUN_ON": "all",
            "HARVEST_RETENTION__INTERVAL": "0.1",
        }
        process = _run(["serve", "--port", str(port)], env)
        try:
            status, config = _get(f"http://127.0.0.1:{port}/api/harvest/admin/config")
            assert status == 200 and config["retention"]["runs_here"] is True
            deadline = time.monotonic() + 30
            while (
                time.monotonic() < deadline
                and conn.execute("SELECT 1 FROM harvest.executions WHERE id = %s", (execution_id,)).fetchone()
            ):
                time.sleep(0.1)
            assert not conn.execute(
                "SELECT 1 FROM harvest.executions WHERE id = %s", (execution_id,)
            ).fetchone()
            # No claim loop: a web replica registers no worker row (coverage stays honest).
            assert conn.execute("SELECT count(*) FROM harvest.workers").fetchone()[0] == 0
        finally:
            _, err = _stop(process)
    assert process.returncode == 0, err
    runtimes = [x for x in err.splitlines() if "harvest runtimes: " in x]
    assert len(runtimes) == 1 and "retention.enabled=true" in runtimes[0], err


def test_a_web_replica_without_an_app_ignores_the_fleets_queue_list() -> None:
    """A shared environment's HARVEST_WORKER__QUEUES names the App's queues; a web replica with
    no --app that runs only the janitor polls nothing, so the list must not stop its boot."""
    from harvest.cli.serve import PlacedRuntimes
    from harvest.config import load_config

    config = load_config(
        env={"HARVEST_ROLE": "web", "HARVEST_RETENTION__RUN_ON": "all", "HARVEST_WORKER__QUEUES": "priority"}
    )
    runtimes = PlacedRuntimes(None, config, "postgresql://unused")
    assert runtimes.options is not None
    assert (runtimes.options.run_worker, runtimes.options.run_scanner, runtimes.options.run_retention) == (
        False,
        False,
        True,
    )


def test_serve_with_an_app_refuses_an_undeclared_queue_as_a_worker_does() -> None:
    """With an App (`harvest serve --app`, HarvestLifespan) the declared queues are known: a
    typo in worker.queues stops the boot (the API booted and GET /admin/config answered 500
    config_error at every request)."""
    from harvest import App, workflow
    from harvest.config import load_config
    from harvest.core.errors import ConfigError
    from harvest.web.app import management_app

    @workflow(queue="priority")
    async def urgent(ctx) -> None:
        return None

    config = load_config(env={"HARVEST_ROLE": "web", "HARVEST_WORKER__QUEUES": "Priority"})
    with pytest.raises(
        ConfigError, match="names 'Priority', which the App does not declare; declared queues: priority"
    ):
        management_app(dsn="postgresql://unused", config=config, profile="dev", app=App(workflows=[urgent]))


def test_serve_with_the_worker_switched_on_needs_the_app(db: str) -> None:
    env = {**os.environ, "HARVEST_DATABASE_URL": db, "HARVEST_WORKER__ENABLED": "true"}
    result = subprocess.run(
        [*HARVEST, "serve", "--port", "0"], env=env, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 1
    last = result.stderr.splitlines()[-1]
    assert "worker.enabled=true (source: explicit (HARVEST_WORKER__ENABLED))" in last and "--app" in last


def test_serve_outside_dev_fails_closed(db: str) -> None:
    port = _free_port()
    env = {**os.environ, "HARVEST_DATABASE_URL": db}
    env.pop("HARVEST_PROFILE", None)
    process = _run(["serve", "--port", str(port)], env)
    try:
        base = f"http://127.0.0.1:{port}/api/harvest"
        assert _get(f"{base}/health")[0] == 200
        with pytest.raises(urllib.error.HTTPError) as refused:
            urllib.request.urlopen(f"{base}/workflows", timeout=5)
        assert refused.value.code == 401
    finally:
        _stop(process)


def test_dev_serves_the_api_and_prints_its_url_and_a_curl(db: str) -> None:
    port = _free_port()
    env = {**os.environ, "HARVEST_DEV_DATABASE_URL": db}
    process = _run(["dev", "--port", str(port)], env)
    base = f"http://127.0.0.1:{port}/api/harvest"
    try:
        _get(f"{base}/health/live")
        request = urllib.request.Request(
            f"{base}/workflows/greet/start",
            data=json.dumps({"input": ["world"]}).encode(),
            headers={"Content-Type": "application/json"},
            method="POST",
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            assert response.status == 201
            run = json.loads(response.read())["execution_id"]
        status, result = _get(f"{base}/workflows/{run}/result?wait=20s")
        assert status == 200 and result["state"] == "COMPLETED"
        # The spec's `cargo dev` "prints the dashboard URL and one curl": the page it names is served.
        with urllib.request.urlopen(f"{base}/ui/", timeout=10) as page:
            assert page.status == 200 and "text/html" in page.headers["Content-Type"]
    finally:
        out, _ = _stop(process)
    assert f"Management API: {base}" in out and f"curl -s -X POST {base}/workflows/greet/start" in out
    assert f"Dashboard: {base}/ui/" in out, out


def test_the_listening_socket_gives_each_connection_the_databases_keepalive_timings() -> None:
    """A client that goes silent is given up after about 30 s, as a database is: the connections
    the listening socket accepts inherit its keepalives and TCP user timeout (the whole path,
    with a real cut: tests/chaos/test_chaos_network.py)."""
    from harvest.cli.serve import listening_sockets
    from harvest.db.connection import SOCKET_KEEPALIVE_OPTIONS

    (sock,) = listening_sockets("127.0.0.1", 0)
    with sock:
        sock.listen(1)
        with socket.create_connection(sock.getsockname()[:2]) as _client:
            accepted, _ = sock.accept()
            with accepted:
                assert accepted.getsockopt(socket.SOL_SOCKET, socket.SO_KEEPALIVE) == 1
                got = {o: accepted.getsockopt(socket.IPPROTO_TCP, o) for o in SOCKET_KEEPALIVE_OPTIONS}
    assert got == dict(SOCKET_KEEPALIVE_OPTIONS)
    if sys.platform == "linux":  # every one of the four there
        assert got[socket.TCP_USER_TIMEOUT] == 30_000 and got[socket.TCP_KEEPIDLE] == 10


def test_serve_on_a_port_in_use_says_so_in_one_line(db: str) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        env = {**os.environ, "HARVEST_DATABASE_URL": db, "HARVEST_PROFILE": "dev"}
        process = _run(["serve", "--port", str(port)], env)
        _, err = process.communicate(timeout=60)
    assert process.returncode == 1, err
    assert f"error: cannot listen on 127.0.0.1:{port}: Address already in use (another server" in err
    assert "Traceback" not in err


@pytest.mark.parametrize("missing", ["uvicorn", "starlette", "jinja2"])
def test_serve_without_the_web_extra_names_its_install_line(missing: str) -> None:
    """A new user's `pip install harvest-workflows` has no [web]: one line, not a traceback."""
    code = f"import sys; sys.modules[{missing!r}] = None; from harvest.cli import main; main()"
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARVEST_")}
    result = subprocess.run(
        [sys.executable, "-c", code, "serve", "--port", "0"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"error: harvest serve needs the web extra (No module named {missing!r}): "
        "pip install 'harvest-workflows[web]'"
    )


def test_the_listening_sockets_are_one_per_address_of_the_host() -> None:
    """As uvicorn binds them: each address the host resolves to, an IPv6 one IPv6 only."""
    from harvest.cli.serve import listening_sockets, served_url

    port = _free_port()
    sockets = listening_sockets("localhost", port)
    try:
        expected = {
            (info[0], info[4][0]) for info in socket.getaddrinfo("localhost", port, type=socket.SOCK_STREAM)
        }
        assert {(s.family, s.getsockname()[0]) for s in sockets} == expected
        for sock in sockets:
            if sock.family == socket.AF_INET6:
                assert sock.getsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY) == 1
        assert served_url("localhost", sockets) == f"http://localhost:{port}/api/harvest"
    finally:
        for sock in sockets:
            sock.close()
    (any_port,) = listening_sockets("127.0.0.1", 0)
    with any_port:
        assert served_url("::1", [any_port]).startswith("http://[::1]:")
        assert not served_url("::1", [any_port]).endswith(":0/api/harvest")


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGTERM], ids=["ctrl_c", "sigterm"])
def test_serve_stops_on_ctrl_c_or_sigterm_with_exit_0(db: str, stop: signal.Signals) -> None:
    """A kubelet's or systemd's SIGTERM ends the graceful stop with exit 0, as Ctrl-C does (uvicorn
    raised it again after its stop, and the process died of it: 143)."""
    port = _free_port()
    env = {**os.environ, "HARVEST_DATABASE_URL": db, "HARVEST_PROFILE": "dev"}
    process = _run(["serve", "--port", str(port)], env)
    try:
        assert _get(f"http://127.0.0.1:{port}/api/harvest/health")[0] == 200
    finally:
        process.send_signal(stop)
        _, err = process.communicate(timeout=30)
    assert process.returncode == 0, err
    assert "Aborted" not in err


def test_serve_with_json_logs_writes_only_json_lines_on_one_stream(db: str) -> None:
    """A container's log collector parses every line: uvicorn's own lines (its start, each
    request's access line, its stop) and the served URL go through Harvest's handler, as JSON
    on stderr, not as uvicorn's text beside them (and nothing on stdout)."""
    port = _free_port()
    env = {**os.environ, "HARVEST_DATABASE_URL": db, "HARVEST_PROFILE": "dev"}
    process = _run(["serve", "--port", str(port), "--log-format", "json"], env)
    try:
        assert _get(f"http://127.0.0.1:{port}/api/harvest/health/live")[0] == 200
    finally:
        out, err = _stop(process)
    assert out == ""
    records = [json.loads(line) for line in err.splitlines()]  # every line one JSON object
    messages = [r["message"] for r in records]
    assert any(f"http://127.0.0.1:{port}/api/harvest" in m for m in messages), messages
    assert any("GET /api/harvest/health/live" in m for m in messages), messages
    assert {r["logger"] for r in records} >= {"uvicorn.error", "uvicorn.access"}
    assert all("color_message" not in r for r in records), "uvicorn's terminal colours"


def test_a_combined_serve_reports_its_drained_worker_and_keeps_serving(db: str) -> None:
    """A remote drain of a combined `harvest serve`'s worker stops its claim loop, scheduler and
    janitor, not the API: the process then said `runs_here: true` (and the janitor and the
    scheduler on) though nothing ran. It reports the drain now: /admin/config's runtimes off
    with the drain as their source, the worker section's `drained`, and the health probes."""
    port = _free_port()
    env = {
        **os.environ,
        "HARVEST_DATABASE_URL": db,
        "HARVEST_PROFILE": "dev",
        "HARVEST_ROLE": "combined",
        # (1 s, not less: a drain of a worker whose heartbeat is two intervals late is refused
        # as stale_worker, which a loaded CI machine caused at 0.2 s in the dev drain test.)
        "HARVEST_WORKER__HEARTBEAT_INTERVAL": "1",
    }
    process = _run(["serve", "--port", str(port), "--app", "harvest.cli.demo:app"], env)
    base = f"http://127.0.0.1:{port}/api/harvest"

    def mine() -> list[dict]:
        return [w for w in _get(f"{base}/workers")[1]["workers"] if w["pid"] == process.pid]

    try:
        deadline = time.monotonic() + 60
        while not mine():
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        (worker,) = mine()
        config = _get(f"{base}/admin/config")[1]
        assert config["worker"]["runs_here"] is True and config["worker"]["drained"] is None
        assert (
            config["runtimes"]["scheduler.enabled"]["value"] is True
            and config["retention"]["runs_here"] is True
        )
        drain_over_http(base, worker["worker_id"])
        while (
            mine()[0]["status"] != "stopped" or _get(f"{base}/admin/config")[1]["worker"]["drained"] is None
        ):
            assert process.poll() is None and time.monotonic() < deadline
            time.sleep(0.05)
        config = _get(f"{base}/admin/config")[1]
        drained = config["worker"]["drained"]
        assert drained["worker_id"] == worker["worker_id"] and drained["at"]
        assert config["worker"]["runs_here"] is False and config["worker"]["queues"] == []
        assert "drained" in config["worker"]["queue_source"]
        for name in ("worker", "scheduler", "retention"):
            runtime = config["runtimes"][f"{name}.enabled"]
            assert runtime["value"] is False and "drained" in runtime["source"], config["runtimes"]
        assert config["retention"]["runs_here"] is False
        retention = _get(f"{base}/admin/retention")[1]
        assert retention["runs_here"]["value"] is False and "drained" in retention["runs_here"]["source"]
        # The API still serves, and its probes say what this process no longer runs.
        for probe in ("health", "health/live", "health/ready"):
            status, body = _get(f"{base}/{probe}")
            assert status == 200 and body["runtimes"] == "drained", (probe, body)
            assert body["drained_at"] == drained["at"]
        assert process.poll() is None
    finally:
        _, err = _stop(process)
    assert process.returncode == 0, err
    assert "Traceback" not in err
    assert any("drained" in line and "the management API" in line for line in err.splitlines()), err


def test_serve_health_port_serves_the_probes_of_the_worker_it_runs(db: str) -> None:
    """A combined `harvest serve --health-port P` answers its worker's probes as `harvest worker
    --health-port` does (the API's own /health/live says nothing of its worker's loop or
    heartbeats); a replica that runs no worker refuses the flag with the probes it has."""
    port, health = _free_port(), _free_port()
    env = {**os.environ, "HARVEST_DATABASE_URL": db, "HARVEST_PROFILE": "dev", "HARVEST_ROLE": "combined"}
    process = _run(
        ["serve", "--port", str(port), "--app", "harvest.cli.demo:app", "--health-port", str(health)], env
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                status, body = _get(f"http://127.0.0.1:{health}/health/ready")
                break
            except urllib.error.HTTPError:  # 503 while the worker boots
                assert process.poll() is None and time.monotonic() < deadline, process.communicate()
                time.sleep(0.05)
        assert status == 200 and body["status"] == "ready" and body["worker_id"], body
        assert _get(f"http://127.0.0.1:{health}/health/live") == (200, {"status": "ok"})
    finally:
        _, err = _stop(process)
    assert process.returncode == 0, err[-2000:]

    web = {**env, "HARVEST_ROLE": "web"}
    result = subprocess.run(
        [*HARVEST, "serve", "--port", "0", "--health-port", str(health)],
        env=web,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 1, result.stderr
    assert "its role places none here: probe /api/harvest/health/live" in result.stderr.splitlines()[-1]
