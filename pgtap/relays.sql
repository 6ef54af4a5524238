-- functions/relays.sql: harvest._queue_relay and harvest._deliver_relay (a child's
-- end reaching its parent, a parent's end reaching its children under each
-- parent_close_policy, targets that are gone or no longer running) and the scanner's
-- sweep harvest.deliver_relays. (harvest.list_children is pgtap/executions.sql.)
--
-- A relay whose target row is locked by another session stays queued; one pgTAP
-- transaction cannot hold a lock from another session, so such relays are made
-- here by inserting rows into harvest.relays directly and delivered by
-- harvest.deliver_relays().
BEGIN;
SELECT plan(108);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- Every run here has workflow_id <key> and a queue of its own, rq_<key>; children are
-- started by pg_temp.child (rl_child, "workflow_id": key on rq_<key>). pg_temp.run(key) is
-- a parent started here, else the running (or latest) run of workflow_id key.
CREATE FUNCTION pg_temp.start(p_key text) RETURNS uuid LANGUAGE sql AS $fn$
    SELECT pg_temp.start_run(p_key, 'rl_parent', 'rq_' || p_key);
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

-- A queued parent_closed relay to a child that continued as new meanwhile: its successor
-- inherited the parent link, so the policy goes on to the successor (following the chain).
SELECT isnt(pg_temp.start('t_can'), NULL, 'setup: a child that will rotate twice');
SELECT is(pg_temp.decide('t_can', '[{"type": "continue_as_new", "input": [1]}]'), 'CONTINUED_AS_NEW',
          'setup: it continues as new');
SELECT is(pg_temp.decide('t_can', '[{"type": "continue_as_new", "input": [2]}]'), 'CONTINUED_AS_NEW',
          'setup: and again');
SELECT isnt(pg_temp.queue('can_t', pg_temp.run('t_can'), 'parent_closed',
                          '{"policy": "terminate", "parent_execution_id": null}'), NULL,
            'setup: a terminate relay queued to the first run of the chain');
SELECT is(harvest.deliver_relays(), 1, 'deliver_relays() delivers it');
SELECT results_eq(
    $$SELECT status, count(*) FROM harvest.executions WHERE workflow_id = 't_can' GROUP BY status ORDER BY status$$,
    $$VALUES ('CONTINUED_AS_NEW'::text, 2::bigint), ('TERMINATED', 1)$$,
    'the terminate policy reaches the last run of the chain');
SELECT is_empty($$SELECT 1 FROM harvest.relays$$, 'the forwarded relay is delivered, none is left');
SELECT isnt(pg_temp.start('t_can_rc'), NULL, 'setup: a child that will rotate');
SELECT is(pg_temp.decide('t_can_rc', '[{"type": "continue_as_new", "input": [1]}]'), 'CONTINUED_AS_NEW',
          'setup: it continues as new');
SELECT isnt(pg_temp.queue('can_rc', pg_temp.run('t_can_rc'), 'parent_closed', '{"policy": "request_cancel"}'), NULL,
            'setup: a request_cancel relay queued to the rotated run');
SELECT is(harvest.deliver_relays(), 1, 'deliver_relays() delivers it');
SELECT results_eq(
    $$SELECT e.status, e.cancel_requested, (SELECT ev.event_type FROM harvest.events AS ev
                                            WHERE ev.execution_id = e.id ORDER BY ev.event_id DESC LIMIT 1)
      FROM harvest.executions AS e WHERE e.workflow_id = 't_can_rc' AND e.status = 'RUNNING'$$,
    $$VALUES ('RUNNING'::text, true, 'WorkflowCancelRequested'::text)$$,
    'the successor gets the cancel request');
-- A chain whose current run is gone (its successor erased by hand, or purged): the policy has
-- no run to reach. The relay forwarded to the successor finds no row and is dropped, in one
-- pass: nothing is left queued, retried or applied.
SELECT isnt(pg_temp.start('t_gone'), NULL, 'setup: a child that will rotate');
SELECT is(pg_temp.decide('t_gone', '[{"type": "continue_as_new", "input": [1]}]'), 'CONTINUED_AS_NEW',
          'setup: it continues as new');
SELECT lives_ok($$DELETE FROM harvest.executions WHERE workflow_id = 't_gone' AND status = 'RUNNING'$$,
                'setup: its successor is erased by hand');
SELECT isnt(pg_temp.queue('gone_t', pg_temp.run('t_gone'), 'parent_closed',
                          '{"policy": "terminate", "parent_execution_id": null}'), NULL,
            'setup: a terminate relay queued to the chain''s last run');
SELECT is(harvest.deliver_relays(), 1, 'deliver_relays() settles it in one pass');
SELECT is_empty($$SELECT 1 FROM harvest.relays$$, 'nothing is left queued (the forward found no successor, dropped)');
SELECT results_eq($$SELECT status FROM harvest.executions WHERE workflow_id = 't_gone'$$,
                  $$VALUES ('CONTINUED_AS_NEW'::text)$$, 'the chain''s last run is left as it was');

SELECT * FROM finish();
ROLLBACK;

-- ======================================================= external signal and cancel
-- (harvest._decide_external and the relays of kinds external_signal and external_cancel:
-- harvest._workflow_names, harvest._locate_external_target, harvest._apply_external,
-- harvest._settle_external, harvest._report_external, harvest._deliver_external; the
-- cross-shard pump's harvest.claim_remote_relays, harvest.deliver_external_relay,
-- harvest.complete_relay and harvest.release_relay, driven here on one database.)
BEGIN;
SELECT plan(88);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

