"""Execution ids: a UUID whose first two bytes carry the shard number.

The next six bytes are the minting transaction's clock, so one shard's ids sort by when
their runs started (nothing reads them back). The same encoding as
``harvest._new_execution_id`` and ``harvest.shard_of`` in ``functions/core.sql``, so any
id routes to its shard with no directory. And the decision partition of a workflow id
(owner mode), as ``harvest.partition_of`` in ``functions/owners.sql``.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from harvest.core.errors import HarvestError, InvalidArgument

# A shard number is 0..MAX_SHARD (two bytes of the id).
MAX_SHARD = 65535

# The largest row id (a dead letter's, an audit row's, an event's): the columns are bigints, and
# a larger number given as a position reached the database as numeric (42883, a 500).
ROW_ID_MAX = 2**63 - 1


def is_shard_number(value: object) -> bool:
    """Whether ``value`` is a shard number: an int 0..MAX_SHARD (a bool is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_SHARD


def shard_number(value: Any, where: str, error: type[HarvestError] = InvalidArgument) -> int:
    """``value``, a shard number, or ``error`` saying ``where: value is not a shard number``
    (a configuration's ConfigError, a call's InvalidArgument)."""
    if not is_shard_number(value):
        raise error(f"{where}: {value!r} is not a shard number 0..{MAX_SHARD}")
    return int(value)


def shard_of(execution_id: str | uuid.UUID) -> int:
    """The shard an execution id belongs to: its first two bytes, big-endian.

    A string that is not a UUID raises ``ValueError``."""
    value = execution_id if isinstance(execution_id, uuid.UUID) else uuid.UUID(str(execution_id))
    return int.from_bytes(value.bytes[:2], "big")


# Owner mode (functions/owners.sql): the decision partitions of one database.
DECISION_PARTITIONS = 512


def partition_of(workflow_id: str) -> int:
    """The decision partition (0..511) of a workflow id, as ``harvest.partition_of`` computes it.

    The first two bytes of the SHA-256 of its UTF-8 text, big-endian, mod 512: the
    same in SQL and here, in every process (``hash()`` is salted per process)."""
    digest = hashlib.sha256(workflow_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:2], "big") % DECISION_PARTITIONS
