"""The fan-out merges over fake shards (no database): harvest/shard/fanout.py.

The fakes answer as the SQL functions do (list_executions: keyset on (created_at, id), at most
page_size rows, next_cursor on the last one when more follow; list_dead_letters: id DESC below
before_id), so the property checked is the real one: paging through yields exactly the sorted
union, whatever the rows, ties, order and page size, and a shard that was down loses nothing.
"""

from __future__ import annotations

import asyncio
import base64
import json
import random
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

import psycopg
import pytest

from harvest.core.errors import HarvestError, InvalidArgument, NotFound
from harvest.shard import fanout
from harvest.shard.fanout import AsyncShardReads, FanOut, ShardReads, fan_out, fan_out_async

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _decode_shard_cursor(cursor: str) -> tuple[datetime, uuid.UUID]:
    created, ident = base64.b64decode(cursor).decode().split("|")
    return datetime.fromisoformat(created.replace("Z", "+00:00")), uuid.UUID(ident)


class FakeShard:
    """list_executions and list_dead_letters as the SQL answers them; ``down`` raises the
    driver's connection error, as a dead server does."""

    def __init__(self, executions: list[dict[str, Any]], dead_letters: list[dict[str, Any]] = ()):
        self.executions = executions
        self.dead_letters = list(dead_letters)
        self.down = False
        self.rows_read = 0
        self.dags = ["d", "e"]  # registered here (a DAG is on the shards its workers poll)

    def _check(self) -> None:
        if self.down:
            raise psycopg.OperationalError("connection refused")

    def list_executions(self, *, page_size: int, cursor: str | None, order: str, **_: Any) -> list[dict]:
        self._check()
        rows = sorted(
            self.executions, key=lambda r: (r["created_at"], r["execution_id"]), reverse=order == "desc"
        )
        if cursor:
            at = _decode_shard_cursor(cursor)
            after = (lambda k: k > at) if order == "asc" else (lambda k: k < at)
            rows = [r for r in rows if after((r["created_at"], r["execution_id"]))]
        fetched = rows[: page_size + 1]
        self.rows_read += len(fetched)
        page = [dict(r, next_cursor=None) for r in fetched[:page_size]]
        if len(fetched) > page_size:
            page[-1]["next_cursor"] = "more"
        return page

    def list_dead_letters(
        self, limit, activity_name=None, workflow_name=None, before_id=None, before_failed_at=None
    ) -> list[dict]:
        """As harvest.list_dead_letters: (failed_at, id) descending, after a position."""
        self._check()
        rows = sorted(self.dead_letters, key=lambda r: (r["failed_at"], r["id"]), reverse=True)
        if before_id is not None and before_failed_at is None:
            (before_failed_at,) = [r["failed_at"] for r in self.dead_letters if r["id"] == before_id]
        if before_failed_at is None:
            return rows[:limit]
        return [r for r in rows if (r["failed_at"], r["id"]) < (before_failed_at, before_id or 0)][:limit]

    def list_audit_log(self, limit, operation=None, before_at=None, before_id=None) -> list[dict]:
        """As harvest.list_audit_log: (at, id) descending, after a position (the rows are kept
        in ``dead_letters`` with ``at`` for ``failed_at``)."""
        self._check()
        rows = sorted(
            ({**r, "at": r["failed_at"]} for r in self.dead_letters), key=lambda r: (r["at"], r["id"])
        )
        rows.reverse()
        return [r for r in rows if before_at is None or (r["at"], r["id"]) < (before_at, before_id)][:limit]

    def list_dags(self) -> list[dict]:
        self._check()
        return [{"dag_name": name} for name in self.dags]

    def list_dag_runs(
        self, dag_name, limit, status=None, before_created_at=None, before_id=None
    ) -> list[dict]:
        """As harvest.list_dag_runs: (created_at, id) descending, after a position; HR002 for
        a DAG this shard does not have."""
        self._check()
        if dag_name not in self.dags:
            raise NotFound(f"unknown DAG {dag_name}")
        rows = sorted(self.executions, key=lambda r: (r["created_at"], r["execution_id"]), reverse=True)
        if before_created_at is not None:
            after = (before_created_at, uuid.UUID(before_id))
            rows = [r for r in rows if (r["created_at"], r["execution_id"]) < after]
        return rows[:limit]


def make_shards(rng: random.Random, sizes: tuple[int, ...], tie_pool: int) -> dict[int, FakeShard]:
    """Rows whose created_at is drawn from a small pool of instants, so ties across shards are
    the rule, not the exception."""
    instants = [T0 + timedelta(microseconds=rng.randrange(10**6)) for _ in range(tie_pool)]
    return {
        s: FakeShard(
            [
                {
                    "execution_id": uuid.UUID(int=rng.getrandbits(128)),
                    "created_at": rng.choice(instants),
                    "n": i,
                }
                for i in range(n)
            ]
        )
        for s, n in enumerate(sizes)
    }


def page_through(reads: ShardReads, page_size: int, order: str, limit: int = 10_000, **kw: Any) -> list[list]:
    pages, cursor = [], None
    for _ in range(limit):
        page = reads.list_workflows(page_size=page_size, cursor=cursor, order=order, **kw)
        pages.append(page)
        cursor = page.next_cursor
        if cursor is None:
            return pages
    raise AssertionError("paging did not end")


def expected(shards: dict[int, FakeShard], order: str) -> list[tuple]:
    keys = [(r["created_at"], r["execution_id"]) for shard in shards.values() for r in shard.executions]
    return sorted(keys, reverse=order == "desc")


