"""`harvest dev module:app` prints one curl that starts a workflow of the App. It took the first
name and `{"input": []}`, so for the getting-started App (checkout(ctx, order)) the line a user
copies started a run that failed at once: "parameter 'order' of checkout: missing"."""

from __future__ import annotations

from harvest import App, Dag, activity, workflow
from harvest.cli.dev import start_hint


@workflow
async def checkout(ctx, order: dict) -> dict:
    return order


@workflow
async def nightly(ctx, limit: int = 10) -> int:
    return limit


@activity
async def extract(ctx, conf: dict) -> dict:
    return conf


def test_a_workflow_that_needs_no_argument_is_the_one_shown() -> None:
    assert start_hint(App(workflows=[checkout, nightly])) == ("/workflows/nightly/start", '{"input": []}', "")


def test_when_every_workflow_needs_arguments_the_line_names_them() -> None:
    name, body, note = start_hint(App(workflows=[checkout]))
    assert (name, body) == ("/workflows/checkout/start", '{"input": []}')
    assert note == "(fill input with checkout's arguments, a JSON array: order)"


def test_a_dag_is_shown_by_its_trigger() -> None:
    """The line started order_etl (a DAG) by a plain start, {"input": []}: past the DAG's pause
    and max_active_runs, and without its dag search attribute."""
    order_etl = Dag("order_etl")
    order_etl.task("extract", extract)
    app = App(workflows=[checkout], activities=[extract], dags=[order_etl])
    assert start_hint(app) == ("/dags/order_etl/trigger", '{"conf": {}}', "")