CREATE FUNCTION pg_temp.start(p_key text, p_name text DEFAULT 'xs_wf') RETURNS uuid LANGUAGE sql AS $fn$
    SELECT execution_id FROM harvest.start_workflow(p_name, '[]', p_key, 'xq_' || p_key);
$fn$;
-- pg_temp.run and pg_temp.decide come from pgtap/fixtures/common.sql.
CREATE FUNCTION pg_temp.event(p_id uuid, p_back integer DEFAULT 0)
RETURNS TABLE (event_type text, event_data jsonb) LANGUAGE sql AS $fn$
    SELECT event_type, event_data FROM harvest.events WHERE execution_id = p_id
    ORDER BY event_id DESC OFFSET p_back LIMIT 1;
$fn$;
CREATE FUNCTION pg_temp.signal(p_seq integer, p_target jsonb, p_name text DEFAULT 'go',
                               p_payload jsonb DEFAULT '{"n": 1}') RETURNS jsonb LANGUAGE sql AS $fn$
    SELECT jsonb_build_array(jsonb_build_object('type', 'signal_external_workflow', 'seq', p_seq,
        'signal_name', p_name, 'payload', p_payload) || p_target);
$fn$;
CREATE FUNCTION pg_temp.cancel(p_seq integer, p_target jsonb, p_reason text DEFAULT 'enough')
RETURNS jsonb LANGUAGE sql AS $fn$
    SELECT jsonb_build_array(jsonb_build_object('type', 'cancel_external_workflow', 'seq', p_seq,
        'reason', p_reason) || p_target);
$fn$;

SELECT is(harvest.get_shard_id(), 0, 'setup: this database is shard 0');
SELECT isnt(pg_temp.start('xs_src', 'xs_sender'), NULL, 'setup: the sending run');
SELECT isnt(pg_temp.start('xs_tgt'), NULL, 'setup: the target run');
SELECT is(pg_temp.decide('xs_tgt', '[]'), 'RUNNING', 'setup: the target waits');

-- ------------------------------------------- a signal by execution id, delivered inline
SELECT is(pg_temp.decide('xs_src', pg_temp.signal(1, jsonb_build_object('execution_id', pg_temp.run('xs_tgt')))),
          'RUNNING', 'a decision signals the target by execution id');
SELECT results_eq(
    $$SELECT event_type, event_data FROM harvest.events WHERE execution_id = pg_temp.run('xs_src') AND event_id > 2
      ORDER BY event_id$$,
    $$VALUES ('ExternalSignalRequested'::text, jsonb_build_object('seq', 1, 'execution_id', pg_temp.run('xs_tgt'),
                'workflow_id', NULL, 'workflow_name', NULL, 'signal_name', 'go', 'payload', '{"n": 1}'::jsonb)),
             ('ExternalSignalDelivered', jsonb_build_object('seq', 1, 'execution_id', pg_temp.run('xs_tgt')))$$,
    'the sender''s history: ExternalSignalRequested, then ExternalSignalDelivered in the same transaction');
SELECT results_eq(
    $$SELECT event_type, event_data - 'signal_id' FROM pg_temp.event(pg_temp.run('xs_tgt'))$$,
    $$VALUES ('SignalReceived'::text, jsonb_build_object('name', 'go', 'payload', '{"n": 1}'::jsonb,
                'sender_execution_id', pg_temp.run('xs_src')))$$,
    'the target receives SignalReceived naming the sender (sender_execution_id)');
SELECT matches((SELECT event_data ->> 'signal_id' FROM pg_temp.event(pg_temp.run('xs_tgt'))), '^0:[0-9]+$',
               'its signal_id is <source shard>:<relay id>');
SELECT is(pg_temp.workflow_tasks(pg_temp.run('xs_tgt')), 1::bigint, 'the target is woken');
SELECT is(pg_temp.workflow_tasks(pg_temp.run('xs_src')), 1::bigint, 'the sender is woken by its outcome');
SELECT is_empty($$SELECT 1 FROM harvest.relays$$, 'nothing is left in relays');