@pytest.mark.parametrize("order", ["asc", "desc"])
@pytest.mark.parametrize("page_size", range(1, 8))
def test_paging_yields_exactly_the_sorted_union(order: str, page_size: int) -> None:
    for seed in range(12):
        rng = random.Random(seed * 31 + page_size)
        sizes = tuple(rng.randrange(0, 15) for _ in range(3))
        shards = make_shards(rng, sizes, tie_pool=rng.choice([1, 2, 5, 50]))
        pages = page_through(ShardReads(shards, concurrent=False), page_size, order)
        got = [(r["created_at"], r["execution_id"]) for p in pages for r in p.value]
        assert got == expected(shards, order), (seed, sizes)
        assert all(len(p.value) <= page_size for p in pages)
        assert all(p.status == "complete" and p.unavailable_shards == [] for p in pages)
        # Every row says where it lives.
        homes = {r["execution_id"]: s for s, sh in shards.items() for r in sh.executions}
        assert all(homes[r["execution_id"]] == r["shard_id"] for p in pages for r in p.value)


def test_a_page_reads_at_most_n_times_page_size_plus_one_rows() -> None:
    rng = random.Random(7)
    shards = make_shards(rng, (40, 40, 40), tie_pool=3)
    reads = ShardReads(shards, concurrent=False)
    page = reads.list_workflows(page_size=10)
    assert len(page.value) == 10
    assert sum(s.rows_read for s in shards.values()) <= 3 * (10 + 1)


@pytest.mark.parametrize("order", ["asc", "desc"])
def test_a_shard_down_for_some_pages_loses_and_repeats_nothing(order: str) -> None:
    for seed in range(20):
        rng = random.Random(seed)
        shards = make_shards(
            rng, (rng.randrange(1, 12), rng.randrange(1, 12), rng.randrange(1, 12)), tie_pool=4
        )
        reads = ShardReads(shards, concurrent=False)
        page_size = rng.randrange(1, 5)
        seen: list[tuple] = []
        cursor = None
        for step in range(500):
            victim = rng.randrange(3)
            shards[victim].down = step < 6 and rng.random() < 0.6  # outages early, then all up
            page = reads.list_workflows(page_size=page_size, cursor=cursor, order=order)
            if shards[victim].down:
                assert page.unavailable_shards == [victim] and page.status == "partial"
                assert page.next_cursor is not None, "a shard down is never 'no more rows'"
            shards[victim].down = False
            seen += [(r["created_at"], r["execution_id"]) for r in page.value]
            assert page.value == sorted(page.value, key=fanout._key, reverse=order == "desc")
            cursor = page.next_cursor
            if cursor is None:
                break
        assert sorted(seen) == sorted(expected(shards, order)), seed  # every row, once
        assert len(seen) == len(set(seen))


@pytest.mark.parametrize("order", ["asc", "desc"])
@pytest.mark.parametrize("page_size", range(1, 6))
def test_a_moved_run_is_listed_once_where_it_lives_on_every_page_size(order: str, page_size: int) -> None:
    """A run moved from shard 0 to shard 1 has its MIGRATED seal on 0 and its live row on 1,
    with the same (created_at, id). The list showed the id twice (one of them MIGRATED), and a
    page that ended between the two lost the second to the next page's keyset predicate. The
    children read keeps the home row only; the workflow list now does too."""
    moved = uuid.UUID(int=5)
    others = {s: [uuid.UUID(int=10 * (s + 1) + n) for n in range(3)] for s in (0, 1)}

    def row(ident: uuid.UUID, status: str, minute: int) -> dict[str, Any]:
        return {"execution_id": ident, "status": status, "created_at": T0 + timedelta(minutes=minute)}

    shards = {
        s: FakeShard(
            [row(moved, "MIGRATED" if s == 0 else "RUNNING", 3)]
            + [row(ident, "RUNNING", 1 + 2 * n + s) for n, ident in enumerate(others[s])]
        )
        for s in (0, 1)
    }
    pages = page_through(ShardReads(shards, concurrent=False), page_size, order)
    listed = [(r["execution_id"], r["status"], r["shard_id"]) for p in pages for r in p.value]
    assert [ident for ident, _, _ in listed].count(moved) == 1, listed
    assert (moved, "RUNNING", 1) in listed
    assert len(listed) == 1 + 6
    # Asked for the seals (a state filter each shard applies), the seal is what there is.
    shards[1].executions = [r for r in shards[1].executions if r["execution_id"] != moved]
    pages = page_through(ShardReads(shards, concurrent=False), page_size, order)
    sealed = [r for p in pages for r in p.value]
    assert [(r["status"], r["shard_id"]) for r in sealed if r["execution_id"] == moved] == [("MIGRATED", 0)]


def test_every_shard_down_is_unavailable_and_keeps_the_place() -> None:
    shards = make_shards(random.Random(1), (3, 3, 3), tie_pool=9)
    reads = ShardReads(shards, concurrent=False)
    first = reads.list_workflows(page_size=4)
    for s in shards.values():
        s.down = True
    stalled = reads.list_workflows(page_size=4, cursor=first.next_cursor)
    assert (stalled.value, stalled.status, stalled.unavailable_shards) == ([], "unavailable", [0, 1, 2])
    for s in shards.values():
        s.down = False
    rest = page_through(reads, 4, "desc")  # from the top, for the expected set
    resumed = reads.list_workflows(page_size=100, cursor=stalled.next_cursor)
    assert first.value + resumed.value == [r for p in rest for r in p.value]


@pytest.mark.parametrize(
    "cursor",
    ["garbage", "wf1.", "wf1.!!!", "wf1." + base64.urlsafe_b64encode(b"[1]").decode(), "dl1.e30"],
)
def test_a_malformed_cursor_is_invalid_argument(cursor: str) -> None:
    reads = ShardReads({0: FakeShard([])})
    with pytest.raises(InvalidArgument, match="malformed"):
        reads.list_workflows(cursor=cursor)


