"""The dashboard (issue 17): server-rendered pages over the SQL API, mounted at ``/ui`` of the
management app, or served alone with :func:`dashboard_app` (docs/dashboard.md). Needs the
``web`` extra (Starlette, Jinja2)."""

from harvest.core.extras import missing_extra

try:  # the [web] extra: Starlette, Jinja2
    from harvest.web.ui.app import dashboard_app
except ImportError as exc:
    raise missing_extra("harvest.web.ui", "web", exc) from exc

__all__ = ["dashboard_app"]
