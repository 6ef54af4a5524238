"""The Django integration (harvest.integrations.django): settings.HARVEST, the shared client in a
view, and ``manage.py harvest_worker`` as a real process, on the test database."""

from __future__ import annotations

import io
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import django
import pytest

TZ_BEFORE = os.environ.get("TZ")
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "django_project.settings")
django.setup()

from django.core.exceptions import ImproperlyConfigured  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.core.management.base import CommandError  # noqa: E402
from django.test import Client as DjangoClient  # noqa: E402
from django.test import override_settings  # noqa: E402

from harvest.config import config_from_mapping  # noqa: E402
from harvest.core.errors import ConfigError  # noqa: E402
from harvest.integrations import django as harvest_django  # noqa: E402
from harvest.integrations.django.apps import HarvestConfig  # noqa: E402

HERE = Path(__file__).resolve().parent
BASE = {"app": "django_project.workflows.app", "worker": {"concurrency": 4, "shutdown_grace": 5.0}}


@pytest.fixture
def harvest_db(db: str) -> Iterator[str]:
    """settings.HARVEST on the test database; the shared client closed after the test."""
    with override_settings(HARVEST={**BASE, "database_url": db}):
        yield db
    harvest_django.close_client()


def test_a_view_starts_a_run_that_manage_py_harvest_worker_runs_then_stops_on_sigterm(
    harvest_db: str,
) -> None:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HARVEST_")},
        "HARVEST_DATABASE_URL": harvest_db,
        "DJANGO_SETTINGS_MODULE": "django_project.settings",
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "django", "harvest_worker", "--queue", "default"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        response = DjangoClient().post("/greet/ann")
        assert response.status_code == 202, response.content
        execution_id = response.json()["execution_id"]
        client = harvest_django.get_client()
        assert client is harvest_django.get_client()  # one client for the process
        assert client.get_handle(workflow_id="greet-ann").result(timeout=30) == "hello ANN"
        assert client.get_handle(execution_id).describe()["status"] == "COMPLETED"
    finally:
        worker.send_signal(signal.SIGTERM)
        out, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert "harvest worker polling default" in out and "harvest worker stopped" in out, (out, err)


def test_a_changed_setting_closes_the_shared_client(harvest_db: str) -> None:
    first = harvest_django.get_client()
    with override_settings(HARVEST={**BASE, "database_url": harvest_db, "profile": "dev"}):
        assert harvest_django.get_client() is not first
        assert harvest_django.get_config().get("profile") == "dev"


def test_a_sharded_client_that_fails_to_open_closes_its_pools(monkeypatch: pytest.MonkeyPatch) -> None:
    """With [shards], get_client() opened the shard pools, then the Client; a Client that failed
    (a shard down at its first call) left the pools open, and each later call opened more."""
    opened: list[object] = []

    class Pools:
        closed = False

        def close(self) -> None:
            self.closed = True

    def shard_pools(config: object, dsn: object) -> Pools:
        opened.append(Pools())
        return opened[-1]  # type: ignore[return-value]

    def refusing_client(*args: object, **kwargs: object) -> None:
        raise ConfigError("shard 1 is down")

    monkeypatch.setattr(harvest_django, "is_sharded", lambda config: True)
    monkeypatch.setattr(harvest_django, "shard_pools", shard_pools)
    monkeypatch.setattr(harvest_django, "Client", refusing_client)
    monkeypatch.setattr(harvest_django, "worker_dsn", lambda config, hint=None: None)
    for _ in range(2):
        with pytest.raises(ConfigError, match="shard 1 is down"):
            harvest_django.get_client()
    assert len(opened) == 2 and all(pools.closed for pools in opened)  # type: ignore[attr-defined]
    assert harvest_django._pools is None


def test_settings_harvest_is_a_harvest_config_with_the_variables_over_it() -> None:
    data = {"database_url": "postgresql:///a", "worker": {"concurrency": 8, "queues": ["a", "b"]}}
    config = config_from_mapping(data, "settings.HARVEST", env={"HARVEST_WORKER__CONCURRENCY": "3"})
    assert config.get("database_url") == "postgresql:///a"
    assert config.get("worker.queues") == ["a", "b"]
    assert config.setting("worker.concurrency").source == "HARVEST_WORKER__CONCURRENCY"
    assert config.get("worker.concurrency") == 3
    with pytest.raises(
        ConfigError, match=r"worker\.concurency.*settings\.HARVEST.*did you mean worker\.concurrency"
    ):
        config_from_mapping({"worker": {"concurency": 8}}, "settings.HARVEST", env={})
    with pytest.raises(
        ConfigError, match=r"worker\.concurrency \(from settings\.HARVEST\): expected an integer"
    ):
        config_from_mapping({"worker": {"concurrency": "many"}}, "settings.HARVEST", env={})


def test_a_bad_setting_stops_django_at_startup_with_its_name() -> None:
    config = HarvestConfig("harvest.integrations.django", harvest_django)
    with (
        override_settings(HARVEST={"worker": {"concurency": 8}}),
        pytest.raises(ImproperlyConfigured, match="concurency"),
    ):
        config.ready()
    with (
        override_settings(HARVEST={"app": "django_project.settings.SECRET_KEY"}),
        pytest.raises(ImproperlyConfigured, match=r"is a str, not a harvest\.App"),
    ):
        config.ready()
    with (
        override_settings(HARVEST={"app": "no_such_module.app"}),
        pytest.raises(ImproperlyConfigured, match="cannot be imported"),
    ):
        config.ready()


