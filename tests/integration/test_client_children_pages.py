"""The client's children come a page at a time, as GET /workflows/{id}/children and `harvest
workflow children` give them (docs/workflows.md, "Children"): `children_page` takes the same
page size and cursor, and `iter_children` pages lazily for a caller who wants them all, so a
run with a fan-out of thousands is never read whole into one answer. Both clients."""

from __future__ import annotations

import asyncio

import psycopg
import pytest
from operator_helpers import start

from harvest import AsyncClient, Client
from harvest.core.errors import InvalidArgument
from harvest.db.sqlapi import AsyncSqlApi, SqlApi


def _family(db: str, kids: int = 5) -> tuple[str, list[str]]:
    """A parent with ``kids`` children (each run's parent_id set): the parent's and the kids' ids."""
    with psycopg.connect(db, autocommit=True) as conn:
        parent = start(conn, "onboarding", "many-kids")
        ids = [start(conn, "billing", f"kid-{i}") for i in range(kids)]
        conn.execute("UPDATE harvest.executions SET parent_id = %s WHERE id = ANY(%s::uuid[])", (parent, ids))
    return parent, ids


def _pages_read(monkeypatch: pytest.MonkeyPatch, api: type) -> list[int]:
    """The rows each page read of ``api`` (SqlApi or AsyncSqlApi) fetched, in call order."""
    fetched: list[int] = []
    real = api.list_children_page
    if api is AsyncSqlApi:

        async def acounted(self, *args: object, **kwargs: object) -> object:
            rows = await real(self, *args, **kwargs)
            fetched.append(len(rows))
            return rows

        monkeypatch.setattr(api, "list_children_page", acounted)
    else:

        def counted(self, *args: object, **kwargs: object) -> object:
            rows = real(self, *args, **kwargs)
            fetched.append(len(rows))
            return rows

        monkeypatch.setattr(api, "list_children_page", counted)
    return fetched


def test_children_page_takes_the_routes_page_size_and_cursor(db: str, monkeypatch) -> None:
    """`handle.children()` read every child of the run in one answer: a page now reads
    page_size + 1 rows and names the next page's cursor, the route's and the CLI's (ch2.)."""
    parent, kids = _family(db)
    fetched = _pages_read(monkeypatch, SqlApi)
    with Client(db) as client:
        handle = client.get_handle(parent)
        seen: list[str] = []
        cursor = None
        for _ in range(5):
            page = handle.children_page(page_size=2, cursor=cursor)
            assert len(page) <= 2 and page.status == "complete" and page.truncated is False
            assert all(r["shard_id"] == 0 and r["depth"] == 1 for r in page)
            seen += [str(r["execution_id"]) for r in page]
            cursor = page.next_cursor
            if cursor is None:
                break
            assert cursor.startswith("ch2.")
        assert sorted(seen) == sorted(kids) and len(seen) == len(set(seen))
        assert fetched and max(fetched) <= 3, fetched
        assert len(handle.children()) == 5, "children() still lists them all"
        with pytest.raises(InvalidArgument):
            handle.children_page(page_size=0)
        first = handle.children_page(page_size=2)
        with pytest.raises(InvalidArgument):  # a cursor goes with the filters it was issued for
            handle.children_page("RUNNING", page_size=2, cursor=first.next_cursor)


def test_iter_children_pages_lazily(db: str, monkeypatch) -> None:
    """A caller who wants every child iterates them: one page is read at a time, when the
    rows before it are used up."""
    parent, kids = _family(db)
    fetched = _pages_read(monkeypatch, SqlApi)
    with Client(db) as client:
        rows = client.get_handle(parent).iter_children(page_size=2)
        first = next(rows)
        assert len(fetched) == 1, "the first row reads the first page only"
        rest = list(rows)
    assert sorted([str(first["execution_id"]), *(str(r["execution_id"]) for r in rest)]) == sorted(kids)
    assert len(fetched) == 3 and max(fetched) <= 3, fetched


def test_the_async_client_pages_children_as_the_sync_one(db: str, monkeypatch) -> None:
    parent, kids = _family(db)
    fetched = _pages_read(monkeypatch, AsyncSqlApi)

    async def go() -> tuple[list[str], list[str]]:
        async with await AsyncClient.connect(db) as aclient:
            handle = aclient.get_handle(parent)
            page = await handle.children_page(page_size=3)
            second = await handle.children_page(page_size=3, cursor=page.next_cursor)
            assert second.next_cursor is None
            paged = [str(r["execution_id"]) for r in (*page, *second)]
            iterated = [str(r["execution_id"]) async for r in handle.iter_children(page_size=2)]
            return paged, iterated

    paged, iterated = asyncio.run(go())
    assert sorted(paged) == sorted(kids) and sorted(iterated) == sorted(kids)
    assert max(fetched) <= 4, fetched


def test_iter_children_stops_naming_a_shard_whose_children_are_all_that_is_left() -> None:
    """A shard that cannot be read keeps its place in the cursor, and the pages after the
    others' last come back empty with a cursor for as long as it is away: the iteration stops
    there with DatabaseUnavailable naming it, rather than ask for the same empty page for ever."""
    from harvest.client.client import Children, _next_cursor
    from harvest.core.errors import DatabaseUnavailable

    assert _next_cursor(Children([{"x": 1}], "partial", [2], "ch2.a")) == "ch2.a"
    assert _next_cursor(Children([], "complete", [], None)) is None
    with pytest.raises(DatabaseUnavailable, match="shard"):
        _next_cursor(Children([], "partial", [2], "ch2.b"))
