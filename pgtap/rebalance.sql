-- functions/rebalance.sql: the quiescence blockers (_migration_blockers), the
-- record's phases on the source (begin_migration, get_migration_copy,
-- set_migration_copied, verify_migration, cut_over_migration, complete_migration,
-- fail_migration, claim_stalled_migrations, set_migration_error, list_migrations,
-- list_migration_candidates), the target side (accept_migration_copy, activate_migration,
-- discard_migration_copy, harvest._insert_copied_rows), and the shared reads
-- (history_digest, get_copy_schema, get_residence, set_migration_forward), with the
-- helpers _raise_migration, _lock_migration, _migration_json, _execution_json. One database plays
-- the source (shard 0), then, emptied, the target (shard 1).
BEGIN;
SELECT plan(75);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

CREATE TEMP TABLE runs (key text PRIMARY KEY, execution_id uuid) ON COMMIT DROP;
CREATE TEMP TABLE copies (key text PRIMARY KEY, copy jsonb) ON COMMIT DROP;
-- Start a run and decide its first task with p_commands (the task is gone after).
CREATE FUNCTION pg_temp.park(p_key text, p_commands jsonb) RETURNS uuid LANGUAGE plpgsql AS $fn$
DECLARE
    v_task record;
BEGIN
    PERFORM harvest.start_workflow('rb_wf', '[]', p_key, 'rq_' || p_key);
    SELECT * INTO v_task FROM harvest.claim_tasks('w1', ARRAY['rq_' || p_key], 1, 30);
    PERFORM harvest.complete_workflow_task(v_task.task_id, v_task.fencing_token, 1, p_commands, 'w1');
    INSERT INTO runs VALUES (p_key, v_task.execution_id);
    RETURN v_task.execution_id;
END;
$fn$;
CREATE FUNCTION pg_temp.parked(p_key text) RETURNS uuid LANGUAGE sql AS $fn$
    SELECT execution_id FROM runs WHERE key = p_key;
$fn$;
CREATE FUNCTION pg_temp.mig(p_key text) RETURNS bigint LANGUAGE sql AS $fn$
    SELECT m.id FROM harvest.shard_migrations AS m WHERE m.execution_id = pg_temp.parked(p_key) ORDER BY m.id DESC LIMIT 1;
$fn$;

SELECT pg_temp.park('timer', '[{"type": "start_timer", "seq": 1, "duration": 3600}]');
SELECT pg_temp.park('signal', '[]');
SELECT pg_temp.park('busy', '[{"type": "schedule_activity", "seq": 1, "name": "act"}]');
SELECT pg_temp.park('done', '[{"type": "complete_workflow", "result": 1}]');

-- Quiescence: a timer park and a signal park can move; work in flight cannot.
SELECT is(harvest._migration_blockers(e), '{}'::text[], '_migration_blockers(): a run parked on a timer is quiescent')
FROM harvest.executions AS e WHERE e.id = pg_temp.parked('timer');
SELECT is(harvest._migration_blockers(e), '{}'::text[], '_migration_blockers(): a run waiting for a signal is quiescent')
FROM harvest.executions AS e WHERE e.id = pg_temp.parked('signal');
SELECT is(harvest._migration_blockers(e), '{activity_in_flight}'::text[], '_migration_blockers(): an activity in flight blocks')
FROM harvest.executions AS e WHERE e.id = pg_temp.parked('busy');
SELECT is(harvest._migration_blockers(e), '{not_running}'::text[], '_migration_blockers(): an ended run is not_running')
FROM harvest.executions AS e WHERE e.id = pg_temp.parked('done');
SELECT results_eq($$SELECT workflow_id, blockers FROM harvest.list_migration_candidates('rb_wf') ORDER BY workflow_id$$,
                  $$VALUES ('busy'::text, '{activity_in_flight}'::text[]), ('signal', '{}'), ('timer', '{}')$$,
                  'list_migration_candidates(): the RUNNING runs with their blockers');
-- The guide: a paused run is not running (PAUSED is a status): resume it, move it, pause it again.
SELECT pg_temp.park('paused', '[]');
SELECT harvest.pause_workflow(pg_temp.parked('paused'));
SELECT is(harvest._migration_blockers(e), '{not_running}'::text[], '_migration_blockers(): a paused run is not_running')
FROM harvest.executions AS e WHERE e.id = pg_temp.parked('paused');
SELECT is((SELECT blockers FROM harvest.list_migration_candidates(p_execution_id => pg_temp.parked('paused'))),
          '{not_running}'::text[], 'list_migration_candidates(p_execution_id): a paused run explains itself as not_running');
