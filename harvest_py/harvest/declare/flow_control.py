"""Flow-control policies declared on ``@workflow`` and ``@activity`` (docs/flow-control.md).

Each is a small value object that validates itself and turns into the JSON the
SQL side reads (``harvest.flow_policies``, activity ``options``). The gates
themselves run inside Postgres, in the claim or start transaction.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any

from harvest.core.durations import parse_duration
from harvest.core.errors import InvalidArgument


def _seconds(value: Any, what: str) -> float:
    return parse_duration(value, what)


__all__ = ["Batch", "Concurrency", "Debounce", "Quota", "RateLimit", "Throttle", "check_key_path"]

_KEY_PATH = re.compile(r"^input(\.[A-Za-z0-9_\-]+)*$")
ON_CONFLICT = ("defer", "cancel_running")


def check_key_path(path: Any, what: str) -> str:
    """``input`` is the first positional argument; ``input.tenant_id`` its field ``tenant_id``."""
    if not isinstance(path, str) or not _KEY_PATH.match(path):
        raise InvalidArgument(
            f"{what}: key path {path!r} must be 'input' or 'input.<field>[.<field>...]' "
            "(input is the first positional argument)"
        )
    return path


def _positive_int(value: Any, what: str) -> int:
    # At most 2^31 - 1: the SQL side stores each limit as an integer.
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= 2**31 - 1:
        raise InvalidArgument(f"{what}: expected an int from 1 to {2**31 - 1}, got {value!r}")
    return value


@dataclass(frozen=True)
class Concurrency:
    """Per-key workflow concurrency: at most ``limit`` runs per key.

    ``defer`` admits the start but holds its first workflow task until the key
    has room; ``cancel_running`` (latest wins) cancels the oldest runs of the key.
    """

    key: str
    limit: int
    on_conflict: str = "defer"

    def __post_init__(self) -> None:
        check_key_path(self.key, "Concurrency.key")
        _positive_int(self.limit, "Concurrency.limit")
        if self.on_conflict not in ON_CONFLICT:
            raise InvalidArgument(
                f"Concurrency.on_conflict: {self.on_conflict!r} is not one of {ON_CONFLICT}"
            )

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "limit": self.limit, "on_conflict": self.on_conflict}


@dataclass(frozen=True)
class Quota:
    """Per-key resource quota checked in the start transaction (HR006 -> QuotaExceeded)."""

    key: str
    max_active_executions: int | None = None
    max_history_bytes: int | None = None
    max_dead_letters: int | None = None

    def __post_init__(self) -> None:
        check_key_path(self.key, "Quota.key")
        limits = {
            "max_active_executions": self.max_active_executions,
            "max_history_bytes": self.max_history_bytes,
            "max_dead_letters": self.max_dead_letters,
        }
        if all(v is None for v in limits.values()):
            raise InvalidArgument("Quota: set at least one of " + ", ".join(limits))
        for name, value in limits.items():
            if value is not None:
                _positive_int(value, f"Quota.{name}")

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"key": self.key}
        for name in ("max_active_executions", "max_history_bytes", "max_dead_letters"):
            if getattr(self, name) is not None:
                out[name] = getattr(self, name)
        return out


@dataclass(frozen=True)
class RateLimit:
    """A token bucket: ``rps`` tokens a second, up to ``burst``; ``key`` makes one bucket per value."""

    rps: float
    burst: float | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        _positive_number(self.rps, "RateLimit.rps")
        if self.burst is not None:
            _positive_number(self.burst, "RateLimit.burst", 1, strict=False)
        if self.key is not None:
            check_key_path(self.key, "RateLimit.key")

    def to_json(self) -> dict[str, Any]:
        return {
            "rps": self.rps,
            "burst": self.burst if self.burst is not None else max(self.rps, 1),
            "key": self.key,
        }


# The largest rate or size the SQL takes (functions/core.sql, _json_number; an activity's
# options, functions/decide.sql): past it a double's range ends, and 1e308 failed its casts.
MAX_NUMBER = 1e300


def _positive_number(value: Any, what: str, minimum: float = 0.0, strict: bool = True) -> float:
    # A finite number only: NaN compares false everywhere and infinity is no rate or size.
    if (
        not isinstance(value, (int, float))
        or isinstance(value, bool)
        or not math.isfinite(value)
        or not (value > minimum if strict else value >= minimum)
        or value > MAX_NUMBER
    ):
        raise InvalidArgument(
            f"{what}: expected a number {'>' if strict else '>='} {minimum:g} and at most {MAX_NUMBER:g}, "
            f"got {value!r}"
        )
    return value


@dataclass(frozen=True)
class Throttle:
    """Start throttle: at most ``rps`` starts a second (bursts up to ``burst``) per key;
    the rest are deferred (the start returns a handle with ``deferred=True``) and
    released in order by the worker's scanner."""

    rps: float
    burst: float | None = None
    key: str | None = None

    def __post_init__(self) -> None:
        _positive_number(self.rps, "Throttle.rps")
        if self.burst is not None:
            _positive_number(self.burst, "Throttle.burst", 1, strict=False)
        if self.key is not None:
            check_key_path(self.key, "Throttle.key")

    def to_json(self) -> dict[str, Any]:
        return {
            "rps": self.rps,
            "burst": self.burst if self.burst is not None else max(self.rps, 1),
            "key": self.key,
        }


