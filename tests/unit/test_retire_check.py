"""`harvest shard health --retiring-shard N` from the rows `shard_health` answers
(harvest.shard.health.retire_check) and its table lines (harvest.cli.shard._render_retiring):
which shards it needs (N, the readable ones, every other one given a url), and every unread one
named in the text whatever the answer (docs/sharding.md, "Retiring the shard of a child")."""

from __future__ import annotations

from typing import Any

from harvest.cli.shard import _render_retiring
from harvest.shard.health import retire_check


def _row(
    shard: int, roles: list[str], children: Any = None, reasons: list[str] | None = None
) -> dict[str, Any]:
    return {"shard_id": shard, "roles": roles, "children": children, "reason_codes": reasons or []}


def _read(driving: list[dict[str, int]] | None = None) -> dict[str, Any]:
    return {"driving": driving or [], "owed_ends": []}


def test_a_shard_given_a_url_but_not_readable_is_needed_and_named_when_unread() -> None:
    rows = [
        _row(0, ["readable", "writable", "default"], _read()),
        _row(1, ["readable"], _read()),
        _row(3, [], None, ["unreachable"]),  # in shards.urls, not in shards.readable: down
    ]
    check = retire_check({"shards": rows}, 1)
    assert check["clear"] is None and check["unread"] == [3], check
    assert "shard(s) 3 not read" in _render_retiring(check)[0]
    # Read, its children count as any shard's.
    rows[2] = _row(3, [], _read([{"target_shard": 1, "children": 2}]))
    check = retire_check({"shards": rows}, 1)
    assert check["clear"] is False and check["children"] == [{"parent_shard": 3, "children": 2}], check
    # A candidate with no url is nothing to read.
    rows[2] = _row(3, ["candidate"], None, ["not_configured"])
    assert retire_check({"shards": rows}, 1) == {
        "shard": 1,
        "clear": True,
        "owed_ends": [],
        "children": [],
        "unread": [],
    }


def test_not_clear_with_a_shard_unread_names_the_unread_shard_in_the_text() -> None:
    rows = [
        _row(0, ["readable", "writable", "default"], _read([{"target_shard": 1, "children": 1}])),
        _row(1, ["readable"], _read()),
        _row(2, ["readable", "writable"], None, ["unreachable"]),
    ]
    check = retire_check({"shards": rows}, 1)
    assert check["clear"] is False and check["unread"] == [2], check  # exit 2: a child is left
    lines = _render_retiring(check)
    assert lines[0] == "retiring shard 1: NOT clear: shard 0 drives 1 cross-shard child(ren) on it"
    assert lines[-1].startswith("retiring shard 1: NOT clear, and shard(s) 2 not read (unreachable"), lines
    assert lines[-1].endswith("more may be left there"), lines
    # Cannot tell (exit 1): the line as before.
    rows[0] = _row(0, ["readable", "writable", "default"], _read())
    lines = _render_retiring(retire_check({"shards": rows}, 1))
    said = (
        "retiring shard 1: cannot tell: shard(s) 2 not read (unreachable, not configured, or "
        "functions older than this release: harvest migrate run)"
    )
    assert lines == [said]
