"""The billing example (examples/billing): every path of its checkout on the test kit's
environment, whose time skipping turns the two-day approval wait and the hour of cooling off
into milliseconds; its FastAPI routes against the same database; the daily schedule; the version
gate against a history of the code before it; and ``python -m examples.billing --demo-and-exit``."""

from __future__ import annotations

import datetime as dt
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from examples.billing import payments
from examples.billing.api import create_api
from examples.billing.workflows import (
    Order,
    Policy,
    Receipt,
    app,
    checkout,
    daily_billing_report,
)
from harvest import App, workflow
from harvest.config import Config
from harvest.testing import WorkflowEnvironment, WorkflowReplayer

ROOT = Path(__file__).resolve().parents[2]
POLICY = Policy()  # the service's own waits: two days for an approval, an hour of cooling off


@pytest.fixture
def harvest_app() -> App:
    """The App ``harvest_env`` runs (tests/examples/conftest.py), with a fresh payment stand-in."""
    payments.reset()
    return app


def order(order_id: str, amount_cents: int = 10_000, **fields: Any) -> Order:
    fields.setdefault("customer_id", f"cus_{order_id}")
    fields.setdefault("email", f"{order_id}@example.test")
    return Order(order_id, amount_cents=amount_cents, **fields)


def run(env: WorkflowEnvironment, o: Order) -> Receipt:
    handle = env.client.start_workflow(checkout, o, POLICY)
    receipt: Receipt = handle.result(timeout=20)
    return receipt


def test_an_order_is_taxed_charged_once_invoiced_and_the_hour_of_cooling_off_is_skipped(
    harvest_env: WorkflowEnvironment,
) -> None:
    env = harvest_env
    started = time.monotonic()
    handle = env.client.start_workflow(checkout, order("a", 10_000), POLICY)
    receipt: Receipt = handle.result(timeout=20)
    assert time.monotonic() - started < 60  # an hour of cooling off, skipped (not waited out)
    assert receipt.status == "paid", receipt
    assert (receipt.tax_cents, receipt.total_cents, receipt.eur_cents) == (2_000, 12_000, 12_000)
    assert receipt.invoice_number.startswith("INV-")
    provider = payments.PROVIDER
    assert [c.amount_cents for c in provider.charges.values()] == [12_000]
    assert [m["to"] for m in provider.mail] == ["a@example.test"]
    assert receipt.invoice_number in provider.mail[0]["body"]
    # The side effect and the version gate are in the history, recorded once.
    history = handle.history()
    markers = [e["event_data"] for e in history if e["event_type"] == "MarkerRecorded"]
    assert any(m.get("kind") == "version" for m in markers), markers
    assert any(m.get("kind") == "side_effect" for m in markers), markers


def test_a_large_order_waits_two_days_for_approval_then_is_rejected_or_approved(
    harvest_env: WorkflowEnvironment,
) -> None:
    env = harvest_env
    assert run(env, order("big", 150_000)).status == "rejected"  # nobody approved in two days
    assert payments.PROVIDER.charges == {}

    handle = env.client.start_workflow(checkout, order("big2", 150_000), POLICY)
    env.wait_until_idle()  # time stands still until someone waits for the result
    assert handle.query("checkout_status") == "awaiting_approval"
    handle.signal("approve", True)
    receipt: Receipt = handle.result(timeout=20)
    assert (receipt.status, receipt.total_cents) == ("paid", 180_000)


def test_cancel_during_cooling_off_and_a_bounced_invoice_refund_the_charge_and_release_the_credit(
    harvest_env: WorkflowEnvironment,
) -> None:
    env = harvest_env
    handle = env.client.start_workflow(checkout, order("c"), POLICY)
    env.wait_until_idle()
    assert handle.query("checkout_status") == "cooling_off"
    handle.signal("cancel", "changed my mind")
    cancelled: Receipt = handle.result(timeout=20)
    assert (cancelled.status, cancelled.reason) == ("cancelled", "changed my mind")

    bounced = run(env, order("d", email="d@bounce.test"))
    assert bounced.status == "failed" and "MailboxUnavailable" in bounced.reason

    provider = payments.PROVIDER
    assert len(provider.charges) == 2 and len(provider.refunds) == 2  # both charges refunded
    assert all(r.released for r in provider.reservations.values())
    assert provider.totals()["net_cents"] == 0


def test_a_declined_card_releases_the_credit_and_a_lost_answer_is_not_a_second_charge(
    harvest_env: WorkflowEnvironment,
) -> None:
    env = harvest_env
    declined = run(env, order("e", customer_id="declined_e"))
    assert declined.status == "failed" and "CardDeclined" in declined.reason
    assert payments.PROVIDER.charges == {} and all(
        r.released for r in payments.PROVIDER.reservations.values()
    )

    payments.PROVIDER.lose_next_answer = True  # accepted, then the answer times out: retried
    receipt = run(env, order("f", 5_000))
    assert receipt.status == "paid"
    assert len(payments.PROVIDER.charges) == 1  # the retry carried the same idempotency key
    assert next(iter(payments.PROVIDER.charges.values())).id == receipt.charge_id


