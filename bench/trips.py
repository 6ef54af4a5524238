"""Counting cross-shard round trips: which server each statement went to, and whose runs it names.

A :class:`Trace` wraps psycopg's cursor ``execute``/``executemany`` (sync and async) in this
process and records, per statement, the port of the server it was sent to, the Harvest function
it calls and every run identifier in its parameters: UUIDs anywhere in them (execution and
workflow ids, JSON text and Jsonb included) and task ids (parameters named ``task_id`` /
``task_ids``). :func:`count` then maps each identifier to the shard its run lives on and
counts the statements sent to any other shard.

Task ids are numbered per database, so the same number exists on every shard; give each shard
its own range first (:func:`separate_task_ids`: shard k's ids start at k * TASK_ID_STRIDE + 1),
and a task id names its shard as an execution id does.

Used by bench/shard_bench.py (the sharding row) and tests/shard/test_cross_shard_trips.py; it
imports nothing but psycopg and the standard library.
"""

from __future__ import annotations

import asyncio
import re
import uuid
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict

TASK_ID_STRIDE = 10**12
TASK_KEYS = ("task_id", "task_ids")
UUID_RE = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
NAME_RE = re.compile(r"harvest\.(\w+)\s*\(")
PATCHED = ((psycopg.AsyncCursor, "execute"), (psycopg.AsyncCursor, "executemany"))
PATCHED += ((psycopg.Cursor, "execute"), (psycopg.Cursor, "executemany"))


def call_name(query: str) -> str:
    """The Harvest function a statement calls (``claim_tasks``), else its first words."""
    found = NAME_RE.search(query)
    return found.group(1) if found else " ".join(query.split())[:40]


class Trace:
    """Every statement this process sends while :attr:`on`: (server port, call, identifiers)."""

    def __init__(self) -> None:
        self.statements: list[tuple[int, str, frozenset[str]]] = []
        self.on = False
        self.ignored: set[int] = set()  # id() of connections not to count (the bench's own reads)
        self._originals: list[tuple[type, str, Any]] = []

    def record(self, cursor: Any, query: Any, params: Any) -> None:
        conn = cursor.connection
        if not self.on or id(conn) in self.ignored:
            return
        text = query if isinstance(query, str) else _as_text(query, conn)
        ids: set[str] = set()
        collect_ids(params, ids)
        self.statements.append((conn.info.port, call_name(text), frozenset(ids)))

    def install(self) -> None:
        for cls, method in PATCHED:
            original = getattr(cls, method)
            self._originals.append((cls, method, original))
            setattr(cls, method, self._wrap(original))

    def uninstall(self) -> None:
        while self._originals:
            cls, method, original = self._originals.pop()
            setattr(cls, method, original)

    def _wrap(self, original: Any) -> Any:
        trace = self
        if asyncio.iscoroutinefunction(original):

            async def wrapped(cur, query, params=None, *args, **kwargs):
                trace.record(cur, query, params)
                return await original(cur, query, params, *args, **kwargs)
        else:

            def wrapped(cur, query, params=None, *args, **kwargs):
                trace.record(cur, query, params)
                return original(cur, query, params, *args, **kwargs)

        return wrapped


def _as_text(query: Any, conn: Any) -> str:
    try:
        return query.as_string(conn)
    except Exception:
        return repr(query)


def collect_ids(value: Any, out: set[str]) -> None:
    """Every run identifier in a statement's parameters, however nested: UUIDs (lower case) and
    ``task:<id>`` for the values of ``task_id``/``task_ids``."""
    if value is None or isinstance(value, (int, float, bool)):
        return
    if isinstance(value, uuid.UUID):
        out.add(str(value))
    elif isinstance(value, str):
        if len(value) >= 36:
            out.update(m.lower() for m in UUID_RE.findall(value))
    elif isinstance(value, (bytes, bytearray, memoryview)):
        collect_ids(bytes(value).decode("latin-1"), out)
    elif isinstance(value, dict):
        for key, item in value.items():
            if key in TASK_KEYS:
                out.update(f"task:{t}" for t in (item if isinstance(item, (list, tuple)) else [item]))
            else:
                collect_ids(item, out)
    elif isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            collect_ids(item, out)
    elif hasattr(value, "obj"):  # psycopg's Json/Jsonb wrappers
        collect_ids(value.obj, out)
    else:
        collect_ids(str(value), out)


def separate_task_ids(dsns: Mapping[int, str]) -> None:
    """Restart each shard's task ids at its own range (k * TASK_ID_STRIDE + 1), so that a task
    id names the shard it was created on. For a throwaway database only."""
    for shard, dsn in dsns.items():
        with psycopg.connect(dsn, autocommit=True) as conn:
            conn.execute(
                f"ALTER TABLE harvest.tasks ALTER COLUMN id RESTART WITH {shard * TASK_ID_STRIDE + 1}"
            )


def run_homes(dsns: Mapping[int, str]) -> dict[str, int]:
    """Every execution id and workflow id on each shard -> that shard (read after the drain)."""
    home: dict[str, int] = {}
    for shard, dsn in dsns.items():
        with psycopg.connect(dsn, autocommit=True) as conn:
            for execution_id, workflow_id in conn.execute(
                "SELECT id::text, workflow_id FROM harvest.executions"
            ).fetchall():
                home[execution_id.lower()] = shard
                home[str(workflow_id).lower()] = shard
    return home


def home_of(key: str, home: Mapping[str, int]) -> int | None:
    """The shard an identifier's run lives on: a task id by its range, an execution or workflow
    id by ``home`` (:func:`run_homes`); None for an id of no run (a result waiter's own id)."""
    if key.startswith("task:"):
        return int(key[5:]) // TASK_ID_STRIDE
    return home.get(key)


def count(
    statements: Iterable[tuple[int, str, frozenset[str]]],
    dsns: Mapping[int, str],
    home: Mapping[str, int],
    n: int,
) -> dict[str, Any]:
    """Classify each statement: **cross-shard** (names a run living on another shard than the
    server it went to), **run** (names runs of its own shard only), or **polling** (names no
    run: claims, heartbeats, the scanner, LISTEN)."""
    port_shard = {int(conninfo_to_dict(d)["port"]): s for s, d in dsns.items()}
    cross: Counter[str] = Counter()
    local: Counter[str] = Counter()
    polling: Counter[str] = Counter()
    per_shard: Counter[int] = Counter()
    total = unknown_ids = 0
    for port, what, ids in statements:
        total += 1
        shard = port_shard[port]
        per_shard[shard] += 1
        homes = {home_of(i, home) for i in ids}
        unknown_ids += sum(1 for i in ids if home_of(i, home) is None)
        homes.discard(None)
        if homes - {shard}:
            cross[what] += 1
        elif homes:
            local[what] += 1
        else:
            polling[what] += 1
    return {
        "statements": total,
        "per_shard": {str(s): per_shard[s] for s in sorted(dsns)},
        "cross_shard": sum(cross.values()),
        "cross_shard_per_workflow": round(sum(cross.values()) / n, 3),
        "cross_shard_by_call": dict(cross.most_common()),
        "run_statements_per_workflow": round(sum(local.values()) / n, 3),
        "run_statements_by_call": dict(local.most_common()),
        "polling_statements": dict(polling.most_common()),
        "ids_of_no_run": unknown_ids,
    }
