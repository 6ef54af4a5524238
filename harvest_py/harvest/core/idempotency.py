"""Stable idempotency keys for activities.

A key is derived only from ``(execution_id, seq)``: the same logical invocation
gets the same key on every retry, replay, restart or duplicate dispatch, and two
invocations never share one. Regular and local activities use the same rule.
"""

from __future__ import annotations

import uuid

__all__ = ["IdempotencyKey"]


class IdempotencyKey:
    """A UUID-shaped key; ``subkey(name)`` derives distinct stable keys from it."""

    __slots__ = ("_uuid",)

    def __init__(self, value: uuid.UUID | str):
        self._uuid = value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))

    @classmethod
    def for_activity(cls, execution_id: object, seq: int) -> IdempotencyKey:
        return cls(uuid.uuid5(uuid.NAMESPACE_URL, f"harvest:{execution_id}:{seq}"))

    def subkey(self, name: str) -> IdempotencyKey:
        """A child key for one of several outbound calls (``key.subkey("email")``)."""
        return IdempotencyKey(uuid.uuid5(self._uuid, str(name)))

    def as_str(self) -> str:
        return str(self._uuid)

    def as_uuid(self) -> uuid.UUID:
        return self._uuid

    def __str__(self) -> str:
        return str(self._uuid)

    def __repr__(self) -> str:
        return f"IdempotencyKey({str(self._uuid)!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, IdempotencyKey):
            return self._uuid == other._uuid
        if isinstance(other, str):
            return str(self._uuid) == other
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._uuid)
