"""A schedule's timing and options answer alike on every face: the management API's body (and the
dashboard's forms, harvest.web.schedule_spec), the CLI's options (harvest.cli.schedule) and a
declaration (``Schedule.cron`` / ``WorkflowSchedule``), by the one set of rules in
harvest.declare.schedules. Each case is a rule two faces used to answer differently; nothing here
reaches a database (the CLI refuses before it connects).
"""

from __future__ import annotations

from typing import Any

import pytest
from click.testing import CliRunner

from harvest.cli.main import main
from harvest.core.errors import InvalidArgument
from harvest.declare.schedules import Schedule, WorkflowSchedule
from harvest.web.schedule_spec import create_arguments, update_changes

MAX_ACTIVE_RUNS = 1_000_000  # (the API's and the CLI's bound before it was one constant)
NOWHERE = "postgresql://127.0.0.1:1/none"  # never reached: the options are refused first


def _api_refuses(body: dict[str, Any], field: str, said: str, *, update: bool = False) -> None:
    def answer() -> object:
        if update:
            return update_changes(body)
        return create_arguments({"name": "s", **body}, lambda _workflow, queue: queue)

    with pytest.raises(InvalidArgument) as raised:
        answer()
    assert getattr(raised.value, "field", None) == field, raised.value
    assert str(raised.value).startswith(f"{field}: ") and said in str(raised.value), raised.value


def _cli_refuses(args: list[str], said: str) -> None:
    result = CliRunner().invoke(main, ["schedule", *args, "--database-url", NOWHERE])
    assert isinstance(result.exception, SystemExit | None), repr(result.exception)
    lines = result.output.strip().splitlines()
    assert result.exit_code == 2 and len(lines) == 1, (result.exit_code, result.output)
    assert lines[0].startswith("error: ") and said in lines[0], result.output


def test_an_empty_zone_is_refused_naming_tz_as_a_declaration_refuses_it() -> None:
    """tz "" with a cron: a declaration refused it; the API took it for UTC, the CLI ignored it
    (a create in UTC, an update keeping the schedule's zone). Now refused everywhere."""
    with pytest.raises(InvalidArgument, match="tz must be an IANA zone name"):
        Schedule.cron("0 3 * * *", tz="")
    _api_refuses({"cron": "0 3 * * *", "tz": ""}, "tz", "tz must be an IANA zone name")
    _api_refuses({"cron": "0 3 * * *", "tz": ""}, "tz", "tz must be an IANA zone name", update=True)
    cron = ["--cron", "0 3 * * *", "--tz", ""]
    _cli_refuses(["create-workflow", "--name", "s", *cron], "tz must be an IANA zone name")
    _cli_refuses(["update", "s", *cron], "tz must be an IANA zone name")


def test_a_zone_given_with_an_interval_is_refused_even_empty() -> None:
    """tz "" with an interval: the API refused it (a zone goes with a cron), the CLI ignored it."""
    _api_refuses({"every": "1h", "tz": ""}, "tz", "tz goes with cron")
    _cli_refuses(["create-workflow", "--name", "s", "--every", "1h", "--tz", ""], "--tz goes with --cron")


def test_an_empty_cron_is_given_not_absent() -> None:
    """cron "" beside an interval: the API refused the two together, the CLI ignored the cron."""
    _api_refuses({"cron": "", "every": "1h"}, "every", "give cron or every, not both")
    _cli_refuses(
        ["create-workflow", "--name", "s", "--cron", "", "--every", "1h"], "give --cron or --every, not both"
    )


def test_max_active_runs_has_one_bound() -> None:
    """Past 1000000: the API and the CLI refused it, a declaration took it."""
    with pytest.raises(InvalidArgument, match=f"max_active_runs must be an int from 1 to {MAX_ACTIVE_RUNS}"):
        WorkflowSchedule("s", Schedule.every("1m"), max_active_runs=MAX_ACTIVE_RUNS + 1)
    assert WorkflowSchedule("s", Schedule.every("1m"), max_active_runs=MAX_ACTIVE_RUNS).max_active_runs == (
        MAX_ACTIVE_RUNS
    )
    _cli_refuses(
        ["create-workflow", "--name", "s", "--every", "1h", "--max-active-runs", str(MAX_ACTIVE_RUNS + 1)],
        "--max-active-runs",
    )


def test_an_over_long_schedule_name_is_named_by_its_length_not_echoed() -> None:
    with pytest.raises(InvalidArgument) as refused:
        WorkflowSchedule("n" * 5000, Schedule.every("1m"))
    said = str(refused.value)
    assert said.endswith(f"got {'n' * 40!r}... (5000 characters)") and len(said) < 200, said
