"""A DAG declared straight through the SQL API (no worker), for the tests of triggers and of a
DAG's schedule."""

from __future__ import annotations

from harvest.db.sqlapi import SqlApi


def register_one_task_dag(api: SqlApi, name: str, max_active_runs: int | None) -> None:
    """DAG ``name``: one activity task ``a``, on the default queue."""
    task = {"task": "a", "kind": "activity", "target": "a", "upstream": [], "trigger_rule": "all_success"}
    api.register_dags(
        [{"dag_name": name, "queue": "default", "max_active_runs": max_active_runs, "tasks": [task]}]
    )
