"""The on-call drill of a bad deploy, with real worker processes (docs/runbooks/bad-deploy.md):
runs in flight; a release whose activity raises on every call (runs FAILED); a release whose
workflow code no recorded history replays (runs RUNNING, their workflow task failing); noticed,
found by filter, the failing ones paused, the fix deployed; the paused ones resumed (they go on by
themselves) and the FAILED ones reset by filter (`harvest workflow bulk-reset`, each to the last
completed workflow task before its failure). Every run completes, and no activity that completed
before the failure ran again: counted from the activity bodies (incident_apps.py).

``INCIDENT_RUNS`` (default 60) sets the runs in flight; the drill's figures are printed
(``-s``) for the record. 2,000 is the incident's size (docs/runbooks/bad-deploy.md has its run)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg
import pytest
from harness import query, wait_until
from incident_apps import CALLS_DDL

pytestmark = pytest.mark.chaos

HERE = Path(__file__).parent
RUNNER = HERE / "run_incident_worker.py"
HARVEST = [sys.executable, "-c", "from harvest.cli import main; main()"]
RUNS = int(os.environ.get("INCIDENT_RUNS", "60"))
HANG = 60 + RUNS / 5  # a bound on a hang, not a timed assertion


class Fleet:
    """The worker processes of one release; a deploy stops them and starts the next."""

    def __init__(self, db: str, logs: Path) -> None:
        self.db, self.logs, self.procs = db, logs, []

    def deploy(self, release: str, n: int = 2) -> None:
        self.stop()
        for i in range(n):
            env = {**os.environ, "HARVEST_DATABASE_URL": self.db, "INCIDENT_RELEASE": release}
            with open(self.logs / f"worker-{release}-{i}.log", "wb") as log:
                self.procs.append(
                    subprocess.Popen(
                        [sys.executable, str(RUNNER)],
                        env=env,
                        stdout=log,
                        stderr=subprocess.STDOUT,
                        stdin=subprocess.DEVNULL,
                        start_new_session=True,
                    )
                )
        for proc in self.procs:
            wait_until(
                lambda proc=proc: query(
                    self.db, "SELECT 1 FROM harvest.workers WHERE pid = %s AND status = 'active'", (proc.pid,)
                ),
                HANG,
                f"worker {proc.pid} of {release} to register",
            )

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=10)
        self.procs = []


def cli(db: str, *args: str) -> dict:
    done = subprocess.run(
        [*HARVEST, *args, "--output", "json"],
        env={**os.environ, "HARVEST_DATABASE_URL": db},
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 0, (args, done.stdout, done.stderr)
    return json.loads(done.stdout)


def scalar(db: str, sql: str, *args: object) -> int:
    return int(next(iter(query(db, sql, args or None)[0].values())))


def rows(answer: object) -> list:
    """A list command's rows, whatever the envelope of its JSON."""
    if isinstance(answer, list):
        return answer
    assert isinstance(answer, dict), answer
    return next(v for v in answer.values() if isinstance(v, list))


def by_status(db: str) -> dict[str, int]:
    rows = query(db, "SELECT status, count(*) AS n FROM harvest.executions GROUP BY 1")
    return {r["status"]: int(r["n"]) for r in rows}


