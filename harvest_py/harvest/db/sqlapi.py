"""Every SQL call site of the engine, declared once.

Python never writes engine tables itself: it calls the ``harvest.*`` functions
(``functions/``), and this module is the only place that does. Each call is
declared once below (``@call``: its SQL text, a function that turns the method's
arguments into the statement's parameters, and the shape of its answer), and
both APIs are made from those declarations: ``SqlApi`` on a synchronous psycopg
connection (the Client's and the CLI's), ``AsyncSqlApi`` on an async pool or
connection (the worker's and the AsyncClient's). A call therefore exists in both
or in neither, with the same arguments and the same answer; the only code that
differs is the two executors (``_all`` / ``_stream``), which run a statement.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as _dt
import inspect
import random
import time
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, LiteralString, cast

import psycopg
from psycopg.rows import dict_row
from psycopg.types.json import Jsonb

from harvest.core.batches import BATCH_STEP
from harvest.core.errors import TransactionConflict, from_database_error
from harvest.core.receipts import SignalReceipt
from harvest.db.arrays import BigintArray, JsonbArray
from harvest.db.jsoncodec import dumps, loads

START_WORKFLOW = """
SELECT * FROM harvest.start_workflow(
    p_workflow_name => %(workflow_name)s, p_input => %(input)s, p_workflow_id => %(workflow_id)s,
    p_queue => %(queue)s, p_reuse_policy => %(reuse_policy)s,
    p_conflict_policy => %(conflict_policy)s, p_search_attributes => %(search_attributes)s,
    p_priority => %(priority)s, p_execution_timeout_secs => %(execution_timeout)s,
    p_run_timeout_secs => %(run_timeout)s, p_shard => %(shard)s, p_traceparent => %(traceparent)s)
"""
START_WORKFLOWS = "SELECT * FROM harvest.start_workflows(%(starts)s)"
# The signal, then the names the run waited for as it took it (list_awaited_signals before the
# signal's event, read after the signal: the FROM's row is made first).
SIGNAL_WORKFLOW = """
SELECT s.event_id, %(signal_name)s AS signal_name,
       ARRAY(SELECT DISTINCT a.name FROM harvest.list_awaited_signals(%(execution_id)s, s.event_id) AS a
             ORDER BY 1)
           AS awaited_signals
FROM (SELECT harvest.signal_workflow(%(execution_id)s, %(signal_name)s, %(payload)s,
                                     p_traceparent => %(traceparent)s) AS event_id OFFSET 0) AS s
"""
LIST_AWAITED_SIGNALS = "SELECT * FROM harvest.list_awaited_signals(%(execution_id)s)"
SIGNAL_WORKFLOW_EAGER = """
SELECT harvest.signal_workflow_eager(%(execution_id)s, %(signal_name)s, %(payload)s, NULL, %(traceparent)s,
                                     %(worker_id)s, %(workflow_lease_secs)s) AS answer
"""
SIGNAL_WITH_START = """
SELECT * FROM harvest.signal_with_start(
    p_workflow_name => %(workflow_name)s, p_workflow_id => %(workflow_id)s,
    p_signal_name => %(signal_name)s, p_signal_payload => %(payload)s, p_input => %(input)s,
    p_queue => %(queue)s, p_search_attributes => %(search_attributes)s, p_traceparent => %(traceparent)s)
"""
CANCEL_WORKFLOW = "SELECT harvest.cancel_workflow(%(execution_id)s, %(reason)s) AS requested"
LIST_CHILDREN = "SELECT * FROM harvest.list_children(%(execution_id)s, %(status)s, %(depth)s)"
# The columns of harvest.claim_tasks (functions/claim.sql), named so that ``options`` comes as
# its text (claimed_rows decodes each distinct text once) and ``execution_id`` as text, as a
# task handed back in a jsonb row has it: every use of it in the worker is its text, and
# psycopg's uuid loader and UUID.__str__ cost ~2-3 us a row. Every column but
# lease_expires_at, which the worker never reads (nor does a task handed in a jsonb row carry
# it: claim.sql _worker_task); tests/unit/test_claim_columns.py keeps the list equal to the
# function's.
CLAIM_TASKS = """
SELECT task_id, kind, execution_id::text AS execution_id, workflow_name, workflow_id, queue, seq,
       activity_name, input, options::text AS options, attempt, fencing_token,
       heartbeat_details, new_events, new_events_after, owner_epoch
  FROM harvest.claim_tasks(%(worker_id)s, %(queues)s, %(limit)s, %(workflow_lease_secs)s)
"""
NEXT_DUE_AT = "SELECT harvest.next_due_at(%(queues)s) AS due_at"
# -- Redis dispatch (functions/claim.sql, docs/redis-dispatch.md)
CLAIM_NAMED_TASKS = """
SELECT * FROM harvest.claim_named_tasks(%(worker_id)s, %(queues)s, %(task_ids)s, %(workflow_lease_secs)s)
"""
LIST_CLAIMABLE_TASKS = "SELECT * FROM harvest.list_claimable_tasks(%(execution_ids)s::uuid[], %(kind)s)"
COMPLETE_WORKFLOW_TASKS = """
SELECT * FROM harvest.complete_workflow_tasks(%(worker_id)s, %(task_ids)b, %(fencing_tokens)b,
                                              %(throughs)b, %(commands)b::jsonb[],
                                              %(hand_off_slots)b::integer[], %(event_cap)s, %(byte_cap)s,
                                              %(owner_epochs)s::bigint[])
"""
FAIL_WORKFLOW_TASK = """
SELECT harvest.fail_workflow_task(%(task_id)s, %(fencing_token)s, %(failure)s, %(retry_in_secs)s)
"""
RELEASE_WORKFLOW_TASK = """
SELECT harvest.release_workflow_task(%(task_id)s, %(fencing_token)s, %(failure)s, %(retry_in_secs)s)
       AS handed_back
"""
# The arrays go in binary (%b): psycopg's text form of an array escapes every quote
# of every JSON element with a regular expression, a tenth of a busy worker's CPU; the
# group commits' arrays are harvest.db.arrays' lists, each written in one loop.
COMPLETE_ACTIVITIES = """
SELECT * FROM harvest.complete_activities(%(worker_id)s, %(task_ids)b, %(fencing_tokens)b,
                                          %(results)b::jsonb[], %(hand_off)s, %(workflow_lease_secs)s,
                                          %(decisions)b::jsonb[], %(event_cap)s, %(byte_cap)s)
"""
COMPLETE_ACTIVITIES_WITH_CLAIM = """
SELECT * FROM harvest.complete_activities_with_claim(%(worker_id)s, %(queues)s, %(claim_limit)s,
                                                     %(task_ids)b, %(fencing_tokens)b, %(results)b::jsonb[],
                                                     %(hand_off)s, %(workflow_lease_secs)s,
                                                     %(decisions)b::jsonb[], %(event_cap)s, %(byte_cap)s)
"""
FAIL_ACTIVITY = "SELECT harvest.fail_activity(%(task_id)s, %(fencing_token)s, %(failure)s) AS outcome"
HEARTBEAT_ACTIVITY = """
SELECT harvest.heartbeat_activity(%(task_id)s, %(fencing_token)s, %(details)s) AS cancel_requested
"""
HEARTBEAT_WORKFLOW_TASK = """
SELECT harvest.heartbeat_workflow_task(%(task_id)s, %(fencing_token)s, %(lease_secs)s) AS extended
"""
GET_EXECUTION = "SELECT * FROM harvest.get_execution(%(execution_id)s)"
GET_EXECUTION_BY_WORKFLOW_ID = (
    "SELECT * FROM harvest.get_execution_by_workflow_id(%(workflow_id)s, %(workflow_name)s)"
)
WAIT_FOR_RESULT = "SELECT * FROM harvest.wait_for_result(%(execution_id)s, %(waiter_id)s)"
STOP_WAITING = "SELECT harvest.stop_waiting_for_result(%(waiter_id)s)"
GET_HISTORY = (
    "SELECT * FROM harvest.get_history(%(execution_id)s, %(after_event_id)s, %(limit)s, %(max_bytes)s)"
)
GET_HISTORY_PAGE = """
SELECT * FROM harvest.get_history_page(%(execution_id)s, %(from_event_id)s, %(before_event_id)s, %(limit)s)
"""
TERMINATE_WORKFLOW = "SELECT harvest.terminate_workflow(%(execution_id)s, %(reason)s)"
REGISTER_WORKER = """
SELECT * FROM harvest.register_worker(%(worker_id)s, %(queues)s, %(hostname)s, %(pid)s,
                                      %(heartbeat_interval_secs)s, %(metadata)s, %(lost_after_secs)s,
                                      %(incarnation)s)
"""
WORKER_HEARTBEAT = "SELECT harvest.heartbeat_worker(%(worker_id)s, %(incarnation)s) AS status"
REGISTER_WORKFLOWS = "SELECT harvest.register_workflows(%(queues)s, %(names)s) AS registered"
BEGIN_WORKER_DRAIN = "SELECT harvest.begin_worker_drain(%(worker_id)s, %(incarnation)s) AS status"
STOP_WORKER = "SELECT harvest.stop_worker(%(worker_id)s, %(incarnation)s) AS released"
RELEASE_TASK = "SELECT harvest.release_task(%(task_id)s, %(fencing_token)s) AS released"
WORKER_SLEEP = "SELECT harvest.set_worker_sleeping(%(worker_id)s, %(sleeping)s) AS settled"
SCAN = "SELECT harvest.scan(%(limit)s, %(scanned_secs)s) AS moved"
LIST_DEAD_LETTERS = """
SELECT * FROM harvest.list_dead_letters(
    %(limit)s, %(activity_name)s, %(workflow_name)s, %(before_id)s, %(before_failed_at)s
)
"""
GET_DEAD_LETTER = "SELECT * FROM harvest.get_dead_letter(%(id)s)"
REPLAY_DEAD_LETTER = "SELECT harvest.replay_dead_letter(%(id)s) AS task_id"
DISCARD_DEAD_LETTER = "SELECT harvest.discard_dead_letter(%(id)s)"
SCHEMA_VERSION = "SELECT harvest.schema_version() AS version"
FUNCTIONS_VERSION = "SELECT harvest.functions_version() AS version"
GET_FUNCTION_RELEASES = "SELECT harvest.get_function_releases() AS releases"
GET_FUNCTION_STATE = "SELECT harvest.get_function_state(%(names)s, %(expected)s) AS state"
# -- shard identity (functions/shards.sql)
GET_SHARD_ID = "SELECT harvest.get_shard_id() AS shard_id"
GET_DEPLOYMENT_SHARDS = "SELECT harvest.get_deployment_shards() AS shards"
SET_SHARD_ID = "SELECT harvest.set_shard_id(%(shard_id)s, %(operator_id)s) AS result"
GET_SHARD_HEALTH = "SELECT harvest.get_shard_health(%(queues)s) AS health"
GET_SHARD_READINESS = "SELECT harvest.get_shard_readiness(%(queues)s) AS health"
COUNT_STRANDED_TASKS = "SELECT * FROM harvest.count_stranded_tasks()"
# -- the metrics sampler's gauges (functions/metrics.sql)
GET_METRIC_SAMPLES = "SELECT harvest.get_metric_samples(%(max_keys)s) AS samples"
# One metrics sampler per database: the session that holds its lock (functions/metrics.sql; it goes
# with the session). Taken by the function, as the owner: the advisory-lock functions may be
# revoked from PUBLIC (docs/security.md, "Advisory locks").
CLAIM_SAMPLER_LEAD = "SELECT harvest.claim_sampler_lead() AS leader"
LIST_FORCED_CLOSES = """
SELECT * FROM harvest.list_forced_closes(%(after_at)s, %(after_id)s, %(until)s, %(limit)s)
"""
# -- shard rebalancing (functions/rebalance.sql)
LIST_MIGRATION_CANDIDATES = """
SELECT * FROM harvest.list_migration_candidates(%(workflow_name)s, %(execution_id)s, %(limit)s)
"""
BEGIN_MIGRATION = (
    "SELECT harvest.begin_migration(%(execution_id)s, %(target_shard)s, %(operator_id)s) AS result"
)
GET_MIGRATION_COPY = "SELECT harvest.get_migration_copy(%(migration_id)s) AS result"
ACCEPT_MIGRATION_COPY = "SELECT harvest.accept_migration_copy(%(copy)s) AS result"
SET_MIGRATION_COPIED = "SELECT harvest.set_migration_copied(%(migration_id)s) AS result"
VERIFY_MIGRATION = "SELECT harvest.verify_migration(%(migration_id)s, %(target_digest)s) AS result"
CUT_OVER_MIGRATION = "SELECT harvest.cut_over_migration(%(migration_id)s, %(operator_id)s) AS result"
ACTIVATE_MIGRATION = "SELECT harvest.activate_migration(%(execution_id)s, %(migration_id)s) AS result"
DISCARD_MIGRATION_COPY = "SELECT harvest.discard_migration_copy(%(execution_id)s, %(migration_id)s) AS result"
COMPLETE_MIGRATION = """
SELECT harvest.complete_migration(%(migration_id)s, %(operator_id)s, %(automatic)s) AS result
"""
FAIL_MIGRATION = "SELECT harvest.fail_migration(%(migration_id)s, %(error)s, %(operator_id)s) AS result"
CLAIM_STALLED_MIGRATIONS = """
SELECT m AS result
FROM harvest.claim_stalled_migrations(%(stall_after_secs)s, %(target_shards)s, %(limit)s) AS m
"""
SET_MIGRATION_ERROR = "SELECT harvest.set_migration_error(%(migration_id)s, %(error)s)"
LIST_MIGRATIONS = "SELECT m AS result FROM harvest.list_migrations(%(phases)s, %(limit)s) AS m"
GET_RESIDENCE = "SELECT harvest.get_residence(%(execution_id)s) AS result"
# A history read and where the run lives, in one round trip: a sharded client reads the id's
# shard first and follows the pointer only when the row there is a seal.
GET_RESIDENT_HISTORY = """
SELECT r.residence, h.event_id, h.event_type, h.event_data, h.created_at
FROM (SELECT harvest.get_residence(%(execution_id)s) AS residence) AS r
LEFT JOIN LATERAL harvest.get_history(%(execution_id)s, %(after_event_id)s) AS h ON true
ORDER BY h.event_id
"""
SET_MIGRATION_FORWARD = "SELECT harvest.set_migration_forward(%(execution_id)s, %(shard)s) AS result"
HISTORY_DIGEST = "SELECT harvest.history_digest(%(execution_id)s) AS result"
GET_COPY_SCHEMA = "SELECT harvest.get_copy_schema() AS result"
# -- owner mode (functions/owners.sql)
GET_OWNER_MODE = "SELECT harvest.get_owner_mode() AS owner_mode"
SET_OWNER_MODE = "SELECT harvest.set_owner_mode(%(enabled)s, %(lease_secs)s, %(operator_id)s) AS owner_mode"
LIST_PARTITION_OWNERS = "SELECT * FROM harvest.list_partition_owners(%(worker_id)s)"
HEARTBEAT_PARTITIONS = """
SELECT * FROM harvest.heartbeat_partitions(%(worker_id)s, %(partitions)s::integer[])
"""
CLAIM_REMOTE_RELAYS = "SELECT * FROM harvest.claim_remote_relays(%(limit)s, %(lease_secs)s)"
DELIVER_EXTERNAL_RELAY = """
SELECT * FROM harvest.deliver_external_relay(%(source_shard)s, %(relay_id)s, %(kind)s,
    %(target_execution_id)s, %(target_workflow_name)s, %(target_workflow_id)s, %(payload)s,
    %(source_execution_id)s)
"""
COMPLETE_RELAY = """
SELECT harvest.complete_relay(%(relay_id)s, %(outcome)s, %(execution_id)s, %(message)s) AS result
"""
RELEASE_RELAY = "SELECT harvest.release_relay(%(relay_id)s, %(error)s) AS result"
CLAIM_CROSS_SHARD_CHILDREN = "SELECT * FROM harvest.claim_cross_shard_children(%(limit)s, %(lease_secs)s)"
SET_CROSS_SHARD_CHILD_RUNNING = (
    "SELECT harvest.set_cross_shard_child_running(%(child_execution_id)s) AS result"
)
COMPLETE_CROSS_SHARD_CHILD = """
SELECT harvest.complete_cross_shard_child(%(child_execution_id)s, %(status)s, %(output)s,
                                          %(failure)s) AS result
