"""Drive one move for the chaos tests and stop dead after a phase, for a SIGKILL:
``python rebalance_driver.py EXECUTION_ID PHASE MARKER`` with REBALANCE_DSNS (a JSON object
shard -> DSN) in the environment. After the durable step PHASE (copied, verified, cut_over)
it writes MARKER and sleeps until killed."""

from __future__ import annotations

import json
import os
import sys
import time

from harvest.shard import ShardPools, ShardRouter
from harvest.shard.rebalance import Rebalancer


def main() -> None:
    execution_id, pause_after, marker = sys.argv[1:4]
    dsns = {int(k): v for k, v in json.loads(os.environ["REBALANCE_DSNS"]).items()}
    shards = sorted(dsns)

    def on_phase(phase: str, record: dict) -> None:
        if phase == pause_after:
            with open(marker, "w") as fh:
                fh.write(phase)
            time.sleep(3600)

    with ShardPools(ShardRouter(shards, shards, shards[0]), dsns, max_size=2) as pools:
        Rebalancer(pools, 0, 1, operator_id="chaos", on_phase=on_phase).move(execution_id)


if __name__ == "__main__":
    main()
