"""WorkerOptions.shard_assignments: "auto" (the default) or shard numbers, from the constructor,
harvest.toml (worker.shard_assignments) or HARVEST_WORKER__SHARD_ASSIGNMENTS; resolved against
the shards that have a url, an assigned shard without one refusing the start with one line
naming the key. No database here: a Worker is only constructed."""

from __future__ import annotations

import asyncio
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


class RecordingSql:
    """A shard's SQL API that records claims and answers none (or fails, when told to)."""

    def __init__(self, shard: int, calls: list[int]):
        self.shard, self.calls, self.fail = shard, calls, None

    async def claim_tasks(self, worker_id, queues, limit, lease):
        self.calls.append(self.shard)
        if self.fail is not None:
            raise self.fail
        return []

    async def set_worker_sleeping(self, worker_id, sleeping):
        return None


def test_claims_go_round_the_shards_starting_one_further_each_round_and_skip_a_down_one(caplog) -> None:
    import psycopg

    calls: list[int] = []
    worker = Worker(APP, shards={s: f"postgresql://a@h{s}/db" for s in (0, 1, 2)})
    for lane in worker.lanes:
        lane.sql, lane.ready = RecordingSql(lane.shard, calls), True

    async def main() -> None:
        rounds = []
        for _ in range(3):
            calls.clear()
            await worker._claim()
            rounds.append(list(calls))
        assert rounds == [[0, 1, 2], [1, 2, 0], [2, 0, 1]]
        # Shard 1's server goes away: the failure marks it down (one warning), the round goes on.
        worker.lanes[1].sql.fail = psycopg.OperationalError("server closed the connection unexpectedly")
        calls.clear()
        await worker._claim()  # starts at shard 0 again
        assert calls == [0, 1, 2] and worker.lanes[1].down
        calls.clear()
        await worker._claim()
        await worker._claim()
        assert 1 not in calls, "a down shard is skipped until its probe brings it back"
        await worker.lanes[1].close()

    asyncio.run(main())
    warnings = [r.getMessage() for r in caplog.records if "is unavailable" in r.getMessage()]
    assert len(warnings) == 1 and warnings[0].startswith("shard 1 is unavailable")


def test_a_worker_on_auto_is_refused_when_the_router_reserves_a_tenant_cell() -> None:
    """The guide's rule ("Tenant cells"): an auto worker would poll the cell shard too, so it
    does not start; explicit assignments (the shared pool's, or the cell's) start, and so does
    a process that runs no worker."""
    from harvest.shard import ShardRouter

    urls = {0: "postgresql://a@h0/db", 1: "postgresql://a@h1/db"}
    cells = ShardRouter([0, 1], [0, 1], 0, residency_map={"cell-a": 1}, reserved=[1])
    with pytest.raises(ConfigError) as caught:
        Worker(APP, shards=urls, router=cells)
    message = str(caught.value)
    assert message.startswith(
        "worker.shard_assignments is auto, and shards.reserved reserves tenant cell shard(s) 1"
    )
    assert "\n" not in message and "HARVEST_WORKER__SHARD_ASSIGNMENTS" in message
    assert Worker(APP, shards=urls, router=cells, shard_assignments=[0]).shard_assignments == (0,)
    assert Worker(APP, shards=urls, router=cells, shard_assignments=[1]).shard_assignments == (1,)
    assert Worker(APP, shards=urls, router=cells, run_worker=False).shard_assignments == (0, 1)
    shared = ShardRouter([0, 1], [0, 1], 0)
    assert Worker(APP, shards=urls, router=shared).shard_assignments == (0, 1), "no cell: auto is fine"


def test_harvest_worker_on_auto_with_a_reserved_shard_exits_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import os

    from click.testing import CliRunner

    from harvest.cli.main import main

    (tmp_path / "cell_app.py").write_text("from harvest import App\napp = App()\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in [k for k in os.environ if k.startswith("HARVEST_")]:
        monkeypatch.delenv(name)
    env = {
        "HARVEST_DATABASE_URL": "postgresql://app@127.0.0.1:1/shared",
        "HARVEST_SHARDS__URLS__1": "postgresql://app@127.0.0.1:1/cell",
        "HARVEST_SHARDS__RESERVED": "1",
    }
    result = CliRunner().invoke(main, ["worker", "cell_app:app"], env=env)
    assert result.exit_code == 1, result.output
    lines = [line for line in result.output.splitlines() if line.startswith("error:")]
    expected = (
        "error: worker.shard_assignments is auto, and shards.reserved reserves tenant cell shard(s) 1: "
        "an auto worker would poll the cells too; list the shards this worker polls "
        "(HARVEST_WORKER__SHARD_ASSIGNMENTS, e.g. the shared shards, or one cell's shard)"
    )
    assert lines == [expected], result.output
