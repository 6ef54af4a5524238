-- functions/signals.sql: harvest.signal_workflow (SignalReceived, the wake-up,
-- arrival order, argument and state checks), harvest.signal_with_start (no prior,
-- a running prior, a terminal prior) and harvest.cancel_workflow (the flag, one
-- WorkflowCancelRequested, the wake-up, heartbeats that learn of it; its body
-- harvest._request_cancel, shared with cancel_workflows).
BEGIN;
SELECT plan(109);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- Runs of sig_wf with workflow_id <key> on a queue of their own (sq_<key>), their
-- first workflow task settled (pg_temp.start_decided), so they are idle: no
-- workflow task left.

-- ---------------------------------------------------------------- signal_workflow
SELECT isnt(pg_temp.start_decided('sig', 'sig_wf', 'sq_sig'), NULL, 'setup: an idle run (started, first task done)');
SELECT is(pg_temp.workflow_tasks(pg_temp.run('sig')), 0::bigint, 'setup: the idle run has no workflow task');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:05+00';
SELECT is(harvest.signal_workflow(pg_temp.run('sig'), 'approve', '{"by": "ann"}', 'sig-1'), 3::bigint,
          'signal_workflow() returns the new event''s id');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data, created_at FROM harvest.events
      WHERE execution_id = pg_temp.run('sig') AND event_id = 3$$,
    $$VALUES (3::bigint, 'SignalReceived'::text, '{"name": "approve", "payload": {"by": "ann"}, "signal_id": "sig-1"}'::jsonb,
              '2030-01-01 00:00:05+00'::timestamptz)$$,
    'the signal is a SignalReceived{name, payload, signal_id} event stamped with harvest.now()');
SELECT results_eq(
    $$SELECT kind, queue, status, due_at FROM harvest.tasks WHERE execution_id = pg_temp.run('sig')$$,
    $$VALUES ('workflow'::text, 'sq_sig'::text, 'pending'::text, '2030-01-01 00:00:05+00'::timestamptz)$$,
    'the signal wakes the workflow: a pending workflow task on the run''s queue, due now');
SELECT is(harvest.signal_workflow(pg_temp.run('sig'), 'approve'), 4::bigint, 'a second signal of the same name');
SELECT is(pg_temp.workflow_tasks(pg_temp.run('sig')), 1::bigint,
          'a second wake-up adds no second workflow task');
SELECT is((SELECT event_data -> 'payload' FROM harvest.events WHERE execution_id = pg_temp.run('sig') AND event_id = 4),
          'null'::jsonb, 'without a payload the payload is JSON null');
SELECT matches((SELECT event_data ->> 'signal_id' FROM harvest.events
                WHERE execution_id = pg_temp.run('sig') AND event_id = 4),
               '^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$',
               'without a signal_id one is minted (a uuid)');
SELECT is(harvest.signal_workflow(pg_temp.run('sig'), 'approve', NULL), 5::bigint, 'a signal with a NULL payload');
SELECT is((SELECT event_data -> 'payload' FROM harvest.events WHERE execution_id = pg_temp.run('sig') AND event_id = 5),
          'null'::jsonb, 'a NULL payload is stored as JSON null');

-- Several signals: in the order they were accepted, by event_id, without gaps.
SELECT isnt(pg_temp.start_decided('order', 'sig_wf', 'sq_order'), NULL, 'setup: another idle run');
SELECT lives_ok($$SELECT harvest.signal_workflow(pg_temp.run('order'), 'step', '1');
                  SELECT harvest.signal_workflow(pg_temp.run('order'), 'other', '"x"');
                  SELECT harvest.signal_workflow(pg_temp.run('order'), 'step', '2');
                  SELECT harvest.signal_workflow(pg_temp.run('order'), 'step', '3')$$,
                'four signals, two names interleaved');
