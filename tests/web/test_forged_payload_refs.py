"""A caller who may start runs writes its own JSON into their input: it can write an offload
reference (``{"_harvest_ref": <id>, "bytes": n}``) naming another run's offloaded payload. Such a
forged reference must not let it act on the other run's payload: erasing its own run erases only
what that run owns, never another run's rows (one under a legal hold included)."""

from __future__ import annotations

import psycopg
from psycopg.types.json import Jsonb
from web_helpers import api_client


def _victim(db: str) -> tuple[str, str]:
    """A run with an offloaded payload of its own, under a legal hold: (run, payload id)."""
    with psycopg.connect(db, autocommit=True) as conn:
        (run,) = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow('victim', '[]', 'v-1')"
        ).fetchone()
        (ref,) = conn.execute(
            "SELECT (harvest.put_payloads(%s, ARRAY[%s::jsonb]))[1]", (run, Jsonb({"card": "4111-secret"}))
        ).fetchone()
        conn.execute("SELECT harvest.set_legal_hold(%s, 'case 7')", (run,))
    return str(run), str(ref)


def test_erasing_a_run_whose_input_forges_a_reference_leaves_the_other_runs_payload(
    db: str, tokens: dict[str, str]
) -> None:
    victim, ref = _victim(db)
    operate = {"Authorization": f"Bearer {tokens['operate']}"}
    admin = {"Authorization": f"Bearer {tokens['admin']}"}
    with api_client(db, profile="production") as api:
        started = api.post(
            "/workflows/anything/start",
            json={"input": [{"_harvest_ref": ref, "bytes": 30}], "workflow_id": "forger"},
            headers=operate,
        )
        assert started.status_code == 201, started.text
        own = started.json()["execution_id"]
        assert api.post(f"/workflows/{own}/terminate", json={}, headers=admin).status_code == 200
        erased = api.post(f"/workflows/{own}/erase-payloads", json={}, headers=admin)
        assert erased.status_code == 200, erased.text
    with psycopg.connect(db) as conn:
        data, erased_at = conn.execute(
            "SELECT data, erased_at FROM harvest.payloads WHERE id = %s", (ref,)
        ).fetchone()
    assert data == {"card": "4111-secret"} and erased_at is None, "another run's held payload was erased"
    with psycopg.connect(db) as conn:
        (held,) = conn.execute(
            "SELECT count(*) FROM harvest.legal_holds WHERE execution_id = %s", (victim,)
        ).fetchone()
    assert held == 1


def test_a_reference_repeated_in_an_input_is_read_back_a_bounded_number_of_times(
    db: str, tokens: dict[str, str]
) -> None:
    """300 copies of one forged reference to a 100 KB row (a 21 KB input) made every full read
    of the run 30 MB, on the API and the dashboard alike (a thousand copies of a 2 MiB row: a
    web process out of memory). One payload is put back at most REF_REPEATS_RESOLVED times in
    one answer; the rest stay references."""
    from harvest.core.codecs import REF_REPEATS_RESOLVED

    with psycopg.connect(db, autocommit=True) as conn:
        (own,) = conn.execute(
            "SELECT execution_id FROM harvest.start_workflow('own', '[]', 'own')"
        ).fetchone()
        (ref,) = conn.execute(
            "SELECT (harvest.put_payloads(%s, ARRAY[%s::jsonb]))[1]", (own, Jsonb("x" * 100_000))
        ).fetchone()
    admin = {"Authorization": f"Bearer {tokens['admin']}"}
    with api_client(db, profile="production") as api:
        refs = [{"_harvest_ref": str(ref), "bytes": 1}] * 300
        started = api.post("/workflows/amp/start", json={"input": refs, "workflow_id": "amp"}, headers=admin)
        run = started.json()["execution_id"]
        bound = 3 * REF_REPEATS_RESOLVED * 100_000  # (the run's input, and its WorkflowStarted's)
        for path in (
            f"/workflows/{run}",
            f"/workflows/{run}/history?payload_policy=full",
            f"/workflows/{run}/history/export?payload_policy=full",
            f"/ui/workflows/{run}?payloads=full",
        ):
            answer = api.get(path, headers=admin)
            assert answer.status_code == 200, (path, answer.text[:200])
            assert len(answer.content) < bound, (path, len(answer.content))
        one = api.get(f"/workflows/{run}/history?payload_policy=full", headers=admin).json()
        started_input = one["events"][0]["event_data"]["input"]
        assert started_input[0] == "x" * 100_000  # the first ones are read back
        assert started_input[-1] == {"_harvest_ref": str(ref), "bytes": 1}  # the rest stay references