"""
RELEASE_CROSS_SHARD_CHILD = (
    "SELECT harvest.release_cross_shard_child(%(child_execution_id)s, %(error)s) AS result"
)
START_CROSS_SHARD_CHILD = """
SELECT * FROM harvest.start_cross_shard_child(%(child_execution_id)s, %(parent_execution_id)s,
    %(parent_seq)s, %(workflow_name)s, %(workflow_id)s, %(queue)s, %(input)s, %(parent_close_policy)s,
    %(traceparent)s, %(parent_shard)s)
"""
GET_CROSS_SHARD_CHILD = "SELECT * FROM harvest.get_cross_shard_child(%(child_execution_id)s)"
CANCEL_CROSS_SHARD_CHILD = """
SELECT harvest.cancel_cross_shard_child(%(child_execution_id)s, %(policy)s, %(parent_execution_id)s) AS result
"""
CLEAR_OWED_CHILD_END = "SELECT harvest.clear_owed_child_end(%(child_execution_id)s) AS result"
# -- flow control (functions/flow_concurrency.sql, flow_rate_limits.sql, flow_quotas.sql, flow_mutex.sql)
DECLARE_FLOW_POLICIES = "SELECT harvest.declare_flow_policies(%(policies)s) AS declared"
CONCURRENCY_STATUS = "SELECT * FROM harvest.list_concurrency_keys(%(key)s, %(after_key)s, %(limit)s)"
SET_RATE_LIMIT_OVERRIDE = """
SELECT * FROM harvest.set_rate_limit_override(%(activity_name)s, %(rps)s, %(burst)s, %(ttl_secs)s,
                                              %(operator_id)s)
"""
CLEAR_RATE_LIMIT_OVERRIDE = """
SELECT harvest.clear_rate_limit_override(%(activity_name)s, %(operator_id)s) AS cleared
"""
GET_RATE_LIMIT = "SELECT * FROM harvest.get_rate_limit(%(activity_name)s)"
QUOTA_USAGE = "SELECT harvest.quota_usage(%(key)s, %(quota)s) AS usage"
MUTEX_STATUS = "SELECT * FROM harvest.list_mutexes(%(key)s)"
# -- start throttle / debounce / batch and the usage report (functions/flow_throttle.sql, flow_usage.sql)
# A page of them, oldest first, after a position (the last row of the previous page): a backlog
# after an incident is every held-back start of a throttle, and one read must not carry them all.
PENDING_STARTS_STATUS = """
SELECT * FROM harvest.list_pending_starts(
    p_workflow_name => %(workflow_name)s, p_kind => %(kind)s, p_limit => %(limit)s,
    p_after_created_at => %(after_created_at)s, p_after_id => %(after_id)s, p_id => %(id)s,
    p_workflow_id => %(workflow_id)s)
"""
DISCARD_PENDING_START = """
SELECT harvest.discard_pending_start(%(id)s, %(operator_id)s, %(reason)s) AS result
"""
DISCARD_PENDING_STARTS = """
SELECT harvest.discard_pending_starts(
    p_workflow_name => %(workflow_name)s, p_gate_key => %(gate_key)s, p_kind => %(kind)s,
    p_created_after => %(created_after)s, p_created_before => %(created_before)s, p_limit => %(limit)s,
    p_dry_run => %(dry_run)s, p_operator_id => %(operator_id)s, p_reason => %(reason)s) AS result
"""
USAGE_REPORT = """
SELECT * FROM harvest.count_usage(%(from_)s, %(to)s, %(group_by)s)
"""
RECORD_LLM_CALL = """
SELECT harvest.record_llm_call(%(task_id)s, %(fencing_token)s, %(model)s, %(input_tokens)s,
                               %(output_tokens)s, %(cost_usd_micros)s, %(latency_ms)s) AS id
"""
RESET_WORKFLOW = """
SELECT harvest.reset_workflow(%(execution_id)s, %(to_event)s, %(reason)s, %(operator_id)s,
                              %(signal_reapply)s, %(dry_run)s) AS plan
"""
VERSION_USAGE = """
SELECT * FROM harvest.count_versions(%(change_id)s, %(version)s, %(state_group)s, %(workflow_name)s,
                                     %(history_before)s)
"""
# -- the operator surface (functions/executions.sql, workers.sql, retention.sql, dead_letters.sql)
LIST_EXECUTIONS = """
SELECT * FROM harvest.list_executions(
    p_status => %(state)s, p_workflow_name => %(workflow_name)s,
    p_search_attributes => %(search_attributes)s, p_created_after => %(created_after)s,
    p_created_before => %(created_before)s, p_page_size => %(page_size)s, p_cursor => %(cursor)s,
    p_order => %(order)s, p_filter => %(filter)s, p_workflow_id => %(workflow_id)s,
    p_failing => %(failing)s)
"""
COUNT_EXECUTIONS = """
SELECT * FROM harvest.count_executions(
    p_group_by => %(group_by)s, p_status => %(state)s, p_workflow_name => %(workflow_name)s,
    p_search_attributes => %(search_attributes)s, p_created_after => %(created_after)s,
    p_created_before => %(created_before)s, p_filter => %(filter)s, p_limit => %(limit)s,
    p_workflow_id => %(workflow_id)s, p_failing => %(failing)s)
"""
# The children of several executions in one statement (a fan-out level of the tree: a child
# may live on another shard than its parent, so each level asks every shard for all of them),
# each execution's newest first, in the ids' order, at most ``limit`` rows in all (NULL: all):
# each execution's page is read as a page, and the scan stops once it has enough.
# (pg_catalog.unnest: under the caller's search_path a function in a schema a lower role may
# create in, unnest(uuid[]), matched better than the polymorphic built-in: docs/security.md,
# "Whose search_path".)
LIST_CHILDREN_OF = """
SELECT c.* FROM pg_catalog.unnest(%(execution_ids)s::uuid[]) AS p (id)
CROSS JOIN LATERAL harvest.list_children(p.id, NULL, 1, NULL, NULL, %(limit)s) AS c
LIMIT %(limit)s
"""
# A page of an execution's direct children on this shard: the first ``limit`` in the list's
# order (created_at DESC, then id) after a position (the last row a page showed; NULL: from
# the newest), read as a page in the database (functions/executions.sql), so a page of
# children costs a page, not every child.
LIST_CHILDREN_PAGE = """
SELECT * FROM harvest.list_children(
    %(execution_id)s, %(status)s, 1, %(after_created_at)s::timestamptz, %(after_id)s::uuid, %(limit)s)
"""
WORKFLOW_STACK = "SELECT harvest.get_execution_stack(%(execution_id)s, %(limit)s) AS stack"
AGGREGATE_DEAD_LETTERS = "SELECT * FROM harvest.count_dead_letters(%(group_by)s)"
BULK_DEAD_LETTERS = """
SELECT harvest.{action}_dead_letters(
    p_activity_name => %(activity_name)s, p_workflow_name => %(workflow_name)s,
    p_failed_after => %(failed_after)s, p_failed_before => %(failed_before)s, p_limit => %(limit)s,
    p_dry_run => %(dry_run)s, p_operator_id => %(operator)s) AS result
"""
# cancel_workflows, terminate_workflows and signal_workflows (functions/executions.sql): one
# step of a batch by filter on one shard.
ACT_ON_WORKFLOWS = """
SELECT harvest.{action}_workflows(
    {signal}p_status => %(state)s, p_workflow_name => %(workflow_name)s,
    p_search_attributes => %(search_attributes)s, p_created_after => %(created_after)s,
    p_created_before => %(created_before)s, p_filter => %(filter)s, p_reason => %(reason)s,
    p_cursor => %(cursor)s, p_limit => %(limit)s, p_dry_run => %(dry_run)s, p_operator_id => %(operator_id)s,
    p_batch_id => %(batch_id)s, p_execution_ids => %(execution_ids)s::uuid[],
    p_workflow_id => %(workflow_id)s, p_failing => %(failing)s) AS result
"""
LIST_WORKERS = "SELECT * FROM harvest.list_workers(%(queue)s, %(status)s, %(health)s, %(limit)s)"
GET_WORKER = "SELECT harvest.get_worker(%(worker_id)s) AS worker"
WORKER_HEALTH = "SELECT harvest.get_worker_health() AS health"
DRAIN_WORKER = "SELECT harvest.drain_worker(%(worker_id)s, %(deadline)s, %(operator)s) AS result"
DRAIN_PREVIEW = "SELECT * FROM harvest.preview_drain(%(queue)s, %(worker_id)s)"
LIST_AUDIT_LOG = (
    "SELECT * FROM harvest.list_audit_log(%(limit)s, %(operation)s, %(before_at)s, %(before_id)s)"
)
PRUNE_AUDIT_LOG = (
    "SELECT harvest.prune_audit_log(%(older_than)s::interval, %(batch_size)s, %(operator)s) AS result"
)
COUNT_AUDIT_LOG = "SELECT harvest.count_audit_log(%(older_than)s::interval) AS result"
CREATE_API_TOKEN = "SELECT * FROM harvest.create_api_token(%(name)s, %(scope)s, %(expires_in)s, %(payloads)s)"
LIST_API_TOKENS = """
SELECT * FROM harvest.list_api_tokens(
    %(include_revoked)s, %(after_revoked)s, %(after_name)s, %(after_id)s, %(limit)s)
"""
REVOKE_API_TOKEN = "SELECT harvest.revoke_api_token(%(name)s) AS token_id"
AUTHENTICATE_API_TOKEN = "SELECT * FROM harvest.authenticate_api_token(%(secret_hash)s)"
LIST_EVENTS = (
    "SELECT * FROM harvest.list_events(%(after_global_id)s, %(limit)s, %(execution_id)s, %(max_bytes)s)"
)
GET_EVENT_HORIZON = "SELECT * FROM harvest.get_event_horizon()"
HEARTBEAT_EVENT_STREAM = "SELECT harvest.heartbeat_event_stream(%(listener_id)s)"
STOP_EVENT_STREAM = "SELECT harvest.stop_event_stream(%(listener_id)s) AS stopped"
RETENTION_STATUS = "SELECT harvest.get_retention_status() AS status"
# Both ages in one statement, so in one transaction: a refused worker age leaves the run age
# unset too. The fenced subquery (OFFSET 0) sets the run age first; the outer CASE reads its
# status when no worker age is given.
SET_RETENTION_SETTINGS = (
    "SELECT CASE WHEN %(worker_given)s"
    " THEN harvest.set_worker_retention(%(worker_max_age)s::interval, %(operator)s) ELSE r.status END"
    " AS status FROM (SELECT CASE WHEN %(max_age_given)s"
    " THEN harvest.set_retention(%(max_age)s::interval, %(batch_size)s, %(operator)s) END AS status"
    " OFFSET 0) AS r"
)
RUN_RETENTION = "SELECT harvest.run_retention(%(max_age)s::interval, %(batch_size)s, %(operator)s) AS result"
PRUNE_WORKERS = "SELECT harvest.prune_workers(%(max_age)s::interval, %(operator)s) AS result"
RELEASE_OWED_CHILD_ENDS = """
SELECT harvest.release_owed_child_ends(%(parent_shard)s, %(batch_size)s, %(include_running)s,
                                       %(operator)s, %(force)s) AS result
"""
PRUNE_FLOW_KEYS = "SELECT harvest.prune_flow_keys(%(batch_size)s) AS result"
# MIGRATED seals: listed on their shard, judged where they point, dropped on their shard.
LIST_EXPIRED_SEALS = """
SELECT * FROM harvest.list_expired_seals(%(max_age)s::interval, %(after_moved_at)s, %(after_id)s, %(limit)s)
"""
JUDGE_MOVED_RUNS = "SELECT * FROM harvest.list_moved_runs(%(ids)s::uuid[], %(max_age)s::interval)"
DROP_SEALS = "SELECT harvest.delete_seals(%(ids)s::uuid[], %(operator)s) AS deleted"


# -- queries and updates (functions/messages.sql)
REQUEST_QUERY = "SELECT harvest.request_query(%(execution_id)s, %(name)s, %(arg)s, %(timeout)s) AS request_id"
REQUEST_UPDATE = """
SELECT * FROM harvest.request_update(%(execution_id)s, %(name)s, %(arg)s, %(update_id)s, %(timeout)s,
                                     p_traceparent => %(traceparent)s)
"""
UPDATE_WITH_START = """
SELECT * FROM harvest.update_with_start(
    p_workflow_name => %(workflow_name)s, p_workflow_id => %(workflow_id)s,
    p_update_name => %(name)s, p_update_arg => %(arg)s, p_input => %(input)s,
    p_queue => %(queue)s, p_update_id => %(update_id)s, p_timeout_secs => %(timeout)s,
    p_search_attributes => %(search_attributes)s, p_traceparent => %(traceparent)s)
