"""examples/autoresearch: nights of simulated training in well under a second of wall time
each, the keep rule, continue-as-new, the GPU mutex shared by two loops, stop and extend."""

from __future__ import annotations

import datetime as dt
import time

import psycopg
import pytest

from examples.autoresearch import NightPlan, Progress, app, build_app, research_night, simulation
from examples.autoresearch.__main__ import night
from harvest import App, StartOptions, UpdateRejected
from harvest.testing import WorkflowEnvironment


@pytest.fixture
def harvest_app() -> App:
    return build_app(nightly_schedule=False)  # nights started by the tests only


def expected_night(plan: NightPlan) -> list[tuple[int, float, bool]]:
    """The night the seeded researcher and trainer give, by the keep rule, computed directly."""
    trials, elapsed, best, best_loss = [], 0, None, 0.0
    iteration = 0
    while elapsed < plan.hours * 60:
        iteration += 1
        candidate = simulation.propose(plan.seed, iteration, best)
        loss = simulation.validation_loss(plan.seed, candidate)
        elapsed += simulation.training_minutes(candidate)
        kept = best is None or loss < best_loss - plan.min_improvement
        if kept:
            best, best_loss = candidate, loss
        trials.append((iteration, loss, kept))
    return trials


def test_a_night_keeps_only_improvements_and_rotates(harvest_env: WorkflowEnvironment):
    plan = NightPlan(seed=11, hours=4, iterations_per_run=4)
    start, began = harvest_env.now(), time.monotonic()

    progress = night(harvest_env, plan)  # what python -m examples.autoresearch runs, shorter

    expected = expected_night(plan)
    assert progress.ended == "morning"
    assert progress.iteration == len(expected) > 8
    assert [(t.iteration, t.val_loss) for t in progress.kept] == [(i, v) for i, v, kept in expected if kept]
    losses = [t.val_loss for t in progress.kept]
    assert losses == sorted(losses, reverse=True) and len(set(losses)) == len(losses)
    assert all(t.commit for t in progress.kept)
    assert progress.runs == -(-len(expected) // plan.iterations_per_run)  # continued as new
    assert harvest_env.now() - start >= dt.timedelta(hours=4)
    # Skipped, not waited out: one real training alone would take ten minutes; a loaded machine can
    # take seconds (an idle one, under a second a simulated hour).
    assert time.monotonic() - began < 60


def test_two_loops_share_the_gpu_one_training_at_a_time(harvest_env: WorkflowEnvironment):
    client = harvest_env.client
    plans = [NightPlan(seed=s, hours=2, gpu="gpu-shared") for s in (1, 2)]
    handles = [
        client.start_workflow(research_night, p, options=StartOptions(workflow_id=f"night-{p.seed}"))
        for p in plans
    ]
    nights: list[Progress] = [h.result(timeout=30) for h in handles]

    assert all(n.gpu_minutes > 0 for n in nights)
    longest = max(t.minutes for n in nights for t in n.recent)
    # One GPU, two hours: the trainings of both loops fit in it end to end (the last one may
    # run past the morning); without the mutex each loop would train for two hours.
    assert sum(n.gpu_minutes for n in nights) <= 120 + longest


def test_stop_ends_the_night_after_the_training_in_flight_and_extend_moves_the_morning(
    harvest_env: WorkflowEnvironment,
):
    handle = harvest_env.client.start_workflow(research_night, NightPlan(hours=8))
    harvest_env.wait_until_idle()  # the first training is running (a timer)
    board = handle.query("leaderboard")
    assert (board["iteration"], board["best"]) == (1, None)
    with pytest.raises(UpdateRejected, match="at most 12 hours"):
        handle.update("extend_night", 20)
    morning = dt.datetime.fromisoformat(board["ends_at"])
    assert handle.update("extend_night", 2, result_type=dt.datetime) == morning + dt.timedelta(hours=2)

    handle.signal("stop")
    progress: Progress = handle.result(timeout=10)

    assert (progress.ended, progress.iteration, len(progress.kept)) == ("stopped", 1, 1)
    assert progress.ends_at == morning + dt.timedelta(hours=2)


def test_the_app_declares_the_nightly_schedule(db: str):
    with WorkflowEnvironment(app, dsn=db), psycopg.connect(db) as conn:
        row = conn.execute(
            "SELECT workflow_name, cron, timezone, overlap, input FROM harvest.schedules WHERE name = %s",
            ("autoresearch_nightly",),
        ).fetchone()
    assert row is not None
    assert row[:4] == ("research_night", "0 22 * * *", "UTC", "skip")
    assert row[4][0]["hours"] == 8.0
