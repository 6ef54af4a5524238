"""`harvest token create|list|revoke`: API tokens of the management API (functions/tokens.sql,
docs/auth.md). Needs a login with harvest_admin. On shards the tokens live on the default shard,
where the server's authorizer reads them: over SQL with ``[shards]`` as over HTTP."""

from __future__ import annotations

from typing import Any

import click

from harvest.cli.output import database_url_option, emit, mapping, output_option, table
from harvest.cli.shards import shard_api
from harvest.core.durations import parse_duration
from harvest.shard.fanout import TOKEN_PAGE, TOKEN_PAGE_MAX, token_after, token_page

COLUMNS = [
    "token_id",
    "name",
    "scope",
    "payloads",
    "created_at",
    "created_by",
    "expires_at",
    "revoked_at",
    "revoked_by",
]


@click.group()
def token() -> None:
    """API tokens for the HTTP management API: read, operate or admin."""


@token.command("create")
@click.argument("name")
@click.option(
    "--scope",
    type=click.Choice(["read", "operate", "admin"]),
    required=True,
    help="read (harvest_reader), operate (harvest_operator) or admin (harvest_admin).",
)
@click.option(
    "--expires-in",
    default=None,
    help="Refuse the token after this long, e.g. 90d, 12h (default: it lives until revoked).",
)
@click.option(
    "--no-payloads",
    "no_payloads",
    is_flag=True,
    help="The token sees states and metadata, never a payload: every answer the API gives it is "
    "redacted, and what only a payload answers (a query, an update) is refused (docs/security.md).",
)
@database_url_option
@output_option
def create(
    name: str, scope: str, expires_in: str | None, no_payloads: bool, database_url: str | None, output: str
) -> None:
    """Create a token and print its secret. It is shown this once: store it now (the database
    keeps only its SHA-256)."""
    lifetime = None if expires_in is None else parse_duration(expires_in, "--expires-in", positive=True)
    with shard_api(database_url, None, read_only=False) as sql:
        made = sql.create_api_token(name, scope, lifetime, not no_payloads)
    shown = ["token_id", "name", "scope", "payloads", "created_at", "expires_at", "secret"]
    emit(made, output, lambda d: mapping(d, shown))
    if output != "json":
        click.echo(
            "store the secret now: it is not shown again (send it as Authorization: Bearer <secret>)",
            err=True,
        )


@token.command("list")
@click.option("--all", "include_revoked", is_flag=True, help="Revoked tokens too.")
@click.option(
    "--limit",
    type=click.IntRange(1, TOKEN_PAGE_MAX),
    default=TOKEN_PAGE,
    show_default=True,
    help="Tokens at most on this page.",
)
@click.option("--cursor", default=None, help="next_cursor from the previous page (with the same --all).")
@database_url_option
@output_option
def list_(
    include_revoked: bool, limit: int, cursor: str | None, database_url: str | None, output: str
) -> None:
    """List the tokens (never their secrets), live ones first: a page of --limit, the next with
    --cursor (as GET /admin/tokens)."""
    after = token_after(cursor, include_revoked)
    with shard_api(database_url, None, read_only=True) as sql:
        # One more than the page says whether there is a next one.
        rows, next_cursor = token_page(
            sql.list_api_tokens(include_revoked, after, limit + 1), limit, include_revoked
        )

    def render(d: dict[str, Any]) -> str:
        text = f"{table(d['tokens'], COLUMNS)}\n{len(d['tokens'])} token(s)"
        return text + (f"; next page: --cursor {next_cursor}" if next_cursor else "")

    emit({"tokens": rows, "next_cursor": next_cursor}, output, render)


@token.command("revoke")
@click.argument("name")
@database_url_option
@output_option
def revoke(name: str, database_url: str | None, output: str) -> None:
    """Revoke the live token NAME: the next request that presents it is refused (401)."""
    with shard_api(database_url, None, read_only=False) as sql:
        token_id = sql.revoke_api_token(name)
    emit(
        {"name": name, "token_id": token_id, "revoked": True},
        output,
        lambda d: f"revoked token {name!r} (id {token_id})",
    )
