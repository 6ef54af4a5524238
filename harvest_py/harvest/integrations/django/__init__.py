"""Django: ``settings.HARVEST``, a client for views, and ``manage.py harvest_worker``.

::

    # settings.py
    INSTALLED_APPS = [..., "harvest.integrations.django"]
    HARVEST = {
        "app": "billing.workflows.app",            # dotted path of your harvest.App
        "database_url": "postgresql://...",        # or HARVEST_DATABASE_URL (preferred for secrets)
        "worker": {"concurrency": 8},              # any harvest.toml key, same sections
    }

    # views.py
    from harvest.integrations.django import get_client

    def checkout(request, order_id):
        handle = get_client().start_workflow("checkout", order_id, workflow_id=f"order-{order_id}")
        return JsonResponse({"execution_id": handle.execution_id})

``python manage.py harvest_worker`` runs the App's worker. ``HARVEST`` takes the keys of
``harvest.toml`` (docs/install.md) plus ``app``; ``HARVEST_*`` variables win over it, as they do
over the file. docs/integrations.md is the guide.
"""

from __future__ import annotations

import atexit
import threading
from collections.abc import Mapping
from typing import Any

from harvest.client.client import Client
from harvest.config import config_from_mapping, shard_pools
from harvest.config.config import Config
from harvest.config.process import is_sharded, worker_dsn
from harvest.core.errors import ConfigError
from harvest.core.extras import missing_extra
from harvest.declare.definitions import App

try:  # the [django] extra: Django itself, read when a view asks for the client
    import django  # noqa: F401
except ImportError as exc:
    raise missing_extra("harvest.integrations.django", "django", exc) from exc

__all__ = ["SETTING", "close_client", "get_app", "get_client", "get_config"]

# The name of the Django setting.
SETTING = "HARVEST"
# The one key of settings.HARVEST that is not harvest.toml's: the App's dotted path.
APP_KEY = "app"
# Where a Django process takes its database besides HARVEST_DATABASE_URL (no harvest.toml, no flag).
DSN_HINT = f'"database_url" in settings.{SETTING}'

_lock = threading.Lock()
_client: Client | None = None
_pools: Any = None


def _settings() -> Mapping[str, Any]:
    from django.conf import settings

    value = getattr(settings, SETTING, None)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise ConfigError(
            f"settings.{SETTING} must be a dict of harvest.toml keys, got {type(value).__name__}"
        )
    return value


def get_config() -> Config:
    """``settings.HARVEST`` (less ``app``) as a :class:`harvest.config.Config`, with the
    ``HARVEST_*`` variables over it; a bad key or value is a ConfigError naming it."""
    data = {key: value for key, value in _settings().items() if key != APP_KEY}
    return config_from_mapping(data, f"settings.{SETTING}")


def get_app() -> App | None:
    """The :class:`harvest.App` that ``settings.HARVEST["app"]`` names (a dotted path, imported
    once by Python's module cache), or None when it names none."""
    target = _settings().get(APP_KEY)
    if target is None:
        return None
    if isinstance(target, App):
        return target
    from django.utils.module_loading import import_string

    try:
        app = import_string(target)
    except ImportError as exc:
        raise ConfigError(f"settings.{SETTING}[{APP_KEY!r}] = {target!r} cannot be imported: {exc}") from None
    if not isinstance(app, App):
        raise ConfigError(
            f"settings.{SETTING}[{APP_KEY!r}] = {target!r} is a {type(app).__name__}, not a harvest.App"
        )
    return app


def get_client() -> Client:
    """The process's :class:`harvest.Client` (opened on first use, shared by every thread,
    closed at exit or when ``settings.HARVEST`` changes), with the App's payload codecs. It is
    synchronous: from an ``async def`` view, call it through ``asgiref.sync.sync_to_async``."""
    global _client, _pools
    with _lock:
        if _client is None:
            config = get_config()
            app = get_app()
            codecs = app.payloads if app is not None else None
            if is_sharded(config):
                pools = shard_pools(config, worker_dsn(config, hint=DSN_HINT))
                try:
                    _client = Client(shards=pools, codecs=codecs)
                except BaseException:  # (the next call opens pools again: these would be left open)
                    pools.close()
                    raise
                _pools = pools
            else:
                _client = Client(worker_dsn(config, hint=DSN_HINT), codecs=codecs)
        return _client


def close_client() -> None:
    """Close the shared client (the next :func:`get_client` opens a new one)."""
    global _client, _pools
    with _lock:
        client, pools, _client, _pools = _client, _pools, None, None
    if client is not None:
        client.close()
    if pools is not None:
        pools.close()


atexit.register(close_client)
