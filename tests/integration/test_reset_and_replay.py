"""Recovering from a bad deploy: reset, the replayer CLI, and the version-usage guard."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harvest import App, Client, activity, workflow
from harvest.core.errors import InvalidArgument, WorkflowNotRunning

HARVEST = [sys.executable, "-c", "from harvest.cli import main; main()"]


@activity
async def step(ctx, name: str) -> str:
    return name


@workflow(name="deploy")
async def deploy_v1(ctx) -> list:
    done = [await ctx.execute_activity(step, "build")]
    done.append(await ctx.wait_for_signal("go"))
    done.append(await ctx.execute_activity(step, "ship"))
    return done


@workflow(name="deploy")
async def deploy_v2(ctx) -> list:
    # The bad deploy reordered the gate: replaying v1 history now diverges at seq 1.
    gate = ctx.version("gate-first", 1, 1)
    done = [await ctx.execute_activity(step, "build-v2")]
    done.append(await ctx.wait_for_signal("go"))
    return [*done, f"v{gate}"]


def wait_for(handle, event_type: str, timeout: float = 10) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for event in handle.history():
            if event["event_type"] == event_type:
                return event
        time.sleep(0.05)
    raise AssertionError(f"no {event_type} in the history")


def test_reset_forks_a_stuck_run_onto_the_new_code(start_worker, client: Client) -> None:
    v1 = start_worker(App(workflows=[deploy_v1], activities=[step]))
    handle = client.start_workflow("deploy", workflow_id="release-7")
    wait_for(handle, "ActivityCompleted")
    v1.stop()

    plan = handle.reset(1, "recover from bad deploy", operator_id="oncall", dry_run=True)
    assert plan["valid"] and plan["new_execution_id"] is None
    assert handle.describe()["status"] == "RUNNING"  # the dry run wrote nothing

    bad = handle.reset(3, "mid-group", dry_run=True)  # ActivityScheduled is unresolved at 3
    assert not bad["valid"] and any("unresolved" in p for p in bad["problems"])
    with pytest.raises(InvalidArgument, match="unresolved"):
        handle.reset(3, "mid-group")

    handle.signal("go", "approved")  # arrives after the boundary: carried with buffer
    plan = handle.reset(1, "recover from bad deploy", operator_id="oncall", signal_reapply="buffer")
    assert handle.describe()["status"] == "TERMINATED"
    fork = client.get_handle(plan["new_execution_id"], deploy_v2)
    assert [e["event_type"] for e in fork.history()][:3] == [
        "WorkflowStarted",
        "WorkflowResetFork",
        "SignalReceived",
    ]
    start_worker(App(workflows=[deploy_v2], activities=[step]))
    assert fork.result(timeout=30) == ["build-v2", "approved", "v1"]
    with pytest.raises(WorkflowNotRunning):
        handle.reset(1, "again")


def test_replay_cli_catches_the_divergence(start_worker, client: Client, tmp_path: Path, db: str) -> None:
    start_worker(App(workflows=[deploy_v1], activities=[step]))
    handle = client.start_workflow("deploy")
    wait_for(handle, "ActivityCompleted")
    handle.signal("go", "ok")
    handle.result(timeout=30)
    history = tmp_path / "history.json"
    history.write_text(json.dumps(handle.history(), default=str))
    app_module = tmp_path / "apps_under_test.py"
    app_module.write_text(
        "from harvest import App\n"
        "from tests_reset_app import deploy_v1, deploy_v2, step\n"
        "v1 = App(workflows=[deploy_v1], activities=[step])\n"
        "v2 = App(workflows=[deploy_v2], activities=[step])\n"
    )
    (tmp_path / "tests_reset_app.py").write_text(Path(__file__).read_text())
    env = {**os.environ, "PYTHONPATH": f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    ok = subprocess.run(
        [*HARVEST, "replay", "--app", "apps_under_test:v1", "--json-path", str(history)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert ok.returncode == 0, ok.stderr
    bad = subprocess.run(
        [*HARVEST, "replay", "--app", "apps_under_test:v2", "--json-path", str(history)],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        check=False,
    )
    assert bad.returncode == 1
    assert "replay failed" in bad.stderr and "Traceback" not in bad.stderr
    # What a developer acts on: the recorded event, and the workflow's line that diverged.
    assert re.search(r"at seq 1 \(event \d+ ActivityScheduled\): expected", bad.stderr), bad.stderr
    assert "  raised in deploy_v2 (tests_reset_app.py:" in bad.stderr, bad.stderr


def test_version_usage_guard(start_worker, client: Client, db: str) -> None:
    start_worker(App(workflows=[deploy_v2], activities=[step]))
    handle = client.start_workflow("deploy")
    wait_for(handle, "ActivityCompleted")
    env = {**os.environ, "HARVEST_DATABASE_URL": db}
    guard = [*HARVEST, "version-usage", "--change-id", "gate-first", "--version", "1", "--guard"]
    busy = subprocess.run(guard, capture_output=True, text=True, env=env, check=False)
    assert busy.returncode == 1 and "1 active run(s)" in busy.stderr
    handle.signal("go", "ok")
    handle.result(timeout=30)
    free = subprocess.run(guard, capture_output=True, text=True, env=env, check=False)
    assert free.returncode == 0, free.stderr
    with client.sql() as sql:
        assert sql.count_versions("gate-first", None, "terminal")[0]["executions"] == 1