"""
PAYLOAD_LIMIT = "SELECT harvest.payload_limit() AS payload_limit"
GET_QUERY_REQUEST = "SELECT * FROM harvest.get_query_request(%(request_id)s)"
CLAIM_QUERIES = (
    "SELECT * FROM harvest.claim_query_requests(%(worker_id)s, %(queues)s, %(limit)s, %(lease_secs)s)"
)
ANSWER_QUERY = """
SELECT harvest.answer_query(%(request_id)s, %(worker_id)s, %(answer)s, %(error)s) AS status
"""
ACCEPT_UPDATE = "SELECT harvest.accept_update(%(request_id)s, %(worker_id)s) AS status"
WAIT_FOR_FIRST_WORKFLOW_TASK = (
    "SELECT harvest.wait_for_first_workflow_task(%(request_id)s, %(worker_id)s) AS status"
)
RELEASE_QUERY_REQUEST = (
    "SELECT harvest.release_query_request(%(request_id)s, %(worker_id)s, %(error)s) AS status"
)
EXPIRE_QUERY_REQUESTS = "SELECT harvest.expire_query_requests(%(limit)s) AS expired"

WORKER_DRAIN_DEADLINE = "SELECT * FROM harvest.get_worker_drain_deadline(%(worker_id)s)"


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


# A deadlock (40P01) or serialization failure (40001) rolls the whole transaction back: a call
# that was its own transaction (an autocommit connection, the client's pools) did nothing and
# is run again, up to CONFLICT_ATTEMPTS times in all, after a short jittered pause; a call in
# the caller's transaction is not (only the caller can run the transaction again). Either way
# what reaches the caller is a TransactionConflict, never psycopg's exception. Only calls
# declared retry_conflicts=True (the client's starts and signals) do this; the worker's
# batches have their own fallback (docs/internals.md, "Lock order").
CONFLICT_ATTEMPTS = 3
_CONFLICTS: tuple[type[psycopg.Error], ...] = (
    psycopg.errors.DeadlockDetected,
    psycopg.errors.SerializationFailure,
)


def _conflict_pause(attempt: int) -> float:
    """Seconds to wait before attempt ``attempt + 1``: 10-50 ms, times the attempts so far."""
    return random.uniform(0.01, 0.05) * attempt


def _conflict_error(exc: psycopg.Error, attempts: int, own_transaction: bool) -> TransactionConflict:
    what = "a deadlock" if exc.sqlstate == "40P01" else "a serialization conflict"
    if own_transaction:
        tail = f"{attempts} time{'s' if attempts > 1 else ''}; nothing was done: retry the call"
    else:
        tail = "inside the caller's transaction, which is rolled back: run the transaction again"
    return TransactionConflict(
        f"the database rolled the call back to break {what} (SQLSTATE {exc.sqlstate}) {tail}",
        exc.sqlstate,
        attempts,
    )


# -- the declarations ------------------------------------------------------------------------
# A call is its SQL text, a parameter function (its signature is the method's signature; it
# returns the statement's parameters) and a result shape (the rows in, the method's value out).
# SqlApi and AsyncSqlApi get one method per call from CALLS, so a call exists in both or in
# neither, with the same arguments and the same answer (tests/unit/test_sqlapi.py).

Rows = list[dict[str, Any]]


def rows(found: Rows) -> Rows:
    """Every row."""
    return found


def first(found: Rows) -> dict[str, Any] | None:
    """The first row, or None."""
    return found[0] if found else None


def nothing(found: Rows) -> None:
    """No value (the call is made for its effect)."""


# Decoded ``options`` of claimed tasks by their text (see claimed_rows); cleared when full.
_CLAIMED_OPTIONS: dict[str, Any] = {}
_CLAIMED_OPTIONS_MAX = 256


def claimed_rows(found: Rows) -> Rows:
    """Every row, its ``options`` text decoded: the claim's tasks of one activity (a fan-out's,
    a queue's) carry the same options, and decoding each row's in full (~2-4 us of JSON for the
    two or three keys the worker reads) was most of a claimed row's cost. Rows whose options
    have the same text share one decoded value, which nothing may change (the worker only
    reads it)."""
    memo = _CLAIMED_OPTIONS
    for row in found:
        text = row["options"]
        if text is not None:
            value = memo.get(text)
            if value is None:
                if len(memo) >= _CLAIMED_OPTIONS_MAX:
                    memo.clear()
                value = memo[text] = loads(text)
            row["options"] = value
    return found


def column(name: str) -> Callable[[Rows], Any]:
    """The one column ``name`` of the (single) row."""

    def shape(found: Rows) -> Any:
        return found[0][name]

    shape.__doc__ = f"column {name!r} of the row"
    return shape


@dataclass(frozen=True)
class Call:
    name: str
    sql: str | Callable[[dict[str, Any]], str]  # a callable picks the text from the parameters
    params: Callable[..., dict[str, Any]]
    shape: Callable[[Rows], Any]
    stream: bool = False  # rows one page at a time through a server-side cursor (page_size)
    retry_conflicts: bool = False  # run again after a deadlock or serialization failure (above)


CALLS: dict[str, Call] = {}


def call(
    sql: str | Callable[[dict[str, Any]], str],
    shape: Callable[[Rows], Any] = rows,
    *,
    stream: bool = False,
    retry_conflicts: bool = False,
) -> Callable[[Callable[..., dict[str, Any]]], Callable[..., dict[str, Any]]]:
    def declare(params: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
        assert params.__name__ not in CALLS, f"{params.__name__} is declared twice"
        CALLS[params.__name__] = Call(params.__name__, sql, params, shape, stream, retry_conflicts)
        return params

    return declare


# The parameters' JSON is json.dumps' text, written without its per-call wrappers (jsoncodec).
def _jsonb(value: Any) -> Jsonb:
    return Jsonb(value, dumps)


def _jsonb_or_null(value: Any) -> Jsonb | None:
    return None if value is None else Jsonb(value, dumps)


# -- executions: start, signal, cancel, read (functions/start.sql, signals.sql, executions.sql)
@call(START_WORKFLOW, first, retry_conflicts=True)
def start_workflow(
    workflow_name: str,
    input: list[Any],
    workflow_id: str | None,
    queue: str | None,
    reuse_policy: str,
    conflict_policy: str,
    search_attributes: dict[str, Any],
    priority: int,
    execution_timeout: float | None = None,
    run_timeout: float | None = None,
    shard: int | None = None,
    traceparent: str | None = None,
) -> dict[str, Any]:
    """Start one run; ``queue`` None: the one the workers registered the workflow on
    (harvest._start_queue); ``shard`` None mints an id of this database's shard, another shard's
    number is refused with WrongShard (HR011); ``traceparent`` (W3C) puts the run's spans in
    that trace (docs/observability.md)."""
    return {
        "traceparent": traceparent,
        "shard": shard,
        "workflow_name": workflow_name,
        "input": _jsonb(input),
        "workflow_id": workflow_id,
        "queue": queue,
        "reuse_policy": reuse_policy,
        "conflict_policy": conflict_policy,
        "search_attributes": _jsonb(search_attributes),
        "priority": priority,
        "execution_timeout": execution_timeout,
        "run_timeout": run_timeout,
    }


@call(START_WORKFLOWS, retry_conflicts=True)
def start_workflows(starts: list[dict[str, Any]]) -> dict[str, Any]:
    """Start many (start_workflow's arguments, by name, per start) in one transaction;
    one row per start, ``n`` its position from 1."""
    return {"starts": _jsonb(starts)}


def signal_receipt(found: Rows) -> SignalReceipt:
    """The signal's event id, as a SignalReceipt naming the signals the run waits for."""
    row = found[0]
    return SignalReceipt(row["event_id"], row["signal_name"], row["awaited_signals"] or ())


@call(SIGNAL_WORKFLOW, signal_receipt, retry_conflicts=True)
def signal_workflow(
    execution_id: str, signal_name: str, payload: Any, traceparent: str | None = None
) -> dict[str, Any]:
    """Deliver a signal; a SignalReceipt (an int, the event id) says whether the run waits for it."""
    return {
        "execution_id": execution_id,
        "signal_name": signal_name,
        "payload": _jsonb(payload),
        "traceparent": traceparent,
    }


@call(SIGNAL_WORKFLOW_EAGER, column("answer"), retry_conflicts=True)
def signal_workflow_eager(
    execution_id: str,
    signal_name: str,
    payload: Any,
    traceparent: str | None,
    worker_id: str,
    workflow_lease_secs: float,
) -> dict[str, Any]:
    """signal_workflow from a process hosting worker ``worker_id``: answers {"event_id", "handed":
    the woken workflow task leased to that worker, or None, "awaited_signals": the names the
    run waits for} (functions/signals.sql)."""
    return {
        "execution_id": execution_id,
        "signal_name": signal_name,
        "payload": _jsonb(payload),
        "traceparent": traceparent,
        "worker_id": worker_id,
        "workflow_lease_secs": workflow_lease_secs,
    }


@call(SIGNAL_WITH_START, first, retry_conflicts=True)
def signal_with_start(
    workflow_name: str,
    workflow_id: str,
    signal_name: str,
    payload: Any,
    input: list[Any],
    queue: str | None,
    search_attributes: dict[str, Any],
    traceparent: str | None = None,
) -> dict[str, Any]:
    return {
        "traceparent": traceparent,
        "workflow_name": workflow_name,
        "workflow_id": workflow_id,
        "signal_name": signal_name,
        "payload": _jsonb(payload),
        "input": _jsonb(input),
        "queue": queue,
        "search_attributes": _jsonb(search_attributes),
    }


@call(CANCEL_WORKFLOW, column("requested"))
def cancel_workflow(execution_id: str, reason: str | None) -> dict[str, Any]:
    return {"execution_id": execution_id, "reason": reason}


@call(TERMINATE_WORKFLOW, nothing)
def terminate_workflow(execution_id: str, reason: str | None) -> dict[str, Any]:
    return {"execution_id": execution_id, "reason": reason}


@call(LIST_CHILDREN)
def list_children(execution_id: str, status: str | None = None, depth: int = 1) -> dict[str, Any]:
    return {"execution_id": execution_id, "status": status, "depth": depth}


@call(LIST_CHILDREN_PAGE)
def list_children_page(
    execution_id: str, status: str | None, after: tuple[_dt.datetime, str] | None, limit: int
) -> dict[str, Any]:
    """harvest.list_children (one level) of ``execution_id``: ``limit`` rows after ``after``
    ((created_at, execution id) of the last row shown; None: from the newest)."""
    return {
        "execution_id": execution_id,
        "status": status,
        "after_created_at": after[0] if after else None,
        "after_id": after[1] if after else None,
        "limit": limit,
    }


@call(LIST_CHILDREN_OF)
def list_children_of(execution_ids: list[str], limit: int | None = None) -> dict[str, Any]:
    """harvest.list_children (one level) of each of ``execution_ids``, in one statement: at most
    ``limit`` rows in all (None: every child)."""
    return {"execution_ids": [str(i) for i in execution_ids], "limit": limit}


@call(GET_EXECUTION, first)
def get_execution(execution_id: str) -> dict[str, Any]:
    return {"execution_id": execution_id}


@call(GET_EXECUTION_BY_WORKFLOW_ID, first)
def get_execution_by_workflow_id(workflow_id: str, workflow_name: str | None = None) -> dict[str, Any]:
    """The current run of a business key: the RUNNING one, else the newest."""
    return {"workflow_id": workflow_id, "workflow_name": workflow_name}


@call(GET_HISTORY)
def get_history(
    execution_id: str, after_event_id: int = 0, limit: int | None = None, max_bytes: int | None = None
) -> dict[str, Any]:
    """The history after ``after_event_id`` in order, at most ``limit`` events (None: all), and
    (``max_bytes``) ending with the event that brings the page to that many bytes of data."""
    return {
        "execution_id": execution_id,
        "after_event_id": after_event_id,
        "limit": limit,
        "max_bytes": max_bytes,
    }


@call(GET_HISTORY, stream=True)
def iter_history(execution_id: str, page_size: int = 500) -> dict[str, Any]:
    """The history in order, fetched page_size events per round trip through a server-side
    cursor (in a transaction of its own), so that a history of any size streams through a
    bounded amount of client memory."""
    return {
        "execution_id": execution_id,
        "after_event_id": 0,
        "limit": None,
        "max_bytes": None,
        "page_size": page_size,
    }


@call(GET_HISTORY_PAGE)
def get_history_page(
    execution_id: str, from_event_id: int | None = None, before_event_id: int | None = None, limit: int = 500
) -> dict[str, Any]:
    """One page of the history with the run page's signals, pending updates, reset points and
    counts, rows tagged by ``part`` (functions/executions.sql, harvest.get_history_page)."""
    return {
        "execution_id": execution_id,
        "from_event_id": from_event_id,
        "before_event_id": before_event_id,
        "limit": limit,
    }


@call(WAIT_FOR_RESULT, first)
def wait_for_result(execution_id: str, waiter_id: str) -> dict[str, Any]:
    return {"execution_id": execution_id, "waiter_id": waiter_id}


@call(STOP_WAITING, nothing)
def stop_waiting_for_result(waiter_id: str) -> dict[str, Any]:
    return {"waiter_id": waiter_id}


@call(RESET_WORKFLOW, column("plan"))
def reset_workflow(
    execution_id: str,
    to_event: int,
    reason: str,
    operator_id: str | None,
    signal_reapply: str = "drop",
    dry_run: bool = False,
) -> dict[str, Any]:
    return {
        "execution_id": execution_id,
        "to_event": to_event,
        "reason": reason,
        "operator_id": operator_id,
        "signal_reapply": signal_reapply,
        "dry_run": dry_run,
    }


@call(VERSION_USAGE)
def count_versions(
    change_id: str,
    version: int | None = None,
    state_group: str = "active",
    workflow_name: str | None = None,
    history_before: Any = None,
) -> dict[str, Any]:
    """``history_before``: also version -1 (DEFAULT_VERSION), the active runs with no marker of the
    gate whose history began before that time (``version`` None or -1)."""
    return {
        "change_id": change_id,
        "version": version,
        "state_group": state_group,
        "workflow_name": workflow_name,
        "history_before": history_before,
    }


@call(SCHEMA_VERSION, lambda found: found[0]["version"] if found else None)
def schema_version() -> dict[str, Any]:
    return {}


@call(FUNCTIONS_VERSION, column("version"))
def functions_version() -> dict[str, Any]:
    """The core migration the database's functions were written for (functions/core.sql)."""
    return {}


@call(GET_FUNCTION_RELEASES, column("releases"))
def get_function_releases() -> dict[str, Any]:
    """The Harvest releases that applied the database's function files (functions/core.sql)."""
    return {}


@call(GET_FUNCTION_STATE, column("state"))
def get_function_state(names: list[str], expected: str | None = None) -> dict[str, Any]:
    """The function ledger and the digest of the live bodies of ``names`` (functions/core.sql;
    harvest.db.migrate.read_function_drift judges it)."""
    return {"names": names, "expected": expected}


@call(GET_SHARD_ID, column("shard_id"))
def get_shard_id() -> dict[str, Any]:
    """This database's shard number (harvest.shard_identity)."""
    return {}


@call(GET_DEPLOYMENT_SHARDS, column("shards"))
def get_deployment_shards() -> dict[str, Any]:
    """The shards of the deployment this database is one of, as far as it knows: its own and
    every shard its registered workers name (harvest.get_deployment_shards)."""
    return {}


@call(SET_SHARD_ID, column("result"))
def set_shard_id(shard_id: int, operator_id: str | None = None) -> dict[str, Any]:
    """Make this database shard ``shard_id`` (admin): ``{shard_id, previous_shard_id, changed}``;
    WrongShard when it holds executions of another shard."""
    return {"shard_id": shard_id, "operator_id": operator_id}


@call(GET_SHARD_HEALTH, column("health"))
def get_shard_health(queues: list[str] | None = None) -> dict[str, Any]:
    """This shard's health facts (harvest shard health): shard id, schema version, workers,
    per-queue work and live workers, unpolled declared queues (``queues``, else the
    registered ones), stranded work, dead letters, the unpaused schedules due (``schedules``)."""
    return {"queues": queues}


@call(GET_SHARD_READINESS, column("health"))
def get_shard_readiness(queues: list[str] | None = None) -> dict[str, Any]:
    """What this shard's readiness gates on (/health/ready with shard readiness), at index-probe
    cost: get_shard_health's facts without ``queues`` (the per-queue counts) and ``dead_letters``."""
    return {"queues": queues}


@call(COUNT_STRANDED_TASKS, rows)
def count_stranded_tasks() -> dict[str, Any]:
    """The stranded-work gauge: ``{queue, pending, oldest_due_at}`` per queue with claimable
    work and no live worker on this shard."""
    return {}


@call(GET_METRIC_SAMPLES, column("samples"))
def get_metric_samples(max_keys: int = 50) -> dict[str, Any]:
    """The sampled gauges of this database in one read (harvest.telemetry.sampler): queues,
    dead letters, workers, the busiest ``max_keys`` concurrency keys, stranded work, relay
    backlogs, retention lag."""
    return {"max_keys": max_keys}


@call(LIST_FORCED_CLOSES)
def list_forced_closes(after_at: Any, after_id: Any, until: Any, limit: int = 1000) -> dict[str, Any]:
    """The runs closed outside a decision (terminated, timed out, superseded) after the
    sampler's ``(completed_at, id)`` cursor, closed at or before ``until``."""
    return {"after_at": after_at, "after_id": after_id, "until": until, "limit": limit}


@call(CLAIM_SAMPLER_LEAD, column("leader"))
def claim_sampler_lead() -> dict[str, Any]:
    """Whether this session now leads the database's metrics sampler (a session advisory lock,
    released when the session ends): one sampler per database, not one per replica."""
    return {}


# -- shard rebalancing (functions/rebalance.sql; driven by harvest.shard.rebalance) --------------
def _results(found: Rows) -> list[Any]:
    return [row["result"] for row in found]


@call(LIST_MIGRATION_CANDIDATES)
def list_migration_candidates(
    workflow_name: str | None = None, execution_id: str | None = None, limit: int = 100
) -> dict[str, Any]:
    """The runs a rebalance would consider, each with its quiescence ``blockers``."""
    return {"workflow_name": workflow_name, "execution_id": execution_id, "limit": limit}


@call(BEGIN_MIGRATION, column("result"))
def begin_migration(execution_id: str, target_shard: int, operator_id: str | None = None) -> dict[str, Any]:
    return {"execution_id": execution_id, "target_shard": target_shard, "operator_id": operator_id}


@call(GET_MIGRATION_COPY, column("result"))
def get_migration_copy(migration_id: int) -> dict[str, Any]:
    return {"migration_id": migration_id}


@call(ACCEPT_MIGRATION_COPY, column("result"))
def accept_migration_copy(copy: dict[str, Any]) -> dict[str, Any]:
    return {"copy": _jsonb(copy)}


@call(SET_MIGRATION_COPIED, column("result"))
def set_migration_copied(migration_id: int) -> dict[str, Any]:
    return {"migration_id": migration_id}


@call(VERIFY_MIGRATION, column("result"))
def verify_migration(migration_id: int, target_digest: dict[str, Any]) -> dict[str, Any]:
    return {"migration_id": migration_id, "target_digest": _jsonb(target_digest)}


@call(CUT_OVER_MIGRATION, column("result"))
def cut_over_migration(migration_id: int, operator_id: str | None = None) -> dict[str, Any]:
    return {"migration_id": migration_id, "operator_id": operator_id}


@call(ACTIVATE_MIGRATION, column("result"))
def activate_migration(execution_id: str, migration_id: int) -> dict[str, Any]:
    return {"execution_id": execution_id, "migration_id": migration_id}


@call(DISCARD_MIGRATION_COPY, column("result"))
def discard_migration_copy(execution_id: str, migration_id: int) -> dict[str, Any]:
    return {"execution_id": execution_id, "migration_id": migration_id}


@call(COMPLETE_MIGRATION, column("result"))
def complete_migration(
    migration_id: int, operator_id: str | None = None, automatic: bool = False
) -> dict[str, Any]:
    return {"migration_id": migration_id, "operator_id": operator_id, "automatic": automatic}


@call(FAIL_MIGRATION, column("result"))
def fail_migration(migration_id: int, error: str, operator_id: str | None = None) -> dict[str, Any]:
    return {"migration_id": migration_id, "error": error, "operator_id": operator_id}


@call(CLAIM_STALLED_MIGRATIONS, _results)
def claim_stalled_migrations(
    stall_after_secs: float, target_shards: list[int], limit: int = 10
) -> dict[str, Any]:
    return {"stall_after_secs": stall_after_secs, "target_shards": list(target_shards), "limit": limit}


@call(SET_MIGRATION_ERROR, nothing)
def set_migration_error(migration_id: int, error: str) -> dict[str, Any]:
    return {"migration_id": migration_id, "error": error}


@call(LIST_MIGRATIONS, _results)
def list_migrations(phases: list[str] | None = None, limit: int = 100) -> dict[str, Any]:
    return {"phases": phases, "limit": limit}


@call(GET_RESIDENCE, column("result"))
def get_residence(execution_id: str) -> dict[str, Any]:
    """Where the execution lives as seen from this shard (found, status, migrated_to_shard)."""
    return {"execution_id": execution_id}


def _resident_history(found: Rows) -> dict[str, Any]:
    """``{"residence": get_residence's answer, "events": the history}``."""
    return {
        "residence": found[0]["residence"],
        "events": [
            {k: v for k, v in r.items() if k != "residence"} for r in found if r["event_id"] is not None
        ],
    }


@call(GET_RESIDENT_HISTORY, _resident_history)
def get_resident_history(execution_id: str, after_event_id: int = 0) -> dict[str, Any]:
    """The history after ``after_event_id`` with the row's residence (found, status,
    migrated_to_shard) as seen from this shard, in one statement."""
    return {"execution_id": execution_id, "after_event_id": after_event_id}


@call(SET_MIGRATION_FORWARD, column("result"))
def set_migration_forward(execution_id: str, shard: int) -> dict[str, Any]:
    return {"execution_id": execution_id, "shard": shard}


@call(HISTORY_DIGEST, column("result"))
def history_digest(execution_id: str) -> dict[str, Any]:
    return {"execution_id": execution_id}


@call(GET_COPY_SCHEMA, column("result"))
def get_copy_schema() -> dict[str, Any]:
    return {}


@call(GET_OWNER_MODE, column("owner_mode"))
def get_owner_mode() -> dict[str, Any]:
    """Whether owner mode is on: ``{enabled, lease_secs, updated_at, partitions, owned}``."""
    return {}


@call(SET_OWNER_MODE, column("owner_mode"))
def set_owner_mode(
    enabled: bool, lease_secs: float | None = None, operator_id: str | None = None
) -> dict[str, Any]:
    """Turn owner mode on or off in this database (admin, audited); returns get_owner_mode()."""
    return {"enabled": enabled, "lease_secs": lease_secs, "operator_id": operator_id}


@call(LIST_PARTITION_OWNERS)
def list_partition_owners(worker_id: str | None = None) -> dict[str, Any]:
    """The decision partitions' owner rows (of one worker, or all 512)."""
    return {"worker_id": worker_id}


@call(HEARTBEAT_PARTITIONS)
def heartbeat_partitions(worker_id: str, partitions: list[int]) -> dict[str, Any]:
    """Renew the owner leases of ``partitions`` this worker holds; rows (partition_id, epoch,
    lease_expires_at) of those it still holds."""
    return {"worker_id": worker_id, "partitions": partitions}


# -- the cross-shard relay pump (functions/relays.sql; harvest/shard/relay_pump.py) -----------
@call(CLAIM_REMOTE_RELAYS)
def claim_remote_relays(limit: int = 100, lease_secs: float = 30.0) -> dict[str, Any]:
    """On a source shard: up to ``limit`` remote relays, each leased for ``lease_secs``."""
    return {"limit": limit, "lease_secs": lease_secs}


@call(DELIVER_EXTERNAL_RELAY, first)
def deliver_external_relay(
    source_shard: int,
    relay_id: int,
    kind: str,
    target_execution_id: Any,
    target_workflow_name: str | None,
    target_workflow_id: str | None,
    payload: Any,
    source_execution_id: Any,
) -> dict[str, Any]:
    """On a target shard: apply another shard's external relay once; ``{outcome, execution_id, message}``."""
    return {
        "source_shard": source_shard,
        "relay_id": relay_id,
        "kind": kind,
        "target_execution_id": target_execution_id,
        "target_workflow_name": target_workflow_name,
        "target_workflow_id": target_workflow_id,
        "payload": _jsonb_or_null(payload),
        "source_execution_id": source_execution_id,
    }


@call(COMPLETE_RELAY, column("result"))
def complete_relay(
    relay_id: int, outcome: str, execution_id: Any = None, message: str | None = None
) -> dict[str, Any]:
    """On the source shard: the relay's final outcome reaches its source run; False when settled before."""
    return {"relay_id": relay_id, "outcome": outcome, "execution_id": execution_id, "message": message}


@call(RELEASE_RELAY, column("result"))
def release_relay(relay_id: int, error: str) -> dict[str, Any]:
    """On the source shard: an attempt that settled nothing; the relay is claimed again after a backoff."""
    return {"relay_id": relay_id, "error": error}


# -- cross-shard children (functions/cross_shard.sql; harvest/shard/children.py) --------------
@call(CLAIM_CROSS_SHARD_CHILDREN)
def claim_cross_shard_children(limit: int = 100, lease_secs: float = 30.0) -> dict[str, Any]:
    """On a parent's shard: the cross-shard children due now, each leased for ``lease_secs``."""
    return {"limit": limit, "lease_secs": lease_secs}


@call(SET_CROSS_SHARD_CHILD_RUNNING, column("result"))
def set_cross_shard_child_running(child_execution_id: Any) -> dict[str, Any]:
    """On a parent's shard: the child runs on its shard; due again at once."""
    return {"child_execution_id": child_execution_id}


@call(COMPLETE_CROSS_SHARD_CHILD, column("result"))
def complete_cross_shard_child(
    child_execution_id: Any, status: str | None, output: Any = None, failure: Any = None
) -> dict[str, Any]:
    """On a parent's shard: the child's end reaches the parent; its row goes."""
    return {
        "child_execution_id": child_execution_id,
        "status": status,
        "output": _jsonb_or_null(output),
        "failure": _jsonb_or_null(failure),
    }


@call(RELEASE_CROSS_SHARD_CHILD, column("result"))
def release_cross_shard_child(child_execution_id: Any, error: str) -> dict[str, Any]:
    """On a parent's shard: a step that made no progress; retried after a backoff."""
    return {"child_execution_id": child_execution_id, "error": error}


@call(START_CROSS_SHARD_CHILD, first)
def start_cross_shard_child(
    child_execution_id: Any,
    parent_execution_id: Any,
    parent_seq: int,
    workflow_name: str,
    workflow_id: str,
    queue: str,
    input: Any,
    parent_close_policy: str,
    traceparent: str | None = None,
    parent_shard: int | None = None,
) -> dict[str, Any]:
    """On a child's shard: start it under its minted id, once: ``{outcome, status, failure}``;
    ``traceparent``: the parent's child.start span, continued by the child's spans;
    ``parent_shard``: where the parent lives, which the child's end is owed to (None: the shard
    its id names, which a moved parent no longer lives on)."""
    return {
        "traceparent": traceparent,
        "parent_shard": parent_shard,
        "child_execution_id": child_execution_id,
        "parent_execution_id": parent_execution_id,
        "parent_seq": parent_seq,
        "workflow_name": workflow_name,
        "workflow_id": workflow_id,
        "queue": queue,
        "input": _jsonb(input),
        "parent_close_policy": parent_close_policy,
    }


@call(GET_CROSS_SHARD_CHILD, first)
def get_cross_shard_child(child_execution_id: Any) -> dict[str, Any]:
    """On a child's shard: its current run ``{execution_id, status, output, failure}``."""
    return {"child_execution_id": child_execution_id}


@call(CLEAR_OWED_CHILD_END, column("result"))
def clear_owed_child_end(child_execution_id: Any) -> dict[str, Any]:
    """On a child's shard: its end is no longer owed to its parent (delivered, or the parent
    ended first), so retention may take it; False when nothing was owed."""
    return {"child_execution_id": child_execution_id}


@call(CANCEL_CROSS_SHARD_CHILD, column("result"))
def cancel_cross_shard_child(
    child_execution_id: Any, policy: str, parent_execution_id: Any
) -> dict[str, Any]:
    """On a child's shard: the ended parent's close policy, applied to the child."""
    return {
        "child_execution_id": child_execution_id,
        "policy": policy,
        "parent_execution_id": parent_execution_id,
    }


@call(PAYLOAD_LIMIT, column("payload_limit"))
def payload_limit() -> dict[str, Any]:
    return {}


# -- the worker: claim, decide, activities, registry (functions/claim.sql, decide.sql, ...) ----
@call(CLAIM_TASKS, claimed_rows)
def claim_tasks(worker_id: str, queues: list[str], limit: int, workflow_lease_secs: float) -> dict[str, Any]:
    return {
        "worker_id": worker_id,
        "queues": queues,
        "limit": limit,
        "workflow_lease_secs": workflow_lease_secs,
    }


@call(CLAIM_NAMED_TASKS)
def claim_named_tasks(
    worker_id: str, queues: list[str], task_ids: list[int], workflow_lease_secs: float
) -> dict[str, Any]:
    """Redis dispatch: claim the named tasks that claim_tasks could take next (functions/claim.sql)."""
    return {
        "worker_id": worker_id,
        "queues": queues,
        "task_ids": task_ids,
        "workflow_lease_secs": workflow_lease_secs,
    }


@call(LIST_CLAIMABLE_TASKS)
def list_claimable_tasks(execution_ids: list[str], kind: str | None = None) -> dict[str, Any]:
    """The pending tasks of these runs, of ``kind`` if given (task_id, queue, due_at): what
    Redis dispatch publishes."""
    return {"execution_ids": [str(e) for e in execution_ids], "kind": kind}


@call(NEXT_DUE_AT, column("due_at"))
def next_due_at(queues: list[str]) -> dict[str, Any]:
    return {"queues": queues}


@call(COMPLETE_WORKFLOW_TASKS)
def complete_workflow_tasks(
    worker_id: str,
    items: list[tuple[int, int, int, list[dict[str, Any]], int, int | None]],
    event_cap: int | None = 50_000,
    byte_cap: int | None = 50 * 1024 * 1024,
) -> dict[str, Any]:
    """Commit (task id, fencing token, through, commands, hand-off slots, owner epoch) decisions
    in one transaction; one row per item (functions/decide.sql). The owner epochs (owner mode,
    functions/owners.sql) go as NULL when no item has one."""
    epochs = [i[5] for i in items]
    return {
        "worker_id": worker_id,
        "task_ids": BigintArray([i[0] for i in items]),
        "fencing_tokens": BigintArray([i[1] for i in items]),
        "throughs": BigintArray([i[2] for i in items]),
        "commands": JsonbArray([i[3] for i in items]),
        "hand_off_slots": [i[4] for i in items],
        "event_cap": event_cap,
        "byte_cap": byte_cap,
        "owner_epochs": None if all(e is None for e in epochs) else epochs,
    }


@call(FAIL_WORKFLOW_TASK, nothing)
def fail_workflow_task(
    task_id: int, fencing_token: int, failure: dict[str, Any], retry_in_secs: float
) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "fencing_token": fencing_token,
        "failure": _jsonb(failure),
        "retry_in_secs": retry_in_secs,
    }


