"""JSON the web faces take is nested at most MAX_JSON_DEPTH levels. The parser reads about 990,
but the engine's walks of a value take two frames a level: a start's input 600 deep was a 500
(RecursionError in the encoding), one 480 deep was started and its run's history export then
broke off. Deeper than the bound is a 400 naming the body (the API) or the field (a dashboard
form), and nothing is written."""

from __future__ import annotations

import json

import psycopg
from web_helpers import api_client

from harvest.web.guards import MAX_JSON_DEPTH, json_depth


def _nested(depth: int) -> str:
    return "[" * depth + "1" + "]" * depth


def _runs(db: str) -> int:
    with psycopg.connect(db) as conn:
        return conn.execute("SELECT count(*) FROM harvest.executions").fetchone()[0]


def test_json_depth_counts_arrays_and_objects() -> None:
    assert [json_depth(v) for v in (1, [], {}, [1], {"a": [{"b": 1}]}, [[], [[[]]]])] == [0, 1, 1, 1, 3, 4]
    assert json_depth(json.loads(_nested(900))) == 900  # (no recursion: deeper than the parser goes)


def test_a_body_nested_past_the_bound_is_a_400_and_starts_nothing(db: str, tokens: dict[str, str]) -> None:
    operate = {"Authorization": f"Bearer {tokens['operate']}", "Content-Type": "application/json"}
    before = _runs(db)
    with api_client(db, profile="production") as api:
        for depth in (MAX_JSON_DEPTH, 480, 600, 950):  # (MAX_JSON_DEPTH in all: the input's list)
            body = f'{{"input": {_nested(depth)}, "workflow_id": "deep-{depth}"}}'
            answer = api.post("/workflows/deep/start", content=body, headers=operate)
            assert answer.status_code == 400, (depth, answer.status_code, answer.text[:200])
            error = answer.json()["error"]
            assert error["field"] == "body", error
            assert f"nested deeper than {MAX_JSON_DEPTH}" in error["message"], error
        assert _runs(db) == before
        fits = f'{{"input": {_nested(MAX_JSON_DEPTH - 1)}, "workflow_id": "fits"}}'
        started = api.post("/workflows/deep/start", content=fits, headers=operate)
        assert started.status_code == 201, started.text[:200]
        run = started.json()["execution_id"]
        admin = {"Authorization": f"Bearer {tokens['admin']}"}
        export = api.get(f"/workflows/{run}/history/export", params={"payload_policy": "full"}, headers=admin)
        assert export.status_code == 200 and "fits" in export.text
        # The dashboard's signal form: the same bound, a 400 page naming the payload.
        page = api.post(
            f"/ui/workflows/{run}/signal",
            data={"name": "s", "payload": _nested(600)},
            headers={"Authorization": f"Bearer {tokens['operate']}"},
        )
        assert page.status_code == 400, page.text[-500:]
        assert f"nested deeper than {MAX_JSON_DEPTH}" in page.text