SELECT results_eq(
    $$SELECT event_id, event_data ->> 'name', event_data -> 'payload' FROM harvest.events
      WHERE execution_id = pg_temp.run('order') AND event_type = 'SignalReceived' ORDER BY event_id$$,
    $$VALUES (3::bigint, 'step'::text, '1'::jsonb), (4, 'other', '"x"'), (5, 'step', '2'), (6, 'step', '3')$$,
    'signals take consecutive event ids in the order they arrived');
SELECT is((SELECT count(DISTINCT event_data ->> 'signal_id') FROM harvest.events
           WHERE execution_id = pg_temp.run('order') AND event_type = 'SignalReceived'), 4::bigint,
          'each minted signal_id is distinct');

-- A signal while the workflow task is in flight lands in the next batch.
SELECT harvest.start_workflow('sig_wf', '[]', 'inflight', 'sq_inflight');
CREATE TEMP TABLE inflight ON COMMIT DROP AS SELECT * FROM harvest.claim_tasks('decider', ARRAY['sq_inflight'], 1);
SELECT is(harvest.signal_workflow((SELECT execution_id FROM inflight), 'late'), 2::bigint,
          'signal_workflow() while the workflow task is claimed');
SELECT results_eq($$SELECT id, status FROM harvest.tasks WHERE execution_id = (SELECT execution_id FROM inflight)$$,
                  $$SELECT task_id, 'running'::text FROM inflight$$,
                  'the claimed task stays the only workflow task');
SELECT results_eq($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task((SELECT task_id FROM inflight),
                                                                 (SELECT fencing_token FROM inflight), 1, '[]')$$,
                  $$VALUES (3::bigint, 'RUNNING'::text)$$, 'completing the batch with through=1');
SELECT results_eq($$SELECT status FROM harvest.tasks WHERE execution_id = (SELECT execution_id FROM inflight)$$,
                  $$VALUES ('pending'::text)$$, 'the signal past through re-enqueues a workflow task');

-- Argument and state checks.
SELECT throws_ok(format($$SELECT harvest.signal_workflow(%L, '')$$, pg_temp.run('sig')), 'HR001',
                 'signal name is empty', 'an empty signal name: HR001');
SELECT throws_ok(format($$SELECT harvest.signal_workflow(%L, '   ')$$, pg_temp.run('sig')), 'HR001',
                 'signal name is empty', 'a blank signal name: HR001');
SELECT throws_ok(format($$SELECT harvest.signal_workflow(%L, NULL)$$, pg_temp.run('sig')), 'HR001',
                 'signal name is empty', 'a NULL signal name: HR001');
SELECT throws_ok($$SELECT harvest.signal_workflow('00000000-0000-4000-8000-00000000abcd', 'approve')$$, 'HR002',
                 'execution 00000000-0000-4000-8000-00000000abcd does not exist',
                 'signalling an unknown execution: HR002');
SELECT throws_ok($$SELECT harvest.signal_workflow(NULL, 'approve')$$, 'HR002', NULL,
                 'signalling a NULL execution id: HR002');
SELECT is(pg_temp.last_event_id(pg_temp.run('sig')), 5::bigint, 'refused signals wrote nothing');

SELECT isnt(pg_temp.start_decided('done', 'sig_wf', 'sq_done', '[{"type": "complete_workflow", "result": 1}]'), NULL, 'setup: a completed run');
SELECT throws_ok(format($$SELECT harvest.signal_workflow(%L, 'approve')$$, pg_temp.run('done')), 'HR005',
                 format('cannot signal execution %s: it is already COMPLETED', pg_temp.run('done')),
                 'signalling a COMPLETED run: HR005 naming the state');
SELECT isnt(pg_temp.start_decided('term', 'sig_wf', 'sq_term'), NULL, 'setup: a run to terminate');
SELECT lives_ok($$SELECT harvest.terminate_workflow(pg_temp.run('term'))$$, 'setup: terminate it');
SELECT throws_ok(format($$SELECT harvest.signal_workflow(%L, 'approve')$$, pg_temp.run('term')), 'HR005',
                 format('cannot signal execution %s: it is already TERMINATED', pg_temp.run('term')),
                 'signalling a TERMINATED run: HR005 naming the state');
