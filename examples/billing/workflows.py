"""The billing app's workflows and activities.

``checkout`` takes an order from price to paid invoice:

1. a **version gate** (``billing_checkout_v2_tax``): runs started before tax existed replay
   without it, every new run computes it;
2. a **side effect**: today's exchange rate, recorded once so a replay sees the same value;
3. a **signal with a timer**: an order at or above the approval threshold waits for
   ``approve`` for ``approval_timeout`` (2 days), and is rejected when nobody answers;
4. a **saga**: reserve credit, charge the card (one idempotency key across retries), and undo
   both, last first, when a later step fails or the customer cancels;
5. a second **signal with a timer**: ``cancel`` during the cooling-off period (1 hour) refunds;
6. a **child workflow**, ``send_invoice``, renders and mails the invoice; when it fails (the
   mailbox bounces), the saga refunds the charge and releases the credit.

``daily_billing_report`` runs on a **schedule** at 03:00 UTC. The ``checkout_status`` **query**
reads where a checkout is.
"""

from dataclasses import dataclass
from typing import Any

from examples.billing import payments
from harvest import (
    DEFAULT_VERSION,
    ActivityError,
    ActivityFailure,
    App,
    ChildWorkflowError,
    RetryPolicy,
    Saga,
    Schedule,
    SignalTimeout,
    WorkflowSchedule,
    activity,
    query,
    workflow,
)

# The version gate's change id: `harvest version-usage --change-id billing_checkout_v2_tax
# --version -1 --guard` says when no run needs the tax-free branch any more.
TAX_CHANGE = "billing_checkout_v2_tax"
VAT_RATE = {"EUR": 0.20, "GBP": 0.20, "USD": 0.0}


@dataclass
class Order:
    order_id: str
    customer_id: str
    email: str
    amount_cents: int
    currency: str = "EUR"


@dataclass
class Policy:
    """How long a checkout waits; the service's defaults are days and hours, the demo's seconds."""

    approval_threshold_cents: int = 100_000
    approval_timeout: str = "2d"
    cooling_off: str = "1h"


@dataclass
class Invoice:
    number: str
    order_id: str
    email: str
    total_cents: int
    currency: str


@dataclass
class Receipt:
    order_id: str
    status: str  # paid | rejected | cancelled | failed
    total_cents: int = 0
    tax_cents: int = 0
    eur_cents: int = 0
    charge_id: str = ""
    invoice_number: str = ""
    reason: str = ""


# -- activities: each call to the outside world, retried and recorded ------------------------


@activity(start_to_close="10s")
def compute_tax(ctx: Any, order: Order) -> int:
    return round(order.amount_cents * VAT_RATE.get(order.currency, 0.0))


@activity(start_to_close="30s", dead_letter=False)
def reserve_credit(ctx: Any, customer_id: str, amount_cents: int) -> str:
    return payments.PROVIDER.reserve(ctx.idempotency_key().as_str(), customer_id, amount_cents)


@activity(start_to_close="30s")
def release_credit(ctx: Any, reservation_id: str) -> None:
    payments.PROVIDER.release(reservation_id)


# The spec's charge: the idempotency key is the same on every retry, so a retry after the
# provider accepted the charge (and the answer was lost) returns that charge instead of a second.
@activity(
    start_to_close="30s",
    retry=RetryPolicy.exponential(max_attempts=3, initial="2s"),
    dead_letter=False,  # a final failure goes to the workflow, whose saga undoes the reservation
)
def charge_card(ctx: Any, customer_id: str, amount_cents: int) -> str:
    if customer_id.startswith("declined"):
        raise ActivityFailure("CardDeclined", f"the card of {customer_id} was declined", non_retryable=True)
    return payments.PROVIDER.charge(ctx.idempotency_key().as_str(), customer_id, amount_cents)


# A compensation keeps dead_letter=True: a refund that keeps failing is parked for an operator
# (`harvest dlq list`), never dropped, and the workflow waits for it.
@activity(start_to_close="30s")
def refund_charge(ctx: Any, charge_id: str) -> str:
    return payments.PROVIDER.refund(ctx.idempotency_key().as_str(), charge_id)


@activity(start_to_close="30s")
def render_invoice(ctx: Any, invoice: Invoice) -> str:
    amount = f"{invoice.total_cents / 100:.2f} {invoice.currency}"
    return f"Invoice {invoice.number} for order {invoice.order_id}: {amount}"


@activity(start_to_close="30s", dead_letter=False)
def email_invoice(ctx: Any, to: str, subject: str, body: str) -> None:
    if to.endswith("@bounce.test"):
        raise ActivityFailure("MailboxUnavailable", f"{to} does not exist", non_retryable=True)
    payments.PROVIDER.send(to, subject, body)


