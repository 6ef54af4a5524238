"""Connection errors on every path: no password in any CLI output, exception or log line, whatever
the DSN's form (issue 12, item 3); a refused login fails at once instead of after the pool's 30 s
of retries, while an unreachable server is still waited for (item 13)."""

from __future__ import annotations

import asyncio
import logging
import os
import subprocess
import sys
import time
import traceback
from collections.abc import Iterator
from pathlib import Path

import cli_forks
import psycopg
import pytest
from click.testing import CliRunner

from harvest import AsyncClient, Client, Worker
from harvest.cli.demo import app as demo_app
from harvest.cli.main import main
from harvest.core.errors import ConnectionRejected, DatabaseUnavailable, HarvestError
from harvest.db.embedded import EmbeddedPostgres
from harvest.db.migrate import Migrator
from harvest.worker import worker as worker_module

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "unit"))
from dsn_forms import FORMS, IDS

HARVEST = [sys.executable, "-c", "from harvest.cli import main; main()"]


def leaks(text: str, secrets: list[str]) -> list[str]:
    return [s for s in secrets if s in text]


def env_without_dsns() -> dict[str, str]:
    env = os.environ.copy()
    for name in ("HARVEST_DATABASE_URL", "HARVEST_DEV_DATABASE_URL", "HARVEST_CONFIG", "PGSSLMODE", "PGHOST"):
        env.pop(name, None)
    return env


@pytest.fixture
def short_connect_wait(monkeypatch: pytest.MonkeyPatch) -> None:
    """A starting worker waits this long for an unreachable server (30 s in production)."""
    monkeypatch.setattr(worker_module, "CONNECT_WAIT_SECS", 1.0)


# -- every path, every form (item 3) -------------------------------------------------------------

COMMANDS = [
    ["workflow", "list"],
    ["migrate", "status"],
    ["migrate", "run"],
    ["preflight"],
    ["worker", "harvest.cli.demo:app"],
    ["dlq", "list"],
]