SELECT results_eq(
    $$SELECT pg_temp.last_event_id(pg_temp.run('done')), pg_temp.last_event_id(pg_temp.run('term')),
             pg_temp.workflow_tasks(pg_temp.run('done')) + pg_temp.workflow_tasks(pg_temp.run('term'))$$,
    $$VALUES (3::bigint, 3::bigint, 0::bigint)$$,
    'a terminal run gets no event and no workflow task from a signal');

-- ---------------------------------------------------------------- signal_with_start
SET LOCAL harvest.fake_now = '2030-01-01 00:01:00+00';
CREATE TEMP TABLE sws1 ON COMMIT DROP AS
SELECT * FROM harvest.signal_with_start('sws_wf', 'sws-1', 'go', '{"n": 1}', '[5]', 'sws_q', '{"tenant": "t1"}');
SELECT results_eq($$SELECT workflow_id, started_fresh FROM sws1$$, $$VALUES ('sws-1'::text, true)$$,
                  'signal_with_start() with no prior run: a fresh start (started_fresh)');
SELECT results_eq(
    $$SELECT workflow_name, status, input, queue, search_attributes FROM harvest.executions
      WHERE id = (SELECT execution_id FROM sws1)$$,
    $$VALUES ('sws_wf'::text, 'RUNNING'::text, '[5]'::jsonb, 'sws_q'::text, '{"tenant": "t1"}'::jsonb)$$,
    'the new run has the name, input, queue and search attributes');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data - 'signal_id' FROM harvest.events
      WHERE execution_id = (SELECT execution_id FROM sws1) ORDER BY event_id$$,
    $$VALUES (1::bigint, 'WorkflowStarted'::text,
              '{"workflow_name": "sws_wf", "workflow_id": "sws-1", "input": [5], "task_queue": "sws_q",
                "parent_id": null}'::jsonb),
             (2, 'SignalReceived', '{"name": "go", "payload": {"n": 1}}')$$,
    'its history: WorkflowStarted, then the SignalReceived');
SELECT is(pg_temp.workflow_tasks((SELECT execution_id FROM sws1)), 1::bigint, 'with one workflow task');

CREATE TEMP TABLE sws2 ON COMMIT DROP AS
SELECT * FROM harvest.signal_with_start('sws_wf', 'sws-1', 'go', '{"n": 2}');
SELECT results_eq($$SELECT execution_id, workflow_id, started_fresh FROM sws2$$,
                  $$SELECT execution_id, 'sws-1'::text, false FROM sws1$$,
                  'signal_with_start() over a running run attaches to it (started_fresh false)');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data - 'signal_id' FROM harvest.events
      WHERE execution_id = (SELECT execution_id FROM sws1) AND event_id > 2$$,
    $$VALUES (3::bigint, 'SignalReceived'::text, '{"name": "go", "payload": {"n": 2}}'::jsonb)$$,
    'and signals it: the running run gets a second SignalReceived');
SELECT results_eq(
    $$SELECT count(*), count(*) FILTER (WHERE status = 'RUNNING') FROM harvest.executions WHERE workflow_id = 'sws-1'$$,
    $$VALUES (1::bigint, 1::bigint)$$, 'no second run was started');
SELECT is(pg_temp.workflow_tasks((SELECT execution_id FROM sws1)), 1::bigint, 'still one workflow task');

SET LOCAL harvest.fake_now = '2030-01-01 00:02:00+00';
SELECT lives_ok($$SELECT harvest.terminate_workflow((SELECT execution_id FROM sws1))$$, 'setup: the run ends');
CREATE TEMP TABLE sws3 ON COMMIT DROP AS
SELECT * FROM harvest.signal_with_start('sws_wf', 'sws-1', 'go', '{"n": 3}');
SELECT results_eq($$SELECT workflow_id, started_fresh, execution_id <> (SELECT execution_id FROM sws1) FROM sws3$$,
                  $$VALUES ('sws-1'::text, true, true)$$,
                  'signal_with_start() over a terminal run starts a new run');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data - 'signal_id' FROM harvest.events
      WHERE execution_id = (SELECT execution_id FROM sws3) AND event_id > 1$$,
    $$VALUES (2::bigint, 'SignalReceived'::text, '{"name": "go", "payload": {"n": 3}}'::jsonb)$$,
    'the new run is signalled');
