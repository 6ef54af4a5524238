"""`--app` on the commands that show payloads: decode them with an App's codecs and payload store
(docs/payloads.md, "A key-holding CLI").

Without ``--app`` the CLI holds no keys: a payload shows what it is (``"<encrypted (key k1)>"``,
``harvest.core.codecs.describe_tree``) and a full export keeps envelopes as stored. With
``--app module:app`` the App is imported (``harvest.cli.worker.load_app``, as `replay` and
`shard rebalance` import theirs) and its ``Payloads`` decodes: over SQL, offloaded payloads are
read back through its store, then envelopes decoded (`events tail` reads its back on each
database's event source and decodes as it prints, once); over HTTP (the API holds no keys and
answers payloads as stored, its own store's references resolved) the envelopes are decoded here,
after the read. A key the App lacks is one line naming it (``PayloadKeyMissing``, exit 1).

The commands that write payloads (`workflow start`, `signal`, `bulk-signal`, `activity complete`,
`heartbeat`) take the same ``--app`` and write through a client given the App's ``Payloads``
(``cli_client(url, reveal.payloads)``), which encodes them as a ``Client(codecs=...)`` does, and
over SQL offloads the ones over its ``offload_bytes`` to its store; over HTTP they are encoded here
and the API stores the envelopes as sent (it holds no keys). A key the App cannot encode with is
one line too, before anything is written (:meth:`Reveal.writing`).
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

import click

from harvest.cli.output import AliasedOption
from harvest.core.codecs import describe_tree
from harvest.core.errors import PayloadKeyMissing

if TYPE_CHECKING:
    from harvest.core.codecs import Payloads
    from harvest.db.event_stream import EventSource

F = TypeVar("F", bound=Callable[..., Any])

APP_HELP = (
    "module:attribute of an App: show payloads decoded with its codecs and payload store "
    "(it holds the keys); default: encrypted payloads show as <encrypted (key k1)>."
)


WRITE_HELP = (
    "module:attribute of an App: encode what this command writes with its codecs (over SQL, "
    "offloading to its payload store), as its workers and a Client(codecs=...) do; default: "
    "written as given."
)


def app_option(f: F) -> F:
    """``--app`` for a command that shows payloads (the same option name as `replay --app`)."""
    return click.option("--app", "app_target", default=None, metavar="MODULE:APP", help=APP_HELP)(f)


def app_write_option(f: F) -> F:
    """``--app`` for a command that writes payloads (the App whose codecs encode them)."""
    return click.option("--app", "app_target", default=None, metavar="MODULE:APP", help=WRITE_HELP)(f)


def signal_payload_options(f: F) -> F:
    """``--input-json`` / ``--input-file``: a signal's payload, named as `start`'s, `query`'s and
    `update`'s input (``--payload-json`` / ``--payload-file``, the old names, still accepted)."""
    inline, from_file = "The signal payload as JSON.", "Read the payload JSON from a file (- for stdin)."
    f = click.option("--input-file", "--payload-file", "payload_file", cls=AliasedOption, help=from_file)(f)
    return click.option("--input-json", "--payload-json", "payload_json", cls=AliasedOption, help=inline)(f)


class Reveal:
    """How one command shows payloads: described (no ``--app``) or decoded by an App's policy."""

    def __init__(self, target: str | None):
        self.target = target
        self.payloads: Payloads | None = None
        if target is not None:
            from harvest.cli.worker import load_app  # (the App's module: only when asked for)

            self.payloads = load_app(target).payloads

    def __bool__(self) -> bool:
        return self.payloads is not None

    def decoded(self, sql: Any, value: Any) -> Any:
        """``value`` with its payloads decoded: over SQL (``sql`` a SqlApi) offloaded ones read
        back through the App's store first; over HTTP (an HttpApi) the envelopes only (the
        route resolved its store's references). Without ``--app``: ``value`` as it is."""
        if self.payloads is None:
            return value
        with self.keys_named():
            from harvest.cli.http import HttpApi

            if sql is None or isinstance(sql, HttpApi):
                return self.payloads.chain.decode_tree(value)
            from harvest.client.payloads import decoded
            from harvest.db.steps import run_steps

            return run_steps(decoded(self.payloads, value), sql)

    def shown(self, sql: Any, value: Any) -> Any:
        """``value`` as a command prints it: decoded with ``--app``; what is left encoded (every
        envelope without it, a reference no store resolved, an erased payload) by what it is."""
        return describe_tree(self.decoded(sql, value))

    def shown_rows(self, apis: Mapping[int, Any], rows: list[Any]) -> list[Any]:
        """Rows of a read over every shard (each with its ``shard_id``) as :meth:`shown`, each
        decoded over its own shard's API (``apis``; over HTTP none: the envelopes only)."""
        return [self.shown(apis.get(row.get("shard_id")), row) for row in rows]

    async def read_back(self, source: EventSource, value: Any) -> Any:
        """``value`` (an event's data, followed over SQL) with its offloaded payloads read back
        through the App's store on the event source's reading connection, its envelopes left
        as stored: the tail decodes each event once, as it prints it, whichever way it was read
        (``decoded(None, ...)``; decoded here too, a payload that holds an envelope-shaped value
        would be decoded twice). Without ``--app``, as it is (the tail shows a reference by
        what it is)."""
        if self.payloads is None:
            return value
        from harvest.client.payloads import resolved

        return await source.run(resolved(self.payloads, value))

    @contextlib.contextmanager
    def keys_named(self) -> Iterator[None]:
        """A key missing, said as the CLI's one line: which key, and where to give it."""
        try:
            yield
        except PayloadKeyMissing as exc:
            raise self.key_missing(exc) from None

    @contextlib.contextmanager
    def writing(self) -> Iterator[None]:
        """A key the App's codecs cannot encode with (a codec that holds no current key, say a
        key service that would not hand it out), said as the CLI's one line. The client encodes
        before its first statement, so nothing was written."""
        try:
            yield
        except PayloadKeyMissing as exc:
            if self.target is None:
                raise
            raise self.key_missing(exc, writing=True) from None

    def key_missing(self, exc: PayloadKeyMissing, *, writing: bool = False) -> PayloadKeyMissing:
        from harvest.cli.http import ServerLacksKey

        if isinstance(exc, ServerLacksKey):  # the server's decoding, not the App's: as it said
            return exc
        if writing:
            held = f"it holds {', '.join(exc.known)}" if exc.known else "it holds none"
            text = (
                f"--app {self.target}: cannot encode with key {exc.key_id!r}, which this App does not "
                f"hold ({held}): nothing was written; give its codec key {exc.key_id!r}"
            )
        elif self.target is None:
            text = (
                f"payload is encrypted with key {exc.key_id!r} and the CLI holds no keys: give "
                f"--app module:app, an App whose AesGcmCodec holds key {exc.key_id!r}"
            )
        else:
            held = f"it holds {', '.join(exc.known)}" if exc.known else "it has no encryption codec"
            text = (
                f"--app {self.target}: payload is encrypted with key {exc.key_id!r}, which this App "
                f"does not hold ({held}): add key {exc.key_id!r} to its AesGcmCodec(keys=...)"
            )
        error = PayloadKeyMissing(exc.key_id, exc.known)
        error.args = (text,)
        return error
