"""The management API over three real servers: starts placed by hash or pin, every read routed
by execution id or fanned out, a stopped shard named (partial) rather than failing the answer,
and a drain written on every shard the worker polls."""

from __future__ import annotations

import json
import time

import pytest
from psycopg.types.json import Jsonb
from starlette.testclient import TestClient

from harvest import App, Batch, Debounce, Throttle, workflow
from harvest.config import load_config
from harvest.web.app import management_app

pytestmark = pytest.mark.shard


def _api(shards, **env: str) -> TestClient:
    env = {
        "HARVEST_SHARDS__READABLE": "0,1,2",
        "HARVEST_SHARDS__WRITABLE": "0,1,2",
        "HARVEST_SHARDS__RESIDENCY__EU": "2",
        **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in shards.dsns.items()},
        **env,
    }
    return TestClient(management_app(config=load_config(env=env), profile="dev"))


@workflow(debounce=Debounce(quiet=60))
async def debounced(ctx) -> None: ...


@workflow(batch=Batch(max_size=10, window=60))
async def batched(ctx, item) -> None: ...


@workflow(throttle=Throttle(rps=0.001, burst=1))
async def throttled(ctx) -> None: ...


def test_a_refused_placement_is_a_400_with_a_terse_message_and_writes_nothing(shards) -> None:
    """The sharding guide, "Rejections (never a silent fallback)": POST /workflows/{name}/start
    answers 400 with a JSON body (never a 500, never a re-hash or the default shard) for both
    placements, an unknown or blank residency key, a key or shard that is not writable and a
    shard the deployment does not know, naming what was asked and never the shard set or the
    declared keys; a pin with a debounce or batch is a 400 too, a throttled pin is deferred
    (202) and echoes its shard; a shard the router knows with no pool here is a 503; and
    signal-with-start takes no placement."""
    with _api(
        shards,
        HARVEST_SHARDS__READABLE="0,1,2,3",
        HARVEST_SHARDS__WRITABLE="0,1,3",
        HARVEST_SHARDS__RESIDENCY__DRAINED="2",
        HARVEST_SHARDS__RESIDENCY__AP="3",
    ) as api:
        refusals = [
            ({"shard_id": 1, "residency_key": "eu"}, "not both"),
            ({"residency_key": "mars"}, "unknown residency_key 'mars'"),
            ({"residency_key": " "}, "blank"),
            ({"residency_key": "drained"}, "maps to a shard that is not accepting new workflows"),
            ({"shard_id": 2}, "shard_id 2 is not accepting new workflows"),
            ({"shard_id": 9}, "shard_id 9 is not a shard of this deployment"),
        ]
        for body, message in refusals:
            refused = api.post("/workflows/greet/start", json={"workflow_id": "r", **body})
            assert refused.status_code == 400, (body, refused.text)
            error = refused.json()["error"]
            assert error["code"] == "invalid_argument" and message in error["message"], (body, error)
            others = [f"'{k}'" for k in ("eu", "drained", "ap") if k != body.get("residency_key")]
            assert not any(s in error["message"] for s in ("[0", "writable", *others)), error
        for pin in ({"shard_id": 3}, {"residency_key": "ap"}):  # known, but no pool here: no fallback
            unavailable = api.post("/workflows/greet/start", json=pin)
            assert unavailable.status_code == 503 and unavailable.json()["error"]["shard_id"] == 3
        body = {"workflow_id": "s", "signal_name": "go", "shard_id": 1}
        sws = api.post("/workflows/greet/signal-with-start", json=body)
        assert sws.status_code == 400 and sws.json()["error"]["field"] == "shard_id"
        with shards.connect(1) as conn:
            policies = App(workflows=[debounced, batched, throttled]).flow_policies()
            conn.execute("SELECT harvest.declare_flow_policies(%s)", (Jsonb(policies),))
        for name, args in (("debounced", {}), ("batched", {"input": ["x"]})):
            deferred = api.post(f"/workflows/{name}/start", json={"shard_id": 1, **args})
            assert deferred.status_code == 400 and "cannot take shard_id" in deferred.text, deferred.text
        assert api.post("/workflows/throttled/start", json={"shard_id": 1}).status_code == 201
        deferred = api.post("/workflows/throttled/start", json={"shard_id": 1})
        assert deferred.status_code == 202 and deferred.json()["shard_id"] == 1, deferred.text
        counts = []
        for shard in (0, 1, 2):
            with shards.connect(shard) as conn:
                counts.append(conn.execute("SELECT count(*) FROM harvest.executions").fetchone()[0])
        assert counts == [0, 1, 0], "only the admitted throttled start wrote a run"
        # An unpinned start answers the old shape: no shard_id.
        assert "shard_id" not in api.post("/workflows/greet/start", json={"workflow_id": "u"}).json()


