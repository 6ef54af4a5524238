"""Snippets of the user guide's pages run as the pages show them (the same mechanism as
test_docs_first_example.py and test_docs_testing_page.py: a page's block, found by what it
starts with or holds, executed as a module against the suite's database).

Each test pins a walk through the docs that once failed as written:

- activities.md, "Typed failures": the `except ActivityError` block caught nothing, since a
  final failure is dead-lettered by default and the workflow waits (the test environment then
  reports the run stuck).
- workflows.md, "Sagas": the same, so `saga.compensate()` never ran.
- messages.md, "Signals": the `approval` block used `SignalTimeout` without importing it, so its
  timeout branch raised NameError (the workflow task failing on every attempt).
- schedules.md, "Operating schedules": every command of the CLI block exits 0; its backfill
  ranged over future dates, which a backfill refuses.
- dags.md, the first example: its stub activities returned None where the next task's
  signature wants a dict, so `transform` failed (PayloadError) and the run FAILED; its Python
  trigger used `Client` without importing it.
- payloads.md, "Codecs": the key variable it read, HARVEST_KEY_K1, made `harvest worker` refuse
  to start (an unknown HARVEST_ setting).
- versioning.md: the `ctx.version` gate, the Python export, the replayer test and the
  `version-usage` block, run as written (they passed; pinned so the page's path stays whole).
"""

from __future__ import annotations

import asyncio
import re
import shlex
import sys
import textwrap
import types
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest
from click.testing import CliRunner

from harvest import ActivityFailure, App, Client, WorkflowFailed
from harvest.cli.main import main
from harvest.config.config import load_config
from harvest.core.errors import NotFound
from harvest.testing import WorkflowEnvironment

ROOT = Path(__file__).resolve().parents[2]
BLOCK = re.compile(r"^```(\w*)\n(.*?)^```", re.S | re.M)


def _block(page: str, found: Callable[[str], bool], lang: str = "python") -> str:
    blocks = [text for kind, text in BLOCK.findall((ROOT / page).read_text()) if kind == lang]
    return next(b for b in blocks if found(b))


@pytest.fixture
def as_module() -> Iterator[Callable[[str, str], types.ModuleType]]:
    """Executes source as a module registered under name (dataclasses look their module up)."""
    made: list[str] = []

    def run(name: str, source: str) -> types.ModuleType:
        module = types.ModuleType(name)
        sys.modules[name] = module
        made.append(name)
        exec(compile(source, f"<{name}>", "exec"), module.__dict__)
        return module

    yield run
    for name in made:
        sys.modules.pop(name, None)


def test_activities_typed_failure_is_caught_as_the_page_shows(
    db: str, as_module: Callable[[str, str], types.ModuleType]
) -> None:
    page = "docs/activities.md"
    raising = _block(page, lambda b: b.startswith("from harvest import ActivityFailure"))
    catching = _block(page, lambda b: b.startswith("from harvest import ActivityError"))
    source = (
        raising
        + "\nfrom harvest import workflow\n\n@workflow\nasync def pay(ctx, amount: int) -> str | None:\n"
        + textwrap.indent(catching, "    ")
        + "    return charge_id\n"
    )
    module = as_module("docs_activities_typed_failures", source)
    app = App(workflows=[module.pay], activities=[module.charge_card])
    with WorkflowEnvironment(app, dsn=db) as env:
        # amount 0: the non-retryable InvalidInput, which the page's except turns into None
        assert env.client.start_workflow(module.pay, 0).result(timeout=30) is None


