-- functions/relays.sql: harvest._queue_relay and harvest._deliver_relay (a child's
-- end reaching its parent, a parent's end reaching its children under each
-- parent_close_policy, targets that are gone or no longer running), the scanner
-- pass harvest.deliver_relays, and harvest.list_children.
--
-- A relay whose target row is locked by another session stays queued; one pgTAP
-- transaction cannot hold a lock from another session, so such relays are made
-- here by inserting rows into harvest.relays directly and delivered by
-- harvest.deliver_relays().
BEGIN;
SELECT plan(103);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- Every run here has workflow_id p_key and a queue of its own, rq_<key>; children are
-- started with "workflow_id": key and "task_queue": "rq_<key>".
CREATE FUNCTION pg_temp.start(p_key text) RETURNS uuid LANGUAGE sql AS $fn$
    SELECT execution_id FROM harvest.start_workflow('rl_parent', '[]', p_key, 'rq_' || p_key);
$fn$;
-- The running execution of workflow_id p_key, else its latest one.
CREATE FUNCTION pg_temp.run(p_key text) RETURNS uuid LANGUAGE sql AS $fn$
    SELECT id FROM harvest.executions WHERE workflow_id = p_key
    ORDER BY (status = 'RUNNING') DESC, created_at DESC LIMIT 1;
$fn$;
-- Claim p_key's workflow task and complete it with p_commands, through the last
-- event; returns the run's status afterwards.
CREATE FUNCTION pg_temp.decide(p_key text, p_commands jsonb) RETURNS text LANGUAGE plpgsql AS $fn$
DECLARE
    v_task record;
    v_status text;
BEGIN
    SELECT * INTO v_task FROM harvest.claim_tasks('decider', ARRAY['rq_' || p_key], 1, 30);
    IF NOT FOUND THEN
        RAISE EXCEPTION 'setup: % has no workflow task to claim', p_key;
    END IF;
    SELECT c.execution_status INTO v_status
    FROM harvest.complete_workflow_task(
        v_task.task_id, v_task.fencing_token,
        (SELECT e.last_event_id FROM harvest.executions AS e WHERE e.id = v_task.execution_id),
        p_commands, 'decider') AS c;
    RETURN v_status;
END;
$fn$;
-- A start_child_workflow command for child p_key.
CREATE FUNCTION pg_temp.child(p_seq integer, p_key text, p_policy text DEFAULT NULL) RETURNS jsonb
LANGUAGE sql AS $fn$
    SELECT jsonb_strip_nulls(jsonb_build_object(
        'type', 'start_child_workflow', 'seq', p_seq, 'workflow_name', 'rl_child', 'input', jsonb_build_array(p_key),
        'workflow_id', p_key, 'task_queue', 'rq_' || p_key, 'parent_close_policy', p_policy));
$fn$;
CREATE FUNCTION pg_temp.last_event(p_id uuid) RETURNS TABLE (event_id bigint, event_type text, event_data jsonb)
LANGUAGE sql AS $fn$
    SELECT event_id, event_type, event_data FROM harvest.events WHERE execution_id = p_id
    ORDER BY event_id DESC LIMIT 1;
$fn$;

-- ------------------------------------------- a child completes: the parent hears at once
SELECT isnt(pg_temp.start('p_ok'), NULL, 'setup: a parent run');
SELECT is(pg_temp.decide('p_ok', jsonb_build_array(pg_temp.child(1, 'c_ok'))), 'RUNNING',
          'setup: the parent starts child c_ok (seq 1)');
SELECT is(pg_temp.workflow_tasks(pg_temp.run('p_ok')), 0::bigint, 'setup: the parent is idle, waiting on its child');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:10+00';
SELECT is(pg_temp.decide('c_ok', '[{"type": "complete_workflow", "result": {"v": 42}}]'), 'COMPLETED',
          'the child completes');
