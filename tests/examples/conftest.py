"""The examples' tests: each test module gives its App as ``harvest_app`` and uses
``harvest_env``, the test kit's environment (docs/testing.md), as a user's test would.

``harvest_env`` is overridden here only to run on a clone of the suite's migrated template
(tests/conftest.py ``db``) instead of the plugin's own server, which would migrate a second
template in this process.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from harvest import App
from harvest.testing import WorkflowEnvironment


@pytest.fixture
def harvest_env(
    harvest_app: App, db: str, harvest_env_options: dict[str, Any]
) -> Iterator[WorkflowEnvironment]:
    with WorkflowEnvironment(harvest_app, dsn=db, **harvest_env_options) as env:
        yield env
