"""The runs the dashboard tests look at: a worker in a thread and one run of each kind
(demo_app.py), each settled where the pages show it."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path

import demo_app
from dashboard_helpers import wait_for

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

from worker_helpers import RunningWorker  # the one worker-in-a-thread of the suites

from harvest import Client, Worker


@dataclass
class Demo:
    """The runs the pages show: ids by name, the database, the client."""

    dsn: str
    client: Client
    ids: dict[str, str] = field(default_factory=dict)


def start_demo(dsn: str, worker_id: str = "worker-a") -> tuple[Demo, RunningWorker]:
    """A worker and one run of each kind, each settled where the pages show it."""
    demo_app.RELEASE.clear()
    worker = RunningWorker(
        Worker(demo_app.app, dsn, worker_id=worker_id, poll_interval=0.5, scan_interval=0.2)
    ).start()
    client = Client(dsn)
    demo = Demo(dsn, client)
    for i in range(3):
        demo.ids[f"greet-{i}"] = client.start_workflow(
            "greet", f"user-{i}", workflow_id=f"greet-{i}", search_attributes={"tenant": "acme", "n": i}
        ).execution_id
    demo.ids["approval"] = client.start_workflow(
        "approval", "order-7", workflow_id="order-7", search_attributes={"tenant": "globex"}
    ).execution_id
    demo.ids["billing"] = client.start_workflow("billing", 42, workflow_id="invoice-42").execution_id
    demo.ids["family"] = client.start_workflow("family", "fam", workflow_id="family-1").execution_id
    for n in range(2):
        demo.ids[f"batch-{n}"] = client.start_workflow("batch", n, workflow_id=f"batch-{n}").execution_id
    with client.sql() as sql:
        wait_for(
            lambda: all(sql.get_execution(demo.ids[f"greet-{i}"])["status"] == "COMPLETED" for i in range(3)),
            "the greet runs to complete",
        )
        wait_for(lambda: sql.list_dead_letters(10), "the billing run's dead letter")
        wait_for(
            lambda: any(e["event_type"] == "TimerStarted" for e in sql.get_history(demo.ids["approval"])),
            "the approval run to wait for its signal",
        )
        wait_for(lambda: sql.list_children(demo.ids["family"]), "the family run's child")
        wait_for(
            lambda: any(k["in_flight"] for k in sql.list_concurrency_keys("acme")),
            "the acme key to have work in flight",
        )
    with client.sql() as sql:
        demo.ids["dag"] = str(sql.trigger_dag("nightly_etl", {"date": "2026-05-01"})["execution_id"])
    wait_for(
        lambda: client.get_handle(demo.ids["dag"]).describe()["status"] == "FAILED",
        "the DAG run to fail at its transform task",
    )
    client.get_handle(demo.ids["approval"]).update("note", "rush it", wait="accepted", update_id="note-1")
    return demo, worker


def demo_pages(demo: Demo) -> list[str]:
    """One page of each kind the dashboard draws, over the demo's runs (a run, a DAG run, a
    schedule, a dead letter, a worker, the bulk dry run, the sign-in page): the one list the
    tests that walk every page (headings, contrast, query parameters) take."""
    with demo.client.sql() as sql:
        (dead,) = sql.list_dead_letters(1)
    return [
        "/workflows",
        f"/workflows/{demo.ids['approval']}",
        f"/workflows/{demo.ids['dag']}",
        "/workflows/bulk?action=cancel&workflow_name=greet",
        "/schedules",
        "/schedules/0/greet-yearly",
        "/dags",
        "/dags/nightly_etl",
        f"/dags/nightly_etl/runs/{demo.ids['dag']}",
        "/dead-letters",
        f"/dead-letters/0/{dead['id']}",
        "/workers",
        "/workers/worker-a",
        "/concurrency",
        "/shards",
        "/login",
    ]