SELECT is((SELECT blockers FROM harvest.list_migration_candidates(p_execution_id => pg_temp.parked('done'))),
          '{not_running}'::text[], 'list_migration_candidates(p_execution_id): explains one run, whatever its status');
SELECT throws_ok($$SELECT * FROM harvest.list_migration_candidates(p_limit => 0)$$, 'HR001', NULL,
                 'list_migration_candidates(): limit 0 is HR001');

-- What ties a run to this shard's rows besides its own: a child on another shard (its end is
-- pulled into the parent here) and an external signal still in flight (its outcome is
-- reported to the sender here). A move would leave either behind, and the run waiting.
UPDATE harvest.engine_settings SET cross_shard_relays = true;
SELECT pg_temp.park('xchild', jsonb_build_array(jsonb_build_object(
    'type', 'start_child_workflow', 'seq', 1, 'workflow_name', 'rb_wf', 'workflow_id', 'xchild-kid', 'shard', 1)));
SELECT pg_temp.park('xsignal', jsonb_build_array(jsonb_build_object(
    'type', 'signal_external_workflow', 'seq', 1, 'signal_name', 'go', 'payload', 1,
    'execution_id', harvest._new_execution_id(1))));
SELECT is(harvest._migration_blockers(e), '{open_children}'::text[],
          '_migration_blockers(): a child on another shard not settled yet is an open child')
FROM harvest.executions AS e WHERE e.id = pg_temp.parked('xchild');
SELECT is(harvest._migration_blockers(e), '{relay_pending}'::text[],
          '_migration_blockers(): an external signal whose outcome is not reported yet is a pending relay')
FROM harvest.executions AS e WHERE e.id = pg_temp.parked('xsignal');
DELETE FROM harvest.cross_shard_children WHERE parent_execution_id = pg_temp.parked('xchild');
DELETE FROM harvest.relays WHERE source_execution_id = pg_temp.parked('xsignal');
DELETE FROM harvest.executions WHERE id IN (pg_temp.parked('xchild'), pg_temp.parked('xsignal'));

-- An activity dead-lettered for good: the run waits (RUNNING, no task) for a replay or a
-- discard of a dead letter that is this shard's; moved, it would wait for ever.
SELECT pg_temp.park('dlq', '[{"type": "schedule_activity", "seq": 1, "name": "act"}]');
SELECT harvest.fail_activity(t.task_id, t.fencing_token,
                             '{"error_type": "Boom", "message": "for good", "non_retryable": true}')
FROM harvest.claim_tasks('w1', ARRAY['rq_dlq'], 1, 30) AS t;
SELECT is(harvest._migration_blockers(e), '{dead_letter}'::text[],
          '_migration_blockers(): an activity in the dead-letter queue blocks (its dead letter stays here)')
FROM harvest.executions AS e WHERE e.id = pg_temp.parked('dlq');
DELETE FROM harvest.dead_letters WHERE execution_id = pg_temp.parked('dlq');
DELETE FROM harvest.executions WHERE id = pg_temp.parked('dlq');

-- A run a schedule of this shard started and still counts as its live run: moved, the
-- schedule's overlap (skip, max_active_runs) would not see it and would start another.
SELECT pg_temp.park('sched', '[]');
INSERT INTO harvest.schedules (name, workflow_name, interval_secs, anchor_at, created_at, updated_at)
VALUES ('rb_every_minute', 'rb_wf', 60, harvest.now(), harvest.now(), harvest.now());
INSERT INTO harvest.schedule_firings (schedule_id, slot_at, status, workflow_id, execution_id, recorded_at)
SELECT s.id, harvest.now(), 'started', 'sched', pg_temp.parked('sched'), harvest.now()
FROM harvest.schedules AS s WHERE s.name = 'rb_every_minute';
SELECT is(harvest._migration_blockers(e), '{schedule_run}'::text[],
          '_migration_blockers(): a schedule''s live run blocks (its schedule counts it on this shard)')
FROM harvest.executions AS e WHERE e.id = pg_temp.parked('sched');
UPDATE harvest.schedule_firings SET status = 'skipped';
SELECT is(harvest._migration_blockers(e), '{}'::text[],
          '_migration_blockers(): a firing that started nothing does not')
