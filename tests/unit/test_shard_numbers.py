"""A shard number is checked by one rule (core.ids: an int 0..MAX_SHARD, a bool is not one),
whichever face gives it: the config, the router, the pools, WorkerOptions, a placement."""

from __future__ import annotations

import pytest

from harvest.core.errors import ConfigError, InvalidArgument
from harvest.core.ids import MAX_SHARD, is_shard_number, shard_number
from harvest.runtime.children import ChildPlacement
from harvest.shard.pools import _checked_dsns
from harvest.worker.options import parse_shard_assignments


@pytest.mark.parametrize("value", [0, 1, MAX_SHARD])
def test_a_shard_number_is_an_int_in_two_bytes(value: int) -> None:
    assert is_shard_number(value) and shard_number(value, "x") == value


@pytest.mark.parametrize("value", [-1, MAX_SHARD + 1, True, False, 1.0, "1", None])
def test_anything_else_is_refused_with_where_it_was_given(value: object) -> None:
    assert not is_shard_number(value)
    with pytest.raises(InvalidArgument, match=rf"^here: {value!r} is not a shard number 0\.\.65535$"):
        shard_number(value, "here")
    with pytest.raises(ConfigError):
        shard_number(value, "here", ConfigError)


def test_each_face_refuses_the_same_values() -> None:
    for bad in (True, MAX_SHARD + 1):
        with pytest.raises(ConfigError, match=r"shards\.urls: .* is not a shard number"):
            _checked_dsns({bad: "postgresql://x"})  # type: ignore[dict-item]
        with pytest.raises(InvalidArgument, match="is not a shard number"):
            parse_shard_assignments([bad], "worker.shards")
        with pytest.raises(InvalidArgument, match=r"placement: shard .* is not a shard number"):
            ChildPlacement("shard", shard_id=bad)
