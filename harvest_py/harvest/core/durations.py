"""Durations: seconds from ``30``, ``"30s"``, ``"5m"``, ``"1h30m"``, ``"250ms"`` or a timedelta.

The one parser every duration goes through (decorators, RetryPolicy, flow-control values,
the client's start arguments, ``ctx.sleep``), so each is refused the same way at the edge.
"""

from __future__ import annotations

import datetime as _dt
import math
import re
from typing import Any

from harvest.core.errors import MAX_DURATION_SECS, InvalidArgument

__all__ = ["MAX_DURATION_SECS", "Duration", "check_interval", "interval_problem", "parse_duration"]

_UNITS = {"ms": 0.001, "s": 1.0, "sec": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0, "w": 604800.0}
_PART = re.compile(r"(\d+(?:\.\d+)?|\.\d+)\s*(ms|sec|min|s|m|h|d|w)", re.IGNORECASE)


# What every duration parameter of the public surface accepts (a timeout, a sleep, an
# interval): seconds, a string such as "5s" or "1h30m", or a timedelta. One alias, so a
# parameter's type says what parse_duration takes and a checker passes "5s" everywhere alike.
Duration = float | str | _dt.timedelta

# The longest duration accepted anywhere (100 years), MAX_DURATION_SECS (core/errors.py: an
# ActivityFailure's next_retry_delay is held to it too): beyond it PostgreSQL's timestamp
# arithmetic overflows, so a larger value is refused here rather than at claim time.


def parse_duration(value: Any, what: str = "duration", *, positive: bool = False) -> float:
    """Seconds from ``30``, ``"30s"``, ``"5m"``, ``"1h30m"``, ``"250ms"`` or a timedelta.

    ``positive`` refuses 0 too: a zero timeout or retry interval makes a busy loop.
    """
    if isinstance(value, _dt.timedelta):
        seconds = value.total_seconds()
    elif isinstance(value, (int, float)) and not isinstance(value, bool):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        try:
            seconds = float(text)
        except ValueError:
            # "-5s" is refused below for its sign (as -5 is), not as text that does not parse.
            negative = text.startswith("-")
            seconds = _parse_units(text[1:] if negative else text, value, what)
            seconds = -seconds if negative else seconds
    else:
        raise InvalidArgument(
            f"{what}: expected seconds or a string like '30s', '5m', '1h', "
            f"got {type(value).__name__} {value!r}"
        )
    if not math.isfinite(seconds) or seconds < 0 or (positive and seconds == 0):
        raise InvalidArgument(
            f"{what}: {value!r} is not a {'positive' if positive else 'non-negative'} finite duration"
        )
    if seconds > MAX_DURATION_SECS:
        raise InvalidArgument(f"{what}: {value!r} is longer than the longest duration allowed (100 years)")
    return seconds


def _parse_units(text: str, original: Any, what: str) -> float:
    pos, total = 0, 0.0
    compact = text.replace(" ", "")
    for m in _PART.finditer(compact):
        if m.start() != pos:
            break
        total += float(m.group(1)) * _UNITS[m.group(2).lower()]
        pos = m.end()
    if pos == 0 or pos != len(compact):
        raise InvalidArgument(
            f"{what}: cannot parse {original!r}; use a number of seconds or "
            "a string like '250ms', '30s', '5m', '1h', '1d' (or '1h30m')"
        )
    return total


# The words a PostgreSQL interval may hold (its units and their abbreviations, "ago", "at",
# "on", "infinity"), compared on their first 10 letters as PostgreSQL does ("microseconds").
# fmt: off
_INTERVAL_WORDS = frozenset({
    "ago", "at", "c", "cent", "centuries", "century", "d", "day", "days", "dec", "decade", "decades",
    "decs", "h", "hour", "hours", "hr", "hrs", "infinity", "m", "microsecon", "mil", "millennia",
    "millennium", "millenniums", "millisecon", "mils", "min", "mins", "minute", "minutes", "mon",
    "mons", "month", "months", "ms", "msec", "msecond", "mseconds", "msecs", "on", "s", "sec", "second",
    "seconds", "secs", "us", "usec", "usecond", "useconds", "usecs", "w", "week", "weeks", "y", "year",
    "years", "yr", "yrs",
})
# fmt: on
_ISO_INTERVAL = re.compile(r"[+-]?p[0-9ymwdths.,:-]*")


def interval_problem(value: str) -> str | None:
    """What makes ``value`` no PostgreSQL interval ('30 days', '12:00:00', 'P1D'), or None when
    it may be one: a word that is no unit of time, or no number at all. The database parses the
    interval; this only refuses, before it is sent, what it would refuse in words that name no
    option or field ("invalid input syntax for type interval")."""
    text = value.strip().lower()
    if _ISO_INTERVAL.fullmatch(text) and any(c.isdigit() for c in text):
        return None
    words = [w for w in re.findall(r"[a-z]+", text) if w[:10] not in _INTERVAL_WORDS]
    if not words and (any(c.isdigit() for c in text) or "infinity" in text):
        return None
    why = f" ({words[0]!r} is not a unit of time)" if words else ""
    return f"{value!r} is not a PostgreSQL interval{why}; give e.g. '30 days', '12 hours' or '1 day 06:00'"


def check_interval(value: str, what: str) -> str:
    """``value`` unchanged when it may be a PostgreSQL interval, else InvalidArgument naming
    ``what`` (:func:`interval_problem`)."""
    problem = interval_problem(value)
    if problem is not None:
        raise InvalidArgument(f"{what}: {problem}")
    return value


def moment(value: str, what: str, now: _dt.datetime) -> _dt.datetime:
    """An RFC 3339 time (UTC when it has no offset), or a duration back from ``now`` (24h, 7d):
    the usage report's ``from`` and ``to``."""
    text = value.strip()
    try:
        found = _dt.datetime.fromisoformat(text.replace("Z", "+00:00").replace("z", "+00:00"))
    except ValueError:
        try:
            return now - _dt.timedelta(seconds=parse_duration(text, what))
        except InvalidArgument:
            raise InvalidArgument(
                f"{what} {value!r} is neither an RFC 3339 time (2026-06-01T00:00:00Z) "
                "nor a duration back from now (24h, 7d)"
            ) from None
    return found if found.tzinfo is not None else found.replace(tzinfo=_dt.UTC)


def plain_number(x: float) -> str:
    """A number as a person would write it in an option or a message: 2 (not 2.0), 0.25."""
    return str(int(x)) if float(x).is_integer() else str(x)