def test_workflows_saga_compensates_as_the_page_shows(
    db: str, as_module: Callable[[str, str], types.ModuleType]
) -> None:
    saga = _block("docs/workflows.md", lambda b: b.startswith("from harvest import Saga"))
    steps = ["reserve_hotel", "cancel_hotel", "book_flight", "cancel_flight", "charge_card"]
    source = (
        "from dataclasses import dataclass\nfrom harvest import activity\n\n"
        "@dataclass\nclass Trip:\n    city: str\n\n"
        + "".join(f"@activity\nasync def {step}(ctx, trip: Trip) -> None: ...\n\n" for step in steps)
        + saga
    )
    module = as_module("docs_workflows_saga", source)
    app = App(workflows=[module.book_trip], activities=[getattr(module, step) for step in steps])
    with WorkflowEnvironment(app, dsn=db) as env:
        for step in steps:
            env.mock_activity(step, lambda ctx, trip: None)

        def declined(ctx: object, trip: object) -> None:
            raise ActivityFailure("CardDeclined", "declined", non_retryable=True)

        env.mock_activity("charge_card", declined)
        with pytest.raises(WorkflowFailed):
            env.client.start_workflow(module.book_trip, module.Trip("Oslo")).result(timeout=30)
        assert len(env.activity_calls("cancel_flight")) == 1
        assert len(env.activity_calls("cancel_hotel")) == 1


def test_messages_signal_block_runs_both_ways(
    db: str, as_module: Callable[[str, str], types.ModuleType]
) -> None:
    block = _block("docs/messages.md", lambda b: "async def approval(ctx, doc: str)" in b)
    definition, _, calls = block.partition("\nhandle = ")
    module = as_module("docs_messages_signals", definition)
    with WorkflowEnvironment(App(workflows=[module.approval]), dsn=db) as env:
        namespace = {"client": env.client, "approval": module.approval}
        exec("handle = " + calls, namespace)  # the page's start and signal, as written
        assert namespace["handle"].result(timeout=30) == "budget.pdf: approved"
        # no signal: the one-day timer wins, and the page's except SignalTimeout takes it
        assert env.client.start_workflow(module.approval, "late.pdf").result(timeout=30) == "expired"


def test_schedules_cli_block_runs_as_shown(db: str) -> None:
    block = _block("docs/schedules.md", lambda b: b.startswith("harvest schedule create-workflow"), lang="sh")
    commands = re.sub(r"\\\n\s*", "", block).splitlines()
    runner = CliRunner()
    for line in commands:
        line = re.sub(r"\s+#.*$", "", line).strip()  # a trailing comment
        line = re.sub(r"\[(--.*?)\]", r"\1", line)  # an optional part ([--overlap ...]), given
        if not line.startswith("harvest "):
            continue  # the comment lines that continue a command's comment
        env = {"HARVEST_DATABASE_URL": db, "HARVEST_URL": None}
        result = runner.invoke(main, shlex.split(line)[1:], env=env)
        assert result.exit_code == 0, f"{line}: {result.output}"


