"""Dead letters replayed and discarded at once, one by one and in bulk, on real connections,
while their runs are paused, resumed and terminated on others (functions/dead_letters.sql): each
letter is replayed once or discarded, never both and never twice; a replayed activity waits
'paused' on a paused run and 'pending' on a running one; every refusal is the documented one
(HR002: replayed or discarded meanwhile; HR005: its run ended), never a deadlock or a lost row."""

from __future__ import annotations

import random
import threading

import psycopg
import pytest
from harness import query

pytestmark = pytest.mark.chaos

RUNS = 40
EXPECTED = {"HR002", "HR005"}


def test_replay_and_discard_race_one_by_one_in_bulk_and_with_pause_and_terminate(db: str) -> None:
    with psycopg.connect(db, autocommit=True) as conn:
        runs = [
            str(
                conn.execute(
                    "SELECT execution_id FROM harvest.start_workflow('dl_wf', p_workflow_id => %s)",
                    (f"dl-{i}",),
                ).fetchone()[0]
            )  # type: ignore[index]
            for i in range(RUNS)
        ]
        conn.execute(
            "INSERT INTO harvest.dead_letters (execution_id, workflow_name, seq, activity_name, queue, input,"
            " attempts, failure, scheduled_at, failed_at)"
            " SELECT r::uuid, 'dl_wf', 1, 'act', 'default', '[]', 3, '{\"error_type\": \"Boom\"}',"
            " now(), now()"
            " FROM unnest(%s::text[]) AS r",
            (runs,),
        )
    letters = [r["id"] for r in query(db, "SELECT id FROM harvest.dead_letters ORDER BY id")]
    stop = threading.Event()
    unexpected: list[str] = []
    outcomes: dict[str, list] = {"replayed": [], "discarded": []}

    def racer(name: str, act) -> None:
        rng = random.Random(name)
        with psycopg.connect(db, autocommit=True, application_name=name) as conn:
            while not stop.is_set():
                try:
                    act(conn, rng)
                except psycopg.Error as exc:
                    if exc.sqlstate not in EXPECTED:
                        unexpected.append(f"{name}: {exc.sqlstate} {exc}")

    def replay(conn, rng) -> None:
        letter = rng.choice(letters)
        conn.execute("SELECT harvest.replay_dead_letter(%s)", (letter,))
        outcomes["replayed"].append(letter)

    def discard(conn, rng) -> None:
        letter = rng.choice(letters)
        conn.execute("SELECT harvest.discard_dead_letter(%s)", (letter,))
        outcomes["discarded"].append(letter)

    def bulk(action: str):
        def act(conn, rng) -> None:
            answer = conn.execute(
                f"SELECT harvest.{action}_dead_letters(p_workflow_name => 'dl_wf', p_limit => %s)",
                (rng.randint(1, 7),),
            ).fetchone()[0]  # type: ignore[index]
            outcomes["replayed" if action == "replay" else "discarded"].extend(answer["ids"])
            unexpected.extend(
                f"bulk {action}: {f}" for f in answer["failures"] if f["sqlstate"] not in EXPECTED
            )

        return act

    def lifecycle(conn, rng) -> None:
        run = rng.choice(runs)
        verb = rng.choices(["pause", "resume", "terminate"], [10, 10, 1])[0]
        conn.execute(f"SELECT harvest.{verb}_workflow(%s)", (run,))

    threads = [
        threading.Thread(target=racer, args=(name, act), daemon=True)
        for name, act in (
            ("replay", replay),
            ("discard", discard),
            ("bulk_replay", bulk("replay")),
            ("bulk_discard", bulk("discard")),
            ("lifecycle", lifecycle),
            ("lifecycle2", lifecycle),
        )
    ]
    for t in threads:
        t.start()
    deadline = threading.Event()
    for _ in range(200):  # until every letter is handled (20 s at most)
        if not query(db, "SELECT 1 FROM harvest.dead_letters LIMIT 1"):
            break
        deadline.wait(0.1)
    stop.set()
    for t in threads:
        t.join(20)
    assert not any(t.is_alive() for t in threads)
    assert not unexpected, unexpected[:5]
    left = query(db, "SELECT id FROM harvest.dead_letters")
    ended = {
        r["id"]
        for r in query(
            db, "SELECT id::text FROM harvest.executions WHERE status NOT IN ('RUNNING', 'PAUSED')"
        )
    }
    # A letter left is one whose run ended (a replay is refused, a discard would take it).
    replayed, discarded = outcomes["replayed"], outcomes["discarded"]
    assert replayed and discarded, outcomes  # (both won some)
    assert len(replayed) == len(set(replayed)) and len(discarded) == len(set(discarded))
    assert not set(replayed) & set(discarded)
    assert set(replayed) | set(discarded) | {r["id"] for r in left} == set(letters)
    tasks = query(
        db,
        "SELECT e.id::text AS run, e.status, t.status AS task_status FROM harvest.tasks AS t"
        " JOIN harvest.executions AS e ON e.id = t.execution_id WHERE t.kind = 'activity'",
    )
    assert len(tasks) == len({t["run"] for t in tasks}), "a letter replayed twice"
    live_replayed = [t for t in tasks if t["run"] not in ended]
    assert all(
        t["task_status"] == ("paused" if t["status"] == "PAUSED" else "pending") for t in live_replayed
    ), live_replayed
