"""`harvest dev` end to end, and the worker's refusal of a schema it does not match."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import cli_forks
import pytest
from worker_helpers import drain_over_http

from harvest import Client, Worker
from harvest.cli.demo import app as demo_app
from harvest.core.errors import SchemaMismatch
from harvest.db.embedded import _memory_dir

HARVEST = [sys.executable, "-c", "from harvest.cli import main; main()"]


def _scratch() -> Path:
    """A directory for `harvest dev`'s embedded database (its TMPDIR, or the parent of its
    --data-dir), in memory where there is room, as the test servers' (none of these tests is
    about the disk: on it each initdb and fsync'd migration cost CI 15 to 46 s of a test).
    Not under pytest's tmp_path: run as root, the server runs as another user, which needs to
    traverse every parent of its directory, and a pytest session starting beside this one (the
    suites run side by side) sets /tmp/pytest-of-root back to 0700 (pg_control: Permission denied)."""
    return Path(tempfile.mkdtemp(prefix="harvest-dev-test-", dir=_memory_dir()))


def _demo_and_exit(env: dict[str, str], cold: bool = False) -> subprocess.CompletedProcess[str]:
    """`harvest dev --demo-and-exit` under ``env``, which must succeed: a warm fork
    (cli_forks), or ``cold``, a process started afresh (its TMPDIR is read at startup)."""
    if not cold:
        done = cli_forks.run(["dev", "--demo-and-exit"], env, timeout=120)
    else:
        args = [*HARVEST, "dev", "--demo-and-exit"]
        done = subprocess.run(args, capture_output=True, text=True, check=False, timeout=120, env=env)
    assert done.returncode == 0, done.stderr
    return done


def test_dev_runs_the_demo_end_to_end_and_cleans_up() -> None:
    scratch = _scratch()
    env = {**os.environ, "TMPDIR": str(scratch)}
    env.pop("HARVEST_DEV_DATABASE_URL", None)
    try:
        done = _demo_and_exit(env, cold=True)
        assert "result: {" in done.stdout and "Hello, world!" in done.stdout
        assert "psql" in done.stdout and "harvest workflow start greet" in done.stdout
        # The data directory is gone: removed by the watchdog as the process ends (Ctrl-C does
        # not wait for thousands of unlinks; tests/integration/test_embedded_stop.py).
        deadline = time.monotonic() + 60
        while list(scratch.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert list(scratch.iterdir()) == []
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def test_dev_killed_outright_leaves_no_postgres_behind() -> None:
    """`harvest dev` killed with SIGKILL (an IDE's stop button, the OOM killer) runs no cleanup of
    its own: its embedded PostgreSQL kept running, and its files stayed, one more server a kill."""
    scratch = _scratch()
    env = {**os.environ, "TMPDIR": str(scratch)}
    env.pop("HARVEST_DEV_DATABASE_URL", None)
    dev = subprocess.Popen(
        [*HARVEST, "dev", "--no-api"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
    )
    postmaster = None
    try:
        lines = []
        for line in dev.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if line.startswith("Harvest is ready on"):
                break
        assert lines and lines[-1].startswith("Harvest is ready on"), "".join(lines)
        [data] = list(scratch.iterdir())
        postmaster = int((data / "data" / "postmaster.pid").read_text().split()[0])
        dev.kill()
        dev.wait(timeout=30)
        deadline = time.monotonic() + 30
        while (_alive(postmaster) or data.exists()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not _alive(postmaster), "the embedded PostgreSQL outlived harvest dev"
        assert list(scratch.iterdir()) == [], "its files stayed"
    finally:
        if dev.poll() is None:
            dev.kill()
        if postmaster is not None and _alive(postmaster):
            os.kill(postmaster, signal.SIGQUIT)  # (a failed run leaves no server either)
        shutil.rmtree(scratch, ignore_errors=True)


def test_dev_keeps_its_data_dir_across_runs_and_kills() -> None:
    """`harvest dev --data-dir`: the database outlives the process (a kill too, stopped cleanly
    by the watchdog), and the next run starts on it: what the first run did is there."""
    scratch = _scratch()
    scratch.chmod(
        0o755
    )  # (as root the server's user must traverse it: a named directory's parents stay as they are)
    kept = scratch / "kept"
    env = {**os.environ, "TMPDIR": str(scratch)}
    env.pop("HARVEST_DEV_DATABASE_URL", None)
    runs: list[subprocess.Popen[str]] = []

    def start() -> str:
        dev = subprocess.Popen(
            [*HARVEST, "dev", "--no-api", "--data-dir", "kept"],  # relative, as the docs write it
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            env=env,
            cwd=scratch,
        )
        runs.append(dev)
        lines = []
        for line in dev.stdout:  # type: ignore[union-attr]
            lines.append(line)
            if line.strip().startswith("psql:"):
                return line.split()[-1].strip("'")  # the DSN, shell-quoted
        raise AssertionError("".join(lines))

    try:
        with Client(start()) as client:
            handle = client.start_workflow("greet", "world", workflow_id="kept-run")
            assert "world" in str(handle.result(timeout=60))
        runs[0].kill()  # outright: the watchdog stops the server, the data stays
        runs[0].wait(timeout=30)
        deadline = time.monotonic() + 30
        while (kept / "data" / "postmaster.pid").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not (kept / "data" / "postmaster.pid").exists(), "the server outlived harvest dev"
        assert (kept / "data" / "PG_VERSION").exists()

        with Client(start()) as client:  # the next run, on the same database
            assert client.get_handle(workflow_id="kept-run").describe()["status"] == "COMPLETED"
        runs[1].send_signal(signal.SIGTERM)
        output = runs[1].communicate(timeout=60)[0]
        assert runs[1].returncode == 0, output
        assert f"keeping its data in {kept}" in output
        assert (kept / "data" / "PG_VERSION").exists() and not (kept / "data" / "postmaster.pid").exists()
    finally:
        for dev in runs:
            if dev.poll() is None:
                dev.kill()
        pid_file = kept / "data" / "postmaster.pid"
        if pid_file.exists() and _alive(int(pid_file.read_text().split()[0])):
            os.kill(int(pid_file.read_text().split()[0]), signal.SIGQUIT)  # (a failed run leaves no server)
        shutil.rmtree(scratch, ignore_errors=True)


@pytest.mark.skipif(os.geteuid() != 0, reason="as root only: the server then runs as another user")
def test_dev_as_root_neither_opens_up_nor_takes_over_a_named_data_dir(tmp_path: Path) -> None:
    """Root's embedded server runs as the service user, which must reach its directory. A
    temporary one is made for it; a named one is the caller's (a home, a project): its parents
    were opened to every user and an existing directory handed to the service user."""
    env = {k: v for k, v in os.environ.items() if k != "HARVEST_DEV_DATABASE_URL"}

    def dev_on(data_dir: Path) -> subprocess.CompletedProcess[str]:
        return cli_forks.run(["dev", "--no-api", "--data-dir", str(data_dir)], env, timeout=120)

    closed = tmp_path / "closed"
    closed.mkdir(mode=0o700)
    done = dev_on(closed / "db")
    assert done.returncode == 1, done.stdout + done.stderr
    assert f"{closed} is closed to other users" in done.stderr and "Traceback" not in done.stderr
    assert closed.stat().st_mode & 0o777 == 0o700 and not (closed / "db").exists()

    mine = Path(tempfile.mkdtemp(prefix="harvest-dev-test-"))  # (traversable, root's)
    try:
        mine.chmod(0o755)
        done = dev_on(mine)
        assert done.returncode == 1, done.stdout + done.stderr
        assert f"{mine} exists and is not harvest_pg's" in done.stderr
        assert mine.stat().st_uid == 0
    finally:
        shutil.rmtree(mine, ignore_errors=True)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def test_dev_refuses_a_remote_database() -> None:
    env = {**os.environ, "HARVEST_DEV_DATABASE_URL": "postgresql://u:secret@db.example.com/app"}
    done = cli_forks.run(["dev"], env, timeout=60)
    assert done.returncode == 1
    assert "db.example.com" in done.stderr and "local" in done.stderr
    assert "secret" not in done.stderr and "Traceback" not in done.stderr


def test_dev_uses_an_existing_local_database(db: str) -> None:
    done = _demo_and_exit({**os.environ, "HARVEST_DEV_DATABASE_URL": db})
    assert "Hello, world!" in done.stdout
    # The result is printed as JSON (it was a Python repr: single quotes, not for jq).
    line = next(line for line in done.stdout.splitlines() if line.startswith("result: "))
    result = json.loads(line.removeprefix("result: "))
    assert result["greeting"] == "Hello, world!" and result["visit"]["name"] == "world"


def test_dev_finds_its_port_busy_before_it_starts_a_database() -> None:
    """A port in use ends `harvest dev` with its error before the embedded PostgreSQL starts
    and migrates (seconds spent, then the same error)."""
    scratch = _scratch()
    env = {**os.environ, "TMPDIR": str(scratch)}
    env.pop("HARVEST_DEV_DATABASE_URL", None)
    try:
        with socket.socket() as busy:
            busy.bind(("127.0.0.1", 0))
            busy.listen()
            port = busy.getsockname()[1]
            done = cli_forks.run(["dev", "--host", "127.0.0.1", "--port", str(port)], env, timeout=120)
        assert done.returncode == 1, done.stderr
        assert "another server on that port" in done.stderr and "Traceback" not in done.stderr
        assert "starting an embedded PostgreSQL" not in done.stderr
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _answers(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=1) as response:
            return bool(response.status == 200)
    except OSError:
        return False


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_dev_stops_cleanly_on_a_signal(db: str, tmp_path: Path, sig: signal.Signals) -> None:
    """Ctrl-C (or a SIGTERM), pressed twice, stops the worker, then the management API beside
    it: exit 0 and no traceback. uvicorn took the signals while it served, and a second SIGINT
    made it skip the API's shutdown, which was then cancelled mid-way."""
    env = {**os.environ, "HARVEST_DEV_DATABASE_URL": db}
    log = tmp_path / "dev.log"
    with socket.socket() as probe:  # a free port, so the test can see the API answer
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    with log.open("w") as out:
        dev = subprocess.Popen(
            [*HARVEST, "dev", "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, env=env
        )
        try:
            deadline = time.monotonic() + 60
            while not _answers(f"http://127.0.0.1:{port}/api/harvest/openapi.json"):
                assert dev.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            dev.send_signal(sig)
            time.sleep(0.05)
            dev.send_signal(sig)  # impatient: a second Ctrl-C while it stops
            assert dev.wait(timeout=60) == 0, log.read_text()
        finally:
            if dev.poll() is None:
                dev.kill()
    output = log.read_text()
    assert "Traceback" not in output and "Error" not in output, output


def test_dev_outlives_a_remote_drain_of_its_worker(db: str, tmp_path: Path) -> None:
    """A drain of the dev worker (`harvest worker drain`, the dashboard's button) stops its claim
    loop, not the process: the API and the database stay up until Ctrl-C. The whole of `harvest
    dev` used to end there, and with its embedded PostgreSQL the data of the session."""

    # (A drain is refused as stale_worker when the last heartbeat is two intervals old: at 0.2 s a
    # loaded CI machine's late heartbeat did that once. The drain is heard within two intervals.)
    env = {**os.environ, "HARVEST_DEV_DATABASE_URL": db, "HARVEST_WORKER__HEARTBEAT_INTERVAL": "1"}
    log = tmp_path / "dev.log"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    base = f"http://127.0.0.1:{port}/api/harvest"

    def workers() -> list[dict]:
        with urllib.request.urlopen(f"{base}/workers", timeout=5) as response:
            return [w for w in json.load(response)["workers"] if w["pid"] == dev.pid]

    with log.open("w") as out:
        dev = subprocess.Popen(
            [*HARVEST, "dev", "--port", str(port)], stdout=out, stderr=subprocess.STDOUT, env=env
        )
        try:
            deadline = time.monotonic() + 60
            while not _answers(f"{base}/openapi.json") or not workers():
                assert dev.poll() is None and time.monotonic() < deadline, log.read_text()
                time.sleep(0.05)
            (worker,) = workers()
            drain_over_http(base, worker["worker_id"])
            while True:
                assert dev.poll() is None and time.monotonic() < deadline, log.read_text()
                if workers()[0]["status"] == "stopped" and "drained" in log.read_text():
                    break
                time.sleep(0.05)
            assert dev.poll() is None, log.read_text()
            assert _answers(f"{base}/health/live"), log.read_text()  # the API still serves
            # ... and says what this process no longer runs.
            with urllib.request.urlopen(f"{base}/admin/config", timeout=5) as response:
                config = json.load(response)
            assert config["worker"]["runs_here"] is False, config["worker"]
            assert config["worker"]["drained"]["worker_id"] == worker["worker_id"]
            with urllib.request.urlopen(f"{base}/health/live", timeout=5) as response:
                assert json.load(response)["runtimes"] == "drained"
            dev.send_signal(signal.SIGINT)
            assert dev.wait(timeout=60) == 0, log.read_text()
        finally:
            if dev.poll() is None:
                dev.kill()
    assert "Traceback" not in log.read_text()


def test_worker_and_client_refuse_an_unmigrated_database(fresh_db: str) -> None:
    with pytest.raises(SchemaMismatch, match="harvest migrate run"):
        asyncio.run(Worker(demo_app, fresh_db).run())
    with pytest.raises(SchemaMismatch, match="harvest migrate run"):
        Client(fresh_db)


async def _ctrl_c(worker: Worker) -> None:
    """A Ctrl-C, and the stop dev then asks of its worker: `harvest dev` ends on a signal only
    (a worker that returns by itself was drained, and the API and the database stay up)."""
    signal.raise_signal(signal.SIGINT)
    await worker._stopping.wait()


def test_dev_runs_the_retention_janitor(db: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """`harvest dev` runs everything, the janitor too: it ran none (a Worker built in code
    defaulted to run_retention=False), so a configured retention never applied and the dev
    database grew forever."""
    from click.testing import CliRunner

    from harvest.cli.main import main

    ran: list[Worker] = []

    async def run(self: Worker, install_signal_handlers: bool = False) -> None:
        ran.append(self)  # the worker dev built, not run: its switches are the point
        await _ctrl_c(self)

    monkeypatch.setattr(Worker, "run", run)
    monkeypatch.setenv("HARVEST_DEV_DATABASE_URL", db)
    done = CliRunner().invoke(main, ["dev", "--no-api"])
    assert done.exit_code == 0, done.output
    [worker] = ran
    assert (worker.run_worker, worker.run_scanner, worker.run_retention) == (True, True, True)


def test_dev_reads_the_worker_and_retention_settings_and_runs_everything_whatever_the_role(
    db: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`harvest dev` built its worker from nothing but its own defaults: `[worker]` tunables,
    `retention.enabled = false` and `retention.interval` were ignored. It now reads them as
    `harvest worker` does, and still runs everything in its one process (a role set in the
    shell for another process, web here, does not turn its claim loop off)."""
    from click.testing import CliRunner

    from harvest.cli.main import main

    ran: list[Worker] = []

    async def run(self: Worker, install_signal_handlers: bool = False) -> None:
        ran.append(self)
        await _ctrl_c(self)

    monkeypatch.setattr(Worker, "run", run)
    monkeypatch.setenv("HARVEST_DEV_DATABASE_URL", db)
    monkeypatch.setenv("HARVEST_ROLE", "web")
    monkeypatch.setenv("HARVEST_WORKER__CONCURRENCY", "3")
    monkeypatch.setenv("HARVEST_RETENTION__ENABLED", "false")
    monkeypatch.setenv("HARVEST_RETENTION__INTERVAL", "7")
    done = CliRunner().invoke(main, ["dev", "--no-api"])
    assert done.exit_code == 0, done.output
    [worker] = ran
    assert (worker.run_worker, worker.run_scanner, worker.run_retention) == (True, True, False)
    assert worker.concurrency == 3 and worker.options.retention_interval == 7
