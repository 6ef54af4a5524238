"""The billing service's HTTP API: FastAPI routes that start and steer checkouts.

| route | does |
| --- | --- |
| ``POST /orders`` | start the checkout of an order (workflow id ``order-<order_id>``): 202 |
| ``GET /orders/{order_id}`` | where it is (the ``checkout_status`` query) and, once ended, its receipt |
| ``POST /orders/{order_id}/approve`` | ``{"approved": true}``: the approval signal |
| ``POST /orders/{order_id}/cancel`` | ``{"reason": "..."}``: cancel during the cooling-off period |
| ``POST /reports/daily`` | run the scheduled report now and return it |
| ``/api/harvest/...`` | the management API (workflows, schedules, workers, dashboard at ``/ui``) |
"""

from dataclasses import asdict
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel

from examples.billing.workflows import Order, Policy, Receipt, app, checkout, daily_billing_report
from harvest import HarvestError, StartOptions
from harvest.integrations.fastapi import HarvestClient, HarvestLifespan, harvest_error_handler


class Approval(BaseModel):
    approved: bool


class Cancellation(BaseModel):
    reason: str


def create_api(policy: Policy | None = None, **harvest: Any) -> FastAPI:
    """The service. ``policy``: the checkouts' waits (default: days and hours); ``harvest``:
    :class:`HarvestLifespan`'s options (``dsn``, ``run_worker``, ``profile``, ...)."""
    policy = policy or Policy()
    api = FastAPI(
        title="billing",
        lifespan=HarvestLifespan(app, **harvest),
        exception_handlers={HarvestError: harvest_error_handler},  # NotFound -> 404, ...
    )

    @api.post("/orders", status_code=202)
    async def place_order(order: Order, client: HarvestClient) -> dict[str, str]:
        handle = await client.start_workflow(
            checkout, order, policy, options=StartOptions(workflow_id=f"order-{order.order_id}")
        )
        return {"workflow_id": f"order-{order.order_id}", "execution_id": handle.execution_id}

    @api.get("/orders/{order_id}")
    async def get_order(order_id: str, client: HarvestClient) -> dict[str, Any]:
        handle = client.get_handle(workflow_id=f"order-{order_id}", workflow=checkout)
        run = await handle.describe()
        answer: dict[str, Any] = {"order_id": order_id, "state": run["status"]}
        if run["status"] == "RUNNING":
            answer["status"] = await handle.query("checkout_status")
        elif run["status"] == "COMPLETED":
            receipt: Receipt = await handle.result(timeout=10)
            answer.update(status=receipt.status, receipt=asdict(receipt))
        return answer

    @api.post("/orders/{order_id}/approve", status_code=202)
    async def approve(order_id: str, body: Approval, client: HarvestClient) -> dict[str, bool]:
        await client.get_handle(workflow_id=f"order-{order_id}").signal("approve", body.approved)
        return {"approved": body.approved}

    @api.post("/orders/{order_id}/cancel", status_code=202)
    async def cancel(order_id: str, body: Cancellation, client: HarvestClient) -> dict[str, str]:
        await client.get_handle(workflow_id=f"order-{order_id}").signal("cancel", body.reason)
        return {"reason": body.reason}

    @api.post("/reports/daily")
    async def daily_report(client: HarvestClient) -> dict[str, Any]:
        handle = await client.start_workflow(daily_billing_report, {"region": "eu", "on_demand": True})
        report: dict[str, Any] = await handle.result(timeout=30)
        return report

    return api
