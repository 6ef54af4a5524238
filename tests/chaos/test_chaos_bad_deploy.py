"""The on-call drill of a bad deploy, with real worker processes (docs/runbooks/harvest-alerts.md,
"A bad deploy"): orders in flight under v1; v2 deployed, its three bugs (incident_apps.py) meet
the orders once packed; noticed, the fix (v3) deployed, and each kind recovered by its path:

* the activity bug (standard orders): ``ship`` parked as dead letters; replayed after the fix
  (`harvest dlq bulk-replay`), the runs complete;
* the workflow bug that wrote history (express orders: an ungated ``audit`` step completed, which
  v3 cannot replay): reset by filter to before the deploy (`harvest workflow bulk-reset --to
  before_time --before`, the packed signal carried into the fork), the forks complete;
* the workflow bug that only raised (gift orders): they complete by themselves once v3 runs.

Every order completes, and nothing completed twice: counted from the activity bodies (charge,
the ship, notify once an order; audit once an express order, by v2 alone).

``INCIDENT_RUNS`` (default 60) sets the runs in flight; the drill's figures are printed
(``-s``) for the record."""

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


KINDS = ("standard", "express", "gift")


def test_a_bad_deploy_is_noticed_fixed_and_every_run_recovered_by_its_path(
    chaos_db, client, tmp_path
) -> None:
    db = chaos_db
    with psycopg.connect(db, autocommit=True) as conn:
        conn.execute(CALLS_DDL)
    fleet = Fleet(db, tmp_path)
    figures: dict[str, object] = {"runs": RUNS}
    kinds = {i: KINDS[i % 3] for i in range(RUNS)}
    per_kind = {k: sum(1 for v in kinds.values() if v == k) for k in KINDS}
    try:
        # v1: every order charged, waiting for its "packed" signal.
        fleet.deploy("v1")
        for i, kind in kinds.items():
            client.start_workflow(
                "order_flow", i, kind, workflow_id=f"order-{i}", search_attributes={"kind": kind}
            )
        idle = "SELECT count(*) FROM harvest.tasks"
        wait_until(
            lambda: (
                scalar(db, "SELECT count(*) FROM incident_calls WHERE activity = 'charge'") >= RUNS
                and scalar(db, idle) == 0
            ),
            HANG,
            "every run charged and waiting",
        )

        # The bad deploy (its time, the database's clock, is the reset's point), then packing done.
        deployed_at = query(db, "SELECT clock_timestamp() AS t")[0]["t"].isoformat()
        fleet.deploy("v2")
        packed = ("workflow", "bulk-signal", "packed", "--workflow-name", "order_flow")
        assert cli(db, *packed, "--reason", "packing done")["acted"] == RUNS
        parked = "SELECT count(*) FROM harvest.dead_letters WHERE activity_name = %s"
        failing = ["workflow", "list", "--workflow-name", "order_flow", "--failing", "--page-size", "1000"]
        wait_until(
            lambda: (
                scalar(db, parked, "ship") == per_kind["standard"]
                and scalar(db, parked, "ship_express") == per_kind["express"]
                and len(rows(cli(db, *failing))) == per_kind["gift"]
            ),
            HANG,
            "ships parked, gift orders failing",
        )
        figures["v2"] = {
            "by_status": by_status(db),
            "dead_letters": scalar(db, "SELECT count(*) FROM harvest.dead_letters"),
            "failing": per_kind["gift"],
        }
        assert by_status(db) == {"RUNNING": RUNS}  # (nothing failed for good: every path recoverable)

        # The fix: v3. Gift orders go on by themselves; express orders are reset to before the
        # deploy (replaying their ship_express would meet the audit step v3 cannot replay); the
        # standard orders' parked ships are replayed.
        fleet.deploy("v3")
        fixed = time.monotonic()
        gift_done = (
            "SELECT count(*) FROM harvest.executions"
            " WHERE status = 'COMPLETED' AND search_attributes ->> 'kind' = 'gift'"
        )
        wait_until(
            lambda: scalar(db, gift_done) == per_kind["gift"], HANG, "gift orders to go on by themselves"
        )
        figures["v3_on_their_own"] = {"gift": per_kind["gift"], "secs": round(time.monotonic() - fixed, 1)}

        bulk_reset = (
            "workflow",
            "bulk-reset",
            "--search-attr",
            "kind=express",
            "--to",
            "before_time",
            "--before",
            deployed_at,
            "--signal-reapply",
            "buffer",
        )
        dry = cli(db, *bulk_reset, "--reason", "incident 72", "--dry-run")
        assert dry["matched"] == per_kind["express"]
        began = time.monotonic()
        reset = cli(db, *bulk_reset, "--reason", "incident 72: v2's ungated audit", "--yes", "--batch", "100")
        figures["bulk_reset"] = {k: reset[k] for k in ("batch_id", "matched", "acted", "unchanged", "failed")}
        figures["bulk_reset"]["secs"] = round(time.monotonic() - began, 1)
        assert (reset["acted"], reset["failed"]) == (per_kind["express"], 0), reset
        again = cli(db, *bulk_reset, "--reason", "incident 72", "--batch-id", reset["batch_id"], "--yes")
        # (its forks, those still running, count unchanged: the batch resets a run once)
        assert again["acted"] == 0 and again["unchanged"] == again["matched"], again

        replay = cli(db, "dlq", "bulk-replay", "--activity-name", "ship", "--operator-id", "oncall")
        figures["dlq_bulk_replay"] = replay
        completed = "SELECT count(DISTINCT workflow_id) FROM harvest.executions WHERE status = 'COMPLETED'"
        wait_until(lambda: scalar(db, completed) == RUNS, HANG, "every order completed")
        figures["after"] = {**by_status(db), "secs_from_fix": round(time.monotonic() - fixed, 1)}
        assert by_status(db) == {"COMPLETED": RUNS, "TERMINATED": per_kind["express"]}  # (the reset sources)
    finally:
        fleet.stop()
    # Counted from the bodies: every order charged once (never again by a fork or a replay),
    # shipped once successfully, notified once; audit once an express order (v2's, not the fork's).
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
    standard, express = per_kind["standard"], per_kind["express"]
    assert calls[("charge", True)] == (RUNS, RUNS, 1)
    assert calls[("notify", True)] == (RUNS, RUNS, 1)
    assert calls[("ship", True)] == (standard + per_kind["gift"], standard + per_kind["gift"], 1)
    assert calls[("ship_express", True)] == (express, express, 1)
    assert calls[("audit", True)] == (express, express, 1)
    assert calls[("ship", False)] == (standard, 2 * standard, 2)  # the bad deploy's two attempts a run
    assert calls[("ship_express", False)] == (express, 2 * express, 2)
