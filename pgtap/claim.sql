-- functions/claim.sql: harvest.claim_tasks (order, due time, queues, leases,
-- fencing tokens, batch limit, timers), harvest._fire_due_timers, harvest.next_due_at (and _earliest_pending_due_at, _pending_queues),
-- harvest._claim_head (the head of the polled queues), harvest._claim_ids (the shared lock-and-lease step; the gates are in pgtap/flow_concurrency.sql),
-- harvest._lease_secs, and the hand-off helpers harvest._hand_off_queues, harvest._may_hand_off,
-- harvest._task_for_worker, harvest._worker_task, harvest._worker_options, harvest._handed_task, harvest._hand_workflow_task (their callers: pgtap/decide.sql,
-- pgtap/activities.sql), and Redis dispatch's harvest.claim_named_tasks (which ends, as
-- claim_tasks does, in harvest._claim_candidates) and harvest.list_claimable_tasks, and
-- harvest.complete_activities_with_claim (a result batch that claims for the slots it frees).
BEGIN;
SELECT plan(183);
SET LOCAL TimeZone = 'UTC';
-- Function calls counted from the start (a call site compiled before this would not count):
-- claim_tasks calls _fire_due_timers only when a timer is due (the timers below).
SET LOCAL track_functions = 'pl';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- Start wf_<key> on a queue of its own (wq_<key>); worker "setup" takes its first
-- workflow task and answers it with p_commands. Returns the run's id.
CREATE FUNCTION pg_temp.setup_run(p_key text, p_commands jsonb) RETURNS uuid LANGUAGE sql AS $fn$
    SELECT pg_temp.start_decided(p_key, 'wf_' || p_key, 'wq_' || p_key, p_commands, 'setup', 'setup');
$fn$;

-- Argument checks.
SELECT throws_ok($$SELECT * FROM harvest.claim_tasks('', ARRAY['q'])$$, 'HR001', 'worker id is empty',
                 'an empty worker id: HR001');
SELECT throws_ok($$SELECT * FROM harvest.claim_tasks('w', ARRAY[]::text[])$$, 'HR001', 'no queues given',
                 'no queues: HR001');
SELECT throws_ok($$SELECT * FROM harvest.claim_tasks('w', ARRAY['q'], 0)$$, 'HR001',
                 'claim limit 0 is out of range 1..1000', 'limit 0: HR001');
SELECT throws_ok($$SELECT * FROM harvest.claim_tasks('w', ARRAY['q'], 1001)$$, 'HR001',
                 'claim limit 1001 is out of range 1..1000', 'limit 1001: HR001');
SELECT throws_ok($$SELECT * FROM harvest.claim_tasks('w', ARRAY['q'], 2147483647)$$, 'HR001',
                 'claim limit 2147483647 is out of range 1..1000', 'the largest limit: HR001, not an overflow');
SELECT is_empty($$SELECT * FROM harvest.claim_tasks('w', ARRAY['nothing_here'])$$,
                'an empty queue: nothing claimed');

-- Order: priority first, then due time; a task due later waits.
CREATE TEMP TABLE runs (name text PRIMARY KEY, execution_id uuid) ON COMMIT DROP;
INSERT INTO runs SELECT 'A', execution_id FROM harvest.start_workflow('claim_wf', '[]', 'A', 'cq');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:01+00';
INSERT INTO runs SELECT 'B', execution_id FROM harvest.start_workflow('claim_wf', '[]', 'B', 'cq');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:02+00';
INSERT INTO runs SELECT 'C', execution_id FROM harvest.start_workflow('claim_wf', '[]', 'C', 'cq', p_priority => 5);
INSERT INTO runs SELECT 'E', execution_id FROM harvest.start_workflow('claim_wf', '[]', 'E', 'other_q');
SET LOCAL harvest.fake_now = '2030-01-01 00:01:40+00';
INSERT INTO runs SELECT 'D', execution_id FROM harvest.start_workflow('claim_wf', '[]', 'D', 'cq', p_priority => 9);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:10+00';

CREATE TEMP TABLE batch1 ON COMMIT DROP AS
SELECT row_number() OVER () AS n, c.* FROM harvest.claim_tasks('w1', ARRAY['cq'], 10, 45) AS c;
SELECT results_eq($$SELECT workflow_id FROM batch1 ORDER BY n$$, ARRAY['C', 'A', 'B'],
                  'claim_tasks(): highest priority first, then earliest due; a task due later is not claimed');
SELECT results_eq(
    $$SELECT DISTINCT kind, workflow_name, queue, attempt, lease_expires_at FROM batch1$$,
    $$VALUES ('workflow'::text, 'claim_wf'::text, 'cq'::text, 1,
              '2030-01-01 00:00:55+00'::timestamptz)$$,
    'claimed workflow tasks: attempt 1, lease = now + p_workflow_lease_secs');
SELECT results_eq(
    $$SELECT b.execution_id, b.task_id FROM batch1 AS b JOIN runs USING (execution_id) ORDER BY b.n$$,
    $$SELECT t.execution_id, t.id FROM harvest.tasks AS t JOIN runs AS r USING (execution_id)
      WHERE r.name IN ('C', 'A', 'B') ORDER BY r.name = 'C' DESC, r.name$$,
    'claim_tasks() returns each task''s id and execution id');
SELECT results_eq(
    $$SELECT DISTINCT status, lease_owner, started_at, lease_expires_at FROM harvest.tasks
      WHERE id IN (SELECT task_id FROM batch1)$$,
    $$VALUES ('running'::text, 'w1'::text, '2030-01-01 00:00:10+00'::timestamptz,
              '2030-01-01 00:00:55+00'::timestamptz)$$,
    'the task rows are running, leased to the worker, started now');
SELECT is((SELECT count(DISTINCT fencing_token) FROM batch1), 3::bigint, 'each claimed task gets its own fencing token');
SELECT results_eq(
    $$SELECT fencing_token FROM harvest.tasks WHERE id IN (SELECT task_id FROM batch1) ORDER BY id$$,
    $$SELECT fencing_token FROM batch1 ORDER BY task_id$$, 'the returned tokens are the rows'' tokens');
SELECT is((SELECT status FROM harvest.tasks WHERE execution_id = (SELECT execution_id FROM runs WHERE name = 'D')),
          'pending', 'the not-yet-due task stays pending');
SELECT is((SELECT status FROM harvest.tasks WHERE execution_id = (SELECT execution_id FROM runs WHERE name = 'E')),
          'pending', 'a task of a queue not polled stays pending');
SELECT is_empty($$SELECT * FROM harvest.claim_tasks('w2', ARRAY['cq'])$$, 'running tasks are not claimed again');
SELECT is(harvest.next_due_at(ARRAY['cq']), '2030-01-01 00:01:40+00'::timestamptz,
          'next_due_at(): when the earliest pending task of the queues becomes due');
SELECT is(harvest.next_due_at(ARRAY['nothing_here']), NULL::timestamptz, 'next_due_at() of idle queues: NULL');
-- Priorities: the earliest of each, whatever its priority (the index orders priority first).
INSERT INTO harvest.tasks (execution_id, kind, queue, priority, due_at, scheduled_at, seq, activity_name)
SELECT (SELECT execution_id FROM runs WHERE name = 'D'), 'activity', v.queue, v.priority, v.due_at, harvest.now(),
       900 + v.n, 'nd_act'
FROM (VALUES (1, 'ndq', 9, '2030-01-01 05:00:00+00'::timestamptz), (2, 'ndq', 5, '2030-01-01 03:00:00+00'),
             (3, 'ndq', 0, '2030-01-01 04:00:00+00'), (4, 'ndq', -3, '2030-01-01 02:00:00+00'),
             (5, 'ndq2', 1, '2030-01-01 01:30:00+00')) AS v (n, queue, priority, due_at);
SELECT is(harvest.next_due_at(ARRAY['ndq']), '2030-01-01 02:00:00+00'::timestamptz,
          'next_due_at(): the earliest over every priority of the queue (here the lowest priority''s)');
SELECT is(harvest.next_due_at(ARRAY['ndq', 'ndq2', 'ndq', 'nothing_here']), '2030-01-01 01:30:00+00'::timestamptz,
          'next_due_at(): the earliest over several queues (a queue named twice, an empty one)');
-- More priorities than the probes: read whole, the same answer.
INSERT INTO harvest.tasks (execution_id, kind, queue, priority, due_at, scheduled_at, seq, activity_name)
SELECT (SELECT execution_id FROM runs WHERE name = 'D'), 'activity', 'ndq3', g, '2030-01-01 06:00:00+00'::timestamptz
       - make_interval(mins => g), harvest.now(), 1000 + g, 'nd_act'
FROM generate_series(1, 70) AS g;
SELECT is(harvest.next_due_at(ARRAY['ndq3']), '2030-01-01 04:50:00+00'::timestamptz,
          'next_due_at(): a queue of more than 64 priorities: the earliest of them all');
SELECT is(ARRAY(SELECT q FROM harvest._pending_queues() AS q WHERE q IN ('ndq', 'ndq2', 'ndq3', 'nothing_here')),
          ARRAY['ndq', 'ndq2', 'ndq3'], '_pending_queues(): the queues with pending work, in name order');
SELECT is(harvest._earliest_pending_due_at('ndq3'), '2030-01-01 04:50:00+00'::timestamptz,
          '_earliest_pending_due_at(): one queue''s earliest pending task, over every priority');
DELETE FROM harvest.tasks WHERE queue IN ('ndq', 'ndq2', 'ndq3');

-- Later, several queues: priority orders across them; tokens keep growing.
SET LOCAL harvest.fake_now = '2030-01-01 00:01:40+00';
CREATE TEMP TABLE batch2 ON COMMIT DROP AS
SELECT row_number() OVER () AS n, c.* FROM harvest.claim_tasks('w1', ARRAY['cq', 'other_q'], 10) AS c;
SELECT results_eq($$SELECT workflow_id FROM batch2 ORDER BY n$$, ARRAY['D', 'E'],
                  'once due the task is claimed; priority orders across queues');
SELECT is((SELECT lease_expires_at FROM batch2 WHERE workflow_id = 'D'), '2030-01-01 00:02:10+00'::timestamptz,
          'the default workflow task lease is 30 s');
SELECT cmp_ok((SELECT min(fencing_token) FROM batch2), '>', (SELECT max(fencing_token) FROM batch1),
              'fencing tokens of a later claim are greater');