-- A traced sender: its task's traceparent reaches the target's SignalReceived (a span link).
SELECT is(pg_temp.decide('xs_src', jsonb_build_array(pg_temp.signal(5, jsonb_build_object(
              'execution_id', pg_temp.run('xs_tgt'), 'traceparent', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')) -> 0)),
          'RUNNING', 'a decision signals the target with its task''s traceparent');
SELECT is((SELECT event_data ->> 'traceparent' FROM pg_temp.event(pg_temp.run('xs_tgt'))), '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
          '_apply_external(): the target''s SignalReceived carries the sender''s span');
SELECT throws_ok($$SELECT pg_temp.decide('xs_src', pg_temp.signal(6, jsonb_build_object(
                     'execution_id', pg_temp.run('xs_tgt'), 'traceparent', 'bad')))$$, 'HR001', NULL,
                 'a malformed traceparent on signal_external_workflow is HR001');

-- ------------------------------------------- by business key, with and without the name
SELECT is(pg_temp.decide('xs_src', pg_temp.signal(2, '{"workflow_id": "xs_tgt"}', 'by_key')), 'RUNNING',
          'a signal by workflow_id alone');
SELECT results_eq($$SELECT event_type, event_data FROM pg_temp.event(pg_temp.run('xs_src'))$$,
    $$VALUES ('ExternalSignalDelivered'::text, jsonb_build_object('seq', 2, 'execution_id', pg_temp.run('xs_tgt')))$$,
    'by workflow_id: delivered to the running run, whose id the outcome names');
SELECT is((SELECT event_data ->> 'name' FROM pg_temp.event(pg_temp.run('xs_tgt'))), 'by_key', 'the target has it');
SELECT is(pg_temp.decide('xs_src', pg_temp.signal(3, '{"workflow_id": "xs_tgt", "workflow_name": "xs_wf"}')),
          'RUNNING', 'a signal by workflow_id and name');
SELECT is((SELECT event_type FROM pg_temp.event(pg_temp.run('xs_src'))), 'ExternalSignalDelivered',
          'by workflow_id and name: delivered');
SELECT is(pg_temp.decide('xs_src', pg_temp.signal(4, '{"workflow_id": "xs_tgt", "workflow_name": "other"}')),
          'RUNNING', 'a signal to a name that has no such workflow_id');
SELECT results_eq($$SELECT event_type, event_data - 'message' FROM pg_temp.event(pg_temp.run('xs_src'))$$,
    $$VALUES ('ExternalSignalFailed'::text, '{"seq": 4, "reason": "not_found", "execution_id": null}'::jsonb)$$,
    'not found: ExternalSignalFailed{reason: not_found}');
SELECT is((SELECT event_data ->> 'message' FROM pg_temp.event(pg_temp.run('xs_src'))),
          'no run of workflow_id xs_tgt (other) exists', 'the failure says what was not found');
SELECT is(pg_temp.decide('xs_src', pg_temp.signal(5, '{"execution_id": "00000000-0000-4000-8000-0000000000ab"}')),
          'RUNNING', 'a signal to an unknown execution id');
SELECT is((SELECT event_data ->> 'reason' FROM pg_temp.event(pg_temp.run('xs_src'))), 'not_found',
          'an unknown execution id: not_found');

-- ------------------------------------------- the target has ended, or continued as new
SELECT isnt(pg_temp.start('xs_done'), NULL, 'setup: a run that completes');
SELECT is(pg_temp.decide('xs_done', '[{"type": "complete_workflow", "result": 1}]'), 'COMPLETED', 'setup: completed');
SELECT is(pg_temp.decide('xs_src', pg_temp.signal(6, jsonb_build_object('execution_id', pg_temp.run('xs_done')))),
          'RUNNING', 'a signal to a completed run by id');
SELECT results_eq($$SELECT event_type, event_data - 'message' FROM pg_temp.event(pg_temp.run('xs_src'))$$,
    $$VALUES ('ExternalSignalFailed'::text, jsonb_build_object('seq', 6, 'reason', 'not_running',
                'execution_id', pg_temp.run('xs_done')))$$,
    'a completed target: ExternalSignalFailed{reason: not_running, execution_id}');
SELECT is(pg_temp.decide('xs_src', pg_temp.signal(7, '{"workflow_id": "xs_done"}')), 'RUNNING',
          'a signal to a business key whose only run completed');
SELECT is((SELECT event_data ->> 'message' FROM pg_temp.event(pg_temp.run('xs_src'))),
          format('no run of workflow_id xs_done is running (the latest, %s, is COMPLETED)', pg_temp.run('xs_done')),
          'by key: not_running, naming the latest run and its status');
SELECT isnt(pg_temp.start('xs_can'), NULL, 'setup: a run that continues as new');
CREATE TEMP TABLE xs_first AS SELECT pg_temp.run('xs_can') AS id;
SELECT is(pg_temp.decide('xs_can', '[{"type": "continue_as_new", "input": []}]'), 'CONTINUED_AS_NEW',
          'setup: continued as new');
SELECT is(pg_temp.decide('xs_src', pg_temp.signal(8, jsonb_build_object('execution_id', (SELECT id FROM xs_first)))),
          'RUNNING', 'a signal to the first run of a chain, by its id');
SELECT results_eq($$SELECT event_type, event_data FROM pg_temp.event(pg_temp.run('xs_src'))$$,
    $$VALUES ('ExternalSignalDelivered'::text, jsonb_build_object('seq', 8, 'execution_id', pg_temp.run('xs_can')))$$,
    'it follows continue-as-new to the running successor, as a client''s signal does');

-- ------------------------------------------- cancel
SELECT is(pg_temp.decide('xs_src', pg_temp.cancel(9, jsonb_build_object('execution_id', pg_temp.run('xs_can')))),
          'RUNNING', 'a decision cancels a run by id');
SELECT results_eq($$SELECT event_type, event_data FROM pg_temp.event(pg_temp.run('xs_src'), 1)$$,
    $$VALUES ('ExternalCancelRequested'::text, jsonb_build_object('seq', 9, 'execution_id', pg_temp.run('xs_can'),
                'workflow_id', NULL, 'workflow_name', NULL, 'reason', 'enough'))$$,
    'the sender records ExternalCancelRequested{reason}');
SELECT results_eq($$SELECT event_type, event_data FROM pg_temp.event(pg_temp.run('xs_src'))$$,
    $$VALUES ('ExternalCancelDelivered'::text, jsonb_build_object('seq', 9, 'execution_id', pg_temp.run('xs_can'),
                'already_requested', false))$$,
    'and hears ExternalCancelDelivered{already_requested: false}');
SELECT results_eq($$SELECT event_type, event_data FROM pg_temp.event(pg_temp.run('xs_can'))$$,
    $$VALUES ('WorkflowCancelRequested'::text, '{"reason": "enough"}'::jsonb)$$,
    'the target gets WorkflowCancelRequested{reason}, as cancel_workflow writes it');
SELECT ok((SELECT cancel_requested FROM harvest.executions WHERE id = pg_temp.run('xs_can')), 'marked cancel_requested');
SELECT is((SELECT details ->> 'requested_by' FROM harvest.audit_log WHERE operation = 'workflow.cancel'
           AND target = pg_temp.run('xs_can')::text), pg_temp.run('xs_src')::text,
          'audited as workflow.cancel, requested_by the sender');
SELECT is(pg_temp.decide('xs_src', pg_temp.cancel(10, '{"workflow_id": "xs_can"}', NULL)), 'RUNNING',
          'a second cancel, by business key and without a reason');
SELECT is((SELECT event_data -> 'already_requested' FROM pg_temp.event(pg_temp.run('xs_src'))), 'true'::jsonb,
          'already requested: delivered with already_requested true, nothing appended to the target');
SELECT is((SELECT count(*) FROM harvest.events WHERE execution_id = pg_temp.run('xs_can')
           AND event_type = 'WorkflowCancelRequested'), 1::bigint, 'the target has one cancel request');
SELECT is(pg_temp.decide('xs_src', pg_temp.cancel(11, jsonb_build_object('execution_id', pg_temp.run('xs_done')))),
          'RUNNING', 'a cancel of a completed run');
SELECT is((SELECT event_type || ':' || (event_data ->> 'reason') FROM pg_temp.event(pg_temp.run('xs_src'))),
          'ExternalCancelFailed:not_running', 'ExternalCancelFailed{reason: not_running}');

-- A run may signal itself: its own row is locked by its decision, which counts as free.
SELECT is(pg_temp.decide('xs_src', pg_temp.signal(20, jsonb_build_object('execution_id', pg_temp.run('xs_src')),
                                                  'self')), 'RUNNING', 'a run signals itself');
SELECT results_eq($$SELECT event_type, event_data ->> 'name' FROM harvest.events
                    WHERE execution_id = pg_temp.run('xs_src') ORDER BY event_id DESC LIMIT 2$$,
    $$VALUES ('ExternalSignalDelivered'::text, NULL::text), ('SignalReceived', 'self')$$,
    'its SignalReceived, then the outcome, in the same transaction');

-- ------------------------------------------- ambiguity, and a relay found busy
SELECT isnt(pg_temp.start('xs_tgt', 'xs_other'), NULL, 'setup: a second running workflow with workflow_id xs_tgt');
SELECT results_eq($$SELECT outcome, execution_id FROM harvest._locate_external_target(NULL, NULL, 'xs_tgt')$$,
    $$VALUES ('ambiguous'::text, NULL::uuid)$$, '_locate_external_target(): workflow_id alone matching two: ambiguous');
SELECT ok(harvest._workflow_names() @> ARRAY['xs_other', 'xs_sender', 'xs_wf'],
          '_workflow_names(): every workflow name with a run here (for a workflow_id given alone)');
SELECT results_eq($$SELECT outcome FROM harvest._locate_external_target(NULL, 'xs_other', 'xs_tgt')$$,
    $$VALUES ('found'::text)$$, 'naming the workflow resolves it');
-- A chain longer than the walk's 100 hops: not_running, saying to name it by workflow_id.
CREATE TEMP TABLE chain AS
SELECT n, gen_random_uuid() AS id FROM generate_series(0, 101) AS n;
INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, output, created_at, completed_at)
SELECT c.id, 'xs_long', 'xs_long_key', CASE WHEN c.n < 101 THEN 'CONTINUED_AS_NEW' ELSE 'RUNNING' END,
       CASE WHEN c.n < 101 THEN jsonb_build_object('continued_as_new', (SELECT d.id FROM chain AS d WHERE d.n = c.n + 1)) END,
       harvest.now(), CASE WHEN c.n < 101 THEN harvest.now() END
FROM chain AS c;
SELECT results_eq(
    $$SELECT outcome, message ~ 'continued as new more than 100 times.*ExternalWorkflow\(workflow_id=''xs_long_key''\)'
      FROM harvest._locate_external_target((SELECT id FROM chain WHERE n = 0), NULL, NULL)$$,
    $$VALUES ('not_running'::text, true)$$,
    '_locate_external_target(): a chain past 100 hops is not_running, naming its workflow_id to use');
SELECT results_eq($$SELECT outcome FROM harvest._locate_external_target((SELECT id FROM chain WHERE n = 1), NULL, NULL)$$,
    $$VALUES ('found'::text)$$, 'within 100 hops the running successor is found');
-- A chain whose current run is gone: its last run continued as new and the successor was
-- erased by hand or purged. No run is current, and none ever will be: not_found, naming the
-- chain's last run (not not_running, naming a run that is not there).
CREATE TEMP TABLE broken AS
SELECT n, harvest._new_execution_id(0) AS id FROM generate_series(0, 2) AS n;
INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, output, created_at, completed_at)
SELECT b.id, 'xs_broken', 'xs_broken_key', 'CONTINUED_AS_NEW',
       jsonb_build_object('continued_as_new', (SELECT d.id FROM broken AS d WHERE d.n = b.n + 1)),
       harvest.now(), harvest.now()
FROM broken AS b WHERE b.n < 2;  -- run 2, the successor of run 1, is not here
SELECT results_eq(
    $$SELECT l.outcome, l.execution_id = (SELECT id FROM broken WHERE n = 1),
             l.message = format('execution %s: its continue-as-new chain ends at run %s, which continued as new '
                 'as run %s, and that run is not on this shard (0) (erased or purged): no run of the chain is '
                 'current, and none will be', (SELECT id FROM broken WHERE n = 0), (SELECT id FROM broken WHERE n = 1),
                 (SELECT id FROM broken WHERE n = 2))
      FROM harvest._locate_external_target((SELECT id FROM broken WHERE n = 0), NULL, NULL) AS l$$,
    $$VALUES ('not_found'::text, true, true)$$,
    '_locate_external_target(): a chain whose successor is gone is not_found, naming its last run and why');
SELECT is(pg_temp.decide('xs_src', pg_temp.signal(16, jsonb_build_object('execution_id', (SELECT id FROM broken WHERE n = 0)))
                                   || pg_temp.cancel(17, jsonb_build_object('execution_id', (SELECT id FROM broken WHERE n = 1)))),
          'RUNNING', 'a signal and a cancel to runs of the broken chain, by execution id');
SELECT results_eq(
    $$SELECT event_type, event_data ->> 'reason', (event_data ->> 'execution_id')::uuid = (SELECT id FROM broken WHERE n = 1),
             event_data ->> 'message' ~ 'chain ends at run .* \(erased or purged\)'
      FROM harvest.events WHERE execution_id = pg_temp.run('xs_src')
        AND event_type IN ('ExternalSignalFailed', 'ExternalCancelFailed') AND (event_data ->> 'seq')::int IN (16, 17)
      ORDER BY event_id$$,
    $$VALUES ('ExternalSignalFailed'::text, 'not_found'::text, true, true),
             ('ExternalCancelFailed', 'not_found', true, true)$$,
    'the sender hears ExternalSignalFailed / ExternalCancelFailed{reason: not_found}, naming the chain''s last run');
SELECT is_empty($$SELECT 1 FROM harvest.relays$$, 'settled at once: no relay row is left to retry');
SELECT results_eq(
    $$SELECT d.outcome, d.execution_id = (SELECT id FROM broken WHERE n = 1)
      FROM harvest.deliver_external_relay(1, 999, 'external_signal', (SELECT id FROM broken WHERE n = 0), NULL, NULL,
                                          '{"signal_name": "x"}', gen_random_uuid()) AS d$$,
    $$VALUES ('not_found'::text, true)$$,
    'deliver_external_relay(): the pump''s delivery is not_found too, a final outcome (no retry)');
-- A relay whose immediate delivery found its target busy stays queued; the scanner delivers it.
INSERT INTO harvest.relays (target_execution_id, kind, payload, created_at, source_execution_id, source_seq)
VALUES (pg_temp.run('xs_can'), 'external_signal', '{"signal_name": "late", "payload": 5}', harvest.now(),
        pg_temp.run('xs_src'), 12);
SELECT is(harvest.deliver_relays(), 1, 'deliver_relays() delivers a queued external signal');
SELECT results_eq($$SELECT event_type, event_data -> 'seq' FROM pg_temp.event(pg_temp.run('xs_src'))$$,
    $$VALUES ('ExternalSignalDelivered'::text, '12'::jsonb)$$, 'and reports its outcome to the sender');
SELECT is((SELECT event_data ->> 'name' FROM pg_temp.event(pg_temp.run('xs_can'))), 'late', 'the target has it');

-- ------------------------------------------- a target minted for another shard
CREATE TEMP TABLE xs_far AS SELECT harvest._new_execution_id(1) AS id;
SELECT is(pg_temp.decide('xs_src', pg_temp.signal(13, jsonb_build_object('execution_id', (SELECT id FROM xs_far)))),
          'RUNNING', 'a signal to an id of shard 1, cross_shard_relays off');
SELECT results_eq($$SELECT event_type, event_data ->> 'reason' FROM pg_temp.event(pg_temp.run('xs_src'))$$,
    $$VALUES ('ExternalSignalFailed'::text, 'wrong_shard'::text)$$,
    'reported at once: ExternalSignalFailed{reason: wrong_shard}, not a silent drop and not not_found');
SELECT matches((SELECT event_data ->> 'message' FROM pg_temp.event(pg_temp.run('xs_src'))),
               'belongs to shard 1, and this database \(shard 0\) relays to no other shard', 'naming both shards');
SELECT is_empty($$SELECT 1 FROM harvest.relays$$, 'no relay row is left behind');

-- ------------------------------------------- cross-shard relays: what the pump drives
UPDATE harvest.engine_settings SET cross_shard_relays = true;
SELECT is(pg_temp.decide('xs_src', pg_temp.signal(14, '{"workflow_id": "xs_can"}')
                                   || pg_temp.signal(15, jsonb_build_object('execution_id', (SELECT id FROM xs_far)))),
          'RUNNING', 'cross_shard_relays on: a signal by business key and one to shard 1');
SELECT results_eq(
    $$SELECT kind, remote, target_shard, source_seq FROM harvest.relays ORDER BY id$$,
    $$VALUES ('external_signal'::text, true, NULL::integer, 14), ('external_signal', true, 1, 15)$$,
    'both wait for the pump (remote): a business key for every shard, the id for its own');
SELECT is(harvest.deliver_relays(), 0, 'deliver_relays() leaves remote relays to the pump');
CREATE TEMP TABLE xs_claimed AS SELECT * FROM harvest.claim_remote_relays(10, 30);
SELECT results_eq($$SELECT r.source_seq, c.target_shard, c.source_shard, c.attempts
                    FROM xs_claimed AS c JOIN harvest.relays AS r ON r.id = c.relay_id ORDER BY c.relay_id$$,
    $$VALUES (14, NULL::integer, 0, 1), (15, 1, 0, 1)$$,
    'claim_remote_relays(): both, with this shard as source_shard, attempt 1');
SELECT is_empty($$SELECT * FROM harvest.claim_remote_relays(10, 30)$$, 'leased: a second claim gets nothing');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:31+00';
SELECT is((SELECT array_agg(attempts ORDER BY relay_id) FROM harvest.claim_remote_relays(10, 30)), '{2,2}'::integer[],
          'once the lease ran out they are claimed again, attempt 2');
-- The pump, on the target's shard (here the same database): by business key.
CREATE TEMP TABLE xs_key AS SELECT * FROM xs_claimed WHERE target_execution_id IS NULL;
SELECT results_eq(
    $$SELECT outcome, execution_id FROM xs_key AS k, harvest.deliver_external_relay(k.source_shard, k.relay_id, k.kind,
        k.target_execution_id, k.target_workflow_name, k.target_workflow_id, k.payload, k.source_execution_id)$$,
    $$VALUES ('delivered'::text, pg_temp.run('xs_can'))$$,
    'deliver_external_relay(): applies the signal on the target shard');
SELECT results_eq(
    $$SELECT outcome, execution_id FROM xs_key AS k, harvest.deliver_external_relay(k.source_shard, k.relay_id, k.kind,
        k.target_execution_id, k.target_workflow_name, k.target_workflow_id, k.payload, k.source_execution_id)$$,
    $$VALUES ('delivered'::text, pg_temp.run('xs_can'))$$,
    'delivered again (a pump that lost the answer): the same outcome, from the receipt');
SELECT is((SELECT count(*) FROM harvest.events AS e, xs_key AS k WHERE e.execution_id = pg_temp.run('xs_can')
           AND e.event_data ->> 'signal_id' = '0:' || k.relay_id), 1::bigint,
          'the target holds the signal once (signal_id <source shard>:<relay id>)');
SELECT is((SELECT count(*) FROM harvest.relay_receipts), 1::bigint, 'one receipt, keyed (source shard, relay id)');
SELECT results_eq(
    $$SELECT outcome FROM xs_claimed AS k, harvest.deliver_external_relay(k.source_shard, k.relay_id, k.kind,
        k.target_execution_id, k.target_workflow_name, k.target_workflow_id, k.payload, k.source_execution_id)
      WHERE k.target_execution_id IS NOT NULL$$,
    $$VALUES ('wrong_shard'::text)$$, 'an id of another shard asked of this one: wrong_shard, and nothing is kept');
SELECT is((SELECT count(*) FROM harvest.relay_receipts), 1::bigint, 'a negative outcome leaves no receipt');
-- Back on the source shard.
SELECT ok(harvest.complete_relay((SELECT relay_id FROM xs_key), 'delivered', pg_temp.run('xs_can')),
          'complete_relay(): records the outcome');
SELECT results_eq($$SELECT event_type, event_data FROM pg_temp.event(pg_temp.run('xs_src'))$$,
    $$VALUES ('ExternalSignalDelivered'::text, jsonb_build_object('seq', 14, 'execution_id', pg_temp.run('xs_can')))$$,
    'the sender hears ExternalSignalDelivered');
SELECT ok(NOT harvest.complete_relay((SELECT relay_id FROM xs_key), 'delivered', pg_temp.run('xs_can')),
          'settling again: false, nothing appended');
SELECT ok(harvest.release_relay((SELECT relay_id FROM xs_claimed WHERE target_shard = 1), 'shard 1: connection refused'),
          'release_relay(): an attempt that could not inspect shard 1 keeps the row');
SELECT results_eq($$SELECT last_error, claimed_until FROM harvest.relays WHERE target_shard = 1$$,
    $$VALUES ('shard 1: connection refused'::text, '2030-01-01 00:00:41+00'::timestamptz)$$,
    'with its error, claimable again after min(attempts, 6) x 5 s');
SELECT throws_ok($$SELECT harvest.complete_relay(1, 'lost')$$, 'HR001', 'relay outcome "lost" is not final',
                 'complete_relay(): an outcome that is not final is refused');
SELECT throws_ok($$SELECT * FROM harvest.deliver_external_relay(0, 1, 'child_closed', NULL, NULL, 'x', '{}',
                   gen_random_uuid())$$, 'HR001', 'relay kind "child_closed" is not external_signal or external_cancel',
                 'deliver_external_relay(): only external kinds');
SELECT throws_ok($$SELECT * FROM harvest.deliver_external_relay(0, 1, 'external_signal', NULL, NULL, NULL, '{}',
                   gen_random_uuid())$$, 'HR001', 'a relay targets exactly one of an execution id and a workflow_id',
                 'deliver_external_relay(): a target is required');
SELECT throws_ok($$SELECT * FROM harvest.claim_remote_relays(0)$$, 'HR001', 'limit 0 is out of range 1..1000',
                 'claim_remote_relays(): the limit is bounded');
-- _apply_external without waiting (the scanner's and the decision's way) on a free target.
SELECT results_eq(
    $$SELECT outcome FROM harvest._apply_external('external_signal', pg_temp.run('xs_can'), NULL, NULL,
        '{"signal_name": "x"}', pg_temp.run('xs_src'), 'probe', false)$$,
    $$VALUES ('delivered'::text)$$, '_apply_external(): a target whose row is free is delivered without waiting');
SELECT lives_ok($$SELECT harvest._settle_external(r, 'not_found', NULL, 'gone')
                  FROM harvest.relays AS r WHERE r.target_shard = 1$$,
                '_settle_external(): settles a row directly');
SELECT results_eq($$SELECT event_type, event_data ->> 'reason' FROM pg_temp.event(pg_temp.run('xs_src'))$$,
    $$VALUES ('ExternalSignalFailed'::text, 'not_found'::text)$$, 'and reports it through _report_external');
SELECT is_empty($$SELECT 1 FROM harvest.relays$$, 'every relay is settled');
SELECT lives_ok($$SELECT harvest._deliver_external(NULL::harvest.relays)$$,
                '_deliver_external() of no row changes nothing');

SELECT * FROM finish();
ROLLBACK;

-- ======================================================= a target a rebalance moved
-- (harvest._locate_external_target, harvest._decide_external, harvest._deliver_external,
-- harvest._apply_external and harvest.deliver_external_relay on runs whose rows a shard
-- rebalance wrote: a run moved here under an id minted for another shard, a seal of a run
-- that moved away, a staged copy not active yet. Their rows are copies of a model run.)
BEGIN;
SELECT plan(26);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

CREATE FUNCTION pg_temp.xf_signal(p_seq integer, p_target jsonb) RETURNS jsonb LANGUAGE sql AS $fn$
    SELECT jsonb_build_array(jsonb_build_object('type', 'signal_external_workflow', 'seq', p_seq,
        'signal_name', 'go', 'payload', 1) || p_target);
$fn$;
CREATE FUNCTION pg_temp.xf_last(p_id uuid) RETURNS TABLE (event_type text, event_data jsonb) LANGUAGE sql AS $fn$
    SELECT event_type, event_data FROM harvest.events WHERE execution_id = p_id ORDER BY event_id DESC LIMIT 1;
$fn$;
-- A copy of the model run under another id, workflow id, status and pointer.
CREATE FUNCTION pg_temp.xf_copy(p_key text, p_shard integer, p_status text, p_pointer integer)
RETURNS uuid LANGUAGE sql AS $fn$
    INSERT INTO harvest.executions
    SELECT (jsonb_populate_record(NULL::harvest.executions, to_jsonb(e) || jsonb_build_object(
        'id', harvest._new_execution_id(p_shard), 'workflow_id', p_key, 'status', p_status,
        'migrated_to_shard', p_pointer))).*
    FROM harvest.executions AS e WHERE e.id = pg_temp.run('xf_model')
    RETURNING pg_temp.remember(p_key, id);
$fn$;

SELECT isnt(pg_temp.start_run('xf_src', 'xf_sender', 'xfq_src'), NULL, 'setup: the sending run (shard 0)');
SELECT isnt(pg_temp.start_run('xf_model', 'xf_wf', 'xfq_model'), NULL, 'setup: a model run');
SELECT isnt(pg_temp.xf_copy('xf_in', 1, 'RUNNING', NULL), NULL,
            'setup: a run moved here (shard 0) under an id minted for shard 1');
SELECT isnt(pg_temp.xf_copy('xf_seal', 0, 'MIGRATED', 2), NULL, 'setup: the seal of a run that moved to shard 2');
SELECT isnt(pg_temp.xf_copy('xf_staged', 2, 'MIGRATING', NULL), NULL,
            'setup: a staged copy a move is bringing here, not active yet');

SELECT results_eq($$SELECT outcome, execution_id FROM harvest._locate_external_target(pg_temp.run('xf_in'), NULL, NULL)$$,
    $$VALUES ('found'::text, pg_temp.run('xf_in'))$$,
    '_locate_external_target(): a row here is the run, whatever shard its id was minted for');
SELECT results_eq($$SELECT outcome, execution_id FROM harvest._locate_external_target(pg_temp.run('xf_seal'), NULL, NULL)$$,
    $$VALUES ('moved'::text, pg_temp.run('xf_seal'))$$, '_locate_external_target(): a seal here is moved');
SELECT matches((SELECT message FROM harvest._locate_external_target(pg_temp.run('xf_seal'), NULL, NULL)),
    'moved to shard 2', 'naming the shard it lives on');
SELECT results_eq($$SELECT outcome FROM harvest._locate_external_target(pg_temp.run('xf_staged'), NULL, NULL)$$,
    $$VALUES ('busy'::text)$$, '_locate_external_target(): a staged copy not active yet is busy (try again)');
SELECT results_eq($$SELECT outcome, execution_id FROM harvest._locate_external_target(NULL, 'xf_wf', 'xf_seal')$$,
    $$VALUES ('not_found'::text, NULL::uuid)$$,
    '_locate_external_target(): a business key skips a seal (its live copy answers on its own shard)');
SELECT results_eq($$SELECT outcome FROM harvest._locate_external_target(NULL, NULL, 'xf_staged')$$,
    $$VALUES ('busy'::text)$$, '_locate_external_target(): a business key whose run is being moved here is busy');
SELECT results_eq($$SELECT outcome FROM harvest._apply_external('external_signal', pg_temp.run('xf_staged'), NULL,
        NULL, '{"signal_name": "x"}', pg_temp.run('xf_src'), 'probe', false)$$,
    $$VALUES ('busy'::text)$$, '_apply_external(): nothing is done on a staged copy');

-- cross_shard_relays off
SELECT is(pg_temp.decide('xf_src', pg_temp.xf_signal(1, jsonb_build_object('execution_id', pg_temp.run('xf_in')))),
          'RUNNING', 'a signal to the run moved here, by its id of shard 1');
SELECT results_eq($$SELECT event_type, event_data ->> 'sender_execution_id' FROM pg_temp.xf_last(pg_temp.run('xf_in'))$$,
    $$VALUES ('SignalReceived'::text, pg_temp.run('xf_src')::text)$$,
    '_decide_external(): delivered here at once, not reported wrong_shard');
SELECT results_eq($$SELECT event_type FROM pg_temp.xf_last(pg_temp.run('xf_src'))$$,
    $$VALUES ('ExternalSignalDelivered'::text)$$, 'and the sender hears it');
SELECT is(pg_temp.decide('xf_src', pg_temp.xf_signal(2, jsonb_build_object('execution_id', pg_temp.run('xf_seal')))),
          'RUNNING', 'a signal to the seal of a run that moved to shard 2');
SELECT results_eq($$SELECT event_type, event_data ->> 'reason' FROM pg_temp.xf_last(pg_temp.run('xf_src'))$$,
    $$VALUES ('ExternalSignalFailed'::text, 'wrong_shard'::text)$$,
    'with cross_shard_relays off: wrong_shard at once, and the seal gets nothing');
SELECT matches((SELECT event_data ->> 'message' FROM pg_temp.xf_last(pg_temp.run('xf_src'))),
    'moved to shard 2, and this database \(shard 0\) relays to no other shard', 'naming where it went');

-- cross_shard_relays on
UPDATE harvest.engine_settings SET cross_shard_relays = true;
SELECT is(pg_temp.decide('xf_src', pg_temp.xf_signal(3, jsonb_build_object('execution_id', pg_temp.run('xf_seal')))
                                   || pg_temp.xf_signal(4, jsonb_build_object('execution_id', pg_temp.run('xf_in')))),
          'RUNNING', 'cross_shard_relays on: a signal to the seal and one to the run moved here');
SELECT results_eq($$SELECT source_seq, remote, target_shard FROM harvest.relays ORDER BY id$$,
    $$VALUES (3, true, 2)$$,
    '_decide_external(): the seal''s is remote toward its pointer; the one moved here was delivered here');
-- A local relay whose target turned out to be a seal goes to the pump instead.
INSERT INTO harvest.relays (target_execution_id, kind, payload, created_at, source_execution_id, source_seq)
VALUES (pg_temp.run('xf_seal'), 'external_signal', '{"signal_name": "late"}', harvest.now(), pg_temp.run('xf_src'), 9);
SELECT is(harvest.deliver_relays(), 0, 'deliver_relays(): a local relay to a seal is not delivered');
SELECT results_eq($$SELECT remote, target_shard FROM harvest.relays WHERE source_seq = 9$$,
    $$VALUES (true, 2)$$, '_deliver_external(): it turns remote toward the seal''s pointer, for the pump');
SELECT throws_ok($$SELECT * FROM harvest.deliver_external_relay(1, 7, 'external_signal', pg_temp.run('xf_seal'),
                   NULL, NULL, '{"signal_name": "go"}', gen_random_uuid())$$, 'HR013', NULL,
                 'deliver_external_relay(): a seal refuses with HR013 (the pump follows its pointer)');
SELECT results_eq($$SELECT outcome FROM harvest.deliver_external_relay(1, 8, 'external_signal', pg_temp.run('xf_in'),
                   NULL, NULL, '{"signal_name": "go"}', gen_random_uuid())$$,
    $$VALUES ('delivered'::text)$$, 'deliver_external_relay(): the run moved here takes it by its foreign id');
-- The run moves on after that delivery; the receipt stays behind, the history goes with it.
DELETE FROM harvest.relay_receipts;
UPDATE harvest.executions SET migrated_from_shards = '{1}' WHERE id = pg_temp.run('xf_in');
SELECT results_eq($$SELECT outcome FROM harvest.deliver_external_relay(1, 8, 'external_signal', pg_temp.run('xf_in'),
                   NULL, NULL, '{"signal_name": "go"}', gen_random_uuid())$$,
    $$VALUES ('delivered'::text)$$, 'a retry where the run moved on, with no receipt there: delivered');
SELECT is((SELECT count(*) FROM harvest.events WHERE execution_id = pg_temp.run('xf_in')
           AND event_data ->> 'signal_id' = '1:8'), 1::bigint,
          '_apply_external(): a moved run that holds the signal (its signal_id) does not get it twice');

SELECT * FROM finish();
ROLLBACK;
