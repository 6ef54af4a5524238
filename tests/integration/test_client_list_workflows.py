"""The client lists and counts runs as GET /workflows and `harvest workflow list/count` do
(docs/workflows.md, "Listing and counting runs"): `list_workflows` iterates every run the
filters select a page at a time, `list_workflows_page` gives one page with its next_cursor,
`count_workflows` counts per status, workflow name or both. Both clients, one database."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from operator_helpers import start

from harvest import AsyncClient, Client
from harvest.core.errors import InvalidArgument


def _runs(db: str) -> dict[str, list[str]]:
    """Three billing runs (tenant acme, two of them) and two onboarding runs, one cancelled:
    the ids per workflow name, oldest first."""
    out: dict[str, list[str]] = {"billing": [], "onboarding": []}
    with psycopg.connect(db, autocommit=True) as conn:
        for i in range(3):
            attrs = {"tenant": "acme" if i < 2 else "globex"}
            out["billing"].append(start(conn, "billing", f"bill-{i}", search_attributes=attrs))
        for i in range(2):
            out["onboarding"].append(start(conn, "onboarding", f"onb-{i}"))
        conn.execute(
            "UPDATE harvest.executions SET status = 'CANCELLED', completed_at = now() WHERE id = %s",
            (out["onboarding"][0],),
        )
    return out


def _ids(rows: object) -> list[str]:
    return [str(r["execution_id"]) for r in rows]  # type: ignore[attr-defined]


def test_the_client_lists_runs_a_page_at_a_time_with_the_lists_filters(db: str) -> None:
    runs = _runs(db)
    every = runs["billing"] + runs["onboarding"]
    with Client(db) as client:
        first = client.list_workflows_page(page_size=2)
        assert len(first) == 2 and first.status == "complete" and first.unavailable_shards == []
        assert first.next_cursor is not None and all(r["shard_id"] == 0 for r in first)
        seen, cursor = _ids(first), first.next_cursor
        while cursor is not None:
            page = client.list_workflows_page(page_size=2, cursor=cursor)
            seen += _ids(page)
            cursor = page.next_cursor
        assert sorted(seen) == sorted(every) and len(seen) == len(set(seen))
        # The iteration follows the cursor itself: newest first, or oldest first.
        newest = _ids(client.list_workflows(page_size=2))
        assert sorted(newest) == sorted(every)
        assert _ids(client.list_workflows(page_size=2, order="asc")) == newest[::-1]
        # The filters are the list's: name, status, search attributes, filter expression, id.
        assert sorted(_ids(client.list_workflows(workflow_name="billing"))) == sorted(runs["billing"])
        assert _ids(client.list_workflows(state="CANCELLED")) == [runs["onboarding"][0]]
        acme = _ids(client.list_workflows(search_attributes=["tenant=acme"]))
        assert sorted(acme) == sorted(runs["billing"][:2])
        assert _ids(client.list_workflows(filter="tenant = globex")) == [runs["billing"][2]]
        assert _ids(client.list_workflows(workflow_id="onb-1")) == [runs["onboarding"][1]]
        assert _ids(client.list_workflows(failing=True)) == []
        # Bad input: the plan's words.
        with pytest.raises(InvalidArgument, match="page size"):
            client.list_workflows_page(page_size=0)
        with pytest.raises(InvalidArgument, match="other filters"):
            client.list_workflows_page(workflow_name="billing", page_size=2, cursor=first.next_cursor)
        with pytest.raises(InvalidArgument, match="order"):
            client.list_workflows_page(order="sideways")  # type: ignore[arg-type]


def test_the_client_counts_runs_by_status_name_or_both(db: str) -> None:
    _runs(db)
    with Client(db) as client:
        by_status = client.count_workflows()
        assert by_status.status == "complete" and by_status.next_cursor is None
        assert {r["status"]: r["executions"] for r in by_status} == {"RUNNING": 4, "CANCELLED": 1}
        by_name = client.count_workflows(group_by="workflow_name")
        assert {r["workflow_name"]: r["executions"] for r in by_name} == {"billing": 3, "onboarding": 2}
        both = client.count_workflows(group_by="all", state="RUNNING")
        assert {(r["status"], r["workflow_name"]): r["executions"] for r in both} == {
            ("RUNNING", "billing"): 3,
            ("RUNNING", "onboarding"): 1,
        }
        acme = client.count_workflows(search_attributes=["tenant=acme"])
        assert [(r["status"], r["executions"]) for r in acme] == [("RUNNING", 2)]
        capped = client.count_workflows(state="RUNNING", limit=2)
        assert [(r["executions"], r["capped"]) for r in capped] == [(2, True)]
        with pytest.raises(InvalidArgument):
            client.count_workflows(group_by="queue")  # type: ignore[arg-type]


def test_the_async_client_lists_and_counts_as_the_sync_one(db: str) -> None:
    runs = _runs(db)
    every = runs["billing"] + runs["onboarding"]

    async def go() -> None:
        async with await AsyncClient.connect(db) as aclient:
            page = await aclient.list_workflows_page(page_size=3)
            rest = await aclient.list_workflows_page(page_size=3, cursor=page.next_cursor)
            assert rest.next_cursor is None and sorted(_ids([*page, *rest])) == sorted(every)
            iterated = [str(r["execution_id"]) async for r in aclient.list_workflows(page_size=2)]
            assert iterated == _ids([*page, *rest])
            billing = [r async for r in aclient.list_workflows(workflow_name="billing", order="asc")]
            assert _ids(billing) == runs["billing"]
            counts = await aclient.count_workflows(group_by="workflow_name")
            assert {r["workflow_name"]: r["executions"] for r in counts} == {"billing": 3, "onboarding": 2}
            with pytest.raises(InvalidArgument):
                await aclient.list_workflows_page(page_size=1001)

    asyncio.run(go())