SELECT results_eq(
    $$SELECT status, last_event_id FROM harvest.executions WHERE id = (SELECT execution_id FROM sws1)$$,
    $$VALUES ('TERMINATED'::text, 4::bigint)$$, 'the terminal run is left as it was');
SELECT is((SELECT queue FROM harvest.executions WHERE id = (SELECT execution_id FROM sws3)), 'default',
          'p_queue defaults to default');

SELECT throws_ok($$SELECT * FROM harvest.signal_with_start('sws_wf', '', 'go')$$, 'HR001',
                 'signal_with_start needs a workflow_id', 'signal_with_start() with an empty workflow_id: HR001');
SELECT throws_ok($$SELECT * FROM harvest.signal_with_start('sws_wf', NULL, 'go')$$, 'HR001',
                 'signal_with_start needs a workflow_id', 'signal_with_start() with a NULL workflow_id: HR001');
SELECT throws_ok($$SELECT * FROM harvest.signal_with_start('sws_wf', 'sws-2', '')$$, 'HR001',
                 'signal name is empty', 'signal_with_start() with an empty signal name: HR001');
SELECT is_empty($$SELECT 1 FROM harvest.executions WHERE workflow_id = 'sws-2'$$,
                'a refused signal_with_start() starts nothing');
SELECT throws_ok($$SELECT * FROM harvest.signal_with_start('', 'sws-3', 'go')$$, 'HR001',
                 'workflow name is empty', 'signal_with_start() with an empty workflow name: HR001');

-- ---------------------------------------------------------------- cancel_workflow
SET LOCAL harvest.fake_now = '2030-01-01 00:03:00+00';
SELECT isnt(pg_temp.start_decided('cx', 'sig_wf', 'sq_cx', '[{"type": "schedule_activity", "seq": 1, "name": "slow", "queue": "cx_acts"}]'),
            NULL, 'setup: an idle run with an activity in flight');
CREATE TEMP TABLE cx_act ON COMMIT DROP AS SELECT * FROM harvest.claim_tasks('worker-a', ARRAY['cx_acts'], 1);
SELECT is(harvest.heartbeat_activity((SELECT task_id FROM cx_act), (SELECT fencing_token FROM cx_act)), false,
          'before a cancel, heartbeat_activity() returns false');
SELECT is(harvest.cancel_workflow(pg_temp.run('cx'), 'user asked'), true, 'cancel_workflow() returns true');
SELECT results_eq($$SELECT status, cancel_requested FROM harvest.executions WHERE id = pg_temp.run('cx')$$,
                  $$VALUES ('RUNNING'::text, true)$$, 'the run is still RUNNING, with cancel_requested set');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data FROM harvest.events WHERE execution_id = pg_temp.run('cx') AND event_id > 3$$,
    $$VALUES (4::bigint, 'WorkflowCancelRequested'::text, '{"reason": "user asked"}'::jsonb)$$,
    'WorkflowCancelRequested{reason} is appended');
SELECT results_eq(
    $$SELECT status, due_at FROM harvest.tasks WHERE execution_id = pg_temp.run('cx') AND kind = 'workflow'$$,
    $$VALUES ('pending'::text, '2030-01-01 00:03:00+00'::timestamptz)$$, 'the workflow is woken');
SELECT is(harvest.cancel_workflow(pg_temp.run('cx'), 'again'), false, 'asking a second time returns false');
SELECT results_eq(
    $$SELECT count(*), max(event_id) FROM harvest.events
      WHERE execution_id = pg_temp.run('cx') AND event_type = 'WorkflowCancelRequested'$$,
    $$VALUES (1::bigint, 4::bigint)$$, 'WorkflowCancelRequested is appended once per run');
