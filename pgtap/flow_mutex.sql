-- functions/flow_mutex.sql: harvest._mutex_marker, harvest._mutex_grant_next, harvest._mutex_release_all,
-- harvest.grant_mutexes, harvest.list_mutexes (a decision's marker applied by _decide_record_marker),
-- harvest._lock_mutex_keys (several runs' keys in key order).
BEGIN;
SELECT plan(15);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
CREATE TEMP TABLE m ON COMMIT DROP AS
SELECT n, (harvest.start_workflow('wf_m', '[]', 'm' || n, 'mq')).execution_id FROM generate_series(1, 2) AS n;
-- Both ask for key K with a mutex_acquire marker (what ctx.mutex sends).
SELECT harvest.complete_workflow_task(c.task_id, c.fencing_token, 1,
    '[{"type": "record_marker", "seq": 1, "kind": "mutex_acquire", "value": {"key": "K"}}]')
FROM harvest.claim_tasks('w', ARRAY['mq'], 10) AS c;
SELECT results_eq($$SELECT holder_execution_id, waiters FROM harvest.list_mutexes('K')$$,
    $$SELECT (SELECT execution_id FROM m WHERE n = 1), jsonb_build_array((SELECT execution_id FROM m WHERE n = 2))$$,
    'list_mutexes(): one holder, one FIFO waiter (the decisions'' markers applied)');
-- What each run waits on says so (harvest workflow stack), not "nothing".
SELECT is(harvest.get_execution_stack((SELECT execution_id FROM m WHERE n = 2)) -> 'mutexes',
    jsonb_build_array(jsonb_build_object('key', 'K', 'status', 'waiting', 'since', '2030-01-01 00:00:00+00'::timestamptz,
                                         'holder_execution_id', (SELECT execution_id FROM m WHERE n = 1))),
    'get_execution_stack(): a waiter shows the key it waits for and who holds it');
SELECT is(harvest.get_execution_stack((SELECT execution_id FROM m WHERE n = 1), 5) #> '{mutexes,0,status}', '"held"',
          'get_execution_stack(): the holder shows the key as held');
SELECT is((SELECT event_data FROM harvest.events WHERE event_type = 'MutexAcquired'
           AND execution_id = (SELECT execution_id FROM m WHERE n = 1)), '{"seq": 1, "key": "K"}'::jsonb,
          'the holder gets MutexAcquired{seq, key}');
SELECT lives_ok($$SELECT harvest._mutex_marker((SELECT execution_id FROM m WHERE n = 1), 2, 'mutex_release', 'K')$$,
                '_mutex_marker(): release');
SELECT is((SELECT holder_execution_id FROM harvest.list_mutexes('K')), (SELECT execution_id FROM m WHERE n = 2),
          'the next waiter holds the key (_mutex_grant_next)');
SELECT lives_ok($$SELECT harvest.terminate_workflow((SELECT execution_id FROM m WHERE n = 2), 'x')$$, 'setup: the holder ends');
SELECT is_empty($$SELECT * FROM harvest.list_mutexes('K')$$, 'a run that ends releases its keys (_mutex_release_all)');
SELECT harvest._mutex_marker((SELECT execution_id FROM m WHERE n = 1), 10, 'mutex_acquire', 'K2');
SELECT harvest._mutex_marker((harvest.start_workflow('wf_m', '[]', 'm3', 'mq')).execution_id, 1, 'mutex_acquire', 'K2');
SELECT harvest._mutex_marker((SELECT id FROM harvest.executions WHERE workflow_id = 'm3'), 2, 'mutex_release', 'K2');
SELECT results_eq($$SELECT holder_execution_id, waiters FROM harvest.list_mutexes('K2')$$,
    $$SELECT (SELECT execution_id FROM m WHERE n = 1), '[]'::jsonb$$,
    'a release by a run still waiting withdraws its request (a cancelled ctx.mutex wait)');
SELECT is(harvest.grant_mutexes(), 0, 'grant_mutexes(): nothing to grant');
SELECT is(harvest._mutex_grant_next('K'), false, '_mutex_grant_next() of a key nobody waits for');
-- Only the decision that issues a mutex marker applies it: an event row inserted otherwise
-- (a reset's fork or a moved run copying its history; a plain INSERT here) takes no key.
UPDATE harvest.executions SET last_event_id = last_event_id + 2 WHERE id = (SELECT execution_id FROM m WHERE n = 1);
INSERT INTO harvest.events (execution_id, event_id, event_type, event_data, created_at)
SELECT e.id, e.last_event_id - 1, 'MarkerRecorded',
       '{"seq": 20, "kind": "side_effect", "value": {"key": "K3"}}', harvest.now()
FROM harvest.executions AS e WHERE e.id = (SELECT execution_id FROM m WHERE n = 1);
SELECT is_empty($$SELECT * FROM harvest.list_mutexes('K3')$$, 'a marker of another kind takes no key');
INSERT INTO harvest.events (execution_id, event_id, event_type, event_data, created_at)
SELECT e.id, e.last_event_id, 'MarkerRecorded',
       '{"seq": 21, "kind": "mutex_acquire", "value": {"key": "K3"}}', harvest.now()
FROM harvest.executions AS e WHERE e.id = (SELECT execution_id FROM m WHERE n = 1);
SELECT is_empty($$SELECT * FROM harvest.list_mutexes('K3')$$,
                'a plain INSERT of a mutex_acquire marker (a copied history) takes no key');
-- A mutex marker in a closing decision takes its key before the close gives the run's
-- keys back (_decide_record_marker appends it before the closing append and close).
CREATE TEMP TABLE m4 ON COMMIT DROP AS
SELECT (harvest.start_workflow('wf_m', '[]', 'm4', 'mq4')).execution_id;
SELECT harvest.complete_workflow_task(c.task_id, c.fencing_token, 1,
    '[{"type": "record_marker", "seq": 1, "kind": "mutex_acquire", "value": {"key": "K4"}},
      {"type": "complete_workflow", "result": null}]')
FROM harvest.claim_tasks('w', ARRAY['mq4'], 10) AS c;
SELECT results_eq($$SELECT status FROM harvest.executions WHERE id = (SELECT execution_id FROM m4)$$,
                  $$VALUES ('COMPLETED'::text)$$, 'setup: the run took K4 and ended in one decision');
SELECT is_empty($$SELECT * FROM harvest.list_mutexes('K4')$$,
                'a run that takes a key in its closing decision gives it back');
SELECT * FROM finish();
ROLLBACK;

-- _lock_mutex_keys: the keys given and those the runs hold or wait for, each once; not another run's.
BEGIN;
SELECT plan(2);
CREATE TEMP TABLE lk ON COMMIT DROP AS
SELECT n, (harvest.start_workflow('wf_m', '[]', 'lk' || n, 'mq')).execution_id FROM generate_series(1, 3) AS n;
INSERT INTO harvest.mutex_locks (lock_key, holder_execution_id, acquired_at)
SELECT 'L' || n, execution_id, harvest.now() FROM lk;
INSERT INTO harvest.mutex_waiters (lock_key, execution_id, seq, enqueued_at)
SELECT 'L3', execution_id, 9, harvest.now() FROM lk WHERE n = 1;
CREATE FUNCTION pg_temp.keys_locked() RETURNS text[] LANGUAGE sql AS $fn$
    SELECT array_agg(k ORDER BY k) FROM unnest(ARRAY['L1', 'L2', 'L3', 'L4']) AS k
    WHERE EXISTS (SELECT 1 FROM pg_locks AS l WHERE l.locktype = 'advisory' AND l.pid = pg_backend_pid()
                  AND l.objid::integer = hashtext('harvest.mutex:' || k));
$fn$;
SELECT harvest._lock_mutex_keys(ARRAY(SELECT execution_id FROM lk WHERE n = 1), ARRAY['L4', '', 'L4']);
SELECT is(pg_temp.keys_locked(), ARRAY['L1', 'L3', 'L4'],
          '_lock_mutex_keys(): the key given, the key the run holds and the one it waits for; not L2 (another run''s)');
SELECT lives_ok($$SELECT harvest._lock_mutex_keys(ARRAY[]::uuid[]), harvest._lock_mutex_keys(NULL, NULL)$$,
                '_lock_mutex_keys() of no runs and no keys: nothing');
SELECT * FROM finish();
ROLLBACK;
