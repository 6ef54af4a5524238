"""A request of the management API on shards makes each of its calls in one round trip: the
role's settings and the call in one pipeline with one Sync (harvest.db.pools.RoledPool.one_call),
as on one database (docs/performance.md, "A sharded call in one round trip"). Counted from
libpq's trace of the API's connections (tests/integration/round_trip_helpers.py).

Before, a call the request's client made on a shard (a start, a signal-with-start, a signal, a
cancel: the client's ``sql(shard)``) took a connection in a transaction begun for the role:
BEGIN, the settings, the call, COMMIT, four round trips (a fifth when the settings statement was
prepared), holding the signal's row lock until the COMMIT came back.
"""

from __future__ import annotations

import psycopg
from tests.integration.round_trip_helpers import LibpqTrace
from web_helpers import api_client


def _started(dsn: str, workflow_id: str) -> str:
    with psycopg.connect(dsn, autocommit=True) as conn:
        row = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow('wf', '[]', %s, 'q')", (workflow_id,)
        ).fetchone()
    return str(row[0])  # type: ignore[index]


def test_a_sharded_requests_calls_take_one_round_trip_each_in_the_requests_role(
    two_shards, monkeypatch, tmp_path
) -> None:
    trace = LibpqTrace(monkeypatch, tmp_path)
    runs = {shard: _started(dsn, f"trips-{shard}") for shard, dsn in two_shards.items()}
    env = {
        "HARVEST_SHARDS__READABLE": "0,1",
        "HARVEST_SHARDS__WRITABLE": "0,1",
        **{f"HARVEST_SHARDS__URLS__{s}": dsn for s, dsn in two_shards.items()},
    }
    requests = {  # what each makes: calls of one statement (the trips each costs, at most one)
        "start": (("POST", "/workflows/wf/start", {"input": []}), 1),
        "signal_with_start": (
            ("POST", "/workflows/wf/signal-with-start", {"workflow_id": "sws", "signal_name": "poke"}),
            1,
        ),
        "signal": (("POST", f"/workflows/{runs[1]}/signal", {"signal_name": "poke"}), 1),
        "cancel": (("POST", f"/workflows/{runs[0]}/cancel", {"reason": "done"}), 1),
        "read": (("GET", f"/workflows/{runs[1]}", None), 2),  # the run, its history's page
        "list": (("GET", "/workflows", None), 2),  # one call on each shard
    }
    with api_client(None, env=env) as api:

        def send(method: str, path: str, body: dict | None) -> None:
            answer = api.request(method, path, json=body)
            assert answer.status_code < 300, answer.text

        for (method, path, body), _ in requests.values():
            send(method, path, body)  # (each pool opened, each shard's identity checked)
        trace.sent()
        trips = {}
        for name, ((method, path, body), _) in requests.items():
            send(method, path, body)
            sent = trace.sent()
            trips[name] = sum(message in ("Sync", "Query") for message, _ in sent)
            assert not [text for message, text in sent if message == "Query"], name  # no BEGIN, no COMMIT
    assert trips == {name: calls for name, (_, calls) in requests.items()}
    with psycopg.connect(two_shards[0], autocommit=True) as conn:  # the call ran as the request's role
        audited = conn.execute(
            "SELECT operation, acting_role, source, route FROM harvest.audit_log"
            " WHERE operation = 'workflow.cancel' ORDER BY id"
        ).fetchall()
    assert (
        audited == [("workflow.cancel", "harvest_admin", "api", "POST /workflows/{execution_id}/cancel")] * 2
    )
