"""Every fan-out read of the management API answers the same keys (docs/http-api.md, "Answers
and errors"): status, unavailable_shards, unavailable_reasons when a shard was not read, and
sharded. Some answered all four, others (queue coverage, version-gate usage, retention, the
pacing reads, usage, queue scaling, the dead letters, DAGs and workers lists, a workflow id's
current run) only some."""

from __future__ import annotations

import re
from typing import Any

import psycopg
from psycopg import conninfo
from web_helpers import api_client

from harvest.web.app import endpoints

# Path parameters of the routes walked, and the required query parameters.
PATH = {"activity_name": "fk_act", "workflow_name": "fk_wf", "dag_name": "fk_dag", "worker_id": "fk_worker"}
QUERY = {"change_id": "fk_change", "from": "24h", "workflow_id": "fk_id"}
# Fan-out reads the walk must meet (a route that dropped every key would otherwise pass).
EXPECTED = {
    "/admin/audit",
    "/admin/queue-coverage",
    "/admin/queues/scaling",
    "/admin/rate-limits/{activity_name}",
    "/admin/retention",
    "/admin/retention/settings",
    "/admin/schedules",
    "/admin/start-throttles/{workflow_name}",
    "/admin/usage",
    "/admin/version-gates/usage",
    "/dags",
    "/dead-letters",
    "/dead-letters/aggregate",
    "/workers",
    "/workers/drain-preview",
    "/workers/health",
    "/workflows",
    "/workflows/count",
    "/workflows/current",
    "/workers/{worker_id}",
}


def test_every_fan_out_read_answers_the_same_keys_when_a_shard_is_down(db: str) -> None:
    env = {
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0",
        "HARVEST_SHARDS__URLS__0": db,
        "HARVEST_SHARDS__URLS__1": conninfo.make_conninfo(db, user="no_such_login_fk"),
        "HARVEST_RETENTION__RUN_ON": "all",
    }
    with psycopg.connect(db, autocommit=True) as conn:  # what the lookups by key find on shard 0
        conn.execute("SELECT harvest.register_worker('fk_worker', ARRAY['fk_q'], 'h', 1)")
        conn.execute("SELECT * FROM harvest.start_workflow('fk_wf', '[]'::jsonb, 'fk_id', 'fk_q')")
    seen: dict[str, dict[str, Any]] = {}
    with api_client(db, env=env) as api:
        for endpoint in endpoints():
            names = re.findall(r"{(\w+)}", endpoint.path)
            if endpoint.method != "GET" or any(n not in PATH for n in names):
                continue
            path = endpoint.path.format(**{n: PATH[n] for n in names})
            params = {p.name: QUERY[p.name] for p in endpoint.params if p.required and p.name not in names}
            answer = api.get(path, params=params)
            body = (
                answer.json()
                if answer.headers.get("content-type", "").startswith("application/json")
                else None
            )
            if isinstance(body, dict) and "unavailable_shards" in body:
                assert answer.status_code == 200, (endpoint.path, answer.text)
                seen[endpoint.path] = body
    assert set(seen) >= EXPECTED, sorted(EXPECTED - set(seen))
    for path, body in seen.items():
        status = body.get("read_status", body.get("status"))  # (a worker's row has its own status)
        assert status == "partial" and body["unavailable_shards"] == [1], (path, body)
        assert set(body["unavailable_reasons"]) == {"1"}, (path, body)
        assert body["sharded"] is True, (path, body)
