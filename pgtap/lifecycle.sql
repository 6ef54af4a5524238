-- functions/lifecycle.sql: harvest.pause_workflow / resume_workflow (their bodies
-- harvest._pause_execution / _resume_execution; no task of a
-- paused run is claimed, a timer due meanwhile fires once after the resume, signals
-- and results are recorded and wait, retries, releases, expired leases, a decision in
-- flight and a replayed dead letter go back 'paused', cancel and terminate of a paused
-- run, quotas, supersede and rebalancing), harvest._queued_status, and the external completion of
-- an activity: harvest.detach_activity, complete_activity_by_token (idempotent for
-- the same completion, refused once the attempt timed out or was retried),
-- fail_activity_by_token, heartbeat_activity_by_token, harvest._parse_task_token,
-- harvest._lock_token_task.
BEGIN;
SELECT plan(108);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- A run's task statuses, as kind:status sorted.
CREATE FUNCTION pg_temp.lc_tasks(p_id uuid) RETURNS text LANGUAGE sql AS $fn$
    SELECT coalesce(string_agg(t.kind || ':' || t.status, ',' ORDER BY t.kind, t.status), '')
    FROM harvest.tasks AS t WHERE t.execution_id = p_id;
$fn$;
-- The task token of the activity task held for a key (seq 1).
CREATE FUNCTION pg_temp.lc_token(p_key text) RETURNS text LANGUAGE sql AS $fn$
    SELECT format('v1:%s:%s:1:%s:%s', t.execution_id, t.id, t.attempt, t.fencing_token)
    FROM harvest.tasks AS t WHERE t.id = pg_temp.task(p_key);
$fn$;
-- How many events of a type a run has.
CREATE FUNCTION pg_temp.lc_events(p_id uuid, p_type text) RETURNS bigint LANGUAGE sql AS $fn$
    SELECT count(*) FROM harvest.events AS ev WHERE ev.execution_id = p_id AND ev.event_type = p_type;
$fn$;

-- ---------------------------------------------------------------- pause_workflow
-- A run parked on a 60 s timer (seq 1) with an activity queued (seq 2).
SELECT isnt(pg_temp.start_decided('p', 'lc_wf', 'lq_p', '[
    {"type": "start_timer", "seq": 1, "duration": 60},
    {"type": "schedule_activity", "seq": 2, "name": "lc_act", "input": [], "queue": "lq_p"}]'), NULL,
    'setup: a run with a timer and a queued activity');
SELECT is(pg_temp.lc_tasks(pg_temp.run('p')), 'activity:pending,timer:pending', 'setup: both tasks wait in the queue');
SELECT is(harvest.pause_workflow(pg_temp.run('p'), 'downstream outage', 'oncall-ann'), true,
          'pause_workflow() returns true for a running run');
SELECT is((harvest.get_execution(pg_temp.run('p'))).status, 'PAUSED', 'the run is PAUSED');
SELECT is(pg_temp.lc_tasks(pg_temp.run('p')), 'activity:paused,timer:paused',
          'its tasks no worker holds wait as paused');
SELECT results_eq($$SELECT event_type, event_data FROM pg_temp.last_event(pg_temp.run('p'))$$,
    $$VALUES ('WorkflowPaused'::text, '{"reason": "downstream outage", "operator_id": "oncall-ann"}'::jsonb)$$,
    'a WorkflowPaused{reason, operator_id} event records it');
SELECT results_eq(
    $$SELECT operation, operator_id, details ->> 'reason' FROM harvest.audit_log ORDER BY id DESC LIMIT 1$$,
    $$VALUES ('workflow.pause'::text, 'oncall-ann'::text, 'downstream outage'::text)$$,
    'pause_workflow() is audited');
SELECT is(harvest.get_execution_stack(pg_temp.run('p')) -> 'paused',
          '{"since": "2030-01-01T00:00:00+00:00", "reason": "downstream outage", "operator_id": "oncall-ann"}'::jsonb,
          'get_execution_stack() says since when, why and by whom the run is paused');
