"""Every SQL call site of the engine, one method each.

Python never writes engine tables itself: it calls the ``harvest.*`` functions
(``functions/``), and this module is the only place that does. ``SqlApi`` runs
on a synchronous psycopg connection, ``AsyncSqlApi`` on an async one; both share
the statements below, so the whole SQL surface reads in one screen.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from harvest.core.errors import from_database_error

START_WORKFLOW = """
SELECT * FROM harvest.start_workflow(
    p_workflow_name => %(workflow_name)s, p_input => %(input)s, p_workflow_id => %(workflow_id)s,
    p_queue => %(task_queue)s, p_reuse_policy => %(reuse_policy)s,
    p_conflict_policy => %(conflict_policy)s, p_search_attributes => %(search_attributes)s,
    p_priority => %(priority)s, p_execution_timeout_secs => %(execution_timeout)s,
    p_run_timeout_secs => %(run_timeout)s)
"""
START_WORKFLOWS = "SELECT * FROM harvest.start_workflows(%(starts)s)"
SIGNAL_WORKFLOW = """
SELECT harvest.signal_workflow(%(execution_id)s, %(signal_name)s, %(payload)s) AS event_id
"""
SIGNAL_WITH_START = """
SELECT * FROM harvest.signal_with_start(
    p_workflow_name => %(workflow_name)s, p_workflow_id => %(workflow_id)s,
    p_signal_name => %(signal_name)s, p_signal_payload => %(payload)s, p_input => %(input)s,
    p_queue => %(task_queue)s, p_search_attributes => %(search_attributes)s)
"""
CANCEL_WORKFLOW = "SELECT harvest.cancel_workflow(%(execution_id)s, %(reason)s) AS requested"
LIST_CHILDREN = "SELECT * FROM harvest.list_children(%(execution_id)s, %(status)s, %(depth)s)"
CLAIM_TASKS = """
SELECT * FROM harvest.claim_tasks(%(worker_id)s, %(queues)s, %(limit)s, %(workflow_lease_secs)s)
"""
NEXT_DUE_AT = "SELECT harvest.next_due_at(%(queues)s) AS due_at"
COMPLETE_WORKFLOW_TASKS = """
SELECT * FROM harvest.complete_workflow_tasks(%(worker_id)s, %(task_ids)b, %(fencing_tokens)b,
                                              %(throughs)b, %(commands)b::jsonb[],
                                              %(hand_off_slots)b::integer[], %(event_cap)s, %(byte_cap)s)
"""
FAIL_WORKFLOW_TASK = """
SELECT harvest.fail_workflow_task(%(task_id)s, %(fencing_token)s, %(failure)s, %(retry_in_secs)s)
"""
# The arrays go in binary (%b): psycopg's text form of an array escapes every quote
# of every JSON element with a regular expression, a tenth of a busy worker's CPU.
COMPLETE_ACTIVITIES = """
SELECT * FROM harvest.complete_activities(%(worker_id)s, %(task_ids)b, %(fencing_tokens)b,
                                          %(results)b::jsonb[], %(hand_off)s, %(workflow_lease_secs)s,
                                          %(decisions)b::jsonb[], %(event_cap)s, %(byte_cap)s)
"""
FAIL_ACTIVITY = "SELECT harvest.fail_activity(%(task_id)s, %(fencing_token)s, %(failure)s) AS outcome"
HEARTBEAT_ACTIVITY = """
SELECT harvest.heartbeat_activity(%(task_id)s, %(fencing_token)s, %(details)s) AS cancel_requested
"""
GET_EXECUTION = "SELECT * FROM harvest.get_execution(%(execution_id)s)"
WAIT_FOR_RESULT = "SELECT * FROM harvest.wait_for_result(%(execution_id)s, %(waiter_id)s)"
STOP_WAITING = "SELECT harvest.stop_waiting_for_result(%(waiter_id)s)"
GET_HISTORY = "SELECT * FROM harvest.get_history(%(execution_id)s, %(after_event_id)s)"
TERMINATE_WORKFLOW = "SELECT harvest.terminate_workflow(%(execution_id)s, %(reason)s)"
REGISTER_WORKER = """
SELECT harvest.register_worker(%(worker_id)s, %(queues)s, %(hostname)s, %(pid)s,
                               %(heartbeat_interval_secs)s, %(metadata)s)
