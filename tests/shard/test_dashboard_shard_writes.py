"""The dashboard's writes on every shard over HTTP (no browser): one shard's refusal is named in
the notice beside what the others did, never the whole answer (docs/dashboard.md)."""

from __future__ import annotations

import sys
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "browser"))

from dashboard_helpers import TokenScopes
from test_cli_http_shards import _dag, _refuse, _shard_env

from harvest.config import load_config
from harvest.web.ui import dashboard_app

pytestmark = pytest.mark.shard
ADMIN = {"Authorization": "Bearer admin-token"}


@pytest.fixture
def ui(shards) -> Iterator[TestClient]:
    app = dashboard_app(config=load_config(env=_shard_env(shards)), authorizer=TokenScopes(), timeout=2.0)
    with TestClient(app) as client:
        yield client


def _notice(answer) -> str:
    assert answer.status_code == 303, answer.text
    return urllib.parse.parse_qs(urllib.parse.urlsplit(answer.headers["location"]).query)["msg"][0]


def test_a_drain_names_the_shard_that_refuses_beside_the_shards_drained(shards, ui) -> None:
    """Shard 1 refuses the drain: the action's answer was that refusal's error page, the drain
    made on shards 0 and 2 unsaid; now the notice says both outcomes and names shard 1's
    refusal. Refused everywhere: the first refusal, naming every shard's."""
    for shard in (0, 1, 2):
        with shards.connect(shard) as conn:
            conn.execute("SELECT harvest.register_worker('w', ARRAY['default'], 'host', 1, 60, '{}')")
    _refuse(shards, 1, "drain_worker", "drain refused for the test")
    said = _notice(ui.post("/workers/w/drain", headers=ADMIN, follow_redirects=False))
    assert said.startswith("drain: shard 0: accepted, shard 2: accepted"), said
    assert "shard 1 refused: drain refused for the test" in said, said
    for shard in (0, 2):
        _refuse(shards, shard, "drain_worker", f"no drain on {shard}")
    refused = ui.post("/workers/w/drain", headers=ADMIN, follow_redirects=False)
    assert refused.status_code == 400
    assert "shard 0: no drain on 0" in refused.text and "shard 1: drain refused" in refused.text


def test_a_dag_pause_names_the_shard_that_refuses_beside_the_shards_paused(shards, ui) -> None:
    for shard in (0, 1, 2):
        _dag(shards, shard, "etl")
    _refuse(shards, 2, "pause_dag", "pause refused for the test")
    said = _notice(ui.post("/dags/etl/pause", headers=ADMIN, follow_redirects=False))
    assert said.startswith("paused"), said
    assert "shard 2 refused: pause refused for the test" in said, said


def test_a_pause_and_a_drain_name_the_shard_not_reached_beside_the_others(shards, ui) -> None:
    """A shard that cannot be reached is a partial answer on the dashboard too: the notice says
    what the others did and names the shard to act on again (no defect found: the check)."""
    for shard in (0, 1, 2):
        _dag(shards, shard, "etl")
        with shards.connect(shard) as conn:
            conn.execute("SELECT harvest.register_worker('w', ARRAY['default'], 'host', 1, 60, '{}')")
    shards.stop(1)
    try:
        paused = _notice(ui.post("/dags/etl/pause", headers=ADMIN, follow_redirects=False))
        drained = _notice(ui.post("/workers/w/drain", headers=ADMIN, follow_redirects=False))
    finally:
        shards.start(1)
    assert paused.startswith("paused") and "shard(s) 1 could not be reached" in paused, paused
    assert drained.startswith("drain: shard 0: accepted, shard 2: accepted"), drained
    assert "shard(s) 1 could not be reached and were not drained" in drained, drained
