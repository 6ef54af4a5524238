"""GET /admin/queues/scaling (docs/http-api.md, "Admin"): the scaling signals per queue an
autoscaler reads, as JSON and as Prometheus text, over a database with a known backlog."""

from __future__ import annotations

import pytest
from operator_helpers import start
from prometheus_client.parser import text_string_to_metric_families
from web_helpers import api_client

from harvest.web.routes.admin import scaling_signals, scaling_text


@pytest.fixture
def backlog(conn) -> None:
    """Queue billing: two claimable tasks (one 90 s overdue), one due in an hour; one healthy
    worker polls billing and idle, a stale one polls billing."""
    for n in range(3):
        start(conn, "invoice", f"inv-{n}", queue="billing")
    ids = [r[0] for r in conn.execute("SELECT id FROM harvest.tasks WHERE queue = 'billing' ORDER BY id")]
    assert len(ids) == 3
    conn.execute("UPDATE harvest.tasks SET due_at = now() - interval '90 seconds' WHERE id = %s", (ids[0],))
    conn.execute("UPDATE harvest.tasks SET due_at = now() + interval '1 hour' WHERE id = %s", (ids[2],))
    conn.execute("SELECT harvest.register_worker('w-live', ARRAY['billing', 'idle'], 'h', 1)")
    conn.execute("SELECT harvest.register_worker('w-stale', ARRAY['billing'], 'h', 2, 1)")
    conn.execute(
        "UPDATE harvest.workers SET last_heartbeat_at = now() - interval '1 hour' WHERE id = 'w-stale'"
    )


def test_json_signals_of_a_known_backlog(db: str, backlog: None) -> None:
    with api_client(db) as api:
        answer = api.get("/admin/queues/scaling")
        assert answer.status_code == 200, answer.text
        body = answer.json()
        assert body["status"] == "complete" and body["unavailable_shards"] == []
        assert body["per_worker"] == 20 and answer.headers["X-Harvest-Status"] == "complete"
        billing, idle = body["queues"]
        assert {k: v for k, v in billing.items() if k != "oldest_age_seconds"} == {
            "queue": "billing",
            "backlog": 2,
            "scheduled": 1,
            "running": 0,
            "workers": 1,  # the stale worker does not count
            "desired_workers": 1,
            "estimated": False,  # counted exactly: under the sampler's cap
        }
        assert body["estimated"] is False
        assert 90 <= billing["oldest_age_seconds"] < 600
        assert idle == {
            "queue": "idle",
            "backlog": 0,
            "oldest_age_seconds": None,
            "scheduled": 0,
            "running": 0,
            "workers": 1,
            "desired_workers": 0,
            "estimated": False,
        }
        one = api.get("/admin/queues/scaling", params={"per_worker": 1, "queue": "billing"}).json()
        assert [(q["queue"], q["desired_workers"]) for q in one["queues"]] == [("billing", 2)]


def test_prometheus_text_parses(db: str, backlog: None) -> None:
    with api_client(db) as api:
        answer = api.get(
            "/admin/queues/scaling", params={"format": "prometheus"}, headers={"Accept": "text/plain"}
        )
    assert answer.status_code == 200, answer.text
    assert answer.headers["content-type"].startswith("text/plain; version=0.0.4")
    samples = {
        (s.name, s.labels.get("queue")): s.value
        for family in text_string_to_metric_families(answer.text)
        for s in family.samples
    }
    assert samples[("harvest_queue_scaling_backlog", "billing")] == 2
    assert samples[("harvest_queue_scaling_oldest_age_seconds", "billing")] >= 90
    assert samples[("harvest_queue_scaling_oldest_age_seconds", "idle")] == 0
    assert samples[("harvest_queue_scaling_workers", "billing")] == 1
    assert samples[("harvest_queue_scaling_desired_workers", "billing")] == 1
    assert samples[("harvest_queue_scaling_estimated", "billing")] == 0
    assert samples[("harvest_queue_scaling_unavailable_shards", None)] == 0