@dataclass(frozen=True)
class Debounce:
    """Collapse a burst of starts per key into one run, started ``quiet`` after the last
    start of the burst (never later than ``max_wait`` after its first) with the latest input."""

    quiet: Any
    key: str | None = None
    max_wait: Any = None

    def __post_init__(self) -> None:
        _positive_number(_seconds(self.quiet, "Debounce.quiet"), "Debounce.quiet")
        if self.max_wait is not None:
            _positive_number(_seconds(self.max_wait, "Debounce.max_wait"), "Debounce.max_wait")
        if self.key is not None:
            check_key_path(self.key, "Debounce.key")

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "quiet_secs": _seconds(self.quiet, "Debounce.quiet"),
            "max_wait_secs": None if self.max_wait is None else _seconds(self.max_wait, "Debounce.max_wait"),
        }


@dataclass(frozen=True)
class Batch:
    """Gather starts per key into one run: each start passes one argument and the run
    receives the list of them, once ``max_size`` starts gathered or ``window`` after the first."""

    max_size: int
    window: Any
    key: str | None = None

    def __post_init__(self) -> None:
        _positive_int(self.max_size, "Batch.max_size")
        _positive_number(_seconds(self.window, "Batch.window"), "Batch.window")
        if self.key is not None:
            check_key_path(self.key, "Batch.key")

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "max_size": self.max_size,
            "window_secs": _seconds(self.window, "Batch.window"),
        }


# -- the hooks definitions.py calls ------------------------------------------------------


def workflow_policies(concurrency: Any, quota: Any) -> dict[str, Any]:
    if concurrency is not None and not isinstance(concurrency, Concurrency):
        raise TypeError(f"@workflow(concurrency=...): expected a Concurrency, got {concurrency!r}")
    if quota is not None and not isinstance(quota, Quota):
        raise TypeError(f"@workflow(quota=...): expected a Quota, got {quota!r}")
    return {"concurrency": concurrency, "quota": quota}


def start_gates(throttle: Any, debounce: Any, batch: Any) -> dict[str, Any]:
    for what, value, cls in (
        ("throttle", throttle, Throttle),
        ("debounce", debounce, Debounce),
        ("batch", batch, Batch),
    ):
        if value is not None and not isinstance(value, cls):
            raise TypeError(f"@workflow({what}=...): expected a {cls.__name__}, got {value!r}")
    declared = [
        name
        for name, value in (("throttle", throttle), ("debounce", debounce), ("batch", batch))
        if value is not None
    ]
    if len(declared) > 1:
        raise InvalidArgument(
            f"@workflow: {' and '.join(declared)} cannot be combined; "
            "declare one of throttle, debounce, batch"
        )
    return {"throttle": throttle, "debounce": debounce, "batch": batch}


