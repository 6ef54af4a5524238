"""Old keyword spellings kept working for a while, with a DeprecationWarning (CONTRIBUTING.md "Names")."""

from __future__ import annotations

import warnings
from typing import Any

from harvest.core.errors import InvalidArgument


def queue_alias(queue: str | None, task_queue: str | None, *, stacklevel: int = 3) -> str | None:
    """The queue a caller asked for with ``queue=`` or the deprecated ``task_queue=``."""
    if task_queue is None:
        return queue
    warnings.warn(
        "task_queue= is deprecated: pass queue= (the same value)", DeprecationWarning, stacklevel=stacklevel
    )
    if queue is not None and queue != task_queue:
        raise InvalidArgument(f"queue={queue!r} and task_queue={task_queue!r} disagree: pass queue= only")
    return task_queue


def renamed_attribute(new: str, old: str) -> property:
    """A read-only ``old`` attribute that reads ``new``, with a DeprecationWarning."""

    def read(self: Any) -> Any:
        warnings.warn(f"{old} is deprecated: read {new} (the same value)", DeprecationWarning, stacklevel=2)
        return getattr(self, new)

    return property(read, doc=f"Deprecated spelling of ``{new}``.")