def test_a_cursor_belongs_to_its_order_and_filters() -> None:
    shards = make_shards(random.Random(3), (5, 5), tie_pool=5)
    reads = ShardReads(shards)
    cursor = reads.list_workflows(page_size=2, workflow_name="a").next_cursor
    with pytest.raises(InvalidArgument, match="order desc, not asc"):
        reads.list_workflows(page_size=2, workflow_name="a", cursor=cursor, order="asc")
    with pytest.raises(InvalidArgument, match="other filters"):
        reads.list_workflows(page_size=2, workflow_name="b", cursor=cursor)
    with pytest.raises(InvalidArgument, match="page size 0"):
        reads.list_workflows(page_size=0)


def test_a_cursor_takes_the_same_instant_in_any_offset() -> None:
    """A time filter is one instant whatever its offset: the API keeps the offset it was given
    (?created_after=...+02:00), and the cursor's fingerprint hashed its text, so the next page
    asked with the same instant in UTC (or another client's spelling) was refused as "other
    filters" (review57b fixed the CLI's side only)."""
    shards = make_shards(random.Random(3), (5, 5), tie_pool=5)
    reads = ShardReads(shards)
    local = datetime(2000, 1, 1, 2, 0, tzinfo=timezone(timedelta(hours=2)))
    cursor = reads.list_workflows(page_size=2, created_after=local, created_before=None).next_cursor
    assert cursor
    same = local.astimezone(UTC)
    page = reads.list_workflows(page_size=2, created_after=same, cursor=cursor)
    assert page.value
    with pytest.raises(InvalidArgument, match="other filters"):  # another instant is other filters
        reads.list_workflows(page_size=2, created_after=same + timedelta(seconds=1), cursor=cursor)


def test_another_error_is_raised_not_hidden() -> None:
    class Broken(FakeShard):
        def list_executions(self, **_: Any) -> list[dict]:
            raise InvalidArgument("unknown state")

    with pytest.raises(InvalidArgument, match="unknown state"):
        ShardReads({0: FakeShard([]), 1: Broken([])}).list_workflows()


def test_shard_unavailable_is_recognised_by_name() -> None:
    class ShardUnavailable(HarvestError):
        pass

    def read(api):
        if api == "down":
            raise ShardUnavailable("shard 1 is unavailable")
        return api

    fan = fan_out({0: "up", 1: "down", 2: "up"}, read)
    assert fan == FanOut({0: "up", 2: "up"}, [1], "partial")
    assert fan_out({1: "down"}, read).status == "unavailable"
    assert fan_out({0: "up"}, read, shards=[0, 5]).unavailable_shards == [5]  # no API for it


def test_a_partial_answer_says_why_each_shard_is_missing() -> None:
    """Each unavailable shard's reason travels with the answer (fan_out's and a plan's Merged),
    so the warning can tell a refused login from a server down: a ShardUnavailable's own reason
    (the shard is named beside it), a timeout's message, no provider in this process."""
    from harvest.core.errors import ShardUnavailable

    def read(api):
        if api == "refused":
            raise ShardUnavailable(1, 'its database cannot be reached now (role "fleet" does not exist)')
        if api == "slow":
            raise TimeoutError("shard 2 did not answer within 5 s")
        return []

    fan = fan_out({0: "up", 1: "refused", 2: "slow"}, read, shards=[0, 1, 2, 3])
    assert fan.reasons == {
        1: 'its database cannot be reached now (role "fleet" does not exist)',
        2: "shard 2 did not answer within 5 s",
        3: "no database is configured for it in this process",
    }

    class Shard:
        def __init__(self, fail: Exception | None) -> None:
            self.fail = fail

        def list_dead_letters(self, *_: Any) -> list[dict]:
            if self.fail is not None:
                raise self.fail
            return []

    merged = ShardReads({0: Shard(None), 1: Shard(ShardUnavailable(1, "down"))}).list_dead_letters()
    assert (merged.status, merged.unavailable_shards, merged.reasons) == ("partial", [1], {1: "down"})


def test_providers_may_be_context_manager_factories() -> None:
    import contextlib

    opened: list[int] = []

    def provider(shard: int):
        @contextlib.contextmanager
        def api():
            opened.append(shard)
            yield FakeShard([{"execution_id": uuid.UUID(int=shard), "created_at": T0}])

        return api

    page = ShardReads({s: provider(s) for s in range(3)}).list_workflows()
    assert [r["shard_id"] for r in page.value] == [2, 1, 0] and sorted(opened) == [0, 1, 2]


def test_async_runner_asks_every_shard_at_once_and_bounds_each() -> None:
    class Slow:
        def __init__(self, delay: float, fail: bool = False):
            self.delay, self.fail = delay, fail

        async def get_worker_health(self) -> dict:
            await asyncio.sleep(self.delay)
            if self.fail:
                raise psycopg.OperationalError("server closed the connection")
            return {"healthy": 1, "total": 1, "by_queue": {"q": 1}, "by_shard": {"0": 1}}

    apis = {0: Slow(0.01), 1: Slow(0.01, fail=True), 2: Slow(5)}
    health = asyncio.run(AsyncShardReads(apis, timeout=0.5).get_worker_health())
    assert health.status == "partial" and health.unavailable_shards == [1, 2]
    assert health.value["by_shard"] == {"0": 1} and health.value["by_queue"] == {"q": 1}
    fan = asyncio.run(fan_out_async({0: Slow(0.01)}, lambda api: api.get_worker_health()))
    assert fan.status == "complete" and fan.results[0]["healthy"] == 1