SELECT results_eq(
    $$SELECT * FROM pg_temp.last_event(pg_temp.run('p_ok'))$$,
    $$SELECT 4::bigint, 'ChildWorkflowCompleted'::text,
             jsonb_build_object('seq', 1, 'child_execution_id', pg_temp.run('c_ok'), 'result', '{"v": 42}'::jsonb)$$,
    'the parent gets ChildWorkflowCompleted{seq, child_execution_id, result} in the same transaction');
SELECT is((SELECT created_at FROM harvest.events WHERE execution_id = pg_temp.run('p_ok') AND event_id = 4),
          '2030-01-01 00:00:10+00'::timestamptz, 'stamped with harvest.now()');
SELECT is_empty($$SELECT 1 FROM harvest.relays$$, 'the parent''s row was free: no relay row is left');
SELECT results_eq(
    $$SELECT kind, status, queue FROM harvest.tasks WHERE execution_id = pg_temp.run('p_ok')$$,
    $$VALUES ('workflow'::text, 'pending'::text, 'rq_p_ok'::text)$$, 'the parent is woken');
SELECT is((SELECT status FROM harvest.executions WHERE id = pg_temp.run('p_ok')), 'RUNNING',
          'the parent keeps running');

-- ------------------------------------------- a child fails or is terminated
SELECT isnt(pg_temp.start('p_fail'), NULL, 'setup: another parent');
SELECT is(pg_temp.decide('p_fail', jsonb_build_array(pg_temp.child(3, 'c_fail'), pg_temp.child(4, 'c_killed'))),
          'RUNNING', 'setup: it starts c_fail (seq 3) and c_killed (seq 4)');
SELECT is(pg_temp.decide('c_fail', '[{"type": "fail_workflow", "failure": {"error_type": "ValueError",
                                      "message": "bad", "non_retryable": true, "details": null}}]'),
          'FAILED', 'c_fail fails');
SELECT results_eq(
    $$SELECT * FROM pg_temp.last_event(pg_temp.run('p_fail'))$$,
    $$SELECT 5::bigint, 'ChildWorkflowFailed'::text,
             jsonb_build_object('seq', 3, 'child_execution_id', pg_temp.run('c_fail'), 'status', 'FAILED',
                                'failure', '{"error_type": "ValueError", "message": "bad", "non_retryable": true,
                                             "details": null}'::jsonb)$$,
    'the parent gets ChildWorkflowFailed{seq, child_execution_id, status FAILED, failure}');
SELECT lives_ok($$SELECT harvest.terminate_workflow(pg_temp.run('c_killed'), 'operator')$$, 'c_killed is terminated');
SELECT results_eq(
    $$SELECT event_id, event_data ->> 'seq', event_data ->> 'status', event_data -> 'failure' ->> 'error_type',
             event_data -> 'failure' ->> 'message'
      FROM pg_temp.last_event(pg_temp.run('p_fail'))$$,
    $$VALUES (6::bigint, '4'::text, 'TERMINATED'::text, 'Terminated'::text, 'operator'::text)$$,
    'a terminated child: ChildWorkflowFailed with status TERMINATED and its failure');
SELECT is(pg_temp.workflow_tasks(pg_temp.run('p_fail')), 1::bigint, 'two child ends wake the parent once');
SELECT is_empty($$SELECT 1 FROM harvest.relays$$, 'no relay row is left');

-- ------------------------------------------- a child continued-as-new: the successor reports
SELECT isnt(pg_temp.start('p_can'), NULL, 'setup: a parent of a child that continues as new');
SELECT is(pg_temp.decide('p_can', jsonb_build_array(pg_temp.child(7, 'c_can'))), 'RUNNING', 'setup: child c_can (seq 7)');
SELECT is(pg_temp.decide('c_can', '[{"type": "continue_as_new", "input": [2]}]'), 'CONTINUED_AS_NEW',
          'the child continues as new');
SELECT is(pg_temp.last_event_id(pg_temp.run('p_can')), 3::bigint, 'continue-as-new is not an end the parent hears of');
SELECT is(pg_temp.decide('c_can', '[{"type": "complete_workflow", "result": "second"}]'), 'COMPLETED',
          'the successor completes');
