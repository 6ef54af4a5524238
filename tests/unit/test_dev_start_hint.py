"""`harvest dev module:app` prints one curl that starts a workflow of the App. It took the first
name and `{"input": []}`, so for the getting-started App (checkout(ctx, order)) the line a user
copies started a run that failed at once: "parameter 'order' of checkout: missing"."""

from __future__ import annotations

from harvest import App, workflow
from harvest.cli.dev import start_hint


@workflow
async def checkout(ctx, order: dict) -> dict:
    return order


@workflow
async def nightly(ctx, limit: int = 10) -> int:
    return limit


def test_a_workflow_that_needs_no_argument_is_the_one_shown() -> None:
    assert start_hint(App(workflows=[checkout, nightly])) == ("nightly", '{"input": []}', "")


def test_when_every_workflow_needs_arguments_the_line_names_them() -> None:
    name, body, note = start_hint(App(workflows=[checkout]))
    assert (name, body) == ("checkout", '{"input": []}')
    assert note == "(fill input with checkout's arguments, a JSON array: order)"
