"""`harvest shard rebalance` and `rebalance-resume` without a database: what they print when there
is nothing to do (rebalance-resume with no open move has no target, and said `shard 2 -> -:
nothing to move`), and a `--shard N=URL` they cannot use."""

from __future__ import annotations

import pytest

from harvest.cli.rebalance import _render

COUNTS = {"moved": 0, "declined": 0, "failed": 0}


def test_a_resume_with_no_open_move_says_so_without_a_target() -> None:
    assert _render({"from": 2, "to": "-", "counts": COUNTS, "moves": []}) == "shard 2: no open move to settle"
    assert (
        _render({"from": 2, "to": 0, "counts": COUNTS, "moves": []}) == "shard 2 -> 0: no open move to settle"
    )


def test_a_rebalance_with_no_candidate_says_nothing_to_move() -> None:
    report = {"from": 0, "to": 2, "dry_run": True, "counts": {"would_move": 0}, "moves": []}
    assert _render(report) == "dry run: shard 0 -> 2: nothing to move"
    assert _render({**report, "dry_run": False}) == "shard 0 -> 2: nothing to move"


def test_a_bad_shard_url_on_the_command_line_is_named_as_given(monkeypatch, tmp_path) -> None:
    """`--shard 2=URL` that libpq cannot read is named as the option, never as shards.urls.2
    (the pools' name for it), and without its password."""
    from harvest.cli.rebalance import _shard_dsns
    from harvest.core.errors import ConfigError

    monkeypatch.chdir(tmp_path)
    for name in ("HARVEST_CONFIG", "HARVEST_DATABASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with pytest.raises(ConfigError) as raised:
        _shard_dsns(("2=postgresql://u:s3cret@h/d?nosuchoption=1",))
    assert str(raised.value).startswith("--shard 2=... cannot be used: "), raised.value
    assert "s3cret" not in str(raised.value)
