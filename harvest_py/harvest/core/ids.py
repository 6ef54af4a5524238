"""Execution ids: a UUID whose first two bytes carry the shard number.

The same encoding as ``harvest._new_execution_id`` and ``harvest.shard_of`` in
``functions/core.sql``, so any id routes to its shard with no directory.
"""

from __future__ import annotations

import uuid

# A shard number is 0..MAX_SHARD (two bytes of the id).
MAX_SHARD = 65535


def shard_of(execution_id: str | uuid.UUID) -> int:
    """The shard an execution id belongs to: its first two bytes, big-endian.

    A string that is not a UUID raises ``ValueError``."""
    value = execution_id if isinstance(execution_id, uuid.UUID) else uuid.UUID(str(execution_id))
    return int.from_bytes(value.bytes[:2], "big")