"""
WORKER_HEARTBEAT = "SELECT harvest.heartbeat_worker(%(worker_id)s) AS status"
REGISTER_WORKFLOWS = "SELECT harvest.register_workflows(%(queues)s, %(names)s) AS registered"
BEGIN_WORKER_DRAIN = "SELECT harvest.begin_worker_drain(%(worker_id)s) AS status"
STOP_WORKER = "SELECT harvest.stop_worker(%(worker_id)s) AS released"
RELEASE_TASK = "SELECT harvest.release_task(%(task_id)s, %(fencing_token)s) AS released"
WORKER_SLEEP = "SELECT harvest.set_worker_sleeping(%(worker_id)s, %(sleeping)s)"
SCAN = "SELECT harvest.scan(%(limit)s) AS moved"
LIST_DEAD_LETTERS = """
SELECT * FROM harvest.list_dead_letters(%(limit)s, %(activity_name)s, %(workflow_name)s, %(before_id)s)
"""
GET_DEAD_LETTER = "SELECT * FROM harvest.get_dead_letter(%(id)s)"
REPLAY_DEAD_LETTER = "SELECT harvest.replay_dead_letter(%(id)s) AS task_id"
DISCARD_DEAD_LETTER = "SELECT harvest.discard_dead_letter(%(id)s)"
SCHEMA_VERSION = "SELECT harvest.schema_version() AS version"
# -- flow control (functions/concurrency.sql, ratelimit.sql, quotas.sql, mutex.sql)
DECLARE_FLOW_POLICIES = "SELECT harvest.declare_flow_policies(%(policies)s) AS declared"
CONCURRENCY_STATUS = "SELECT * FROM harvest.list_concurrency_keys(%(key)s)"
SET_RATE_LIMIT_OVERRIDE = """
SELECT * FROM harvest.set_rate_limit_override(%(activity_name)s, %(rps)s, %(burst)s, %(ttl_secs)s)
"""
CLEAR_RATE_LIMIT_OVERRIDE = "SELECT harvest.clear_rate_limit_override(%(activity_name)s) AS cleared"
GET_RATE_LIMIT = "SELECT * FROM harvest.get_rate_limit(%(activity_name)s)"
QUOTA_USAGE = "SELECT harvest.quota_usage(%(key)s, %(quota)s) AS usage"
MUTEX_STATUS = "SELECT * FROM harvest.list_mutexes(%(key)s)"
# -- start throttle / debounce / batch and the usage report (functions/throttle.sql, usage.sql)
PENDING_STARTS_STATUS = "SELECT * FROM harvest.list_pending_starts(%(workflow_name)s)"
USAGE_REPORT = """
SELECT * FROM harvest.count_usage(%(from_)s, %(to)s, %(group_by)s,
                                   %(max_window)s::interval)
"""
RESET_WORKFLOW = """
SELECT harvest.reset_workflow(%(execution_id)s, %(to_event)s, %(reason)s, %(operator_id)s,
                              %(signal_reapply)s, %(dry_run)s) AS plan
"""
VERSION_USAGE = "SELECT * FROM harvest.count_versions(%(change_id)s, %(version)s, %(state_group)s)"
# -- the operator surface (functions/operator.sql, fleet.sql, retention.sql, dead_letters.sql)
LIST_EXECUTIONS = """
SELECT * FROM harvest.list_executions(
    p_status => %(state)s, p_workflow_name => %(workflow_name)s,
    p_search_attributes => %(search_attributes)s, p_created_after => %(created_after)s,
    p_created_before => %(created_before)s, p_page_size => %(page_size)s, p_cursor => %(cursor)s,
    p_order => %(order)s)
"""
WORKFLOW_STACK = "SELECT harvest.get_execution_stack(%(execution_id)s) AS stack"
AGGREGATE_DEAD_LETTERS = "SELECT * FROM harvest.count_dead_letters(%(group_by)s)"
BULK_DEAD_LETTERS = """
SELECT harvest.{action}_dead_letters(
    p_activity_name => %(activity_name)s, p_workflow_name => %(workflow_name)s,
    p_failed_after => %(failed_after)s, p_failed_before => %(failed_before)s, p_limit => %(limit)s,
    p_dry_run => %(dry_run)s, p_operator_id => %(operator)s) AS result
