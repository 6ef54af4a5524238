"""The application_name of the connections a command opens (libpq reads ``PGAPPNAME``).

The root group sets ``harvest-cli`` for every command, unless the caller's own ``PGAPPNAME``
names them: the audit log records operator actions made through the CLI with source cli
(``harvest._audit_source`` reads a face's name). A long-running process renames its connections
once it knows what it runs (:func:`name_connections`: ``harvest worker``, ``serve``, ``dev``), to
one of ``harvest.db.connection.PROCESS_APPLICATION_NAMES``, none of them a face's
(docs/operations.md, "Connection names"). Imported by the root group: click and os only.
"""

from __future__ import annotations

import os

import click

CLI_APPLICATION_NAME = "harvest-cli"
# ctx.meta: PGAPPNAME is this invocation's default (the caller gave none), so a command may rename it.
DEFAULT_APPLICATION_NAME_KEY = "harvest.default_application_name"


def name_connections(name: str) -> None:
    """Name the connections this command opens from now on ``name`` (PGAPPNAME), unless the
    caller's own PGAPPNAME names them. The root group puts the caller's back when the command ends."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None and ctx.meta.get(DEFAULT_APPLICATION_NAME_KEY):
        os.environ["PGAPPNAME"] = name
