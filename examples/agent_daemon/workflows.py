"""An agent daemon as durable workflows.

``agent_daemon`` is one long-running workflow: tasks arrive by the signal ``inbox``, each runs
as a child workflow ``agent_session``, the daemon keeps the books, and it continues as new
every ``tasks_per_run`` tasks. ``agent_session`` is the agent loop: the model (an activity)
decides the next tool call, the tool runs as an activity, its result goes back into the
transcript, until the model answers. Each model call and each tool call is recorded once in
the session's history, so a daemon killed mid-session resumes by replay and never pays for a
finished turn twice.

The sessions share one workspace directory. A session plans without a lock and takes the
durable mutex ``workspace:<dir>`` for the turns that read and write it, so two sessions editing
the same file serialise instead of losing each other's write.

Costs are kept twice, for two jobs. The budget logic needs the books in workflow state, where a
decision can read them: each model reply carries its token counts, the session prices them
(``PRICE_*``) and stops when it reaches its own budget, and the daemon admits a task only if its
budget fits what is left of the daemon's, reserving it until the session reports what it really
spent. And ``call_model`` records each call in Harvest's agent cost ledger
(``ctx.record_llm_call``), which ``harvest usage`` and ``count_usage`` sum per workflow or per
tenant across every run (docs/flow-control.md, "The agent cost ledger").
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from examples.agent_daemon import model
from examples.agent_daemon.model import Message, ModelReply, ToolCall
from harvest import (
    ActivityContext,
    App,
    ChildWorkflowError,
    RetryPolicy,
    WorkflowContext,
    activity,
    query,
    update,
    workflow,
)

# Prices in millionths of a US dollar per token ($3 and $15 per million tokens).
PRICE_INPUT_MICROS = 3
PRICE_OUTPUT_MICROS = 15
RECENT = 10


@dataclass
class Task:
    session_id: str
    prompt: str
    budget_micros: int = 50_000
    max_turns: int = 8


@dataclass
class Inbox:
    kind: str  # task | stop
    task: Task | None = None


@dataclass
class Turn:
    text: str
    tool: str | None
    input_tokens: int
    output_tokens: int
    cost_micros: int


@dataclass
class SessionReport:
    session_id: str
    status: str  # done | over_budget | max_turns | failed | refused
    answer: str = ""
    turns: list[Turn] = field(default_factory=list)
    cost_micros: int = 0

    @property
    def tokens(self) -> tuple[int, int]:
        return sum(t.input_tokens for t in self.turns), sum(t.output_tokens for t in self.turns)


@dataclass
class DaemonState:
    workspace: str
    budget_micros: int
    spent_micros: int = 0
    reserved_micros: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    sessions: dict[str, int] = field(default_factory=dict)  # status -> count
    recent: list[SessionReport] = field(default_factory=list)
    runs: int = 1


# -- activities ------------------------------------------------------------------------------


def price_micros(input_tokens: int, output_tokens: int) -> int:
    """A call's cost in millionths of a US dollar."""
    return input_tokens * PRICE_INPUT_MICROS + output_tokens * PRICE_OUTPUT_MICROS


@activity(start_to_close="2m", retry=RetryPolicy.exponential(max_attempts=3, initial="2s"))
def call_model(ctx: ActivityContext, prompt: str, transcript: list[Message]) -> ModelReply:
    """One model call (here the scripted offline model; a real one is an API call), recorded
    in the cost ledger by the attempt that made it."""
    started = time.monotonic()
    answer = model.reply(prompt, transcript)
    ctx.record_llm_call(
        model.MODEL,
        input_tokens=answer.input_tokens,
        output_tokens=answer.output_tokens,
        cost_usd_micros=price_micros(answer.input_tokens, answer.output_tokens),
        latency_ms=int((time.monotonic() - started) * 1000),
    )
    return answer


def _inside(workspace: str, path: str) -> Path:
    root = Path(workspace).resolve()
    target = (root / path).resolve()
    if not target.is_relative_to(root):
        raise ValueError(f"{path!r} is outside the workspace")
    return target


@activity(start_to_close="30s")
def read_file(ctx: ActivityContext, workspace: str, args: dict[str, Any]) -> str:
    """The tool ``read_file``: a file of the workspace ("" when it does not exist)."""
    target = _inside(workspace, str(args["path"]))
    return target.read_text() if target.exists() else ""


@activity(start_to_close="30s")
def write_file(ctx: ActivityContext, workspace: str, args: dict[str, Any]) -> str:
    """The tool ``write_file``: replace a file of the workspace with ``content``."""
    target = _inside(workspace, str(args["path"]))
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(str(args["content"]))
    return f"wrote {len(str(args['content']))} characters to {args['path']}"


TOOLS = {"read_file": read_file, "write_file": write_file}


# -- the agent loop --------------------------------------------------------------------------


