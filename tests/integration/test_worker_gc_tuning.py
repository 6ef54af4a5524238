"""`harvest worker` tunes its own process' cyclic GC (harvest/worker/collector.py) unless told not
to: a real `harvest worker` process runs an activity that reports the collector's settings as the
worker's own code sees them."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

import pytest
from worker_helpers import REPO, run_in_cli_worker

from harvest import App, Client, activity, workflow
from harvest.worker.collector import GEN0_THRESHOLD


@activity
async def collector_state(ctx) -> list[int]:
    return [*gc.get_threshold(), gc.get_freeze_count()]


@workflow
async def report_collector(ctx) -> list[int]:
    return await ctx.execute_activity(collector_state)


app = App(workflows=[report_collector], activities=[collector_state])


def interpreter_thresholds() -> list[int]:
    """A fresh interpreter's thresholds (700, 10, 10 on CPython), not this test process' own."""
    code = "import gc; print(*gc.get_threshold())"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    return [int(x) for x in out.stdout.split()]


def worker_collector(db: str, client: Client, args: list[str], env: dict[str, str]) -> list[int]:
    """Run `harvest worker test_worker_gc_tuning:app ARGS`, start a run, return what its activity saw."""
    state, _ = run_in_cli_worker(db, client, "test_worker_gc_tuning:app", report_collector, args, env)
    return list(state)


def test_harvest_worker_tunes_its_collector_by_default(db: str, client: Client) -> None:
    t0, t1, t2, frozen = worker_collector(db, client, [], {})
    default = interpreter_thresholds()
    assert t0 == GEN0_THRESHOLD != default[0]
    assert [t1, t2] == default[1:]  # the older generations keep theirs
    assert frozen > 1000  # start-up's modules, classes and the App


@pytest.mark.parametrize(
    ("args", "env"),
    [
        (["--no-gc-tuning"], {}),
        ([], {"HARVEST_WORKER__GC_TUNING": "false"}),
        # The flag wins over the variable, as every flag does.
        (["--no-gc-tuning"], {"HARVEST_WORKER__GC_TUNING": "true"}),
    ],
    ids=["flag", "variable", "flag-over-variable"],
)
def test_harvest_worker_keeps_the_interpreters_collector_when_told(
    db: str, client: Client, args: list[str], env: dict[str, str]
) -> None:
    t0, t1, t2, frozen = worker_collector(db, client, args, env)
    assert [t0, t1, t2] == interpreter_thresholds()
    assert frozen == 0


def test_tune_collector_returns_what_restores_the_settings() -> None:
    """Process-wide, so in a process of its own."""
    code = (
        "import gc\n"
        "from harvest.worker.collector import tune_collector\n"
        "gc.set_threshold(500, 7, 9)\n"
        "before = tune_collector(4321)\n"
        "print(*before, *gc.get_threshold(), gc.get_freeze_count() > 0)\n"
        "gc.set_threshold(*before); gc.unfreeze()\n"
        "print(*gc.get_threshold(), gc.get_freeze_count())\n"
    )
    path = os.pathsep.join(p for p in (str(REPO / "harvest_py"), os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, "PYTHONPATH": path}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    tuned, restored = out.stdout.splitlines()
    assert tuned.split() == ["500", "7", "9", "4321", "7", "9", "True"]
    assert restored.split() == ["500", "7", "9", "0"]