@activity(start_to_close="30s")
def billing_totals(ctx: Any) -> dict[str, int]:
    return payments.PROVIDER.totals()


# -- workflows ---------------------------------------------------------------------------------


@workflow
async def send_invoice(ctx: Any, invoice: Invoice) -> str:
    """The child: render the invoice, mail it; its number is the result."""
    document = await ctx.execute_activity(render_invoice, invoice)
    await ctx.execute_activity(email_invoice, invoice.email, f"Invoice {invoice.number}", document)
    return invoice.number


@workflow
async def checkout(ctx: Any, order: Order, policy: Policy) -> Receipt:
    ctx.state.update(order_id=order.order_id, status="pricing")
    receipt = Receipt(order.order_id, "pricing")

    # 1. The version gate: runs that priced before tax existed replay the old branch.
    if ctx.version(TAX_CHANGE, DEFAULT_VERSION, 1) >= 1:
        receipt.tax_cents = await ctx.execute_activity(compute_tax, order)
    receipt.total_cents = order.amount_cents + receipt.tax_cents

    # 2. A side effect: the rate is read once and recorded; a replay reads the record.
    rate = ctx.side_effect(lambda: payments.exchange_rate(order.currency))
    receipt.eur_cents = round(receipt.total_cents * rate)

    # 3. Large orders wait for a person, at most approval_timeout (a durable timer).
    if receipt.total_cents >= policy.approval_threshold_cents:
        ctx.state["status"] = "awaiting_approval"
        try:
            approved = await ctx.wait_for_signal("approve", timeout=policy.approval_timeout, type_hint=bool)
        except SignalTimeout:
            return _ended(ctx, receipt, "rejected", f"no approval within {policy.approval_timeout}")
        if not approved:
            return _ended(ctx, receipt, "rejected", "declined by the approver")

    # 4. The saga: each step that succeeded registers its undo.
    saga = Saga(ctx)
    try:
        ctx.state["status"] = "charging"
        reservation = await ctx.execute_activity(reserve_credit, order.customer_id, receipt.total_cents)
        saga.add_compensation(release_credit, reservation)
        receipt.charge_id = await ctx.execute_activity(charge_card, order.customer_id, receipt.total_cents)
        saga.add_compensation(refund_charge, receipt.charge_id)

        # 5. The cooling-off period: a "cancel" signal before the timer fires refunds.
        ctx.state["status"] = "cooling_off"
        try:
            reason = await ctx.wait_for_signal("cancel", timeout=policy.cooling_off, type_hint=str)
        except SignalTimeout:
            reason = None
        if reason is not None:
            ctx.state["status"] = "compensating"
            await saga.compensate()
            return _ended(ctx, receipt, "cancelled", reason)

        # 6. The child workflow; its number comes from ctx.uuid4(), recorded like any random.
        ctx.state["status"] = "invoicing"
        invoice = Invoice(
            f"INV-{ctx.uuid4().hex[:8].upper()}",
            order.order_id,
            order.email,
            receipt.total_cents,
            order.currency,
        )
        receipt.invoice_number = await ctx.execute_child_workflow(
            send_invoice, invoice, workflow_id=f"invoice-{order.order_id}"
        )
    except (ActivityError, ChildWorkflowError) as exc:
        ctx.state["status"] = "compensating"
        await saga.compensate()
        return _ended(ctx, receipt, "failed", str(exc))
    return _ended(ctx, receipt, "paid", "")


def _ended(ctx: Any, receipt: Receipt, status: str, reason: str) -> Receipt:
    ctx.state["status"] = receipt.status = status
    receipt.reason = reason
    return receipt


@query(workflow="checkout")
def checkout_status(ctx: Any) -> str:
    return str(ctx.state["status"])


@workflow
async def daily_billing_report(ctx: Any, params: dict[str, Any]) -> dict[str, Any]:
    """The nightly report: the books' totals, stamped with the (recorded) time it ran."""
    totals = await ctx.execute_activity(billing_totals)
    return {"at": ctx.now().isoformat(), **params, **totals}


app = App(
    workflows=[checkout, send_invoice, daily_billing_report],
    activities=[
        compute_tax,
        reserve_credit,
        release_credit,
        charge_card,
        refund_charge,
        render_invoice,
        email_invoice,
        billing_totals,
    ],
    queries=[checkout_status],
    schedules=[
        WorkflowSchedule(
            "daily_billing_report",
            Schedule.cron("0 3 * * *"),
            workflow=daily_billing_report,
            input={"region": "eu"},
            max_active_runs=1,
        )
    ],
)