SELECT is(harvest.get_execution_stack(pg_temp.run('p')) #>> '{timers,0,status}', 'paused',
          'and that its timer waits, paused');
SELECT is(harvest.pause_workflow(pg_temp.run('p')), false, 'pausing a paused run returns false');
-- A pause's or a resume's reason is written into the run's history: bounded as a batch's is.
UPDATE harvest.engine_settings SET max_payload_bytes = 64;
SELECT throws_ok(format($$SELECT harvest.pause_workflow(%L, repeat('x', 100))$$, pg_temp.run('p')),
                 'HR008', 'the reason of a pause is 102 bytes, over the payload limit of 64 bytes',
                 'pause_workflow() with a reason over the limit: HR008');
SELECT throws_ok(format($$SELECT harvest.resume_workflow(%L, repeat('x', 100))$$, pg_temp.run('p')),
                 'HR008', 'the reason of a resume is 102 bytes, over the payload limit of 64 bytes',
                 'resume_workflow() with a reason over the limit: HR008');
UPDATE harvest.engine_settings SET max_payload_bytes = DEFAULT;
SELECT is((harvest.get_execution(pg_temp.run('p'))).status, 'PAUSED', '... and the run stays paused');
SELECT is(pg_temp.lc_events(pg_temp.run('p'), 'WorkflowPaused'), 1::bigint, '... and records no second event');
SELECT is(harvest._pause_execution(harvest._lock_running_execution(pg_temp.run('p'), 'pause'), 'again', NULL), false,
          '_pause_execution() (pause_workflow''s body, and pause_workflows''): false for a paused run, no event');
SELECT is(harvest._queued_status(pg_temp.run('p')), 'paused', '_queued_status() of a paused run is paused');
SELECT is_empty($$SELECT * FROM harvest.claim_tasks('w1', ARRAY['lq_p'], 10)$$,
                'a claim takes no task of a paused run');
SET LOCAL harvest.fake_now = '2030-01-01 00:02:00+00';
SELECT is_empty($$SELECT * FROM harvest.claim_tasks('w1', ARRAY['lq_p'], 10)$$,
                'nor once its timer is due');
SELECT is(pg_temp.lc_events(pg_temp.run('p'), 'TimerFired'), 0::bigint, 'a paused run''s due timer does not fire');
SELECT is(harvest.signal_workflow(pg_temp.run('p'), 'go', '1'), 6::bigint, 'a paused run takes a signal');
SELECT is(harvest.signal_workflow(pg_temp.run('p'), 'go', '2'), 7::bigint, '... and a second one');
SELECT is(pg_temp.lc_tasks(pg_temp.run('p')), 'activity:paused,timer:paused,workflow:paused',
          'the signals'' wake-up waits as a paused workflow task');
SELECT is_empty($$SELECT * FROM harvest.claim_tasks('w1', ARRAY['lq_p'], 10)$$,
                'which no claim takes either');
SELECT is(harvest.quota_usage(NULL, 'max_active_executions'), 0::bigint,
          'setup: quota_usage of the NULL key (paused runs count for their own key)');

-- ---------------------------------------------------------------- resume_workflow
SELECT is(harvest.resume_workflow(pg_temp.run('p'), 'fixed', 'oncall-ann'), true,
          'resume_workflow() returns true for a paused run');
SELECT is((harvest.get_execution(pg_temp.run('p'))).status, 'RUNNING', 'the run is RUNNING again');
SELECT is(pg_temp.lc_tasks(pg_temp.run('p')), 'activity:pending,timer:pending,workflow:pending',
          'its waiting tasks are queued again');
SELECT results_eq($$SELECT event_type, event_data - 'paused_secs' FROM pg_temp.last_event(pg_temp.run('p'))$$,
    $$VALUES ('WorkflowResumed'::text, '{"reason": "fixed", "operator_id": "oncall-ann"}'::jsonb)$$,
    'a WorkflowResumed{reason, operator_id, paused_secs} event records it');
SELECT is((SELECT (event_data ->> 'paused_secs')::numeric FROM pg_temp.last_event(pg_temp.run('p'))), 120::numeric,
          'paused_secs is how long it was paused');
