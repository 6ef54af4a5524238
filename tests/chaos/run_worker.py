"""Run one Harvest worker for the chaos tests: ``python tests/chaos/run_worker.py [options]``.

The DSN comes from ``HARVEST_DATABASE_URL``. Logs go to stderr, which the tests
capture to a file per process. ``--redis-url`` turns on Redis dispatch, with the test hooks
of redis_hooks.py.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from apps import app

import harvest


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--workflow-lease", type=float, default=2.0)
    parser.add_argument("--shutdown-grace", type=float, default=2.0)
    parser.add_argument("--worker-id", default=None)
    parser.add_argument("--redis-url", default=None)
    parser.add_argument("--no-hand-off", action="store_true")
    args = parser.parse_args()
    logging.basicConfig(
        level=logging.INFO,
        stream=sys.stderr,
        format=f"%(asctime)s pid={os.getpid()} %(levelname)s %(name)s: %(message)s",
    )
    worker = harvest.Worker(
        app,
        os.environ["HARVEST_DATABASE_URL"],
        concurrency=args.concurrency,
        workflow_lease=args.workflow_lease,
        scan_interval=0.2,
        poll_interval=0.5,
        heartbeat_interval=1.0,
        shutdown_grace=args.shutdown_grace,
        worker_id=args.worker_id,
        redis_url=args.redis_url,
        hand_off=not args.no_hand_off,
    )
    if worker.redis is not None:
        import redis_hooks

        redis_hooks.install()

    async def run() -> None:
        if worker.redis is not None:
            report = asyncio.create_task(redis_hooks.report(worker.redis))
        try:
            await worker.run(install_signal_handlers=True)
        finally:
            if worker.redis is not None:
                report.cancel()

    asyncio.run(run())
    logging.getLogger("chaos").info("worker %s exited cleanly", worker.worker_id)


if __name__ == "__main__":
    main()
