"""`harvest health`: the management API's probes (GET /health, /health/ready) over HTTP.

Exit 0 when the API answers ready, 1 when it answers not ready (503) or cannot be reached."""

from __future__ import annotations

import sys

import click

from harvest.cli.output import emit, mapping, output_option


@click.command()
@click.option(
    "--probe",
    type=click.Choice(["ready", "live", "health"]),
    default="ready",
    show_default=True,
    help="ready: /health/ready (the database answers with this Harvest's schema); live: "
    "/health/live; health: /health.",
)
@output_option
def health(probe: str, output: str) -> None:
    """Ask the management API whether it is ready (--base-url or HARVEST_URL). Exit 0: ready."""
    from harvest.cli.http import http_session
    from harvest.cli.output import selected

    settings = selected()
    if settings is None:
        raise click.UsageError("harvest health speaks HTTP: give --base-url or set HARVEST_URL")
    path = {"ready": "/health/ready", "live": "/health/live", "health": "/health"}[probe]
    with http_session(settings) as http:
        status, data = http.request("GET", path, ok=(503,))
    data = data if isinstance(data, dict) else {}
    shown = {k: v for k, v in data.items() if k != "error"}
    shown.setdefault("status", "ok" if status < 400 else "not_ready")
    emit(shown, output, mapping)
    if status >= 400 or shown.get("status") not in ("ok", "ready"):
        sys.exit(1)