def test_a_bad_deploy_is_noticed_stopped_fixed_and_every_run_recovered(chaos_db, client, tmp_path) -> None:
    db = chaos_db
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(CALLS_DDL)
    fleet = Fleet(db, tmp_path)
    figures: dict[str, object] = {"runs": RUNS}
    try:
        # v1: every run charged, waiting for its "packed" signal. Half A started before the cut.
        fleet.deploy("v1")
        half = RUNS // 2
        for i in range(half):
            client.start_workflow("order_flow", i, workflow_id=f"order-{i}")
        time.sleep(0.01)  # (the cut falls strictly between the halves' created_at)
        cut_at = query(db, "SELECT clock_timestamp() AS t")[0]["t"].isoformat()
        time.sleep(0.01)
        # Half B in two quarters: the first's failing runs are paused, the second's left failing.
        quarter = half + (RUNS - half) // 2
        for i in range(half, quarter):
            client.start_workflow("order_flow", i, workflow_id=f"order-{i}")
        time.sleep(0.01)
        cut2_at = query(db, "SELECT clock_timestamp() AS t")[0]["t"].isoformat()
        time.sleep(0.01)
        for i in range(quarter, RUNS):
            client.start_workflow("order_flow", i, workflow_id=f"order-{i}")
        idle = "SELECT count(*) FROM harvest.tasks"
        wait_until(
            lambda: (
                scalar(db, "SELECT count(*) FROM incident_calls WHERE activity = 'charge'") >= RUNS
                and scalar(db, idle) == 0
            ),
            HANG,
            "every run charged and waiting",
        )

        # The activity bug: half A is packed, ship raises on every call, the runs fail.
        fleet.deploy("v2")
        signalled = cli(
            db,
            "workflow",
            "bulk-signal",
            "packed",
            "--workflow-name",
            "order_flow",
            "--created-before",
            cut_at,
            "--reason",
            "packing done",
        )
        assert signalled["acted"] == half
        wait_until(lambda: by_status(db).get("FAILED", 0) == half, HANG, "half A to fail")
        figures["v2"] = {
            "by_status": by_status(db),
            "ship_calls_raised": scalar(db, "SELECT count(*) FROM incident_calls WHERE NOT ok"),
        }

        # The workflow bug, an hour later: half B is packed, its workflow task fails on replay.
        fleet.deploy("v3")
        signalled = cli(
            db,
            "workflow",
            "bulk-signal",
            "packed",
            "--workflow-name",
            "order_flow",
            "--created-after",
            cut_at,
            "--reason",
            "packing done",
        )
        assert signalled["acted"] == RUNS - half
        failing = ["workflow", "list", "--workflow-name", "order_flow", "--failing", "--page-size", "1000"]
        wait_until(lambda: len(rows(cli(db, *failing))) >= min(RUNS - half, 1000), HANG, "half B failing")
        # Found: FAILED in the window of the activity bug; the failing ones (the list's filter).
        failed_a = cli(
            db,
            "workflow",
            "count",
            "--workflow-name",
            "order_flow",
            "--state",
            "FAILED",
            "--created-before",
            cut_at,
        )
        figures["found"] = {
            "failed_before_cut": failed_a,
            "failing": scalar(
                db, "SELECT count(*) FROM harvest.tasks WHERE kind = 'workflow' AND last_failure IS NOT NULL"
            ),
        }
        # Stop the bleeding: the failing runs of the first quarter paused (their tasks stop
        # retrying); the second quarter's left failing, to see them go on by themselves.
        paused = cli(
            db,
            "workflow",
            "bulk-pause",
            "--workflow-name",
            "order_flow",
            "--failing",
            "--created-before",
            cut2_at,
            "--reason",
            "incident 72: non-determinism in order_flow",
        )
        figures["bulk_pause"] = {k: paused[k] for k in ("matched", "acted", "unchanged", "failed")}
        assert paused["acted"] == quarter - half and paused["failed"] == 0

        # Fix forward: v4. The failing runs not paused go on by themselves, no action taken; the
        # paused ones once resumed; the FAILED ones are reset.
        fleet.deploy("v4")
        fixed = time.monotonic()
        wait_until(
            lambda: by_status(db).get("COMPLETED", 0) == RUNS - quarter, HANG, "the failing runs to go on"
        )
        figures["v4_on_their_own"] = {**by_status(db), "secs": round(time.monotonic() - fixed, 1)}
        assert by_status(db).get("PAUSED") == quarter - half
        resumed = cli(
            db, "workflow", "bulk-resume", "--workflow-name", "order_flow", "--reason", "v4 deployed"
        )
        figures["bulk_resume"] = {k: resumed[k] for k in ("matched", "acted", "failed")}
        bulk_reset = ("workflow", "bulk-reset", "--workflow-name", "order_flow", "--created-before", cut_at)
        dry = cli(db, *bulk_reset, "--reason", "incident 72", "--dry-run")
        assert dry["matched"] == half and scalar(db, "SELECT count(*) FROM harvest.executions") == RUNS
        began = time.monotonic()
        reset = cli(
            db,
            *bulk_reset,
            "--reason",
            "incident 72: ship fixed in v4",
            "--operator-id",
            "oncall",
            "--yes",
            "--batch",
            "100",
        )
        figures["bulk_reset"] = {k: reset[k] for k in ("batch_id", "matched", "acted", "unchanged", "failed")}
        figures["bulk_reset"]["secs"] = round(time.monotonic() - began, 1)
        assert (reset["acted"], reset["failed"]) == (half, 0), reset
        again = cli(db, *bulk_reset, "--reason", "incident 72", "--batch-id", reset["batch_id"], "--yes")
        figures["bulk_reset_again"] = {k: again[k] for k in ("matched", "acted", "unchanged", "failed")}
        assert (again["acted"], again["unchanged"]) == (0, half)

        completed = "SELECT count(DISTINCT workflow_id) FROM harvest.executions WHERE status = 'COMPLETED'"
        wait_until(lambda: scalar(db, completed) == RUNS, HANG, "every order completed")
        figures["after"] = {**by_status(db), "secs_from_reset": round(time.monotonic() - began, 1)}
    finally:
        fleet.stop()
    # Counted from the bodies: every order charged once (never again by a fork or a replay),
    # shipped once successfully, notified once; the v3 audit never ran.
    calls = {
        (r["activity"], r["ok"]): (r["orders"], r["calls"], r["most"])
        for r in query(
            db,
            "SELECT activity, ok, count(DISTINCT order_id) AS orders, count(*) AS calls,"
            " max(n) AS most FROM (SELECT activity, ok, order_id, count(*) OVER"
            " (PARTITION BY activity, ok, order_id) AS n FROM incident_calls) AS c GROUP BY 1, 2",
        )
    }
    figures["bodies"] = {f"{a}{'' if ok else ' (raised)'}": v for (a, ok), v in sorted(calls.items())}
    sys.stdout.write(f"incident drill: {json.dumps(figures, default=str)}\n")
    assert calls[("charge", True)] == (RUNS, RUNS, 1)
    assert calls[("ship", True)] == (RUNS, RUNS, 1)
    assert calls[("notify", True)] == (RUNS, RUNS, 1)
    assert ("audit", True) not in calls
    assert calls[("ship", False)] == (half, 2 * half, 2)  # the bad deploy's two attempts a run