def test_sync_runner_bounds_each_shard_like_the_async_one() -> None:
    release = threading.Event()

    class Hung:
        def __init__(self, hang: bool):
            self.hang = hang

        def get_worker_health(self) -> dict:
            if self.hang:
                release.wait(30)  # a connection that never answers
            return {"healthy": 1, "total": 1, "by_queue": {"q": 1}, "by_shard": {"0": 1}}

    try:
        for concurrent in (True, False):
            began = time.monotonic()
            health = ShardReads(
                {0: Hung(False), 1: Hung(True)}, concurrent=concurrent, timeout=0.3
            ).get_worker_health()
            assert time.monotonic() - began < 2
            assert health.status == "partial" and health.unavailable_shards == [1]
            assert health.value["by_shard"] == {"0": 1}
        lone = fan_out({0: Hung(True)}, lambda api: api.get_worker_health(), timeout=0.2)
        assert lone.status == "unavailable" and lone.unavailable_shards == [0]
    finally:
        release.set()


def _dead_letters(rng: random.Random, n: int) -> list[dict]:
    return [
        {"id": i + 1, "failed_at": T0 + timedelta(seconds=rng.randrange(5)), "activity_name": "a"}
        for i in range(n)
    ]


@pytest.mark.parametrize("limit", [1, 2, 3, 7])
def test_dead_letter_pages_hold_every_row_once_even_across_an_outage(limit: int) -> None:
    for seed in range(10):
        rng = random.Random(seed)
        shards = {s: FakeShard([], _dead_letters(rng, rng.randrange(0, 10))) for s in range(3)}
        reads = ShardReads(shards, concurrent=False)
        seen, cursor = [], None
        for step in range(200):
            shards[1].down = step in (0, 2)
            page = reads.list_dead_letters(limit, cursor=cursor)
            shards[1].down = False
            assert len(page.value) <= limit
            seen += [(r["shard_id"], r["id"]) for r in page.value]
            cursor = page.next_cursor
            if cursor is None:
                break
        want = [(s, r["id"]) for s, sh in shards.items() for r in sh.dead_letters]
        assert sorted(seen) == sorted(want) and len(seen) == len(set(seen)), seed
    with pytest.raises(InvalidArgument, match="malformed"):
        reads.list_dead_letters(cursor="dl2.eyJwIjp7IngiOjF9fQ")  # {"p":{"x":1}}
    with pytest.raises(InvalidArgument, match="older version"):
        reads.list_dead_letters(cursor="dl1.eyJwIjp7IngiOjF9fQ")


@pytest.mark.parametrize("limit", [1, 2, 3, 7])
def test_dead_letter_pages_are_newest_failure_first_when_ids_disagree(limit: int) -> None:
    """Each shard's failure times disagree with its ids (drawn at random): the pages, joined,
    are newest failure first across the shards, each row once, even when the last row of a
    page is deleted (replayed) before the next page is asked for."""
    for seed in range(10):
        rng = random.Random(seed)
        shards = {s: FakeShard([], _dead_letters(rng, rng.randrange(0, 10))) for s in range(3)}
        total = sum(len(sh.dead_letters) for sh in shards.values())
        reads = ShardReads(shards, concurrent=False)
        seen, cursor = [], None
        for _ in range(200):
            page = reads.list_dead_letters(limit, cursor=cursor)
            seen += page.value
            if page.value:  # the page's last row replayed before the next page
                last = page.value[-1]
                shard = shards[last["shard_id"]]
                shard.dead_letters = [r for r in shard.dead_letters if r["id"] != last["id"]]
            cursor = page.next_cursor
            if cursor is None:
                break
        keys = [(r["failed_at"], -r["shard_id"], r["id"]) for r in seen]
        assert keys == sorted(keys, reverse=True) and len(set(keys)) == len(keys) == total, seed


def test_counts_add_up_per_group_and_name_the_missing_shard() -> None:
    class Counts:
        def __init__(self, rows, down=False):
            self.rows, self.down = rows, down

        def count_dead_letters(self, group_by):
            if self.down:
                raise psycopg.OperationalError("no route to host")
            return self.rows

    row = {"activity_name": "a", "workflow_name": None, "error_type": None}
    apis = {
        0: Counts([{**row, "dead_letters": 2, "first_failed_at": T0, "last_failed_at": T0}]),
        1: Counts([{**row, "dead_letters": 3, "first_failed_at": T0 - timedelta(1), "last_failed_at": T0}]),
        2: Counts([], down=True),
    }
    merged = ShardReads(apis).count_dead_letters("activity")
    assert merged.value == [
        {**row, "dead_letters": 5, "first_failed_at": T0 - timedelta(1), "last_failed_at": T0}
    ]
    assert (merged.status, merged.unavailable_shards) == ("partial", [2])
    assert merged.envelope("dead_letters")["unavailable_shards"] == [2]


class ChildrenShard:
    """list_children_of as the SQL answers it: each shard's own rows of the ids' children."""

    def __init__(self, rows: list[dict[str, Any]]):
        self.rows = rows
        self.asked: list[int | None] = []  # each list_children_of's limit
        self.read = 0  # rows answered, every call
        self.down = False

    def list_children_of(self, ids: list[str], limit: int | None = None) -> list[dict[str, Any]]:
        """LIST_CHILDREN_OF: each id's children in turn, newest first, ``limit`` rows in all."""
        if self.down:
            raise psycopg.OperationalError("connection refused")
        found = []
        for parent in ids:
            mine = [r for r in self.rows if str(r["parent_id"]) == parent]
            mine.sort(key=lambda r: uuid.UUID(r["execution_id"]))
            mine.sort(key=lambda r: r["created_at"], reverse=True)
            found += mine
        self.asked.append(limit)
        found = found if limit is None else found[:limit]
        self.read += len(found)
        return found

    def list_children_page(self, execution_id, status, after, limit) -> list[dict[str, Any]]:
        """LIST_CHILDREN_PAGE: the direct children after the position, in order, ``limit``."""
        if self.down:
            raise psycopg.OperationalError("connection refused")
        found = [
            r
            for r in self.rows
            if str(r["parent_id"]) == str(execution_id)
            and (status is None or r["status"] == status)
            and (
                after is None
                or r["created_at"] < after[0]
                or (r["created_at"] == after[0] and uuid.UUID(r["execution_id"]) > uuid.UUID(after[1]))
            )
        ]
        found.sort(key=lambda r: uuid.UUID(r["execution_id"]))
        found.sort(key=lambda r: r["created_at"], reverse=True)
        self.read += len(found[:limit])
        return found[:limit]