def activity_policies(max_concurrent: Any, concurrency_key: Any, rate_limit: Any) -> dict[str, Any]:
    if max_concurrent is not None:
        _positive_int(max_concurrent, "@activity(max_concurrent=...)")
    if concurrency_key is not None:
        if max_concurrent is None:
            raise InvalidArgument(
                "@activity(concurrency_key=...) needs max_concurrent=N: the key names "
                "a budget of N in-flight calls"
            )
        if not isinstance(concurrency_key, str) or not concurrency_key.strip():
            raise InvalidArgument(f"concurrency_key: expected a non-empty string, got {concurrency_key!r}")
    if rate_limit is not None and not isinstance(rate_limit, RateLimit):
        raise TypeError(f"@activity(rate_limit=...): expected a RateLimit, got {rate_limit!r}")
    return {"max_concurrent": max_concurrent, "concurrency_key": concurrency_key, "rate_limit": rate_limit}


def check_shared_keys(activities: Any) -> None:
    """Activities sharing a concurrency key must declare the same max_concurrent."""
    from harvest.core.errors import ConfigError

    by_key: dict[str, dict[str, int]] = {}
    for defn in activities:
        if defn.max_concurrent is not None:
            by_key.setdefault(defn.concurrency_key or defn.name, {})[defn.name] = defn.max_concurrent
    for key, members in sorted(by_key.items()):
        if len(set(members.values())) > 1:
            listed = ", ".join(f"{name} (max_concurrent={n})" for name, n in sorted(members.items()))
            raise ConfigError(
                f"concurrency key {key!r}: activities sharing it disagree on max_concurrent: "
                f"{listed}; give them the same value"
            )


def workflow_keys(defn: Any) -> list[str]:
    """The key paths a workflow's declared start gates read from its input, described."""
    found = []
    for gate in ("concurrency", "quota", "throttle", "debounce", "batch"):
        key = getattr(getattr(defn, gate, None), "key", None)
        if key is not None:
            found.append(f"workflow {defn.name!r} {gate} key {key!r}")
    return found


def input_keys(app: Any) -> list[str]:
    """Every key path the App's declared gates read from an input, described for an error."""
    found: list[str] = []
    for defn in app.workflows.values():
        found.extend(workflow_keys(defn))
    for defn in app.activities.values():
        key = getattr(defn.rate_limit, "key", None)
        if key is not None:
            found.append(f"activity {defn.name!r} rate_limit key {key!r}")
        if defn.fairness_key is not None:
            found.append(f"activity {defn.name!r} fairness_key {defn.fairness_key!r}")
    return found


# What to do about a key path under codecs, by where it was given.
DECLARED_KEY_FIX = "declare it without key= (one gate for every run) or run it in an App without codecs"


def keys_under_codecs(where: str, keys: list[str], fix: str = DECLARED_KEY_FIX) -> str:
    """The one error of key paths that codecs make unresolvable (``keys``: described, not
    empty), wherever they are refused: an App's or a Worker's codecs (ConfigError), a
    Client's start (InvalidArgument), a workflow's ``execute_activity(fairness_key=...)`` (its
    workflow task fails)."""
    more = f" (and {len(keys) - 1} more)" if len(keys) > 1 else ""
    return (
        f"{where}: {keys[0]}{more} reads the input, which the codecs store encoded, so the key "
        f'never resolves and the gate would never apply; {fix} (docs/payloads.md, "What codecs '
        'do not cover")'
    )


def refuse_keys_under_codecs(app: Any, payloads: Any, where: str) -> None:
    """A key path reads the input the database holds, which codecs store as an envelope
    (``{"_harvest_codec": ..., "data": ...}``): the path never resolves, so the gate silently
    never applied (a keyed rate limit made no bucket at all). Refuse the pair up front."""
    from harvest.core.errors import ConfigError

    keys = input_keys(app) if payloads.chain.codecs else []
    if keys:
        raise ConfigError(keys_under_codecs(where, keys))


def policies_json(app: Any) -> dict[str, Any]:
    workflows: dict[str, Any] = {}
    for defn in app.workflows.values():
        policy: dict[str, Any] = {}
        if getattr(defn, "concurrency", None) is not None:
            policy["concurrency"] = defn.concurrency.to_json()
        if getattr(defn, "quota", None) is not None:
            policy["quota"] = defn.quota.to_json()
        for gate in ("throttle", "debounce", "batch"):
            if getattr(defn, gate, None) is not None:
                policy[gate] = getattr(defn, gate).to_json()
        workflows[defn.name] = policy
    activities: dict[str, Any] = {}
    for defn in app.activities.values():
        flow = defn._flow_options()
        if flow:
            activities[defn.name] = flow
    return {"workflows": workflows, "activities": activities}
