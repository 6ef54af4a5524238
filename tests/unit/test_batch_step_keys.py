"""A batch step's keywords are one list (harvest.client.batch.StepKeywords): what both clients'
act_on_workflows build, SqlApi.act_on_workflows takes, the HTTP route's body declares and the CLI
over HTTP sends. The clients used to take ``dict(locals())``, so a local added above it became a
keyword of every step."""

from __future__ import annotations

import asyncio
import inspect

from harvest import AsyncClient, Client
from harvest.client import batch
from harvest.client.batch import FILTER_KEYS, OPTION_KEYS, STEP_KEYS
from harvest.db.sqlapi import AsyncSqlApi, SqlApi


def _keywords(fn: object) -> set[str]:
    return {p.name for p in inspect.signature(fn).parameters.values() if p.kind is p.KEYWORD_ONLY}


def test_one_list_names_a_steps_keywords() -> None:
    assert set(STEP_KEYS) == set(FILTER_KEYS) | set(OPTION_KEYS) and not set(FILTER_KEYS) & set(OPTION_KEYS)
    for api in (SqlApi, AsyncSqlApi):  # (execution_ids: a moved run's step alone, batch.by_id)
        assert _keywords(api.act_on_workflows) - {"execution_ids"} == set(STEP_KEYS)
    from harvest.web.routes.workflows import BATCH_BODY

    assert set(STEP_KEYS) <= set(BATCH_BODY["properties"])


def test_both_clients_build_every_step_keyword_from_their_arguments(monkeypatch) -> None:
    """Each client's keywords are a step's (batch_size its limit; cursor and progress its own),
    and the step it hands the batch flow has every key, each from the argument of its name."""
    for client in (Client, AsyncClient):
        given = _keywords(client.act_on_workflows) - {"batch_size", "progress"}
        assert given | {"limit", "cursor"} == set(STEP_KEYS), client
    seen: list[dict] = []

    def flow(shards, on_shard, follow, action, filters, **options):
        options.pop("is_outage"), options.pop("failure_text")  # (the client's, not the step's)
        assert options.pop("cursor", None) is None  # (a client's batch starts at each shard's start)
        seen.append({**filters, **options, "action": action})
        return batch.BatchTally(action)
        yield  # (a flow)

    monkeypatch.setattr(batch, "batch_flow", flow)

    class Fake:  # (the client's self: the flow above makes no call)
        router = type("Router", (), {"readable": {0}})()
        _target = type("Target", (), {"sharded": False})()

    given = {
        "state": "RUNNING",
        "workflow_name": "w",
        "search_attributes": ("k=v",),
        "created_after": "2026-01-01T00:00:00Z",
        "created_before": "2026-02-01T00:00:00Z",
        "filter": "f",
        "workflow_id": "order-1",
        "failing": True,
        "reason": "r",
        "signal_name": "s",
        "payload": {"p": 1},
        "dry_run": True,
        "batch_size": 7,
        "operator_id": "o",
        "batch_id": "b",
        "reset_to": "before_time",
        "before": "2026-01-15T00:00:00Z",
        "signal_reapply": "buffer",
    }
    Client.act_on_workflows(Fake(), "signal", **given)  # type: ignore[arg-type]
    asyncio.run(AsyncClient.act_on_workflows(Fake(), "signal", **given))  # type: ignore[arg-type]
    expected = {
        **{k: v for k, v in given.items() if k != "batch_size"},
        "search_attributes": ["k=v"],
        "limit": 7,
        "action": "signal",
        "progress": None,
    }
    assert seen == [expected, expected]


def test_search_attributes_none_is_no_attribute_filter(monkeypatch) -> None:
    """``search_attributes=None`` (an argparse ``append`` left unset) was no attribute filter
    while the clients took ``dict(locals())`` (filters_of reads None as none); building the step
    with ``list(search_attributes)`` made it a TypeError."""
    seen: list[list[str]] = []

    def flow(shards, on_shard, follow, action, filters, **options):
        seen.append(filters["search_attributes"])
        return batch.BatchTally(action)
        yield  # (a flow)

    monkeypatch.setattr(batch, "batch_flow", flow)

    class Fake:
        router = type("Router", (), {"readable": {0}})()
        _target = type("Target", (), {"sharded": False})()

    Client.act_on_workflows(Fake(), "cancel", workflow_name="w", search_attributes=None)  # type: ignore[arg-type]
    asyncio.run(AsyncClient.act_on_workflows(Fake(), "cancel", workflow_name="w", search_attributes=None))  # type: ignore[arg-type]
    assert seen == [[], []]
