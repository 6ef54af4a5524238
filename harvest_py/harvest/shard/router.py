"""Where a workflow lives: the shard router (pure: no database, no psycopg).

A new workflow's shard is chosen by rendezvous hashing over (workflow name, workflow id)
across the writable, unreserved shards; an explicit placement pins it by shard number or by
an operator-declared residency key (never a hash); every later call routes by the shard its
execution id carries. docs/sharding.md is the user's page.

Every refusal of a configuration is a one-line :class:`ConfigError` naming its key
(``shards.readable``, ``shards.residency.eu``, ...), raised when the router is built, so a
bad map fails the boot rather than the first request. A refused placement is a terse
:class:`InvalidArgument` that names what the caller asked for and never the deployment's
shard set, drain state or declared keys; the full detail goes to the ``harvest.shard`` log.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from collections.abc import Callable, Iterable, Mapping
from types import MappingProxyType
from typing import Any

from harvest.core.errors import ConfigError, ExecutionMigrated, InvalidArgument
from harvest.core.ids import MAX_SHARD, is_shard_number, shard_number, shard_of

log = logging.getLogger("harvest.shard")

__all__ = ["MAX_FORWARD_HOPS", "ShardRouter", "rendezvous"]

# How many forwarding pointers a route follows before it fails closed (a typed, retryable
# ExecutionMigrated) rather than loop: a completed move repoints the origin straight at the
# run's newest shard, so a healthy chain is one hop (docs/sharding.md, "Rebalancing").
MAX_FORWARD_HOPS = 4


def _score(key: bytes, shard: int) -> int:
    digest = hashlib.blake2b(key, digest_size=8, person=b"harvest-shard", salt=shard.to_bytes(4, "big"))
    return int.from_bytes(digest.digest(), "big")


def rendezvous(key: str, shards: Iterable[int]) -> int:
    """The shard of ``shards`` that ``key`` hashes to (highest random weight).

    Stable across processes and versions of Python (hashlib, never ``hash()``); adding a
    shard moves about 1/N of the keys, all of them to the new shard, and removing one moves
    only the keys it held. An empty set raises ``ValueError``."""
    data = key.encode()
    best: tuple[int, int] | None = None
    for shard in shards:
        # Ties (one in 2**64) go to the lower shard number, whatever the iteration order.
        candidate = (_score(data, shard), -shard)
        if best is None or candidate > best:
            best = candidate
    if best is None:
        raise ValueError("rendezvous over no shards")
    return -best[1]


def too_many_hops(execution_id: Any, passed: Iterable[int]) -> ExecutionMigrated:
    """The fail-closed answer of a route that met more than MAX_FORWARD_HOPS pointers."""
    return ExecutionMigrated(
        f"execution {execution_id}: more than {MAX_FORWARD_HOPS} forwarding hops "
        f"(through shards {', '.join(map(str, passed))}); retry, or run harvest shard rebalance-resume",
        "too_many_hops",
        str(execution_id),
    )


def _workflow_key(workflow_name: str, workflow_id: str) -> str:
    # Length-prefixed, so ("a:b", "c") and ("a", "b:c") never share a key.
    return f"{len(workflow_name)}:{workflow_name}:{workflow_id}"


def _shard_set(values: Iterable[Any] | None, key: str) -> tuple[int, ...]:
    if values is None:
        return ()
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        raise ConfigError(f"{key}: expected a list of shard numbers, got {values!r}")
    return tuple(sorted({shard_number(v, key, ConfigError) for v in values}))


class ShardRouter:
    """The shards a process knows and where new work goes.

    ``readable``: shards whose ids this process may route to; ``writable``: shards that take
    new workflows (a subset of readable: a readable-only shard is being added or drained);
    ``default``: the shared shard (schedules, unencoded ids land on it); ``reserved``: tenant
    cells, reached only by an explicit pin; ``residency_map``: residency key -> shard."""

    __slots__ = ("_placeable", "default", "forwards", "readable", "reserved", "residency_map", "writable")

    def __init__(
        self,
        readable: Iterable[int],
        writable: Iterable[int],
        default: int,
        *,
        residency_map: Mapping[str, int] | None = None,
        reserved: Iterable[int] = (),
        forwards: Mapping[int, int] | None = None,
    ):
        self.readable: tuple[int, ...] = _shard_set(readable, "shards.readable")
        self.writable: tuple[int, ...] = _shard_set(writable, "shards.writable")
        self.default: int = shard_number(default, "shards.default", ConfigError)
        self.reserved: frozenset[int] = frozenset(_shard_set(reserved, "shards.reserved"))
        if not self.readable:
            raise ConfigError("shards.readable is empty: list at least the default shard")
        if not self.writable:
            # A full drain (``shards.writable = []``): every start is refused, a DISTRIBUTED
            # child stays on its parent's shard (harvest.shard.children.place_child).
            log.warning(
                "shards.writable is empty: the fleet is fully drained, every new top-level workflow is "
                "refused until a shard is made writable again (readable: %s)",
                list(self.readable),
            )
        for shard in self.writable:
            if shard not in self.readable:
                raise ConfigError(
                    f"shards.writable names shard {shard}, which is not in shards.readable: "
                    "a writable shard must be readable"
                )
        if self.default not in self.readable:
            raise ConfigError(f"shards.default = {self.default} is not in shards.readable: add it there")
        for shard in sorted(self.reserved):
            if shard not in self.readable:
                raise ConfigError(f"shards.reserved names shard {shard}, which is not in shards.readable")
        if self.default in self.reserved:
            raise ConfigError(
                f"shards.reserved names the default shard {self.default}: the default stays shared "
                "(schedules and unencoded ids land on it); reserve another shard"
            )
        self._placeable = tuple(s for s in self.writable if s not in self.reserved)
        if self.writable and not self._placeable:
            raise ConfigError(
                "shards.reserved leaves no unreserved writable shard: keep at least one writable shard "
                "unreserved for unpinned starts"
            )
        residency: dict[str, int] = {}
        for name, shard in dict(residency_map or {}).items():
            if not isinstance(name, str) or not name.strip():
                raise ConfigError(f"shards.residency has a blank key {name!r}: name each residency key")
            key = f"shards.residency.{name}"
            shard = shard_number(shard, key, ConfigError)
            if shard not in self.readable:
                raise ConfigError(f"{key} = {shard} names a shard that is not in shards.readable")
            if shard not in self.writable and self.writable:
                # A legitimate mid-drain state: starts under the key are refused until it is writable
                # (a full drain has warned once, above).
                log.warning(
                    "%s = %d names a readable shard that is not writable: starts under residency key %r "
                    "are refused until shard %d is writable again",
                    key,
                    shard,
                    name,
                    shard,
                )
            residency[name] = shard
        self.residency_map: Mapping[str, int] = MappingProxyType(dict(sorted(residency.items())))
        self.forwards: Mapping[int, int] = MappingProxyType(self._check_forwards(forwards or {}))

    def _check_forwards(self, forwards: Mapping[Any, Any]) -> dict[int, int]:
        """``shards.forwards``: a decommissioned shard's ids route to the shard its residents
        moved to (docs/runbooks/shard-decommission.md). Refused: a forwarded shard that is
        still writable, a target outside readable, a chain longer than MAX_FORWARD_HOPS or a loop."""
        out: dict[int, int] = {}
        for key, value in dict(forwards).items():
            try:
                source = int(key)
            except (TypeError, ValueError):
                raise ConfigError(f"shards.forwards: {key!r} is not a shard number") from None
            source = shard_number(source, "shards.forwards", ConfigError)
            target = shard_number(value, f"shards.forwards.{source}", ConfigError)
            if source in self.writable:
                raise ConfigError(
                    f"shards.forwards.{source}: shard {source} is writable; forward only a shard that takes "
                    "no new workflows (remove it from shards.writable first)"
                )
            out[source] = target
        for source in out:
            shard, hops = source, 0
            while shard in out:
                shard, hops = out[shard], hops + 1
                if hops > MAX_FORWARD_HOPS:
                    raise ConfigError(
                        f"shards.forwards.{source}: the chain is longer than {MAX_FORWARD_HOPS} hops or loops"
                    )
            if shard not in self.readable:
                raise ConfigError(
                    f"shards.forwards.{source} ends at shard {shard}, which is not in shards.readable"
                )
        return dict(sorted(out.items()))

    @classmethod
    def single(cls, shard: int = 0) -> ShardRouter:
        """One database: ``shard`` is readable, writable and the default (today's deployment)."""
        return cls([shard], [shard], shard)

    @classmethod
    def from_config(cls, config: Any) -> ShardRouter:
        """The router a ``harvest.config.Config`` declares (``[shards]``, ``HARVEST_SHARDS__*``);
        :meth:`single` (shard 0) when nothing under ``shards`` is set.

        Defaults: ``readable`` every shard with a url (shard 0's is ``database_url``),
        ``writable`` the readable ones (an explicit ``writable = []`` in the file is a full
        drain), ``default`` 0, ``reserved`` none."""
        urls = config.get("shards.urls") or {}
        residency = config.get("shards.residency") or {}
        explicit = [
            config.get(f"shards.{k}") for k in ("default", "readable", "writable", "reserved", "forwards")
        ]
        if all(v is None for v in explicit) and not urls and not residency:
            return cls.single(0)
        default = config.get("shards.default", 0)
        readable = config.get("shards.readable") or sorted({0, *(int(k) for k in urls)})
        writable = config.get("shards.writable")
        if writable is None:  # unset; an explicit empty list is a full drain
            writable = readable
        return cls(
            readable,
            writable,
            default,
            residency_map=residency,
            reserved=config.get("shards.reserved") or (),
            forwards=config.get("shards.forwards") or {},
        )

    # -- placement --------------------------------------------------------------------------------
    def pick_for_new_workflow(self, workflow_name: str, workflow_id: str) -> int:
        """The shard an unpinned start of (name, id) goes to: rendezvous over the writable,
        unreserved shards. The same answer in every process with the same configuration.
        During a full drain (no writable shard): InvalidArgument."""
        if not self.writable:
            self._refuse_full_drain(f"workflow {workflow_name!r}")
        return rendezvous(_workflow_key(workflow_name, workflow_id), self._placeable)

    def pick_for_gate(self, workflow_name: str, gate_key: str) -> int:
        """The shard every start of a debounce's or a batch's burst goes to: rendezvous over
        (name, the gate's key), as :meth:`pick_for_new_workflow` over (name, id), since the
        burst collapses only where its starts meet (the pending row is per shard).
        During a full drain: InvalidArgument."""
        if not self.writable:
            self._refuse_full_drain(f"workflow {workflow_name!r}")
        return rendezvous("gate:" + _workflow_key(workflow_name, gate_key), self._placeable)

    def place(
        self,
        workflow_name: str,
        workflow_id: str | None,
        *,
        shard_id: int | None = None,
        residency_key: str | None = None,
    ) -> int:
        """The shard a start goes to: pinned by ``shard_id`` or ``residency_key`` (at most one),
        else hashed (which needs the ``workflow_id``).

        Refused with :class:`InvalidArgument`: both pins; a residency key not in the map (never
        hashed instead); a shard, or a key's shard, that is not writable; a shard this router
        does not know; any start while no shard is writable (a full drain), after the checks
        of the pin itself. Whether the shard has a pool is the pools' question
        (``ShardUnavailable``)."""
        if shard_id is not None and residency_key is not None:
            raise InvalidArgument("shard_id and residency_key are mutually exclusive: pass one")
        if residency_key is not None:
            if not isinstance(residency_key, str):
                raise InvalidArgument(
                    "residency_key must be a non-empty string, got "
                    f"{type(residency_key).__name__} {residency_key!r}"
                )
            if not residency_key.strip():
                raise InvalidArgument("residency_key is blank: pass a declared residency key")
            shard = self.residency_map.get(residency_key)
            if shard is None:
                log.warning(
                    "refused residency_key %r: not in the residency map (declared keys: %s)",
                    residency_key,
                    ", ".join(self.residency_map) or "none",
                )
                raise InvalidArgument(f"unknown residency_key {residency_key!r}")
            if not self.writable:
                self._refuse_full_drain(f"residency_key {residency_key!r}")
            if shard not in self.writable:
                log.warning(
                    "refused residency_key %r: it maps to shard %d, which is readable but not writable "
                    "(writable: %s)",
                    residency_key,
                    shard,
                    list(self.writable),
                )
                raise InvalidArgument(
                    f"residency_key {residency_key!r} maps to a shard that is not accepting new workflows"
                )
            return shard
        if shard_id is not None:
            if not is_shard_number(shard_id):
                raise InvalidArgument(f"shard_id {shard_id!r} is not a shard number 0..{MAX_SHARD}")
            if shard_id not in self.readable:
                log.warning(
                    "refused shard_id %d: not a shard of this router (readable: %s)",
                    shard_id,
                    list(self.readable),
                )
                raise InvalidArgument(f"shard_id {shard_id} is not a shard of this deployment")
            if not self.writable:
                self._refuse_full_drain(f"shard_id {shard_id}")
            if shard_id not in self.writable:
                log.warning(
                    "refused shard_id %d: readable but not writable (writable: %s)",
                    shard_id,
                    list(self.writable),
                )
                raise InvalidArgument(f"shard_id {shard_id} is not accepting new workflows")
            return shard_id
        if not self.writable:
            self._refuse_full_drain(f"workflow {workflow_name!r}")
        if workflow_id is None:
            raise InvalidArgument("an unpinned start needs a workflow_id to hash: pass one or mint one first")
        return self.pick_for_new_workflow(workflow_name, workflow_id)

    def _refuse_full_drain(self, asked: str) -> None:
        # Terse on purpose, like every placement refusal: a start caller may be less trusted
        # than the operator, so the drain itself is named only in the log.
        log.warning("refused a start (%s): shards.writable is empty, the fleet is fully drained", asked)
        raise InvalidArgument("no shard is accepting new workflows right now: retry later")

    def schedule_home(self, name: str) -> int:
        """The shard a declared schedule lives and fires on: rendezvous of its name over the
        readable, unreserved shards (a drain does not move it; adding a shard moves about 1/N
        of the schedules, docs/schedules.md "Shards")."""
        shards = [s for s in self.readable if s not in self.reserved] or list(self.readable)
        return rendezvous(f"schedule:{name}", shards)

    def mint_workflow_id(self, workflow_name: str, shard: int, *, max_tries: int = 4096) -> str:
        """A fresh workflow id (a uuid4 string) that :meth:`pick_for_new_workflow` sends to
        ``shard``, so a later unpinned start of the same id finds the pinned run. A shard no
        unpinned start can reach (reserved, not writable) has no such id: a plain uuid4."""
        if shard not in self._placeable:
            return str(uuid.uuid4())
        for _ in range(max_tries):
            candidate = str(uuid.uuid4())
            if self.pick_for_new_workflow(workflow_name, candidate) == shard:
                return candidate
        return str(uuid.uuid4())  # 1/N per try: unreachable in practice for any sane N

    # -- routing ----------------------------------------------------------------------------------
    def route(self, execution_id: str | uuid.UUID) -> int:
        """The shard to ask first about an execution: the one its id carries (the shard it
        originated on), through ``shards.forwards`` when that shard was decommissioned. A
        row found there may still be a MIGRATED seal: :meth:`resolve` follows it."""
        shard = shard_of(execution_id)
        for _ in range(MAX_FORWARD_HOPS):
            if shard not in self.forwards:
                break
            shard = self.forwards[shard]
        return shard

    def resolve(
        self, execution_id: str | uuid.UUID, pointer_at: Callable[[int], int | None]
    ) -> tuple[int, tuple[int, ...]]:
        """Where an execution lives now, and the shards passed on the way: start at
        :meth:`route`, then ask ``pointer_at(shard)`` (the database's forwarding pointer for
        this id, None when the row there is the live one or absent) and follow it, at most
        MAX_FORWARD_HOPS times; beyond that, fail closed with a retryable ExecutionMigrated.
        Pure: the caller's ``pointer_at`` does the reading."""
        shard = self.route(execution_id)
        passed: list[int] = []
        for _ in range(MAX_FORWARD_HOPS + 1):
            pointer = pointer_at(shard)
            if pointer is None:
                return shard, tuple(passed)
            passed.append(shard)
            shard = pointer
        raise too_many_hops(execution_id, passed)

    def topology(self) -> dict[str, Any]:
        """The placement-affecting state, sorted, so ``json.dumps`` of it is byte-stable and a
        plain diff across replicas is meaningful (the guide's ``shard_topology``)."""
        return {
            "default_shard": self.default,
            "readable_shards": list(self.readable),
            "reserved_shards": sorted(self.reserved),
            "residency_map": dict(sorted(self.residency_map.items())),
            "shard_forwards": {str(k): v for k, v in sorted(self.forwards.items())},
            "writable_shards": list(self.writable),
        }

    def __repr__(self) -> str:
        return (
            f"ShardRouter(readable={list(self.readable)}, writable={list(self.writable)}, "
            f"default={self.default}, reserved={sorted(self.reserved)}, "
            f"residency_map={dict(self.residency_map)}, forwards={dict(self.forwards)})"
        )

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ShardRouter) and self.topology() == other.topology()

    def __hash__(self) -> int:
        return hash(repr(self))