-- Claiming a task again gives a greater token.
SELECT lives_ok(format($$SELECT harvest.fail_workflow_task(%s, %s, '{"error_type": "E"}', 0)$$,
                        task_id, fencing_token), 'setup: the workflow task of D is handed back')
FROM batch2 WHERE workflow_id = 'D';
CREATE TEMP TABLE batch3 ON COMMIT DROP AS SELECT * FROM harvest.claim_tasks('w9', ARRAY['cq']);
SELECT results_eq($$SELECT task_id, attempt, workflow_id FROM batch3$$,
                  $$SELECT task_id, 2, 'D'::text FROM batch2 WHERE workflow_id = 'D'$$,
                  'a released task is claimed again, attempt 2');
SELECT cmp_ok((SELECT fencing_token FROM batch3), '>', (SELECT fencing_token FROM batch2 WHERE workflow_id = 'D'),
              'the same task claimed again gets a greater fencing token');
SELECT is((SELECT lease_owner FROM harvest.tasks WHERE id = (SELECT task_id FROM batch3)), 'w9',
          'the new claim owns the lease');

-- The batch limit.
INSERT INTO runs SELECT 'L' || i, s.execution_id
FROM generate_series(1, 3) AS i, harvest.start_workflow('claim_wf', '[]', 'L' || i, 'lq') AS s;
SELECT is((SELECT count(*) FROM harvest.claim_tasks('w1', ARRAY['lq'], 2)), 2::bigint,
          'claim_tasks(p_limit => 2) claims two of three');
SELECT is((SELECT count(*) FROM harvest.claim_tasks('w1', ARRAY['lq'], 2)), 1::bigint,
          'the next claim gets the third');
SELECT is((SELECT count(*) FROM harvest.tasks WHERE queue = 'lq' AND status = 'running'), 3::bigint,
          'all three are running');

-- Activity tasks: the lease is min(start_to_close, heartbeat_timeout), 300 s by default.
SET LOCAL harvest.fake_now = '2030-01-01 00:10:00+00';
INSERT INTO runs SELECT 'acts', pg_temp.setup_run('acts', jsonb_build_array(
    jsonb_build_object('type', 'schedule_activity', 'seq', 1, 'name', 'plain', 'input', '[1]'::jsonb,
                       'queue', 'aq'),
    jsonb_build_object('type', 'schedule_activity', 'seq', 2, 'name', 'stc', 'input', '[2]'::jsonb,
                       'queue', 'aq', 'options', '{"start_to_close": 20}'::jsonb),
    jsonb_build_object('type', 'schedule_activity', 'seq', 3, 'name', 'hb', 'input', '[3]'::jsonb,
                       'queue', 'aq', 'options', '{"start_to_close": 20, "heartbeat_timeout": 5}'::jsonb),
    jsonb_build_object('type', 'schedule_activity', 'seq', 4, 'name', 'urgent', 'input', '[4]'::jsonb,
                       'queue', 'aq', 'options', '{"priority": 3}'::jsonb)));
SELECT results_eq(
    $$SELECT DISTINCT kind, run_workflow_name, run_workflow_id FROM harvest.tasks WHERE execution_id = pg_temp.run('acts')$$,
    $$VALUES ('activity'::text, 'wf_acts'::text, 'acts'::text)$$,
    'a decision''s activities carry their run''s workflow name and id (the run''s workflow task is gone)');
-- (The claim answers them from their rows and reads none of their runs:
-- tests/integration/test_claim_answer.py, where the rows are not this transaction's own, whose
-- update a foreign key checks against the run.)
CREATE TEMP TABLE acts ON COMMIT DROP AS
SELECT row_number() OVER () AS n, c.* FROM harvest.claim_tasks('w1', ARRAY['aq'], 10) AS c;
SELECT results_eq($$SELECT activity_name, seq, input, lease_expires_at FROM acts ORDER BY n$$,
    $$VALUES ('urgent'::text, 4, '[4]'::jsonb, '2030-01-01 00:15:00+00'::timestamptz),
             ('plain'::text, 1, '[1]'::jsonb, '2030-01-01 00:15:00+00'::timestamptz),
             ('stc'::text, 2, '[2]'::jsonb, '2030-01-01 00:10:20+00'::timestamptz),
             ('hb'::text, 3, '[3]'::jsonb, '2030-01-01 00:10:05+00'::timestamptz)$$,
    'activity leases: 300 s by default, start_to_close, or heartbeat_timeout when shorter; priority first');
SELECT results_eq($$SELECT DISTINCT kind, queue, workflow_name, workflow_id, attempt FROM acts$$,
    $$VALUES ('activity'::text, 'aq'::text, 'wf_acts'::text, 'acts'::text, 1)$$,
    'activity rows name their own queue and the run');
SELECT is((SELECT options FROM acts WHERE activity_name = 'hb'), '{"start_to_close": 20, "heartbeat_timeout": 5}'::jsonb,
          'the activity options are handed to the worker');
SELECT is((SELECT heartbeat_details FROM acts WHERE activity_name = 'hb'), NULL::jsonb,
          'a first attempt has no heartbeat details');

-- Heartbeat details of an earlier attempt come back with the retry.
SELECT is(harvest.heartbeat_activity(task_id, fencing_token, '{"progress": 7}'), false,
          'setup: heartbeat the first attempt') FROM acts WHERE activity_name = 'plain';
SELECT is(harvest.fail_activity(task_id, fencing_token, '{"error_type": "E", "message": "m"}'), 'retry_scheduled',
          'setup: the first attempt fails and is retried in 1 s') FROM acts WHERE activity_name = 'plain';
SET LOCAL harvest.fake_now = '2030-01-01 00:10:00.5+00';
SELECT is_empty($$SELECT * FROM harvest.claim_tasks('w1', ARRAY['aq'])$$, 'a retry is not claimed before its backoff');
SET LOCAL harvest.fake_now = '2030-01-01 00:10:01+00';
SELECT results_eq($$SELECT activity_name, attempt, heartbeat_details FROM harvest.claim_tasks('w1', ARRAY['aq'])$$,
    $$VALUES ('plain'::text, 2, '{"progress": 7}'::jsonb)$$,
    'the retry is claimed once due, attempt 2, with the last heartbeat details');

-- An activity written before migration 0099 carries no run name or id: the claim reads its run.
INSERT INTO runs SELECT 'old_act', pg_temp.setup_run('old_act', '[{"type": "schedule_activity", "seq": 1,
    "name": "plain", "input": [5], "queue": "old_aq"}]');
UPDATE harvest.tasks SET run_workflow_name = NULL, run_workflow_id = NULL WHERE execution_id = pg_temp.run('old_act');
SELECT results_eq($$SELECT kind, workflow_name, workflow_id, input FROM harvest.claim_tasks('w1', ARRAY['old_aq'])$$,
    $$VALUES ('activity'::text, 'wf_old_act'::text, 'old_act'::text, '[5]'::jsonb)$$,
    'an activity without its run''s name and id on its row (written before 0099) is answered from its run');

-- Timers fire inside claim_tasks: TimerFired, then a workflow task claimed in the same call.
SET LOCAL harvest.fake_now = '2030-01-01 01:00:00+00';
INSERT INTO runs SELECT 'T', pg_temp.setup_run('timer', '[{"type": "start_timer", "seq": 1, "duration": 60}]');
INSERT INTO runs SELECT 'T2', pg_temp.setup_run('timer2', '[{"type": "start_timer", "seq": 1, "duration": 30}]');
SELECT is((SELECT due_at FROM harvest.tasks
           WHERE execution_id = (SELECT execution_id FROM runs WHERE name = 'T') AND kind = 'timer'),
          '2030-01-01 01:01:00+00'::timestamptz, 'a timer task is due at now + duration');
SELECT is(harvest.next_due_at(ARRAY['wq_timer']), '2030-01-01 01:01:00+00'::timestamptz,
          'next_due_at() counts timers');
SET LOCAL harvest.fake_now = '2030-01-01 01:00:59+00';
CREATE FUNCTION pg_temp.timer_firings() RETURNS bigint LANGUAGE sql AS $fn$
    SELECT coalesce((SELECT f.calls FROM pg_stat_xact_user_functions AS f
                     WHERE f.funcid = 'harvest._fire_due_timers(text[],integer)'::regprocedure), 0);
$fn$;
CREATE TEMP TABLE firings_before ON COMMIT DROP AS SELECT pg_temp.timer_firings() AS n;
SELECT is_empty($$SELECT * FROM harvest.claim_tasks('w1', ARRAY['wq_timer'])$$, 'a timer not yet due: nothing claimed');
SELECT is(pg_temp.timer_firings() - (SELECT n FROM firings_before), 0::bigint,
          'a claim with no timer due does not call _fire_due_timers (its probe finds none)');
SELECT is((SELECT last_event_id FROM harvest.executions WHERE id = (SELECT execution_id FROM runs WHERE name = 'T')),
          3::bigint, 'a timer not yet due appends nothing');
SET LOCAL harvest.fake_now = '2030-01-01 01:01:00+00';
CREATE TEMP TABLE fired ON COMMIT DROP AS SELECT * FROM harvest.claim_tasks('w1', ARRAY['wq_timer']);
SELECT results_eq($$SELECT kind, execution_id, attempt FROM fired$$,
    $$SELECT 'workflow'::text, execution_id, 1 FROM runs WHERE name = 'T'$$,
    'a due timer fires inside the claim, whose batch holds the new workflow task');
SELECT is(pg_temp.timer_firings() - (SELECT n FROM firings_before), 1::bigint,
          '... through one call of _fire_due_timers');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data FROM harvest.events
      WHERE execution_id = (SELECT execution_id FROM runs WHERE name = 'T') AND event_id > 2 ORDER BY event_id$$,
    $$VALUES (3::bigint, 'TimerStarted'::text, '{"seq": 1, "fire_at": "2030-01-01T01:01:00+00:00"}'::jsonb),
             (4::bigint, 'TimerFired'::text, '{"seq": 1}'::jsonb)$$,
    'TimerFired{seq} follows TimerStarted');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE kind = 'timer'
                  AND execution_id = (SELECT execution_id FROM runs WHERE name = 'T')$$,
                'a fired timer task is deleted');
SELECT is((SELECT kind FROM harvest.tasks WHERE execution_id = (SELECT execution_id FROM runs WHERE name = 'T2')),
          'timer', 'a due timer of a queue not polled does not fire');
SELECT is_empty($$SELECT * FROM harvest.claim_tasks('w1', ARRAY['wq_timer'])$$, 'a timer fires once');