def test_harvest_worker_needs_an_app() -> None:
    with (
        override_settings(HARVEST={"database_url": "postgresql:///unused"}),
        pytest.raises(CommandError, match='names no App: set "app"'),
    ):
        call_command("harvest_worker")
    with override_settings(HARVEST=BASE), pytest.raises(CommandError, match="which the App does not declare"):
        call_command("harvest_worker", "--queue", "nope")


def test_setting_django_up_left_the_processs_time_zone_alone() -> None:
    # The suite's other tests run in this process after Django's setup (settings.TIME_ZONE = None).
    assert os.environ.get("TZ") == TZ_BEFORE


def test_no_database_names_the_places_django_reads(monkeypatch: pytest.MonkeyPatch) -> None:
    # It said "database_url in harvest.toml, or pass --database-url": Django reads neither.
    monkeypatch.delenv("HARVEST_DATABASE_URL", raising=False)
    with override_settings(HARVEST=BASE), pytest.raises(ConfigError) as raised:
        harvest_django.get_client()
    message = str(raised.value)
    assert "settings.HARVEST" in message and "HARVEST_DATABASE_URL" in message, message
    assert "harvest.toml" not in message and "--database-url" not in message, message
    # The worker command said "harvest worker polling default" first, then failed.
    out = io.StringIO()
    with override_settings(HARVEST=BASE), pytest.raises(CommandError, match="HARVEST_DATABASE_URL"):
        call_command("harvest_worker", stdout=out)
    assert "polling" not in out.getvalue(), out.getvalue()


def test_manage_py_harvest_worker_health_port_serves_the_workers_probes(harvest_db: str) -> None:
    """`manage.py harvest_worker --health-port P`: the probes `harvest worker --health-port`
    serves (it had none: a Django worker Deployment had no liveness but its heartbeat)."""
    import json
    import socket
    import time
    import urllib.error
    import urllib.request

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("HARVEST_")},
        "HARVEST_DATABASE_URL": harvest_db,
        "DJANGO_SETTINGS_MODULE": "django_project.settings",
        "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
    }
    worker = subprocess.Popen(
        [sys.executable, "-m", "django", "harvest_worker", "--health-port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    seen: tuple[int, dict] | None = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and worker.poll() is None:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/ready", timeout=5) as response:
                    seen = (response.status, json.load(response))
                    break
            except urllib.error.HTTPError as exc:
                seen = (exc.code, json.load(exc))
            except urllib.error.URLError:
                pass
            time.sleep(0.05)
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/live", timeout=5) as response:
            live = json.load(response)
    finally:
        worker.send_signal(signal.SIGTERM)
        _, err = worker.communicate(timeout=30)
    assert worker.returncode == 0, err
    assert seen is not None and seen[0] == 200 and seen[1]["status"] == "ready", (seen, err[-2000:])
    assert live == {"status": "ok"}


def test_manage_py_harvest_worker_refuses_a_bad_health_port(harvest_db: str) -> None:
    with pytest.raises(CommandError, match="--health-port 70000: a port from 1 to 65535"):
        call_command("harvest_worker", "--health-port", "70000", stdout=io.StringIO())


def test_a_start_in_a_views_transaction_commits_with_it_only_on_its_connection(harvest_db: str) -> None:
    """What docs/integrations.md promises a view in ``transaction.atomic()``: get_client()'s start
    commits on its own connection whatever the view's transaction does; with ``connection=`` Django's
    own (psycopg 3) connection it is rolled back and committed with the view's transaction, even as
    the transaction's first statement."""
    from django.db import connections, transaction
    from harvest.errors import NotFound
    from psycopg.conninfo import conninfo_to_dict

    parts = conninfo_to_dict(harvest_db)
    alias = "harvest_view"
    connections.settings[alias] = connections.configure_settings(
        {
            "default": {"ENGINE": "django.db.backends.dummy"},
            alias: {
                "ENGINE": "django.db.backends.postgresql",
                "NAME": parts["dbname"],
                "USER": parts.get("user", ""),
                "PASSWORD": parts.get("password", ""),
                "HOST": parts.get("host", ""),
                "PORT": parts.get("port", ""),
            },
        }
    )[alias]
    client = harvest_django.get_client()

    def started(workflow_id: str) -> bool:
        try:
            client.get_handle(workflow_id=workflow_id).describe()
        except NotFound:
            return False
        return True

    def view(workflow_id: str, *, joined: bool, fail: bool, orm_first: bool = False) -> None:
        django_db = connections[alias]
        try:
            with transaction.atomic(using=alias):
                if orm_first:
                    with django_db.cursor() as cursor:
                        cursor.execute("SELECT 1")
                on = {"connection": django_db.connection} if joined else {}
                client.start_workflow("greet", workflow_id, workflow_id=workflow_id, **on)
                if fail:
                    raise RuntimeError("the view failed")
        except RuntimeError:
            pass

    try:
        view("own", joined=False, fail=True)
        view("joined-first", joined=True, fail=True)
        view("joined-after", joined=True, fail=True, orm_first=True)
        view("joined-ok", joined=True, fail=False)
        assert started("own")  # its own connection: committed at once
        assert not started("joined-first") and not started("joined-after")
        assert started("joined-ok")
    finally:
        connections[alias].close()
        del connections.settings[alias]
