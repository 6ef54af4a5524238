"""`harvest shard health --retiring-shard N` from the rows `shard_health` answers
(harvest.shard.health.retire_check) and its table lines (harvest.cli.shard._render_retiring):
which shards it needs (N, the readable ones, every other one given a url), and every unread one
named in the text whatever the answer (docs/sharding.md, "Retiring the shard of a child")."""

from __future__ import annotations

from typing import Any

from harvest.cli.shard import _render, _render_retiring
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
    assert _render_retiring(check)[0].startswith(
        "retiring shard 1: cannot tell: shard 3 not read (unreachable"
    )
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
        "unread_reasons": [],
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
    assert lines[-1].startswith("retiring shard 1: NOT clear, and shard 2 not read (unreachable"), lines
    assert lines[-1].endswith("more may be left there"), lines
    # Cannot tell (exit 1): the line as before.
    rows[0] = _row(0, ["readable", "writable", "default"], _read())
    lines = _render_retiring(retire_check({"shards": rows}, 1))
    said = "unreachable: its database did not answer; run this again once it is up"
    assert lines == [f"retiring shard 1: cannot tell: shard 2 not read ({said})"]


def test_each_unread_shard_is_named_with_why_it_was_not_read_and_never_a_url() -> None:
    secret = "postgresql://fleet:s3cret@db2.internal:5432/harvest"
    rows = [
        _row(0, ["readable", "writable", "default"], _read([{"target_shard": 1, "children": 1}])),
        _row(1, ["readable"], _read()),
        {**_row(2, ["readable", "writable"], None, ["unreachable"]), "error": f"cannot connect to {secret}"},
        _row(3, ["readable"], None, ["not_configured"]),
        _row(4, [], None, ["identity_mismatch"]),
        _row(5, ["readable"], None, ["schema_migration_missing"]),
        _row(6, ["readable"], None, []),  # answered, its functions older than this release's
    ]
    check = retire_check({"shards": rows}, 1)
    assert check["clear"] is False and check["unread"] == [2, 3, 4, 5, 6], check
    assert check["unread_reasons"] == [
        {"shard_id": 2, "reason": "unreachable"},
        {"shard_id": 3, "reason": "not_configured"},
        {"shard_id": 4, "reason": "identity_mismatch"},
        {"shard_id": 5, "reason": "schema_migration_missing"},
        {"shard_id": 6, "reason": "functions_stale"},
    ]
    why = [
        (2, "unreachable: its database did not answer; run this again once it is up"),
        (3, "no url for it in this process: add shards.urls.3 (HARVEST_SHARDS__URLS__3)"),
        (4, "its url reaches another shard's database: check shards.urls.4"),
        (5, "not migrated to this release: run harvest migrate run against it"),
        (6, "its functions are older than this release: run harvest migrate run against it"),
    ]
    lines = _render_retiring(check)
    assert lines[1:] == [
        f"retiring shard 1: NOT clear, and shard {n} not read ({w}): more may be left there" for n, w in why
    ]
    assert not any("s3cret" in line or "db2.internal" in line for line in lines)
    # The retiring shard itself, not configured in this process at all.
    check = retire_check({"shards": rows[:2]}, 9)
    assert check["clear"] is None and check["unread_reasons"] == [{"shard_id": 9, "reason": "not_configured"}]
    said = "no url for it in this process: add shards.urls.9 (HARVEST_SHARDS__URLS__9)"
    assert _render_retiring(check) == [f"retiring shard 9: cannot tell: shard 9 not read ({said})"]


def test_the_table_puts_one_blank_line_before_the_retire_check() -> None:
    row = {
        **_row(0, ["readable", "writable", "default"], _read()),
        "reachable": True,
        "schema": {"version": "0119"},
        "workers": {"live": 1, "stale": 0},
        "pressure": {},
        "queue_coverage": {},
        "stranded_pending": 0,
        "stranded": [],
        "readiness": "ready",
    }
    data = {"readiness": "ready", "observed_at": "now", "candidate_shard": None, "shards": [row]}
    data["retiring"] = retire_check(data, 0)
    text = _render(data)
    assert "\n\n\n" not in text and text.endswith(
        "\n\nretiring shard 0: clear: no cross-shard child on it, no child end owed on it"
    )