-- _fire_due_timers on its own: fires, wakes the workflow, reports the count.
SELECT is(harvest._fire_due_timers(ARRAY['wq_timer2']), 1, '_fire_due_timers() returns how many fired');
SELECT results_eq(
    $$SELECT kind, status FROM harvest.tasks WHERE execution_id = (SELECT execution_id FROM runs WHERE name = 'T2')$$,
    $$VALUES ('workflow'::text, 'pending'::text)$$, '_fire_due_timers() leaves a pending workflow task');
SELECT is(harvest._fire_due_timers(ARRAY['wq_timer2']), 0, '_fire_due_timers() with nothing due: 0');

-- A timer of a run that ended does not fire.
SET LOCAL harvest.fake_now = '2030-01-01 02:00:00+00';
INSERT INTO runs SELECT 'T3', pg_temp.setup_run('timer3', '[{"type": "start_timer", "seq": 1, "duration": 1}]');
UPDATE harvest.executions SET status = 'CANCELLED' WHERE id = (SELECT execution_id FROM runs WHERE name = 'T3');
SET LOCAL harvest.fake_now = '2030-01-01 02:00:05+00';
SELECT is(harvest._fire_due_timers(ARRAY['wq_timer3']), 0, 'the timer of a run that is not RUNNING does not fire');

-- _claim_ids on its own: only pending ids, at most the limit.
INSERT INTO runs SELECT 'X' || i, s.execution_id
FROM generate_series(1, 3) AS i, harvest.start_workflow('claim_wf', '[]', 'X' || i, 'xq') AS s;
-- _claim_head: the due pending tasks of the polled queues, in claim order, at most p_window.
SELECT is((SELECT h.ids FROM harvest._claim_head(ARRAY['xq', 'no_such_q'], harvest.now(), 10) AS h),
          (SELECT array_agg(id ORDER BY priority DESC, due_at, id) FROM harvest.tasks
           WHERE queue = 'xq' AND status = 'pending'),
          '_claim_head() lists the due pending tasks of the queues in claim order');
SELECT is((SELECT cardinality(h.ids) FROM harvest._claim_head(ARRAY['xq'], harvest.now(), 2) AS h), 2,
          '_claim_head() returns at most p_window ids');
SELECT is((SELECT h.gated FROM harvest._claim_head(ARRAY['xq'], harvest.now(), 10) AS h), false,
          '_claim_head() says when no candidate carries an admission gate');
SELECT ok((SELECT p.proconfig IS NULL AND NOT p.prosecdef FROM pg_catalog.pg_proc AS p
           WHERE p.oid = 'harvest._claim_head'::regproc),
          '_claim_head() has no SET clause: it is inlined into claim_tasks (tests/integration/test_generic_plans.py)');
SELECT is((SELECT count(*) FROM harvest._claim_ids(
              (SELECT array_agg(id) FROM harvest.tasks WHERE queue = 'xq'), 'wx', 2, 30, harvest.now())),
          2::bigint, '_claim_ids() claims at most p_limit of the ids');
SELECT is((SELECT count(*) FROM harvest._claim_ids(
              (SELECT array_agg(id) FROM harvest.tasks WHERE queue = 'xq'), 'wx', 10, 30, harvest.now())),
          1::bigint, '_claim_ids() skips ids that are already running');
-- The lock re-checks the due time: a candidate read as due may have been retried with a
-- backoff (pending, due later) before the claim locks it.
SELECT harvest.start_workflow('claim_wf', '[]', 'X_later', 'xq_later');
UPDATE harvest.tasks SET due_at = harvest.now() + interval '1 minute' WHERE queue = 'xq_later';
SELECT is((SELECT count(*) FROM harvest._claim_ids(
              (SELECT array_agg(id) FROM harvest.tasks WHERE queue = 'xq_later'), 'wx', 10, 30, harvest.now())),
          0::bigint, '_claim_ids() skips a pending id not due at p_now');
SELECT is((SELECT count(*) FROM harvest._claim_ids(
              (SELECT array_agg(id) FROM harvest.tasks WHERE queue = 'xq_later'), 'wx', 10, 30,
              harvest.now() + interval '1 minute')),
          1::bigint, '_claim_ids() claims it once it is due');

-- _events_since_decision: the worker that decided a run last gets its unseen events in the claim.
CREATE TEMP TABLE sticky (what text PRIMARY KEY, v bigint) ON COMMIT DROP;
CREATE FUNCTION pg_temp.sticky_setup() RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
    v_task record;
    v_id uuid;
BEGIN
    SELECT s.execution_id INTO v_id FROM harvest.start_workflow('sticky_wf', '[]', 'sticky', 'sticky_q') AS s;
    SELECT * INTO v_task FROM harvest.claim_tasks('w-sticky', ARRAY['sticky_q'], 1);
    PERFORM harvest.complete_workflow_task(v_task.task_id, v_task.fencing_token, 1,
        '[{"type": "start_timer", "seq": 1, "duration": 3600}]', 'w-sticky');
    INSERT INTO sticky VALUES ('decided', (SELECT decided_through FROM harvest.executions WHERE id = v_id));
    PERFORM harvest.signal_workflow(v_id, 'go', '"now"');
END;
$fn$;
SELECT pg_temp.sticky_setup();
SELECT is((SELECT v FROM sticky WHERE what = 'decided'), 3::bigint,
          'complete_workflow_task() records what the decider has read: its through, its marker and its TimerStarted');
SELECT results_eq(
    $$SELECT c.new_events_after, jsonb_array_length(c.new_events), c.new_events -> 0 ->> 'event_type'
      FROM harvest.claim_tasks('w-sticky', ARRAY['sticky_q'], 1) AS c$$,
    $$VALUES (3::bigint, 1, 'SignalReceived'::text)$$,
    'the deciding worker''s claim carries what arrived since, not its own decision''s events');
SELECT is((SELECT decided_by FROM harvest.executions WHERE workflow_id = 'sticky'), 'w-sticky',
          'decided_by names the worker');
-- A decision that did not see the whole history (a signal came in after its through) keeps
-- decided_through at its through: the signal before its marker is carried with the rest.
CREATE FUNCTION pg_temp.sticky_late_setup() RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
    v_task record;
    v_id uuid;
BEGIN
    SELECT s.execution_id INTO v_id FROM harvest.start_workflow('sticky_wf', '[]', 'sticky-late', 'sticky_late_q') AS s;
    SELECT * INTO v_task FROM harvest.claim_tasks('w-sticky', ARRAY['sticky_late_q'], 1);
    PERFORM harvest.signal_workflow(v_id, 'early', '"before the decision"');
    PERFORM harvest.complete_workflow_task(v_task.task_id, v_task.fencing_token, 1,
        '[{"type": "start_timer", "seq": 1, "duration": 3600}]', 'w-sticky');
END;
$fn$;
SELECT pg_temp.sticky_late_setup();
SELECT results_eq(
    $$SELECT c.new_events_after, (SELECT array_agg(e ->> 'event_type' ORDER BY (e ->> 'event_id')::bigint)
                                  FROM jsonb_array_elements(c.new_events) AS e)
      FROM harvest.claim_tasks('w-sticky', ARRAY['sticky_late_q'], 1) AS c$$,
    $$VALUES (1::bigint, ARRAY['SignalReceived', 'WorkflowTaskCompleted', 'TimerStarted'])$$,
    'a decision through less than the whole history keeps decided_through at its through: the signal it did not see is carried');
-- Another worker gets no events (it has no cached run to extend).
UPDATE harvest.tasks SET status = 'pending' WHERE execution_id = (
    SELECT id FROM harvest.executions WHERE workflow_id = 'sticky') AND kind = 'workflow';
SELECT results_eq(
    $$SELECT c.new_events IS NULL FROM harvest.claim_tasks('w-other', ARRAY['sticky_q'], 1) AS c$$,
    $$VALUES (true)$$, 'another worker''s claim carries no events');
SELECT harvest.start_workflow('sticky_wf', '[7]', 'fresh', 'sticky_fresh_q');
SELECT results_eq(
    $$SELECT c.new_events_after, jsonb_array_length(c.new_events), c.new_events -> 0 ->> 'event_type'
      FROM harvest.claim_tasks('w-any', ARRAY['sticky_fresh_q'], 1) AS c$$,
    $$VALUES (0::bigint, 1, 'WorkflowStarted'::text)$$, 'a run nobody decided comes with its whole history');
SELECT is(harvest._events_since_decision(
              (SELECT e FROM harvest.executions AS e WHERE workflow_id = 'sticky'), 'activity', 'w-sticky'),
          NULL, 'activity tasks carry no events');

-- Priority ageing and fairness keys.
SET LOCAL harvest.fake_now = '2030-01-02 00:00:00+00';
-- Activity tasks of one execution on queue p_queue: p_n tasks with these options
-- and input, due p_age_secs ago, with this priority.
CREATE FUNCTION pg_temp.fill(
    p_queue text, p_n integer, p_priority integer, p_age_secs integer, p_options jsonb, p_input jsonb
) RETURNS void LANGUAGE plpgsql AS $fn$
DECLARE
    v_id uuid;
BEGIN
    SELECT s.execution_id INTO v_id
    FROM harvest.start_workflow('fill_wf', '[]', 'fill-' || gen_random_uuid(), 'fill_setup_q') AS s;
    INSERT INTO harvest.tasks (execution_id, kind, queue, priority, due_at, scheduled_at, seq, activity_name,
                               input, options)
    SELECT v_id, 'activity', p_queue, p_priority, harvest.now() - make_interval(secs => p_age_secs),
           harvest.now(), g, 'act', p_input, p_options
    FROM generate_series(1, p_n) AS g;
END;
$fn$;

SELECT pg_temp.fill('order_q', 1, 0, 0, '{"fairness_key": "input.tenant", "priority_aging_secs": 10}',
                    '[{"tenant": "acme"}]');
SELECT results_eq(
    $$SELECT fairness_key, priority_aging_secs FROM harvest.tasks WHERE queue = 'order_q'$$,
    $$VALUES ('acme'::text, 10::double precision)$$,
    'the insert trigger fills fairness_key (resolved from the input) and priority_aging_secs');
SELECT is((SELECT count(*) FROM harvest.fair_queues WHERE queue = 'order_q'), 1::bigint,
          'the first keyed task makes its queue a fair queue (the insert trigger)');
SELECT pg_temp.fill('order_q2', 1, 0, 0, '{"fairness_key": "input.missing"}', '[{"tenant": "acme"}]');
SELECT is((SELECT fairness_key FROM harvest.tasks WHERE queue = 'order_q2'), NULL,
          'a key path missing from the input: no fairness key');
