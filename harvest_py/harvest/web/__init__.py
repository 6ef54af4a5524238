"""The HTTP face of Harvest: the management API, its event streams and the dashboard.

A face like the CLI: handlers call the SQL API (``harvest.db``) and the shard pools, and hold no
engine logic. ``harvest.web.management_app`` (harvest/web/app.py) needs the ``web`` extra
(Starlette); ``import harvest`` does not.
"""

from typing import Any

__all__ = ["management_app"]


def __getattr__(name: str) -> Any:
    """``harvest.web.management_app``, imported when first asked for (it needs Starlette)."""
    if name == "management_app":
        from harvest.web.app import management_app

        return management_app
    raise AttributeError(f"module 'harvest.web' has no attribute {name!r}")
