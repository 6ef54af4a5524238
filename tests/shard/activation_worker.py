"""A real sharded worker process for the activation chaos test (test_rebalance_chaos.py): a
Worker polling shards 0 and 1 with a relay pump over every shard, so its scanner of shard 0
runs the rebalance-resume step that activates a stalled move on shard 1. Runs until killed:
``python activation_worker.py`` with SHARD_DSNS (a JSON object shard -> DSN) in the
environment."""

from __future__ import annotations

import asyncio
import json
import os

from harvest import App, Worker
from harvest.shard import AsyncShardPools, ShardRouter
from harvest.shard.relay_pump import RelayPump


async def main() -> None:
    dsns = {int(k): v for k, v in json.loads(os.environ["SHARD_DSNS"]).items()}
    shards = sorted(dsns)
    router = ShardRouter(shards, shards, shards[0])
    async with AsyncShardPools(router, dsns, max_size=2) as pools:
        worker = Worker(
            App(),
            shards={s: dsns[s] for s in (0, 1)},
            router=router,
            relay_pump=RelayPump(pools),
            shard_assignments=[0, 1],
            poll_interval=0.2,
            scan_interval=0.2,
        )
        await worker.run()


if __name__ == "__main__":
    asyncio.run(main())
