"""Where a client's calls go: its one database, or the shard an id or a placement names.

A client holds one of these *targets*. ``OneDatabase`` / ``AsyncOneDatabase`` are
``Client(dsn)`` and ``AsyncClient.connect(dsn)``: every call goes to that database, whatever
shard an id carries (today's behaviour, unchanged). ``Sharded`` / ``AsyncSharded`` are
``Client(shards=pools)`` and ``AsyncClient.connect(shards=pools)``: a start goes to the shard the
router places it on, and every call about an execution to the shard it lives on (``follow``):
the shard its id carries first (``router.route``), then the forwarding pointer of a run a
rebalance moved (a seal's HR013, or a seal read), over that shard's pool; a shard with no pool,
or one that cannot be reached, raises ``ShardUnavailable`` and nothing falls back to another
shard. docs/sharding.md, "Routing".
"""

from __future__ import annotations

import contextlib
import functools
import json
import logging
import re
import time
import uuid
from collections.abc import AsyncIterator, Iterator, Mapping
from typing import Any, cast

from harvest.core.errors import ExecutionMigrated, InvalidArgument, ShardUnavailable
from harvest.core.shared_attempt import SharedAttempt
from harvest.db.pools import AsyncConnectionPool, ConnectionPool
from harvest.db.sqlapi import AsyncSqlApi, SqlApi
from harvest.shard.router import ShardRouter

__all__ = [
    "AsyncOneDatabase",
    "AsyncSharded",
    "DeclaredGate",
    "OneDatabase",
    "Placement",
    "Sharded",
    "api",
    "aread_declaration",
    "boot_order",
    "declaration_by_name",
    "hashed_shard",
    "place_start",
    "read_declaration",
    "resident",
]

# The one shard number of a one-database client: ids route nowhere else.
ONE = 0

log = logging.getLogger("harvest.client")


class Placement:
    """Where a start goes: ``shard`` (None: the database's own, a one-database client's
    unpinned start), the ``workflow_id`` to start under (minted when the caller gave none and
    the shard had to be known first) and whether the caller asked for the placement."""

    __slots__ = ("pinned", "shard", "workflow_id")

    def __init__(self, shard: int | None, workflow_id: str | None, pinned: bool):
        self.shard, self.workflow_id, self.pinned = shard, workflow_id, pinned


def place_start(
    target: Any,
    name: str,
    workflow_id: str | None,
    shard_id: int | None,
    residency_key: str | None,
    definition: Any = None,
    encoded: list[Any] | None = None,
) -> Placement:
    """The guide's placement of a new workflow (docs/sharding.md, "Placement"):

    * a pin (``shard_id`` or ``residency_key``, not both) through ``router.place``, with its
      terse refusals (InvalidArgument); a pin of a workflow that declares a debounce or a batch
      is refused too (a deferred start has nothing to place); without a workflow_id, one is
      minted that hashes to the pinned shard, so a later unpinned start of it finds the run;
    * unpinned on a sharded client: rendezvous over (name, workflow_id), minting the id first
      when there is none; without a workflow_id, a workflow that declares a debounce or a batch
      over (name, its gate's key in ``encoded``, the input), so a burst meets on one shard, with
      an id minted to hash there;
    * unpinned on a one-database client: the database's own shard, as before."""
    router: ShardRouter = target.router
    if shard_id is not None or residency_key is not None:
        shard = router.place(name, workflow_id, shard_id=shard_id, residency_key=residency_key)
        if definition is not None:
            refuse_deferring_pin(
                name, "debounce" if definition.debounce else "batch" if definition.batch else None
            )
        if workflow_id is None:
            workflow_id = router.mint_workflow_id(name, shard)
        return Placement(shard, workflow_id, True)
    if not target.sharded:
        return Placement(None, workflow_id, False)
    # A given workflow_id keeps its hashed shard, where a lookup by that id looks for the run.
    key = gate_key(definition, encoded or []) if workflow_id is None else None
    if key is not None:
        shard = router.pick_for_gate(name, key)
        return Placement(shard, router.mint_workflow_id(name, shard), False)
    if workflow_id is None:
        workflow_id = str(uuid.uuid4())
    return Placement(router.pick_for_new_workflow(name, workflow_id), workflow_id, False)