SELECT is(harvest.resume_workflow(pg_temp.run('p')), false, 'resuming a running run returns false');
SELECT is(harvest._resume_execution(harvest._lock_running_execution(pg_temp.run('p'), 'resume'), 'again', NULL), false,
          '_resume_execution() (resume_workflow''s body, and resume_workflows''): false for a running run');
SELECT is(harvest.get_execution_stack(pg_temp.run('p')) -> 'paused', 'null'::jsonb, 'a running run''s stack: paused is null');
SELECT results_eq(
    $$SELECT kind FROM harvest.claim_tasks('w1', ARRAY['lq_p'], 10) ORDER BY kind$$,
    $$VALUES ('activity'::text), ('workflow'::text)$$,
    'after the resume a claim takes the activity and the workflow task');
SELECT is(pg_temp.lc_events(pg_temp.run('p'), 'TimerFired'), 1::bigint, 'and fires the overdue timer, once');
SELECT is_empty($$SELECT * FROM harvest.claim_tasks('w1', ARRAY['lq_p'], 10)$$, 'a later claim fires it no more');
SELECT is(pg_temp.lc_events(pg_temp.run('p'), 'TimerFired'), 1::bigint, '(still one TimerFired)');
SELECT is(harvest._queued_status(pg_temp.run('p')), 'pending', '_queued_status() of a running run is pending');

-- ---------------------------------------------------------------- work in flight while paused
SELECT isnt(pg_temp.start_activity('ra', 'lc_wf', 'lq_ra', 'lc_act', 'laq_ra'), NULL, 'setup: a claimed activity');
SELECT is(harvest.pause_workflow(pg_temp.run('ra')), true, 'setup: its run paused');
SELECT is(pg_temp.lc_tasks(pg_temp.run('ra')), 'activity:running', 'the running activity keeps running');
SELECT lives_ok($$SELECT harvest.complete_activity(pg_temp.task('ra'), pg_temp.token('ra'), '"done"')$$,
                'its completion is accepted while the run is paused');
SELECT is(pg_temp.lc_events(pg_temp.run('ra'), 'ActivityCompleted'), 1::bigint, '... and recorded');
SELECT is(pg_temp.lc_tasks(pg_temp.run('ra')), 'workflow:paused', 'the next decision waits (paused workflow task)');

SELECT isnt(pg_temp.start_activity('rt', 'lc_wf', 'lq_rt', 'lc_act', 'laq_rt'), NULL, 'setup: another claimed activity');
SELECT is(harvest.pause_workflow(pg_temp.run('rt')), true, 'setup: its run paused');
SELECT is(harvest.fail_activity(pg_temp.task('rt'), pg_temp.token('rt'), '{"error_type": "E", "message": "m"}'),
          'retry_scheduled', 'a failed attempt of a paused run is retried ...');
SELECT is(pg_temp.lc_tasks(pg_temp.run('rt')), 'activity:paused', '... but the retry waits, paused');

SELECT isnt(pg_temp.start_activity('rl', 'lc_wf', 'lq_rl', 'lc_act', 'laq_rl'), NULL, 'setup: a third claimed activity');
SELECT is(harvest.pause_workflow(pg_temp.run('rl')), true, 'setup: its run paused');
SELECT is(harvest.release_task(pg_temp.task('rl'), pg_temp.token('rl')), true, 'a worker gives the task back');
SELECT is(pg_temp.lc_tasks(pg_temp.run('rl')), 'activity:paused', 'a released task of a paused run waits, paused');

-- ---------------------------------------------------------------- a paused run is not rebalanced
SELECT ok((SELECT 'not_running' = ANY(c.blockers)
           FROM harvest.list_migration_candidates(p_execution_id => pg_temp.run('rt')) AS c),
          'a paused run reports not_running to a rebalance');
SELECT is_empty(format($$SELECT * FROM harvest.list_migration_candidates() WHERE execution_id = %L$$, pg_temp.run('rt')),
                'and is not among the candidates');
