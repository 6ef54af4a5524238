"""A stand-in for the payment provider, the mailer and the ledger (Stripe, SES, your books).

It lives in this process's memory so the example runs offline; what it shows is how a real
provider is called: every write carries the activity's idempotency key, and a write repeated
with the same key (a retry after a crash or a timeout) returns the first result instead of
charging twice.
"""

import itertools
import threading
from dataclasses import dataclass, field

# What one unit of each currency is worth in euro cents, read through ctx.side_effect: a
# value that may change between a run and its replay is recorded once.
RATES_TO_EUR = {"EUR": 1.0, "USD": 0.92, "GBP": 1.17}


class ProviderError(Exception):
    """The provider failed (the caller may retry: the idempotency key makes that safe)."""


@dataclass
class Reservation:
    id: str
    customer_id: str
    amount_cents: int
    released: bool = False


@dataclass
class Charge:
    id: str
    customer_id: str
    amount_cents: int


@dataclass
class Provider:
    """Reservations, charges, refunds and sent mail, keyed by idempotency key."""

    reservations: dict[str, Reservation] = field(default_factory=dict)
    charges: dict[str, Charge] = field(default_factory=dict)
    refunds: dict[str, str] = field(default_factory=dict)
    mail: list[dict[str, str]] = field(default_factory=list)
    # Tests set this: the next charge is accepted, then the answer is lost (a timeout).
    lose_next_answer: bool = False
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _ids: "itertools.count[int]" = field(default_factory=lambda: itertools.count(1))

    def reserve(self, key: str, customer_id: str, amount_cents: int) -> str:
        with self._lock:
            if key not in self.reservations:
                self.reservations[key] = Reservation(f"res_{next(self._ids)}", customer_id, amount_cents)
            return self.reservations[key].id

    def release(self, reservation_id: str) -> None:
        with self._lock:
            for reservation in self.reservations.values():
                if reservation.id == reservation_id:
                    reservation.released = True

    def charge(self, key: str, customer_id: str, amount_cents: int) -> str:
        with self._lock:
            if key not in self.charges:
                self.charges[key] = Charge(f"ch_{next(self._ids)}", customer_id, amount_cents)
            if self.lose_next_answer:
                self.lose_next_answer = False
                raise ProviderError("the charge was sent but its answer timed out")
            return self.charges[key].id

    def refund(self, key: str, charge_id: str) -> str:
        with self._lock:
            return self.refunds.setdefault(key, f"re_{charge_id}")

    def send(self, to: str, subject: str, body: str) -> None:
        with self._lock:
            self.mail.append({"to": to, "subject": subject, "body": body})

    def totals(self) -> dict[str, int]:
        """What the books say: charged, refunded and net cents, and the charge count."""
        with self._lock:
            refunded_ids = {refund_id.removeprefix("re_") for refund_id in self.refunds.values()}
            charged = sum(c.amount_cents for c in self.charges.values())
            refunded = sum(c.amount_cents for c in self.charges.values() if c.id in refunded_ids)
            return {
                "charges": len(self.charges),
                "charged_cents": charged,
                "refunded_cents": refunded,
                "net_cents": charged - refunded,
            }


PROVIDER = Provider()


def exchange_rate(currency: str) -> float:
    """Today's rate (a read of something that changes: called through ctx.side_effect)."""
    return RATES_TO_EUR[currency]


def reset() -> Provider:
    """Forget everything (between tests); returns the new provider."""
    global PROVIDER
    PROVIDER = Provider()
    return PROVIDER