"""
LIST_WORKERS = "SELECT * FROM harvest.list_workers(%(queue)s, %(status)s, %(health)s)"
GET_WORKER = "SELECT harvest.get_worker(%(worker_id)s) AS worker"
WORKER_HEALTH = "SELECT harvest.get_worker_health() AS health"
DRAIN_WORKER = "SELECT harvest.drain_worker(%(worker_id)s, %(deadline)s, %(operator)s) AS result"
DRAIN_PREVIEW = "SELECT * FROM harvest.preview_drain(%(queue)s, %(worker_id)s)"
LIST_AUDIT_LOG = "SELECT * FROM harvest.list_audit_log(%(limit)s, %(operation)s)"
RETENTION_STATUS = "SELECT harvest.get_retention_status() AS status"
SET_RETENTION = "SELECT harvest.set_retention(%(max_age)s::interval, %(batch_size)s, %(operator)s) AS status"
RUN_RETENTION = "SELECT harvest.run_retention(%(max_age)s::interval, %(batch_size)s, %(operator)s) AS result"
SET_WORKER_RETENTION = "SELECT harvest.set_worker_retention(%(max_age)s::interval, %(operator)s) AS status"
PRUNE_WORKERS = "SELECT harvest.prune_workers(%(max_age)s::interval, %(operator)s) AS result"


# -- queries and updates (functions/queries.sql)
REQUEST_QUERY = "SELECT harvest.request_query(%(execution_id)s, %(name)s, %(arg)s, %(timeout)s) AS request_id"
REQUEST_UPDATE = """
SELECT * FROM harvest.request_update(%(execution_id)s, %(name)s, %(arg)s, %(update_id)s, %(timeout)s)
"""
UPDATE_WITH_START = """
SELECT * FROM harvest.update_with_start(
    p_workflow_name => %(workflow_name)s, p_workflow_id => %(workflow_id)s,
    p_update_name => %(name)s, p_update_arg => %(arg)s, p_input => %(input)s,
    p_queue => %(task_queue)s, p_update_id => %(update_id)s, p_timeout_secs => %(timeout)s,
    p_search_attributes => %(search_attributes)s)