_INDEX = re.compile(r"-?[0-9]+")


def gate_key(definition: Any, encoded: list[Any]) -> str | None:
    """The key a start of a workflow with a debounce or a batch collapses under, as the
    database resolves it (functions/flow_throttle.sql, ``_start_gate_key``): '' for a gate
    declared without a key, else the value at its key path in the first argument (a string
    itself, any other value its JSON); None without such a gate, or when the input has no value
    there (no gate: the start is not deferred). A throttle defers each start where it lands,
    so it is not one."""
    gate = definition and (definition.debounce or definition.batch)
    if gate is None:
        return None
    if gate.key is None:
        return ""
    value: Any = encoded[0] if encoded else None
    for field in gate.key.split(".")[1:]:  # jsonb's #>: a field of an object, an index of an array
        if isinstance(value, dict):
            value = value.get(field)
        elif isinstance(value, list) and _INDEX.fullmatch(field) and -len(value) <= int(field) < len(value):
            value = value[int(field)]  # (a negative index counts from the end, as #> counts it)
        else:
            value = None
    if value is None:
        return None
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, separators=(",", ":"))


class _KeyPath:
    __slots__ = ("key",)

    def __init__(self, key: str | None):
        self.key = key


class DeclaredGate:
    """A workflow's debounce or batch as its workers declared it on the shards
    (``harvest.get_start_gate``), with the two fields of a WorkflowDefinition that
    :func:`place_start` reads (``debounce``, ``batch``, each with its ``key`` path)."""

    __slots__ = ("batch", "debounce")

    def __init__(self, kind: str, key_path: str | None):
        self.debounce = _KeyPath(key_path) if kind == "debounce" else None
        self.batch = _KeyPath(key_path) if kind == "batch" else None


# declaration_by_name's answer when the shards must be asked (read_declaration).
ASK: Any = object()

# How long a process keeps the shards' answer for a name (read_declaration) before a start of
# that name reads it again: a deploy that adds, changes or drops a workflow's debounce or batch
# reaches a long-running client (a server) within this, one read per name per period.
DECLARATION_TTL_SECS = 60.0


def declaration_by_name(target: Any, app: Any, workflow: Any) -> Any:
    """What a start of ``workflow`` by name places a debounce or a batch by, without a read
    (docs/sharding.md, "Placing a start"): on a sharded client, its definition in the App the
    client knows (``client.app``: a server's ``--app``), else what the shards answered before
    for that name in this process within DECLARATION_TTL_SECS (a :class:`DeclaredGate`, or
    None: no gate), else ``ASK``.
    A function or a definition carries its own (None here), and one database places nothing."""
    if not target.sharded or not isinstance(workflow, str):
        return None
    definition = app.workflows.get(workflow) if app is not None else None
    if definition is not None:
        return definition
    kept = target.pools.declared_gates.get(workflow)
    if kept is None or kept[1] <= time.monotonic():
        return ASK
    return kept[0]


def _remember(target: Any, name: str, row: dict[str, Any] | None) -> DeclaredGate | None:
    """The shards' answer for ``name``, kept by the process (the pools') for
    DECLARATION_TTL_SECS: one read per name per period."""
    gate = DeclaredGate(row["kind"], row["key_path"]) if row else None
    target.pools.declared_gates[name] = (gate, time.monotonic() + DECLARATION_TTL_SECS)
    return gate


def _unread(name: str) -> None:
    log.warning(
        "no shard answered for the debounce or batch of workflow %s: this start is placed by "
        "its workflow id (a burst started so may collapse per shard)",
        name,
    )


def read_declaration(target: Any, name: str) -> DeclaredGate | None:
    """The shards' declaration of ``name``'s debounce or batch, read from the first shard that
    answers (the default first) and remembered; None without one, or when no shard answered
    (not remembered: the next start asks again)."""
    for shard in boot_order(target.router, target.pools.shards):
        try:
            with api(target, shard) as sql:
                return _remember(target, name, sql.get_start_gate(name))
        except ShardUnavailable:
            continue
    _unread(name)
    return None