def test_scope_and_bad_parameters_are_refused(db: str, tokens: dict[str, str]) -> None:
    with api_client(db, profile="production") as api:
        assert api.get("/admin/queues/scaling").status_code == 401
        read = {"Authorization": f"Bearer {tokens['read']}"}
        refused = api.get("/admin/queues/scaling", headers=read)
        assert refused.status_code == 403 and refused.json()["error"]["code"] == "permission_denied"
        admin = {"Authorization": f"Bearer {tokens['admin']}"}
        assert api.get("/admin/queues/scaling", headers=admin).json()["queues"] == []
        for bad in ({"per_worker": "0"}, {"per_worker": "many"}, {"format": "xml"}):
            refused = api.get("/admin/queues/scaling", headers=admin, params=bad)
            assert refused.status_code == 400, bad
            assert refused.json()["error"]["field"] == next(iter(bad))
        declared = api.get("/openapi.json").json()["paths"]["/admin/queues/scaling"]["get"]
        assert declared["x-harvest-scope"] == "admin"
        schema = declared["responses"]["200"]["content"]["application/json"]["schema"]
        assert schema["properties"]["estimated"] == {"type": "boolean"}
        assert "estimated" in schema["properties"]["queues"]["items"]["required"]
        assert set(declared["responses"]["200"]["content"]) == {
            "application/json",
            "text/plain; version=0.0.4; charset=utf-8",
        }


def test_signals_sum_over_shards() -> None:
    """Two shards' reads: counts add, the oldest age is the oldest anywhere, a worker polling both
    shards counts once (stale and draining ones are not in the healthy list); desired_workers
    rounds up over backlog plus running; a queue only a worker names answers with zeros."""
    shard = {
        "queues": [
            {
                "queue": "q",
                "kind": "workflow",
                "claimable": 3,
                "scheduled": 1,
                "running": 2,
                "oldest_claimable_secs": 5,
            },
            {
                "queue": "q",
                "kind": "activity",
                "claimable": 1,
                "scheduled": 0,
                "running": 0,
                "oldest_claimable_secs": None,
            },
        ],
        "workers": [
            {"queue": "q", "health": "stale", "count": 4},
            {"queue": "spare", "health": "stale", "count": 1},
        ],
    }
    other = {
        "queues": [
            {
                "queue": "q",
                "kind": "workflow",
                "claimable": 4,
                "scheduled": 0,
                "running": 0,
                "oldest_claimable_secs": 40.5,
            }
        ],
        "workers": [{"queue": "q", "health": "healthy", "count": 2}],
    }
    both = {"worker_id": "w1", "queues": ["q"]}
    reads = [(shard, [both]), (other, [both, {"worker_id": "w2", "queues": ["q"]}])]
    assert scaling_signals(reads, 5) == [
        {
            "queue": "q",
            "backlog": 8,
            "oldest_age_seconds": 40.5,
            "scheduled": 1,
            "running": 2,
            "workers": 2,
            "desired_workers": 2,
            "estimated": False,
        },
        {
            "queue": "spare",
            "backlog": 0,
            "oldest_age_seconds": None,
            "scheduled": 0,
            "running": 0,
            "workers": 0,
            "desired_workers": 0,
            "estimated": False,
        },
    ]


def test_a_queue_past_the_samplers_cap_says_its_counts_are_estimated() -> None:
    """A queue whose depths one shard estimated (past the sampler's cap, docs/observability.md
    "Queue depths past the cap") is estimated in the sum, whatever the other shards and kinds
    say; the Prometheus text carries it as harvest_queue_scaling_estimated 1."""

    def depth(queue: str, kind: str, claimable: int, estimated: bool) -> dict[str, object]:
        return {
            "queue": queue,
            "kind": kind,
            "claimable": claimable,
            "scheduled": 0,
            "running": 0,
            "oldest_claimable_secs": 1.0,
            "estimated": estimated,
        }

    deep = {"queues": [depth("deep", "activity", 250_000, True), depth("deep", "workflow", 3, False)]}
    other = {"queues": [depth("deep", "activity", 7, False), depth("small", "activity", 2, False)]}
    queues = scaling_signals([(deep, []), (other, [])], 20)
    assert [(q["queue"], q["backlog"], q["estimated"]) for q in queues] == [
        ("deep", 250_010, True),
        ("small", 2, False),
    ]
    samples = {
        s.labels["queue"]: s.value
        for family in text_string_to_metric_families(scaling_text(queues, 0))
        for s in family.samples
        if s.name == "harvest_queue_scaling_estimated"
    }
    assert samples == {"deep": 1, "small": 0}
