"""The client's side of the payload policy (docs/payloads.md): what a client writes is encoded
by its codecs; what it reads has its offloaded payloads resolved and its envelopes decoded.

Shared by ``Client`` and ``AsyncClient`` as steps (harvest.db.steps), so one read path serves both.
"""

from __future__ import annotations

from typing import Any

from harvest.core import payload
from harvest.core.codecs import Payloads, SqlPayloadStore, refs_in, replace_refs
from harvest.core.errors import InvalidArgument
from harvest.db import sqlapi
from harvest.db.steps import Atomic, Sql, Steps

_NONE = Payloads()


def of(client: Any) -> Payloads:
    """The client's payload policy (no codecs for an object that has none)."""
    return getattr(client, "payloads", None) or _NONE


def decoded(payloads: Payloads | None, value: Any) -> Steps[Any]:
    """``value`` with its references resolved from the client's store (:func:`resolved`) and
    its envelopes decoded."""
    value = yield from resolved(payloads, value)
    return (payloads or _NONE).chain.decode_tree(value)


def resolved(payloads: Payloads | None, value: Any) -> Steps[Any]:
    """``value`` with its references resolved from the client's store (the default one reads
    ``harvest.payloads`` of the database the read came from), its envelopes left as stored:
    the half of :func:`decoded` that reads, for a reader that decodes elsewhere (`events tail
    --app`: its printer decodes every path's events, once)."""
    ids = refs_in(value)
    if not ids:
        return value
    store = (payloads or _NONE).store
    if isinstance(store, SqlPayloadStore):
        found = yield Sql(sqlapi.get_payloads, ids)
    else:  # a custom store: awaited on the async client, on a loop of its own on the sync one
        found = yield Atomic(
            lambda sql: _run_coroutine(store.get(AwaitableSql(sql), ids)),
            lambda sql: store.get(sql, ids),
        )
    return replace_refs(value, found)


# -- offload from clients (docs/payloads.md "Large payloads") ----------------------------------------
# A client's start input (each argument) and signal payload above its offload_bytes go to its
# store too, so histories stay small whoever writes them. The rows are stored on the connection
# the start or the signal uses (the run's database): a start's, before the run exists, without a
# run, then handed to it in the same transaction (harvest.set_payloads_execution); a signal's,
# owned by the run signalled.


def offload_plan(payloads: Payloads | None, values: list[Any]) -> list[int]:
    """The positions of ``values`` (encoded payloads) that go to the offload store."""
    if payloads is None or payloads.offload_bytes is None:
        return []
    return [i for i, v in enumerate(values) if payloads.oversized(v)]


def as_written(payloads: Payloads | None, values: list[Any]) -> list[Any]:
    """``values`` as the history will hold them (an offloaded one as its reference), for the
    size check of what is written."""
    big = set(offload_plan(payloads, values))
    return [Payloads.reference("0" * 36, v) if i in big else v for i, v in enumerate(values)]


def text(value: Any, what: str, *, optional: bool = True) -> Any:
    """A name, id or reason a client sends as SQL text, checked here: a value that is not a str
    reached the database as another type (psycopg's UndefinedFunction, or a run whose
    workflow_id 5 became "5" on the AsyncClient), and a NUL was the driver's DataError (a lone
    surrogate its UnicodeEncodeError)."""
    if value is None and optional:
        return None
    if not isinstance(value, str):
        raise InvalidArgument(f"{what}: expected a string, got {type(value).__name__} {value!r}")
    return payload.check_text(value, what)


def written(payloads: Payloads | None, value: Any, what: str, label: str, limit: int | None) -> Any:
    """A value a client writes into a message (a signal's payload, an update's or a query's
    argument): encoded (``what`` names it in an encoding error) through the client's codecs, its
    size checked (``label``) as the history holds it: an offloaded one as its reference."""
    policy = payloads or _NONE
    encoded = policy.chain.encode(payload.encode(value, what))
    payload.check_size(as_written(policy, [encoded])[0], label, limit)
    return encoded


def batch_written(payloads: Payloads | None, signal_name: str, value: Any, limit: int | None) -> Any:
    """A batch signal's payload (:func:`written`); one the offload store would take is refused (a
    stored payload belongs to one run). Shared by the clients' ``signal_workflows`` and
    `harvest workflow bulk-signal --app`."""
    text(signal_name, "signal name", optional=False)
    label = f"the payload of signal {signal_name}"
    encoded = written(payloads, value, "payload", label, limit)
    if offload_plan(payloads, [encoded]):
        raise InvalidArgument(
            f"{label} would go to the offload store, which belongs to one run: send a smaller "
            "payload (a reference to the data) to many runs"
        )
    return encoded


class AwaitableSql:
    """A synchronous SQL API seen as an asynchronous one, for a custom store's coroutines called
    from the sync client: each call runs on the same connection (inside the caller's transaction),
    so a store written for :class:`harvest.db.sqlapi.AsyncSqlApi` works from both clients."""

    def __init__(self, sql: Any):
        self.sql = sql

    def __getattr__(self, name: str) -> Any:
        method = getattr(self.sql, name)

        async def call(*args: Any, **kwargs: Any) -> Any:
            return method(*args, **kwargs)

        return call


def _run_coroutine(coro: Any) -> Any:
    """A custom store's coroutine from synchronous code (its own event loop, in a thread)."""
    import asyncio
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max_workers=1) as pool:
        return pool.submit(asyncio.run, coro).result()


def offloaded(
    payloads: Payloads | None, execution_id: str | None, values: list[Any], where: list[int] | None = None
) -> Steps[tuple[list[Any], list[str]]]:
    """``values`` with the payloads at ``where`` (default: the oversized ones; none: ``values`` as
    they are) stored, owned by ``execution_id`` (None: no run yet), and replaced by references;
    and the stored ids of the default store (empty for another store). One path for both clients
    (harvest.db.steps); a custom store's coroutine is awaited on the async client, run on a loop of
    its own on the sync one."""
    if where is None:
        where = offload_plan(payloads, values)
    if payloads is None or not where:
        return values, []
    big = [values[i] for i in where]
    store = payloads.store
    if isinstance(store, SqlPayloadStore):
        ids = [str(i) for i in (yield Sql(sqlapi.put_payloads, execution_id, big))]
        owned = ids
    else:
        put = yield Atomic(
            lambda sql: _run_coroutine(store.put(AwaitableSql(sql), execution_id, big)),
            lambda sql: store.put(sql, execution_id, big),
        )
        ids, owned = [str(i) for i in put], []
    out = list(values)
    for i, stored in zip(where, ids, strict=True):
        out[i] = Payloads.reference(stored, values[i])
    return out, owned
