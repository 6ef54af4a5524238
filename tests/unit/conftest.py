"""The unit tests' own fixtures (tests/conftest.py holds the suite's)."""

from __future__ import annotations

import sys
from collections.abc import Iterator

import pytest


@pytest.fixture(autouse=True)
def _close_the_runs_history_builder_made() -> Iterator[None]:
    """A run the test left unclosed is closed at its end (history_builder.made_runs), not
    dropped to warn of its never-started coroutines in whatever test collects it."""
    yield
    helpers = sys.modules.get("history_builder")
    if helpers is not None:
        helpers.close_made_runs()