SELECT is(pg_temp.last_event_id(pg_temp.run('cx')), 4::bigint, 'the second request wrote nothing');
SELECT is(harvest.heartbeat_activity((SELECT task_id FROM cx_act), (SELECT fencing_token FROM cx_act)), true,
          'after the cancel, heartbeat_activity() returns true');

SELECT isnt(pg_temp.start_decided('cx2', 'sig_wf', 'sq_cx2'), NULL, 'setup: another idle run');
SELECT is(harvest.cancel_workflow(pg_temp.run('cx2')), true, 'cancel_workflow() without a reason');
SELECT is((SELECT event_data FROM harvest.events WHERE execution_id = pg_temp.run('cx2') AND event_id = 3),
          '{"reason": null}'::jsonb, 'without a reason the event''s reason is null');

SELECT throws_ok(format($$SELECT harvest.cancel_workflow(%L)$$, pg_temp.run('done')), 'HR005',
                 format('cannot cancel execution %s: it is already COMPLETED', pg_temp.run('done')),
                 'cancelling a COMPLETED run: HR005 naming the state');
SELECT throws_ok(format($$SELECT harvest.cancel_workflow(%L)$$, pg_temp.run('term')), 'HR005',
                 format('cannot cancel execution %s: it is already TERMINATED', pg_temp.run('term')),
                 'cancelling a TERMINATED run: HR005');
SELECT is((SELECT cancel_requested FROM harvest.executions WHERE id = pg_temp.run('done')), false,
          'a refused cancel sets nothing');
SELECT throws_ok($$SELECT harvest.cancel_workflow('00000000-0000-4000-8000-00000000abcd')$$, 'HR002',
                 'execution 00000000-0000-4000-8000-00000000abcd does not exist',
                 'cancelling an unknown execution: HR002');

-- Payload size: a signal payload over the limit is refused (HR008), with or without a start.
UPDATE harvest.engine_settings SET max_payload_bytes = 64;
SELECT isnt(pg_temp.start_decided('big', 'sig_wf', 'sq_big'), NULL, 'setup: an idle run for the payload limit');
SELECT throws_ok(format($$SELECT harvest.signal_workflow(%L, 'bulk', to_jsonb(repeat('x', 100)))$$, pg_temp.run('big')),
                 'HR008', 'the payload of signal bulk is 102 bytes, over the payload limit of 64 bytes',
                 'signal_workflow() of a payload over the limit: HR008');
SELECT throws_ok($$SELECT * FROM harvest.signal_with_start('sig_wf', 'big-sws', 'bulk', to_jsonb(repeat('x', 100)))$$,
                 'HR008', 'the payload of signal bulk is 102 bytes, over the payload limit of 64 bytes',
                 'signal_with_start() of a signal payload over the limit: HR008 (and no run is started)');
-- A cancel's reason is written into the run's history: bounded as the batch's is (_check_reason).
SELECT throws_ok(format($$SELECT harvest.cancel_workflow(%L, repeat('x', 100))$$, pg_temp.run('big')),
                 'HR008', 'the reason of a cancel is 102 bytes, over the payload limit of 64 bytes',
                 'cancel_workflow() with a reason over the limit: HR008');
SELECT is((SELECT cancel_requested FROM harvest.executions WHERE id = pg_temp.run('big')), false,
          '... and no cancel is requested');
UPDATE harvest.engine_settings SET max_payload_bytes = DEFAULT;

-- cancel_workflow is audited, each request (a repeated one says so).
SET LOCAL application_name = 'harvest-api';
SELECT isnt(pg_temp.start_decided('aud', 'sig_wf', 'sq_aud'), NULL, 'setup: an idle run to cancel');
SELECT is(harvest.cancel_workflow(pg_temp.run('aud'), 'no longer needed') AND NOT harvest.cancel_workflow(pg_temp.run('aud')),
          true, 'setup: cancel twice through the API');
