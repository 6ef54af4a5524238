"""`harvest worker` runs on the event loop worker.event_loop names (harvest/worker/event_loop.py):
a real `harvest worker` process runs an async activity that reports the loop it runs on, and
stops cleanly on SIGTERM on either loop."""

from __future__ import annotations

import asyncio
import os
import subprocess
from pathlib import Path

import pytest
from worker_helpers import HARVEST, REPO, run_in_cli_worker

from harvest import App, Client, activity, workflow


@pytest.fixture
def uvloop_version() -> str:
    # Here, not at import: the worker processes import this module too, one without uvloop.
    return str(pytest.importorskip("uvloop").__version__)  # the dev extra installs it (pyproject.toml)


@activity
async def loop_module(ctx) -> str:
    return type(asyncio.get_running_loop()).__module__


@workflow
async def report_loop(ctx) -> str:
    return await ctx.execute_activity(loop_module)


app = App(workflows=[report_loop], activities=[loop_module])


@pytest.mark.parametrize(
    ("args", "env", "expected"),
    [
        ([], {}, "uvloop"),  # auto, the default: uvloop where it is installed
        (["--event-loop", "asyncio"], {}, "asyncio"),
        ([], {"HARVEST_WORKER__EVENT_LOOP": "asyncio"}, "asyncio"),
        # The flag wins over the variable, as every flag does.
        (["--event-loop", "uvloop"], {"HARVEST_WORKER__EVENT_LOOP": "asyncio"}, "uvloop"),
    ],
    ids=["default", "flag", "variable", "flag-over-variable"],
)
def test_harvest_worker_runs_on_the_loop_it_is_given(
    db: str, client: Client, args: list[str], env: dict[str, str], expected: str, uvloop_version: str
) -> None:
    module, stderr = run_in_cli_worker(db, client, "test_worker_event_loop:app", report_loop, args, env)
    assert module.split(".")[0] == expected
    name = f"uvloop {uvloop_version}" if expected == "uvloop" else "asyncio"
    assert f"harvest worker: event loop {name}" in stderr


def test_where_uvloop_cannot_be_imported_auto_runs_on_asyncio_and_uvloop_stops_the_boot(
    db: str, client: Client, tmp_path: Path
) -> None:
    (tmp_path / "uvloop.py").write_text("raise ImportError('uvloop is not built for this platform')\n")
    path = os.pathsep.join([str(tmp_path), str(REPO / "harvest_py"), str(Path(__file__).resolve().parent)])
    module, stderr = run_in_cli_worker(
        db, client, "test_worker_event_loop:app", report_loop, [], {"PYTHONPATH": path}
    )
    assert module.startswith("asyncio")
    assert "harvest worker: event loop asyncio" in stderr

    env = {k: v for k, v in os.environ.items() if not k.startswith("HARVEST_")}
    env.update(HARVEST_DATABASE_URL=db, PYTHONPATH=path)
    refused = subprocess.run(
        [*HARVEST, "worker", "test_worker_event_loop:app", "--event-loop", "uvloop"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert refused.returncode == 1, refused.stderr
    assert "worker.event_loop is uvloop but uvloop cannot be imported" in refused.stderr
    assert "pip install 'harvest-workflows[uvloop]'" in refused.stderr
