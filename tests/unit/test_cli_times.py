"""Every time option of the CLI reads any ISO 8601 spelling, one way (harvest/cli/output.py
ISO_TIME): four lists of strptime formats had some commands refuse ``2026-01-31T09:30``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import click
import pytest
from click.testing import CliRunner

from harvest.cli.main import main
from harvest.cli.output import ISO_TIME


def _options(group: click.Group, path: str = "harvest") -> list[tuple[str, click.Parameter]]:
    """Every option of every command below ``group`` (the root loads its groups lazily)."""
    found = []
    ctx = click.Context(group)
    for name in group.list_commands(ctx):
        command = group.get_command(ctx, name)
        assert command is not None
        where = f"{path} {name}"
        if isinstance(command, click.Group):
            found += _options(command, where)
        found += [(where, p) for p in command.params]
    return found


def test_every_time_option_reads_iso_8601_one_way() -> None:
    times = [(where, p) for where, p in _options(main) if isinstance(p.type, click.DateTime | type(ISO_TIME))]
    assert len(times) >= 10  # --from/--to, --created-*, --failed-*, --deadline, --updated-after
    assert [f"{where} {p.name}" for where, p in times if p.type is not ISO_TIME] == []


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("2026-01-31", datetime(2026, 1, 31, tzinfo=UTC)),
        ("2026-01-31T09:30", datetime(2026, 1, 31, 9, 30, tzinfo=UTC)),
        ("2026-01-31T09:30:05", datetime(2026, 1, 31, 9, 30, 5, tzinfo=UTC)),
        ("2026-01-31 09:30:05", datetime(2026, 1, 31, 9, 30, 5, tzinfo=UTC)),
        ("2026-01-31T09:30:05.25Z", datetime(2026, 1, 31, 9, 30, 5, 250000, tzinfo=UTC)),
        ("2026-01-31T09:30+02:00", datetime(2026, 1, 31, 9, 30, tzinfo=timezone(timedelta(hours=2)))),
    ],
)
def test_an_iso_time_is_read_with_no_offset_as_utc(text: str, expected: datetime) -> None:
    got = ISO_TIME.convert(text, None, None)
    assert got == expected and got.utcoffset() == timedelta(0)  # one instant, one text


@pytest.mark.parametrize("text", ["yesterday", "2026-13-01", "31/01/2026", ""])
def test_a_time_that_is_not_iso_8601_is_refused_with_examples_and_exit_2(text: str) -> None:
    r = CliRunner().invoke(
        main, ["workflow", "list", "--created-after", text, "--database-url", "postgresql://unused"]
    )
    assert r.exit_code == 2, r.output
    assert "is not an ISO 8601 time" in r.output and "2026-01-31T09:30" in r.output


def test_a_time_read_in_another_session_zone_prints_in_utc_over_either_transport() -> None:
    """Over SQL the CLI printed times in its session's zone (PGTZ=Pacific/Kiritimati: +14:00)
    and over HTTP in the server's: the same row read two ways printed two ways. Both write UTC."""
    from harvest.cli.output import _cell, json_default
    from harvest.web.errors import json_default as api_json_default

    kiritimati = datetime(2026, 1, 31, 23, 30, tzinfo=timezone(timedelta(hours=14)))
    assert json_default(kiritimati) == api_json_default(kiritimati) == "2026-01-31T09:30:00+00:00"
    assert _cell(kiritimati) == "2026-01-31T09:30:00+00:00"


def test_the_event_streams_and_events_tail_write_a_time_as_the_api_does() -> None:
    """The SSE data (one run's stream, the merged stream) and `events tail` wrote ``default=str``:
    a time read in a session's zone printed as ``2026-01-31 23:30:00+14:00`` there and as
    ``2026-01-31T09:30:00+00:00`` in every other answer."""
    import json

    from harvest.cli.events import _line
    from harvest.web.streams import _merged_sse, _sse

    kiritimati = datetime(2026, 1, 31, 23, 30, tzinfo=timezone(timedelta(hours=14)))
    utc = "2026-01-31T09:30:00+00:00"

    def event() -> dict:
        return {
            "global_id": 7,
            "execution_id": "e",
            "event_id": 1,
            "event_type": "SignalReceived",
            "event_data": {"at": kiritimati},
            "created_at": kiritimati,
            "workflow_name": "w",
            "workflow_id": "w1",
            "shard_id": 0,
        }

    for sent in (_sse(event(), "global_id"), _sse(event(), "event_id"), _merged_sse(event(), 0, "0:7")):
        data = json.loads(sent.decode().split("data: ", 1)[1])
        assert (data["created_at"], data["event_data"]["at"]) == (utc, utc), sent
    shown = json.loads(_line(event(), "json", None))
    assert (shown["created_at"], shown["event_data"]["at"]) == (utc, utc)
    text = _line(event(), "table", None)
    assert "2026-01-31T09:30:00.000+00:00" in text and f'{{"at":"{utc}"}}' in text, text


def test_no_json_of_the_package_writes_a_value_with_str() -> None:
    """``default=str`` writes a time in its session's zone with a space and a Decimal as a string:
    every face writes them with json_default (harvest.core.json_values)."""
    from pathlib import Path

    import harvest

    root = Path(harvest.__file__).parent
    found = [str(p.relative_to(root)) for p in root.rglob("*.py") if "default=str" in p.read_text()]
    assert found == []