"""
PAYLOAD_LIMIT = "SELECT harvest.payload_limit() AS payload_limit"
GET_QUERY_REQUEST = "SELECT * FROM harvest.get_query_request(%(request_id)s)"
CLAIM_QUERIES = "SELECT * FROM harvest.claim_query_requests(%(worker_id)s, %(queues)s, %(limit)s, %(lease_secs)s)"
ANSWER_QUERY = """
SELECT harvest.answer_query(%(request_id)s, %(worker_id)s, %(answer)s, %(error)s) AS status
"""
ACCEPT_UPDATE = "SELECT harvest.accept_update(%(request_id)s, %(worker_id)s) AS status"
EXPIRE_QUERY_REQUESTS = "SELECT harvest.expire_query_requests(%(limit)s) AS expired"

@contextlib.contextmanager
def translated_errors() -> Iterator[None]:
    """Raise the Harvest exception for a Harvest SQLSTATE; anything else passes through."""
    try:
        yield
    except psycopg.Error as exc:
        mapped = from_database_error(exc)
        if mapped is None:
            raise
        raise mapped from None


def _jsonb(value: Any) -> Jsonb:
    return Jsonb(value)


class SqlApi:
    """The SQL API over one synchronous connection (the caller owns transactions)."""

    def __init__(self, conn: psycopg.Connection):
        self.conn = conn

    def _all(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        with translated_errors(), self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(sql, params)
            return cur.fetchall() if cur.description else []

    def _one(self, sql: str, **params: Any) -> dict[str, Any] | None:
        rows = self._all(sql, **params)
        return rows[0] if rows else None

    def start_workflow(self, workflow_name: str, input: list[Any], workflow_id: str | None,
                       task_queue: str, reuse_policy: str, conflict_policy: str,
                       search_attributes: dict[str, Any], priority: int,
                       execution_timeout: float | None = None,
                       run_timeout: float | None = None) -> dict[str, Any]:
        return self._one(START_WORKFLOW, workflow_name=workflow_name, input=_jsonb(input),
                         workflow_id=workflow_id, task_queue=task_queue, reuse_policy=reuse_policy,
                         conflict_policy=conflict_policy,
                         search_attributes=_jsonb(search_attributes), priority=priority,
                         execution_timeout=execution_timeout, run_timeout=run_timeout)

    def signal_workflow(self, execution_id: str, signal_name: str, payload: Any) -> int:
        return self._one(SIGNAL_WORKFLOW, execution_id=execution_id, signal_name=signal_name,
                         payload=_jsonb(payload))["event_id"]

    def signal_with_start(self, workflow_name: str, workflow_id: str, signal_name: str, payload: Any,
                          input: list[Any], task_queue: str,
                          search_attributes: dict[str, Any]) -> dict[str, Any]:
        return self._one(SIGNAL_WITH_START, workflow_name=workflow_name, workflow_id=workflow_id,
                         signal_name=signal_name, payload=_jsonb(payload), input=_jsonb(input),
                         task_queue=task_queue, search_attributes=_jsonb(search_attributes))

    def cancel_workflow(self, execution_id: str, reason: str | None) -> bool:
        return self._one(CANCEL_WORKFLOW, execution_id=execution_id, reason=reason)["requested"]

    def list_children(self, execution_id: str, status: str | None = None,
                      depth: int = 1) -> list[dict[str, Any]]:
        return self._all(LIST_CHILDREN, execution_id=execution_id, status=status, depth=depth)

    def get_execution(self, execution_id: str) -> dict[str, Any]:
        return self._one(GET_EXECUTION, execution_id=execution_id)

    def get_history(self, execution_id: str, after_event_id: int = 0) -> list[dict[str, Any]]:
        return self._all(GET_HISTORY, execution_id=execution_id, after_event_id=after_event_id)

    def iter_history(self, execution_id: str, page_size: int = 500) -> Iterator[dict[str, Any]]:
        """The history in order, fetched page_size events per round trip through a
        server-side cursor (in a transaction of its own), so that a history of any size
        streams through a bounded amount of client memory."""
        with translated_errors(), self.conn.transaction(), \
                self.conn.cursor(name="harvest_history", row_factory=dict_row) as cur:
            cur.itersize = page_size
            cur.execute(GET_HISTORY, {"execution_id": execution_id, "after_event_id": 0})
            yield from cur

    def wait_for_result(self, execution_id: str, waiter_id: str) -> dict[str, Any]:
        return self._one(WAIT_FOR_RESULT, execution_id=execution_id, waiter_id=waiter_id)

    def stop_waiting(self, waiter_id: str) -> None:
        self._all(STOP_WAITING, waiter_id=waiter_id)

    def terminate_workflow(self, execution_id: str, reason: str | None) -> None:
        self._all(TERMINATE_WORKFLOW, execution_id=execution_id, reason=reason)

    def schema_version(self) -> str | None:
        row = self._one(SCHEMA_VERSION)
        return row["version"] if row else None

    def payload_limit(self) -> int:
        return self._one(PAYLOAD_LIMIT)["payload_limit"]

    # -- flow control ----------------------------------------------------------------------
    def declare_flow_policies(self, policies: dict[str, Any]) -> int:
        return self._one(DECLARE_FLOW_POLICIES, policies=_jsonb(policies))["declared"]

    def concurrency_status(self, key: str | None = None) -> list[dict[str, Any]]:
        return self._all(CONCURRENCY_STATUS, key=key)

    def set_rate_limit_override(self, activity_name: str, rps: float, burst: float | None = None,
                                ttl_secs: float = 3600) -> dict[str, Any]:
        return self._one(SET_RATE_LIMIT_OVERRIDE, activity_name=activity_name, rps=rps, burst=burst,
                         ttl_secs=ttl_secs)

    def clear_rate_limit_override(self, activity_name: str) -> bool:
        return self._one(CLEAR_RATE_LIMIT_OVERRIDE, activity_name=activity_name)["cleared"]

    def get_rate_limit(self, activity_name: str) -> dict[str, Any] | None:
        return self._one(GET_RATE_LIMIT, activity_name=activity_name)

    def quota_usage(self, key: str, quota: str) -> int:
        return self._one(QUOTA_USAGE, key=key, quota=quota)["usage"]

    def mutex_status(self, key: str | None = None) -> list[dict[str, Any]]:
        return self._all(MUTEX_STATUS, key=key)

    def pending_starts_status(self, workflow_name: str | None = None) -> list[dict[str, Any]]:
        return self._all(PENDING_STARTS_STATUS, workflow_name=workflow_name)

    def usage_report(self, from_: Any, to: Any, group_by: str = "workflow_name",
                     max_window: Any = None) -> list[dict[str, Any]]:
        return self._all(USAGE_REPORT, from_=from_, to=to, group_by=group_by, max_window=max_window)

    def list_dead_letters(self, limit: int = 100, activity_name: str | None = None,
                          workflow_name: str | None = None, before_id: int | None = None) -> list[dict]:
        return self._all(LIST_DEAD_LETTERS, limit=limit, activity_name=activity_name,
                         workflow_name=workflow_name, before_id=before_id)

    def get_dead_letter(self, id: int) -> dict[str, Any]:
        return self._one(GET_DEAD_LETTER, id=id)

    def replay_dead_letter(self, id: int) -> int:
        return self._one(REPLAY_DEAD_LETTER, id=id)["task_id"]

    def discard_dead_letter(self, id: int) -> None:
        self._all(DISCARD_DEAD_LETTER, id=id)

    def reset_workflow(self, execution_id: str, to_event: int, reason: str, operator_id: str | None,
                       signal_reapply: str = "drop", dry_run: bool = False) -> dict[str, Any]:
        return self._one(RESET_WORKFLOW, execution_id=execution_id, to_event=to_event, reason=reason,
                         operator_id=operator_id, signal_reapply=signal_reapply, dry_run=dry_run)["plan"]

    def version_usage(self, change_id: str, version: int | None = None,
                      state_group: str = "active") -> list[dict[str, Any]]:
        return self._all(VERSION_USAGE, change_id=change_id, version=version, state_group=state_group)

    # -- the operator surface --------------------------------------------------------------
    def list_executions(self, state: str | None = None, workflow_name: str | None = None,
                        search_attributes: list[str] | None = None, created_after: Any = None,
                        created_before: Any = None, page_size: int = 50, cursor: str | None = None,
                        order: str = "desc") -> list[dict[str, Any]]:
        return self._all(LIST_EXECUTIONS, state=state, workflow_name=workflow_name,
                         search_attributes=list(search_attributes) if search_attributes else None,
                         created_after=created_after, created_before=created_before,
                         page_size=page_size, cursor=cursor, order=order)

    def workflow_stack(self, execution_id: str) -> dict[str, Any]:
        return self._one(WORKFLOW_STACK, execution_id=execution_id)["stack"]

    def aggregate_dead_letters(self, group_by: str = "all") -> list[dict[str, Any]]:
        return self._all(AGGREGATE_DEAD_LETTERS, group_by=group_by)

    def bulk_dead_letters(self, action: str, activity_name: str | None = None,
                          workflow_name: str | None = None, failed_after: Any = None,
                          failed_before: Any = None, limit: int = 100, dry_run: bool = False,
                          operator: str | None = None) -> dict[str, Any]:
        if action not in ("replay", "discard"):
            raise ValueError(f"unknown bulk dead-letter action {action!r}")
        return self._one(BULK_DEAD_LETTERS.replace("{action}", action), activity_name=activity_name,
                         workflow_name=workflow_name, failed_after=failed_after,
                         failed_before=failed_before, limit=limit, dry_run=dry_run,
                         operator=operator)["result"]

    def list_workers(self, queue: str | None = None, status: str | None = None,
                     health: str | None = None) -> list[dict[str, Any]]:
        return self._all(LIST_WORKERS, queue=queue, status=status, health=health)

    def get_worker(self, worker_id: str) -> dict[str, Any]:
        return self._one(GET_WORKER, worker_id=worker_id)["worker"]

    def worker_health(self) -> dict[str, Any]:
        return self._one(WORKER_HEALTH)["health"]

    def drain_worker(self, worker_id: str, deadline: Any = None, operator: str | None = None) -> dict[str, Any]:
        return self._one(DRAIN_WORKER, worker_id=worker_id, deadline=deadline, operator=operator)["result"]

    def drain_preview(self, queue: str | None = None, worker_id: str | None = None) -> list[dict[str, Any]]:
        return self._all(DRAIN_PREVIEW, queue=queue, worker_id=worker_id)

    def list_audit_log(self, limit: int = 100, operation: str | None = None) -> list[dict[str, Any]]:
        return self._all(LIST_AUDIT_LOG, limit=limit, operation=operation)

    def retention_status(self) -> dict[str, Any]:
        return self._one(RETENTION_STATUS)["status"]

    def set_retention(self, max_age: str | None, batch_size: int | None = None,
                      operator: str | None = None) -> dict[str, Any]:
        return self._one(SET_RETENTION, max_age=max_age, batch_size=batch_size, operator=operator)["status"]

    def run_retention(self, max_age: str | None = None, batch_size: int | None = None,
                      operator: str | None = None) -> dict[str, Any]:
        return self._one(RUN_RETENTION, max_age=max_age, batch_size=batch_size, operator=operator)["result"]

    def set_worker_retention(self, max_age: str | None, operator: str | None = None) -> dict[str, Any]:
        return self._one(SET_WORKER_RETENTION, max_age=max_age, operator=operator)["status"]

    def prune_workers(self, max_age: str | None = None, operator: str | None = None) -> dict[str, Any]:
        return self._one(PRUNE_WORKERS, max_age=max_age, operator=operator)["result"]


    # -- queries and updates (functions/queries.sql) ----------------------------------------
    def request_query(self, execution_id: str, name: str, arg: Any, timeout: float) -> int:
        return self._one(REQUEST_QUERY, execution_id=execution_id, name=name, arg=_jsonb(arg),
                         timeout=timeout)["request_id"]

    def request_update(self, execution_id: str, name: str, arg: Any, update_id: str | None,
                       timeout: float) -> dict[str, Any]:
        return self._one(REQUEST_UPDATE, execution_id=execution_id, name=name, arg=_jsonb(arg),
                         update_id=update_id, timeout=timeout)

    def update_with_start(self, workflow_name: str, workflow_id: str, name: str, arg: Any,
                          input: list[Any], task_queue: str, update_id: str | None, timeout: float,
                          search_attributes: dict[str, Any]) -> dict[str, Any]:
        return self._one(UPDATE_WITH_START, workflow_name=workflow_name, workflow_id=workflow_id,
                         name=name, arg=_jsonb(arg), input=_jsonb(input), task_queue=task_queue,
                         update_id=update_id, timeout=timeout,
                         search_attributes=_jsonb(search_attributes))

    def get_query_request(self, request_id: int) -> dict[str, Any]:
        return self._one(GET_QUERY_REQUEST, request_id=request_id)

class AsyncSqlApi:
    """The SQL API over an async connection pool: one call, one transaction."""

    def __init__(self, pool: Any):
        self.pool = pool

    async def _all(self, sql: str, **params: Any) -> list[dict[str, Any]]:
        async with self.pool.connection() as conn:
            with translated_errors():
                async with conn.cursor(row_factory=dict_row) as cur:
                    await cur.execute(sql, params)
                    return await cur.fetchall() if cur.description else []

    async def _one(self, sql: str, **params: Any) -> dict[str, Any] | None:
        rows = await self._all(sql, **params)
        return rows[0] if rows else None

    async def start_workflow(self, workflow_name: str, input: list[Any], workflow_id: str | None,
                             task_queue: str, reuse_policy: str, conflict_policy: str,
                             search_attributes: dict[str, Any], priority: int,
                             execution_timeout: float | None = None,
                             run_timeout: float | None = None) -> dict[str, Any]:
        return await self._one(START_WORKFLOW, workflow_name=workflow_name, input=_jsonb(input),
                               workflow_id=workflow_id, task_queue=task_queue,
                               reuse_policy=reuse_policy, conflict_policy=conflict_policy,
                               search_attributes=_jsonb(search_attributes), priority=priority,
                               execution_timeout=execution_timeout, run_timeout=run_timeout)

    async def start_workflows(self, starts: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Start many (start_workflow's arguments, by name, per start) in one transaction;
        one row per start, ``n`` its position from 1."""
        return await self._all(START_WORKFLOWS, starts=_jsonb(starts))

    async def signal_workflow(self, execution_id: str, signal_name: str, payload: Any) -> int:
        return (await self._one(SIGNAL_WORKFLOW, execution_id=execution_id, signal_name=signal_name,
                                payload=_jsonb(payload)))["event_id"]

    async def signal_with_start(self, workflow_name: str, workflow_id: str, signal_name: str,
                                payload: Any, input: list[Any], task_queue: str,
                                search_attributes: dict[str, Any]) -> dict[str, Any]:
        return await self._one(SIGNAL_WITH_START, workflow_name=workflow_name, workflow_id=workflow_id,
                               signal_name=signal_name, payload=_jsonb(payload), input=_jsonb(input),
                               task_queue=task_queue, search_attributes=_jsonb(search_attributes))

    async def cancel_workflow(self, execution_id: str, reason: str | None) -> bool:
        return (await self._one(CANCEL_WORKFLOW, execution_id=execution_id, reason=reason))["requested"]

    async def get_execution(self, execution_id: str) -> dict[str, Any]:
        return await self._one(GET_EXECUTION, execution_id=execution_id)

    async def get_history(self, execution_id: str, after_event_id: int = 0) -> list[dict[str, Any]]:
        return await self._all(GET_HISTORY, execution_id=execution_id, after_event_id=after_event_id)

    async def wait_for_result(self, execution_id: str, waiter_id: str) -> dict[str, Any]:
        return await self._one(WAIT_FOR_RESULT, execution_id=execution_id, waiter_id=waiter_id)

    async def stop_waiting(self, waiter_id: str) -> None:
        await self._all(STOP_WAITING, waiter_id=waiter_id)

    async def terminate_workflow(self, execution_id: str, reason: str | None) -> None:
        await self._all(TERMINATE_WORKFLOW, execution_id=execution_id, reason=reason)

    async def claim_tasks(self, worker_id: str, queues: list[str], limit: int,
                          workflow_lease_secs: float) -> list[dict[str, Any]]:
        return await self._all(CLAIM_TASKS, worker_id=worker_id, queues=queues, limit=limit,
                               workflow_lease_secs=workflow_lease_secs)

    async def next_due_at(self, queues: list[str]) -> Any:
        return (await self._one(NEXT_DUE_AT, queues=queues))["due_at"]

    async def complete_workflow_tasks(self, worker_id: str,
                                      items: list[tuple[int, int, int, list[dict[str, Any]], int]],
                                      event_cap: int | None = 50_000,
                                      byte_cap: int | None = 50 * 1024 * 1024) -> list[dict[str, Any]]:
        """Commit (task id, fencing token, through, commands, hand-off slots) decisions in one
        transaction; one row per item (functions/decide.sql)."""
        return await self._all(COMPLETE_WORKFLOW_TASKS, worker_id=worker_id,
                               task_ids=[i[0] for i in items], fencing_tokens=[i[1] for i in items],
                               throughs=[i[2] for i in items], commands=[_jsonb(i[3]) for i in items],
                               hand_off_slots=[i[4] for i in items], event_cap=event_cap,
                               byte_cap=byte_cap)

    async def fail_workflow_task(self, task_id: int, fencing_token: int, failure: dict[str, Any],
                                 retry_in_secs: float) -> None:
        await self._all(FAIL_WORKFLOW_TASK, task_id=task_id, fencing_token=fencing_token,
                        failure=_jsonb(failure), retry_in_secs=retry_in_secs)

    async def complete_activities(self, worker_id: str,
                                  items: list[tuple[int, int, Any, dict[str, Any] | None]],
                                  hand_off: bool, workflow_lease_secs: float,
                                  event_cap: int | None = 50_000,
                                  byte_cap: int | None = 50 * 1024 * 1024) -> list[dict[str, Any]]:
        """Complete (task id, fencing token, result, decision or None) items in one transaction.

        One row per item; ``decided`` is set where the item's decision was applied
        with its result (functions/activities.sql).
        """
        return await self._all(COMPLETE_ACTIVITIES, worker_id=worker_id,
                               task_ids=[i[0] for i in items], fencing_tokens=[i[1] for i in items],
                               results=[_jsonb(i[2]) for i in items], hand_off=hand_off,
                               workflow_lease_secs=workflow_lease_secs,
                               decisions=[None if i[3] is None else _jsonb(i[3]) for i in items],
                               event_cap=event_cap, byte_cap=byte_cap)

    async def fail_activity(self, task_id: int, fencing_token: int, failure: dict[str, Any]) -> str:
        return (await self._one(FAIL_ACTIVITY, task_id=task_id, fencing_token=fencing_token,
                                failure=_jsonb(failure)))["outcome"]

    async def heartbeat_activity(self, task_id: int, fencing_token: int, details: Any) -> bool:
        row = await self._one(HEARTBEAT_ACTIVITY, task_id=task_id, fencing_token=fencing_token,
                              details=None if details is None else _jsonb(details))
        return bool(row["cancel_requested"])

    async def register_worker(self, worker_id: str, queues: list[str], hostname: str, pid: int,
                              heartbeat_interval_secs: float, metadata: dict[str, Any]) -> None:
        await self._all(REGISTER_WORKER, worker_id=worker_id, queues=queues, hostname=hostname,
                        pid=pid, heartbeat_interval_secs=heartbeat_interval_secs,
                        metadata=_jsonb(metadata))

    async def worker_heartbeat(self, worker_id: str) -> str:
        return (await self._one(WORKER_HEARTBEAT, worker_id=worker_id))["status"]

    async def scan(self, limit: int = 100) -> dict[str, Any]:
        return (await self._one(SCAN, limit=limit))["moved"]

    async def worker_sleep(self, worker_id: str, sleeping: bool) -> None:
        await self._all(WORKER_SLEEP, worker_id=worker_id, sleeping=sleeping)

    async def release_task(self, task_id: int, fencing_token: int) -> bool:
        return (await self._one(RELEASE_TASK, task_id=task_id, fencing_token=fencing_token))["released"]

    async def register_workflows(self, queues: list[str], names: list[str]) -> int:
        return (await self._one(REGISTER_WORKFLOWS, queues=queues, names=names))["registered"]

    async def begin_worker_drain(self, worker_id: str) -> str:
        return (await self._one(BEGIN_WORKER_DRAIN, worker_id=worker_id))["status"]

    async def stop_worker(self, worker_id: str) -> int:
        return (await self._one(STOP_WORKER, worker_id=worker_id))["released"]

    async def schema_version(self) -> str | None:
        row = await self._one(SCHEMA_VERSION)
        return row["version"] if row else None

    async def payload_limit(self) -> int:
        return (await self._one(PAYLOAD_LIMIT))["payload_limit"]

    async def declare_flow_policies(self, policies: dict[str, Any]) -> int:
        return (await self._one(DECLARE_FLOW_POLICIES, policies=_jsonb(policies)))["declared"]


    # -- queries and updates (functions/queries.sql) ----------------------------------------
    async def request_query(self, execution_id: str, name: str, arg: Any, timeout: float) -> int:
        return (await self._one(REQUEST_QUERY, execution_id=execution_id, name=name,
                                arg=_jsonb(arg), timeout=timeout))["request_id"]

    async def request_update(self, execution_id: str, name: str, arg: Any, update_id: str | None,
                             timeout: float) -> dict[str, Any]:
        return await self._one(REQUEST_UPDATE, execution_id=execution_id, name=name,
                               arg=_jsonb(arg), update_id=update_id, timeout=timeout)

    async def update_with_start(self, workflow_name: str, workflow_id: str, name: str, arg: Any,
                                input: list[Any], task_queue: str, update_id: str | None,
                                timeout: float, search_attributes: dict[str, Any]) -> dict[str, Any]:
        return await self._one(UPDATE_WITH_START, workflow_name=workflow_name,
                               workflow_id=workflow_id, name=name, arg=_jsonb(arg),
                               input=_jsonb(input), task_queue=task_queue, update_id=update_id,
                               timeout=timeout, search_attributes=_jsonb(search_attributes))

    async def get_query_request(self, request_id: int) -> dict[str, Any]:
        return await self._one(GET_QUERY_REQUEST, request_id=request_id)

    async def claim_queries(self, worker_id: str, queues: list[str], limit: int,
                            lease_secs: float) -> list[dict[str, Any]]:
        return await self._all(CLAIM_QUERIES, worker_id=worker_id, queues=queues, limit=limit,
                               lease_secs=lease_secs)

    async def answer_query(self, request_id: int, worker_id: str, answer: Any,
                           error: dict[str, Any] | None) -> str | None:
        return (await self._one(ANSWER_QUERY, request_id=request_id, worker_id=worker_id,
                                answer=None if error is not None else _jsonb(answer),
                                error=None if error is None else _jsonb(error)))["status"]

    async def accept_update(self, request_id: int, worker_id: str) -> str | None:
        return (await self._one(ACCEPT_UPDATE, request_id=request_id, worker_id=worker_id))["status"]

    async def expire_query_requests(self, limit: int = 1000) -> int:
        return (await self._one(EXPIRE_QUERY_REQUESTS, limit=limit))["expired"]

    # -- process roles and drain deadlines (functions/worker_drain.sql, retention.sql) ------
    async def worker_drain_deadline(self, worker_id: str) -> dict[str, Any] | None:
        return await self._one(WORKER_DRAIN_DEADLINE, worker_id=worker_id)

    async def run_retention(self, max_age: str | None = None, batch_size: int | None = None,
                            operator: str | None = None) -> dict[str, Any]:
        return (await self._one(RUN_RETENTION, max_age=max_age, batch_size=batch_size,
                                operator=operator))["result"]

    async def prune_workers(self, max_age: str | None = None, operator: str | None = None) -> dict[str, Any]:
        return (await self._one(PRUNE_WORKERS, max_age=max_age, operator=operator))["result"]


WORKER_DRAIN_DEADLINE = "SELECT * FROM harvest.get_worker_drain_deadline(%(worker_id)s)"