def test_admin_config_shard_topology_is_the_routers_sorted_projection(shards) -> None:
    """The guide: shard_topology is key-ordered, so its bytes are stable and a plain diff of it
    across replicas shows one whose residency map (or forwards, reserved set) disagrees; it is
    the router's own projection, so a placement field added to the router shows here."""
    with _api(shards, HARVEST_SHARDS__RESIDENCY__US="1") as api:
        text = api.get("/admin/config").text
        topology = json.loads(text)["shard_topology"]
        assert list(topology) == sorted(topology), list(topology)
        assert topology == api.app.state.harvest.router.topology()
        assert topology["residency_map"] == {"eu": 2, "us": 1} and topology["reserved_shards"] == []


def test_routes_over_three_shards_and_a_stopped_one(shards) -> None:
    with _api(shards) as api:
        ids = {}
        for shard in (0, 1):
            started = api.post("/workflows/greet/start", json={"shard_id": shard, "workflow_id": f"w{shard}"})
            assert started.status_code == 201 and started.json()["shard_id"] == shard
            ids[shard] = started.json()["execution_id"]
        eu = api.post("/workflows/greet/start", json={"residency_key": "eu"}).json()
        assert eu["shard_id"] == 2
        ids[2] = eu["execution_id"]
        for shard, execution_id in ids.items():
            got = api.get(f"/workflows/{execution_id}").json()
            assert got["execution"]["id"] == execution_id and execution_id.startswith(f"000{shard}")
        listed = api.get("/workflows", params={"page_size": 2}).json()
        assert listed["status"] == "complete" and len(listed["executions"]) == 2 and listed["next_cursor"]
        rest = api.get("/workflows", params={"page_size": 2, "cursor": listed["next_cursor"]}).json()
        assert {r["execution_id"] for r in listed["executions"] + rest["executions"]} == set(ids.values())
        assert api.get("/workflows/count").json()["counts"] == [
            {"status": "RUNNING", "workflow_name": None, "executions": 3, "capped": False}
        ]
        # The runs on shards 1 and 2 as children of shard 0's: a page a request, merged.
        for shard in (1, 2):
            with shards.connect(shard) as conn:
                conn.execute(
                    "UPDATE harvest.executions SET parent_id = %s WHERE id = %s", (ids[0], ids[shard])
                )
        kids = api.get(f"/workflows/{ids[0]}/children", params={"page_size": 1}).json()
        assert kids["status"] == "complete" and len(kids["items"]) == 1 and kids["next_cursor"]
        more = api.get(
            f"/workflows/{ids[0]}/children", params={"page_size": 1, "cursor": kids["next_cursor"]}
        )
        assert more.json()["next_cursor"] is None
        assert {c["exec_id"] for c in kids["items"] + more.json()["items"]} == {ids[1], ids[2]}
        with shards.connect(1) as conn, shards.connect(2) as other:
            for c in (conn, other):
                c.execute("SELECT harvest.register_worker('w-multi', ARRAY['default'], 'host', 1, 60, '{}')")
        # Scaling signals: the three runs' tasks summed over the shards, w-multi counted once.
        scaling = api.get("/admin/queues/scaling", params={"queue": "default", "per_worker": 2}).json()
        assert scaling["status"] == "complete" and scaling["unavailable_shards"] == []
        assert [(q["backlog"], q["workers"], q["desired_workers"]) for q in scaling["queues"]] == [(3, 1, 2)]
        drained = api.post("/workers/w-multi/drain", json={}).json()
        assert drained["outcome"] == "accepted" and drained["shards"] == [1, 2]
        shards.stop(1)
        try:
            partial = api.get("/workflows").json()
            assert partial["status"] == "partial" and partial["unavailable_shards"] == [1]
            kids = api.get(f"/workflows/{ids[0]}/children").json()
            assert (kids["status"], kids["unavailable_shards"]) == ("partial", [1])
            # The stopped shard keeps its place: the cursor stays set, and its child comes later.
            assert [c["exec_id"] for c in kids["items"]] == [ids[2]] and kids["next_cursor"]
            assert {r["shard_id"] for r in partial["executions"]} == {0, 2}
            # The tree degrades as the children do: a 200 naming the shard it could not read.
            tree = api.get(f"/workflows/{ids[0]}/tree")
            assert tree.status_code == 200, tree.text
            assert (tree.json()["status"], tree.json()["unavailable_shards"]) == ("partial", [1])
            assert ids[2] in tree.text and ids[1] not in tree.text
            down = api.get(f"/workflows/{ids[1]}")
            assert down.status_code == 503 and down.json()["error"]["shard_id"] == 1
            assert api.get(f"/workflows/{ids[0]}").status_code == 200
            scaling = api.get("/admin/queues/scaling", params={"format": "prometheus"})
            assert scaling.headers["X-Harvest-Unavailable-Shards"] == "1"
            assert "harvest_queue_scaling_unavailable_shards 1" in scaling.text
            health = api.get("/admin/shards/health").json()
            assert {r["shard_id"]: r["readiness"] for r in health["shards"]}[1] == "unavailable"
        finally:
            shards.start(1)
        deadline = time.monotonic() + 30  # (until the API's pool of shard 1 connects again)
        while (
            later := api.get(f"/workflows/{ids[0]}/children", params={"cursor": kids["next_cursor"]}).json()
        )["status"] != "complete" and time.monotonic() < deadline:
            time.sleep(0.2)
        assert later["status"] == "complete" and [c["exec_id"] for c in later["items"]] == [ids[1]]
        assert later["next_cursor"] is None


