"""pytest fixtures for testing Harvest workflows, registered by the package (entry point
``pytest11``), so installing harvest is enough. Each fixture is opt-in: nothing starts until a
test asks for it by name.

- ``harvest_app``: your :class:`harvest.App`. Define this fixture yourself (in a conftest.py).
- ``harvest_env_options``: keyword arguments for the environment (``time_skipping``,
  ``concurrency``, ...); ``{}`` unless you override it.
- ``harvest_server``: the process's shared PostgreSQL (``default_server()``: embedded, or
  ``HARVEST_TEST_DSN``), with a migrated template.
- ``harvest_database``: the DSN of a migrated database of the test's own, cloned from it.
- ``harvest_env``: a started :class:`harvest.testing.WorkflowEnvironment` running ``harvest_app``
  on a database of its own (time skipping, activity mocks), closed after the test.

docs/testing.md has examples.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest


@pytest.fixture(scope="session")
def harvest_server() -> Any:
    """The process's shared PostgreSQL (``default_server()``, stopped when the process exits):
    the one a ``WorkflowEnvironment(app)`` given no server clones on, so a suite that uses both
    starts and migrates one server, not two."""
    from harvest.testing.server import default_server

    return default_server()


@pytest.fixture
def harvest_database(harvest_server: Any) -> Iterator[str]:
    """The DSN of a migrated database of this test's own, dropped after it."""
    name, dsn = harvest_server.new_database()
    try:
        yield dsn
    finally:
        harvest_server.drop_database(name)


@pytest.fixture
def harvest_app() -> Any:
    """Override this fixture: it returns the App the environment's worker runs."""
    raise pytest.UsageError(
        "the harvest_env fixture needs your App: define a fixture named harvest_app that returns "
        "it (in conftest.py: `def harvest_app(): return App(workflows=[...])` under `@pytest.fixture`)"
    )


@pytest.fixture
def harvest_env_options() -> dict[str, Any]:
    """Keyword arguments for WorkflowEnvironment (override to change them)."""
    return {}


@pytest.fixture
def harvest_env(harvest_app: Any, harvest_server: Any, harvest_env_options: dict[str, Any]) -> Iterator[Any]:
    """A started WorkflowEnvironment running ``harvest_app``, closed after the test."""
    from harvest.testing.environment import WorkflowEnvironment

    with WorkflowEnvironment(harvest_app, server=harvest_server, **harvest_env_options) as env:
        yield env
