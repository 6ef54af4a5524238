"""The order workflow of the bad-deploy drill (test_chaos_bad_deploy.py), in four releases a
worker process picks with ``INCIDENT_RELEASE``:

* ``v1``: good. ``charge``, then a wait for the ``packed`` signal, then ``ship`` and ``notify``.
* ``v2``: the activity bug: ``ship`` raises on every call (its two attempts run out, and with
  ``dead_letter=False`` the run fails: FAILED).
* ``v3``: the workflow bug, an hour later: ``ship`` fixed, but the workflow schedules ``audit``
  first, which no recorded history holds (non-determinism on replay: a run signalled now has its
  workflow task fail, and it stays RUNNING).
* ``v4``: the fix forward: v1's workflow, ``ship`` fixed.

Every activity body records its call in ``incident_calls`` (the database's clock), ``ok`` false
for one that raised: the drill counts from the bodies what ran twice.
"""

from __future__ import annotations

import os
import threading
from typing import Any

import psycopg

from harvest import App, RetryPolicy, activity, workflow

CALLS_DDL = """
CREATE TABLE IF NOT EXISTS incident_calls (
    id bigserial PRIMARY KEY,
    activity text NOT NULL,
    order_id integer NOT NULL,
    execution_id text NOT NULL,
    release text NOT NULL,
    ok boolean NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""

RELEASE = os.environ.get("INCIDENT_RELEASE", "v1")
QUICK = RetryPolicy(max_attempts=2, initial_interval=0.05, backoff=1.0, max_interval=0.05)
_local = threading.local()


def _record(ctx: Any, name: str, order: int, ok: bool) -> None:
    conn = getattr(_local, "conn", None)
    if conn is None or conn.closed:
        conn = _local.conn = psycopg.connect(os.environ["HARVEST_DATABASE_URL"], autocommit=True)
    conn.execute(
        "INSERT INTO incident_calls (activity, order_id, execution_id, release, ok)"
        " VALUES (%s, %s, %s, %s, %s)",
        (name, order, ctx.execution_id, RELEASE, ok),
    )


@activity(retry=QUICK)
def charge(ctx, order: int) -> str:
    _record(ctx, "charge", order, True)
    return f"charged-{order}"


@activity(retry=QUICK, dead_letter=False)
def ship(ctx, order: int) -> str:
    if RELEASE == "v2":
        _record(ctx, "ship", order, False)
        raise RuntimeError("KeyError: 'carrier' (the bad deploy)")
    _record(ctx, "ship", order, True)
    return f"shipped-{order}"


@activity(retry=QUICK)
def notify(ctx, order: int) -> str:
    _record(ctx, "notify", order, True)
    return f"notified-{order}"


@activity(retry=QUICK)
def audit(ctx, order: int) -> str:
    _record(ctx, "audit", order, True)
    return f"audited-{order}"


@workflow
async def order_flow(ctx, order: int) -> list:
    done = []
    if RELEASE == "v3":  # the workflow bug: a command the recorded histories do not hold
        done.append(await ctx.execute_activity(audit, order))
    done.append(await ctx.execute_activity(charge, order))
    await ctx.wait_for_signal("packed")
    done.append(await ctx.execute_activity(ship, order))
    done.append(await ctx.execute_activity(notify, order))
    return done


app = App(workflows=[order_flow], activities=[charge, ship, notify, audit])