@pytest.mark.parametrize("limit", [1, 2, 3, 5])
@pytest.mark.parametrize("status", [None, "RUNNING"])
def test_pages_of_children_read_a_page_a_shard_and_hold_every_child_once(limit: int, status) -> None:
    """A page of direct children is a page from each shard, merged: page after page, the same
    list the whole walk gives, every child once in order, siblings that share a created_at
    and moved children (a seal on one shard, the home on another) included."""
    parent = str(uuid.UUID(int=1))
    for seed in range(20):
        rng = random.Random(seed)
        shards: dict[int, list[dict[str, Any]]] = {0: [], 1: [], 2: []}
        for n in range(rng.randrange(0, 15)):
            row = {
                "execution_id": str(uuid.UUID(int=rng.getrandbits(128))),
                "parent_id": parent,
                "workflow_name": "w",
                "status": rng.choice(["RUNNING", "COMPLETED"]),
                "created_at": T0 + timedelta(minutes=rng.randrange(0, 3)),  # ties
            }
            home = rng.randrange(0, 3)
            shards[home].append(row)
            if n % 4 == 0:  # moved here from another shard: its seal stays there
                shards[(home + 1) % 3].append({**row, "status": "MIGRATED"})
        reads = ShardReads({s: ChildrenShard(rows) for s, rows in shards.items()}, concurrent=False)
        whole = reads.list_children(parent, status).value
        seen: list[dict[str, Any]] = []
        after = None
        for _ in range(100):
            page = reads.list_children(parent, status, 1, after, limit + 1).value
            seen += page[:limit]
            if len(page) <= limit:
                break
            after = (page[limit - 1]["created_at"], str(page[limit - 1]["execution_id"]))
        assert [(r["execution_id"], r["status"]) for r in seen] == [
            (r["execution_id"], r["status"]) for r in whole
        ], seed


@pytest.mark.parametrize("shards_answer", ["seal_first", "home_first"])
def test_a_moved_child_is_listed_where_it_lives_whatever_shard_answers_first(shards_answer: str) -> None:
    """A child moved from shard 0 to shard 1 has a MIGRATED seal on 0 and its live row on 1. The
    children read kept the row of whichever shard it met first, so a moved child was listed as
    MIGRATED on its old shard (its live status hidden) and its tree node was the seal."""
    parent, child, grandchild = (str(uuid.UUID(int=n)) for n in (1, 2, 3))

    def row(ident: str, parent_id: str, status: str, minute: int) -> dict[str, Any]:
        return {
            "execution_id": ident,
            "parent_id": parent_id,
            "workflow_name": "w",
            "status": status,
            "created_at": T0 + timedelta(minutes=minute),
        }

    seal = ChildrenShard([row(child, parent, "MIGRATED", 1)])
    home = ChildrenShard([row(child, parent, "RUNNING", 1), row(grandchild, child, "COMPLETED", 2)])
    order = [seal, home] if shards_answer == "seal_first" else [home, seal]
    reads = ShardReads(dict(enumerate(order)))
    listed = reads.list_children(parent, depth=2)
    assert [(r["execution_id"], r["status"], r["depth"]) for r in listed.value] == [
        (grandchild, "COMPLETED", 2),
        (child, "RUNNING", 1),
    ]
    assert [r["execution_id"] for r in reads.list_children(parent, "migrated").value] == []
    tree = reads.list_tree(parent).value
    assert [(n["status"], [g["execution_id"] for g in n["children"]]) for n in tree["children"]] == [
        ("RUNNING", [grandchild])
    ]


@pytest.mark.parametrize("max_nodes", [1, 2, 5, 13])
def test_a_tree_of_at_most_max_nodes_is_breadth_first_and_says_when_it_cut(max_nodes: int) -> None:
    """list_tree with max_nodes keeps at most that many runs, every level whole before a node
    of the next (the cut level's first parents' children), each run once (a moved child's seal
    and home), truncated exactly when the whole tree has more; no shard is asked for more rows
    than can be kept plus one (and the moved runs' second rows)."""
    root = str(uuid.UUID(int=1))
    for seed in range(30):
        rng = random.Random(seed)
        shards: dict[int, list[dict[str, Any]]] = {0: [], 1: [], 2: []}
        level_of = {root: 0}
        parents = [root]
        for _ in range(rng.randrange(0, 25)):
            parent = rng.choice(parents)
            ident = str(uuid.UUID(int=rng.getrandbits(128)))
            row = {
                "execution_id": ident,
                "parent_id": parent,
                "workflow_name": "w",
                "status": "RUNNING",
                "created_at": T0 + timedelta(minutes=rng.randrange(0, 3)),
            }
            home = rng.randrange(0, 3)
            shards[home].append(row)
            if rng.random() < 0.2:  # moved here: its seal stays on another shard
                shards[(home + 1) % 3].append({**row, "status": "MIGRATED"})
            level_of[ident] = level_of[parent] + 1
            parents.append(ident)
        shard_apis = {s: ChildrenShard(rows) for s, rows in shards.items()}
        whole = ShardReads(shard_apis, concurrent=False).list_tree(root).value
        for api in shard_apis.values():
            api.asked.clear()
        cut = ShardReads(shard_apis, concurrent=False).list_tree(root, max_nodes=max_nodes).value

        def nodes(tree: dict[str, Any]) -> list[dict[str, Any]]:
            return [*tree["children"], *(n for c in tree["children"] for n in nodes(c))]

        kept, every = nodes(cut), nodes(whole)
        assert len(kept) == min(max_nodes, len(every)), seed
        assert cut["truncated"] is (len(every) > max_nodes) and whole["truncated"] is False, seed
        assert len({n["execution_id"] for n in kept}) == len(kept), seed
        assert all(n["status"] == "RUNNING" for n in kept), seed  # the home row, never the seal
        deepest = max((level_of[n["execution_id"]] for n in kept), default=0)
        shallower = {n["execution_id"] for n in every if level_of[n["execution_id"]] < deepest}
        assert shallower <= {n["execution_id"] for n in kept}, seed
        asked = [a for api in shard_apis.values() for a in api.asked]
        seals = sum(r["status"] == "MIGRATED" for rows in shards.values() for r in rows)
        assert asked and all(a is not None and a <= max_nodes + 1 + seals for a in asked), (seed, asked)


