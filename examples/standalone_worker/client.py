"""The client side: start reports on the worker service, optionally wait for them.

    HARVEST_DATABASE_URL=... python -m examples.standalone_worker.client --count 3 --out /tmp/reports --wait

The client needs no worker in its process, only the workflow's name and arguments: it writes
the start to Postgres and the service's workers pick it up.
"""

from __future__ import annotations

import argparse
import sys

from examples.standalone_worker.app import ReportRequest, report
from harvest import Client, StartOptions, WorkflowHandle


def start_reports(
    client: Client, count: int, out_dir: str, work_seconds: float = 1.0
) -> list[WorkflowHandle]:
    """Start ``count`` reports (workflow ids ``report-1``...; a repeated start attaches)."""
    return [
        client.start_workflow(
            report,
            ReportRequest(f"report-{n}", out_dir, work_seconds),
            options=StartOptions(workflow_id=f"report-{n}"),
        )
        for n in range(1, count + 1)
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=3)
    parser.add_argument("--out", required=True, help="a directory the worker can write to")
    parser.add_argument("--work-seconds", type=float, default=1.0)
    parser.add_argument("--wait", action="store_true", help="wait for the results")
    args = parser.parse_args(argv)
    with Client() as client:  # HARVEST_DATABASE_URL
        handles = start_reports(client, args.count, args.out, args.work_seconds)
        for handle in handles:
            print(f"started {handle.workflow_id}: {handle.execution_id}")  # noqa: T201
        if args.wait:
            for handle in handles:
                print(f"{handle.workflow_id}: {handle.result(timeout=120)}")  # noqa: T201
    return 0


if __name__ == "__main__":
    sys.exit(main())