FROM harvest.executions AS e WHERE e.id = pg_temp.parked('sched');
DELETE FROM harvest.schedules WHERE name = 'rb_every_minute';
INSERT INTO harvest.dags (dag_name, queue, max_active_runs, first_registered_at, last_registered_at)
VALUES ('rb_wf', 'rq_sched', 2, harvest.now(), harvest.now());
SELECT is(harvest._migration_blockers(e), '{dag_run}'::text[],
          '_migration_blockers(): a run of a DAG with max_active_runs blocks (its trigger counts it here)')
FROM harvest.executions AS e WHERE e.id = pg_temp.parked('sched');
DELETE FROM harvest.dags WHERE dag_name = 'rb_wf';
DELETE FROM harvest.executions WHERE id = pg_temp.parked('sched');
UPDATE harvest.engine_settings SET cross_shard_relays = false;

-- Planning.
SELECT throws_ok(format($$SELECT harvest.begin_migration(%L, 1)$$, pg_temp.parked('busy')), 'HR013',
                 format('execution %s cannot move now: activity_in_flight', pg_temp.parked('busy')),
                 'begin_migration(): a run with work in flight is refused (HR013 naming the blocker)');
SELECT throws_ok(format($$SELECT harvest.begin_migration(%L, 0)$$, pg_temp.parked('timer')), 'HR001', NULL,
                 'begin_migration(): the own shard is HR001');
SELECT harvest.set_legal_hold(pg_temp.parked('timer'), 'case 7', 'legal');
SELECT is((harvest.begin_migration(pg_temp.parked('timer'), 1, 'ops') ->> 'phase'), 'planned',
          'begin_migration(): a quiescent run gets a planned record');
SELECT throws_ok(format($$SELECT harvest.release_legal_hold(%L)$$, pg_temp.parked('timer')), 'HR013', NULL,
                 'a legal hold is not released while a move of its run is open');
SELECT throws_ok(format($$SELECT harvest.begin_migration(%L, 2)$$, pg_temp.parked('timer')), 'HR013', NULL,
                 'begin_migration(): a second open move of the same run is refused');
SELECT is(harvest._migration_blockers(e, pg_temp.mig('timer')), '{}'::text[],
          '_migration_blockers(e, id): the move itself is not a blocker')
FROM harvest.executions AS e WHERE e.id = pg_temp.parked('timer');
SELECT is((harvest._lock_migration(pg_temp.mig('timer'))).phase, 'planned', '_lock_migration(): the record');
SELECT throws_ok($$SELECT harvest._lock_migration(-1)$$, 'HR002', NULL, '_lock_migration(): unknown id is HR002');
SELECT is(harvest._migration_json(m) ->> 'target_shard', '1', '_migration_json(): the record as JSON')
FROM harvest.shard_migrations AS m WHERE m.id = pg_temp.mig('timer');
SELECT throws_ok($$SELECT harvest._raise_migration('x', 'boom', NULL)$$, 'HR013', 'boom', '_raise_migration(): HR013');

-- Export, copy, verify on the source. The run owns two offloaded payloads (one its input
-- references: a client's start input, handed to it in the start's transaction), and its input
-- references, forged, a row another run owns and a run-less one (another client's held-back
-- start's input): neither is copied (a copy would outlive that row's erasure).
SELECT harvest.put_payloads(pg_temp.parked('timer'), ARRAY['"own"'::jsonb]);
UPDATE harvest.executions SET input = jsonb_build_array(
    jsonb_build_object('_harvest_ref', (harvest.put_payloads(pg_temp.parked('timer'), ARRAY['"referenced"'::jsonb]))[1],
                       'bytes', 12),
    jsonb_build_object('_harvest_ref', (harvest.put_payloads(pg_temp.parked('signal'), ARRAY['"forged"'::jsonb]))[1],
                       'bytes', 8),
    jsonb_build_object('_harvest_ref', (harvest.put_payloads(NULL, ARRAY['"held"'::jsonb]))[1], 'bytes', 6))