@call(RELEASE_WORKFLOW_TASK, first)
def release_workflow_task(
    task_id: int, fencing_token: int, failure: dict[str, Any], retry_in_secs: float
) -> dict[str, Any]:
    return fail_workflow_task(task_id, fencing_token, failure, retry_in_secs)


@call(COMPLETE_ACTIVITIES)
def complete_activities(
    worker_id: str,
    items: list[tuple[int, int, Any, dict[str, Any] | None]],
    hand_off: bool,
    workflow_lease_secs: float,
    event_cap: int | None = 50_000,
    byte_cap: int | None = 50 * 1024 * 1024,
) -> dict[str, Any]:
    """Complete (task id, fencing token, result, decision or None) items in one transaction.

    One row per item; ``decided`` is set where the item's decision was applied
    with its result (functions/activities.sql).
    """
    return {
        "worker_id": worker_id,
        "task_ids": BigintArray([i[0] for i in items]),
        "fencing_tokens": BigintArray([i[1] for i in items]),
        "results": JsonbArray([i[2] for i in items]),
        "hand_off": hand_off,
        "workflow_lease_secs": workflow_lease_secs,
        "decisions": JsonbArray([i[3] for i in items], none_is_null=True),
        "event_cap": event_cap,
        "byte_cap": byte_cap,
    }


@call(COMPLETE_ACTIVITIES_WITH_CLAIM)
def complete_activities_with_claim(
    worker_id: str,
    queues: list[str],
    claim_limit: int,
    items: list[tuple[int, int, Any, dict[str, Any] | None]],
    hand_off: bool,
    workflow_lease_secs: float,
    event_cap: int | None = 50_000,
    byte_cap: int | None = 50 * 1024 * 1024,
) -> dict[str, Any]:
    """``complete_activities``, then a claim of up to ``claim_limit`` tasks of ``queues`` for the
    slots the results free, in the same transaction (functions/claim.sql): the item rows, then
    one row per claimed task (outcome ``claimed``, the task in ``handed``)."""
    params = complete_activities(worker_id, items, hand_off, workflow_lease_secs, event_cap, byte_cap)
    params["queues"] = queues
    params["claim_limit"] = claim_limit
    return params


@call(FAIL_ACTIVITY, column("outcome"))
def fail_activity(task_id: int, fencing_token: int, failure: dict[str, Any]) -> dict[str, Any]:
    return {"task_id": task_id, "fencing_token": fencing_token, "failure": _jsonb(failure)}


@call(HEARTBEAT_ACTIVITY, lambda found: bool(found[0]["cancel_requested"]))
def heartbeat_activity(task_id: int, fencing_token: int, details: Any) -> dict[str, Any]:
    return {"task_id": task_id, "fencing_token": fencing_token, "details": _jsonb_or_null(details)}


@call(HEARTBEAT_WORKFLOW_TASK, lambda found: bool(found[0]["extended"]))
def heartbeat_workflow_task(task_id: int, fencing_token: int, lease_secs: float) -> dict[str, Any]:
    return {"task_id": task_id, "fencing_token": fencing_token, "lease_secs": lease_secs}


