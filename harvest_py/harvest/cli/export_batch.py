"""`harvest history export-batch`: a bounded batch of histories for a release gate's replay
(docs/payloads.md "Exports", the spec's "Exporting a history fixture").

One JSON document ``{schema, version, status, exports, failures, shard_coverage}``: ``exports``
holds one ``harvest history export`` document per run (with its ``shard_id``); ``failures`` the
runs that matched but could not be exported; ``status`` is ``complete``, or ``partial`` /
``unavailable`` when a shard could not be read (``shard_coverage`` names which). A batch that is
not complete exits 1 after writing the file: treat it as a blocked release gate.
"""

from __future__ import annotations

import contextlib
import functools
import itertools
import json
import sys
from collections.abc import Iterable, Iterator
from datetime import datetime
from typing import TYPE_CHECKING, Any

import click

from harvest.cli.http import http_session
from harvest.cli.json_stream import Reindented, reindented
from harvest.cli.output import ISO_TIME, database_url_option, output_file, selected
from harvest.cli.payloads import Reveal, app_option
from harvest.cli.shards import each_shard, open_shards
from harvest.client.history_export import EXPORT_PAGE_SIZE, MAX_LIMIT, STATE_GROUPS, resolved_in_batches
from harvest.core.errors import DatabaseUnavailable, HarvestError, PayloadError
from harvest.core.json_values import json_default
from harvest.core.payload import redact
from harvest.shard.fanout import COMPLETE, is_shard_failure, status_of

# The batch's steps (the SQL API, the database driver) are imported when it is read over SQL,
# never for --help (tests/unit/test_startup.py).
if TYPE_CHECKING:
    from harvest.client.export_batch import Candidate

ROUTE = "/history/export-batch"


@click.command("export-batch")
@click.option("--workflow-name", default=None, help="Only runs of this workflow.")
@click.option("--state-group", type=click.Choice(sorted(STATE_GROUPS)), default="terminal", show_default=True)
@click.option(
    "--updated-after",
    type=ISO_TIME,
    default=None,
    help="Only runs that ended (or, still running, started) after this instant (UTC unless given).",
)
@click.option("--limit", type=click.IntRange(1, MAX_LIMIT), default=100, show_default=True)
@click.option(
    "--payload-policy", type=click.Choice(["redacted", "full"]), default="redacted", show_default=True
)
@click.option(
    "--output-file", "--file", "path", default="-", show_default=True, help="Write here (- for stdout)."
)
@app_option
@database_url_option
def export_batch(
    workflow_name: str | None,
    state_group: str,
    updated_after: datetime | None,
    limit: int,
    payload_policy: str,
    path: str,
    app_target: str | None,
    database_url: str | None,
) -> None:
    """Export a bounded batch of recent histories (every shard) for replay in CI.

    Exit 0 when every shard was read; 1 (the file still written) when the batch is partial."""

    full = payload_policy == "full"
    reveal = Reveal(app_target)  # (decodes a full batch's payloads; a redacted one has none)
    settings = selected(database_url)
    if settings is not None and full and reveal:
        # The route's envelopes, decoded here (the API holds no keys): the answer is held whole.
        with http_session(settings) as http:
            text = http.read_text(
                ROUTE, _params(workflow_name, state_group, updated_after, limit, payload_policy)
            )
        try:
            document = json.loads(text)
        except ValueError as exc:
            raise DatabaseUnavailable(f"GET {ROUTE} broke off: {exc}") from None
        document["exports"] = reveal.decoded(None, document["exports"])
        with output_file(path, private=True) as out:
            out.write(json.dumps(document, default=json_default, indent=2) + "\n")
        status = document["status"]
        unavailable = list(document["shard_coverage"].get("unavailable") or [])
        exported = len(document["exports"])
    elif settings is not None:  # over the management API: the same document, built by the route
        params = _params(workflow_name, state_group, updated_after, limit, payload_policy)
        # The route streams its compact JSON; it is written as it arrives, re-indented to the
        # bytes json.dumps(indent=2) gives of the whole document (as over SQL), so no more than a
        # piece of the answer is held (the whole batch was, up to 10,000 histories). An answer
        # that breaks off fails the command: into a file, no file (output_file).
        answer = Reindented(streamed=("exports",))
        with http_session(settings) as http:
            http.download(
                ROUTE,
                params,
                lambda: output_file(path, private=payload_policy == "full"),
                lambda pieces: _reindented(pieces, answer),
            )
        status = answer.members["status"]
        unavailable = list(answer.members["shard_coverage"].get("unavailable") or [])
        exported = answer.items["exports"]
    else:
        # The newest `limit` runs over every shard first, then each is exported, in the batch's
        # order, from its shard (every shard's connection held meanwhile), and written as it is
        # read: each history from a server-side cursor, so no more than a page of events is held
        # (the whole document was, up to 10,000 histories). The bytes are json.dumps(indent=2)'s
        # of the whole document, as before.
        from harvest.client.export_batch import coverage, head, newest, shard_candidates
        from harvest.db.steps import run_steps

        picks = each_shard(
            database_url,
            lambda api: run_steps(shard_candidates(workflow_name, state_group, updated_after, limit), api),
            none_is_error=False,
        )
        chosen = newest(picks.results, limit)
        with open_shards(database_url) if chosen else _no_shards() as (apis, unreached):
            by_identity, lost = _identities(apis)
            unavailable = sorted({*picks.unavailable_shards, *unreached, *lost})
            read = set(picks.results) - set(unavailable)
            status = status_of(len(read), len(unavailable))
            failures: list[dict[str, Any]] = []
            written = [0]
            batch = {
                **head(status, payload_policy),
                "exports": _Streamed(_exports(chosen, by_identity, full, failures, written, reveal)),
                "failures": failures,  # filled while the exports are written, before it is
                "shard_coverage": coverage(read, unavailable),
            }
            with output_file(path, private=payload_policy == "full") as out:
                for piece in json.JSONEncoder(default=json_default, indent=2).iterencode(batch):
                    out.write(piece)
                out.write("\n")
        exported = written[0]
    if path != "-":
        click.echo(f"wrote {path}: {exported} export(s), status {status}", err=True)
    if status != COMPLETE:
        click.echo(
            f"warning: shard(s) {', '.join(map(str, unavailable))} could not be read: the "
            "batch is partial (a blocked release gate until they are exported or waived)",
            err=True,
        )
        sys.exit(1)


