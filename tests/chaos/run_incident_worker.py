"""One worker process of the bad-deploy drill: ``INCIDENT_RELEASE=v2 python
tests/chaos/run_incident_worker.py`` (the DSN from ``HARVEST_DATABASE_URL``)."""

from __future__ import annotations

import asyncio
import logging
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from incident_apps import app

import harvest


def main() -> None:
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr)
    worker = harvest.Worker(
        app,
        os.environ["HARVEST_DATABASE_URL"],
        concurrency=int(os.environ.get("INCIDENT_CONCURRENCY", "16")),
        scan_interval=0.2,
        poll_interval=0.2,
        heartbeat_interval=1.0,
        shutdown_grace=2.0,
    )
    asyncio.run(worker.run(install_signal_handlers=True))


if __name__ == "__main__":
    main()