SELECT results_eq(
    $$SELECT * FROM pg_temp.last_event(pg_temp.run('p_can'))$$,
    $$SELECT 4::bigint, 'ChildWorkflowCompleted'::text,
             jsonb_build_object('seq', 7, 'child_execution_id',
                                (SELECT id FROM harvest.executions WHERE workflow_id = 'c_can' AND status = 'COMPLETED'),
                                'result', 'second')$$,
    'the parent hears of the successor''s end under the original seq');

-- ------------------------------------------- the parent closes: each parent_close_policy
SET LOCAL harvest.fake_now = '2030-01-01 00:01:00+00';
SELECT isnt(pg_temp.start('p_close'), NULL, 'setup: a parent with three children');
SELECT is(pg_temp.decide('p_close', jsonb_build_array(
              pg_temp.child(1, 'c_term'), pg_temp.child(2, 'c_cancel', 'request_cancel'),
              pg_temp.child(3, 'c_aband', 'abandon'))),
          'RUNNING', 'setup: children under terminate (the default), request_cancel and abandon');
SELECT results_eq(
    $$SELECT workflow_id, parent_close_policy FROM harvest.executions WHERE parent_id = pg_temp.run('p_close')
      ORDER BY parent_seq$$,
    $$VALUES ('c_term'::text, 'terminate'::text), ('c_cancel', 'request_cancel'), ('c_aband', 'abandon')$$,
    'setup: the policies are stored on the children');
SELECT lives_ok($$SELECT harvest.signal_workflow(pg_temp.run('c_cancel'), 'busy')$$,
                'setup: c_cancel has an event and a workflow task before the parent closes');
SELECT lives_ok($$SELECT harvest.signal_workflow(pg_temp.run('p_close'), 'finish')$$, 'setup: wake the parent');
SET LOCAL harvest.fake_now = '2030-01-01 00:01:30+00';
SELECT is(pg_temp.decide('p_close', '[{"type": "complete_workflow", "result": null}]'), 'COMPLETED',
          'the parent completes');
SELECT results_eq(
    $$SELECT status, failure, completed_at FROM harvest.executions WHERE id = pg_temp.run('c_term')$$,
    $$VALUES ('TERMINATED'::text, '{"error_type": "Terminated", "message": "the parent workflow closed",
                                    "non_retryable": true, "details": null}'::jsonb,
              '2030-01-01 00:01:30+00'::timestamptz)$$,
    'terminate: the child is TERMINATED at once, with a Terminated failure');
SELECT results_eq(
    $$SELECT * FROM pg_temp.last_event(pg_temp.run('c_term'))$$,
    $$SELECT 2::bigint, 'WorkflowTerminated'::text,
             jsonb_build_object('reason', 'parent ' || pg_temp.run('p_close') || ' closed')$$,
    'terminate: WorkflowTerminated{reason} names the parent');
SELECT is_empty($$SELECT 1 FROM harvest.tasks WHERE execution_id = pg_temp.run('c_term')$$,
                'terminate: the child''s tasks are dropped');
SELECT results_eq(
    $$SELECT status, cancel_requested FROM harvest.executions WHERE id = pg_temp.run('c_cancel')$$,
    $$VALUES ('RUNNING'::text, true)$$, 'request_cancel: the child keeps running with cancel_requested set');
SELECT results_eq(
    $$SELECT * FROM pg_temp.last_event(pg_temp.run('c_cancel'))$$,
    $$VALUES (3::bigint, 'WorkflowCancelRequested'::text, '{"reason": "the parent workflow closed"}'::jsonb)$$,
    'request_cancel: WorkflowCancelRequested{reason} is appended to the child');
SELECT is(pg_temp.workflow_tasks(pg_temp.run('c_cancel')), 1::bigint, 'request_cancel: the child has one workflow task');
SELECT results_eq(
    $$SELECT status, cancel_requested, last_event_id FROM harvest.executions WHERE id = pg_temp.run('c_aband')$$,
    $$VALUES ('RUNNING'::text, false, 1::bigint)$$, 'abandon: the child is untouched');
