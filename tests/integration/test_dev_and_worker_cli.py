"""`harvest dev` end to end, and the worker's refusal of a schema it does not match."""

from __future__ import annotations

import asyncio
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harvest import Client, Worker
from harvest.cli.demo import app as demo_app
from harvest.core.errors import SchemaMismatch

HARVEST = [sys.executable, "-c", "from harvest.cli import main; main()"]


def test_dev_runs_the_demo_end_to_end_and_cleans_up(tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    env.pop("HARVEST_DEV_DATABASE_URL", None)
    done = subprocess.run(
        [*HARVEST, "dev", "--demo-and-exit"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "result: {" in done.stdout and "Hello, world!" in done.stdout
    assert "psql" in done.stdout and "harvest workflow start greet" in done.stdout
    assert list(tmp_path.iterdir()) == []  # the data directory is gone


def test_dev_refuses_a_remote_database() -> None:
    env = {**os.environ, "HARVEST_DEV_DATABASE_URL": "postgresql://u:secret@db.example.com/app"}
    done = subprocess.run([*HARVEST, "dev"], capture_output=True, text=True, timeout=60, env=env, check=False)
    assert done.returncode == 1
    assert "db.example.com" in done.stderr and "local" in done.stderr
    assert "secret" not in done.stderr and "Traceback" not in done.stderr


def test_dev_uses_an_existing_local_database(db: str) -> None:
    env = {**os.environ, "HARVEST_DEV_DATABASE_URL": db}
    done = subprocess.run(
        [*HARVEST, "dev", "--demo-and-exit"],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert "Hello, world!" in done.stdout


def test_worker_and_client_refuse_an_unmigrated_database(fresh_db: str) -> None:
    with pytest.raises(SchemaMismatch, match="harvest migrate run"):
        asyncio.run(Worker(demo_app, fresh_db).run())
    with pytest.raises(SchemaMismatch, match="harvest migrate run"):
        Client(fresh_db)
