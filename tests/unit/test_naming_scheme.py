"""The SQL API follows the naming scheme of CONTRIBUTING.md "Names": every public function of
functions/*.sql starts with one of the scheme's verbs or is one of its named exceptions, and the
names the scheme retired (its record of renames) are gone from functions/."""

from __future__ import annotations

import re
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
FUNCTION = re.compile(r"CREATE\s+(?:OR\s+REPLACE\s+)?FUNCTION\s+harvest\.(\w+)\s*\(", re.IGNORECASE)

# Verb first (CONTRIBUTING.md "SQL functions"): the mutations' verbs and the four read verbs.
VERBS = {
    # reads
    "get",
    "list",
    "count",
    "preview",
    # mutations
    "accept",
    "activate",
    "answer",
    "authenticate",  # authenticate_api_token (functions/tokens.sql)
    "begin",
    "cancel",
    "claim",
    "cut",  # cut_over_migration: the spec's "cutover" (functions/rebalance.sql)
    "clear",
    "complete",
    "create",  # create_api_token
    "declare",
    "deliver",
    "detach",  # detach_activity: the worker lets go of an activity completed by task token
    "discard",
    "drain",
    "expire",
    "fail",
    "grant",
    "heartbeat",
    "pause",  # pause_dag, unpause_dag (functions/dags.sql)
    "prune",
    "record",  # record_llm_call: one row of the agent cost ledger (functions/flow_usage.sql)
    "register",
    "release",
    "replay",
    "request",
    "reset",
    "retry",  # retry_dag_run: a new run from a failed one's failed tasks
    "revoke",  # revoke_api_token
    "resume",
    "run",
    "set",
    "signal",
    "start",
    "stop",
    "terminate",
    "trigger",  # trigger_dag: the spec's `dag trigger`
    "unpause",
    "unregister",
    "update",
    "verify",
    "wait",
    # functions/payloads.sql: the offload store and erasure
    "erase",
    "put",
    # functions/schedules.sql: a schedule's lifecycle and its tick
    "backfill",
    "delete",
    "fire",
}
# Scalars are named for their value, like PostgreSQL's now() ("Scalars are named for their value").
SCALARS = {
    "now",
    "shard_of",
    "partition_of",
    "schema_version",
    "functions_version",
    "payload_limit",
    "next_due_at",
    "quota_usage",
    "history_digest",
}
# "Not renamed, on purpose": the scanner's one entry point.
EXCEPTIONS = {"scan"}

# CONTRIBUTING.md "Renamed to fit" (and CHANGELOG.md): the old name must not come back.
RETIRED = {
    "worker_heartbeat",
    "worker_sleep",
    "worker_drain_deadline",
    "worker_health",
    "drain_preview",
    "mutex_tick",
    "mutex_status",
    "concurrency_status",
    "pending_starts_status",
    "retention_status",
    "workflow_stack",
    "aggregate_dead_letters",
    "usage_report",
    "version_usage",
    "bulk_replay_dead_letters",
    "bulk_discard_dead_letters",
    "claim_queries",
    "stop_waiting",
}


def public_functions() -> dict[str, str]:
    found: dict[str, str] = {}
    for path in sorted((REPO / "functions").glob("*.sql")):
        for name in FUNCTION.findall(path.read_text()):
            if not name.startswith("_"):
                found[name] = path.name
    return found


def test_the_scan_sees_the_sql_api() -> None:
    names = public_functions()
    assert {"start_workflow", "claim_tasks", "list_executions", "now", "scan"} <= set(names)
    assert len(names) > 60


def test_every_public_function_starts_with_a_verb_of_the_scheme() -> None:
    misfits = sorted(
        f"{name} ({file})"
        for name, file in public_functions().items()
        if name not in SCALARS | EXCEPTIONS and name.split("_", 1)[0] not in VERBS
    )
    assert not misfits, (
        f'not named by CONTRIBUTING.md "Names" (verb first, or a scalar named for its value): {misfits}'
    )


def test_no_retired_name_is_defined_or_called() -> None:
    text = "\n".join(p.read_text() for p in sorted((REPO / "functions").glob("*.sql")))
    back = sorted(name for name in RETIRED if re.search(rf"harvest\.{name}\b", text))
    assert not back, f"renamed functions are back under their old names: {back}"


def test_no_parameter_is_named_p_task_queue_or_p_state() -> None:
    text = "\n".join(p.read_text() for p in sorted((REPO / "functions").glob("*.sql")))
    assert not re.search(r"\bp_task_queue\b", text), 'the parameter is p_queue (CONTRIBUTING.md "Words")'
    assert not re.search(r"\bp_state\b", text), 'the parameter is p_status (CONTRIBUTING.md "Words")'