def test_a_typed_search_attribute_filter_is_pushed_to_every_shard_and_merged(shards) -> None:
    """The sharding guide: search_attr_filter=key:op:value is part of every shard's query and
    the rows are merged as the keyset list is; the coercion is the predicate's alone, so a
    number compares only with numbers, and a value stored as a string or a boolean is left out
    on every shard alike. Paged by cursor, no row twice or skipped."""
    with _api(shards) as api:
        stored = {0: [150, 50], 1: [200, "300"], 2: [100, True]}
        for shard, amounts in stored.items():
            for n, amount in enumerate(amounts):
                started = api.post(
                    "/workflows/greet/start",
                    json={
                        "shard_id": shard,
                        "workflow_id": f"a{shard}-{n}",
                        "search_attributes": {"amount": amount},
                    },
                )
                assert started.status_code == 201, started.json()
        seen, cursor = [], None
        while True:
            params = {"search_attr_filter": "amount:gte:100", "order": "asc", "page_size": 2}
            page = api.get("/workflows", params={**params, **({"cursor": cursor} if cursor else {})}).json()
            assert page["status"] == "complete", page
            seen += [(r["shard_id"], r["search_attributes"]["amount"]) for r in page["executions"]]
            cursor = page["next_cursor"]
            if cursor is None:
                break
        assert sorted(seen) == [(0, 150), (1, 200), (2, 100)], seen
        assert len(api.get("/workflows", params={"page_size": 10}).json()["executions"]) == 6
        # "=" is Harvest's one widening (docs/operations.md): a number also matches the same
        # text stored as a string (an id kept as "300"), the same on every shard.
        equal = api.get("/workflows", params={"search_attr_filter": "amount:eq:300", "page_size": 10}).json()
        assert [(r["shard_id"], r["workflow_id"]) for r in equal["executions"]] == [(1, "a1-1")]
