"""``python -m examples.billing``: the billing service on the embedded PostgreSQL.

It starts an embedded PostgreSQL (or uses ``HARVEST_DATABASE_URL``), migrates it, and serves
the FastAPI app with its worker in the same process and the management API at
``/api/harvest``. Ctrl-C stops everything and removes what it created.

``--demo-and-exit`` instead walks five orders through the routes (paid, approved, cancelled,
a bounced invoice, a declined card), runs the daily report, and exits; waits are seconds there,
days and hours in the service.
"""

import argparse
import asyncio
import os
import shlex
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx

from examples.billing.api import create_api
from examples.billing.workflows import Policy

# The tour's waits: the service's are two days and an hour. Five seconds of cooling-off leave
# the tour time to see C-3 cooling off and cancel it on a busy machine (one second did not).
DEMO_POLICY = Policy(approval_timeout="30s", cooling_off="5s")


def say(line: str) -> None:
    print(line, flush=True)  # noqa: T201


@contextmanager
def database() -> Iterator[str]:
    """``HARVEST_DATABASE_URL`` (migrated if it needs it), else an embedded PostgreSQL, started,
    migrated, and removed at the end (what ``harvest dev`` does)."""
    from harvest.db.embedded import EmbeddedPostgres
    from harvest.db.migrate import Migrator

    dsn = os.environ.get("HARVEST_DATABASE_URL")
    if dsn:
        Migrator(dsn).run()
        yield dsn
        return
    say("starting an embedded PostgreSQL ...")
    server = EmbeddedPostgres()
    try:
        dsn = server.start()
        Migrator(dsn).run()
        yield dsn
    finally:
        say("stopping the embedded PostgreSQL and removing its files")
        server.stop()


ORDERS: list[dict[str, Any]] = [
    {"order_id": "A-1", "customer_id": "cus_ann", "email": "ann@example.test", "amount_cents": 12_000},
    {"order_id": "B-2", "customer_id": "cus_bo", "email": "bo@example.test", "amount_cents": 150_000},
    {"order_id": "C-3", "customer_id": "cus_cy", "email": "cy@example.test", "amount_cents": 4_000},
    {"order_id": "D-4", "customer_id": "cus_di", "email": "di@bounce.test", "amount_cents": 8_000},
    {
        "order_id": "E-5",
        "customer_id": "declined_ed",
        "email": "ed@example.test",
        "amount_cents": 9_900,
        "currency": "USD",
    },
]


async def wait_for(http: httpx.AsyncClient, order_id: str, status: str | None = None) -> dict[str, Any]:
    """Poll ``GET /orders/{id}`` until its checkout reports ``status`` (None: until it has ended)."""
    body: dict[str, Any] = {}
    for _ in range(600):
        body = (await http.get(f"/orders/{order_id}")).json()
        if (status is None and "receipt" in body) or (status is not None and body.get("status") == status):
            return body
        await asyncio.sleep(0.05)
    raise TimeoutError(f"order {order_id} never reached {status or 'its end'}: {body}")


async def tour(dsn: str) -> dict[str, str]:
    """The demo: every order through the routes; returns each order's final status."""
    api = create_api(DEMO_POLICY, dsn=dsn, run_worker=True, profile="dev")
    async with api.router.lifespan_context(api):
        transport = httpx.ASGITransport(app=api)
        async with httpx.AsyncClient(transport=transport, base_url="http://billing") as http:
            for order in ORDERS:
                started = (await http.post("/orders", json=order)).json()
                say(f"POST /orders {order['order_id']}: {started['execution_id']}")
            # C-3 first: its cooling-off is the tour's one deadline (B-2's approval waits 30 s).
            await wait_for(http, "C-3", "cooling_off")
            say("C-3 is charged and cooling off; POST /orders/C-3/cancel")
            await http.post("/orders/C-3/cancel", json={"reason": "changed my mind"})
            await wait_for(http, "B-2", "awaiting_approval")
            say("B-2 is 1500.00 EUR + tax: it waits for approval; POST /orders/B-2/approve")
            await http.post("/orders/B-2/approve", json={"approved": True})
            outcome: dict[str, str] = {}
            for order in ORDERS:
                body = await wait_for(http, order["order_id"])
                receipt = body["receipt"]
                outcome[order["order_id"]] = receipt["status"]
                detail = receipt["invoice_number"] or receipt["reason"]
                say(
                    f"{order['order_id']}: {receipt['status']} ({receipt['total_cents'] / 100:.2f}; {detail})"
                )
            report = (await http.post("/reports/daily")).json()
            say(
                f"daily report: {report['charges']} charges, {report['charged_cents'] / 100:.2f} charged, "
                f"{report['refunded_cents'] / 100:.2f} refunded"
            )
            listed = (await http.get("/api/harvest/admin/schedules")).json()
            for schedule in listed["schedules"]:
                say(f"GET /api/harvest/admin/schedules: {schedule['name']}, {schedule['when']}")
    return outcome


def serve(dsn: str, host: str, port: int) -> None:
    import uvicorn

    base = f"http://{host}:{port}"
    order = (
        '{"order_id": "A-1", "customer_id": "cus_ann", "email": "ann@example.test", "amount_cents": 12000}'
    )
    say(f"\nbilling on {base} (management API: {base}/api/harvest, dashboard: {base}/api/harvest/ui)")
    say(f"  curl -s -X POST {base}/orders -H 'Content-Type: application/json' -d {shlex.quote(order)}")
    say(f"  curl -s {base}/orders/A-1")
    say("Ctrl-C stops everything.\n")
    uvicorn.run(
        create_api(dsn=dsn, run_worker=True, profile="dev"), host=host, port=port, log_level="warning"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m examples.billing", description=__doc__.split("\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--demo-and-exit", action="store_true", help="walk five orders through, then exit")
    args = parser.parse_args(argv)
    with database() as dsn:
        if args.demo_and_exit:
            asyncio.run(tour(dsn))
        else:
            serve(dsn, args.host, args.port)
    return 0


if __name__ == "__main__":
    sys.exit(main())