SELECT results_eq(
    $$SELECT * FROM pg_temp.last_event(pg_temp.run('p_close'))$$,
    $$VALUES (8::bigint, 'WorkflowCompleted'::text, '{"result": null}'::jsonb)$$,
    'the closed parent hears nothing of the child it terminated');
SELECT is_empty($$SELECT 1 FROM harvest.relays$$, 'every relay was delivered or dropped');

-- Any end applies the policies: a terminated parent, a child already cancel-requested.
SELECT isnt(pg_temp.start('p_kill'), NULL, 'setup: a parent to terminate');
SELECT is(pg_temp.decide('p_kill', jsonb_build_array(pg_temp.child(1, 'c_kill_t'),
                                                     pg_temp.child(2, 'c_kill_rc', 'request_cancel'))),
          'RUNNING', 'setup: children under terminate and request_cancel');
SELECT is(harvest.cancel_workflow(pg_temp.run('c_kill_rc'), 'asked first'), true,
          'setup: the request_cancel child was already asked to cancel');
SELECT lives_ok($$SELECT harvest.terminate_workflow(pg_temp.run('p_kill'))$$, 'the parent is terminated');
SELECT is((SELECT status FROM harvest.executions WHERE id = pg_temp.run('c_kill_t')), 'TERMINATED',
          'a terminated parent terminates its terminate child');
SELECT results_eq(
    $$SELECT count(*) FILTER (WHERE event_type = 'WorkflowCancelRequested'), max(event_id)
      FROM harvest.events WHERE execution_id = pg_temp.run('c_kill_rc')$$,
    $$VALUES (1::bigint, 2::bigint)$$, 'a child already asked to cancel is not asked again');

-- ------------------------------------------- _queue_relay on its own
SELECT isnt(pg_temp.start('t_free'), NULL, 'setup: a running target');
SELECT lives_ok($$SELECT harvest._queue_relay(pg_temp.run('t_free'), 'child_closed',
                  '{"seq": 9, "child_execution_id": null, "status": "TIMED_OUT", "failure": {"error_type": "Timeout"}}')$$,
                '_queue_relay() to a free target');
SELECT results_eq(
    $$SELECT * FROM pg_temp.last_event(pg_temp.run('t_free'))$$,
    $$VALUES (2::bigint, 'ChildWorkflowFailed'::text,
              '{"seq": 9, "child_execution_id": null, "status": "TIMED_OUT", "failure": {"error_type": "Timeout"}}'::jsonb)$$,
    '_queue_relay() delivers at once: a child_closed status other than COMPLETED is a ChildWorkflowFailed');
SELECT lives_ok($$SELECT harvest._queue_relay('00000000-0000-4000-8000-00000000abcd', 'parent_closed',
                                            '{"policy": "terminate"}')$$,
                '_queue_relay() to a target that does not exist');
SELECT is_empty($$SELECT 1 FROM harvest.relays$$, '_queue_relay(): both relays are gone, delivered or dropped');
SELECT throws_ok($$SELECT harvest._queue_relay(pg_temp.run('t_free'), 'gossip', '{}')$$, '23514', NULL,
                 '_queue_relay() of an unknown kind: the relays_kind_check constraint refuses it');

-- ------------------------------------------- queued relays: _deliver_relay and deliver_relays
SET LOCAL harvest.fake_now = '2030-01-01 00:02:00+00';
SELECT is(harvest.deliver_relays(), 0, 'deliver_relays() with nothing queued returns 0');
-- Relays whose immediate delivery found the target busy are left in the table as below.
CREATE TEMP TABLE queued (key text PRIMARY KEY, relay_id bigint) ON COMMIT DROP;
CREATE FUNCTION pg_temp.queue(p_key text, p_target uuid, p_kind text, p_payload jsonb) RETURNS bigint
LANGUAGE sql AS $fn$
    WITH r AS (
        INSERT INTO harvest.relays (target_execution_id, kind, payload, created_at)
        VALUES (p_target, p_kind, p_payload, harvest.now()) RETURNING id
    )
    INSERT INTO queued SELECT p_key, r.id FROM r
    RETURNING relay_id;
