"""Round trips counted from libpq's own trace (PQtrace) of every async connection a pool opens
from now on: each message a connection sent, one file per connection. A round trip is a message
the client then waits on the server's answer for: a Sync (the end of an extended-protocol
pipeline, however many statements it carried) or a simple Query (psycopg's BEGIN and COMMIT)."""

from __future__ import annotations

import ctypes
import os
import re
from pathlib import Path

import psycopg
import pytest

from harvest.db import connection

# What ends a round trip (libpq's trace names the frontend's messages).
WAITED_ON = frozenset({"Sync", "Query"})
# A message the client sent, as the trace's line begins it: F, its length, its name, its fields.
_SENT = re.compile(r"F\t\d+\t(?P<message>\w+)\t?(?P<text>.*)")


class LibpqTrace:
    """Traces each RedactingAsyncConnection (the pools' connections) connected after it is made
    (``monkeypatch`` undoes it at the test's end). :meth:`sent` reads what was sent since the
    last read; the files stay open until the connections close."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch, folder: Path):
        self._files: list[Path] = []
        self._read: dict[Path, int] = {}
        connect = connection.RedactingAsyncConnection.connect.__func__  # type: ignore[attr-defined]

        async def traced(cls, conninfo: str = "", **kwargs):  # type: ignore[no-untyped-def]
            conn = await connect(cls, conninfo, **kwargs)
            path = folder / f"connection-{len(self._files)}.trace"
            self._files.append(path)
            conn.pgconn.trace(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600))
            conn.pgconn.set_trace_flags(psycopg.pq.Trace.SUPPRESS_TIMESTAMPS | psycopg.pq.Trace.REGRESS_MODE)
            return conn

        monkeypatch.setattr(connection.RedactingAsyncConnection, "connect", classmethod(traced))

    def sent(self) -> list[tuple[str, str]]:
        """(message, its text) for each message the traced connections sent since the last call."""
        ctypes.CDLL(None).fflush(None)  # (libpq writes the trace through stdio buffers)
        found = []
        for path in self._files:
            with path.open() as trace:
                trace.seek(self._read.get(path, 0))
                for line in trace:  # (a statement's text may go on over lines of its own)
                    if (sent := _SENT.match(line)) is not None:
                        found.append((sent["message"], sent["text"]))
                self._read[path] = trace.tell()
        return found

    def round_trips(self) -> int:
        """The round trips the traced connections made since the last read."""
        return sum(message in WAITED_ON for message, _ in self.sent())