async def aread_declaration(target: Any, name: str) -> DeclaredGate | None:
    """:func:`read_declaration` for an AsyncClient, one read in flight per name: the starts of a
    burst that arrive while it runs share its answer (so the burst costs one read, and its starts
    reach the start batcher together, as a burst of a known name does)."""
    shared = target.pools.declared_reads.setdefault(name, SharedAttempt())
    return cast("DeclaredGate | None", await shared.run(lambda: _aread_declaration(target, name)))


async def _aread_declaration(target: Any, name: str) -> DeclaredGate | None:
    for shard in boot_order(target.router, target.pools.shards):
        try:
            return _remember(target, name, await target.sql(shard).get_start_gate(name))
        except ShardUnavailable:
            continue
    _unread(name)
    return None


def refuse_deferring_pin(name: str, kind: str | None) -> None:
    """A pin combined with a debounce or a batch: InvalidArgument (``kind`` None: neither)."""
    if kind:
        raise InvalidArgument(
            f"workflow {name} declares a {kind}: a deferred start has no execution to place, "
            "so it cannot take shard_id or residency_key; start it unpinned"
        )


def pin_was_deferred(name: str, placement: Placement, row: dict[str, Any]) -> bool:
    """Read a pinned start's answer inside its own transaction: True when the database deferred
    it (the caller then reads the pending starts and calls :func:`refuse_pending`); refused
    at once when it was merged into another start's batch. Raising rolls the start back."""
    if row["execution_id"] is None:
        return True
    if row["workflow_id"] != placement.workflow_id:
        refuse_deferring_pin(name, "batch")
    return False


def refuse_pending(name: str, row: dict[str, Any], pending: list[dict[str, Any]]) -> None:
    """A deferred pinned start keeps its pin only when a throttle deferred it (its release runs
    on the pinned shard); a debounce or a batch is refused."""
    kinds = {p["kind"] for p in pending if p["workflow_id"] == row["workflow_id"]}
    if kinds != {"throttle"}:
        refuse_deferring_pin(name, " or ".join(sorted(kinds - {"throttle"})) or "debounce or batch")


def hashed_shard(target: Any, name: str, workflow_id: str) -> int:
    """Where signal_with_start and update_with_start go: an unpinned start's shard (they carry
    no placement, as the guide says); a one-database client's one database."""
    return target.router.pick_for_new_workflow(name, workflow_id) if target.sharded else ONE


def check_pools(pools: Any, *, asynchronous: bool) -> None:
    """``Client(shards=)`` takes a ShardPools, ``AsyncClient.connect(shards=)`` an AsyncShardPools."""
    from harvest.shard.pools import AsyncShardPools, ShardPools

    wanted = AsyncShardPools if asynchronous else ShardPools
    if not isinstance(pools, wanted):
        who = "AsyncClient.connect" if asynchronous else "Client"
        article = "an" if asynchronous else "a"
        raise InvalidArgument(
            f"{who}(shards=...) takes {article} {wanted.__name__}, got {type(pools).__name__}"
        )


def boot_order(router: ShardRouter, shards: Any) -> list[int]:
    """The shards with a pool, the default first: where a client makes its first connections."""
    return sorted(shards, key=lambda s: (s != router.default, s))


def route_id(router: ShardRouter, execution_id: Any) -> int:
    try:
        return router.route(execution_id)
    except ValueError:
        raise InvalidArgument(f"{execution_id!r} is not an execution id (a UUID)") from None


def resident(row: dict[str, Any], sharded: bool) -> dict[str, Any]:
    """A row read by id (``get_execution``, ``get_residence``), checked on a sharded client: a
    seal (MIGRATED, or a staged copy over one) raises ExecutionMigrated naming the shard it
    points at, which ``follow`` then asks. A one-database client reads the seal as it is."""
    pointer = row.get("migrated_to_shard")
    if sharded and row.get("status") in ("MIGRATED", "MIGRATING") and pointer is not None:
        execution_id = str(row.get("id") or row.get("execution_id"))
        raise ExecutionMigrated(
            f"workflow {execution_id} moved to shard {pointer}", "migrated", execution_id, pointer
        )
    return row