SELECT throws_ok($$SELECT pg_temp.fill('order_q3', 1, 0, 0, '{"priority_aging_secs": 0}', '[]')$$,
                 '23514', NULL, 'priority_aging_secs must be positive');

-- Ageing: an old low-priority task behind a window-filling flood of priority 5.
-- Due 100 s ago with priority_aging_secs 10 it counts as priority 0 + 10.
SELECT pg_temp.fill('age_q', 60, 5, 0, '{}', '[]');
SELECT pg_temp.fill('age_q', 1, 0, 100, '{"priority_aging_secs": 10}', '[]');
SELECT results_eq(
    $$SELECT priority FROM harvest.claim_tasks('w-age', ARRAY['age_q'], 1) AS c
      JOIN harvest.tasks AS t ON t.id = c.task_id$$,
    $$VALUES (0)$$, 'an aged low-priority task outranks a fresh flood of higher priority');
-- Ageing at 100 s per step it counts as 0 + 1 only: the flood goes first.
SELECT pg_temp.fill('age_q2', 60, 5, 0, '{}', '[]');
SELECT pg_temp.fill('age_q2', 1, 0, 100, '{"priority_aging_secs": 100}', '[]');
SELECT results_eq(
    $$SELECT priority FROM harvest.claim_tasks('w-age', ARRAY['age_q2'], 1) AS c
      JOIN harvest.tasks AS t ON t.id = c.task_id$$,
    $$VALUES (5)$$, 'a task not yet aged past the flood waits');
SELECT is((SELECT count(*) FROM harvest.tasks WHERE queue = 'age_q2' AND priority = 0 AND status = 'pending'),
          1::bigint, 'the not-yet-aged task is still pending');

-- Fairness: tenant a floods (older, 200 tasks), tenant b's 2 tasks still go in the first claim.
SELECT pg_temp.fill('fair_q', 200, 0, 50, '{"fairness_key": "input.tenant"}', '[{"tenant": "a"}]');
SELECT pg_temp.fill('fair_q', 2, 0, 0, '{"fairness_key": "input.tenant"}', '[{"tenant": "b"}]');
SELECT results_eq(
    $$SELECT t.fairness_key, count(*) FROM harvest.claim_tasks('w-fair', ARRAY['fair_q'], 4) AS c
      JOIN harvest.tasks AS t ON t.id = c.task_id GROUP BY 1 ORDER BY 1$$,
    $$VALUES ('a'::text, 2::bigint), ('b'::text, 2::bigint)$$,
    'a claim of 4 takes round-robin across fairness keys: 2 of the flood, both of tenant b');
SELECT is(harvest._next_fairness_key('fair_q', NULL), 'a', '_next_fairness_key(): the first key');
SELECT is(harvest._next_fairness_key('fair_q', 'a'), NULL,
          '_next_fairness_key(): claimed tasks are no key (tenant b has nothing pending now)');

-- More keys than one claim visits: the cursor rotates, every key gets its turn.
SELECT pg_temp.fill('many_q', 1, 0, 0, '{"fairness_key": "input"}', to_jsonb(ARRAY[lpad(g::text, 3, '0')]))
FROM generate_series(1, 40) AS g;
SELECT is(harvest._next_fairness_key('many_q', '001'), '002', '_next_fairness_key(): seeks past a key');
SELECT is(harvest._fairness_keys('many_q', 32), (SELECT array_agg(lpad(g::text, 3, '0')) FROM generate_series(1, 32) AS g),
          '_fairness_keys(): the first 32 keys');
SELECT is((SELECT cursor_key FROM harvest.fair_queues WHERE queue = 'many_q'), '032',
          'the cursor moves to the last key visited');
SELECT is(harvest._fairness_keys('many_q', 32),
          (SELECT array_agg(lpad(g::text, 3, '0') ORDER BY g > 32 DESC, g)
           FROM generate_series(1, 40) AS g WHERE g > 32 OR g <= 24),
          '_fairness_keys(): the next call starts after the cursor and wraps around');
SELECT is(harvest._fairness_keys('fair_q', 32), ARRAY['a'], '_fairness_keys(): few keys, all of them');
SELECT is((SELECT cursor_key FROM harvest.fair_queues WHERE queue = 'fair_q'), NULL,
          'few keys: no cursor is written');

-- A claim visits no more keys per keyed queue than its share of the limit (a key
-- visited and not taken would wait a whole rotation): 3 keys for a claim of 3,
-- 2 a queue for a claim of 4 over two keyed queues, and never more than 32.
SELECT pg_temp.fill(q, 1, 0, 0, '{"fairness_key": "input"}', to_jsonb(ARRAY[lpad(g::text, 3, '0')]))
FROM generate_series(1, 40) AS g, unnest(ARRAY['visit_q', 'visit_a', 'visit_b']) AS q;
SELECT cardinality(o.ids) > 0 FROM harvest._order_candidates(ARRAY['visit_q'], harvest.now(), 20, 3) AS o;
SELECT is((SELECT cursor_key FROM harvest.fair_queues WHERE queue = 'visit_q'), '003',
          '_order_candidates(): a claim of 3 visits 3 keys (the cursor moves past them only)');
SELECT cardinality(o.ids) > 0 FROM harvest._order_candidates(ARRAY['visit_a', 'visit_b'], harvest.now(), 20, 4) AS o;
SELECT is((SELECT array_agg(cursor_key ORDER BY queue) FROM harvest.fair_queues WHERE queue IN ('visit_a', 'visit_b')),
          ARRAY['002', '002'], '_order_candidates(): two keyed queues share a claim of 4, two keys each');
SELECT cardinality(o.ids) > 0 FROM harvest._order_candidates(ARRAY['visit_q'], harvest.now(), 400, 100) AS o;
SELECT is((SELECT cursor_key FROM harvest.fair_queues WHERE queue = 'visit_q'), '035',
          '_order_candidates(): a claim of 100 visits 32 keys, the most');

-- _order_candidates on its own: round-robin across keys, then effective priority.
SELECT is((SELECT array_agg(t.fairness_key ORDER BY u.ord) FROM harvest._order_candidates(
                ARRAY['fair_q'], harvest.now(), 20, 3) AS o,
                unnest(o.ids) WITH ORDINALITY AS u (id, ord) JOIN harvest.tasks AS t ON t.id = u.id
           WHERE u.ord <= 3),
          ARRAY['a', 'a', 'a'], '_order_candidates(): once a key is gone the rest follow in order');
SELECT is((SELECT o.gated FROM harvest._order_candidates(ARRAY['fair_q'], harvest.now(), 20, 3)
           AS o), false, '_order_candidates(): no gated candidate');
SELECT ok((SELECT p.proconfig FROM pg_catalog.pg_proc AS p WHERE p.oid = 'harvest._order_candidates'::regproc)
          @> ARRAY['plan_cache_mode=force_generic_plan'],
          '_order_candidates() keeps one generic plan (no planning per claim)');

-- The windows hand the gates the columns they judge (harvest.gated_candidate) of every
-- candidate that carries a gate, and only of those: the gates read no candidate again.
SELECT pg_temp.fill('gate_q', 2, 3, 0, '{"max_concurrent": 5, "concurrency_key": "gk"}', '[]');
SELECT pg_temp.fill('gate_q', 1, 2, 0, '{"rate_limit": {"rps": 2}}', '[]');
SELECT pg_temp.fill('gate_q', 2, 1, 0, '{}', '[]');
SELECT pg_temp.fill('gate_fq', 1, 0, 0, '{"fairness_key": "input", "rate_limit": {"rps": 3}}', '["t1"]');
SELECT pg_temp.fill('gate_fq', 2, 0, 0, '{"fairness_key": "input"}', '["t2"]');
CREATE TEMP VIEW gate_cols AS
SELECT t.queue, ROW(t.id, t.kind, t.execution_id, t.concurrency_key, t.concurrency_limit, t.rate_key, t.priority,
           t.due_at, t.activity_name, CASE WHEN t.rate_key IS NOT NULL THEN t.options END)::harvest.gated_candidate AS g
FROM harvest.tasks AS t
WHERE t.queue IN ('gate_q', 'gate_fq') AND (t.concurrency_key IS NOT NULL OR t.rate_key IS NOT NULL);
SELECT is((SELECT array_agg(g::text ORDER BY (g).id) FROM harvest._claim_head(ARRAY['gate_q'], harvest.now(), 10) AS h,
                  unnest(h.gates) AS g),
          (SELECT array_agg(c.g::text ORDER BY (c.g).id) FROM gate_cols AS c WHERE c.queue = 'gate_q'),
          '_claim_head() hands the gated candidates'' columns (a rate-keyed one''s options too), none of the others''');
SELECT is((SELECT array_agg(g::text ORDER BY (g).id) FROM harvest._order_candidates(
                  ARRAY['gate_q', 'gate_fq'], harvest.now(), 20, 5) AS o, unnest(o.gates) AS g),
          (SELECT array_agg(c.g::text ORDER BY (c.g).id) FROM gate_cols AS c),
          '_order_candidates() hands the gated candidates'' columns, from the head and the fairness window');
SELECT is((SELECT o.gates FROM harvest._order_candidates(ARRAY['fair_q'], harvest.now(), 20, 3) AS o), NULL,
          '_order_candidates(): no gated candidate, no columns');

-- Several queues share the ageing window (20 here): a quarter of it each for four, all of it
-- for one, so the candidates of a claim do not grow with the number of queues polled.
SELECT pg_temp.fill('share_' || q, 30, 0, 100, '{"priority_aging_secs": 10}', '[]')
FROM unnest(ARRAY['a', 'b', 'c', 'd']) AS q;
-- (The head, the first 20 of the four queues by priority, due time and id, is share_a's
-- first 20: the other queues' candidates are their ageing share alone.)
SELECT is((SELECT array_agg(n ORDER BY queue) FROM (
              SELECT t.queue, count(*) AS n FROM harvest._order_candidates(
                  ARRAY['share_a', 'share_b', 'share_c', 'share_d'], harvest.now(), 20, 3) AS o,
                  unnest(o.ids) AS u (id) JOIN harvest.tasks AS t ON t.id = u.id
              GROUP BY t.queue) AS c),
          ARRAY[20, 5, 5, 5]::bigint[], '_order_candidates(): four queues share the ageing window, five each');
SELECT is((SELECT cardinality(o.ids) FROM harvest._order_candidates(
              ARRAY['share_a'], harvest.now(), 20, 3) AS o),
          20, '_order_candidates(): one queue has the whole window (the head''s rows, once each)');
-- The head is the first p_window due tasks of all the polled queues in claim order, however
-- unevenly the queues hold them: head_b's 3 (priority 7), then head_c's older priority-5
-- tasks, then head_a's. (_order_candidates counts each queue's share of the window from the
-- index keys, then reads that many rows of each queue.)
SELECT pg_temp.fill('head_a', 6, 5, 100, '{}', '[]');
SELECT pg_temp.fill('head_b', 3, 7, 10, '{}', '[]');
SELECT pg_temp.fill('head_c', 6, 5, 200, '{}', '[]');
SELECT is((SELECT array_agg(t.queue || ':' || n ORDER BY t.queue) FROM (
              SELECT t.queue, count(*) AS n FROM harvest._order_candidates(
                  ARRAY['head_a', 'head_b', 'head_c'], harvest.now(), 8, 2) AS o,
                  unnest(o.ids) AS u (id) JOIN harvest.tasks AS t ON t.id = u.id
              GROUP BY t.queue) AS t),
          ARRAY['head_b:3', 'head_c:5'], '_order_candidates(): a head of 8 over three queues takes 0, 3 and 5');
