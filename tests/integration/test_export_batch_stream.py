"""`harvest history export-batch` over SQL writes the batch as it reads it.

The command built the whole document (every history of the batch, up to 10,000 of them) in
memory, then wrote it: no byte went out before every event of every run was read. It now
writes each piece as it is read, each history from a server-side cursor, in the bytes the
whole document was written in (json.dumps(indent=2) of it).
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterator
from typing import Any

from click.testing import CliRunner

from harvest.cli import export_batch as cli_export_batch
from harvest.cli.main import main
from harvest.cli.output import json_default
from harvest.core.payload import redact
from harvest.db.sqlapi import SqlApi

ENV = {"HARVEST_DATABASE_URL": None, "HARVEST_URL": None, "HARVEST_TOKEN": None, "HARVEST_CONFIG": None}
RUNS = 3
SIGNALS = 40  # events a run's history holds beyond its start


def test_the_batch_is_written_as_its_histories_are_read(db: str, conn: Any, client: Any, monkeypatch) -> None:
    ids = [
        client.start_workflow("nobody_runs_this", n, workflow_id=f"stream-{n}").execution_id
        for n in range(RUNS)
    ]
    for execution_id in ids:
        for n in range(SIGNALS):
            client.get_handle(execution_id).signal("poke", n)
    api = SqlApi(conn)
    total = sum(len(api.get_history(execution_id)) for execution_id in ids)

    read = [0]  # events read from the database so far
    for name in ("get_history", "iter_history"):
        original = getattr(SqlApi, name)

        def counted(self: Any, *args: Any, _original: Any = original, **kwargs: Any) -> Any:
            answer = _original(self, *args, **kwargs)
            if isinstance(answer, list):
                read[0] += len(answer)
                return answer

            def each() -> Iterator[Any]:
                for event in answer:
                    read[0] += 1
                    yield event

            return each()

        monkeypatch.setattr(SqlApi, name, counted)

    writes: list[tuple[int, str]] = []  # (events read by then, what was written)

    class Recorder:
        def write(self, text: str) -> int:
            writes.append((read[0], text))
            return len(text)

        def writelines(self, lines: Any) -> None:
            for line in lines:
                self.write(line)

    @contextlib.contextmanager
    def recorded(path: str, private: bool = False) -> Iterator[Recorder]:
        yield Recorder()

    monkeypatch.setattr(cli_export_batch, "output_file", recorded)
    out = CliRunner().invoke(
        main, ["history", "export-batch", "--database-url", db, "--state-group", "all"], env=ENV
    )
    assert out.exit_code == 0, out.output
    assert read[0] == total
    # The first history's text went out before the last history was read (it waited for all).
    first_event = next(i for i, (_, text) in enumerate(writes) if '"event_id"' in text)
    assert writes[first_event][0] < total, f"{writes[first_event][0]} of {total} events read before"

    # The bytes json.dumps(indent=2) gave of the whole document.
    text = "".join(t for _, t in writes)
    doc = json.loads(text)
    expected = {
        "schema": "harvest.history_export_batch",
        "version": 1,
        "status": "complete",
        "payload_policy": "redacted",
        "exports": [
            {
                **{k: e[k] for k in ("execution_id", "shard_id", "workflow_name")},
                **redact(
                    {
                        "execution": api.get_execution(e["execution_id"]),
                        "events": api.get_history(e["execution_id"]),
                        "redacted": True,
                    }
                ),
            }
            for e in doc["exports"]
        ],
        "failures": [],
        "shard_coverage": doc["shard_coverage"],
    }
    assert sorted(e["execution_id"] for e in doc["exports"]) == sorted(ids)
    assert text == json.dumps(expected, default=json_default, indent=2) + "\n"