@pytest.mark.parametrize("outage", [False, True])
@pytest.mark.parametrize("limit", [1, 2, 3, 7])
def test_audit_and_dag_run_pages_hold_every_row_once_in_order_even_across_an_outage(
    limit: int, outage: bool
) -> None:
    """The audit log and a DAG's runs page as the dead letters do (one position per shard): every
    row once, newest first across the shards (with every shard up), a shard down for a page
    losing nothing."""
    for seed in range(10):
        rng = random.Random(seed)
        shards = make_shards(rng, (rng.randrange(0, 9), rng.randrange(0, 9), rng.randrange(0, 9)), 3)
        for shard in shards.values():
            shard.dead_letters = _dead_letters(rng, rng.randrange(0, 10))
        reads = ShardReads(shards, concurrent=False)
        lists = (
            ("list_audit_log", (), lambda r: (r["at"], -r["shard_id"], r["id"]), "dead_letters"),
            ("list_dag_runs", ("d",), lambda r: (r["created_at"], r["execution_id"]), "executions"),
        )
        for name, first, key, rows in lists:
            seen, cursor = [], None
            for step in range(200):
                shards[1].down = outage and step in (0, 2)
                page = getattr(reads, name)(*first, limit, None, cursor)
                shards[1].down = False
                assert len(page.value) <= limit
                seen += page.value
                if (cursor := page.next_cursor) is None:
                    break
            keys = [key(r) for r in seen]
            assert len(set(keys)) == len(keys) == sum(len(getattr(sh, rows)) for sh in shards.values()), seed
            if not outage:
                assert keys == sorted(keys, reverse=True), seed
    with pytest.raises(InvalidArgument, match="malformed"):
        reads.list_audit_log(cursor="au1.eyJwIjp7IngiOjF9fQ")
    past_bigint = {"p": {"0": ["2026-01-01T00:00:00.000000+00:00", 2**63]}, "d": [], "f": ""}
    token = "au1." + base64.urlsafe_b64encode(json.dumps(past_bigint).encode()).decode().rstrip("=")
    with pytest.raises(InvalidArgument, match="malformed"):  # (it reached the database as numeric)
        reads.list_audit_log(cursor=token)
    with pytest.raises(InvalidArgument, match="malformed"):
        reads.list_dag_runs("d", cursor="dl2.eyJwIjp7fSwiZCI6W10sImYiOiIifQ")  # a dead-letter cursor
    with pytest.raises(InvalidArgument, match="other filters"):
        reads.list_dag_runs("e", 1, None, reads.list_dag_runs("d", 1, None, None).next_cursor or "dr1.")


def test_a_dags_runs_are_read_on_the_shards_that_have_it() -> None:
    """A DAG is registered on the shards its workers poll only, and each shard's
    list_dag_runs refuses one it lacks (HR002): the merged listing failed for every DAG not on
    every shard (the dashboard's DAG page, `harvest dag runs`, GET /dags/{name}/runs)."""
    rng = random.Random(7)
    shards = make_shards(rng, (4, 3, 5), 3)
    shards[1].dags = []  # this shard's workers run no DAG
    reads = ShardReads(shards, concurrent=False)
    seen, cursor = [], None
    for _ in range(20):
        page = reads.list_dag_runs("d", 2, None, cursor)
        assert page.unavailable_shards == []
        seen += page.value
        if (cursor := page.next_cursor) is None:
            break
    assert sorted(r["shard_id"] for r in seen) == [0] * 4 + [2] * 5
    for shard in shards.values():
        shard.dags = []
    with pytest.raises(NotFound, match="no DAG 'd' is registered on any shard;"):
        reads.list_dag_runs("d", 2)
    shards[2].down = True  # judged by the shards read, as a worker no shard has (no_worker_anywhere)
    with pytest.raises(NotFound, match=r"on any shard \(shard\(s\) 2 could not be read\)"):
        reads.list_dag_runs("d", 2)


class ScheduleShard:
    """list_schedules as the SQL answers it: by name, at most ``limit`` after ``after``."""

    def __init__(self, names: list[str]):
        self.names = sorted(names)
        self.asked: list[int | None] = []
        self.down = False

    def list_schedules(self, kind: Any, after: str | None, limit: int | None, paused: Any) -> list[dict]:
        if self.down:
            raise psycopg.OperationalError("connection refused")
        self.asked.append(limit)
        rows = [{"name": n} for n in self.names if after is None or n > after]
        return rows[:limit] if limit is not None else rows


@pytest.mark.parametrize("limit", [1, 2, 3, 5, 50])
def test_schedule_pages_are_the_sorted_union_and_keep_a_names_rows_together(limit: int) -> None:
    """A schedule name may be on several shards (declared before a reshard, created with
    --shard-id): the pages join up to every (name, shard) once, a name's rows on one page, each
    shard asked for limit + 1 a page."""
    rng = random.Random(limit)
    shards = {s: ScheduleShard(rng.sample([f"s{n:02}" for n in range(30)], 12)) for s in range(3)}
    whole = sorted((n, s) for s, shard in shards.items() for n in shard.names)
    reads = ShardReads(shards, concurrent=False)
    seen: list[tuple[str, int]] = []
    cursor = None
    while True:
        page = reads.list_schedules(None, limit, cursor)
        got = [(r["name"], r["shard_id"]) for r in page.value]
        assert got, cursor
        assert not {n for n, _ in got} & {n for n, _ in seen}, "a name's rows split over pages"
        assert len(got) <= max(limit, len(shards))
        seen += got
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == whole
    assert {a for shard in shards.values() for a in shard.asked} == {limit + 1}


