"""JSON of the values database rows carry, written once for every face (:func:`json_default`):
the management API's answers (harvest.web.errors), the CLI's ``-o json`` (harvest.cli.output),
the dashboard's pretty-printed values and a history export (harvest.client.history_export), so
one row is the same text over SQL and over HTTP."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from typing import Any

__all__ = ["json_default"]


def json_default(value: Any) -> Any:
    """``json.dumps(..., default=json_default)``: times as ISO 8601, an aware one in UTC (the
    session's zone, PGTZ or a role's TimeZone, never shows through), intervals in seconds,
    decimals as numbers, bytes as UTF-8 text, sets and tuples as lists, anything else (a UUID)
    as ``str()`` writes it."""
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).isoformat()
    if isinstance(value, datetime | date):
        return value.isoformat()
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes | memoryview):
        return bytes(value).decode("utf-8", "replace")
    if isinstance(value, set | frozenset | tuple):
        return list(value)
    return str(value)