$fn$;
CREATE FUNCTION pg_temp.relay(p_key text) RETURNS bigint LANGUAGE sql AS $fn$
    SELECT relay_id FROM queued WHERE key = p_key;
$fn$;

SELECT isnt(pg_temp.start('t_busy'), NULL, 'setup: a target whose row was busy');
SELECT isnt(pg_temp.queue('busy', pg_temp.run('t_busy'), 'child_closed',
                          '{"seq": 2, "child_execution_id": null, "status": "COMPLETED", "result": [1]}'),
            NULL, 'setup: a child_closed relay left queued');
SELECT is(pg_temp.last_event_id(pg_temp.run('t_busy')), 1::bigint, 'a queued relay has not reached its target');
SELECT is(harvest.deliver_relays(), 1, 'deliver_relays() delivers it and returns the count');
SELECT results_eq(
    $$SELECT * FROM pg_temp.last_event(pg_temp.run('t_busy'))$$,
    $$VALUES (2::bigint, 'ChildWorkflowCompleted'::text, '{"seq": 2, "child_execution_id": null, "result": [1]}'::jsonb)$$,
    'the target gets ChildWorkflowCompleted');
SELECT is_empty(format('SELECT 1 FROM harvest.relays WHERE id = %s', pg_temp.relay('busy')),
                'a delivered relay is deleted');
SELECT is(harvest.deliver_relays(), 0, 'a second pass finds nothing: delivery happens once');
SELECT is(harvest._deliver_relay(pg_temp.relay('busy')), false, '_deliver_relay() of a relay that is gone: false');

-- A target that no longer exists: the relay is dropped.
SELECT isnt(pg_temp.queue('gone', '00000000-0000-4000-8000-00000000abcd', 'child_closed',
                          '{"seq": 1, "status": "COMPLETED", "result": null}'), NULL,
            'setup: a relay to an execution that no longer exists');
SELECT is(harvest._deliver_relay(pg_temp.relay('gone')), true, '_deliver_relay() to a missing target: true (done)');
SELECT is_empty(format('SELECT 1 FROM harvest.relays WHERE id = %s', pg_temp.relay('gone')),
                'the relay to a missing target is dropped');

-- A target that is no longer running: dropped, nothing appended, no wake-up.
SELECT isnt(pg_temp.start('t_done'), NULL, 'setup: a target that ends');
SELECT lives_ok($$SELECT harvest.terminate_workflow(pg_temp.run('t_done'))$$, 'setup: it is terminated');
SELECT isnt(pg_temp.queue('done_child', pg_temp.run('t_done'), 'child_closed',
                          '{"seq": 1, "status": "FAILED", "failure": {}}'), NULL,
            'setup: a child_closed relay to the terminal target');
SELECT isnt(pg_temp.queue('done_parent', pg_temp.run('t_done'), 'parent_closed',
                          '{"policy": "terminate", "parent_execution_id": null}'), NULL,
            'setup: a parent_closed relay to the terminal target');
SELECT is(harvest._deliver_relay(pg_temp.relay('done_child')), true, '_deliver_relay() to a TERMINATED target: true');
SELECT is(harvest._deliver_relay(pg_temp.relay('done_parent')), true,
          '_deliver_relay() of a terminate relay to a TERMINATED target: true');
SELECT results_eq(
    $$SELECT e.status, e.last_event_id, e.failure ->> 'message',
             (SELECT count(*) FROM harvest.tasks AS t WHERE t.execution_id = e.id)
      FROM harvest.executions AS e WHERE e.id = pg_temp.run('t_done')$$,
    $$VALUES ('TERMINATED'::text, 2::bigint, 'terminated'::text, 0::bigint)$$,
    'a non-running target is left exactly as it was: nothing appended, no task');
SELECT is_empty($$SELECT 1 FROM harvest.relays$$, 'both relays to the terminal target are dropped');

-- Several queued relays in one pass, in id order, bounded by p_limit.
SELECT isnt(pg_temp.start('t_many'), NULL, 'setup: a target for several relays');
SELECT isnt(pg_temp.queue('m1', pg_temp.run('t_many'), 'child_closed', '{"seq": 1, "status": "COMPLETED", "result": 1}'),
            NULL, 'setup: relay m1');