class KeyShard:
    """list_concurrency_keys as the SQL answers it: by key, at most ``limit`` keys after
    ``after``, a key's activity and workflow rows together."""

    def __init__(self, rows: list[tuple[str, str]]):
        self.rows = sorted(rows)
        self.asked: list[int | None] = []
        self.down = False

    def list_concurrency_keys(self, key: Any, after: str | None, limit: int | None) -> list[dict]:
        if self.down:
            raise psycopg.OperationalError("connection refused")
        self.asked.append(limit)
        keys = sorted({k for k, _ in self.rows if after is None or k > after})[:limit]
        return [
            {"key": k, "task_type": t, "max_concurrent": 2, "in_flight": 1, "pending": 1, "workflows": None}
            for k, t in self.rows
            if k in keys
        ]


@pytest.mark.parametrize("limit", [1, 2, 3, 7, 50])
def test_concurrency_key_pages_sum_each_key_over_the_shards_once(limit: int) -> None:
    """A key with live work on several shards is one row a task type, its counts summed: the
    pages join up to every key once, each shard asked for limit + 1 keys a page."""
    rng = random.Random(limit)
    shards = {
        s: KeyShard(
            [
                (f"k{n:02}", t)
                for n in rng.sample(range(30), 10)
                for t in rng.sample(["activity", "workflow"], rng.randint(1, 2))
            ]
        )
        for s in range(3)
    }
    whole: dict[tuple[str, str], int] = {}
    for shard in shards.values():
        for row in shard.rows:
            whole[row] = whole.get(row, 0) + 1
    reads = ShardReads(shards, concurrent=False)
    seen: list[tuple[str, str, int]] = []
    cursor = None
    while True:
        page = reads.list_concurrency_keys(None, limit, cursor)
        assert 0 < len({r["key"] for r in page.value}) <= limit
        seen += [(r["key"], r["task_type"], r["in_flight"]) for r in page.value]
        cursor = page.next_cursor
        if cursor is None:
            break
    assert seen == [(k, t, n) for (k, t), n in sorted(whole.items())]
    assert {a for shard in shards.values() for a in shard.asked} == {limit + 1}


@pytest.mark.parametrize("limit", [1, 2, 3, 7])
def test_a_shard_down_for_a_page_of_keys_or_schedules_loses_none_of_them(limit: int) -> None:
    """A shard that could not be read for a page of concurrency keys or schedules was named
    partial there, but the cursor moved past the keys that page covered on every shard, so its
    keys in that range were in no page. It now keeps its own place (as the workflow list's
    cursor does): its keys come when it answers again, and next_cursor stays set while it does
    not, even on a page that is otherwise the last."""
    for seed in range(10):
        rng = random.Random(seed * 100 + limit)
        key_shards = {
            s: KeyShard([(f"k{n:02}", "activity") for n in rng.sample(range(30), 10)]) for s in range(3)
        }
        schedule_shards = {
            s: ScheduleShard(rng.sample([f"s{n:02}" for n in range(30)], 12)) for s in range(3)
        }
        for shards, read, whole in (
            (
                key_shards,
                lambda reads, cursor: reads.list_concurrency_keys(None, limit, cursor),
                sorted((k, s) for s, sh in key_shards.items() for k, _ in sh.rows),
            ),
            (
                schedule_shards,
                lambda reads, cursor: reads.list_schedules(None, limit, cursor),
                sorted((n, s) for s, sh in schedule_shards.items() for n in sh.names),
            ),
        ):
            reads = ShardReads(shards, concurrent=False)
            seen: list[tuple[str, int]] = []
            cursor = None
            for step in range(200):
                shards[1].down = step in (0, 2, 3)
                page = read(reads, cursor)
                shards[1].down = False
                if step in (0, 2, 3):
                    assert (page.status, page.unavailable_shards) == ("partial", [1])
                    assert page.next_cursor is not None  # could not inspect is not no more rows
                for r in page.value:
                    seen += (
                        [(r["key"], s) for s in r["shards"]]
                        if "shards" in r
                        else [(r["name"], r["shard_id"])]
                    )
                if (cursor := page.next_cursor) is None:
                    break
            assert sorted(seen) == whole, (seed, sorted(set(whole) - set(seen)))
            assert len(seen) == len(set(seen)), seed


def _family(rng: random.Random, root: str, kids: int, grandkids: int) -> dict[int, list[dict[str, Any]]]:
    """``kids`` children of ``root`` and ``grandkids`` children of each, spread over 3 shards
    (a child's children anywhere), created_at with ties."""
    shards: dict[int, list[dict[str, Any]]] = {0: [], 1: [], 2: []}

    def add(parent: str) -> str:
        ident = str(uuid.UUID(int=rng.getrandbits(128)))
        shards[rng.randrange(0, 3)].append(
            {
                "execution_id": ident,
                "parent_id": parent,
                "workflow_name": "w",
                "status": rng.choice(["RUNNING", "COMPLETED"]),
                "created_at": T0 + timedelta(minutes=rng.randrange(0, 4)),
            }
        )
        return ident

    for kid in [add(root) for _ in range(kids)]:
        for _ in range(grandkids):
            add(kid)
    return shards