SELECT throws_ok(format($$SELECT harvest.begin_migration(%L, 7)$$, pg_temp.run('rt')), 'HR013', NULL,
                 'a move of a paused run is refused (HR013)');

-- ---------------------------------------------------------------- cancel, terminate, update, ended runs
SELECT is(harvest.cancel_workflow(pg_temp.run('rl'), 'no longer needed'), true, 'a paused run can be asked to cancel');
SELECT is(pg_temp.lc_tasks(pg_temp.run('rl')), 'activity:paused,workflow:paused',
          'the cancel request is recorded and waits for the resume');
SELECT throws_ok($$SELECT * FROM harvest.request_update(pg_temp.run('rl'), 'u')$$, 'HR023', NULL,
                 'an update of a paused run is refused with HR023');
SELECT lives_ok($$SELECT harvest.terminate_workflow(pg_temp.run('rl'), 'gone')$$, 'a paused run can be terminated');
SELECT is((harvest.get_execution(pg_temp.run('rl'))).status, 'TERMINATED', '... and ends TERMINATED');
SELECT throws_ok($$SELECT harvest.pause_workflow(pg_temp.run('rl'))$$, 'HR005', NULL,
                 'pausing an ended run is refused with HR005');
SELECT throws_ok($$SELECT harvest.resume_workflow('00000000-0000-0000-0000-000000000000')$$, 'HR002', NULL,
                 'resuming an unknown run is refused with HR002');

-- ---------------------------------------------------------------- external completion
SELECT isnt(pg_temp.start_activity('ext', 'lc_wf', 'lq_ext', 'lc_act', 'laq_ext', '[]',
                                   '{"start_to_close": 30}', 'w-ext'), NULL, 'setup: a claimed activity');
SELECT is(harvest.detach_activity(pg_temp.task('ext'), pg_temp.token('ext')), true,
          'detach_activity() lets the worker go of it');
SELECT is((SELECT lease_owner FROM harvest.tasks WHERE id = pg_temp.task('ext')), NULL, 'no worker holds it now');
SELECT is(harvest.release_worker_tasks('w-ext'), 0, 'so the worker''s stop does not hand it out again');
SELECT is(harvest.heartbeat_activity_by_token(pg_temp.lc_token('ext'), '{"step": 1}'), false,
          'heartbeat_activity_by_token() heartbeats it (no cancel requested)');
SELECT is(harvest.complete_activity_by_token(pg_temp.lc_token('ext'), '{"ok": true}'), 'completed',
          'complete_activity_by_token() completes it');
SELECT is(harvest.complete_activity_by_token(
              format('v1:%s:%s:1:1:%s', pg_temp.run('ext'), pg_temp.task('ext'), pg_temp.token('ext')), '{"ok": true}'),
          'already_completed', 'the same completion again answers already_completed');
SELECT is(pg_temp.lc_events(pg_temp.run('ext'), 'ActivityCompleted'), 1::bigint, '... and records it once');
SELECT throws_ok(format($$SELECT harvest.complete_activity_by_token('v1:%s:%s:1:1:%s', '{"ok": false}')$$,
                        pg_temp.run('ext'), pg_temp.task('ext'), pg_temp.token('ext')), 'HR004', NULL,
                 'a completion with another result is refused with HR004');
SELECT throws_ok($$SELECT harvest.complete_activity_by_token('not-a-token', '1')$$, 'HR001', NULL,
                 'a malformed token is refused with HR001');
SELECT results_eq(
    $$SELECT seq, attempt, fencing_token FROM harvest._parse_task_token(
          'v1:00000000-0000-0000-0000-000000000001:17:3:2:99')$$,
    $$VALUES (3, 2, 99::bigint)$$, '_parse_task_token() reads the parts of a token');

-- A late completion: the lease ran out.
SELECT isnt(pg_temp.start_activity('late', 'lc_wf', 'lq_late', 'lc_act', 'laq_late', '[]',
                                   '{"start_to_close": 10}', 'w-late'), NULL, 'setup: a claimed activity (10 s)');
