-- functions/cross_shard.sql: cross-shard children. This database is shard 0. The
-- parent's side: a start_child_workflow command with "shard" 1 (decide.sql,
-- _start_child) mints the child's id for shard 1 and writes its lifecycle row, which
-- the pump claims (claim_cross_shard_children), advances, releases with a backoff
-- and settles into the parent; the parent's close marks it (_close_cross_shard_children).
-- The child's side, with ids minted for shard 0 by a parent of shard 1:
-- start_cross_shard_child (once per id), get_cross_shard_child (following
-- continue-as-new), cancel_cross_shard_child (the parent's close policy),
-- clear_owed_child_end (the child's end no longer owed to its parent: retention may
-- take it).
BEGIN;
SELECT plan(102);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

CREATE FUNCTION pg_temp.remote_child(p_seq integer, p_key text, p_policy text DEFAULT NULL) RETURNS jsonb
LANGUAGE sql AS $fn$
    SELECT pg_temp.child(p_seq, p_key, p_policy) || '{"shard": 1}'::jsonb;
$fn$;

CREATE FUNCTION pg_temp.row_of(p_workflow_id text) RETURNS harvest.cross_shard_children LANGUAGE sql AS $fn$
    SELECT * FROM harvest.cross_shard_children WHERE workflow_id = p_workflow_id;
$fn$;

-- ------------------------------------------------------------ the parent's decision
SELECT isnt(pg_temp.start_run('xp', 'xs_parent', 'xq_xp'), NULL, 'setup: a parent run');
SELECT is(pg_temp.decide('xp', jsonb_build_array(pg_temp.remote_child(1, 'xc1'), pg_temp.remote_child(2, 'xc2'))),
          'RUNNING', 'the parent starts two children placed on shard 1');
SELECT is((SELECT count(*) FROM harvest.executions WHERE workflow_id IN ('xc1', 'xc2')), 0::bigint,
          'neither child is inserted here');
SELECT results_eq(
    $$SELECT e.event_data ->> 'workflow_id', harvest.shard_of((e.event_data ->> 'child_execution_id')::uuid)
      FROM harvest.events AS e WHERE e.execution_id = pg_temp.run('xp') AND e.event_type = 'ChildWorkflowStarted'
      ORDER BY e.event_id$$,
    $$VALUES ('xc1', 1), ('xc2', 1)$$,
    'ChildWorkflowStarted names each child by an id minted for shard 1');
SELECT results_eq(
    $$SELECT c.child_execution_id, c.parent_seq, c.target_shard, c.workflow_name, c.queue, c.input, c.status,
             c.cancel_requested, c.attempts
      FROM harvest.cross_shard_children AS c WHERE c.workflow_id = 'xc1'$$,
    $$SELECT (e.event_data ->> 'child_execution_id')::uuid, 1, 1, 'rl_child'::text, 'rq_xc1'::text,
             '["xc1"]'::jsonb, 'starting'::text, false, 0
      FROM harvest.events AS e WHERE e.execution_id = pg_temp.run('xp') AND e.event_type = 'ChildWorkflowStarted'
        AND e.event_data ->> 'workflow_id' = 'xc1'$$,
    'its lifecycle row: the same id, the parent''s seq, the target shard, what to start, status starting');
SELECT is(pg_temp.workflow_tasks(pg_temp.run('xp')), 0::bigint, 'the parent waits on its children');
SELECT isnt(pg_temp.start_run('xl', 'xs_parent', 'xq_xl'), NULL, 'setup: another parent');
SELECT is(pg_temp.decide('xl', jsonb_build_array(pg_temp.child(1, 'xl1') || '{"shard": 0}')), 'RUNNING',
          'a child placed on this database''s own shard');
SELECT ok(pg_temp.row_of('xl1') IS NULL AND pg_temp.run('xl1') IS NOT NULL,
          'is started here, as today, with no lifecycle row');
SELECT isnt(pg_temp.start_run('xbad', 'xs_parent', 'xq_xbad'), NULL, 'setup: a third parent');
SELECT throws_ok($$SELECT pg_temp.decide('xbad', jsonb_build_array(pg_temp.child(1, 'xb1') || '{"shard": 70000}'))$$,
                 'HR001', 'command start_child_workflow (seq 1): shard must be a whole number from 0 to 65535, got 70000',
                 'a shard out of range is refused, naming the field');

-- ------------------------------------------------------------ claim, release, advance
SELECT results_eq($$SELECT workflow_id FROM harvest.claim_cross_shard_children(10, 30) ORDER BY workflow_id$$,
                  ARRAY['xc1', 'xc2'], 'claim_cross_shard_children(): both rows are due');
SELECT is_empty($$SELECT * FROM harvest.claim_cross_shard_children(10, 30)$$, 'leased: a second claim gets none');
SELECT throws_ok($$SELECT * FROM harvest.claim_cross_shard_children(0)$$, 'HR001', 'limit 0 is out of range 1..1000',
                 'claim_cross_shard_children(): the limit is bounded');
SELECT throws_ok($$SELECT * FROM harvest.claim_cross_shard_children(1, 0)$$, 'HR001',
                 'lease 0 must be positive seconds', 'claim_cross_shard_children(): the lease is positive');
SELECT ok(harvest.release_cross_shard_child((pg_temp.row_of('xc1')).child_execution_id, 'shard 1: unreachable'),
          'release_cross_shard_child(): the row stays');
SELECT results_eq(
    $$SELECT attempts, last_error, last_attempt_at, next_attempt_at FROM pg_temp.row_of('xc1')$$,
    $$VALUES (1, 'shard 1: unreachable'::text, '2030-01-01 00:00:00+00'::timestamptz,
              '2030-01-01 00:00:05+00'::timestamptz)$$,
    'with its attempt, error and a backoff of min(attempts, 6) x 5 s');
SELECT ok(NOT harvest.release_cross_shard_child('00010000-0000-4000-8000-000000000000', 'x'),
          'release_cross_shard_child(): false for a row that is not here');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:31+00';
SELECT results_eq($$SELECT workflow_id, attempts FROM harvest.claim_cross_shard_children(10, 30) ORDER BY 1$$,
                  $$VALUES ('xc1'::text, 1), ('xc2'::text, 0)$$, 'due again once the lease and backoff pass');
SELECT ok(harvest.set_cross_shard_child_running((pg_temp.row_of('xc1')).child_execution_id),
          'set_cross_shard_child_running(): started on its shard');
SELECT results_eq($$SELECT status, attempts, last_error, next_attempt_at FROM pg_temp.row_of('xc1')$$,
                  $$VALUES ('running'::text, 0, NULL::text, NULL::timestamptz)$$,
                  'status running, its failures forgotten, due at once (for the pull of its end)');
SELECT ok(NOT harvest.set_cross_shard_child_running('00010000-0000-4000-8000-000000000000'),
          'set_cross_shard_child_running(): false for a row that is not here');

-- ------------------------------------------------------------ settling into the parent
SELECT ok(harvest.complete_cross_shard_child((pg_temp.row_of('xc1')).child_execution_id, 'COMPLETED', '{"v": 1}'),
          'complete_cross_shard_child(): the first child completed');
SELECT results_eq(
    $$SELECT event_type, event_data - 'child_execution_id' FROM pg_temp.last_event(pg_temp.run('xp'))$$,
    $$VALUES ('ChildWorkflowCompleted'::text, '{"seq": 1, "result": {"v": 1}}'::jsonb)$$,
    'the parent gets ChildWorkflowCompleted{seq, result} as from a same-shard child');
SELECT is(pg_temp.workflow_tasks(pg_temp.run('xp')), 1::bigint, 'and is woken');
SELECT results_eq($$SELECT status, next_attempt_at FROM pg_temp.row_of('xc1')$$,
                  $$VALUES ('delivered'::text, NULL::timestamptz)$$,
                  'the row is delivered, due at once: the child''s shard is still to be told');
SELECT ok(NOT harvest.complete_cross_shard_child(
              (SELECT (event_data ->> 'child_execution_id')::uuid FROM harvest.events
               WHERE execution_id = pg_temp.run('xp') AND event_data ->> 'workflow_id' = 'xc1'), 'COMPLETED', '1'),
          'settling again is harmless (false)');
SELECT is((SELECT count(*) FROM harvest.events WHERE execution_id = pg_temp.run('xp')
           AND event_type = 'ChildWorkflowCompleted'), 1::bigint, '... one ChildWorkflowCompleted');
SELECT ok(harvest.complete_cross_shard_child((pg_temp.row_of('xc1')).child_execution_id, NULL)
          AND pg_temp.row_of('xc1') IS NULL, 'acknowledged on the child''s shard, the row goes');
SELECT ok(harvest.complete_cross_shard_child((pg_temp.row_of('xc2')).child_execution_id, 'START_FAILED', NULL,
                                           '{"error_type": "WorkflowAlreadyExists"}'),
          'complete_cross_shard_child(): the second child''s start was refused');
SELECT ok(pg_temp.row_of('xc2') IS NULL, 'a refused start''s row goes at once (no child there to tell)');
SELECT results_eq(
    $$SELECT event_type, event_data - 'child_execution_id' FROM pg_temp.last_event(pg_temp.run('xp'))$$,
    $$VALUES ('ChildWorkflowFailed'::text,
              '{"seq": 2, "status": "START_FAILED", "failure": {"error_type": "WorkflowAlreadyExists"}}'::jsonb)$$,
    'the parent gets ChildWorkflowFailed{seq, status, failure}');
SELECT throws_ok($$SELECT harvest.complete_cross_shard_child(gen_random_uuid(), 'RUNNING')$$, 'HR001',
                 'child status "RUNNING" is not an end', 'complete_cross_shard_child(): only an end');

-- ------------------------------------------------------------ the parent ends first
SELECT isnt(pg_temp.start_run('xq', 'xs_parent', 'xq_xq'), NULL, 'setup: a parent of three children');
SELECT is(pg_temp.decide('xq', jsonb_build_array(pg_temp.remote_child(1, 'xt'), pg_temp.remote_child(2, 'xa', 'abandon'),
                                                 pg_temp.remote_child(3, 'xs', 'abandon'))), 'RUNNING',
          'setup: terminate, abandon (to be started), abandon (started)');
SELECT ok(harvest.set_cross_shard_child_running((pg_temp.row_of('xs')).child_execution_id), 'setup: xs runs');
SELECT ok(harvest.set_cross_shard_child_running((pg_temp.row_of('xt')).child_execution_id), 'setup: xt runs');
SELECT isnt(harvest.signal_workflow(pg_temp.run('xq'), 'go', 'null'), NULL, 'setup: the parent is woken');
SELECT is(pg_temp.decide('xq', '[{"type": "complete_workflow", "result": null}]'), 'COMPLETED', 'the parent ends');
SELECT results_eq(
    $$SELECT workflow_id, cancel_requested FROM harvest.cross_shard_children
      WHERE workflow_id IN ('xt', 'xa', 'xs') ORDER BY 1$$,
    $$VALUES ('xa'::text, false), ('xs'::text, true), ('xt'::text, true)$$,
    '_close_cross_shard_children: xt gets its close policy, xa is still to start, the started abandoned xs is '
    'let go (the pump tells its shard its end is owed to nobody)');
SELECT ok(harvest.complete_cross_shard_child((pg_temp.row_of('xt')).child_execution_id, NULL),
          'complete_cross_shard_child(): with no status it only drops the row');
SELECT is((SELECT count(*) FROM harvest.events WHERE execution_id = pg_temp.run('xq')
           AND event_type IN ('ChildWorkflowCompleted', 'ChildWorkflowFailed')), 0::bigint,
          'an ended parent hears nothing');
SELECT lives_ok($$SELECT harvest._close_cross_shard_children(pg_temp.run('xq'))$$,
                '_close_cross_shard_children(): closing again changes nothing');
SELECT ok(harvest.set_cross_shard_child_running((pg_temp.row_of('xa')).child_execution_id),
          'set_cross_shard_child_running(): the abandoned child of an ended parent, once started');
SELECT results_eq($$SELECT status, cancel_requested FROM pg_temp.row_of('xa')$$, $$VALUES ('running'::text, true)$$,
                  '... is let go the same way');

SELECT isnt(pg_temp.start_run('xtp', 'xs_parent', 'xq_xtp'), NULL, 'setup: a traced parent');
SELECT is(pg_temp.decide('xtp', jsonb_build_array(pg_temp.remote_child(1, 'xtp1') || '{"traceparent": "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"}')),
          'RUNNING', 'a remote child whose command carries the parent''s child.start span');
SELECT is((pg_temp.row_of('xtp1')).traceparent, '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'its lifecycle row keeps the traceparent');
UPDATE harvest.cross_shard_children SET next_attempt_at = NULL WHERE workflow_id = 'xtp1';
SELECT is((SELECT c.traceparent FROM harvest.claim_cross_shard_children(1000, 30) AS c WHERE c.workflow_id = 'xtp1'),
          '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'claim_cross_shard_children(): a row brings its traceparent to the pump');

-- ------------------------------------------------------------ the child's shard
CREATE TEMP TABLE xs_ids AS SELECT
    ('0000' || substr(gen_random_uuid()::text, 5))::uuid AS child,
    ('0000' || substr(gen_random_uuid()::text, 5))::uuid AS clash,
    ('0001' || substr(gen_random_uuid()::text, 5))::uuid AS parent;
SELECT is((SELECT s.outcome FROM xs_ids, harvest.start_cross_shard_child(
               ('0000' || substr(gen_random_uuid()::text, 5))::uuid, parent, 9, 'xs_child', 'ttp', 'xq_ttp', '[1]',
               'terminate', '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01') AS s), 'started', 'setup: a cross-shard child started with a traceparent');
SELECT is((SELECT ev.event_data ->> 'traceparent' FROM harvest.executions AS e
           JOIN harvest.events AS ev ON ev.execution_id = e.id AND ev.event_id = 1 WHERE e.workflow_id = 'ttp'),
          '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'start_cross_shard_child(p_traceparent): the child''s WorkflowStarted continues the parent''s span');
SELECT results_eq(
    $$SELECT s.* FROM xs_ids, harvest.start_cross_shard_child(child, parent, 3, 'xs_child', 't1', 'xq_t1',
                                                              '[1]', 'request_cancel') AS s$$,
    $$VALUES ('started'::text, 'RUNNING'::text, NULL::jsonb)$$,
    'start_cross_shard_child(): started under the id its parent minted');
SELECT results_eq(
    $$SELECT s.outcome, s.status, s.failure ->> 'error_type', s.failure ->> 'message', s.failure -> 'details'
      FROM xs_ids, harvest.start_cross_shard_child(('0000' || substr(gen_random_uuid()::text, 5))::uuid, parent, 4,
                                                   'xs_child', repeat('k', 1001), 'xq_t1', '[1]', 'terminate') AS s$$,
    $$VALUES ('failed'::text, 'START_FAILED'::text, 'InvalidArgument'::text,
              'workflow_id is 1001 bytes, over the limit of 1000'::text, 'null'::jsonb)$$,
    'start_cross_shard_child() of arguments its start refuses (HR001): a START_FAILED, not an error its pump retries for good');
SELECT results_eq(
    $$SELECT e.parent_id, e.parent_seq, e.parent_close_policy, e.workflow_id, e.input
      FROM harvest.executions AS e, xs_ids WHERE e.id = xs_ids.child$$,
    $$SELECT parent, 3, 'request_cancel'::text, 't1'::text, '[1]'::jsonb FROM xs_ids$$,
    'with its parent, the parent''s seq and close policy');
SELECT is((SELECT e.end_owed_to_shard FROM harvest.executions AS e, xs_ids WHERE e.id = xs_ids.child), 1,
          'and its end owed to its parent''s shard (1), for retention to keep');
SELECT results_eq(
    $$SELECT s.* FROM xs_ids, harvest.start_cross_shard_child(child, parent, 3, 'xs_child', 't1', 'xq_t1',
                                                              '[1]', 'request_cancel') AS s$$,
    $$VALUES ('exists'::text, 'RUNNING'::text, NULL::jsonb)$$, 'a retried start finds it: once');
SELECT results_eq(
    $$SELECT s.outcome, s.status, s.failure ->> 'error_type' FROM xs_ids,
          harvest.start_cross_shard_child(clash, parent, 4, 'xs_child', 't1', 'xq_t1', '[1]', 'terminate') AS s$$,
    $$VALUES ('failed'::text, 'START_FAILED'::text, 'WorkflowAlreadyExists'::text)$$,
    'another child with a running workflow_id: a typed failed start');
SELECT throws_ok(
    $$SELECT * FROM harvest.start_cross_shard_child('00020000-0000-4000-8000-000000000000', gen_random_uuid(), 1,
                                                   'xs_child', 't2', 'xq_t2', '[]', 'terminate')$$,
    'HR011', NULL, 'start_cross_shard_child(): an id of another shard is refused (WrongShard)');
SELECT throws_ok(
    $$SELECT * FROM xs_ids, harvest.start_cross_shard_child(clash, parent, 1, 'xs_child', 't2', 'xq_t2', '[]', 'x')$$,
    'HR001', 'unknown parent_close_policy "x"', 'start_cross_shard_child(): the policy is checked');
SELECT results_eq($$SELECT r.execution_id, r.status FROM xs_ids, harvest.get_cross_shard_child(child) AS r$$,
                  $$SELECT child, 'RUNNING'::text FROM xs_ids$$, 'get_cross_shard_child(): it runs');
SELECT throws_ok($$SELECT * FROM harvest.get_cross_shard_child('00000000-0000-4000-8000-0000000000ff')$$, 'HR002',
                 NULL, 'get_cross_shard_child(): HR002 for no such run');
SELECT is(harvest.cancel_cross_shard_child('00000000-0000-4000-8000-0000000000ff', 'terminate', gen_random_uuid()),
          'not_running', 'cancel_cross_shard_child(): a child never started here is not running');
SELECT lives_ok($$SELECT pg_temp.remember('t1', (SELECT child FROM xs_ids))$$, 'setup: key t1 is the child');
SELECT is(harvest.cancel_cross_shard_child((SELECT child FROM xs_ids), 'request_cancel', (SELECT parent FROM xs_ids)),
          'cancel_requested', 'cancel_cross_shard_child(): request_cancel');
SELECT is(harvest.cancel_cross_shard_child((SELECT child FROM xs_ids), 'request_cancel', (SELECT parent FROM xs_ids)),
          'cancel_requested', 'asked again');
SELECT is((SELECT count(*) FROM harvest.events AS e, xs_ids
           WHERE e.execution_id = xs_ids.child AND e.event_type = 'WorkflowCancelRequested'), 1::bigint,
          'one WorkflowCancelRequested');
SELECT is((SELECT e.end_owed_to_shard FROM harvest.executions AS e, xs_ids WHERE e.id = xs_ids.child), NULL,
          'cancel_cross_shard_child(): the parent ended, the child''s end is owed to nobody');
SELECT is(pg_temp.decide('t1', '[{"type": "continue_as_new", "input": [2]}]'), 'CONTINUED_AS_NEW',
          'setup: the child continues as new');
SELECT results_eq(
    $$SELECT r.execution_id <> xs_ids.child, r.status FROM xs_ids, harvest.get_cross_shard_child(child) AS r$$,
    $$VALUES (true, 'RUNNING'::text)$$, 'get_cross_shard_child(): follows the successor');
SELECT is(harvest.cancel_cross_shard_child((SELECT child FROM xs_ids), 'terminate', (SELECT parent FROM xs_ids)),
          'terminated', 'cancel_cross_shard_child(): terminate reaches the successor');
SELECT results_eq(
    $$SELECT r.status, r.failure ->> 'error_type' FROM xs_ids, harvest.get_cross_shard_child(child) AS r$$,
    $$VALUES ('TERMINATED'::text, 'Terminated'::text)$$, 'whose end the pull reads');
SELECT is(harvest.cancel_cross_shard_child((SELECT child FROM xs_ids), 'terminate', (SELECT parent FROM xs_ids)),
          'not_running', 'an ended child: not_running');
SELECT is(harvest.cancel_cross_shard_child((SELECT child FROM xs_ids), 'abandon', (SELECT parent FROM xs_ids)),
          'abandoned', 'abandon does nothing');

-- ------------------------------------------------------------ the owed end (clear_owed_child_end)
CREATE TEMP TABLE xo_ids AS SELECT ('0000' || substr(gen_random_uuid()::text, 5))::uuid AS child;
SELECT is((SELECT s.outcome FROM xo_ids, xs_ids, harvest.start_cross_shard_child(xo_ids.child, xs_ids.parent, 5,
               'xs_child', 't3', 'xq_t3', '[]', 'terminate') AS s), 'started', 'setup: another cross-shard child');
SELECT lives_ok($$SELECT pg_temp.remember('t3', (SELECT child FROM xo_ids))$$, 'setup: key t3 is the child');
SELECT is(pg_temp.decide('t3', '[{"type": "continue_as_new", "input": [2]}]'), 'CONTINUED_AS_NEW',
          'setup: it continues as new');
SELECT results_eq(
    $$SELECT e.id = xo_ids.child, e.end_owed_to_shard FROM harvest.executions AS e, xo_ids
      WHERE e.workflow_id = 't3' ORDER BY e.created_at, e.id = xo_ids.child DESC$$,
    $$VALUES (true, NULL::integer), (false, 1)$$,
    '_continue_as_new: the owed end moves to the successor, the run that will end');
SELECT ok(harvest.clear_owed_child_end((SELECT child FROM xo_ids)),
          'clear_owed_child_end(): the parent has the end');
SELECT is_empty($$SELECT 1 FROM harvest.executions WHERE workflow_id = 't3' AND end_owed_to_shard IS NOT NULL$$,
                '... so no run of the chain is owed');
SELECT ok(NOT harvest.clear_owed_child_end((SELECT child FROM xo_ids)), 'acknowledged again: false');
SELECT ok(NOT harvest.clear_owed_child_end('00000000-0000-4000-8000-0000000000fe'), 'no such child: false');

-- ------------------------------------------------------------ the current run, locked (_lock_current_cross_shard_child)
-- (The race it closes, a continue-as-new committing while the lock waits, needs two sessions:
-- tests/integration/test_cross_shard_cancel_race.py.)
SELECT results_eq(
    $$SELECT r.id <> xo_ids.child, r.status, r.continued_from = xo_ids.child
      FROM xo_ids, harvest._lock_current_cross_shard_child(xo_ids.child) AS r$$,
    $$VALUES (true, 'RUNNING'::text, true)$$,
    '_lock_current_cross_shard_child(): a rotated child is its successor, not the closed first run');
SELECT is((SELECT r.status FROM xs_ids, harvest._lock_current_cross_shard_child(xs_ids.child) AS r), 'TERMINATED',
          '_lock_current_cross_shard_child(): an ended chain is its last run');
SELECT is((SELECT r.id FROM harvest._lock_current_cross_shard_child('00000000-0000-4000-8000-0000000000fd') AS r),
          NULL, '_lock_current_cross_shard_child(): no such child here is NULL');

-- ------------------------------------------------------------ a chain whose current run is gone
-- t3's successor erased by hand (or purged): the chain ends at its first run, CONTINUED_AS_NEW,
-- with no later run to find. Retrying cannot make one: the helper answers that run at once, so
-- the clear and the policy end (they raised 40001 after 10 tries, and the pump retried for ever).
SELECT lives_ok($$DELETE FROM harvest.executions AS e USING xo_ids WHERE e.workflow_id = 't3' AND e.id <> xo_ids.child$$,
                'setup: the successor of t3 is erased by hand');
SELECT results_eq(
    $$SELECT r.id = xo_ids.child, r.status FROM xo_ids, harvest._lock_current_cross_shard_child(xo_ids.child) AS r$$,
    $$VALUES (true, 'CONTINUED_AS_NEW'::text)$$,
    '_lock_current_cross_shard_child(): a chain with no later run is its last run, answered at once');
SELECT ok(NOT harvest.clear_owed_child_end((SELECT child FROM xo_ids)),
          'clear_owed_child_end(): nothing is owed on a broken chain: false, not a retry');
SELECT is(harvest.cancel_cross_shard_child((SELECT child FROM xo_ids), 'terminate', (SELECT parent FROM xs_ids)),
          'not_running', 'cancel_cross_shard_child(): a broken chain has no run to end: not_running');
SELECT results_eq(
    $$SELECT r.id = xo_ids.child, r.status FROM xo_ids, harvest._current_cross_shard_run(xo_ids.child) AS r$$,
    $$VALUES (true, 'CONTINUED_AS_NEW'::text)$$,
    '_current_cross_shard_run(): a broken chain is its last run (it read as a run of NULLs: no id, no status)');
SELECT throws_like(
    $$SELECT * FROM xo_ids, harvest.get_cross_shard_child(xo_ids.child)$$,
    '%has no current run on this shard (0): its chain ends at run %which continued as new, and no later run is here%',
    'get_cross_shard_child(): HR002 naming the broken chain''s last run (the pump keeps the row with it)');
SELECT is((SELECT r.status FROM xs_ids, harvest._current_cross_shard_run(xs_ids.child) AS r), 'TERMINATED',
          '_current_cross_shard_run(): a chain''s current run, past its continue-as-new');
-- A chain that rotated twice, its current run erased: it ends at its second run (which holds
-- the link to the erased one), not at the child's first run, which the error named.
CREATE TEMP TABLE xb_ids AS SELECT ('0000' || substr(gen_random_uuid()::text, 5))::uuid AS child;
SELECT is((SELECT s.outcome FROM xb_ids, xs_ids, harvest.start_cross_shard_child(xb_ids.child, xs_ids.parent, 7,
               'xs_child', 't4', 'xq_t4', '[]', 'terminate') AS s), 'started', 'setup: a child that rotates twice');
SELECT lives_ok($$SELECT pg_temp.remember('t4', (SELECT child FROM xb_ids))$$, 'setup: key t4 is the child');
SELECT is(pg_temp.decide('t4', '[{"type": "continue_as_new", "input": [2]}]'), 'CONTINUED_AS_NEW',
          'setup: it continues as new');
CREATE TEMP TABLE xb_second AS
SELECT e.id FROM harvest.executions AS e WHERE e.workflow_id = 't4' AND e.status = 'RUNNING';
SELECT lives_ok($$SELECT pg_temp.remember('t4', (SELECT id FROM xb_second))$$, 'setup: key t4 is its second run');
SELECT is(pg_temp.decide('t4', '[{"type": "continue_as_new", "input": [3]}]'), 'CONTINUED_AS_NEW',
          'setup: which continues as new too');
SELECT lives_ok($$DELETE FROM harvest.executions WHERE workflow_id = 't4' AND status = 'RUNNING'$$,
                'setup: its third run, the current one, is erased by hand');
SELECT results_eq(
    $$SELECT r.id = xb_second.id, r.status FROM xb_ids, xb_second, harvest._current_cross_shard_run(xb_ids.child) AS r$$,
    $$VALUES (true, 'CONTINUED_AS_NEW'::text)$$,
    '_current_cross_shard_run(): a broken chain is its last run, the second, not the child''s first');
SELECT throws_like(
    $$SELECT * FROM xb_ids, harvest.get_cross_shard_child(xb_ids.child)$$,
    '%its chain ends at run ' || (SELECT id FROM xb_second) || ', which continued as new%',
    'get_cross_shard_child(): HR002 names the chain''s last run');

-- ------------------------------------------------------------ the claim's order: due time, then age
-- A running child is leased for the pump's poll and due again when the lease ends: it goes behind
-- the rows not read since (by created_at alone, the oldest were due again at every tick, and a
-- claim's limit of them kept the newer ones from ever being read: migration 0118).
DELETE FROM harvest.cross_shard_children;
SET LOCAL harvest.fake_now = '2030-01-02 00:00:00+00';
INSERT INTO harvest.cross_shard_children (
    child_execution_id, parent_execution_id, parent_seq, target_shard, workflow_name, workflow_id, queue, input,
    parent_close_policy, status, next_attempt_at, created_at
)
SELECT gen_random_uuid(), gen_random_uuid(), g, 1, 'xo_child', 'xo' || g, 'xq', '[]', 'terminate', 'running', NULL,
       '2030-01-01 00:00:00+00'::timestamptz + make_interval(secs => g)
FROM generate_series(1, 3) AS g;
SELECT results_eq($$SELECT workflow_id FROM harvest.claim_cross_shard_children(2, 1) ORDER BY 1$$, ARRAY['xo1', 'xo2'],
                  'claim_cross_shard_children(): rows due at once, oldest first');
SET LOCAL harvest.fake_now = '2030-01-02 00:00:05+00';
SELECT results_eq($$SELECT workflow_id FROM harvest.claim_cross_shard_children(2, 1) ORDER BY 1$$, ARRAY['xo1', 'xo3'],
                  'claim_cross_shard_children(): the rows polled go behind the one not read since');
SELECT results_eq($$SELECT workflow_id FROM harvest.claim_cross_shard_children(2, 1)$$, ARRAY['xo2'],
                  'claim_cross_shard_children(): then the rest that are due');

SELECT * FROM finish();
ROLLBACK;