# Lifecycle (functions/lifecycle.sql): pause and resume, external activity completion.
PAUSE_WORKFLOW = "SELECT harvest.pause_workflow(%(execution_id)s, %(reason)s, %(operator_id)s) AS paused"
RESUME_WORKFLOW = "SELECT harvest.resume_workflow(%(execution_id)s, %(reason)s, %(operator_id)s) AS resumed"
DETACH_ACTIVITY = "SELECT harvest.detach_activity(%(task_id)s, %(fencing_token)s) AS detached"
COMPLETE_ACTIVITY_BY_TOKEN = """
SELECT harvest.complete_activity_by_token(%(task_token)s, %(result)s) AS outcome
"""
FAIL_ACTIVITY_BY_TOKEN = "SELECT harvest.fail_activity_by_token(%(task_token)s, %(failure)s) AS outcome"
HEARTBEAT_ACTIVITY_BY_TOKEN = """
SELECT harvest.heartbeat_activity_by_token(%(task_token)s, %(details)s) AS cancel_requested
"""


@call(PAUSE_WORKFLOW, column("paused"))
def pause_workflow(
    execution_id: str, reason: str | None = None, operator_id: str | None = None
) -> dict[str, Any]:
    return {"execution_id": execution_id, "reason": reason, "operator_id": operator_id}


@call(RESUME_WORKFLOW, column("resumed"))
def resume_workflow(
    execution_id: str, reason: str | None = None, operator_id: str | None = None
) -> dict[str, Any]:
    return {"execution_id": execution_id, "reason": reason, "operator_id": operator_id}


@call(DETACH_ACTIVITY, column("detached"))
def detach_activity(task_id: int, fencing_token: int) -> dict[str, Any]:
    return {"task_id": task_id, "fencing_token": fencing_token}


@call(COMPLETE_ACTIVITY_BY_TOKEN, column("outcome"))
def complete_activity_by_token(task_token: str, result: Any) -> dict[str, Any]:
    return {"task_token": task_token, "result": _jsonb(result)}


@call(FAIL_ACTIVITY_BY_TOKEN, column("outcome"))
def fail_activity_by_token(task_token: str, failure: dict[str, Any]) -> dict[str, Any]:
    return {"task_token": task_token, "failure": _jsonb(failure)}


@call(HEARTBEAT_ACTIVITY_BY_TOKEN, lambda found: bool(found[0]["cancel_requested"]))
def heartbeat_activity_by_token(task_token: str, details: Any) -> dict[str, Any]:
    return {"task_token": task_token, "details": _jsonb_or_null(details)}


@call(RELEASE_TASK, column("released"))
def release_task(task_id: int, fencing_token: int) -> dict[str, Any]:
    return {"task_id": task_id, "fencing_token": fencing_token}


@call(REGISTER_WORKER)
def register_worker(
    worker_id: str,
    queues: list[str],
    hostname: str,
    pid: int,
    heartbeat_interval_secs: float,
    metadata: dict[str, Any],
    lost_after_secs: float | None = None,
    incarnation: str | None = None,
) -> dict[str, Any]:
    """The tasks a previous process registered under ``worker_id`` held, taken back (rows as
    expire_lost_workers'): ``incarnation`` is this process's own id (None: no take-back)."""
    return {
        "incarnation": incarnation,
        "worker_id": worker_id,
        "queues": queues,
        "hostname": hostname,
        "pid": pid,
        "heartbeat_interval_secs": heartbeat_interval_secs,
        "metadata": _jsonb(metadata),
        "lost_after_secs": lost_after_secs,
    }


@call(REGISTER_WORKFLOWS, column("registered"))
def register_workflows(queues: list[str], names: list[str]) -> dict[str, Any]:
    return {"queues": queues, "names": names}


@call(WORKER_HEARTBEAT, column("status"))
def heartbeat_worker(worker_id: str, incarnation: str | None = None) -> dict[str, Any]:
    return {"worker_id": worker_id, "incarnation": incarnation}


@call(WORKER_SLEEP, column("settled"))
def set_worker_sleeping(worker_id: str, sleeping: bool) -> dict[str, Any]:
    return {"worker_id": worker_id, "sleeping": sleeping}


@call(BEGIN_WORKER_DRAIN, column("status"))
def begin_worker_drain(worker_id: str, incarnation: str | None = None) -> dict[str, Any]:
    return {"worker_id": worker_id, "incarnation": incarnation}


@call(WORKER_DRAIN_DEADLINE, first)
def get_worker_drain_deadline(worker_id: str) -> dict[str, Any]:
    return {"worker_id": worker_id}


@call(STOP_WORKER, column("released"))
def stop_worker(worker_id: str, incarnation: str | None = None) -> dict[str, Any]:
    return {"worker_id": worker_id, "incarnation": incarnation}


@call(SCAN, column("moved"))
def scan(limit: int = 100, scanned_secs: float | None = None) -> dict[str, Any]:
    """``scanned_secs``: how long the caller's scans have answered without a break (None: no
    bound): the lost workers whose lost_after is longer are left (functions/scanner.sql)."""
    return {"limit": limit, "scanned_secs": scanned_secs}


# -- flow control (functions/flow_concurrency.sql, flow_rate_limits.sql, flow_quotas.sql,
#    flow_mutex.sql, flow_throttle.sql)
@call(DECLARE_FLOW_POLICIES, column("declared"))
def declare_flow_policies(policies: dict[str, Any]) -> dict[str, Any]:
    return {"policies": _jsonb(policies)}


@call(CONCURRENCY_STATUS)
def list_concurrency_keys(
    key: str | None = None, after_key: str | None = None, limit: int | None = None
) -> dict[str, Any]:
    """Per key in key order: at most ``limit`` keys after ``after_key`` (None: every key)."""
    return {"key": key, "after_key": after_key, "limit": limit}


@call(SET_RATE_LIMIT_OVERRIDE, first)
def set_rate_limit_override(
    activity_name: str,
    rps: float,
    burst: float | None = None,
    ttl_secs: float = 3600,
    operator_id: str | None = None,
) -> dict[str, Any]:
    return {
        "activity_name": activity_name,
        "rps": rps,
        "burst": burst,
        "ttl_secs": ttl_secs,
        "operator_id": operator_id,
    }


@call(CLEAR_RATE_LIMIT_OVERRIDE, column("cleared"))
def clear_rate_limit_override(activity_name: str, operator_id: str | None = None) -> dict[str, Any]:
    return {"activity_name": activity_name, "operator_id": operator_id}


@call(GET_RATE_LIMIT, first)
def get_rate_limit(activity_name: str) -> dict[str, Any]:
    return {"activity_name": activity_name}


AUDIT_INCOMPLETE_WRITE = """
SELECT harvest.record_incomplete_write(%(operation)s, %(target)s, %(shard_errors)s, %(operator_id)s) AS id
"""


@call(AUDIT_INCOMPLETE_WRITE, column("id"))
def record_incomplete_write(
    operation: str, target: str, shard_errors: list[dict[str, Any]], operator_id: str | None = None
) -> dict[str, Any]:
    """A pacing override's write that missed some shards, audited as failed on a shard that
    took it (functions/audit.sql)."""
    return {
        "operation": operation,
        "target": target,
        "shard_errors": _jsonb(shard_errors),
        "operator_id": operator_id,
    }


SET_START_THROTTLE_OVERRIDE = """
SELECT * FROM harvest.set_start_throttle_override(%(workflow_name)s, %(rps)s, %(burst)s, %(ttl_secs)s,
                                                  %(operator_id)s)
"""
CLEAR_START_THROTTLE_OVERRIDE = """
SELECT harvest.clear_start_throttle_override(%(workflow_name)s, %(operator_id)s) AS cleared
"""
GET_START_THROTTLE = "SELECT * FROM harvest.get_start_throttle(%(workflow_name)s)"
GET_START_GATE = "SELECT * FROM harvest.get_start_gate(%(workflow_name)s)"


@call(SET_START_THROTTLE_OVERRIDE, first)
def set_start_throttle_override(
    workflow_name: str,
    rps: float,
    burst: float | None = None,
    ttl_secs: float = 3600,
    operator_id: str | None = None,
) -> dict[str, Any]:
    return {
        "workflow_name": workflow_name,
        "rps": rps,
        "burst": burst,
        "ttl_secs": ttl_secs,
        "operator_id": operator_id,
    }


@call(CLEAR_START_THROTTLE_OVERRIDE, column("cleared"))
def clear_start_throttle_override(workflow_name: str, operator_id: str | None = None) -> dict[str, Any]:
    return {"workflow_name": workflow_name, "operator_id": operator_id}


@call(GET_START_THROTTLE, first)
def get_start_throttle(workflow_name: str) -> dict[str, Any]:
    return {"workflow_name": workflow_name}


@call(GET_START_GATE, first)
def get_start_gate(workflow_name: str) -> dict[str, Any]:
    """The workflow's declared debounce or batch (kind, key_path), None without one."""
    return {"workflow_name": workflow_name}


@call(QUOTA_USAGE, column("usage"))
def quota_usage(key: str, quota: str) -> dict[str, Any]:
    return {"key": key, "quota": quota}


@call(MUTEX_STATUS)
def list_mutexes(key: str | None = None) -> dict[str, Any]:
    return {"key": key}


@call(PENDING_STARTS_STATUS)
def list_pending_starts(
    workflow_name: str | None = None,
    kind: str | None = None,
    limit: int = 100,
    after_created_at: Any = None,
    after_id: int | None = None,
    id: int | None = None,
    workflow_id: str | None = None,
) -> dict[str, Any]:
    """At most ``limit`` held-back starts, oldest first, after (``after_created_at``,
    ``after_id``), the last row of the previous page; ``kind``, ``id``, ``workflow_id`` narrow
    them. Each row says its input's size (input_bytes, offloaded_bytes), never the input."""
    return {
        "workflow_name": workflow_name,
        "kind": kind,
        "limit": limit,
        "after_created_at": after_created_at,
        "after_id": after_id,
        "id": id,
        "workflow_id": workflow_id,
    }


@call(DISCARD_PENDING_START, column("result"))
def discard_pending_start(
    id: int, operator_id: str | None = None, reason: str | None = None
) -> dict[str, Any]:
    """Discard one start a gate holds back, by the id list_pending_starts gives (HR002: released
    or discarded already), with the offloaded rows it owns; audited."""
    return {"id": id, "operator_id": operator_id, "reason": reason}


@call(DISCARD_PENDING_STARTS, column("result"))
def discard_pending_starts(
    workflow_name: str | None = None,
    gate_key: str | None = None,
    kind: str | None = None,
    created_after: Any = None,
    created_before: Any = None,
    limit: int = 100,
    dry_run: bool = False,
    operator_id: str | None = None,
    reason: str | None = None,
) -> dict[str, Any]:
    """Discard the held-back starts a filter selects, oldest first, at most ``limit`` a call."""
    return {
        "workflow_name": workflow_name,
        "gate_key": gate_key,
        "kind": kind,
        "created_after": created_after,
        "created_before": created_before,
        "limit": limit,
        "dry_run": dry_run,
        "operator_id": operator_id,
        "reason": reason,
    }


@call(USAGE_REPORT)
def count_usage(from_: Any, to: Any, group_by: str = "workflow_name") -> dict[str, Any]:
    return {"from_": from_, "to": to, "group_by": group_by}


@call(RECORD_LLM_CALL, column("id"))
def record_llm_call(
    task_id: int,
    fencing_token: int,
    model: str,
    input_tokens: int = 0,
    output_tokens: int = 0,
    cost_usd_micros: int | None = None,
    latency_ms: int | None = None,
) -> dict[str, Any]:
    return {
        "task_id": task_id,
        "fencing_token": fencing_token,
        "model": model,
        "input_tokens": input_tokens,
        "output_tokens": output_tokens,
        "cost_usd_micros": cost_usd_micros,
        "latency_ms": latency_ms,
    }


# -- dead letters (functions/dead_letters.sql) -------------------------------------------------
@call(LIST_DEAD_LETTERS)
def list_dead_letters(
    limit: int = 100,
    activity_name: str | None = None,
    workflow_name: str | None = None,
    before_id: int | None = None,
    before_failed_at: _dt.datetime | None = None,
) -> dict[str, Any]:
    """Newest failure first; a page goes on after (``before_failed_at``, ``before_id``), the
    last row's (``before_id`` alone: that dead letter, HR002 once it is gone)."""
    return {
        "limit": limit,
        "activity_name": activity_name,
        "workflow_name": workflow_name,
        "before_id": before_id,
        "before_failed_at": before_failed_at,
    }


@call(GET_DEAD_LETTER, first)
def get_dead_letter(id: int) -> dict[str, Any]:
    return {"id": id}


@call(REPLAY_DEAD_LETTER, column("task_id"))
def replay_dead_letter(id: int) -> dict[str, Any]:
    return {"id": id}


@call(DISCARD_DEAD_LETTER, nothing)
def discard_dead_letter(id: int) -> dict[str, Any]:
    return {"id": id}


@call(AGGREGATE_DEAD_LETTERS)
def count_dead_letters(group_by: str = "all") -> dict[str, Any]:
    return {"group_by": group_by}


_BULK_DEAD_LETTERS = {
    action: BULK_DEAD_LETTERS.replace("{action}", action) for action in ("replay", "discard")
}


@call(lambda params: _BULK_DEAD_LETTERS[params["action"]], column("result"))
def bulk_dead_letters(
    action: str,
    activity_name: str | None = None,
    workflow_name: str | None = None,
    failed_after: Any = None,
    failed_before: Any = None,
    limit: int = 100,
    dry_run: bool = False,
    operator: str | None = None,
) -> dict[str, Any]:
    if action not in _BULK_DEAD_LETTERS:
        raise ValueError(f"unknown bulk dead-letter action {action!r}")
    return {
        "action": action,
        "activity_name": activity_name,
        "workflow_name": workflow_name,
        "failed_after": failed_after,
        "failed_before": failed_before,
        "limit": limit,
        "dry_run": dry_run,
        "operator": operator,
    }


_ACT_ON_WORKFLOWS = {
    "cancel": ACT_ON_WORKFLOWS.format(action="cancel", signal=""),
    "terminate": ACT_ON_WORKFLOWS.format(action="terminate", signal=""),
    "pause": ACT_ON_WORKFLOWS.format(action="pause", signal=""),
    "resume": ACT_ON_WORKFLOWS.format(action="resume", signal=""),
    "signal": ACT_ON_WORKFLOWS.format(
        action="signal", signal="p_signal_name => %(signal_name)s, p_payload => %(payload)s,"
    ),
    "reset": ACT_ON_WORKFLOWS.format(
        action="reset",
        signal="p_reset_to => %(reset_to)s, p_before => %(before)s, p_signal_reapply => %(signal_reapply)s,",
    ),
}


@call(lambda params: _ACT_ON_WORKFLOWS[params["action"]], column("result"))
def act_on_workflows(
    action: str,
    *,
    state: str | None = None,
    workflow_name: str | None = None,
    search_attributes: list[str] | None = None,
    created_after: Any = None,
    created_before: Any = None,
    filter: str | None = None,
    reason: str | None = None,
    signal_name: str | None = None,
    payload: Any = None,
    cursor: str | None = None,
    limit: int = BATCH_STEP,
    dry_run: bool = False,
    operator_id: str | None = None,
    batch_id: str | None = None,
    execution_ids: list[str] | None = None,
    workflow_id: str | None = None,
    failing: bool | None = None,
    reset_to: str = "before_time",
    before: Any = None,
    signal_reapply: str = "drop",
) -> dict[str, Any]:
    """One step of a batch by filter on this database: harvest.``action``_workflows (cancel,
    terminate, signal, pause, resume or reset), answering its jsonb (functions/executions.sql,
    _act_on_workflows). ``workflow_id``: only that id's runs; ``failing``: as :func:`list_executions`';
    ``reset_to``, ``before`` and ``signal_reapply``: a reset's point, its time and signals
    (functions/reset.sql)."""
    if action not in _ACT_ON_WORKFLOWS:
        raise ValueError(f"unknown batch action {action!r}")
    return {
        "action": action,
        "state": state,
        "workflow_name": workflow_name,
        "search_attributes": list(search_attributes) if search_attributes else None,
        "created_after": created_after,
        "created_before": created_before,
        "filter": filter,
        "reason": reason,
        "signal_name": signal_name,
        "payload": _jsonb(payload),
        "cursor": cursor,
        "limit": limit,
        "dry_run": dry_run,
        "operator_id": operator_id,
        "batch_id": batch_id,
        "execution_ids": execution_ids,
        "workflow_id": workflow_id,
        "failing": failing,
        "reset_to": reset_to,
        "before": before,
        "signal_reapply": signal_reapply,
    }