SELECT is(harvest.detach_activity(pg_temp.task('late'), pg_temp.token('late')), true, 'setup: detached');
CREATE TEMP TABLE lc_late AS SELECT pg_temp.lc_token('late') AS token;
SET LOCAL harvest.fake_now = '2030-01-01 00:03:00+00';
SELECT throws_ok($$SELECT harvest.complete_activity_by_token((SELECT token FROM lc_late), '1')$$, 'HR004', NULL,
                 'a completion after its start_to_close is refused with HR004');
SELECT is((SELECT count(*) FROM harvest.expire_tasks() WHERE outcome = 'retry_scheduled'), 1::bigint,
          'setup: the scanner retries the timed-out attempt');
SELECT throws_like($$SELECT harvest.complete_activity_by_token((SELECT token FROM lc_late), '1')$$,
                   '%the attempt failed (StartToCloseTimeout: %) and was retried%',
                   'the old token is refused once the attempt was retried, naming the failure that retried it');
SELECT throws_ok($$SELECT * FROM harvest._lock_token_task((SELECT token FROM lc_late), NULL, 'complete')$$, 'HR004', NULL,
                 '_lock_token_task() names what became of the attempt (HR004)');
SELECT is(pg_temp.lc_events(pg_temp.run('late'), 'ActivityCompleted'), 0::bigint, 'nothing was recorded');

-- The heartbeat timeout still applies to a detached activity: a heartbeat by token keeps it.
SET LOCAL harvest.fake_now = '2030-01-01 00:10:00+00';
SELECT isnt(pg_temp.start_activity('hb', 'lc_wf', 'lq_hb', 'lc_act', 'laq_hb', '[]',
                                   '{"start_to_close": 60, "heartbeat_timeout": 5}', 'w-hb'), NULL,
            'setup: a claimed activity, heartbeat timeout 5 s');
SELECT is(harvest.detach_activity(pg_temp.task('hb'), pg_temp.token('hb')), true, 'setup: detached');
CREATE TEMP TABLE lc_hb AS SELECT pg_temp.lc_token('hb') AS token;
SET LOCAL harvest.fake_now = '2030-01-01 00:10:04+00';
SELECT is(harvest.heartbeat_activity_by_token((SELECT token FROM lc_hb)), false, 'a heartbeat by token at 4 s');
SET LOCAL harvest.fake_now = '2030-01-01 00:10:08+00';
SELECT is_empty($$SELECT * FROM harvest.expire_tasks() WHERE task_id = pg_temp.task('hb')$$,
                'at 8 s the heartbeat kept the lease (until 9 s)');
SET LOCAL harvest.fake_now = '2030-01-01 00:10:10+00';
SELECT is((SELECT outcome FROM harvest.expire_tasks() WHERE task_id = pg_temp.task('hb')), 'retry_scheduled',
          'at 10 s, with no heartbeat since 4 s, the attempt times out and is retried');
SELECT is((SELECT last_failure ->> 'error_type' FROM harvest.tasks WHERE id = pg_temp.task('hb')), 'HeartbeatTimeout',
          '... as a HeartbeatTimeout');
SELECT throws_ok($$SELECT harvest.heartbeat_activity_by_token((SELECT token FROM lc_hb))$$, 'HR004', NULL,
                 'the token of the timed-out attempt no longer heartbeats');

-- fail_activity_by_token
SELECT isnt(pg_temp.start_activity('ef', 'lc_wf', 'lq_ef', 'lc_act', 'laq_ef', '[]',
                                   '{"retry": {"max_attempts": 1}, "dead_letter": false}', 'w-ef'), NULL,
            'setup: a claimed activity with one attempt');
SELECT is(harvest.fail_activity_by_token(pg_temp.lc_token('ef'), '{"error_type": "Declined", "message": "no"}'),
          'failed', 'fail_activity_by_token() fails it (its last attempt)');
SELECT is(pg_temp.lc_events(pg_temp.run('ef'), 'ActivityFailed'), 1::bigint, '... recording ActivityFailed');

