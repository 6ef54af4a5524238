"""What a signal's sender is told: the signal's event id, and whether the run waits for it."""

from __future__ import annotations

from collections.abc import Iterable

__all__ = ["SignalReceipt"]


class SignalReceipt(int):
    """A delivered signal's event id (an ``int``, as ``handle.signal`` has always answered),
    with the names the run's pending ``ctx.wait_for_signal`` calls wait for as it was accepted
    (``awaited_signals``, sorted) and whether its own name is one of them (``awaited``).

    A signal no wait asks for is still accepted and buffered (a later wait may read it):
    ``awaited`` False with other names waited for is how a misspelt name shows.
    """

    signal_name: str
    awaited_signals: tuple[str, ...]

    def __new__(cls, event_id: int, signal_name: str, awaited_signals: Iterable[str] = ()) -> SignalReceipt:
        receipt = super().__new__(cls, event_id)
        receipt.signal_name = signal_name
        receipt.awaited_signals = tuple(awaited_signals)
        return receipt

    @property
    def event_id(self) -> int:
        return int(self)

    @property
    def awaited(self) -> bool:
        """Whether a pending wait of the run asks for this signal's name."""
        return self.signal_name in self.awaited_signals

    @property
    def not_awaited(self) -> str | None:
        """What a face tells a sender whose signal no pending wait asks for while the run waits
        for others (a misspelt name): ``not awaited: the run waits for ...``; None otherwise
        (awaited, or the run waits on no signal). The CLI's line and the dashboard's notice."""
        if self.awaited or not self.awaited_signals:
            return None
        return f"not awaited: the run waits for {', '.join(self.awaited_signals)} (the signal is buffered)"

    def __reduce__(self) -> tuple[type[SignalReceipt], tuple[int, str, tuple[str, ...]]]:
        return (SignalReceipt, (int(self), self.signal_name, self.awaited_signals))