def _params(
    workflow_name: str | None, state_group: str, updated_after: datetime | None, limit: int, policy: str
) -> dict[str, Any]:
    return {
        "workflow_name": workflow_name,
        "state_group": state_group,
        "updated_after": updated_after,
        "limit": limit,
        "payload_policy": policy,
    }


def _reindented(pieces: Iterable[str], batch: Reindented) -> Iterator[str]:
    try:
        yield from reindented(pieces, batch)
    except ValueError as exc:  # (the route ends an answer short when it fails in the middle)
        raise DatabaseUnavailable(f"GET {ROUTE} broke off: {exc}") from None
    yield "\n"


class _Streamed(list):  # type: ignore[type-arg]
    """A JSON array written as ``items`` produces it: json's encoder with an indent (the
    pure-Python one, whose bytes json.dumps(indent=2) writes) asks a list only whether it is
    empty and iterates it, so the array's items are read once, while it is being written."""

    def __init__(self, items: Iterable[Any]) -> None:
        super().__init__()
        self._items = iter(items)
        self._first: list[Any] | None = None

    def __bool__(self) -> bool:
        if self._first is None:
            self._first = list(itertools.islice(self._items, 1))
        return bool(self._first)

    def __iter__(self) -> Iterator[Any]:
        self.__bool__()
        yield from self._first or ()
        yield from self._items


@contextlib.contextmanager
def _no_shards() -> Iterator[tuple[dict[int, Any], list[int]]]:
    yield {}, []  # nothing chosen: no export, no shard asked again


def _identities(apis: dict[int, Any]) -> tuple[dict[int, Any], list[int]]:
    """Each opened shard by the shard id its database holds (what the candidates carry), and
    the shards lost meanwhile."""
    from harvest.client.export_batch import shard_id
    from harvest.db.steps import run_steps

    by_identity: dict[int, Any] = {}
    lost: list[int] = []
    for s, api in apis.items():
        try:
            by_identity[run_steps(shard_id(), api)] = api
        except Exception as exc:
            if not is_shard_failure(exc):
                raise
            lost.append(s)
    return by_identity, lost


def _exports(
    chosen: list[Candidate],
    by_identity: dict[int, Any],
    full: bool,
    failures: list[Any],
    written: list[int],
    reveal: Reveal,
) -> Iterator[dict[str, Any]]:
    """Each chosen run's export, in order, its events read as they are written (redacted unless
    ``full``; then offloaded payloads read back, and with --app decoded); a run that could not
    be read is a failure (its shard unreached, or its row gone), and the batch goes on."""
    from harvest.client.export_batch import export_key, failure, resolved
    from harvest.db.steps import run_steps

    def full_payloads(sql: Any, value: Any) -> Any:
        return reveal.decoded(sql, value) if reveal else run_steps(resolved(value), sql)

    for candidate in chosen:
        sql = by_identity.get(candidate["shard_id"])
        if sql is None:
            failures.append(failure(candidate, f"shard {candidate['shard_id']} could not be read"))
            continue
        try:
            execution = sql.get_execution(candidate["execution_id"])
            if full:
                execution = full_payloads(sql, execution)
        except PayloadError:  # a key the --app App lacks: the command's error, not the run's
            raise
        except HarvestError as exc:
            failures.append(failure(candidate, str(exc)))
            continue
        events = sql.iter_history(candidate["execution_id"], EXPORT_PAGE_SIZE)
        written[0] += 1
        yield {
            **export_key(candidate),
            "execution": execution if full else redact(execution),
            "events": _Streamed(
                resolved_in_batches(events, functools.partial(full_payloads, sql), EXPORT_PAGE_SIZE)
                if full
                else (redact(e) for e in events)
            ),
            "redacted": not full,
        }