-- ---------------------------------------------------------------- more paths back to the queue
SET LOCAL harvest.fake_now = '2030-01-01 01:00:00+00';
-- A decision in flight when the run is paused is applied; what it schedules waits.
SELECT isnt(pg_temp.start_claimed('dif', 'lc_wf', 'lq_dif'), NULL, 'setup: a claimed first workflow task');
SELECT is(harvest.pause_workflow(pg_temp.run('dif')), true, 'setup: its run paused mid-decision');
SELECT results_eq(
    $$SELECT execution_status FROM harvest.complete_workflow_task(pg_temp.task('dif'), pg_temp.token('dif'), 1, '[
        {"type": "schedule_activity", "seq": 1, "name": "lc_act", "input": [], "queue": "lq_dif"},
        {"type": "start_timer", "seq": 2, "duration": 1}]', 'w-dif', p_hand_off_slots => 5)$$,
    $$VALUES ('PAUSED'::text)$$, 'the decision in flight is applied (and hands nothing off)');
SELECT is(pg_temp.lc_tasks(pg_temp.run('dif')), 'activity:paused,timer:paused,workflow:paused',
          'its activity and timer wait, and so does the wake-up for the WorkflowPaused it did not see');
-- A workflow task whose lease runs out while paused goes back paused.
SELECT isnt(pg_temp.start_claimed('exp', 'lc_wf', 'lq_exp', 'w-exp', '[]', 1), NULL, 'setup: a claimed task, 1 s lease');
SELECT is(harvest.pause_workflow(pg_temp.run('exp')), true, 'setup: its run paused');
SET LOCAL harvest.fake_now = '2030-01-01 01:00:05+00';
SELECT is((SELECT outcome FROM harvest.expire_tasks() WHERE task_id = pg_temp.task('exp')), 'released',
          'expire_tasks() releases the expired workflow task ...');
SELECT is(pg_temp.lc_tasks(pg_temp.run('exp')), 'workflow:paused', '... back to paused');
-- A workflow task that fails while paused is retried later, paused.
SELECT isnt(pg_temp.start_claimed('fwt', 'lc_wf', 'lq_fwt'), NULL, 'setup: a claimed task');
SELECT is(harvest.pause_workflow(pg_temp.run('fwt')), true, 'setup: its run paused');
SELECT lives_ok($$SELECT harvest.fail_workflow_task(pg_temp.task('fwt'), pg_temp.token('fwt'),
                  '{"error_type": "NonDeterminismError", "message": "m"}')$$, 'fail_workflow_task() while paused');
SELECT is(pg_temp.lc_tasks(pg_temp.run('fwt')), 'workflow:paused', 'its retry waits, paused');
-- A dead letter of a paused run can be replayed; the new attempt waits.
SELECT isnt(pg_temp.dead_letter('dlp', 'lc_wf', 'lc_act'), NULL, 'setup: a dead-lettered activity');
SELECT is(harvest.pause_workflow(pg_temp.run('dlp')), true, 'setup: its run paused');
SELECT isnt(harvest.replay_dead_letter((SELECT id FROM harvest.dead_letters WHERE execution_id = pg_temp.run('dlp'))),
            NULL, 'replay_dead_letter() of a paused run''s activity');
SELECT is(pg_temp.lc_tasks(pg_temp.run('dlp')), 'activity:paused', 'the replayed attempt waits, paused');
-- Quotas and supersede count a paused run.
UPDATE harvest.executions SET quota_key = 'lc-tenant', concurrency_key = 'lc-key' WHERE id = pg_temp.run('dlp');
SELECT is(harvest.quota_usage('lc-tenant', 'max_active_executions'), 1::bigint,
          'a paused run counts for max_active_executions');
SELECT is(harvest._supersede('lc_wf', 'lc-key', 1, gen_random_uuid()), ARRAY[pg_temp.run('dlp')],
          'latest-wins supersede cancels a paused run too');
SELECT is((harvest.get_execution(pg_temp.run('dlp'))).status, 'CANCELLED', '... which ends CANCELLED');

SELECT * FROM finish();
ROLLBACK;
