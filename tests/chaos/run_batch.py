"""Run a batch by filter step by step for the chaos tests:
``python tests/chaos/run_batch.py ACTION CREATED_AFTER LIMIT HOLD BATCH_ID [CURSOR]``.

Each step is one call of harvest.<ACTION>_workflows (pause or resume; the filter: the runs created
after CREATED_AFTER, an ISO time) in a transaction of its own, held open HOLD seconds after the
call before it commits, saying ``HOLDING <answer>`` first: a SIGKILL then lands in the middle of a
step, its acts uncommitted. ``COMMITTED <answer>`` follows each commit; the next step goes on from
its next_cursor (the first from CURSOR, when given), ``DONE`` once none comes back. The DSN comes
from ``HARVEST_DATABASE_URL``.
"""

from __future__ import annotations

import json
import os
import sys
import time

import psycopg


def say(what: str, value: object) -> None:
    sys.stdout.write(f"{what} {json.dumps(value)}\n")
    sys.stdout.flush()


def main(action: str, created_after: str, limit: int, hold: float, batch_id: str, cursor: str | None) -> None:
    with psycopg.connect(os.environ["HARVEST_DATABASE_URL"], application_name=f"batch-{os.getpid()}") as conn:
        while True:
            answer = conn.execute(
                f"SELECT harvest.{action}_workflows(p_created_after => %s::timestamptz, p_reason => 'chaos',"
                " p_cursor => %s, p_limit => %s, p_batch_id => %s)",
                (created_after, cursor, limit, batch_id),
            ).fetchone()[0]  # type: ignore[index]  # one row
            say("HOLDING", answer)
            time.sleep(hold)
            conn.commit()
            say("COMMITTED", answer)
            cursor = answer["next_cursor"]
            if not cursor:
                break
    say("DONE", None)


if __name__ == "__main__":
    main(
        sys.argv[1],
        sys.argv[2],
        int(sys.argv[3]),
        float(sys.argv[4]),
        sys.argv[5],
        sys.argv[6] if len(sys.argv) > 6 else None,
    )