# -- the targets ------------------------------------------------------------------------------
class _One:
    """One database: every shard is it."""

    sharded = False
    client_kind = "Client"  # (what a closed pool's refusal names: AsyncOneDatabase's is AsyncClient)

    def __init__(self, dsn: str, pool: Any):
        self.dsn, self.pool = dsn, pool
        self.router = ShardRouter.single(ONE)

    def route(self, execution_id: Any) -> int:
        return ONE

    def follow(self, execution_id: Any, attempt: Any) -> Any:
        """``attempt(shard)`` on the one database (an awaitable for an async target)."""
        return attempt(ONE)

    def dsn_of(self, shard: int) -> str:
        return self.dsn

    def _open(self) -> Any:
        """The pool, refused once the client closed it: every call said so with the pool's own
        error (psycopg_pool.PoolClosed), only a wait said the client was closed."""
        if getattr(self.pool, "closed", False):  # (a RoledPool, the management API's: the caller's)
            raise InvalidArgument(f"this {self.client_kind} is closed: make a new one")
        return self.pool


class _Shards:
    """A pool per shard (the caller's pools, which the caller closes)."""

    sharded = True

    def __init__(self, pools: Any):
        self.pools, self.router = pools, pools.router

    def route(self, execution_id: Any) -> int:
        return route_id(self.router, execution_id)

    def follow(self, execution_id: Any, attempt: Any) -> Any:
        """``attempt(shard)`` where the execution lives: its id's shard first, then each
        forwarding pointer an ExecutionMigrated names (``ShardPools.follow``; an awaitable for
        an async target)."""
        route_id(self.router, execution_id)  # InvalidArgument for what is not an id
        return self.pools.follow(str(execution_id), attempt)

    def connection(self, shard: int) -> Any:
        return self.pools.connection(shard)

    def dsn_of(self, shard: int) -> str:
        return cast("str", self.pools.dsn(shard))

    def providers(self) -> Mapping[int, Any]:
        """Every readable shard: one with no pool is named unavailable by the fan-out."""
        return {s: functools.partial(self.pools.api, s) for s in self.router.readable}


class OneDatabase(_One):
    """``Client(dsn)``: one database and its pool."""

    pool: ConnectionPool

    @contextlib.contextmanager
    def connection(self, shard: int) -> Iterator[Any]:
        with self._open().connection() as conn:
            yield conn

    def providers(self) -> Mapping[int, Any]:
        return {ONE: functools.partial(api, self, ONE)}

    def close(self) -> None:
        self.pool.close()


class Sharded(_Shards):
    """``Client(shards=ShardPools)``."""

    def close(self) -> None:
        """The pools are the caller's: nothing to close here."""


@contextlib.contextmanager
def api(target: Any, shard: int) -> Iterator[SqlApi]:
    """The SQL API on one connection of ``shard`` of a synchronous target (each call its own
    transaction)."""
    with target.connection(shard) as conn:
        yield SqlApi(conn)


class AsyncOneDatabase(_One):
    """``AsyncClient.connect(dsn)``: one database and its pool."""

    pool: AsyncConnectionPool
    client_kind = "AsyncClient"

    def __init__(self, dsn: str, pool: AsyncConnectionPool):
        super().__init__(dsn, pool)
        self._sql = AsyncSqlApi(self)  # (connection(): the pool's, refused once it is closed)
        roled: Any = pool
        if hasattr(roled, "one_call"):  # a face's RoledPool: a call and its role in one round trip
            self.one_call, self.refused = roled.one_call, roled.refused

    def sql(self, shard: int) -> AsyncSqlApi:
        return self._sql

    @contextlib.asynccontextmanager
    async def connection(self, shard: int = ONE) -> AsyncIterator[Any]:
        async with self._open().connection() as conn:
            yield conn

    def providers(self) -> Mapping[int, Any]:
        return {ONE: self._sql}

    async def close(self) -> None:
        await self.pool.close()


class AsyncSharded(_Shards):
    """``AsyncClient.connect(shards=AsyncShardPools)``."""

    def __init__(self, pools: Any):
        super().__init__(pools)
        self._sql: dict[int, AsyncSqlApi] = {}

    def sql(self, shard: int) -> AsyncSqlApi:
        """The SQL API on ``shard``'s pool: each call takes a connection and is one transaction
        (a face's role view, AsyncShardPools.with_role: in the call's own round trip)."""
        sql = self._sql.get(shard)
        if sql is None:
            sql = self._sql[shard] = AsyncSqlApi(self.pools.lender(shard))
        return sql

    async def close(self) -> None:
        """The pools are the caller's."""