# -- the operator surface (functions/executions.sql, workers.sql, retention.sql) ----------------
@call(LIST_EXECUTIONS)
def list_executions(
    state: str | None = None,
    workflow_name: str | None = None,
    search_attributes: list[str] | None = None,
    created_after: Any = None,
    created_before: Any = None,
    page_size: int = 50,
    cursor: str | None = None,
    order: str = "desc",
    filter: str | None = None,
    workflow_id: str | None = None,
    failing: bool | None = None,
) -> dict[str, Any]:
    """``workflow_id``: only that id's runs (a continue-as-new chain, a reset's forks, earlier
    runs that reused it). ``failing``: True, only the runs whose workflow task is failing (each
    row's ``task_error_type``, ``task_attempt`` and ``task_failing_since`` say how); False,
    only the others; None, every run."""
    return {
        "state": state,
        "workflow_name": workflow_name,
        "search_attributes": list(search_attributes) if search_attributes else None,
        "created_after": created_after,
        "created_before": created_before,
        "page_size": page_size,
        "cursor": cursor,
        "order": order,
        "filter": filter,
        "workflow_id": workflow_id,
        "failing": failing,
    }


@call(COUNT_EXECUTIONS)
def count_executions(
    group_by: str = "status",
    state: str | None = None,
    workflow_name: str | None = None,
    search_attributes: list[str] | None = None,
    created_after: Any = None,
    created_before: Any = None,
    filter: str | None = None,
    limit: int | None = None,
    workflow_id: str | None = None,
    failing: bool | None = None,
) -> dict[str, Any]:
    """``limit``: count at most that many runs of each status (group_by status only); a row
    whose count reached it is ``capped`` (at least that many). None: every run counted.
    ``workflow_id``: only that id's runs; ``failing``: as :func:`list_executions`'."""
    return {
        "group_by": group_by,
        "state": state,
        "workflow_name": workflow_name,
        "search_attributes": list(search_attributes) if search_attributes else None,
        "created_after": created_after,
        "created_before": created_before,
        "filter": filter,
        "limit": limit,
        "workflow_id": workflow_id,
        "failing": failing,
    }


@call(WORKFLOW_STACK, column("stack"))
def get_execution_stack(execution_id: str, limit: int | None = None) -> dict[str, Any]:
    """What the run waits on: at most ``limit`` entries in each list, with each list's total in
    ``totals`` (None: every entry)."""
    return {"execution_id": execution_id, "limit": limit}


@call(LIST_AWAITED_SIGNALS)
def list_awaited_signals(execution_id: str) -> dict[str, Any]:
    """The signals the run's pending ctx.wait_for_signal calls wait for: name, since, timeout_at,
    timer_seq (functions/executions.sql)."""
    return {"execution_id": execution_id}


@call(LIST_WORKERS)
def list_workers(
    queue: str | None = None, status: str | None = None, health: str | None = None, limit: int | None = None
) -> dict[str, Any]:
    """The first ``limit`` workers in the list's order, each row with the ``total`` matched (None:
    every worker)."""
    return {"queue": queue, "status": status, "health": health, "limit": limit}


@call(GET_WORKER, column("worker"))
def get_worker(worker_id: str) -> dict[str, Any]:
    return {"worker_id": worker_id}


@call(WORKER_HEALTH, column("health"))
def get_worker_health() -> dict[str, Any]:
    return {}


@call(DRAIN_WORKER, column("result"))
def drain_worker(worker_id: str, deadline: Any = None, operator: str | None = None) -> dict[str, Any]:
    return {"worker_id": worker_id, "deadline": deadline, "operator": operator}


@call(DRAIN_PREVIEW)
def preview_drain(queue: str | None = None, worker_id: str | None = None) -> dict[str, Any]:
    return {"queue": queue, "worker_id": worker_id}


@call(LIST_AUDIT_LOG)
def list_audit_log(
    limit: int = 100,
    operation: str | None = None,
    before_at: _dt.datetime | None = None,
    before_id: int | None = None,
) -> dict[str, Any]:
    """Newest first by (at, id); a page goes on after (``before_at``, ``before_id``), the last row's."""
    return {"limit": limit, "operation": operation, "before_at": before_at, "before_id": before_id}


@call(PRUNE_AUDIT_LOG, column("result"))
def prune_audit_log(older_than: str, batch_size: int = 10_000, operator: str | None = None) -> dict[str, Any]:
    """Delete up to ``batch_size`` audit rows older than ``older_than`` (an interval), oldest
    first: ``deleted``, ``remaining`` (up to 10,000) and ``cutoff``. Call until ``remaining`` is 0."""
    return {"older_than": older_than, "batch_size": batch_size, "operator": operator}


@call(COUNT_AUDIT_LOG, column("result"))
def count_audit_log(older_than: str) -> dict[str, Any]:
    """How many audit rows ``prune_audit_log(older_than)`` would delete (``older``, all of them)
    and the ``cutoff``; writes nothing."""
    return {"older_than": older_than}


@call(RETENTION_STATUS, column("status"))
def get_retention_status() -> dict[str, Any]:
    return {}


def _age_or_off(value: str | None) -> str | None:
    """A retention age as the CLI and the API take it: an interval, or ``off`` (keep all: NULL)."""
    return None if value is None or value.strip().lower() in ("off", "none", "") else value


@call(SET_RETENTION_SETTINGS, column("status"))
def set_retention_settings(
    max_age: str | None = None,
    batch_size: int | None = None,
    worker_max_age: str | None = None,
    operator: str | None = None,
) -> dict[str, Any]:
    """The run age (with its batch size) and/or the worker-row age, each an interval or ``off``;
    None leaves that setting as it is. Both are set in one transaction (SET_RETENTION_SETTINGS)."""
    return {
        "max_age_given": max_age is not None,
        "max_age": _age_or_off(max_age),
        "batch_size": batch_size,
        "worker_given": worker_max_age is not None,
        "worker_max_age": _age_or_off(worker_max_age),
        "operator": operator,
    }


@call(RUN_RETENTION, column("result"))
def run_retention(
    max_age: str | None = None, batch_size: int | None = None, operator: str | None = None
) -> dict[str, Any]:
    return {"max_age": max_age, "batch_size": batch_size, "operator": operator}


@call(PRUNE_WORKERS, column("result"))
def prune_workers(max_age: str | None = None, operator: str | None = None) -> dict[str, Any]:
    return {"max_age": max_age, "operator": operator}


@call(RELEASE_OWED_CHILD_ENDS, column("result"))
def release_owed_child_ends(
    parent_shard: int,
    batch_size: int = 500,
    include_running: bool = False,
    operator: str | None = None,
    force: bool = False,
) -> dict[str, Any]:
    """On a child's shard: let retention take up to ``batch_size`` cross-shard children whose
    ends are owed to ``parent_shard``, a shard gone for good; how many were released. ``force``
    (the caller skipped its check that that shard is gone) is recorded in the audit row."""
    return {
        "parent_shard": parent_shard,
        "batch_size": batch_size,
        "include_running": include_running,
        "operator": operator,
        "force": force,
    }


@call(PRUNE_FLOW_KEYS, column("result"))
def prune_flow_keys(batch_size: int = 500) -> dict[str, Any]:
    return {"batch_size": batch_size}


@call(LIST_EXPIRED_SEALS)
def list_expired_seals(
    max_age: str | None = None, after_moved_at: Any = None, after_id: str | None = None, limit: int = 500
) -> dict[str, Any]:
    """A page of this shard's MIGRATED seals moved before the retention window, oldest first
    after the ``(moved_at, id)`` keyset: ``execution_id``, ``migrated_to_shard``, ``moved_at``."""
    return {"max_age": max_age, "after_moved_at": after_moved_at, "after_id": after_id, "limit": limit}


@call(JUDGE_MOVED_RUNS)
def list_moved_runs(ids: list[str], max_age: str | None = None) -> dict[str, Any]:
    """On the shard seals point to: each run's ``collectable`` and ``forwarded_to``."""
    return {"ids": ids, "max_age": max_age}


@call(DROP_SEALS, column("deleted"))
def delete_seals(ids: list[str], operator: str | None = None) -> dict[str, Any]:
    """Delete the MIGRATED seals of ``ids`` that are still seals; how many went."""
    return {"ids": ids, "operator": operator}


# -- queries and updates (functions/messages.sql) ----------------------------------------------
@call(REQUEST_QUERY, column("request_id"))
def request_query(execution_id: str, name: str, arg: Any, timeout: float) -> dict[str, Any]:
    return {"execution_id": execution_id, "name": name, "arg": _jsonb(arg), "timeout": timeout}


@call(REQUEST_UPDATE, first)
def request_update(
    execution_id: str,
    name: str,
    arg: Any,
    update_id: str | None,
    timeout: float,
    traceparent: str | None = None,
) -> dict[str, Any]:
    return {
        "traceparent": traceparent,
        "execution_id": execution_id,
        "name": name,
        "arg": _jsonb(arg),
        "update_id": update_id,
        "timeout": timeout,
    }


@call(UPDATE_WITH_START, first, retry_conflicts=True)
def update_with_start(
    workflow_name: str,
    workflow_id: str,
    name: str,
    arg: Any,
    input: list[Any],
    queue: str | None,
    update_id: str | None,
    timeout: float,
    search_attributes: dict[str, Any],
    traceparent: str | None = None,
) -> dict[str, Any]:
    return {
        "traceparent": traceparent,
        "workflow_name": workflow_name,
        "workflow_id": workflow_id,
        "name": name,
        "arg": _jsonb(arg),
        "input": _jsonb(input),
        "queue": queue,
        "update_id": update_id,
        "timeout": timeout,
        "search_attributes": _jsonb(search_attributes),
    }


@call(GET_QUERY_REQUEST, first)
def get_query_request(request_id: int) -> dict[str, Any]:
    return {"request_id": request_id}


@call(CLAIM_QUERIES)
def claim_query_requests(worker_id: str, queues: list[str], limit: int, lease_secs: float) -> dict[str, Any]:
    return {"worker_id": worker_id, "queues": queues, "limit": limit, "lease_secs": lease_secs}


@call(ANSWER_QUERY, column("status"))
def answer_query(
    request_id: int, worker_id: str, answer: Any, error: dict[str, Any] | None
) -> dict[str, Any]:
    return {
        "request_id": request_id,
        "worker_id": worker_id,
        "answer": None if error is not None else _jsonb(answer),
        "error": _jsonb_or_null(error),
    }


@call(ACCEPT_UPDATE, column("status"))
def accept_update(request_id: int, worker_id: str) -> dict[str, Any]:
    return {"request_id": request_id, "worker_id": worker_id}


@call(RELEASE_QUERY_REQUEST, column("status"))
def release_query_request(request_id: int, worker_id: str, error: dict[str, Any] | None) -> dict[str, Any]:
    return {"request_id": request_id, "worker_id": worker_id, "error": _jsonb_or_null(error)}


@call(WAIT_FOR_FIRST_WORKFLOW_TASK, column("status"))
def wait_for_first_workflow_task(request_id: int, worker_id: str) -> dict[str, Any]:
    return {"request_id": request_id, "worker_id": worker_id}


@call(EXPIRE_QUERY_REQUESTS, column("expired"))
def expire_query_requests(limit: int = 1000) -> dict[str, Any]:
    return {"limit": limit}


# -- schedules (functions/schedules.sql) -------------------------------------------------------
CREATE_SCHEDULE = """
SELECT harvest.create_schedule(
    p_name => %(name)s, p_workflow_name => %(workflow_name)s, p_cron => %(cron)s,
    p_interval_secs => %(interval_secs)s, p_timezone => %(timezone)s, p_input => %(input)s,
    p_queue => %(queue)s,
    p_max_active_runs => %(max_active_runs)s, p_overlap => %(overlap)s, p_catchup => %(catchup)s,
    p_catchup_window_secs => %(catchup_window_secs)s, p_jitter_secs => %(jitter_secs)s, p_kind => %(kind)s,
    p_paused => %(paused)s, p_operator_id => %(operator_id)s,
    p_allow_unregistered => %(allow_unregistered)s) AS schedule
"""
FIRE_SCHEDULE = """
SELECT harvest.fire_schedule(
    p_schedule_id => %(schedule_id)s, p_revision => %(revision)s, p_slots => %(slots)s::timestamptz[],
    p_next_fire_at => %(next_fire_at)s, p_next_due_at => %(next_due_at)s,
    p_missed_first_at => %(missed_first_at)s, p_missed_last_at => %(missed_last_at)s,
    p_missed_slots => %(missed_slots)s, p_traceparent => %(traceparent)s) AS result
"""


@call(CREATE_SCHEDULE, column("schedule"))
def create_schedule(
    name: str,
    workflow_name: str,
    *,
    cron: str | None = None,
    interval_secs: int | None = None,
    timezone: str = "UTC",
    input: list[Any] | None = None,
    queue: str | None = None,  # None: the queue the workers registered the workflow on
    max_active_runs: int = 1,
    overlap: str = "skip",
    catchup: bool = False,
    catchup_window_secs: int | None = None,
    jitter_secs: float = 0,
    kind: str = "workflow",
    paused: bool = False,
    operator_id: str | None = None,
    allow_unregistered: bool = False,  # True: no HR010 for a workflow (a DAG) not registered
) -> dict[str, Any]:
    return {
        "allow_unregistered": allow_unregistered,
        "name": name,
        "workflow_name": workflow_name,
        "cron": cron,
        "interval_secs": interval_secs,
        "timezone": timezone,
        "input": _jsonb(input or []),
        "queue": queue,
        "max_active_runs": max_active_runs,
        "overlap": overlap,
        "catchup": catchup,
        "catchup_window_secs": catchup_window_secs,
        "jitter_secs": jitter_secs,
        "kind": kind,
        "paused": paused,
        "operator_id": operator_id,
    }


@call(
    "SELECT harvest.update_schedule(%(name)s, %(changes)s, %(operator_id)s, %(allow_unregistered)s)"
    " AS schedule",
    column("schedule"),
)
def update_schedule(
    name: str, changes: dict[str, Any], operator_id: str | None = None, allow_unregistered: bool = False
) -> dict[str, Any]:
    return {
        "name": name,
        "changes": _jsonb(changes),
        "operator_id": operator_id,
        "allow_unregistered": allow_unregistered,
    }


@call("SELECT harvest.delete_schedule(%(name)s, %(operator_id)s) AS deleted", column("deleted"))
def delete_schedule(name: str, operator_id: str | None = None) -> dict[str, Any]:
    return {"name": name, "operator_id": operator_id}


@call("SELECT harvest.pause_schedule(%(name)s, %(note)s, %(operator_id)s) AS schedule", column("schedule"))
def pause_schedule(name: str, note: str | None = None, operator_id: str | None = None) -> dict[str, Any]:
    return {"name": name, "note": note, "operator_id": operator_id}


@call("SELECT harvest.resume_schedule(%(name)s, %(operator_id)s) AS schedule", column("schedule"))
def resume_schedule(name: str, operator_id: str | None = None) -> dict[str, Any]:
    return {"name": name, "operator_id": operator_id}


@call("SELECT harvest.trigger_schedule(%(name)s, %(overlap)s, %(operator_id)s) AS firing", column("firing"))
def trigger_schedule(name: str, overlap: str | None = None, operator_id: str | None = None) -> dict[str, Any]:
    return {"name": name, "overlap": overlap, "operator_id": operator_id}


BACKFILL_SCHEDULE = """
SELECT harvest.backfill_schedule(%(name)s, %(slots)s::timestamptz[], %(overlap)s, %(operator_id)s) AS counts
"""


