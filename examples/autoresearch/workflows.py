"""An autoresearch-style overnight loop as durable workflows, offline.

``research_night`` runs until morning: each iteration the researcher (an activity) proposes a
change to the best candidate so far, a child workflow ``train_candidate`` trains it, and a keep
rule decides: keep it if it beats the best by ``min_improvement``, else discard it. Every
``iterations_per_run`` iterations the loop continues as new, carrying its progress.

``train_candidate`` takes the durable mutex ``gpu:<name>`` (one training at a time on a GPU,
however many loops share it), submits the run, waits for it with a durable timer as long as
the trainer says it takes (simulated minutes: nothing computes here), and fetches the loss.

A schedule starts a night at 22:00 UTC every day; ``stop`` (a signal) ends the night after
the iteration in flight; ``leaderboard`` (a query) reads the progress; ``extend_night`` (an
update) pushes the morning back and answers the new end.
"""

from __future__ import annotations

import datetime as dt
import hashlib
from dataclasses import dataclass, field
from typing import Any

from examples.autoresearch import simulation
from examples.autoresearch.simulation import Candidate
from harvest import (
    ActivityContext,
    App,
    Schedule,
    WorkflowContext,
    WorkflowSchedule,
    activity,
    query,
    update,
    workflow,
)

RECENT = 10


@dataclass
class NightPlan:
    seed: int = 7
    hours: float = 8.0
    iterations_per_run: int = 25
    min_improvement: float = 0.001
    gpu: str = "gpu-0"


@dataclass
class TrainingJob:
    job_id: str
    candidate: Candidate
    minutes: int


@dataclass
class Trial:
    iteration: int
    candidate: Candidate
    val_loss: float
    minutes: int
    kept: bool
    commit: str = ""


@dataclass
class Progress:
    started_at: dt.datetime
    ends_at: dt.datetime
    iteration: int = 0
    best: Trial | None = None
    kept: list[Trial] = field(default_factory=list)
    recent: list[Trial] = field(default_factory=list)
    gpu_minutes: int = 0
    runs: int = 1
    ended: str = ""  # morning | stopped


# -- activities: the researcher, the trainer, the repository ----------------------------------


@activity(start_to_close="5m")
def propose_change(ctx: ActivityContext, seed: int, iteration: int, best: Candidate | None) -> Candidate:
    """The researcher's next idea (scripted and seeded here; a model call in real life)."""
    return simulation.propose(seed, iteration, best)


@activity(start_to_close="1m")
def submit_training(ctx: ActivityContext, seed: int, candidate: Candidate) -> TrainingJob:
    """Submit a training run; answers the job and how long it will take."""
    job_id = hashlib.sha256(f"{seed}:{candidate}".encode()).hexdigest()[:12]
    return TrainingJob(job_id, candidate, simulation.training_minutes(candidate))


@activity(start_to_close="1m")
def fetch_result(ctx: ActivityContext, seed: int, job: TrainingJob) -> float:
    """The finished run's validation loss."""
    return simulation.validation_loss(seed, job.candidate)


@activity(start_to_close="1m")
def keep_candidate(ctx: ActivityContext, trial: Trial) -> str:
    """Keep a candidate (a real loop commits its train.py); answers the commit id."""
    return hashlib.sha256(f"{trial.iteration}:{trial.candidate}".encode()).hexdigest()[:10]


# -- the workflows ----------------------------------------------------------------------------


@workflow
async def train_candidate(ctx: WorkflowContext, seed: int, candidate: Candidate, gpu: str) -> Trial:
    """Train ``candidate`` on ``gpu`` (one run at a time there); answers an unjudged Trial."""
    async with ctx.mutex(f"gpu:{gpu}"):
        job: TrainingJob = await ctx.execute_activity(submit_training, seed, candidate)
        await ctx.sleep(dt.timedelta(minutes=job.minutes))  # the run trains meanwhile
        loss: float = await ctx.execute_activity(fetch_result, seed, job)
    return Trial(0, candidate, loss, job.minutes, kept=False)


@workflow
async def research_night(ctx: WorkflowContext, plan: NightPlan, progress: Progress | None = None) -> Progress:
    """Propose, train, keep or discard, until morning (or ``stop``)."""
    if progress is None:
        now = ctx.now()
        progress = Progress(started_at=now, ends_at=now + dt.timedelta(hours=plan.hours))
    ctx.state["progress"] = progress
    this_run = 0
    while True:
        if ctx.pending_signals("stop"):
            await ctx.wait_for_signal("stop")
            progress.ended = "stopped"
            return progress
        if ctx.now() >= progress.ends_at:
            progress.ended = "morning"
            return progress
        progress.iteration += 1
        best = progress.best.candidate if progress.best is not None else None
        candidate: Candidate = await ctx.execute_activity(propose_change, plan.seed, progress.iteration, best)
        trial: Trial = await ctx.execute_child_workflow(
            train_candidate,
            plan.seed,
            candidate,
            plan.gpu,
            workflow_id=f"{ctx.workflow_id}/trial-{progress.iteration}",
        )
        trial.iteration = progress.iteration
        progress.gpu_minutes += trial.minutes
        if progress.best is None or trial.val_loss < progress.best.val_loss - plan.min_improvement:
            trial.kept = True
            trial.commit = await ctx.execute_activity(keep_candidate, trial)
            progress.best = trial
            progress.kept.append(trial)
        progress.recent = [*progress.recent[-(RECENT - 1) :], trial]
        this_run += 1
        if this_run >= plan.iterations_per_run or ctx.should_continue_as_new():
            progress.runs += 1
            ctx.continue_as_new(plan, progress)


@query(workflow=research_night)
def leaderboard(ctx: WorkflowContext) -> dict[str, Any]:
    """The night so far: iterations, the best trial, what was kept, when it ends."""
    progress: Progress = ctx.state["progress"]
    best = progress.best
    return {
        "iteration": progress.iteration,
        "ends_at": progress.ends_at.isoformat(),
        "best_loss": None if best is None else best.val_loss,
        "best": None if best is None else best.candidate,
        "kept": [(t.iteration, t.val_loss, t.commit) for t in progress.kept],
        "gpu_minutes": progress.gpu_minutes,
        "runs": progress.runs,
    }


def _check_extension(ctx: WorkflowContext, hours: float) -> None:
    if not 0 < hours <= 12:
        raise ValueError(f"extend the night by more than 0 and at most 12 hours, not {hours}")


@update(workflow=research_night, validator=_check_extension)
def extend_night(ctx: WorkflowContext, hours: float) -> dt.datetime:
    """Push the morning back by ``hours``; answers the new end."""
    progress: Progress = ctx.state["progress"]
    progress.ends_at += dt.timedelta(hours=hours)
    return progress.ends_at


nightly = WorkflowSchedule(
    "autoresearch_nightly",
    Schedule.cron("0 22 * * *", tz="UTC"),
    workflow=research_night,
    input=NightPlan(),
)


def build_app(*, nightly_schedule: bool = True) -> App:
    """The App; without the schedule to run nights by hand (the demo, the tests)."""
    return App(
        workflows=[research_night, train_candidate],
        activities=[propose_change, submit_training, fetch_result, keep_candidate],
        queries=[leaderboard],
        updates=[extend_night],
        schedules=[nightly] if nightly_schedule else [],
    )


app = build_app()
