"""The cross-shard relay pump: effects one shard owes another, carried between databases.

Nothing crosses a shard boundary inside a transaction. A decision that signals or cancels a
run on another shard (or by business key, which may live anywhere) writes a ``remote`` row in
``harvest.relays`` on its own shard; this pump, called once per scanner tick, carries it:

1. **claim** on the source shard S (``claim_remote_relays``: leased rows, so a pump that dies
   loses nothing);
2. **deliver** on the target: for an execution id, the shard the run lives on now (its id's
   shard first, then the forwarding pointer of a run a rebalance moved: a seal refuses the
   delivery with HR013 naming the shard, ``AsyncShardPools.follow``); **every** readable shard for
   a business key (``deliver_external_relay``), merged as docs/internals.md "Relays across
   shards" says: a live run found anywhere wins; a terminal answer needs every expected shard
   to have answered. A shard this process has no pool for, or cannot reach, leaves the answer
   indeterminate: "could not inspect" is never "not there";
3. **report** on S: ``complete_relay`` with the final outcome, or ``release_relay`` with the
   error, which makes the row claimable again after ``min(attempts, 6) x 5 s``.

Delivery is idempotent on (source shard, relay id): the target keeps a receipt of every
outcome with an effect, so a retry after a lost answer changes nothing twice, and reporting
twice is harmless. No connection is held on one shard while another is being called, so two
pumps (or a pump and a scanner) can never wait on each other's pools.

The same tick drives the cross-shard children of the swept shards
(:func:`harvest.shard.children.drive_children`).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, cast

from harvest.core.errors import ExecutionMigrated, HarvestError, ShardUnavailable
from harvest.db.connection import failure_reason
from harvest.shard.pools import AsyncShardPools

__all__ = ["PumpReport", "RelayPump", "merge_outcomes"]

log = logging.getLogger("harvest.shard.relay_pump")

# Outcomes in the order a business-key merge prefers them once every shard answered.
_LIVE = ("delivered", "already_requested")
_FINAL = ("delivered", "already_requested", "not_found", "not_running", "ambiguous", "wrong_shard")


@dataclass
class PumpReport:
    """What one tick did: rows claimed, settled (``complete_relay``), released for a retry, and
    the shards it could not inspect (with why); children work is counted by the children driver."""

    claimed: int = 0
    settled: int = 0
    released: int = 0
    unavailable: dict[int, str] = field(default_factory=dict)
    children: dict[str, int] = field(default_factory=dict)
    # By-id deliveries left pending because the target's shard could not be inspected:
    # (shard, why: ``no_pool`` in this process or ``unreachable``) -> how many this tick
    # (harvest_external_signal_by_id_indeterminate_shard_total).
    # Counted for a delivery by execution id whose shard could not be inspected, and for a
    # business-key fan-out left pending per shard it could not inspect.
    by_id_indeterminate: dict[tuple[int, str], int] = field(default_factory=dict)
    # Business-key deliveries to a live run found while some shard could not be inspected
    # (harvest_external_signal_by_id_found_over_incomplete_fanout_total).
    found_over_incomplete_fanout: int = 0

    @property
    def moved(self) -> bool:
        return bool(self.settled or any(self.children.values()))


def merge_outcomes(answers: dict[int, dict[str, Any]], expected: Iterable[int]) -> dict[str, Any] | None:
    """Merge one relay's per-shard answers (shard -> ``{outcome, execution_id, message}``) into its
    final outcome, or None when it is indeterminate.

    A live run found anywhere wins (``delivered`` before ``already_requested``), even when some
    shard could not be asked. Otherwise a terminal answer needs every expected shard's answer:
    ``not_running`` if any shard holds an ended run of the key (with its execution id), else
    ``ambiguous`` if any shard said so, else ``not_found``."""
    for outcome in _LIVE:
        for shard in sorted(answers):
            if answers[shard]["outcome"] == outcome:
                return answers[shard]
    if any(shard not in answers for shard in expected):
        return None
    for outcome in ("not_running", "ambiguous", "wrong_shard"):
        for shard in sorted(answers):
            if answers[shard]["outcome"] == outcome:
                return answers[shard]
    found = [answers[s] for s in sorted(answers)]
    if found:
        return {**found[0], "outcome": "not_found"}
    return None


class RelayPump:
    """Carries remote relays (and drives cross-shard children) for the shards in ``sources``.

    ``pools`` needs a pool for every shard a relay may target; ``pools.router.readable`` is the
    set of shards a business key is looked for on. Call :meth:`tick` once per scanner tick."""

    def __init__(
        self,
        pools: AsyncShardPools,
        *,
        sources: Iterable[int] | None = None,
        limit: int = 100,
        lease_secs: float = 30.0,
        children: bool = True,
        child_poll_secs: float = 1.0,
    ):
        self.pools = pools
        self.sources = tuple(sorted(set(sources if sources is not None else pools.shards)))
        self.limit = limit
        self.lease_secs = lease_secs
        self.children = children
        self.child_poll_secs = child_poll_secs

    @property
    def expected_shards(self) -> tuple[int, ...]:
        """Where a business key is looked for: every readable shard (and every pooled one)."""
        return tuple(sorted(set(self.pools.router.readable) | set(self.pools.shards)))

    async def tick(self, sources: Iterable[int] | None = None) -> PumpReport:
        """One sweep over ``sources`` (default: every source shard; a worker's scanner of one
        shard passes that shard); never raises for a shard that is down."""
        report = PumpReport()
        for source in self.sources if sources is None else sources:
            if source in report.unavailable:
                continue
            try:
                await self._sweep_relays(source, report)
            except ShardUnavailable as exc:
                report.unavailable.setdefault(exc.shard, exc.reason)
            if self.children:
                from harvest.shard.children import drive_children

                try:
                    await drive_children(
                        self.pools, source, report, limit=self.limit, poll_secs=self.child_poll_secs
                    )
                except ShardUnavailable as exc:
                    report.unavailable.setdefault(exc.shard, exc.reason)
        for shard, reason in sorted(report.unavailable.items()):
            log.warning("cross-shard pump: shard %s not inspected (%s); its relays wait", shard, reason)
        return report

    # -- external signal and cancel ------------------------------------------------------------
    async def _sweep_relays(self, source: int, report: PumpReport) -> None:
        async with self.pools.api(source) as sql:
            claimed = await sql.claim_remote_relays(self.limit, self.lease_secs)
        report.claimed += len(claimed)
        for relay in claimed:
            final, why = await self._deliver(relay, report)
            try:
                async with self.pools.api(source) as sql:
                    if final is not None:
                        await sql.complete_relay(
                            relay["relay_id"],
                            final["outcome"],
                            final.get("execution_id"),
                            final.get("message"),
                        )
                        report.settled += 1
                    else:
                        log.info("cross-shard relay %s:%s not settled: %s", source, relay["relay_id"], why)
                        await sql.release_relay(relay["relay_id"], why)
                        report.released += 1
            except ShardUnavailable:
                raise
            except HarvestError as exc:  # one row's report refused: its lease runs out, it is tried again
                log.warning("cross-shard relay %s:%s: reporting failed: %s", source, relay["relay_id"], exc)

    async def _deliver_at(self, shard: int, relay: dict[str, Any], report: PumpReport) -> dict[str, Any]:
        if shard in report.unavailable:
            raise ShardUnavailable(shard, report.unavailable[shard])
        async with self.pools.api(shard) as sql:
            return cast(
                "dict[str, Any]",
                await sql.deliver_external_relay(
                    relay["source_shard"],
                    relay["relay_id"],
                    relay["kind"],
                    relay["target_execution_id"],
                    relay["target_workflow_name"],
                    relay["target_workflow_id"],
                    relay["payload"],
                    relay["source_execution_id"],
                ),
            )

    async def _deliver(self, relay: dict[str, Any], report: PumpReport) -> tuple[dict[str, Any] | None, str]:
        """The relay's final outcome, or (None, why) when it is indeterminate."""
        if relay["target_execution_id"] is not None:
            return await self._deliver_by_id(relay, report)
        expected = self.expected_shards
        answers: dict[int, dict[str, Any]] = {}
        missing: dict[int, str] = {}
        uninspected: list[int] = []  # the shards that could not be asked (no pool, unreachable)
        for shard in expected:
            if shard in report.unavailable:
                missing[shard] = report.unavailable[shard]
                uninspected.append(shard)
                continue
            try:
                answers[shard] = await self._deliver_at(shard, relay, report)
            except ShardUnavailable as exc:
                report.unavailable.setdefault(shard, exc.reason)
                missing[shard] = exc.reason
                uninspected.append(shard)
            except Exception as exc:  # refused there (a payload over its limit, ...): retried later
                missing[shard] = failure_reason(exc)
        final = merge_outcomes(answers, expected)
        if final is None:
            for shard in uninspected:
                self._indeterminate(report, shard)
        elif final["outcome"] in _LIVE and uninspected:
            report.found_over_incomplete_fanout += 1
        if final is not None and final["outcome"] not in _FINAL:
            return None, f"shard answered {final['outcome']!r}"
        why = "; ".join(f"shard {s}: {reason}" for s, reason in sorted(missing.items()))
        return final, why or "no shard answered"

    def _indeterminate(self, report: PumpReport, shard: int) -> None:
        """Count a delivery left pending because ``shard`` could not be inspected, and why."""
        key = (shard, "no_pool" if shard not in self.pools.shards else "unreachable")
        report.by_id_indeterminate[key] = report.by_id_indeterminate.get(key, 0) + 1

    async def _deliver_by_id(
        self, relay: dict[str, Any], report: PumpReport
    ) -> tuple[dict[str, Any] | None, str]:
        """Deliver where the target lives now: its id's shard first, then each forwarding
        pointer a seal names (a run a rebalance moved; the row's ``target_shard`` is only where
        the source last saw it). A staged copy not active yet is not waited for: the row is
        retried on a later tick."""
        target = str(relay["target_execution_id"])
        aimed = {**relay}

        async def attempt(shard: int) -> dict[str, Any]:
            try:
                return await self._deliver_at(shard, aimed, report)
            except ExecutionMigrated as exc:
                # The seal of another run than the one asked: the target's continue-as-new chain
                # walked to a successor a rebalance moved. It is asked for by its own id where it
                # lives (the shard the seal names holds none of its predecessors: asked for the
                # target's id, it answered wrong_shard, final).
                if exc.execution_id is not None and str(exc.execution_id) != str(
                    aimed["target_execution_id"]
                ):
                    aimed["target_execution_id"] = str(exc.execution_id)
                raise

        try:
            answer = await self.pools.follow(target, attempt, wait_secs=0.0)
        except ShardUnavailable as exc:
            report.unavailable.setdefault(exc.shard, exc.reason)
            self._indeterminate(report, exc.shard)
            return None, f"shard {exc.shard}: {exc.reason}"
        except Exception as exc:  # refused there (a payload over its limit, a move not active yet): retried
            return None, failure_reason(exc)
        if answer["outcome"] not in _FINAL:
            return None, f"shard answered {answer['outcome']!r}"
        return answer, ""