WHERE id = pg_temp.parked('timer');
INSERT INTO copies SELECT 'timer', harvest.get_migration_copy(pg_temp.mig('timer'));
SELECT is((SELECT array_agg(p.value ->> 'data' ORDER BY p.value ->> 'data')
           FROM copies AS c, jsonb_array_elements(c.copy -> 'payloads') AS p),
          ARRAY['own', 'referenced'],
          'get_migration_copy(): the offloaded payloads the run owns, not another run''s nor a run-less one');
SELECT is((SELECT jsonb_array_length(copy -> 'events') FROM copies), 3,
          'get_migration_copy(): the whole history (started, task completed, timer started)');
SELECT is((SELECT copy #>> '{tasks,0,kind}' FROM copies), 'timer', 'get_migration_copy(): the timer task row');
SELECT ok((SELECT NOT (copy #> '{tasks,0}') ? 'id' FROM copies), 'get_migration_copy(): task ids are not carried');
SELECT is((SELECT copy #>> '{legal_hold,reason}' FROM copies), 'case 7', 'get_migration_copy(): the run''s legal hold');
SELECT is((SELECT copy -> 'history' FROM copies), harvest.history_digest(pg_temp.parked('timer')),
          'get_migration_copy(): carries the source''s history_digest');
SELECT is(harvest.history_digest(pg_temp.parked('timer')) ->> 'event_count', '3', 'history_digest(): counts the events');
SELECT is(jsonb_typeof(harvest.get_copy_schema() #> '{tables,executions}'), 'array',
          'get_copy_schema(): the column list of each copied table');
SELECT is((harvest.set_migration_copied(pg_temp.mig('timer')) ->> 'phase'), 'copied', 'set_migration_copied(): copied');
SELECT is((harvest.set_migration_copied(pg_temp.mig('timer')) ->> 'phase'), 'copied',
          'set_migration_copied(): again changes nothing');
SELECT is((harvest.verify_migration(pg_temp.mig('timer'), harvest.history_digest(pg_temp.parked('timer'))) ->> 'phase'),
          'verified', 'verify_migration(): a matching digest verifies, recording the high-water mark');
SELECT is((SELECT verified_event_count FROM harvest.shard_migrations WHERE id = pg_temp.mig('timer')), 3::bigint,
          'verify_migration(): verified_event_count');

-- A wake after verification makes the cutover decline.
SELECT pg_temp.park('woken', '[]');
SELECT harvest.begin_migration(pg_temp.parked('woken'), 1);
SELECT harvest.set_migration_copied(pg_temp.mig('woken'));
SELECT harvest.verify_migration(pg_temp.mig('woken'), harvest.history_digest(pg_temp.parked('woken')));
SELECT harvest.signal_workflow(pg_temp.parked('woken'), 'go');
SELECT is((harvest.cut_over_migration(pg_temp.mig('woken')) ->> 'cut_over'), 'false',
          'cut_over_migration(): a run that woke since verification is declined');
SELECT is((SELECT phase FROM harvest.shard_migrations WHERE id = pg_temp.mig('woken')), 'failed',
          'cut_over_migration(): the declined record is failed');
SELECT is((SELECT status FROM harvest.executions WHERE id = pg_temp.parked('woken')), 'RUNNING',
          'cut_over_migration(): a declined run keeps running here');
SELECT is((harvest.verify_migration(pg_temp.mig('timer'), '{"digest": "x"}') ->> 'phase'), 'verified',
          'verify_migration(): a verified record stays verified');

-- The cutover.
SELECT is((harvest.cut_over_migration(pg_temp.mig('timer'), 'ops') ->> 'cut_over'), 'true', 'cut_over_migration(): sealed');
SELECT results_eq($$SELECT status, migrated_to_shard FROM harvest.executions WHERE id = pg_temp.parked('timer')$$,
                  $$VALUES ('MIGRATED'::text, 1)$$, 'cut_over_migration(): MIGRATED with the forwarding pointer');
SELECT is((SELECT count(*) FROM harvest.tasks WHERE execution_id = pg_temp.parked('timer')), 0::bigint,
          'cut_over_migration(): the source keeps no task row of the run');
SELECT is_empty(format('SELECT 1 FROM harvest.legal_holds WHERE execution_id = %L', pg_temp.parked('timer')),
                'cut_over_migration(): the seal keeps no legal hold (it went with the copy)');
SELECT is((SELECT count(*) FROM harvest.audit_log WHERE operation = 'shard.rebalance.cut_over'), 1::bigint,
          'cut_over_migration(): audited');
SELECT throws_ok(format($$SELECT harvest.signal_workflow(%L, 'late')$$, pg_temp.parked('timer')), 'HR013', NULL,
                 'a signal to the seal is HR013 (follow the pointer), never appended');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('rb_wf', '[]', 'timer', p_conflict_policy => 'terminate_existing')$$,
                 'HR013', NULL, 'a start that would replace the moved run is refused (HR013)');
SELECT is((SELECT execution_id FROM harvest.start_workflow('rb_wf', '[]', 'timer', p_conflict_policy => 'use_existing')),
          pg_temp.parked('timer'), 'a start attaching to the key finds the seal (MIGRATED holds the key)');
SELECT is(harvest.get_residence(pg_temp.parked('timer')) ->> 'migrated_to_shard', '1', 'get_residence(): the pointer');
SELECT is(harvest.set_migration_forward(pg_temp.parked('timer'), 2), true, 'set_migration_forward(): collapses the pointer');
SELECT throws_ok(format($$SELECT harvest.fail_migration(%s, 'x')$$, pg_temp.mig('timer')), 'HR013', NULL,
                 'fail_migration(): refused past the cutover');
SET LOCAL harvest.fake_now = '2030-01-01 00:01:00+00';
SELECT is((SELECT count(*) FROM harvest.claim_stalled_migrations(30, ARRAY[1])), 1::bigint,
          'claim_stalled_migrations(): a cut-over record idle past the stall time is claimed');
SELECT is((SELECT count(*) FROM harvest.claim_stalled_migrations(30, ARRAY[1])), 0::bigint,
          'claim_stalled_migrations(): the claim bumped updated_at');
SELECT harvest.set_migration_error(pg_temp.mig('timer'), 'target down');
SELECT is((SELECT last_error FROM harvest.shard_migrations WHERE id = pg_temp.mig('timer')), 'target down',
          'set_migration_error(): kept on the record');
SELECT is((harvest.complete_migration(pg_temp.mig('timer'), p_automatic => true) ->> 'phase'), 'completed',
          'complete_migration(): completed');
SELECT is((SELECT operator_id FROM harvest.audit_log WHERE operation = 'shard.rebalance.auto_resume'), 'system',
          'complete_migration(p_automatic): a shard.rebalance.auto_resume row by system');
SELECT is((SELECT count(*) FROM harvest.list_migrations(ARRAY['open'])), 0::bigint, 'list_migrations(open): none open');

-- A run asked a query before its first decision committed: the request waits for that decision
-- (wait_for_first_workflow_task), the decision parks the run and the move cuts over before any
-- claim of the queue woke the request; another query is still pending. The cutover answers both
-- at once, failed ExecutionMigrated naming the shard, so the caller asks again where the run lives.
SELECT harvest.start_workflow('rb_wf', '[]', 'asked', 'rq_asked');
SELECT harvest.request_query(e.id, 'state') FROM harvest.executions AS e WHERE e.workflow_id = 'asked';
SELECT request_id FROM harvest.claim_query_requests('qw', ARRAY['rq_asked']);
SELECT harvest.wait_for_first_workflow_task(r.id, 'qw') FROM harvest.query_requests AS r WHERE r.queue = 'rq_asked';
SELECT harvest.request_query(e.id, 'later') FROM harvest.executions AS e WHERE e.workflow_id = 'asked';
DO $$
DECLARE
    t record;
BEGIN
    SELECT * INTO t FROM harvest.claim_tasks('w1', ARRAY['rq_asked'], 1, 30);
    PERFORM harvest.complete_workflow_task(t.task_id, t.fencing_token, 1, '[]', 'w1');
    INSERT INTO runs VALUES ('asked', t.execution_id);
END;
$$;
SELECT harvest.begin_migration(pg_temp.parked('asked'), 1);
SELECT harvest.set_migration_copied(pg_temp.mig('asked'));
SELECT harvest.verify_migration(pg_temp.mig('asked'), harvest.history_digest(pg_temp.parked('asked')));
SELECT results_eq($$SELECT name, status FROM harvest.query_requests WHERE queue = 'rq_asked' ORDER BY id$$,
                  $$VALUES ('state'::text, 'waiting'::text), ('later', 'pending')$$,
                  'a query waiting for the first workflow task and one pending, as the move begins');
SELECT is((harvest.cut_over_migration(pg_temp.mig('asked')) ->> 'cut_over'), 'true',
          'cut_over_migration(): a run with open queries is sealed (they do not block the move)');
SELECT results_eq(
    $$SELECT name, status, error ->> 'error_type', error #>> '{details,shard_id}', claimed_by, answered_at IS NOT NULL
      FROM harvest.query_requests WHERE queue = 'rq_asked' ORDER BY id$$,
    $$VALUES ('state'::text, 'failed'::text, 'ExecutionMigrated'::text, '1'::text, NULL::text, true),
             ('later', 'failed', 'ExecutionMigrated', '1', NULL, true)$$,
    'cut_over_migration(): the run''s open queries are answered at once, failed ExecutionMigrated naming its shard');
SELECT is_empty($$SELECT 1 FROM harvest.claim_query_requests('qw', ARRAY['rq_asked'])$$,
                'no claim answers a moved run''s query from the seal');

-- The target: this database, emptied, becomes shard 1.
DELETE FROM harvest.executions;
DELETE FROM harvest.payloads;  -- (the copy brings the run's own)
SELECT harvest.set_shard_id(1);
SELECT is((harvest.accept_migration_copy((SELECT copy FROM copies)) ->> 'event_count'), '3',
          'accept_migration_copy(): stages the copy and returns its history_digest');
SELECT is((SELECT status FROM harvest.executions WHERE id = pg_temp.parked('timer')), 'MIGRATING',
          'accept_migration_copy(): the staged copy is MIGRATING');
SELECT is((SELECT array_agg(p.data::text ORDER BY p.data::text) FROM harvest.payloads AS p
           WHERE p.execution_id = pg_temp.parked('timer')),
          ARRAY['"own"', '"referenced"'],
          'accept_migration_copy(): the payloads arrive, owned by the moved run');
SELECT is((SELECT g.data::text FROM harvest.get_payloads(ARRAY(SELECT harvest._payload_refs(e.input)
                                                              FROM harvest.executions AS e
                                                              WHERE e.id = pg_temp.parked('timer'))) AS g),
          '"referenced"', 'accept_migration_copy(): the moved input''s reference resolves on the target (the forged ones: nothing)');
SELECT is((SELECT count(*) FROM harvest.tasks WHERE execution_id = pg_temp.parked('timer')), 0::bigint,
          'accept_migration_copy(): its tasks wait in shard_arrivals, so no timer fires');
SELECT is((SELECT reason FROM harvest.legal_holds WHERE execution_id = pg_temp.parked('timer')), 'case 7',
          'accept_migration_copy(): the legal hold arrives with the copy');
SELECT lives_ok($$SELECT harvest.accept_migration_copy((SELECT copy FROM copies))$$, 'accept_migration_copy(): idempotent');
SELECT is(harvest.discard_migration_copy(pg_temp.parked('timer'), -5), false,
          'discard_migration_copy(): another move''s id discards nothing');
SELECT is((harvest.activate_migration(pg_temp.parked('timer'), (SELECT (copy #>> '{migration,id}')::bigint FROM copies))
           ->> 'activated'), 'true', 'activate_migration(): the copy runs here');
SELECT results_eq($$SELECT status, migrated_from_shards FROM harvest.executions WHERE id = pg_temp.parked('timer')$$,
                  $$VALUES ('RUNNING'::text, '{0}'::integer[])$$, 'activate_migration(): RUNNING, the source in the chain');
SELECT is((SELECT kind FROM harvest.tasks WHERE execution_id = pg_temp.parked('timer')), 'timer',
          'activate_migration(): the timer task is inserted (via _insert_copied_rows)');
SELECT throws_ok(format($$SELECT harvest.discard_migration_copy(%L, %s)$$, pg_temp.parked('timer'),
                        (SELECT copy #>> '{migration,id}' FROM copies)), 'HR013', NULL,
                 'discard_migration_copy(): refused over an activated copy');

-- A copied row's double reads back the same whatever the session's float output.
SET LOCAL extra_float_digits = -15;
SELECT is(harvest._execution_json(jsonb_populate_record(e, '{"run_timeout_secs": 1800.25}')) ->> 'run_timeout_secs',
          '1800.25', '_execution_json(): run_timeout_secs as numeric under extra_float_digits -15')
FROM harvest.executions AS e LIMIT 1;
RESET extra_float_digits;

SELECT * FROM finish();
ROLLBACK;