@workflow
async def agent_session(ctx: WorkflowContext, task: Task, workspace: str) -> SessionReport:
    """Ask the model, run the tool it calls, repeat until it answers or the budget or the turn
    limit is reached."""
    report = SessionReport(task.session_id, "running")
    ctx.state["report"] = report
    transcript = [Message("user", task.prompt)]

    async def think() -> ModelReply:
        answer: ModelReply = await ctx.execute_activity(call_model, task.prompt, transcript)
        cost = price_micros(answer.input_tokens, answer.output_tokens)
        tool = answer.tool_call.tool if answer.tool_call else None
        report.turns.append(Turn(answer.text, tool, answer.input_tokens, answer.output_tokens, cost))
        report.cost_micros += cost
        transcript.append(Message("assistant", answer.text))
        return answer

    async def use(call: ToolCall) -> str:
        tool = TOOLS.get(call.tool)
        if tool is None:
            return f"error: no tool named {call.tool!r}"
        result: str = await ctx.execute_activity(tool, workspace, call.args)
        return result

    answer = await think()  # planning needs no lock
    if answer.tool_call is not None:
        async with ctx.mutex(f"workspace:{workspace}"):
            while answer.tool_call is not None:
                if report.cost_micros >= task.budget_micros:
                    report.status = "over_budget"
                    break
                if len(report.turns) >= task.max_turns:
                    report.status = "max_turns"
                    break
                transcript.append(Message("tool", await use(answer.tool_call)))
                answer = await think()
    if report.status == "running":
        report.status = "done"
    report.answer = answer.text
    return report


@query(workflow=agent_session)
def ledger(ctx: WorkflowContext) -> SessionReport:
    """The session so far: every turn with its tokens and cost."""
    report: SessionReport = ctx.state["report"]
    return report


# -- the daemon ------------------------------------------------------------------------------


@workflow
async def agent_daemon(ctx: WorkflowContext, state: DaemonState, tasks_per_run: int = 100) -> DaemonState:
    """Take tasks from the ``inbox`` signal until a ``stop`` message; each runs as a child
    ``agent_session`` beside the others. Continues as new every ``tasks_per_run`` tasks."""
    ctx.state["daemon"] = state
    running: list[asyncio.Task[None]] = []
    taken = 0

    def record(report: SessionReport) -> None:
        state.sessions[report.status] = state.sessions.get(report.status, 0) + 1
        state.recent = [*state.recent[-(RECENT - 1) :], report]

    async def run(task: Task) -> None:
        try:
            report: SessionReport = await ctx.execute_child_workflow(
                agent_session, task, state.workspace, workflow_id=f"{ctx.workflow_id}/{task.session_id}"
            )
        except ChildWorkflowError as exc:
            report = SessionReport(task.session_id, "failed", f"{exc.status}: {exc.error_type}")
        state.reserved_micros -= task.budget_micros
        state.spent_micros += report.cost_micros
        tokens_in, tokens_out = report.tokens
        state.input_tokens += tokens_in
        state.output_tokens += tokens_out
        record(report)

    while True:
        message: Inbox = await ctx.wait_for_signal("inbox", type_hint=Inbox)
        if message.kind == "stop":
            await asyncio.gather(*running)
            return state
        if message.task is None:
            continue
        task = message.task
        taken += 1
        if state.spent_micros + state.reserved_micros + task.budget_micros > state.budget_micros:
            record(
                SessionReport(
                    task.session_id, "refused", "its budget does not fit what is left of the daemon's"
                )
            )
        else:
            state.reserved_micros += task.budget_micros
            running.append(asyncio.create_task(run(task)))
        if taken >= tasks_per_run or ctx.should_continue_as_new():
            await asyncio.gather(*running)  # a rotation would end the sessions still running
            state.runs += 1
            ctx.continue_as_new(state, tasks_per_run)


@query(workflow=agent_daemon)
def costs(ctx: WorkflowContext) -> dict[str, Any]:
    """The books: budget, spent, reserved, tokens, sessions by status."""
    state: DaemonState = ctx.state["daemon"]
    return {
        "budget_micros": state.budget_micros,
        "spent_micros": state.spent_micros,
        "reserved_micros": state.reserved_micros,
        "input_tokens": state.input_tokens,
        "output_tokens": state.output_tokens,
        "sessions": dict(state.sessions),
        "runs": state.runs,
    }


def _check_raise(ctx: WorkflowContext, amount_micros: int) -> None:
    if amount_micros <= 0:
        raise ValueError("raise the budget by a positive amount")


@update(workflow=agent_daemon, validator=_check_raise)
def raise_budget(ctx: WorkflowContext, amount_micros: int) -> int:
    """Add to the daemon's budget; answers the new budget."""
    state: DaemonState = ctx.state["daemon"]
    state.budget_micros += amount_micros
    return state.budget_micros


app = App(
    workflows=[agent_daemon, agent_session],
    activities=[call_model, read_file, write_file],
    queries=[costs, ledger],
    updates=[raise_budget],
)