@call(BACKFILL_SCHEDULE, column("counts"))
def backfill_schedule(
    name: str, slots: list[Any], overlap: str = "buffer_all", operator_id: str | None = None
) -> dict[str, Any]:
    return {"name": name, "slots": list(slots), "overlap": overlap, "operator_id": operator_id}


@call("SELECT * FROM harvest.list_schedules(%(kind)s, %(after_name)s, %(limit)s, %(paused)s)")
def list_schedules(
    kind: str | None = None,
    after_name: str | None = None,
    limit: int | None = None,
    paused: bool | None = None,
) -> dict[str, Any]:
    """By name: at most ``limit`` after ``after_name`` (None: every schedule)."""
    return {"kind": kind, "after_name": after_name, "limit": limit, "paused": paused}


@call("SELECT harvest.get_schedule(%(name)s, %(limit)s) AS schedule", column("schedule"))
def get_schedule(name: str, limit: int = 20) -> dict[str, Any]:
    return {"name": name, "limit": limit}


@call("SELECT * FROM harvest.count_schedule_misses(%(since)s)")
def count_schedule_misses(since: Any = None) -> dict[str, Any]:
    return {"since": since}


@call("SELECT harvest.declare_app_schedules(%(schedules)s) AS declared", column("declared"))
def declare_schedules(schedules: list[dict[str, Any]]) -> dict[str, Any]:
    """``{changed, kept}``: how many changed, and the schedules whose declared spec a later
    change replaced, kept as they are (``[{name, declared, current}]``; docs/schedules.md)."""
    return {"schedules": _jsonb(schedules)}


@call("SELECT harvest.delete_moved_schedules(%(homes)s) AS deleted", column("deleted"))
def delete_moved_schedules(homes: dict[str, Any]) -> dict[str, Any]:
    return {"homes": _jsonb(homes)}


@call("SELECT * FROM harvest.list_due_schedules(%(limit)s)")
def list_due_schedules(limit: int = 100) -> dict[str, Any]:
    return {"limit": limit}


@call(FIRE_SCHEDULE, column("result"))
def fire_schedule(
    schedule_id: int,
    revision: int,
    slots: list[Any],
    next_fire_at: Any,
    next_due_at: Any,
    missed_first_at: Any = None,
    missed_last_at: Any = None,
    missed_slots: int = 0,
    traceparent: str | None = None,
) -> dict[str, Any]:
    return {
        "traceparent": traceparent,
        "schedule_id": schedule_id,
        "revision": revision,
        "slots": list(slots),
        "next_fire_at": next_fire_at,
        "next_due_at": next_due_at,
        "missed_first_at": missed_first_at,
        "missed_last_at": missed_last_at,
        "missed_slots": missed_slots,
    }


@call("SELECT harvest.start_buffered_firings(%(limit)s) AS started", column("started"))
def start_buffered_firings(limit: int = 100) -> dict[str, Any]:
    return {"limit": limit}


# -- DAGs (functions/dags.sql) ------------------------------------------------------------------
REGISTER_DAGS = "SELECT harvest.register_dags(%(dags)s) AS registered"
LIST_DAGS = "SELECT * FROM harvest.list_dags()"
PAUSE_DAG = "SELECT harvest.pause_dag(%(dag_name)s, %(operator)s) AS changed"
UNPAUSE_DAG = "SELECT harvest.unpause_dag(%(dag_name)s, %(operator)s) AS changed"
TRIGGER_DAG = """
SELECT * FROM harvest.trigger_dag(%(dag_name)s, %(conf)s, %(workflow_id)s, %(operator)s, %(traceparent)s)
"""
GET_DAG_RUN = "SELECT harvest.get_dag_run(%(execution_id)s) AS run"
LIST_DAG_RUNS = """
SELECT * FROM harvest.list_dag_runs(%(dag_name)s, %(limit)s, %(status)s, %(before_created_at)s, %(before_id)s)
"""
RETRY_DAG_RUN = "SELECT * FROM harvest.retry_dag_run(%(execution_id)s, %(operator)s)"


@call(REGISTER_DAGS, column("registered"))
def register_dags(dags: list[dict[str, Any]]) -> dict[str, Any]:
    return {"dags": _jsonb(dags)}


@call(LIST_DAGS)
def list_dags() -> dict[str, Any]:
    return {}


@call(PAUSE_DAG, column("changed"))
def pause_dag(dag_name: str, operator: str | None = None) -> dict[str, Any]:
    return {"dag_name": dag_name, "operator": operator}


@call(UNPAUSE_DAG, column("changed"))
def unpause_dag(dag_name: str, operator: str | None = None) -> dict[str, Any]:
    return {"dag_name": dag_name, "operator": operator}


@call(TRIGGER_DAG, first)
def trigger_dag(
    dag_name: str,
    conf: Any = None,
    workflow_id: str | None = None,
    operator: str | None = None,
    traceparent: str | None = None,
) -> dict[str, Any]:
    return {
        "traceparent": traceparent,
        "dag_name": dag_name,
        "conf": _jsonb_or_null(conf),
        "workflow_id": workflow_id,
        "operator": operator,
    }


@call(GET_DAG_RUN, column("run"))
def get_dag_run(execution_id: str) -> dict[str, Any]:
    return {"execution_id": execution_id}


@call(LIST_DAG_RUNS)
def list_dag_runs(
    dag_name: str,
    limit: int = 50,
    status: str | None = None,
    before_created_at: _dt.datetime | None = None,
    before_id: str | None = None,
) -> dict[str, Any]:
    """Newest first; ``status`` (one or several, comma-separated) filters before the limit; a
    page goes on after (``before_created_at``, ``before_id``), the last run's."""
    return {
        "dag_name": dag_name,
        "limit": limit,
        "status": status,
        "before_created_at": before_created_at,
        "before_id": before_id,
    }


@call(RETRY_DAG_RUN, first)
def retry_dag_run(execution_id: str, operator: str | None = None) -> dict[str, Any]:
    return {"execution_id": execution_id, "operator": operator}


@call("SELECT * FROM harvest.list_update_requests(%(execution_id)s)")
def list_update_requests(execution_id: str) -> dict[str, Any]:
    """The run's update requests no worker has accepted yet, oldest first."""
    return {"execution_id": execution_id}


@call(CREATE_API_TOKEN, first)
def create_api_token(
    name: str, scope: str, expires_in_secs: float | None = None, payloads: bool = True
) -> dict[str, Any]:
    """A new token: ``token_id``, ``name``, ``scope``, ``secret`` (shown this once), ``created_at``,
    ``expires_at`` (None: it lives until revoked; else ``expires_in_secs`` from now), ``payloads``
    (False: the API shows it no payload, docs/security.md)."""
    lifetime = None if expires_in_secs is None else _dt.timedelta(seconds=expires_in_secs)
    return {"name": name, "scope": scope, "expires_in": lifetime, "payloads": payloads}


@call(LIST_API_TOKENS)
def list_api_tokens(
    include_revoked: bool = False, after: tuple[bool, str, int] | None = None, limit: int | None = None
) -> dict[str, Any]:
    """Live tokens by name, then revoked ones by (name, id): at most ``limit`` after ``after``
    (the last row's (revoked, name, token_id)); None: every one."""
    revoked, name, id_ = after if after is not None else (None, None, None)
    return {
        "include_revoked": include_revoked,
        "after_revoked": revoked,
        "after_name": name,
        "after_id": id_,
        "limit": limit,
    }


@call(REVOKE_API_TOKEN, column("token_id"))
def revoke_api_token(name: str) -> dict[str, Any]:
    return {"name": name}


@call(AUTHENTICATE_API_TOKEN, first)
def authenticate_api_token(secret_hash: bytes) -> dict[str, Any]:
    """``name``, ``scope`` and ``payloads`` of the live token with this SHA-256; Unauthenticated
    otherwise."""
    return {"secret_hash": secret_hash}


@call(LIST_EVENTS)
def list_events(
    after_global_id: int = 0, limit: int = 500, execution_id: str | None = None, max_bytes: int | None = None
) -> dict[str, Any]:
    """Events after ``after_global_id``, each with its size (``bytes``): at most ``limit``, and
    (``max_bytes``) ending with the event that brings the page to that many bytes."""
    return {
        "after_global_id": after_global_id,
        "limit": limit,
        "execution_id": execution_id,
        "max_bytes": max_bytes,
    }


@call(GET_EVENT_HORIZON, first)
def get_event_horizon() -> dict[str, Any]:
    return {}


@call(HEARTBEAT_EVENT_STREAM, nothing)
def heartbeat_event_stream(listener_id: str) -> dict[str, Any]:
    return {"listener_id": listener_id}


@call(STOP_EVENT_STREAM, column("stopped"))
def stop_event_stream(listener_id: str) -> dict[str, Any]:
    return {"listener_id": listener_id}


# -- payloads: offload store, erasure, legal holds (functions/payloads.sql) -----------------------
PUT_PAYLOADS = "SELECT harvest.put_payloads(%(execution_id)s, %(values)s::jsonb[]) AS ids"
GET_PAYLOADS = "SELECT * FROM harvest.get_payloads(%(ids)s::uuid[])"
SET_PAYLOADS_EXECUTION = "SELECT harvest.set_payloads_execution(%(ids)s::uuid[], %(execution_id)s) AS changed"
ERASE_PAYLOADS = (
    "SELECT harvest.erase_payloads(%(execution_id)s, %(operator_id)s, %(prior_residence)s) AS summary"
)
SET_LEGAL_HOLD = "SELECT harvest.set_legal_hold(%(execution_id)s, %(reason)s, %(operator_id)s) AS hold"
RELEASE_LEGAL_HOLD = "SELECT harvest.release_legal_hold(%(execution_id)s, %(operator_id)s) AS hold"


def _payload_map(found: Rows) -> dict[str, Any]:
    """id -> stored payload."""
    return {str(r["id"]): r["data"] for r in found}


@call(PUT_PAYLOADS, column("ids"))
def put_payloads(execution_id: str | None, values: list[Any]) -> dict[str, Any]:
    return {"execution_id": execution_id, "values": [Jsonb(v, dumps) for v in values]}


@call(SET_PAYLOADS_EXECUTION, column("changed"))
def set_payloads_execution(ids: list[str], execution_id: str) -> dict[str, Any]:
    return {"ids": list(ids), "execution_id": execution_id}


@call(GET_PAYLOADS, _payload_map)
def get_payloads(ids: list[str]) -> dict[str, Any]:
    return {"ids": list(ids)}


@call(ERASE_PAYLOADS, column("summary"))
def erase_payloads(
    execution_id: str, operator_id: str | None = None, prior_residence: bool = False
) -> dict[str, Any]:
    return {"execution_id": execution_id, "operator_id": operator_id, "prior_residence": prior_residence}


@call(SET_LEGAL_HOLD, column("hold"))
def set_legal_hold(execution_id: str, reason: str, operator_id: str | None = None) -> dict[str, Any]:
    return {"execution_id": execution_id, "reason": reason, "operator_id": operator_id}


@call(RELEASE_LEGAL_HOLD, column("hold"))
def release_legal_hold(execution_id: str, operator_id: str | None = None) -> dict[str, Any]:
    return {"execution_id": execution_id, "operator_id": operator_id}


# -- the two executors -------------------------------------------------------------------------
class SqlApi:
    """The SQL API over one synchronous connection (the caller owns transactions).

    One method per entry of ``CALLS`` (added below), each returning what its shape makes of
    the rows."""

    def __init__(self, conn: psycopg.Connection[Any]):
        self.conn = conn

    if TYPE_CHECKING:
        # The methods of CALLS are set on the class below, so a checker knows them by name only.
        def __getattr__(self, name: str) -> Any: ...

    def _all(self, sql: LiteralString, params: dict[str, Any]) -> Rows:
        with translated_errors(), self.conn.cursor(row_factory=dict_row) as cur:
            cur.execute(sql, params)
            return cur.fetchall() if _has_rows(cur) else []

    def _all_retrying(self, sql: LiteralString, params: dict[str, Any]) -> Rows:
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            try:
                return self._all(sql, params)
            except _CONFLICTS as exc:
                own = self.conn.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
                if not own or attempt == CONFLICT_ATTEMPTS:
                    raise _conflict_error(exc, attempt, own) from None
            time.sleep(_conflict_pause(attempt))
        raise AssertionError("unreachable")

    def _stream(self, sql: LiteralString, params: dict[str, Any]) -> Iterator[dict[str, Any]]:
        page_size = params.pop("page_size")
        with (
            translated_errors(),
            self.conn.transaction(),
            self.conn.cursor(name="harvest_stream", row_factory=dict_row) as cur,
        ):
            cur.itersize = page_size
            cur.execute(sql, params)
            yield from cur


_ES = psycopg.pq.ExecStatus
# The statuses of a result with rows even with no columns (``SELECT ;``), as psycopg's
# ``Cursor.description`` reads them.
# (TUPLES_CHUNK by name: a psycopg built without libpq 17's chunked rows may lack it.)
_ROWS_STATUSES = frozenset(
    s for s in (_ES.TUPLES_OK, _ES.SINGLE_TUPLE, getattr(_ES, "TUPLES_CHUNK", None)) if s is not None
)


def _has_rows(cur: Any) -> bool:
    """Whether the statement returned rows to fetch: ``cur.description is not None``, without
    the ``Column`` per column (its name, type and sizes) that ``description`` builds and the
    dict row factory never reads (it reads the names itself)."""
    res = cur.pgresult
    return res is not None and (res.nfields > 0 or res.status in _ROWS_STATUSES)


# A statement's cursor kept on its connection for the statement's next call there (the async
# API, AsyncSqlApi._on): psycopg sets up a new cursor's adapters on every call (the adapters
# map, the dumper of each parameter's type, the loader of each column's type), and keeps them on
# a cursor only while it runs the same query object again. Kept for the worker's and the
# client's hot calls only (_KEPT_CURSOR_STATEMENTS: claims, group commits, heartbeats, starts,
# signals), whose answers a batch bounds; every other call runs on a fresh cursor, as before,
# so no cursor of a listing or a history page holds its answer (a cursor keeps its last answer
# until its next call). Of those, neither one whose answer had more than KEPT_CURSOR_ROWS rows
# (a claim of a large batch: its setup is paid by many rows) nor one whose call raised. Kept
# cursors go with their connection (docs/performance.md, "Canonical drain, fourteenth cut").
KEPT_CURSOR_ROWS = 256


def _kept_cursors(conn: Any) -> dict[str, Any]:
    """The cursors kept on ``conn`` by statement text (made on its first call)."""
    kept: dict[str, Any] | None = getattr(conn, "_harvest_cursors", None)
    if kept is None:
        kept = conn._harvest_cursors = {}
    return kept


def _release(cur: Any) -> bool:
    """Drop what a kept cursor holds of its last call, its parameters (psycopg keeps them dumped)
    and its answer, keeping its adapters (the reason it is kept): a start's input, a group
    commit's results or a claim's tasks stayed in memory, per connection and statement, until the
    statement's next call there. (psycopg's own reset before each execute, made early.) False
    when this psycopg lacks those internals: the cursor is then closed, not kept."""
    if isinstance(cur, psycopg.AsyncCursor):  # (not a test's stand-in)
        try:
            cur._reset()
            cur._tx.set_pgresult(None, set_loaders=False)
        except AttributeError:  # (psycopg's private names: a release that renamed them)
            return False
    return True


@contextlib.contextmanager
def _lent(conn: psycopg.AsyncConnection[Any]) -> Iterator[None]:
    """Mark a conflict the call on ``conn`` met with whether the call was its own transaction
    (:func:`_own_transaction`): ``conn`` was lent in no transaction (an autocommit pool's, a
    caller's between its transactions), so the call's implicit transaction, a face's role
    included (harvest.db.pools.RoledPool's SET LOCAL), was the call's alone, and the conflict
    ended it (``conn`` idle again: autocommit, as every Harvest pool's). A connection lent
    inside its holder's transaction (on_connection, a RoledPool over one) was not, nor a
    caller's connection without autocommit, whose transaction the call's statement opened and
    the conflict left aborted: only the holder can end that transaction and run it again (a
    retry on it met InFailedSqlTransaction). (The status libpq keeps: no round trip.)"""
    idle = psycopg.pq.TransactionStatus.IDLE
    lent_idle = conn.info.transaction_status == idle
    try:
        yield
    except _CONFLICTS as exc:
        own = lent_idle and conn.info.transaction_status == idle
        exc.harvest_own_transaction = own  # type: ignore[attr-defined]
        raise