SELECT is((SELECT array_agg(t.queue || ':' || n ORDER BY t.queue) FROM (
              SELECT t.queue, count(*) AS n FROM harvest._order_candidates(
                  ARRAY['head_a', 'head_b', 'head_c'], harvest.now(), 12, 2) AS o,
                  unnest(o.ids) AS u (id) JOIN harvest.tasks AS t ON t.id = u.id
              GROUP BY t.queue) AS t),
          ARRAY['head_a:3', 'head_b:3', 'head_c:6'], '_order_candidates(): a head of 12 takes 3, 3 and 6');

-- The claim keeps its first limit * 4 + 16 candidates in claim order across the queues.
SELECT pg_temp.fill('multi_a', 30, 0, 0, '{}', '[]');
SELECT pg_temp.fill('multi_b', 1, 9, 0, '{}', '[]');
SELECT results_eq(
    $$SELECT t.queue, t.priority FROM harvest.claim_tasks('w-multi', ARRAY['multi_a', 'multi_b'], 1) AS c
      JOIN harvest.tasks AS t ON t.id = c.task_id$$,
    $$VALUES ('multi_b'::text, 9)$$, 'claim_tasks() over several queues takes the first in claim order');

-- _claim_ids takes the ids in the order given.
SELECT pg_temp.fill('ids_q', 3, 0, 0, '{}', '[]');
SELECT is((SELECT array_agg(c.id) FROM harvest._claim_ids(
              (SELECT array_agg(id ORDER BY id DESC) FROM harvest.tasks WHERE queue = 'ids_q'), 'wx', 1, 30,
              harvest.now()) AS c),
          ARRAY[(SELECT max(id) FROM harvest.tasks WHERE queue = 'ids_q')],
          '_claim_ids() claims in the order of the ids given');

-- A fair queue: its first keyed task registered it; an unkeyed task there joins the group ''.
SELECT is((SELECT count(*) FROM harvest.fair_queues WHERE queue IN ('order_q', 'fair_q', 'age_q')), 2::bigint,
          'the first keyed task of a queue registers it as fair (order_q, fair_q; not age_q)');
