"""The management API through its ASGI app, for the web tests."""

from __future__ import annotations

from harvest.config import load_config


def api_client(dsn: str | None, *, env: dict[str, str] | None = None, **options):
    """A TestClient over management_app (its lifespan run), with the config of ``env`` only."""
    from starlette.testclient import TestClient

    from harvest.web.app import management_app

    options.setdefault("profile", "dev")
    app = management_app(dsn=dsn, config=load_config(env=env or {}), **options)
    return TestClient(app, headers={"Accept": "application/json"})
