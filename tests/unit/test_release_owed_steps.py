"""`harvest shard release-owed-ends`' batches (harvest.shard.children.release_owed_steps, driven
by the CLI over SQL and by POST /admin/shards/{shard}/release-owed-ends), with a counting fake
of the SQL calls."""

from __future__ import annotations

import asyncio
from typing import Any

from harvest.cli.shard import release_owed_on_shard
from harvest.db.steps import arun_steps
from harvest.shard.children import release_owed_steps


class _Sql:
    """release_owed_child_ends answers ``answers`` in turn; the calls are noted in ``calls``."""

    def __init__(self, answers: list[int], ended: int = 0) -> None:
        self.answers, self.ended = answers, ended
        self.calls: list[tuple[Any, ...]] = []

    def get_retention_status(self) -> dict[str, Any]:
        return {"owed_child_ends_by_shard": [{"parent_shard": 2, "ended": self.ended, "running": 1}]}

    def release_owed_child_ends(self, *args: Any) -> int:
        self.calls.append(args)
        return self.answers[len(self.calls) - 1]


class _AsyncSql(_Sql):
    async def release_owed_child_ends(self, *args: Any) -> int:  # type: ignore[override]
        return _Sql.release_owed_child_ends(self, *args)


def test_batches_go_on_until_one_releases_nothing() -> None:
    """A short batch is not the end (a concurrent step holds rows): only a batch of none."""
    sql = _Sql([3, 1, 2, 0, 9], ended=6)
    done = release_owed_on_shard(sql, 0, 2, False, 3, 1000, False, "ops")
    assert done == {"released": 6, "batches": 4}
    assert sql.calls == [(2, 3, False, "ops", False)] * 4
    forced = _Sql([1, 0])
    release_owed_on_shard(forced, 0, 2, False, 3, 1000, False, "ops", force=True)
    assert forced.calls == [(2, 3, False, "ops", True)] * 2, "--force goes into each batch's audit row"


def test_max_batches_bounds_the_release_and_a_dry_run_releases_none() -> None:
    sql = _Sql([1] * 5)
    assert release_owed_on_shard(sql, 0, 2, True, 1, 2, False, None) == {"released": 2, "batches": 2}
    dry = _Sql([], ended=4)
    assert release_owed_on_shard(dry, 0, 2, False, 1, 2, True, None) == {"ended": 4, "running": 1}
    assert dry.calls == []


def test_the_route_drives_the_same_steps_under_asyncio() -> None:
    sql = _AsyncSql([2, 2, 0])
    done = asyncio.run(arun_steps(release_owed_steps(2, 2, True, 1000, "ops"), sql))  # type: ignore[arg-type]
    assert done == {"released": 4, "batches": 3} and sql.calls[0] == (2, 2, True, "ops", False)


def test_a_parent_shard_whose_url_reaches_another_shard_is_refused_as_a_live_one() -> None:
    """A wrong url says nothing of where the parent's own database is: the release is refused
    (a warning in a dry run), as for a shard alive as itself; an unreachable one goes on."""
    import pytest

    from harvest.core.errors import ParentShardAlive
    from harvest.shard.children import parent_check

    def probe(reason: str, detail: str) -> dict[str, Any]:
        return {"shard_id": 2, "alive": reason == "alive", "reason": reason, "detail": detail}

    wrong = probe("identity_mismatch", "its url reaches the database of shard 1")
    with pytest.raises(
        ParentShardAlive, match=r"shard 2 could not be checked: .*shard 1; fix shards\.urls\.2"
    ):
        parent_check(wrong, dry_run=False)
    assert parent_check(wrong, dry_run=True).startswith("warning: shard 2 could not be checked")
    with pytest.raises(ParentShardAlive, match="reachable and alive"):
        parent_check(probe("alive", "its database answers as shard 2"), dry_run=False)
    # A server that answered but took no connection (at its limit, starting up) is up: refused too.
    busy = probe("busy", 'its server answered but took no connection: too many connections for role "h"')
    with pytest.raises(ParentShardAlive, match=r"shard 2 could not be checked: .*when it takes connections"):
        parent_check(busy, dry_run=False)
    assert parent_check(busy, dry_run=True).startswith("warning: shard 2 could not be checked")
    gone = parent_check(probe("unreachable", "unreachable: Connection refused"), dry_run=False)
    assert gone.startswith("shard 2 could not be reached")