@pytest.mark.parametrize(("name", "dsn", "secrets"), FORMS, ids=IDS)
@pytest.mark.parametrize("command", COMMANDS, ids=lambda c: "-".join(c))
def test_cli_output_and_logs_never_hold_the_password(
    name: str,
    dsn: str,
    secrets: list[str],
    command: list[str],
    short_connect_wait: None,
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    result = CliRunner().invoke(main, command, env={"HARVEST_DATABASE_URL": dsn, "HARVEST_CONFIG": None})
    assert result.exit_code != 0, result.output
    assert not leaks(result.output + result.stderr, secrets), result.output + result.stderr
    assert not leaks(caplog.text, secrets), caplog.text
    if result.exception and not isinstance(result.exception, SystemExit):
        pytest.fail("".join(traceback.format_exception(result.exception)))


@pytest.mark.parametrize(("name", "dsn", "secrets"), FORMS, ids=IDS)
def test_dev_never_prints_the_password(
    name: str, dsn: str, secrets: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    result = CliRunner().invoke(main, ["dev"], env={"HARVEST_DEV_DATABASE_URL": dsn})
    assert result.exit_code != 0
    assert not leaks(result.output + result.stderr + caplog.text, secrets), result.output + result.stderr


@pytest.mark.parametrize(
    ("name", "dsn", "secrets"),
    [
        f
        for f in FORMS
        if f[0] in ("uri-unclosed-ipv6", "kv-space-in-password", "uri-bad-percent", "query-param-bad-uri")
    ],
    ids=lambda v: v if isinstance(v, str) and "=" not in v and "://" not in v else "",
)
@pytest.mark.parametrize("how", ["flag", "env"])
def test_a_real_process_prints_one_line_without_the_password(
    name: str, dsn: str, secrets: list[str], how: str
) -> None:
    env = env_without_dsns()
    for command in (["workflow", "list"], ["worker", "harvest.cli.demo:app"]):
        args = [*command, "--database-url", dsn] if how == "flag" else command
        if how == "env":
            env["HARVEST_DATABASE_URL"] = dsn
        done = cli_forks.run(args, env, timeout=60)
        assert done.returncode == 1, done.stderr
        assert not leaks(done.stdout + done.stderr, secrets), done.stderr
        assert "Traceback" not in done.stderr
        assert [line for line in done.stderr.splitlines() if line.startswith("error:")], done.stderr


@pytest.mark.parametrize(("name", "dsn", "secrets"), FORMS, ids=IDS)
def test_clients_and_migrator_raise_without_the_password(
    name: str, dsn: str, secrets: list[str], caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    errors = []
    for attempt in (
        lambda: Client(dsn),
        lambda: Client(dsn, check_schema=False),
        lambda: asyncio.run(AsyncClient.connect(dsn, check_schema=False)),
        lambda: Migrator(dsn).run(),
        lambda: Migrator(dsn).status(),
    ):
        with pytest.raises(HarvestError) as info:
            attempt()
        errors.append("".join(traceback.format_exception(info.value)))
    assert not leaks("".join(errors) + caplog.text, secrets), errors


def test_worker_retry_warnings_never_hold_the_password(
    short_connect_wait: None, caplog: pytest.LogCaptureFixture
) -> None:
    """A closed port is an outage: retried, with a warning each time, none with the password."""
    caplog.set_level(logging.DEBUG)
    dsn = "postgresql://u:Retry%20Pw99@127.0.0.1:1/db?password=Other99Pw"
    with pytest.raises(DatabaseUnavailable) as info:
        asyncio.run(Worker(demo_app, dsn).run())
    retries = [r for r in caplog.records if "retrying" in r.getMessage()]
    assert len(retries) >= 2
    assert not isinstance(info.value, ConnectionRejected)
    assert not leaks(caplog.text + str(info.value), ["Retry Pw99", "Retry%20Pw99", "Other99Pw"])


# -- fail fast on a refused login (item 13) ------------------------------------------------------


@pytest.fixture(scope="module")
def password_server() -> Iterator[EmbeddedPostgres]:
    """A server of its own that checks passwords (the shared one trusts every login)."""
    server = EmbeddedPostgres(settings={"max_connections": "40"}, in_memory=True)
    server.start()
    try:
        with psycopg.connect(server.dsn, autocommit=True) as conn:
            conn.execute("CREATE ROLE pw_user LOGIN PASSWORD 'Right-Pw-123'")
            hba = Path(conn.execute("SHOW hba_file").fetchone()[0])
            hba.write_text(
                "local all all trust\n"
                "host all postgres 127.0.0.1/32 trust\n"
                "host all all 127.0.0.1/32 scram-sha-256\n"
            )
            conn.execute("SELECT pg_reload_conf()")
        yield server
    finally:
        server.stop()


def wrong_password(server: EmbeddedPostgres, dbname: str = "postgres") -> str:
    return f"postgresql://pw_user:Wrong-Pw-456@127.0.0.1:{server.port}/{dbname}"


def right_password(server: EmbeddedPostgres, dbname: str) -> str:
    return f"postgresql://pw_user:Right-Pw-123@127.0.0.1:{server.port}/{dbname}"


def test_the_password_server_checks_passwords(password_server: EmbeddedPostgres) -> None:
    with psycopg.connect(right_password(password_server, "postgres")) as conn:
        assert conn.execute("SELECT current_user").fetchone() == ("pw_user",)
    with pytest.raises(psycopg.OperationalError, match="password authentication failed"):
        psycopg.connect(wrong_password(password_server))


@pytest.mark.parametrize(
    ("dsn_of", "cause"),
    [
        (wrong_password, "password authentication failed"),
        (lambda s: right_password(s, "no_such_db"), 'database "no_such_db" does not exist'),
        (lambda s: f"postgresql://pw_user@127.0.0.1:{s.port}/postgres", "no password supplied"),
    ],
    ids=["wrong-password", "unknown-database", "no-password"],
)
def test_a_worker_fails_at_once_on_a_refused_login(
    password_server: EmbeddedPostgres, dsn_of, cause: str, caplog: pytest.LogCaptureFixture
) -> None:
    dsn = dsn_of(password_server)
    started = time.monotonic()
    with pytest.raises(ConnectionRejected) as info:
        asyncio.run(Worker(demo_app, dsn).run())
    elapsed = time.monotonic() - started
    assert elapsed < 5, f"took {elapsed:.1f}s"  # was 30 s of pool retries
    assert cause in str(info.value)
    assert "Wrong-Pw-456" not in str(info.value) + caplog.text
    assert "Right-Pw-123" not in str(info.value) + caplog.text


def test_harvest_worker_exits_within_seconds_on_a_wrong_password(password_server: EmbeddedPostgres) -> None:
    env = env_without_dsns()
    env["HARVEST_DATABASE_URL"] = wrong_password(password_server)
    started = time.monotonic()
    done = subprocess.run(
        [*HARVEST, "worker", "harvest.cli.demo:app"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    elapsed = time.monotonic() - started
    assert done.returncode == 1, done.stderr
    # Tells an exit at once from the 30 s of pool retries it replaced; the process' own start
    # (imports, the demo app) is part of it, and took 12.7 s at a load of 15 (CI 59c).
    assert elapsed < 25, f"took {elapsed:.1f}s"
    errors = [line for line in done.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "password authentication failed" in errors[0], done.stderr
    assert "Wrong-Pw-456" not in done.stderr + done.stdout
    assert "Traceback" not in done.stderr


def test_clients_and_commands_fail_at_once_on_a_wrong_password(password_server: EmbeddedPostgres) -> None:
    dsn = wrong_password(password_server)
    for attempt in (
        lambda: Client(dsn),
        lambda: Client(dsn, check_schema=False),
        lambda: asyncio.run(AsyncClient.connect(dsn, check_schema=False)),
        lambda: Migrator(dsn).run(),
    ):
        started = time.monotonic()
        with pytest.raises(ConnectionRejected, match="password authentication failed"):
            attempt()
        assert time.monotonic() - started < 5
    for command in (["workflow", "list"], ["migrate", "status"], ["preflight"]):
        started = time.monotonic()
        result = CliRunner().invoke(main, command, env={"HARVEST_DATABASE_URL": dsn, "HARVEST_CONFIG": None})
        assert result.exit_code == 1 and time.monotonic() - started < 5
        assert "password authentication failed" in result.output + result.stderr
        assert "Wrong-Pw-456" not in result.output + result.stderr
