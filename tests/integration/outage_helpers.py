"""What the outage tests share (their server: the ``own_server`` fixture in conftest.py)."""

from __future__ import annotations

import time
from collections.abc import Callable


def wait_until(predicate: Callable[[], object], what: str, timeout: float = 30.0) -> None:
    """Poll ``predicate`` every 20 ms until it is true; fail naming ``what`` after ``timeout``."""
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, f"never: {what}"
        time.sleep(0.02)