def _own_transaction(exc: BaseException) -> bool:
    """Whether a conflict ended a call that was a transaction of its own, which may be run again
    (:func:`_lent` said so when it lent the connection); not marked: not known, so not."""
    return getattr(exc, "harvest_own_transaction", False) is True


class _OneConnection:
    """A pool of one: AsyncSqlApi on a connection the caller holds (its transaction, its LISTEN)."""

    def __init__(self, conn: psycopg.AsyncConnection):
        self._conn = conn

    @contextlib.asynccontextmanager
    async def connection(self, timeout: float | None = None) -> AsyncIterator[psycopg.AsyncConnection]:
        yield self._conn  # (held already: no wait, whatever ``timeout`` a pool's caller gives)


# The calls whose cursor a connection keeps (see KEPT_CURSOR_ROWS).
_KEPT_CURSOR_STATEMENTS = frozenset(
    {
        CLAIM_TASKS,
        CLAIM_NAMED_TASKS,
        NEXT_DUE_AT,
        COMPLETE_WORKFLOW_TASKS,
        COMPLETE_ACTIVITIES,
        COMPLETE_ACTIVITIES_WITH_CLAIM,
        FAIL_ACTIVITY,
        FAIL_WORKFLOW_TASK,
        RELEASE_TASK,
        HEARTBEAT_ACTIVITY,
        HEARTBEAT_WORKFLOW_TASK,
        START_WORKFLOW,
        START_WORKFLOWS,
        SIGNAL_WORKFLOW,
        SIGNAL_WORKFLOW_EAGER,
    }
)


class AsyncSqlApi:
    """The SQL API over an async connection pool: one call, one transaction.

    The same methods as :class:`SqlApi`, as coroutines (async generators for streams)."""

    def __init__(self, pool: Any):
        self.pool = pool

    if TYPE_CHECKING:
        # The methods of CALLS are set on the class below, so a checker knows them by name only.
        def __getattr__(self, name: str) -> Any: ...

    @classmethod
    def on_connection(cls, conn: psycopg.AsyncConnection) -> AsyncSqlApi:
        """The API on one connection the caller holds (its transaction, its LISTEN)."""
        return cls(_OneConnection(conn))

    async def _all(self, sql: LiteralString, params: dict[str, Any], retrying: bool = False) -> Rows:
        """One call on a connection the pool lends, a transaction of its own (with a face's role
        in it, harvest.db.pools.RoledPool: in the same round trip, :meth:`_on_after`).
        ``retrying``: a conflict it meets says whether it may be run again (_lent)."""
        one_call = getattr(self.pool, "one_call", None)
        if one_call is None:
            async with self.pool.connection() as conn:
                if not retrying:
                    return await self._on(conn, sql, params)
                with _lent(conn):
                    return await self._on(conn, sql, params)
        async with one_call() as (conn, before):
            if not retrying:
                return await self._on_after(conn, before, sql, params, self.pool.refused)
            with _lent(conn):
                return await self._on_after(conn, before, sql, params, self.pool.refused)

    @staticmethod
    async def _on(conn: psycopg.AsyncConnection[Any], sql: LiteralString, params: dict[str, Any]) -> Rows:
        # A cursor kept per connection and statement (_kept_cursors): taken out while it runs,
        # so a second call of the statement on the connection at once gets a cursor of its own.
        if sql not in _KEPT_CURSOR_STATEMENTS:
            with translated_errors():
                async with conn.cursor(row_factory=dict_row) as cur:
                    await cur.execute(sql, params)
                    return await cur.fetchall() if _has_rows(cur) else []
        kept = _kept_cursors(conn)
        cur = kept.pop(sql, None)
        if cur is None:
            cur = conn.cursor(row_factory=dict_row)
        with translated_errors():
            await cur.execute(sql, params)
            found = await cur.fetchall() if _has_rows(cur) else []
        if len(found) <= KEPT_CURSOR_ROWS and _release(cur):
            kept[sql] = cur
        else:
            await cur.close()
        return found

    @staticmethod
    async def _on_after(
        conn: psycopg.AsyncConnection[Any],
        before: tuple[LiteralString, dict[str, Any]],
        sql: LiteralString,
        params: dict[str, Any],
        refused: Callable[[BaseException], BaseException | None],
    ) -> Rows:
        """:meth:`_on` on an idle connection with ``before`` (a statement and its parameters: a
        face's role, SET LOCAL) run first in the same implicit transaction: a pipeline of the two
        and one Sync, which commits the call (and ends the role) as the call ends, in one round
        trip. ``refused``: what a failure of ``before`` means (None: the error itself)."""
        with translated_errors():
            try:
                async with conn.cursor(row_factory=dict_row) as cur:
                    async with conn.pipeline():  # (its end sends the Sync and reads every result)
                        await conn.execute(*before)
                        await cur.execute(sql, params)
                    return await cur.fetchall() if _has_rows(cur) else []
            except psycopg.Error as exc:
                if (mapped := refused(exc)) is None:
                    raise
                raise mapped from None

    async def _all_retrying(self, sql: LiteralString, params: dict[str, Any]) -> Rows:
        for attempt in range(1, CONFLICT_ATTEMPTS + 1):
            try:
                return await self._all(sql, params, retrying=True)
            except _CONFLICTS as exc:
                own = _own_transaction(exc)
                if not own or attempt == CONFLICT_ATTEMPTS:
                    raise _conflict_error(exc, attempt, own) from None
            await asyncio.sleep(_conflict_pause(attempt))
        raise AssertionError("unreachable")

    async def _stream(self, sql: LiteralString, params: dict[str, Any]) -> AsyncIterator[dict[str, Any]]:
        page_size = params.pop("page_size")
        async with self.pool.connection() as conn:
            with translated_errors():
                async with (
                    conn.transaction(),
                    conn.cursor(name="harvest_stream", row_factory=dict_row) as cur,
                ):
                    cur.itersize = page_size
                    await cur.execute(sql, params)
                    async for row in cur:
                        yield row


# (set_config(..., true): this transaction only; the claim's own row locks skip, never wait.)
OPEN_CLAIM_LOCK_TIMEOUT = "SELECT set_config('lock_timeout', '20ms', true)"

# An open claim's transaction is an explicit block: BEGIN goes first in the claim's round trip,
# and the COMMIT (or ROLLBACK) that ends it goes before the Sync in the end's. Left to the Sync
# instead (the extended protocol's implicit transaction), a commit that failed came as an error
# on the Sync itself, which psycopg's pipeline does not expect there: it raised its own errors
# over the server's and left the connection in pipeline mode with a result unread. (The pools
# are autocommit, harvest/db/pools.py: psycopg sends no BEGIN of its own, so this one is the
# block's.) Each goes through the public ``execute``, unprepared: it also looks at the socket
# once, about 35 us of the worker's CPU per claim more than psycopg's private queueing of its
# own BEGIN and COMMIT, which a psycopg release may change (docs/performance.md, "An open
# claim's commit as a statement"). READ COMMITTED whatever the session's default: a claim in a
# snapshot transaction admits no task of a concurrency key (functions/flow_concurrency.sql,
# _admit_candidates), so a role or database defaulting to REPEATABLE READ ran no keyed work.
OPEN_CLAIM_BEGIN: LiteralString = "BEGIN ISOLATION LEVEL READ COMMITTED"
OPEN_CLAIM_COMMIT: LiteralString = "COMMIT"
OPEN_CLAIM_ROLLBACK: LiteralString = "ROLLBACK"


class OpenClaim:
    """A claim whose transaction is still open (``claim_tasks_open``): the claim ran in an
    explicit transaction block (BEGIN first) in a pipeline with no Sync after it. Ended
    exactly once, by :meth:`decide` (the decision of the one workflow task it claimed, then
    COMMIT and the Sync: one commit for both, one round trip), :meth:`commit` (the claim
    alone) or :meth:`rollback`; each gives the connection back to the pool. A lost connection
    or a process that dies in between rolls the claim back: the task stays pending, with no
    lease to wait out (docs/internals.md, "A claim that decides")."""

    def __init__(self, pool: Any, conn: psycopg.AsyncConnection[Any], pipeline: Any):
        self._pool, self._conn, self._pipeline = pool, conn, pipeline
        self._lock = asyncio.Lock()
        self.open = True

    async def decide(
        self,
        worker_id: str,
        items: list[tuple[int, int, int, list[dict[str, Any]], int, int | None]],
        event_cap: int | None,
        byte_cap: int | None,
    ) -> Rows | None:
        """``complete_workflow_tasks(worker_id, items)`` in the claim's transaction, then its
        commit: one round trip. None when the claim was already ended (its decision goes
        the ordinary way). Raises as the call would (a commit that fails raises the server's
        error as any statement's); then nothing of the claim or the decision was written."""
        async with self._lock:
            if not self.open:
                return None
            self.open = False
            conn = self._conn
            try:
                with translated_errors():
                    async with conn.cursor(row_factory=dict_row) as cur:
                        await cur.execute(
                            COMPLETE_WORKFLOW_TASKS,
                            complete_workflow_tasks(worker_id, items, event_cap=event_cap, byte_cap=byte_cap),
                        )
                        await self._end(OPEN_CLAIM_COMMIT)  # COMMIT, the Sync, and every result
                        return await cur.fetchall()
            finally:
                await self._give_back()

    async def commit(self) -> None:
        """Commit the claim alone (its tasks go on the ordinary way)."""
        async with self._lock:
            if not self.open:
                return
            self.open = False
            try:
                with translated_errors():
                    await self._end(OPEN_CLAIM_COMMIT)
            finally:
                await self._give_back()

    async def rollback(self) -> None:
        """Undo the claim: its tasks are pending again, as if it never ran."""
        async with self._lock:
            if not self.open:
                return
            self.open = False
            with contextlib.suppress(Exception):
                await self._end(OPEN_CLAIM_ROLLBACK)
            await self._give_back()

    async def _end(self, command: LiteralString) -> None:
        """Queue ``command`` (COMMIT or ROLLBACK) after what the pipeline holds, then the Sync
        that ends it, and read every result: one round trip. Raises the first statement's
        error: a failed statement's, or the COMMIT's own (a deferred constraint, a
        serialization failure); after a failed statement the COMMIT is skipped and the block
        is left aborted (_give_back rolls it back)."""
        pipeline, self._pipeline = self._pipeline, None
        if pipeline is None:
            return
        try:
            await self._conn.execute(command, prepare=False)
        finally:
            await pipeline.__aexit__(None, None, None)

    async def _give_back(self) -> None:
        if self._pipeline is not None:  # (the end never went out: a cancellation, an error before it)
            with contextlib.suppress(Exception):
                await self._end(OPEN_CLAIM_ROLLBACK)
        conn = self._conn
        if conn.pgconn.pipeline_status != psycopg.pq.PipelineStatus.OFF:
            # A lost connection, or a cancellation in the middle of the end: its state is not
            # known, and it is discarded (the pool opens another).
            await conn.close()
        elif conn.info.transaction_status in _IN_BLOCK:
            # A statement failed (the COMMIT then skipped): the Sync left the block aborted.
            # (A ROLLBACK statement, not psycopg's rollback(), which would also deallocate the
            # session's prepared statements: they outlive a rollback.)
            try:
                await conn.execute(OPEN_CLAIM_ROLLBACK, prepare=False)
            except Exception:
                await conn.close()
        await self._pool.putconn(conn)


_IN_BLOCK = (psycopg.pq.TransactionStatus.INTRANS, psycopg.pq.TransactionStatus.INERROR)


async def claim_tasks_open(
    api: AsyncSqlApi, worker_id: str, queues: list[str], limit: int, workflow_lease_secs: float
) -> tuple[Rows, OpenClaim]:
    """``claim_tasks`` whose transaction is left open (:class:`OpenClaim`): its rows, and the
    claim to end. One round trip, as the call's (BEGIN, the claim and its lock_timeout, then a
    flush, no Sync)."""
    pool = api.pool
    conn = await pool.getconn()
    pipeline = conn.pipeline()
    try:
        await pipeline.__aenter__()
    except BaseException:
        await pool.putconn(conn)
        raise
    claim = OpenClaim(pool, conn, pipeline)
    try:
        with translated_errors():
            await conn.execute(OPEN_CLAIM_BEGIN, prepare=False)
            async with conn.cursor(row_factory=dict_row) as cur:
                await cur.execute(CLAIM_TASKS, claim_tasks(worker_id, queues, limit, workflow_lease_secs))
                # For the rest of the transaction (the decision): a lock wait past this fails
                # the statement, and the claim rolls back with it. The claim holds its task
                # rows before the decision locks its run's row, the reverse of the lock order
                # (docs/internals.md, "Lock order"): a signal that holds the run's row and waits
                # for the task's would otherwise wait for the deadlock detector (a second).
                await conn.execute(OPEN_CLAIM_LOCK_TIMEOUT)
                found = claimed_rows(await cur.fetchall())
    except BaseException:
        await claim.rollback()
        raise
    return found, claim


# -- the methods, made from the declarations ---------------------------------------------------
# A closure per call and kind: no lookup by name at call time, the same work per call as a
# hand-written method (build the parameters, run, shape). The method carries the declaration's
# name, docstring and signature (plus self), so help() and inspect see the real arguments.


def _method(spec: Call, is_async: bool, signature: inspect.Signature) -> Callable[..., Any]:
    params, shape, sql = spec.params, spec.shape, spec.sql
    fixed = isinstance(sql, str)
    # (for a checker: `sql` is the text when fixed, else the function that picks it)
    text, pick = cast("LiteralString", sql), cast("Callable[[dict[str, Any]], LiteralString]", sql)
    method: Callable[..., Any]
    if spec.stream:

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            values = params(*args, **kwargs)
            return self._stream(text if fixed else pick(values), values)
    elif spec.retry_conflicts and is_async:

        async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            values = params(*args, **kwargs)
            return shape(await self._all_retrying(text if fixed else pick(values), values))
    elif spec.retry_conflicts:

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            values = params(*args, **kwargs)
            return shape(self._all_retrying(text if fixed else pick(values), values))
    elif is_async and fixed and shape is rows:  # the worker's claims and completions: no shaping

        async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            return await self._all(text, params(*args, **kwargs))
    elif is_async and fixed:

        async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            return shape(await self._all(text, params(*args, **kwargs)))
    elif is_async:

        async def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            values = params(*args, **kwargs)
            return shape(await self._all(pick(values), values))
    elif fixed:

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            return shape(self._all(text, params(*args, **kwargs)))
    else:

        def method(self: Any, *args: Any, **kwargs: Any) -> Any:
            values = params(*args, **kwargs)
            return shape(self._all(pick(values), values))

    method.__signature__ = signature  # type: ignore[union-attr]  # read by inspect.signature
    method.__name__ = spec.name
    method.__doc__ = params.__doc__ or f"harvest.{spec.name}: {shape.__doc__}"
    return method


def _signature(params: Callable[..., Any]) -> inspect.Signature:
    """``params``' signature with ``self`` first: one per declaration, shared by both classes'
    methods, and not validated again (``params``' own is valid; self goes first). Made for every
    call at each import of this module: ~355 validated signatures were a fifth of its import."""
    own = inspect.signature(params)
    self_param = inspect.Parameter("self", inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return inspect.Signature([self_param, *own.parameters.values()], __validate_parameters__=False)


for _spec in CALLS.values():
    _sig = _signature(_spec.params)
    for _cls, _is_async in ((SqlApi, False), (AsyncSqlApi, True)):
        assert _spec.name not in vars(_cls), f"{_spec.name} would hide {_cls.__name__}'s own member"
        _m = _method(_spec, _is_async, _sig)
        _m.__qualname__ = f"{_cls.__name__}.{_spec.name}"
        setattr(_cls, _spec.name, _m)
del _spec, _sig, _cls, _is_async, _m