SELECT isnt(pg_temp.queue('m2', '00000000-0000-4000-8000-00000000abcd', 'child_closed', '{"seq": 2, "status": "COMPLETED"}'),
            NULL, 'setup: relay m2 (target missing)');
SELECT isnt(pg_temp.queue('m3', pg_temp.run('t_many'), 'child_closed', '{"seq": 3, "status": "CANCELLED", "failure": {}}'),
            NULL, 'setup: relay m3');
SELECT isnt(pg_temp.queue('m4', pg_temp.run('t_many'), 'parent_closed', '{"policy": "abandon"}'),
            NULL, 'setup: relay m4 (an abandon relay: nothing to do)');
SELECT is(harvest.deliver_relays(1), 1, 'deliver_relays(1) delivers one relay');
SELECT results_eq($$SELECT id FROM harvest.relays ORDER BY id$$,
                  $$SELECT relay_id FROM queued WHERE key IN ('m2', 'm3', 'm4') ORDER BY relay_id$$,
                  'the oldest relay went first; the rest wait');
SELECT is(harvest.deliver_relays(), 3, 'deliver_relays() counts dropped relays as done');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data ->> 'seq' FROM harvest.events
      WHERE execution_id = pg_temp.run('t_many') AND event_id > 1 ORDER BY event_id$$,
    $$VALUES (2::bigint, 'ChildWorkflowCompleted'::text, '1'::text), (3, 'ChildWorkflowFailed', '3')$$,
    'the target got the two child ends in relay order; the abandon relay appended nothing');
SELECT results_eq(
    $$SELECT status, cancel_requested, (SELECT count(*) FROM harvest.tasks WHERE execution_id = pg_temp.run('t_many'))
      FROM harvest.executions WHERE id = pg_temp.run('t_many')$$,
    $$VALUES ('RUNNING'::text, false, 1::bigint)$$, 'the target keeps running, with its one workflow task');
SELECT is_empty($$SELECT 1 FROM harvest.relays$$, 'the table is empty again');

-- A queued request_cancel relay, delivered twice over: the second changes nothing.
SELECT isnt(pg_temp.start('t_rc'), NULL, 'setup: a target for request_cancel relays');
SELECT isnt(pg_temp.queue('rc1', pg_temp.run('t_rc'), 'parent_closed', '{"policy": "request_cancel"}'), NULL,
            'setup: a request_cancel relay');
SELECT isnt(pg_temp.queue('rc2', pg_temp.run('t_rc'), 'parent_closed', '{"policy": "request_cancel"}'), NULL,
            'setup: the same relay again');
SELECT is(harvest.deliver_relays(), 2, 'deliver_relays() delivers both');
SELECT results_eq(
    $$SELECT e.cancel_requested, e.last_event_id, (SELECT count(*) FROM harvest.events AS ev
                                                  WHERE ev.execution_id = e.id AND ev.event_type = 'WorkflowCancelRequested')
      FROM harvest.executions AS e WHERE e.id = pg_temp.run('t_rc')$$,
    $$VALUES (true, 2::bigint, 1::bigint)$$, 'a repeated request_cancel relay appends one WorkflowCancelRequested');

-- ------------------------------------------- list_children
SET LOCAL harvest.fake_now = '2030-01-01 00:10:00+00';
SELECT isnt(pg_temp.start('lc_root'), NULL, 'setup: a root');
SELECT is(pg_temp.decide('lc_root', jsonb_build_array(pg_temp.child(1, 'lc_a'))), 'RUNNING', 'setup: child lc_a');
SET LOCAL harvest.fake_now = '2030-01-01 00:11:00+00';
SELECT lives_ok($$SELECT harvest.signal_workflow(pg_temp.run('lc_root'), 'more')$$, 'setup: wake the root');
SELECT is(pg_temp.decide('lc_root', jsonb_build_array(pg_temp.child(2, 'lc_b'))), 'RUNNING', 'setup: child lc_b');
SET LOCAL harvest.fake_now = '2030-01-01 00:12:00+00';
SELECT is(pg_temp.decide('lc_a', jsonb_build_array(pg_temp.child(1, 'lc_a1'))), 'RUNNING', 'setup: grandchild lc_a1');
SET LOCAL harvest.fake_now = '2030-01-01 00:13:00+00';
SELECT is(pg_temp.decide('lc_b', '[{"type": "fail_workflow", "failure": {"error_type": "ValueError", "message": "bad"}}]'),
          'FAILED', 'setup: lc_b fails');