SELECT results_eq(format($$SELECT operation, target, actor = session_user, source, details FROM harvest.audit_log
                           WHERE operation = 'workflow.cancel' AND target = %L ORDER BY id$$, pg_temp.run('aud')),
                  format($$VALUES ('workflow.cancel'::text, %L::text, true, 'api'::text,
                                   '{"reason": "no longer needed", "workflow_name": "sig_wf", "already_requested": false}'::jsonb),
                                  ('workflow.cancel', %L, true, 'api',
                                   '{"reason": null, "workflow_name": "sig_wf", "already_requested": true}')$$,
                         pg_temp.run('aud'), pg_temp.run('aud')),
                  'cancel_workflow() writes one audit row per request, source api');
RESET application_name;

-- Trace context: the sender's traceparent is kept on SignalReceived; a malformed one is refused.
SELECT isnt(pg_temp.start_run('sig_tp', 'sig_tp_wf', 'sig_tp_q'), NULL, 'setup: a run to signal');
CREATE TEMP TABLE sig_tp AS
SELECT harvest.signal_workflow(pg_temp.run('sig_tp'), 'go', 'null', p_traceparent => '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01') AS event_id;
SELECT is((SELECT e.event_data ->> 'traceparent' FROM harvest.events AS e WHERE e.execution_id = pg_temp.run('sig_tp')
           AND e.event_id = (SELECT event_id FROM sig_tp)),
          '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'signal_workflow(p_traceparent): SignalReceived carries the sender''s span');
SELECT throws_ok($$SELECT harvest.signal_workflow(pg_temp.run('sig_tp'), 'go', 'null', p_traceparent => 'x')$$,
                 'HR001', NULL, 'signal_workflow(): a malformed traceparent is HR001');

CREATE TEMP TABLE swst AS
SELECT * FROM harvest.signal_with_start('sig_tp_wf', 'swst-1', 'go', p_queue => 'sig_tp_q', p_traceparent => '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01');
SELECT results_eq(
    $$SELECT e.event_type, e.event_data ->> 'traceparent' FROM harvest.events AS e
      WHERE e.execution_id = (SELECT execution_id FROM swst) ORDER BY e.event_id$$,
    $$VALUES ('WorkflowStarted'::text, '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01'::text), ('SignalReceived', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')$$,
    'signal_with_start(p_traceparent): the run it starts continues the caller''s span, and the signal carries it');

-- ---------------------------------------------------------------- signal_workflow_eager
-- (signal_workflow and signal_workflow_eager share one body, harvest._signal_workflow.)
-- A worker 'sew' on sq_eager whose cached run decided last: the woken workflow task is
-- leased to it in the signal's transaction, carrying the signal.
SELECT harvest.register_worker('sew', ARRAY['sq_eager', 'sq_eager_paused'], 'host', 1);
SELECT harvest.register_worker('sew_other', ARRAY['sq_other_q'], 'host', 2);
SELECT isnt(pg_temp.start_decided('eager', 'sig_wf', 'sq_eager', '[]', 'sew', 'sew'), NULL,
            'setup: an idle run that worker sew decided last');
CREATE TEMP TABLE eager1 AS
SELECT harvest.signal_workflow_eager(pg_temp.run('eager'), 'go', '7', 'e-1', NULL, 'sew', 30) AS r;
SELECT is((SELECT (r ->> 'event_id')::bigint FROM eager1), 3::bigint,
          'signal_workflow_eager() returns the SignalReceived event''s id');
SELECT results_eq(
    $$SELECT (r -> 'handed' ->> 'task_id')::bigint, r -> 'handed' ->> 'kind', (r -> 'handed' ->> 'fencing_token')::bigint
      FROM eager1$$,
    $$SELECT t.id, 'workflow'::text, t.fencing_token FROM harvest.tasks AS t
      WHERE t.execution_id = pg_temp.run('eager') AND t.status = 'running' AND t.lease_owner = 'sew'
        AND t.lease_expires_at = harvest.now() + interval '30 seconds'$$,
    'the woken workflow task is leased to the worker (its lease, a fencing token) and returned as a claim returns it');
SELECT is((SELECT r -> 'handed' -> 'new_events' -> -1 -> 'event_data' FROM eager1),
          '{"name": "go", "payload": 7, "signal_id": "e-1"}'::jsonb,
          'the handed task carries the events since the worker''s decision, the signal last');
SELECT is((SELECT harvest.signal_workflow_eager(pg_temp.run('eager'), 'go', '8', NULL, NULL, 'sew', 30) -> 'handed'),
          'null'::jsonb, 'a signal while that task is held hands nothing (the task will see it)');
SELECT is(pg_temp.workflow_tasks(pg_temp.run('eager')), 1::bigint, 'and adds no second workflow task');
-- Where the hand-off rules do not allow it, the task is queued as signal_workflow queues it.
SELECT isnt(pg_temp.start_decided('eager_dec', 'sig_wf', 'sq_eager', '[]', 'sew', 'someone_else'), NULL,
            'setup: an idle run another worker decided last');
SELECT is((SELECT harvest.signal_workflow_eager(pg_temp.run('eager_dec'), 'go', '1', NULL, NULL, 'sew', 30) -> 'handed'),
          'null'::jsonb, 'a run another worker decided last is not handed');
SELECT results_eq($$SELECT status, lease_owner FROM harvest.tasks WHERE execution_id = pg_temp.run('eager_dec')$$,
                  $$VALUES ('pending'::text, NULL::text)$$, 'its workflow task is queued (pending)');
SELECT isnt(pg_temp.start_decided('eager_q', 'sig_wf', 'sq_eager', '[]', 'sew', 'sew_other'), NULL,
            'setup: an idle run decided last by a worker that does not poll its queue');
SELECT is((SELECT harvest.signal_workflow_eager(pg_temp.run('eager_q'), 'go', '1', NULL, NULL, 'sew_other', 30) -> 'handed'),
          'null'::jsonb, 'a worker that does not poll the run''s queue is handed nothing');
SELECT isnt(pg_temp.start_decided('eager_nw', 'sig_wf', 'sq_eager', '[]', 'sew', 'gone'), NULL,
            'setup: an idle run decided last by a worker that is not registered');
SELECT is((SELECT harvest.signal_workflow_eager(pg_temp.run('eager_nw'), 'go', '1', NULL, NULL, 'gone', 30) -> 'handed'),
          'null'::jsonb, 'a worker that is not active is handed nothing');
SELECT is(pg_temp.workflow_tasks(pg_temp.run('eager_nw')), 1::bigint, 'its run is woken all the same');
SELECT isnt(pg_temp.start_decided('eager_p', 'sig_wf', 'sq_eager_paused', '[]', 'sew', 'sew'), NULL,
            'setup: an idle run sew decided last, then paused');
SELECT ok(harvest.pause_workflow(pg_temp.run('eager_p')), 'setup: paused');
SELECT is((SELECT harvest.signal_workflow_eager(pg_temp.run('eager_p'), 'go', '1', NULL, NULL, 'sew', 30) -> 'handed'),
          'null'::jsonb, 'a paused run is handed nothing');
SELECT results_eq($$SELECT status, lease_owner FROM harvest.tasks WHERE execution_id = pg_temp.run('eager_p')$$,
                  $$VALUES ('paused'::text, NULL::text)$$, 'its task waits paused, as an ordinary signal leaves it');
-- Only a session that holds harvest_worker too leases a task: an operator's is a plain signal.
SELECT isnt(pg_temp.start_decided('eager_op', 'sig_wf', 'sq_eager', '[]', 'sew', 'sew'), NULL,
            'setup: another idle run sew decided last');
SELECT set_config('eager.op_run', pg_temp.run('eager_op')::text, true);
SET LOCAL ROLE harvest_operator;
SELECT is((SELECT harvest.signal_workflow_eager(current_setting('eager.op_run')::uuid, 'go', '1', NULL, NULL, 'sew', 30)
           -> 'handed'),
          'null'::jsonb, 'an operator without harvest_worker hands nothing to any worker');
RESET ROLE;
SELECT results_eq($$SELECT status, lease_owner FROM harvest.tasks WHERE execution_id = pg_temp.run('eager_op')$$,
                  $$VALUES ('pending'::text, NULL::text)$$, 'the operator''s signal queues the task');
SELECT throws_ok($$SELECT harvest.signal_workflow_eager(pg_temp.run('eager'), 'go', '1', NULL, NULL, 'sew', 0)$$,
                 'HR001', NULL, 'signal_workflow_eager(): a lease that is not positive is HR001');
SELECT throws_ok($$SELECT harvest.signal_workflow_eager(pg_temp.run('eager'), ' ', '1', NULL, NULL, 'sew', 30)$$,
                 'HR001', NULL, 'signal_workflow_eager(): an empty signal name is HR001, as signal_workflow''s');
SELECT throws_ok($$SELECT harvest.signal_workflow_eager(gen_random_uuid(), 'go', '1', NULL, NULL, 'sew', 30)$$,
                 'HR002', NULL, 'signal_workflow_eager(): an unknown run is HR002');

-- ------------------------------------------- many signals to one run in one transaction
-- Each signal to a run moves its row, whose versions live until the transaction ends, so the
-- n-th signal of a transaction costs in proportion to n: refused (HR001) once the transaction
-- has added 10,000 events to the run, looked at on every 1,000th. The run's events are written
-- here directly, in this test's transaction, as 10,997 signals would have written them: each by
-- a statement of its own (a loop's INSERT).
SELECT isnt(pg_temp.start_run('burst', 'sig_wf', 'sq_burst'), NULL, 'setup: a run');
-- The same history written by one INSERT, as a reset copies its source's into the fork: it moved
-- the run's row once, and the signal at 11,000 goes on.
SELECT isnt(pg_temp.start_run('copied', 'sig_wf', 'sq_copied'), NULL, 'setup: a run whose history is copied');
UPDATE harvest.executions AS x SET last_event_id = 10999 WHERE x.id = pg_temp.run('copied');
INSERT INTO harvest.events (execution_id, event_id, event_type, event_data, created_at)
SELECT pg_temp.run('copied'), g, 'SignalReceived', jsonb_build_object('name', 'n', 'payload', g), harvest.now()
FROM generate_series(2, 10999) AS g;
SELECT is(harvest.signal_workflow(pg_temp.run('copied'), 'n', '1'), 11000::bigint,
          'signal_workflow(): events the transaction wrote in one statement (a reset''s copy) are not signals');
UPDATE harvest.executions AS x SET last_event_id = 10998 WHERE x.id = pg_temp.run('burst');
DO $$
BEGIN
    FOR g IN 2..10998 LOOP
        INSERT INTO harvest.events (execution_id, event_id, event_type, event_data, created_at)
        VALUES (pg_temp.run('burst'), g, 'SignalReceived',
                jsonb_build_object('name', 'n', 'payload', g, 'signal_id', 'b' || g), harvest.now());
    END LOOP;
END;
$$;
SELECT is(harvest.signal_workflow(pg_temp.run('burst'), 'n', '1'), 10999::bigint,
          'signal_workflow(): a signal whose event id is not a thousandth is not checked');
SELECT throws_ok($$SELECT harvest.signal_workflow(pg_temp.run('burst'), 'n', '1')$$, 'HR001', NULL,
                 'signal_workflow(): HR001 once the transaction has added 10,000 events to the run');
SELECT throws_like($$SELECT harvest.signal_workflow(pg_temp.run('burst'), 'n', '1')$$,
                   'too many signals to execution % in one transaction: it has added 10,000 events%',
                   'its message says what was refused');
SELECT is((SELECT last_event_id FROM harvest.executions WHERE id = pg_temp.run('burst')), 10999::bigint,
          'the refused signal appended nothing');

SELECT * FROM finish();
ROLLBACK;