SELECT pg_temp.fill('order_q', 1, 0, 0, '{}', '[]');
SELECT is((SELECT fairness_key FROM harvest.tasks WHERE queue = 'order_q' AND options = '{}'), '',
          'an unkeyed task on a fair queue gets the key '''' so the skip-scan finds it');

-- _lease_secs: a workflow task the worker's lease; an activity start_to_close (300 s
-- by default), or heartbeat_timeout when shorter.
SELECT results_eq(
    $$SELECT harvest._lease_secs('workflow', '{"start_to_close": 5}', 45),
             harvest._lease_secs('activity', '{}', 45),
             harvest._lease_secs('activity', '{"start_to_close": 20}', 45),
             harvest._lease_secs('activity', '{"start_to_close": 20, "heartbeat_timeout": 5}', 45),
             harvest._lease_secs('activity', '{"start_to_close": 20, "heartbeat_timeout": 50}', 45),
             harvest._lease_secs('activity', '{"heartbeat_timeout": 400}', 45)$$,
    $$VALUES (45::double precision, 300::double precision, 20::double precision, 5::double precision,
              20::double precision, 300::double precision)$$,
    '_lease_secs(): workflow lease; activity 300 s, start_to_close, or a shorter heartbeat_timeout');
SELECT is(harvest._lease_secs('activity', '{"start_to_close": 20, "heartbeat_timeout": 15, "schedule_to_close": 10}', 45),
          10::double precision, '_lease_secs(): an activity''s schedule_to_close when shorter (a hand-off never outlives its deadline)');

-- Hand-off (claim.sql, "Hand-off").
SET LOCAL harvest.fake_now = '2030-01-03 00:00:00+00';
SELECT harvest.register_worker('h-active', ARRAY['ho_q', 'ho_fair_q', 'ho_prio_q', 'ho_age_q', 'wq_ho_timer'],
                               'host', 1);
SELECT harvest.register_worker('h-draining', ARRAY['ho_q'], 'host', 2);
SELECT harvest.register_worker('h-stopped', ARRAY['ho_q'], 'host', 3);
UPDATE harvest.workers SET status = 'draining' WHERE id = 'h-draining';
UPDATE harvest.workers SET status = 'stopped' WHERE id = 'h-stopped';
SELECT is(harvest._hand_off_queues('h-active'), ARRAY['ho_q', 'ho_fair_q', 'ho_prio_q', 'ho_age_q', 'wq_ho_timer'],
          '_hand_off_queues(): the queues of an active worker');
SELECT results_eq(
    $$SELECT harvest._hand_off_queues('h-draining'), harvest._hand_off_queues('h-stopped'),
             harvest._hand_off_queues('h-unknown'), harvest._hand_off_queues(NULL)$$,
    $$VALUES (NULL::text[], NULL::text[], NULL::text[], NULL::text[])$$,
    '_hand_off_queues(): NULL for a draining, stopped or unknown worker');

-- _may_hand_off: the queue is polled, not fair, holds no pending task of a higher
-- priority (timers and running tasks do not count) and no pending ageing task.
SELECT is((SELECT h FROM harvest._may_hand_off('ho_q', 0, harvest._hand_off_queues('h-active')) AS h), true,
          '_may_hand_off(): an empty polled queue');
SELECT is((SELECT h FROM harvest._may_hand_off('ho_elsewhere', 0, harvest._hand_off_queues('h-active')) AS h), false,
          '_may_hand_off(): a queue the worker does not poll');
SELECT is((SELECT h FROM harvest._may_hand_off('ho_q', 0, NULL) AS h) IS NOT TRUE, true,
          '_may_hand_off() with no worker queues: not allowed');
INSERT INTO harvest.fair_queues (queue) VALUES ('ho_fair_q');
SELECT is((SELECT h FROM harvest._may_hand_off('ho_fair_q', 0, harvest._hand_off_queues('h-active')) AS h), false,
          '_may_hand_off(): a fair queue');
SELECT pg_temp.fill('ho_prio_q', 1, 5, 0, '{}', '[]');
SELECT results_eq(
    $$SELECT (SELECT h FROM harvest._may_hand_off('ho_prio_q', 4, q) AS h), (SELECT h FROM harvest._may_hand_off('ho_prio_q', 5, q) AS h),
             (SELECT h FROM harvest._may_hand_off('ho_prio_q', 6, q) AS h)
      FROM harvest._hand_off_queues('h-active') AS q$$,
    $$VALUES (false, true, true)$$,
    '_may_hand_off(): a pending task of a higher priority blocks; of the same or a lower one, not');
SELECT is((SELECT count(*) FROM harvest.claim_tasks('w-ho', ARRAY['ho_prio_q'])), 1::bigint,
          'setup: the priority-5 task is claimed');
SELECT is((SELECT h FROM harvest._may_hand_off('ho_prio_q', 0, harvest._hand_off_queues('h-active')) AS h), true,
          '_may_hand_off(): a running task of a higher priority does not block');
INSERT INTO runs SELECT 'HO_T', pg_temp.setup_run('ho_timer', '[{"type": "start_timer", "seq": 1, "duration": 60}]');
UPDATE harvest.tasks SET priority = 9 WHERE kind = 'timer' AND queue = 'wq_ho_timer';
SELECT is((SELECT h FROM harvest._may_hand_off('wq_ho_timer', 0, harvest._hand_off_queues('h-active')) AS h), true,
          '_may_hand_off(): a timer does not block, whatever its priority');
SELECT pg_temp.fill('ho_age_q', 1, 0, 0, '{"priority_aging_secs": 10}', '[]');
SELECT is((SELECT h FROM harvest._may_hand_off('ho_age_q', 9, harvest._hand_off_queues('h-active')) AS h), false,
          '_may_hand_off(): a pending ageing task blocks even a higher priority');
-- The priority probe reads tasks_claimable bounded by the priority (only entries above it):
-- the bound holds for negative priorities, and stops at the queue (a higher priority pending
-- elsewhere, in a queue before or after it in the index, does not block).
SELECT pg_temp.fill('ho_bound_q', 2, -3, 0, '{}', '[]');
SELECT pg_temp.fill('ho_bound_q', 1, 0, 0, '{}', '[]');
SELECT pg_temp.fill('ho_bound_a', 1, 7, 0, '{}', '[]');
SELECT pg_temp.fill('ho_bound_z', 1, 7, 0, '{}', '[]');
SELECT results_eq(
    $$SELECT (SELECT h FROM harvest._may_hand_off('ho_bound_q', -4, q) AS h), (SELECT h FROM harvest._may_hand_off('ho_bound_q', -3, q) AS h),
             (SELECT h FROM harvest._may_hand_off('ho_bound_q', -1, q) AS h), (SELECT h FROM harvest._may_hand_off('ho_bound_q', 0, q) AS h),
             (SELECT h FROM harvest._may_hand_off('ho_bound_q', 6, q) AS h)
      FROM (VALUES (ARRAY['ho_bound_q', 'ho_bound_a', 'ho_bound_z'])) AS v (q)$$,
    $$VALUES (false, false, false, true, true)$$,
    '_may_hand_off(): negative priorities are bounded as others; other queues'' tasks do not block');
UPDATE harvest.tasks SET status = 'paused' WHERE queue = 'ho_bound_q' AND priority = 0;
SELECT is((SELECT h FROM harvest._may_hand_off('ho_bound_q', -1, ARRAY['ho_bound_q']) AS h), true,
          '_may_hand_off(): a paused task of a higher priority does not block');
DELETE FROM harvest.tasks WHERE queue = 'ho_bound_q' AND priority = -3;
INSERT INTO harvest.tasks (execution_id, kind, queue, priority, due_at, scheduled_at, seq, activity_name)
SELECT t.execution_id, 'activity', 'ho_bound_q', -2, harvest.now(), harvest.now(), 100, 'act'
FROM harvest.tasks AS t WHERE t.queue = 'ho_bound_q' LIMIT 1;
SELECT results_eq(
    $$SELECT (SELECT h FROM harvest._may_hand_off('ho_bound_q', -3, ARRAY['ho_bound_q']) AS h),
             (SELECT h FROM harvest._may_hand_off('ho_bound_q', -2, ARRAY['ho_bound_q']) AS h)$$,
    $$VALUES (false, true)$$,
    '_may_hand_off(): a task inserted since blocks a lower priority; the deleted ones do not count');
-- One row, read as a scalar subquery that the planner inlines it into: no call of its own
-- per hand-off (and not STRICT, not PL/pgSQL, which would keep it from being inlined).
SELECT is((SELECT count(*) FROM harvest._may_hand_off('ho_q', 0, NULL)), 1::bigint,
          '_may_hand_off(): one row, false with no worker queues');
SELECT unalike(pg_temp.plan_of('SELECT (SELECT h FROM harvest._may_hand_off(t.queue, t.priority, ARRAY[''q'']) AS h)
                                FROM harvest.tasks AS t'),
               '%_may_hand_off(%', '_may_hand_off() is inlined into its caller''s query');
SELECT unalike(pg_temp.plan_of('SELECT (SELECT h FROM harvest._may_hand_off(''q'', 0, ARRAY[''q'']) AS h)'),
               '%Function Scan%', '... a scalar subquery over constants too: no function scan');

-- _task_for_worker: the JSON of a task is the worker's wire form of the row claim_tasks
-- returns for it (_worker_task): the columns the worker reads, per kind.
CREATE FUNCTION pg_temp.worker_form(c jsonb) RETURNS jsonb LANGUAGE sql AS $$
    SELECT CASE WHEN (c ->> 'kind') = 'workflow'
        THEN c - '{seq,activity_name,input,options,attempt,lease_expires_at,heartbeat_details}'::text[]
        ELSE (c - '{lease_expires_at,new_events,new_events_after,owner_epoch}'::text[])
             || jsonb_build_object('options', (c -> 'options') - 'priority')
        END;
$$;
SELECT harvest.start_workflow('tfw_wf', '[5]', 'tfw', 'tfw_q');
CREATE TEMP TABLE tfw_claim ON COMMIT DROP AS SELECT * FROM harvest.claim_tasks('w-tfw', ARRAY['tfw_q']);
SELECT is((SELECT harvest._task_for_worker(t, e, 'w-tfw') FROM harvest.tasks AS t
           JOIN harvest.executions AS e ON e.id = t.execution_id WHERE t.id = (SELECT task_id FROM tfw_claim)),
          (SELECT pg_temp.worker_form(to_jsonb(c)) FROM tfw_claim AS c),
          '_task_for_worker() of a workflow task: claim_tasks'' row as JSON (with new_events), its worker form');
SELECT is((SELECT array_agg(k ORDER BY k) FROM tfw_claim AS c, jsonb_object_keys(pg_temp.worker_form(to_jsonb(c))) AS k),
          '{execution_id,fencing_token,kind,new_events,new_events_after,owner_epoch,queue,task_id,workflow_id,workflow_name}',
          '... a workflow task''s keys: its run, its token, its new events and owner epoch');
SELECT is((SELECT jsonb_array_length(c.new_events) FROM tfw_claim AS c), 1, 'setup: the claim carried the history');
INSERT INTO runs SELECT 'TFW_A', pg_temp.setup_run('tfw_act', $$[{"type": "schedule_activity", "seq": 1, "name": "a",
    "input": [1], "queue": "tfw_aq", "options": {"start_to_close": 7, "heartbeat_timeout": 3, "priority": 1}}]$$);
CREATE TEMP TABLE tfw_act ON COMMIT DROP AS SELECT * FROM harvest.claim_tasks('w-tfw', ARRAY['tfw_aq']);
SELECT is((SELECT harvest._task_for_worker(t, e, 'w-tfw') FROM harvest.tasks AS t
           JOIN harvest.executions AS e ON e.id = t.execution_id WHERE t.id = (SELECT task_id FROM tfw_act)),
          (SELECT pg_temp.worker_form(to_jsonb(c)) FROM tfw_act AS c),
          '_task_for_worker() of an activity task: claim_tasks'' row as JSON, its worker form');
SELECT is((SELECT array_agg(k ORDER BY k) FROM tfw_act AS c, jsonb_object_keys(pg_temp.worker_form(to_jsonb(c))) AS k),
          '{activity_name,attempt,execution_id,fencing_token,heartbeat_details,input,kind,options,queue,seq,task_id,workflow_id,workflow_name}',
          '... an activity task''s keys: no lease expiry, no new events');
SELECT is((SELECT harvest._task_for_worker(t, e, 'w-tfw') -> 'options' FROM harvest.tasks AS t
           JOIN harvest.executions AS e ON e.id = t.execution_id WHERE t.id = (SELECT task_id FROM tfw_act)),
          '{"start_to_close": 7, "heartbeat_timeout": 3}'::jsonb,
          '... its options: those the worker reads (start_to_close, heartbeat_timeout), not the engine''s');
-- _worker_options: an activity's options less the keys only the engine reads; the keys the
-- worker reads, and any other, stay.
SELECT is(harvest._worker_options('{"start_to_close": 300, "schedule_to_close": null, "heartbeat_timeout": null,
              "retry": {"backoff": 2.0, "max_attempts": 3}, "priority": 0, "dead_letter": true}'),
          '{"start_to_close": 300}'::jsonb, '_worker_options() of the usual options: start_to_close alone');
SELECT is(harvest._worker_options('{"start_to_close": 5, "traceparent": "00-ab-cd-01", "max_concurrent": 2,
              "concurrency_key": "k", "rate_limit": {"limit": 5, "period": 1}, "priority_aging_secs": 9,
              "fairness_key": "f", "dag_node": "n", "someday": 1}'),
          '{"start_to_close": 5, "traceparent": "00-ab-cd-01", "concurrency_key": "k",
            "rate_limit": {"limit": 5, "period": 1}, "someday": 1}'::jsonb,
          '_worker_options(): the deadline, the trace, the gates'' keys the worker reads, and unknown keys stay');
SELECT is(harvest._worker_options('{"start_to_close": 60, "heartbeat_timeout": 0.5, "schedule_to_close": 90}'),
          '{"start_to_close": 60, "heartbeat_timeout": 0.5}'::jsonb,
          '_worker_options(): a heartbeat_timeout set stays (ctx.heartbeat''s sends are timed by it)');
SELECT is(harvest._worker_options('{}'), '{}'::jsonb, '_worker_options() of none: none');
-- _worker_task: the wire form from the columns (what complete_activities_with_claim sends a
-- claimed task as), the same as _task_for_worker's from the rows.
SELECT is((SELECT harvest._worker_task(c.task_id, c.kind, c.execution_id, c.workflow_name, c.workflow_id, c.queue,
              c.seq, c.activity_name, c.input, c.options, c.attempt, c.fencing_token, c.heartbeat_details,
              c.new_events, c.new_events_after, c.owner_epoch) FROM tfw_act AS c),
          (SELECT pg_temp.worker_form(to_jsonb(c)) FROM tfw_act AS c),
          '_worker_task() of a claimed row''s columns: its worker form');
-- _worker_activity / _activity_for_worker: the same activity as a row of
-- harvest.worker_activity_task (a decision's handed activities are carried as these), whose
-- JSON is _worker_task's; inlined into the query that builds it.
SELECT is((SELECT to_jsonb(harvest._worker_activity(c.task_id, c.kind, c.execution_id, c.workflow_name, c.workflow_id,
              c.queue, c.seq, c.activity_name, c.input, c.options, c.attempt, c.fencing_token, c.heartbeat_details))
           FROM tfw_act AS c),
          (SELECT pg_temp.worker_form(to_jsonb(c)) FROM tfw_act AS c),
          '_worker_activity() of a claimed activity''s columns: a row whose JSON is its worker form');
SELECT is((SELECT (harvest._worker_activity(c.task_id, c.kind, c.execution_id, c.workflow_name, c.workflow_id,
              c.queue, c.seq, c.activity_name, c.input, c.options, c.attempt, c.fencing_token, c.heartbeat_details)).options
           FROM tfw_act AS c),
          '{"start_to_close": 7, "heartbeat_timeout": 3}'::jsonb, '... its options field: those the worker reads (_worker_options)');
SELECT is((SELECT to_jsonb(harvest._activity_for_worker(t, e)) FROM harvest.tasks AS t
           JOIN harvest.executions AS e ON e.id = t.execution_id WHERE t.id = (SELECT task_id FROM tfw_act)),
          (SELECT harvest._task_for_worker(t, e, 'w-tfw') FROM harvest.tasks AS t
           JOIN harvest.executions AS e ON e.id = t.execution_id WHERE t.id = (SELECT task_id FROM tfw_act)),
          '_activity_for_worker() of an activity''s row and its run''s: _task_for_worker''s JSON, as a row');
SELECT unalike(pg_temp.plan_of('SELECT harvest._activity_for_worker(t, e) FROM harvest.tasks AS t, harvest.executions AS e'),
               '%_activity_for_worker(%', '_activity_for_worker() (and _worker_activity) inline into their caller''s query');
-- _handed_task: the same JSON read by the task's id; in owner mode with the worker's
-- owner_epoch for the run's partition (NULL here: w-tfw owns none).
SELECT is(harvest._handed_task((SELECT task_id FROM tfw_act), 'w-tfw', false),
          (SELECT pg_temp.worker_form(to_jsonb(c)) FROM tfw_act AS c),
          '_handed_task(): a task by its id, as the worker receives it');
SELECT is(harvest._handed_task((SELECT task_id FROM tfw_act), 'w-tfw', true),
          (SELECT pg_temp.worker_form(to_jsonb(c)) || jsonb_build_object('owner_epoch', harvest._owner_epoch(c.workflow_id, 'w-tfw'))
           FROM tfw_act AS c),
          '_handed_task() in owner mode: with the worker''s owner_epoch for the run''s partition');

-- _hand_workflow_task: a running workflow task leased to the worker, unless the
-- run already has a workflow task or is not running.
SET LOCAL harvest.fake_now = '2030-01-03 00:01:00+00';
INSERT INTO runs SELECT 'HWT', pg_temp.setup_run('hwt', '[{"type": "start_timer", "seq": 1, "duration": 3600}]');
CREATE TEMP TABLE hwt ON COMMIT DROP AS
SELECT harvest._hand_workflow_task((SELECT execution_id FROM runs WHERE name = 'HWT'), 'w-hand', 20) AS id;
SELECT results_eq(
    $$SELECT t.kind, t.queue, t.status, t.priority, t.attempt, t.lease_owner, t.started_at, t.lease_expires_at,
             t.fencing_token > (SELECT max(fencing_token) FROM harvest.tasks AS o WHERE o.id <> t.id)
      FROM harvest.tasks AS t WHERE t.id = (SELECT id FROM hwt)
        AND t.execution_id = (SELECT execution_id FROM runs WHERE name = 'HWT')$$,
    $$VALUES ('workflow'::text, 'wq_hwt'::text, 'running'::text, 0, 1, 'w-hand'::text,
              '2030-01-03 00:01:00+00'::timestamptz, '2030-01-03 00:01:20+00'::timestamptz, true)$$,
    '_hand_workflow_task(): a running workflow task on the run''s queue, attempt 1, a new fencing token, leased');
SELECT is(harvest._hand_workflow_task((SELECT execution_id FROM runs WHERE name = 'HWT'), 'w-hand', 20), NULL,
          '_hand_workflow_task() when the run already has a workflow task: NULL');
SELECT is(harvest._hand_workflow_task((SELECT execution_id FROM runs WHERE name = 'T2'), 'w-hand', 20), NULL,
          '_hand_workflow_task() when the run has a pending workflow task: NULL');
INSERT INTO runs SELECT 'HWT_DONE', pg_temp.setup_run('hwt_done', '[{"type": "complete_workflow", "result": null}]');
SELECT is(harvest._hand_workflow_task((SELECT execution_id FROM runs WHERE name = 'HWT_DONE'), 'w-hand', 20), NULL,
          '_hand_workflow_task() of a run that is not running: NULL');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = (SELECT execution_id FROM runs WHERE name = 'HWT_DONE')$$,
                'and it inserts nothing');
SELECT lives_ok(format($$SELECT handed FROM harvest.complete_workflow_task(%s, %s, 3, '[]', 'w-hand')$$,
                       (SELECT id FROM hwt), (SELECT fencing_token FROM harvest.tasks WHERE id = (SELECT id FROM hwt))),
                'the handed workflow task completes under its fencing token');

-- ---------------------------------------------------------------- Redis dispatch
-- claim_named_tasks: a named row is claimed only where claim_tasks could take it.
SET LOCAL harvest.fake_now = '2030-01-04 00:00:00+00';
SELECT throws_ok($$SELECT * FROM harvest.claim_named_tasks('', ARRAY['q'], ARRAY[1::bigint])$$, 'HR001',
                 'worker id is empty', 'claim_named_tasks(): an empty worker id: HR001');
SELECT throws_ok($$SELECT * FROM harvest.claim_named_tasks('w', ARRAY[]::text[], ARRAY[1::bigint])$$, 'HR001',
                 'no queues given', 'claim_named_tasks(): no queues: HR001');
SELECT throws_ok($$SELECT * FROM harvest.claim_named_tasks('w', ARRAY['q'], ARRAY[]::bigint[])$$, 'HR001',
                 'claim_named_tasks takes 1..1000 task ids, got 0', 'claim_named_tasks(): no ids: HR001');
SELECT throws_ok($$SELECT * FROM harvest.claim_named_tasks('w', ARRAY['q'], ARRAY[1::bigint], 0)$$, 'HR001',
                 'workflow task lease 0 must be positive seconds', 'claim_named_tasks(): a lease of 0: HR001');
SELECT pg_temp.start_run('rd1', 'wf_rd', 'rdq');
SELECT pg_temp.start_run('rd2', 'wf_rd', 'rdq');
SELECT results_eq($$SELECT task_id, queue, due_at FROM harvest.list_claimable_tasks(ARRAY[pg_temp.run('rd1'), pg_temp.run('rd2')])$$,
                  $$SELECT id, queue, due_at FROM harvest.tasks WHERE execution_id IN (pg_temp.run('rd1'), pg_temp.run('rd2'))
                    ORDER BY id$$,
                  'list_claimable_tasks(): each run''s pending task with its queue and due time');
CREATE TEMP TABLE rd ON COMMIT DROP AS
SELECT c.* FROM harvest.claim_named_tasks('w-redis', ARRAY['rdq'],
    ARRAY[(SELECT id FROM harvest.tasks WHERE execution_id = pg_temp.run('rd2'))], 40) AS c;
SELECT results_eq($$SELECT execution_id, kind, workflow_id, queue, attempt, lease_expires_at FROM rd$$,
                  $$VALUES (pg_temp.run('rd2'), 'workflow'::text, 'rd2'::text, 'rdq'::text, 1,
                            '2030-01-04 00:00:40+00'::timestamptz)$$,
                  'claim_named_tasks(): the named row, not the head of the queue, leased as a claim would');
SELECT results_eq($$SELECT status, lease_owner FROM harvest.tasks WHERE id = (SELECT task_id FROM rd)$$,
                  $$VALUES ('running'::text, 'w-redis'::text)$$, 'the named row is running under the worker');
SELECT is_empty($$SELECT * FROM harvest.claim_named_tasks('w-other', ARRAY['rdq'], ARRAY[(SELECT task_id FROM rd)])$$,
                'claim_named_tasks(): a row another worker holds is skipped (its lease stands)');
SELECT is_empty($$SELECT * FROM harvest.list_claimable_tasks(ARRAY[pg_temp.run('rd2')])$$,
                'list_claimable_tasks(): a claimed task is not claimable');
SELECT is_empty($$SELECT * FROM harvest.list_claimable_tasks(ARRAY[pg_temp.run('rd1')], 'activity')$$,
                'list_claimable_tasks(): p_kind filters (rd1 has a workflow task, no activity)');
SELECT is_empty($$SELECT * FROM harvest.claim_named_tasks('w-redis', ARRAY['elsewhere'],
                  ARRAY[(SELECT id FROM harvest.tasks WHERE execution_id = pg_temp.run('rd1'))])$$,
                'claim_named_tasks(): a row of a queue the worker does not poll is skipped');
SELECT is_empty($$SELECT * FROM harvest.claim_named_tasks('w-redis', ARRAY['rdq'], ARRAY[-1::bigint])$$,
                'claim_named_tasks(): an id that names no row is skipped');
-- A run of higher priority waits in the queue: a named row behind it would jump it.
SELECT pg_temp.remember('rd_hi', s.execution_id)
FROM harvest.start_workflow('wf_rd', '[]', 'rd_hi', 'rdq', p_priority => 5) AS s;
SELECT is_empty($$SELECT * FROM harvest.claim_named_tasks('w-redis', ARRAY['rdq'],
                  ARRAY[(SELECT id FROM harvest.tasks WHERE execution_id = pg_temp.run('rd1'))])$$,
                'claim_named_tasks(): a row behind a pending task of higher priority is skipped (the order stands)');
SELECT is((SELECT execution_id FROM harvest.claim_named_tasks('w-redis', ARRAY['rdq'],
              ARRAY[(SELECT id FROM harvest.tasks WHERE execution_id = pg_temp.run('rd_hi'))])),
          pg_temp.run('rd_hi'), 'claim_named_tasks(): the head of the queue is claimed');
-- A paused run's task is not claimable.
SELECT is(harvest.pause_workflow(pg_temp.run('rd1'), 'hold', 'oncall'), true, 'setup: rd1 paused');
SELECT is_empty($$SELECT * FROM harvest.claim_named_tasks('w-redis', ARRAY['rdq'],
                  ARRAY[(SELECT id FROM harvest.tasks WHERE execution_id = pg_temp.run('rd1'))])$$,
                'claim_named_tasks(): a paused run''s task is skipped');
-- A task not due yet (a retry's backoff) waits.
SELECT pg_temp.start_run('rd_later', 'wf_rd', 'rdq_later');
UPDATE harvest.tasks SET due_at = '2030-01-04 00:05:00+00' WHERE execution_id = pg_temp.run('rd_later');
SELECT is_empty($$SELECT * FROM harvest.claim_named_tasks('w-redis', ARRAY['rdq_later'],
                  ARRAY[(SELECT id FROM harvest.tasks WHERE execution_id = pg_temp.run('rd_later'))])$$,
                'claim_named_tasks(): a task not due yet is skipped');
-- The admission gates: three activities under a cap of 2 are claimed two at most.
SELECT harvest.start_workflow('wf_rd_act', '[]', 'rd_acts', 'rdq0');
SELECT harvest.complete_workflow_task(c.task_id, c.fencing_token, 1, (SELECT jsonb_agg(jsonb_build_object(
    'type', 'schedule_activity', 'seq', i, 'name', 'capped', 'input', '[]'::jsonb, 'queue', 'rdq_capped',
    'options', '{"max_concurrent": 2, "concurrency_key": "rd_k"}'::jsonb)) FROM generate_series(1, 3) AS i))
FROM harvest.claim_tasks('w', ARRAY['rdq0']) AS c;
SELECT is((SELECT count(*) FROM harvest.claim_named_tasks('w-redis', ARRAY['rdq_capped'],
              (SELECT array_agg(id) FROM harvest.tasks WHERE queue = 'rdq_capped'))), 2::bigint,
          'claim_named_tasks(): the concurrency cap admits two of three named rows');
SELECT is(harvest._in_flight('activity', 'rd_k'), 2::bigint, 'and their slots are taken (_after_gated_claim)');
SELECT is_empty($$SELECT * FROM harvest.claim_named_tasks('w-redis', ARRAY['rdq_capped'],
                  (SELECT array_agg(id) FROM harvest.tasks WHERE queue = 'rdq_capped' AND status = 'pending'))$$,
                'claim_named_tasks(): the third waits while the cap is full');

-- ------------------------------------------------- complete_activities_with_claim
-- The results, then claim_tasks for the slots they free: up to p_claim_limit, never
-- more than the results completed without a task handed back.
CREATE TEMP TABLE cwb (batch text, task_id bigint, outcome text, message text, handed jsonb, decided jsonb)
ON COMMIT DROP;
CREATE FUNCTION pg_temp.cw_run(p_key text, p_queue text, p_n integer, p_options jsonb DEFAULT '{}')
RETURNS void LANGUAGE sql AS $fn$
    SELECT pg_temp.start_decided(p_key, 'cw_wf', 'cwq_' || p_key,
        (SELECT jsonb_agg(jsonb_build_object('type', 'schedule_activity', 'seq', g, 'name', 'cw_act',
                                             'queue', p_queue, 'options', p_options) ORDER BY g)
         FROM generate_series(1, p_n) AS g),
        'cw', 'cw');
$fn$;
-- Claim p_n activities of p_queue as cw, remembered as <p_key>.1, <p_key>.2, ...
CREATE FUNCTION pg_temp.cw_claim(p_key text, p_queue text, p_n integer) RETURNS void LANGUAGE sql AS $fn$
    SELECT pg_temp.remember(p_key || '.' || row_number() OVER (ORDER BY c.task_id), c.execution_id, c.task_id,
                            c.fencing_token)
    FROM harvest.claim_tasks('cw', ARRAY[p_queue], p_n) AS c;
$fn$;
-- Complete the activities p_keys (a stale token where p_stale) as cw in one batch p_batch.
CREATE FUNCTION pg_temp.cw_batch(p_batch text, p_keys text[], p_queues text[], p_limit integer,
                                 p_hand_off boolean DEFAULT false, p_stale boolean DEFAULT false)
RETURNS void LANGUAGE sql AS $fn$
    INSERT INTO cwb
    SELECT p_batch, c.* FROM harvest.complete_activities_with_claim('cw', p_queues, p_limit,
        (SELECT array_agg(pg_temp.task(k) ORDER BY n) FROM unnest(p_keys) WITH ORDINALITY AS u (k, n)),
        (SELECT array_agg(pg_temp.token(k) - CASE WHEN p_stale THEN 1 ELSE 0 END ORDER BY n)
         FROM unnest(p_keys) WITH ORDINALITY AS u (k, n)),
        (SELECT array_agg(to_jsonb(k) ORDER BY n) FROM unnest(p_keys) WITH ORDINALITY AS u (k, n)),
        p_hand_off, 45) AS c;
$fn$;
SELECT harvest.register_worker('cw', ARRAY['cwq_cw1', 'cwq_cw2', 'cwq_a', 'cwq_b'], 'host', 1);

SELECT throws_ok($$SELECT * FROM harvest.complete_activities_with_claim('cw', ARRAY['cwq_a'], -1,
                   ARRAY[]::bigint[], ARRAY[]::bigint[], ARRAY[]::jsonb[])$$,
                 'HR001', 'claim limit -1 is out of range 0..1000', 'complete_activities_with_claim(): limit -1: HR001');
SELECT throws_ok($$SELECT * FROM harvest.complete_activities_with_claim('cw', ARRAY['cwq_a'], 1001,
                   ARRAY[]::bigint[], ARRAY[]::bigint[], ARRAY[]::jsonb[])$$,
                 'HR001', 'claim limit 1001 is out of range 0..1000', 'complete_activities_with_claim(): limit 1001: HR001');
SELECT throws_ok($$SELECT * FROM harvest.complete_activities_with_claim('cw', ARRAY['cwq_a'], 1,
                   ARRAY[1]::bigint[], ARRAY[]::bigint[], ARRAY[]::jsonb[])$$,
                 'HR001', NULL, 'complete_activities_with_claim(): complete_activities'' own checks apply');

-- Two results free two slots: two of the four waiting activities are claimed, under a
-- limit of 10, after the two completed rows.
SELECT pg_temp.cw_run('cw1', 'cwq_a', 6);
SELECT pg_temp.cw_claim('cw1', 'cwq_a', 2);
SELECT pg_temp.cw_batch('two', ARRAY['cw1.1', 'cw1.2'], ARRAY['cwq_a'], 10);
SELECT results_eq($$SELECT task_id, outcome, handed IS NULL FROM cwb WHERE batch = 'two' AND outcome <> 'claimed'$$,
                  $$VALUES (pg_temp.task('cw1.1'), 'completed'::text, true), (pg_temp.task('cw1.2'), 'completed', true)$$,
                  'complete_activities_with_claim(): one row per result first, as complete_activities');
SELECT results_eq(
    $$SELECT count(*), count(DISTINCT b.task_id),
             bool_and(t.status = 'running' AND t.lease_owner = 'cw' AND t.kind = 'activity'
                      AND (b.handed ->> 'fencing_token')::bigint = t.fencing_token
                      AND (b.handed ->> 'task_id')::bigint = b.task_id AND t.attempt = 1)
      FROM cwb AS b JOIN harvest.tasks AS t ON t.id = b.task_id WHERE b.batch = 'two' AND b.outcome = 'claimed'$$,
    $$VALUES (2::bigint, 2::bigint, true)$$,
    'two results free two slots: two tasks claimed (limit 10), leased to the worker under their new tokens');
SELECT is((SELECT count(*) FROM harvest.tasks WHERE execution_id = pg_temp.run('cw1') AND kind = 'activity'
           AND status = 'pending'), 2::bigint, 'the other two waiting activities stay pending');
SELECT is((SELECT array_agg(k ORDER BY k) FROM cwb AS b, jsonb_object_keys(b.handed) AS k
           WHERE b.batch = 'two' AND b.outcome = 'claimed' AND b.task_id = (SELECT min(task_id) FROM cwb WHERE batch = 'two' AND outcome = 'claimed')),
          (SELECT array_agg(a.name::text ORDER BY a.name::text)
           FROM pg_proc AS p, unnest(p.proargnames, p.proargmodes) AS a (name, mode)
           WHERE p.oid = 'harvest.claim_tasks'::regproc AND a.mode = 't'
             AND a.name NOT IN ('lease_expires_at', 'new_events', 'new_events_after', 'owner_epoch')),
          'a claimed activity task''s keys are claim_tasks'' columns the worker reads (_worker_task)');

-- The limit bounds it; a stale result frees nothing (its handler holds no claim).
SELECT pg_temp.cw_claim('cw1x', 'cwq_a', 2);
SELECT pg_temp.cw_batch('lim', ARRAY['cw1x.1'], ARRAY['cwq_a'], 0);
SELECT is((SELECT count(*) FROM cwb WHERE batch = 'lim' AND outcome = 'claimed'), 0::bigint,
          'limit 0: nothing claimed');
SELECT pg_temp.cw_batch('stale', ARRAY['cw1x.2'], ARRAY['cwq_a'], 10, p_stale => true);
SELECT results_eq($$SELECT outcome FROM cwb WHERE batch = 'stale'$$, $$VALUES ('stale'::text)$$,
                  'a stale result: refused, and nothing claimed for it');

-- A result whose wake-up is handed back to the worker frees no slot: of two results of
-- one run, one row carries the handed workflow task, so one task is claimed.
SELECT pg_temp.cw_run('cw2', 'cwq_b', 3);
SELECT pg_temp.cw_claim('cw2', 'cwq_b', 2);
SELECT pg_temp.cw_batch('handed', ARRAY['cw2.1', 'cw2.2'], ARRAY['cwq_b'], 10, p_hand_off => true);
SELECT results_eq($$SELECT count(*) FILTER (WHERE outcome = 'completed'), count(handed) FILTER (WHERE outcome = 'completed'),
                           count(*) FILTER (WHERE outcome = 'claimed')
                    FROM cwb WHERE batch = 'handed'$$,
                  $$VALUES (2::bigint, 1::bigint, 1::bigint)$$,
                  'two results, one handing the woken workflow task back: one task claimed');

-- The admission gates apply as in claim_tasks: under a cap of 1, the completed task's
-- slot admits one of the two waiting.
SELECT pg_temp.cw_run('cw3', 'cwq_cap', 3, '{"max_concurrent": 1, "concurrency_key": "cw_k"}');
SELECT pg_temp.cw_claim('cw3', 'cwq_cap', 3);
SELECT is((SELECT count(*) FROM harvest.tasks WHERE queue = 'cwq_cap' AND status = 'running'), 1::bigint,
          'setup: the cap of 1 admits one');
-- (the refused two stepped back a little: look again past that)
SELECT set_config('harvest.fake_now', (harvest.now() + interval '10 seconds')::text, true);
SELECT pg_temp.cw_batch('capped', ARRAY['cw3.1'], ARRAY['cwq_cap'], 10);
SELECT results_eq($$SELECT count(*) FILTER (WHERE outcome = 'completed'), count(*) FILTER (WHERE outcome = 'claimed')
                    FROM cwb WHERE batch = 'capped'$$,
                  $$VALUES (1::bigint, 1::bigint)$$,
                  'a concurrency cap of 1: the completed result''s room admits one more, not two');
SELECT is(harvest._in_flight('activity', 'cw_k'), 1::bigint, 'and its slot is taken (_after_gated_claim)');

-- What a gate judges of a candidate (_is_gated, _gate_of): an ungated row carries a NULL
-- gate; a capped one its key and limit but not its options; a rate-limited one its options.
SELECT ok(NOT harvest._is_gated(jsonb_populate_record(NULL::harvest.tasks, '{"id": 1}'))
          AND harvest._gate_of(jsonb_populate_record(NULL::harvest.tasks, '{"id": 1}')) IS NULL,
          'an ungated task: not gated, no gate columns');
SELECT results_eq(
    $$SELECT (g).id, (g).concurrency_key, (g).concurrency_limit, (g).rate_key, (g).options
      FROM (SELECT harvest._gate_of(jsonb_populate_record(NULL::harvest.tasks,
                '{"id": 7, "kind": "activity", "concurrency_key": "k", "concurrency_limit": 2,
                  "options": {"start_to_close": 5}}')) AS g) AS x$$,
    $$VALUES (7::bigint, 'k'::text, 2, NULL::text, NULL::jsonb)$$,
    'a capped task: gated, its key and limit carried, its options not');
SELECT results_eq(
    $$SELECT harvest._is_gated(r), (harvest._gate_of(r)).rate_key, (harvest._gate_of(r)).options
      FROM jsonb_populate_record(NULL::harvest.tasks,
          '{"id": 8, "rate_key": "r", "options": {"rate": 1}}') AS r$$,
    $$VALUES (true, 'r'::text, '{"rate": 1}'::jsonb)$$,
    'a rate-limited task: gated, with the options its rate limit reads');

SELECT * FROM finish();
ROLLBACK;