SELECT results_eq(
    $$SELECT execution_id, parent_id, workflow_name, workflow_id, status, created_at, completed_at, error_summary, depth
      FROM harvest.list_children(pg_temp.run('lc_root'))$$,
    $$VALUES (pg_temp.run('lc_b'), pg_temp.run('lc_root'), 'rl_child'::text, 'lc_b'::text, 'FAILED'::text,
              '2030-01-01 00:11:00+00'::timestamptz, '2030-01-01 00:13:00+00'::timestamptz, 'ValueError: bad'::text, 1),
             (pg_temp.run('lc_a'), pg_temp.run('lc_root'), 'rl_child', 'lc_a', 'RUNNING',
              '2030-01-01 00:10:00+00', NULL, NULL, 1)$$,
    'list_children(): the direct children, newest first, with status, times, error summary and depth 1');
SELECT results_eq(
    $$SELECT workflow_id, parent_id, depth FROM harvest.list_children(pg_temp.run('lc_root'), p_depth => 2)$$,
    $$VALUES ('lc_a1'::text, pg_temp.run('lc_a'), 2), ('lc_b', pg_temp.run('lc_root'), 1),
             ('lc_a', pg_temp.run('lc_root'), 1)$$,
    'list_children(p_depth => 2) adds the grandchildren, each with its own parent and depth');
SELECT results_eq(
    $$SELECT workflow_id, depth FROM harvest.list_children(pg_temp.run('lc_root'), 'running', 2)$$,
    $$VALUES ('lc_a1'::text, 2), ('lc_a', 1)$$,
    'a status filter (case-insensitive) applies at every depth');
SELECT results_eq(
    $$SELECT workflow_id FROM harvest.list_children(pg_temp.run('lc_root'), 'FAILED')$$,
    $$VALUES ('lc_b'::text)$$, 'list_children(p_status => FAILED)');
SELECT is_empty($$SELECT * FROM harvest.list_children(pg_temp.run('lc_root'), 'COMPLETED', 100)$$,
                'a status no child has: empty (depth 100 is allowed)');
SELECT is_empty($$SELECT * FROM harvest.list_children(pg_temp.run('lc_a1'))$$, 'a leaf has no children');
SELECT is_empty($$SELECT * FROM harvest.list_children('00000000-0000-4000-8000-00000000abcd')$$,
                'an unknown execution has no children');
SELECT throws_ok($$SELECT * FROM harvest.list_children(pg_temp.run('lc_root'), 'DONE')$$, 'HR001',
                 'unknown status "DONE": use RUNNING, COMPLETED, FAILED, CANCELLED, TERMINATED, TIMED_OUT, '
                 'CONTINUED_AS_NEW, MIGRATING or MIGRATED', 'an unknown status: HR001 naming it');
SELECT throws_ok($$SELECT * FROM harvest.list_children(pg_temp.run('lc_root'), NULL, 0)$$, 'HR001',
                 'depth 0 is out of range 1..100', 'depth 0: HR001');
SELECT throws_ok($$SELECT * FROM harvest.list_children(pg_temp.run('lc_root'), NULL, 101)$$, 'HR001',
                 'depth 101 is out of range 1..100', 'depth 101: HR001');
SELECT throws_ok($$SELECT * FROM harvest.list_children(pg_temp.run('lc_root'), NULL, NULL)$$, 'HR001',
                 'depth <NULL> is out of range 1..100', 'depth NULL: HR001');

SELECT * FROM finish();
ROLLBACK;
