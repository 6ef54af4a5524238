"""`harvest backup verify` with a shard whose database cannot be reached: exit 3 naming the
shard (it named the database's host:port/db only, and an operator had to map it to a shard)."""

from __future__ import annotations

import pytest

from harvest.db.backup import DrillFailed, Source, _snapshots


def test_a_shard_that_cannot_be_reached_is_named() -> None:
    down = Source(2, "postgresql://ops:s3cret@127.0.0.1:1/harvest")  # nothing listens on port 1
    with pytest.raises(DrillFailed) as raised, _snapshots([down]):
        pass
    said = str(raised.value)
    assert said.startswith("shard 2: cannot connect to database 127.0.0.1:1/harvest"), said
    assert raised.value.exit_code == 3 and "s3cret" not in said
