"""``python -m examples.autoresearch``: one night of the loop, in seconds.

The trainer is simulated and so is the night: this runs the App in the test kit's
``WorkflowEnvironment`` on an embedded PostgreSQL, whose clock jumps to the next timer whenever
nothing else can run, so the eight hours of (simulated) training take a few seconds. In
production the same workflows run on a worker (``harvest worker examples.autoresearch:app``)
and the schedule starts a night at 22:00 UTC.
"""

from __future__ import annotations

import sys

from examples._runner import say
from examples.autoresearch.workflows import NightPlan, Progress, build_app, research_night
from harvest import StartOptions
from harvest.testing import WorkflowEnvironment


def night(env: WorkflowEnvironment, plan: NightPlan) -> Progress:
    """Run one night of ``plan`` and narrate it."""
    handle = env.client.start_workflow(
        research_night, plan, options=StartOptions(workflow_id=f"night-seed-{plan.seed}")
    )
    say(f"night started at {env.now():%H:%M} (simulated), {plan.hours:g} hours, seed {plan.seed}")
    progress: Progress = handle.result(timeout=120)
    for trial in progress.kept:
        c = trial.candidate
        say(
            f"  kept #{trial.iteration:>2}: loss {trial.val_loss:.4f}  lr {c.learning_rate:.2e} "
            f"width {c.width:>4}  ({c.note}) commit {trial.commit}"
        )
    say(
        f"{progress.iteration} trials, {len(progress.kept)} kept, {progress.gpu_minutes} GPU minutes, "
        f"{progress.runs} runs (continue-as-new); ended: {progress.ended} at {env.now():%H:%M}"
    )
    return progress


def main() -> int:
    with WorkflowEnvironment(build_app(nightly_schedule=False)) as env:
        night(env, NightPlan(iterations_per_run=10))
    return 0


if __name__ == "__main__":
    sys.exit(main())
