"""WorkerOptions.shard_assignments: "auto" (the default) or shard numbers, from the constructor,
harvest.toml (worker.shard_assignments) or HARVEST_WORKER__SHARD_ASSIGNMENTS; resolved against
the shards that have a url, an assigned shard without one refusing the start with one line
naming the key. No database here: a Worker is only constructed."""

from __future__ import annotations

from pathlib import Path

import pytest

from harvest import App, Worker, activity
from harvest.config import load_config, worker_options
from harvest.core.errors import ConfigError, InvalidArgument
from harvest.worker.options import AUTO, WorkerOptions, parse_shard_assignments, resolve_shard_assignments


@activity
async def noop(ctx) -> None:
    return None


APP = App(activities=[noop])


def test_the_default_is_auto_and_a_list_is_sorted_and_distinct() -> None:
    assert WorkerOptions().shard_assignments == AUTO
    assert WorkerOptions(shard_assignments=[2, 0, 2]).shard_assignments == (0, 2)
    assert WorkerOptions(shard_assignments="AUTO").shard_assignments == AUTO
    assert WorkerOptions().replace(shard_assignments=(1,)).shard_assignments == (1,)


@pytest.mark.parametrize("value", [[], [-1], [65536], ["a"], [True], 3, b"0", "0,x"])
def test_a_bad_assignment_is_refused_naming_the_option(value) -> None:
    with pytest.raises(InvalidArgument) as caught:
        WorkerOptions(shard_assignments=value)
    assert str(caught.value).startswith("Worker(shard_assignments)")
    assert "\n" not in str(caught.value)


def test_a_variable_gives_a_comma_separated_list_or_auto() -> None:
    assert parse_shard_assignments("0, 1") == (0, 1)
    assert parse_shard_assignments(" auto ") == AUTO
    config = load_config(env={"HARVEST_WORKER__SHARD_ASSIGNMENTS": "1,0"})
    assert worker_options(config).shard_assignments == (0, 1)
    assert config.setting("worker.shard_assignments").source == "HARVEST_WORKER__SHARD_ASSIGNMENTS"
    assert (
        worker_options(load_config(env={"HARVEST_WORKER__SHARD_ASSIGNMENTS": ""})).shard_assignments == AUTO
    )
    assert worker_options(load_config(env={})).shard_assignments == AUTO


def test_the_file_sets_it_and_a_variable_wins(tmp_path: Path) -> None:
    path = tmp_path / "harvest.toml"
    path.write_text("[worker]\nshard_assignments = [0, 1]\n")
    assert worker_options(load_config(path, env={})).shard_assignments == (0, 1)
    config = load_config(path, env={"HARVEST_WORKER__SHARD_ASSIGNMENTS": "auto"})
    assert worker_options(config).shard_assignments == AUTO
    path.write_text('[worker]\nshard_assignments = "auto"\n')
    assert worker_options(load_config(path, env={})).shard_assignments == AUTO


@pytest.mark.parametrize(
    "text", ['shard_assignments = ["x"]', "shard_assignments = 1", 'shard_assignments = "some"']
)
def test_a_bad_value_in_the_file_stops_the_boot_naming_the_key_and_file(tmp_path: Path, text: str) -> None:
    path = tmp_path / "harvest.toml"
    path.write_text(f"[worker]\n{text}\n")
    with pytest.raises(ConfigError) as caught:
        load_config(path, env={})
    assert "worker.shard_assignments" in str(caught.value) and str(path) in str(caught.value)


def test_auto_is_every_shard_with_a_url_and_an_explicit_list_must_have_urls() -> None:
    assert resolve_shard_assignments(AUTO, [2, 0, 1]) == (0, 1, 2)
    assert resolve_shard_assignments((1,), [0, 1]) == (1,)
    with pytest.raises(ConfigError) as caught:
        resolve_shard_assignments((0, 3), [0, 1])
    assert str(caught.value) == (
        "worker.shard_assignments names shard 3, which has no url: add shards.urls.3 "
        "(HARVEST_SHARDS__URLS__3) or remove it from worker.shard_assignments"
    )


def test_a_worker_builds_one_lane_per_assigned_shard() -> None:
    urls = {0: "postgresql://a@h0/db", 1: "postgresql://a@h1/db", 2: "postgresql://a@h2/db"}
    worker = Worker(APP, shards=urls)
    assert worker.shard_assignments == (0, 1, 2)
    assert [(lane.shard, lane.dsn) for lane in worker.lanes] == sorted(urls.items())
    assert worker.dsn == urls[0] and worker.sql is None  # connected by run()
    worker = Worker(APP, shards=urls, shard_assignments=[2, 1])
    assert [lane.shard for lane in worker.lanes] == [1, 2]
    with pytest.raises(ConfigError):
        Worker(APP, shards={0: urls[0]}, shard_assignments=[1])


def test_one_database_is_one_lane_on_shard_0_with_no_outage_handling() -> None:
    worker = Worker(APP, "postgresql://a@h/db")
    assert worker.shard_assignments == (0,)
    (lane,) = worker.lanes
    assert (lane.shard, lane.handles_outages) == (0, False)
    assert worker.completions is lane.completions and worker.decisions is lane.decisions
    with pytest.raises(ConfigError) as caught:  # no [shards]: only shard 0 has a url
        Worker(APP, "postgresql://a@h/db", shard_assignments=[1])
    assert "shards.urls.1" in str(caught.value)