def test_the_daily_report_runs_on_its_schedule_at_three(harvest_env: WorkflowEnvironment) -> None:
    env = harvest_env
    run(env, order("g", 10_000))
    # The test clock walks to the schedule's next slot, 03:00 UTC, and the worker's own
    # scheduler fires it there (docs/testing.md, "Testing schedules").
    [firing] = env.skip_schedule("daily_billing_report")
    assert firing.status == "started" and firing.execution_id is not None
    slot = firing.slot.astimezone(dt.UTC)
    assert (slot.hour, slot.minute) == (3, 0) and firing.workflow_id.endswith(f":{int(slot.timestamp())}")
    report = env.client.get_handle(firing.execution_id, daily_billing_report).result(timeout=10)
    assert report["region"] == "eu" and report["charges"] == 1 and report["net_cents"] == 12_000


# The checkout as it was before tax (its first steps): a run it started, waiting for approval
# when tax was deployed, must replay on today's code. The version gate is what makes it replay.
@workflow(name="checkout")
async def checkout_before_tax(ctx: Any, o: Order, policy: Policy) -> Receipt:
    receipt = Receipt(o.order_id, "pricing", total_cents=o.amount_cents)
    rate = ctx.side_effect(lambda: payments.exchange_rate(o.currency))
    receipt.eur_cents = round(receipt.total_cents * rate)
    if receipt.total_cents >= policy.approval_threshold_cents:
        await ctx.wait_for_signal("approve", timeout=policy.approval_timeout, type_hint=bool)
    return receipt


def test_the_version_gate_replays_a_run_recorded_before_it(db: str) -> None:
    old = App(workflows=[checkout_before_tax])
    with WorkflowEnvironment(old, dsn=db) as before:
        handle = before.client.start_workflow(checkout_before_tax, order("h", 150_000), POLICY)
        before.wait_until_idle()  # waiting for its approval, as the deploy finds it
        history = handle.history()
    assert [e["event_type"] for e in history].count("MarkerRecorded") == 1  # the side effect only
    result = WorkflowReplayer(app).replay(history)
    assert result.ok, result.error


def test_the_routes_start_steer_and_report_checkouts(harvest_env: WorkflowEnvironment) -> None:
    env = harvest_env
    import asyncio

    api = create_api(POLICY, dsn=env.dsn, config=Config(), profile="dev", run_worker=False)

    async def calls() -> None:
        async with api.router.lifespan_context(api):
            transport = httpx.ASGITransport(app=api)
            async with httpx.AsyncClient(transport=transport, base_url="http://billing") as http:
                body = {
                    "order_id": "r1",
                    "customer_id": "cus_r",
                    "email": "r@example.test",
                    "amount_cents": 150_000,
                }
                first = await http.post("/orders", json=body)
                assert first.status_code == 202, first.text
                again = await http.post("/orders", json=body)  # a retried POST: the same checkout
                assert again.json()["execution_id"] == first.json()["execution_id"]
                await asyncio.to_thread(env.wait_until_idle)
                status = (await http.get("/orders/r1")).json()
                assert status == {"order_id": "r1", "state": "RUNNING", "status": "awaiting_approval"}
                assert (await http.post("/orders/r1/approve", json={"approved": True})).status_code == 202
                handle = env.client.get_handle(first.json()["execution_id"])
                await asyncio.to_thread(handle.result, 20)  # waiting skips the hour of cooling off
                done = (await http.get("/orders/r1")).json()
                assert done["state"] == "COMPLETED" and done["receipt"]["status"] == "paid"
                missing = await http.get("/orders/nope")
                assert missing.status_code == 404 and missing.json()["error"]["code"] == "not_found"
                report = (await http.post("/reports/daily")).json()
                assert report["on_demand"] is True and report["charges"] == 1
                runs = (await http.get("/api/harvest/workflows", params={"workflow_name": "checkout"})).json()
                assert len(runs["executions"]) == 1

    asyncio.run(calls())


def test_python_m_examples_billing_demo_and_exit(db: str) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("HARVEST_")}
    # The inherited PYTHONPATH stays after the root: a worktree's run imports its own library.
    path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
    env.update(HARVEST_DATABASE_URL=db, PYTHONPATH=path)
    done = subprocess.run(
        [sys.executable, "-m", "examples.billing", "--demo-and-exit"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for line in (
        "A-1: paid",
        "B-2: paid",
        "C-3: cancelled",
        "D-4: failed",
        "E-5: failed",
        "daily report: 4 charges",
    ):
        assert line in done.stdout, done.stdout