def test_dags_first_example_completes_and_its_python_trigger_runs(
    db: str, as_module: Callable[[str, str], types.ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    page = "docs/dags.md"
    first = _block(page, lambda b: b.startswith("from harvest import App, Dag"))
    module = as_module("docs_dags_first", first)
    monkeypatch.setenv("HARVEST_DATABASE_URL", db)
    with WorkflowEnvironment(module.app, dsn=db):
        trigger = _block(page, lambda b: "sql.trigger_dag(" in b)
        namespace: dict = {}
        exec(trigger, namespace)  # the page's trigger and wait, as written (Client() reads the URL)
        with Client(db) as client:
            result = client.get_handle(namespace["run"]["execution_id"]).result(timeout=30)
    assert result["states"] == {
        "extract": "success",
        "transform": "success",
        "load": "success",
        "report": "success",
        "page": "skipped",  # one_failed, and nothing failed
    }
    assert result["results"]["report"] == "report for 2026-04-21"


def test_payloads_codec_key_variable_is_one_harvest_starts_with(monkeypatch: pytest.MonkeyPatch) -> None:
    block = _block("docs/payloads.md", lambda b: "AesGcmCodec(KEYS)" in b)
    [variable] = re.findall(r'os\.environ\["(\w+)"\]', block)
    # A HARVEST_* variable that is not a setting stops `harvest worker` and the CLI at start-up.
    load_config(env={"HARVEST_DATABASE_URL": "postgresql://localhost/x", variable: "00" * 32})


def test_versioning_gate_export_and_replay_run_as_the_page_shows(
    db: str,
    as_module: Callable[[str, str], types.ModuleType],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    page = "docs/versioning.md"
    gate = _block(page, lambda b: b.startswith("from harvest import DEFAULT_VERSION, workflow"))
    source = (
        "from harvest import activity\n\n"
        "@activity\nasync def send_email(ctx, user: str) -> str:\n    return 'email'\n\n"
        "@activity\nasync def send_sms(ctx, user: str) -> str:\n    return 'sms'\n\n" + gate
    )
    module = as_module("docs_versioning_gate", source)
    app = App(workflows=[module.notify], activities=[module.send_email, module.send_sms])
    monkeypatch.chdir(tmp_path)
    (tmp_path / "fixtures").mkdir()
    with WorkflowEnvironment(app, dsn=db) as env:
        handle = env.client.start_workflow(module.notify, "ann")
        assert handle.result(timeout=30) == "sent"
        scheduled = [
            e["event_data"]["name"] for e in handle.history() if e["event_type"] == "ActivityScheduled"
        ]
        assert scheduled == ["send_sms"]  # a first run takes the new path
        export = _block(page, lambda b: "client.get_handle(execution_id).history()" in b)
        exec(export, {"client": env.client, "execution_id": handle.execution_id})  # as written
    # The page's test, with this App in place of `from myapp import app`, on the page's fixture.
    test = _block(page, lambda b: b.startswith("from harvest.testing import WorkflowReplayer"))
    test = test.replace("from myapp import app   # the App with the new code", "")
    exec(test + "\ntest_notify_is_replay_safe()\n", {"app": app})
    # The retirement report's commands: a run recorded v1 (finished, so no active run holds it).
    block = _block(page, lambda b: b.startswith("harvest version-usage --change-id use-sms"), lang="sh")
    env = {"HARVEST_DATABASE_URL": db, "HARVEST_URL": None}
    runner = CliRunner()
    for line in block.splitlines():
        line = re.sub(r"\s+#.*$", "", line).strip()
        if "--shard-id 2" in line:
            continue  # one database: shard 2 is refused (the page's [shards] example)
        result = runner.invoke(main, shlex.split(line)[1:], env=env)
        assert result.exit_code == 0, f"{line}: {result.output}"
    args = ["version-usage", "--change-id", "use-sms", "--state-group", "all", "--output", "json"]
    done = runner.invoke(main, args, env=env)
    assert '"version": 1, "state_group": "terminal", "executions": 1' in done.output, done.output


def test_integrations_fastapi_block_serves_a_start_and_maps_errors(
    db: str, as_module: Callable[[str, str], types.ModuleType], monkeypatch: pytest.MonkeyPatch
) -> None:
    # The page's `from myapp.workflows import app, checkout`: an App with a checkout workflow.
    as_module("myapp", "")
    as_module(
        "myapp.workflows",
        "from harvest import App, workflow\n\n"
        "@workflow\nasync def checkout(ctx, order_id: str) -> str:\n    return f'paid {order_id}'\n\n"
        "app = App(workflows=[checkout])\n",
    )
    block = _block("docs/integrations.md", lambda b: b.startswith("from fastapi import FastAPI"))
    monkeypatch.setenv("HARVEST_DATABASE_URL", db)
    monkeypatch.chdir(ROOT / "tests")  # no harvest.toml of the caller's directory
    module = as_module("docs_integrations_fastapi", block)

    @module.api.get("/missing")
    async def missing() -> None:
        raise NotFound("no such order")

    async def go() -> None:
        async with module.api.router.lifespan_context(module.api):
            transport = httpx.ASGITransport(app=module.api)
            async with httpx.AsyncClient(transport=transport, base_url="http://app") as http:
                started = await http.post("/orders/7")
                assert started.status_code == 202, started.text
                client = module.api.state.harvest.client
                handle = client.get_handle(started.json()["execution_id"])
                assert await handle.result(timeout=30) == "paid 7"  # the in-process worker ran it
                refused = await http.get("/missing")
                assert refused.status_code == 404
                assert refused.json()["error"]["code"] == "not_found"

    asyncio.run(go())
