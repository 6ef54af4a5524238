"""The order workflow of the bad-deploy drill (test_chaos_bad_deploy.py), in three releases a
worker process picks with ``INCIDENT_RELEASE``. An order's ``kind`` picks its path:

* ``v1``: good. ``charge``, then a wait for the ``packed`` signal, then the order's ship
  activity (``ship``; ``ship_express`` for an express order) and ``notify``.
* ``v2``: the bad deploy, three bugs:
  - the activity bug: ``ship`` and ``ship_express`` raise on every call; their two attempts run
    out and they park as dead letters (``dead_letter=True``, the default): the runs wait;
  - the workflow bug that writes history: an express order runs a new ``audit`` step before its
    ship, with no ``ctx.version`` gate; it completes, and no release without it replays it;
  - the workflow bug that only raises: a gift order's workflow code calls ``ctx.sleep("1 hour")``
    once packed (a ``WorkflowCallError``: its workflow task fails and is retried every 5 s;
    nothing is written, the run is untouched).
* ``v3``: the fix: v1's workflow, the ship activities fixed.

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


def _ship(ctx: Any, name: str, order: int) -> str:
    if RELEASE == "v2":
        _record(ctx, name, order, False)
        raise RuntimeError("KeyError: 'carrier' (the bad deploy)")
    _record(ctx, name, order, True)
    return f"shipped-{order}"


@activity(retry=QUICK)  # (dead_letter=True, the default: out of attempts, it parks)
def ship(ctx, order: int) -> str:
    return _ship(ctx, "ship", order)


@activity(retry=QUICK)
def ship_express(ctx, order: int) -> str:
    return _ship(ctx, "ship_express", order)


@activity(retry=QUICK)
def notify(ctx, order: int) -> str:
    _record(ctx, "notify", order, True)
    return f"notified-{order}"


@activity(retry=QUICK)
def audit(ctx, order: int) -> str:
    _record(ctx, "audit", order, True)
    return f"audited-{order}"


@workflow
async def order_flow(ctx, order: int, kind: str) -> list:
    done = [await ctx.execute_activity(charge, order)]
    await ctx.wait_for_signal("packed")
    if RELEASE == "v2" and kind == "gift":  # the workflow bug that only raises (WorkflowCallError)
        await ctx.sleep("1 hour")  # (a duration that does not parse: the task fails, not the run)
    if RELEASE == "v2" and kind == "express":  # the ungated step: history v1 and v3 do not replay
        done.append(await ctx.execute_activity(audit, order))
    done.append(await ctx.execute_activity(ship_express if kind == "express" else ship, order))
    done.append(await ctx.execute_activity(notify, order))
    return done


app = App(workflows=[order_flow], activities=[charge, ship, ship_express, notify, audit])