@pytest.mark.parametrize("status", [None, "COMPLETED", "MIGRATED"])
def test_a_deeper_page_of_children_walks_at_most_max_nodes_and_says_it_cut(
    monkeypatch: pytest.MonkeyPatch, status
) -> None:
    """A page of children with depth above 1 (or a MIGRATING / MIGRATED filter) walked the whole
    tree on every shard to keep page_size rows (a run with 100,000 grandchildren: all of them a
    page). It walks at most max_nodes descendants, breadth first (CHILDREN_WALK by default, the
    tree's bound), and says truncated; its pages join up to that walk's rows, each once."""
    monkeypatch.setattr(fanout, "CHILDREN_WALK", 20)
    root = str(uuid.UUID(int=1))
    shards = _family(random.Random(3), root, 12, 10)  # 132 descendants
    apis = {s: ChildrenShard(rows) for s, rows in shards.items()}
    reads = ShardReads(apis, concurrent=False)
    depth = 1 if status == "MIGRATED" else 2
    seen, cursor = [], None
    for _ in range(50):
        for api in apis.values():
            api.read = 0
        page = reads.page_children(root, status, depth, 3, cursor)
        read = sum(api.read for api in apis.values())
        assert read <= 3 * (20 + 1), read  # each shard: what the walk may keep, plus one
        assert page.truncated is (depth == 2), page.truncated
        seen += [r["execution_id"] for r in page.value]
        if (cursor := page.next_cursor) is None:
            break
    walked = ShardReads(apis, concurrent=False).list_tree(root, 2, 20).value
    kept = [n for c in walked["children"] for n in (c, *c["children"])]
    expected = [n for n in kept if status is None or n["status"] == status]
    assert sorted(seen) == sorted(n["execution_id"] for n in expected) and len(seen) == len(set(seen))


@pytest.mark.parametrize("depth", [1, 2])
def test_a_shard_down_for_a_page_of_children_loses_none_of_them(depth: int) -> None:
    """A page of children is a keyset page of every shard: a shard down for a page was named
    partial, but the cursor (one position) moved past its children in that range, which came
    on no page. It keeps its own place now, as in the workflow list."""
    root = str(uuid.UUID(int=1))
    for seed in range(10):
        shards = _family(random.Random(seed), root, 15, 1 if depth == 2 else 0)
        apis = {s: ChildrenShard(rows) for s, rows in shards.items()}
        reads = ShardReads(apis, concurrent=False)
        seen: list[str] = []
        cursor = None
        for step in range(100):
            apis[1].down = step in (0, 2)
            page = reads.page_children(root, None, depth, 4, cursor)
            apis[1].down = False
            if step in (0, 2):
                assert page.status == "partial" and page.next_cursor is not None
            seen += [r["execution_id"] for r in page.value]
            if (cursor := page.next_cursor) is None:
                break
        every = [r["execution_id"] for rows in shards.values() for r in rows]
        if depth == 2:
            # Documented: a deeper page walks from the root, so the runs a down shard holds hide
            # their children on the other shards for that page, which move on past them. Its own
            # rows are not lost; nor is any child of a run that lives elsewhere.
            on_1 = {r["execution_id"] for r in shards[1]}
            every = [
                r["execution_id"] for rows in shards.values() for r in rows if r["parent_id"] not in on_1
            ]
            every += [i for i in on_1 if i not in every]
            assert set(every) <= set(seen) and len(seen) == len(set(seen)), seed
            continue
        assert sorted(seen) == sorted(every) and len(seen) == len(set(seen)), seed


class RoundsDownShard(ChildrenShard):
    """A ChildrenShard that goes down between the rounds of one page's walk: ``down_in`` names
    the rounds (1: the first level's list_children_of) it fails while ``flaky`` is set."""

    def __init__(self, rows: list[dict[str, Any]]):
        super().__init__(rows)
        self.flaky = False
        self.down_in: set[int] = set()
        self.round = 0

    def list_children_of(self, ids: list[str], limit: int | None = None) -> list[dict[str, Any]]:
        self.round += 1
        self.down = self.flaky and self.round in self.down_in
        return super().list_children_of(ids, limit)


@pytest.mark.parametrize("down_in", [2, 1])
def test_a_shard_down_between_the_rounds_of_a_deeper_page_shows_each_child_once(down_in: int) -> None:
    """A deeper page walks a round a level. A shard that answered one round and not another
    was named unread and kept its place in the cursor, but the rows it had answered were on the
    page: they came again on a later page once it answered. Its rows are off a page it was not
    read whole for now, as a shard down for a depth-1 page gives none: each child comes once."""
    root = str(uuid.UUID(int=1))
    for seed in range(10):
        shards = _family(random.Random(seed), root, 15, 1)
        apis = {s: RoundsDownShard(rows) for s, rows in shards.items()}
        reads = ShardReads(apis, concurrent=False)
        seen: list[str] = []
        cursor = None
        for step in range(100):
            apis[1].flaky, apis[1].round, apis[1].down_in = step in (0, 2), 0, {down_in}
            page = reads.page_children(root, None, 2, 4, cursor)
            apis[1].flaky = apis[1].down = False
            if step in (0, 2):
                assert (page.status, page.unavailable_shards) == ("partial", [1]), seed
                assert page.next_cursor is not None, seed
                assert all(r["shard_id"] != 1 for r in page.value), seed
            seen += [r["execution_id"] for r in page.value]
            if (cursor := page.next_cursor) is None:
                break
        assert len(seen) == len(set(seen)), (seed, sorted(i for i in set(seen) if seen.count(i) > 1))
        on_1 = {r["execution_id"] for r in shards[1]}
        assert on_1 <= set(seen), seed  # a shard's own rows come once it answers
        if down_in == 2:
            # It answered the first round, so the children of the runs it holds were found on
            # every shard: every descendant, once.
            every = [r["execution_id"] for rows in shards.values() for r in rows]
            assert sorted(seen) == sorted(every), seed
