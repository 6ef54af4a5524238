-- functions/workers.sql: harvest.register_worker, harvest.heartbeat_worker,
-- harvest.release_worker_tasks, harvest.begin_worker_drain, harvest.stop_worker, harvest.release_task,
-- harvest.set_worker_sleeping, harvest.register_workflows, harvest.unregister_workflow; then the fleet
-- (harvest._worker_health, harvest._drain_outcome, list_workers, get_worker, get_worker_health,
-- drain_worker, preview_drain), harvest.get_worker_drain_deadline and harvest._unknown_to, each in a
-- transaction of its own.
BEGIN;
SELECT plan(62);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- register_worker
SELECT lives_ok($$SELECT harvest.register_worker('w1', ARRAY['q1', 'q2'], 'host-a', 4242, 5, '{"version": "1"}')$$,
                'register_worker() registers a worker');
SELECT results_eq(
    $$SELECT queues, hostname, pid, status, started_at, last_heartbeat_at, heartbeat_interval_secs, drain_deadline,
             metadata FROM harvest.workers WHERE id = 'w1'$$,
    $$VALUES (ARRAY['q1', 'q2'], 'host-a'::text, 4242, 'active'::text, '2030-01-01 00:00:00+00'::timestamptz,
              '2030-01-01 00:00:00+00'::timestamptz, 5::double precision, NULL::timestamptz, '{"version": "1"}'::jsonb)$$,
    'the worker row: queues, host, pid, active, started and heartbeated now');
SELECT lives_ok($$SELECT harvest.register_worker('w2', ARRAY['q1'], 'host-b', 1)$$, 'register_worker() with defaults');
SELECT results_eq($$SELECT heartbeat_interval_secs, metadata FROM harvest.workers WHERE id = 'w2'$$,
                  $$VALUES (10::double precision, '{}'::jsonb)$$, 'defaults: a 10 s interval, empty metadata');
SELECT throws_ok($$SELECT harvest.register_worker('w_busy', ARRAY['q'], 'h', 1, 0)$$, 'HR001',
                 'heartbeat_interval_secs 0 is out of range: allowed 0.1 to 3600 seconds',
                 'a 0 s heartbeat interval: HR001 (it made a busy loop)');
SELECT is((SELECT count(*) FROM harvest.workers WHERE id = 'w_busy'), 0::bigint, 'a refused worker is not written');
SELECT throws_ok($$SELECT harvest.register_worker('', ARRAY['q'], 'h', 1)$$, 'HR001',
                 'a worker needs an id and at least one queue', 'register_worker() without an id: HR001');
SELECT throws_ok($$SELECT harvest.register_worker(NULL, ARRAY['q'], 'h', 1)$$, 'HR001', NULL,
                 'register_worker() with a NULL id: HR001');
SELECT throws_ok($$SELECT harvest.register_worker('w3', ARRAY[]::text[], 'h', 1)$$, 'HR001', NULL,
                 'register_worker() without queues: HR001');

-- Registering again (a restart) replaces the row and makes it active.
UPDATE harvest.workers SET status = 'draining', drain_deadline = '2030-01-01 00:10:00+00' WHERE id = 'w1';
SET LOCAL harvest.fake_now = '2030-01-01 00:01:00+00';
SELECT lives_ok($$SELECT harvest.register_worker('w1', ARRAY['q3'], 'host-c', 99, 2, NULL)$$,
                'register_worker() of a known id');
SELECT results_eq(
    $$SELECT queues, hostname, pid, status, started_at, heartbeat_interval_secs, drain_deadline, metadata
      FROM harvest.workers WHERE id = 'w1'$$,
    $$VALUES (ARRAY['q3'], 'host-c'::text, 99, 'active'::text, '2030-01-01 00:01:00+00'::timestamptz,
              2::double precision, NULL::timestamptz, '{}'::jsonb)$$,
    're-registering replaces queues, host, pid and metadata, and is active again with no drain deadline');
SELECT is((SELECT count(*) FROM harvest.workers WHERE id = 'w1'), 1::bigint, 'one row per worker id');

-- heartbeat_worker
SET LOCAL harvest.fake_now = '2030-01-01 00:02:00+00';
SELECT is(harvest.heartbeat_worker('w2'), 'active', 'heartbeat_worker() answers the status');
SELECT is((SELECT last_heartbeat_at FROM harvest.workers WHERE id = 'w2'), '2030-01-01 00:02:00+00'::timestamptz,
          'heartbeat_worker() records the time');
UPDATE harvest.workers SET status = 'draining' WHERE id = 'w2';
SELECT is(harvest.heartbeat_worker('w2'), 'draining', 'heartbeat_worker() tells a worker to drain');
SELECT throws_ok($$SELECT harvest.heartbeat_worker('ghost')$$, 'HR002', 'worker ghost is not registered',
                 'heartbeat_worker() of an unknown worker: HR002');

-- release_worker_tasks: give back without counting a failed attempt.
CREATE TEMP TABLE held (what text PRIMARY KEY, task_id bigint, token bigint) ON COMMIT DROP;
CREATE FUNCTION pg_temp.held(p_what text) RETURNS bigint LANGUAGE sql AS $fn$
    SELECT task_id FROM held WHERE what = p_what;
$fn$;
CREATE FUNCTION pg_temp.setup() RETURNS void LANGUAGE sql AS $fn$
    -- An activity and a workflow task on queue rq, held by w1; a workflow task on rq2, held by w2.
    SELECT pg_temp.start_decided('act', 'wk_wf', 'rq_decide',
                                 '[{"type": "schedule_activity", "seq": 1, "name": "work", "queue": "rq"}]');
    SELECT pg_temp.start_run('wf', 'wk_wf', 'rq');
    SELECT pg_temp.start_run('other', 'wk_wf', 'rq2');
    INSERT INTO held SELECT c.kind, c.task_id, c.fencing_token FROM harvest.claim_tasks('w1', ARRAY['rq'], 10) AS c;
    INSERT INTO held SELECT 'other', c.task_id, c.fencing_token FROM harvest.claim_tasks('w2', ARRAY['rq2'], 10) AS c;
$fn$;
SELECT pg_temp.setup();
SET LOCAL harvest.fake_now = '2030-01-01 00:03:00+00';
SELECT is(harvest.release_worker_tasks('w1', ARRAY[pg_temp.held('activity')]), 1,
          'release_worker_tasks(worker, ids) releases only the tasks named');
SELECT results_eq(
    $$SELECT status, lease_owner, lease_expires_at, due_at, attempt FROM harvest.tasks WHERE id = pg_temp.held('activity')$$,
    $$VALUES ('pending'::text, NULL::text, NULL::timestamptz, '2030-01-01 00:03:00+00'::timestamptz, 0)$$,
    'a released activity is pending, due now, and its attempt is not counted');
SELECT is((SELECT status FROM harvest.tasks WHERE id = pg_temp.held('workflow')), 'running',
          'the worker''s other task is still held');
SELECT is(harvest.release_worker_tasks('w1'), 1, 'release_worker_tasks(worker) releases everything it holds');
SELECT results_eq($$SELECT status, lease_owner, attempt FROM harvest.tasks WHERE id = pg_temp.held('workflow')$$,
                  $$VALUES ('pending'::text, NULL::text, 1)$$, 'a released workflow task is pending (attempt kept)');
SELECT results_eq($$SELECT status, lease_owner FROM harvest.tasks WHERE id = pg_temp.held('other')$$,
                  $$VALUES ('running'::text, 'w2'::text)$$, 'another worker''s task is untouched');
SELECT is(harvest.release_worker_tasks('w1'), 0, 'nothing left to release: 0');
SELECT throws_ok(format($$SELECT harvest.complete_activity(%s, %s)$$,
                        pg_temp.held('activity'), (SELECT token FROM held WHERE what = 'activity')),
                 'HR004', NULL, 'the releasing worker''s token is stale: HR004');
SELECT results_eq($$SELECT task_id, attempt FROM harvest.claim_tasks('w9', ARRAY['rq']) WHERE kind = 'activity'$$,
                  $$SELECT pg_temp.held('activity'), 1$$, 'another worker claims the activity as attempt 1 again');

-- begin_worker_drain: a worker told to stop records draining first (a SIGTERM).
SET LOCAL harvest.fake_now = '2030-01-01 00:03:30+00';
SELECT lives_ok($$SELECT harvest.register_worker('sig', ARRAY['sq'], 'h', 1)$$, 'setup: an active worker');
SELECT is(harvest.begin_worker_drain('sig'), 'draining', 'begin_worker_drain() marks an active worker draining');
SELECT results_eq($$SELECT status, last_heartbeat_at, drain_deadline FROM harvest.workers WHERE id = 'sig'$$,
                  $$VALUES ('draining'::text, '2030-01-01 00:03:30+00'::timestamptz, NULL::timestamptz)$$,
                  'the row reads draining, heartbeated now, with no deadline');
UPDATE harvest.workers SET drain_deadline = '2030-01-01 01:00:00+00' WHERE id = 'sig';
SELECT is(harvest.begin_worker_drain('sig'), 'draining', 'begin_worker_drain() of a draining worker: draining');
SELECT is((SELECT drain_deadline FROM harvest.workers WHERE id = 'sig'), '2030-01-01 01:00:00+00'::timestamptz,
          'a remote drain''s deadline is kept');
SELECT throws_ok($$SELECT harvest.begin_worker_drain('ghost')$$, 'HR002', 'worker ghost is not registered',
                 'begin_worker_drain() of an unknown worker: HR002');

-- stop_worker: releases what it holds and marks the worker stopped.
SET LOCAL harvest.fake_now = '2030-01-01 00:04:00+00';
SELECT is(harvest.stop_worker('w2'), 1, 'stop_worker() returns how many tasks it released');
SELECT results_eq($$SELECT status, last_heartbeat_at FROM harvest.workers WHERE id = 'w2'$$,
                  $$VALUES ('stopped'::text, '2030-01-01 00:04:00+00'::timestamptz)$$, 'the worker is stopped');
SELECT is((SELECT status FROM harvest.tasks WHERE id = pg_temp.held('other')), 'pending',
          'its task is pending again');
SELECT is(harvest.heartbeat_worker('w2'), 'stopped', 'a stopped worker hears so on its heartbeat');
SELECT is(harvest.begin_worker_drain('w2'), 'stopped', 'begin_worker_drain() leaves a stopped worker stopped');
SELECT throws_ok($$SELECT harvest.stop_worker('ghost')$$, 'HR002', 'worker ghost is not registered',
                 'stop_worker() of an unknown worker is not found');

CREATE TEMP TABLE rel (task_id bigint, token bigint) ON COMMIT DROP;
CREATE FUNCTION pg_temp.rel(p_what text) RETURNS bigint LANGUAGE sql AS $fn$
    SELECT CASE p_what WHEN 'id' THEN task_id ELSE token END FROM rel;
$fn$;
CREATE FUNCTION pg_temp.setup_release() RETURNS void LANGUAGE sql AS $fn$
    SELECT pg_temp.start_decided('rel-act', 'wk_wf', 'rel_decide',
                                 '[{"type": "schedule_activity", "seq": 1, "name": "work", "queue": "rel_q"}]');
    INSERT INTO rel SELECT c.task_id, c.fencing_token FROM harvest.claim_tasks('w9', ARRAY['rel_q'], 1) AS c;
$fn$;

-- release_task: one task, only with the current fencing token.
SET LOCAL harvest.fake_now = '2030-01-01 00:05:00+00';
SELECT pg_temp.setup_release();
SELECT is(harvest.release_task(pg_temp.rel('id'), pg_temp.rel('token') - 1), false,
          'release_task() with a stale token releases nothing');
SELECT is((SELECT status FROM harvest.tasks WHERE id = pg_temp.rel('id')), 'running', 'the newer claim is kept');
SELECT is(harvest.release_task(pg_temp.rel('id'), pg_temp.rel('token')), true,
          'release_task() with the current token releases it');
SELECT results_eq($$SELECT status, lease_owner, attempt FROM harvest.tasks WHERE id = pg_temp.rel('id')$$,
                  $$VALUES ('pending'::text, NULL::text, 0)$$, 'pending again, the attempt not counted');

-- set_worker_sleeping: the mark that tells producers to notify (see _notify_queue).
SELECT lives_ok($$SELECT harvest.register_worker('sleepy', ARRAY['zq'], 'h', 1)$$, 'setup: a worker on zq');
SELECT is(harvest.set_worker_sleeping('sleepy', true), true,
          'set_worker_sleeping() marks a worker asleep, no producer of its queues committing');
SELECT is((SELECT sleeping FROM harvest.workers WHERE id = 'sleepy'), true, 'the mark is stored');
SELECT is(harvest.set_worker_sleeping('sleepy', true), true, 'asked again, the mark stands');
SELECT is(harvest.set_worker_sleeping('sleepy', false), true, 'cleared: nothing to wait for');
SELECT is((SELECT sleeping FROM harvest.workers WHERE id = 'sleepy'), false, 'and cleared');

-- register_workflows: the names a worker's App can run on each queue it polls.
SET LOCAL harvest.fake_now = '2030-01-01 00:06:00+00';
SELECT is(harvest.register_workflows(ARRAY['rw_a', 'rw_b'], ARRAY['wf1', 'wf2', 'wf1']), 4,
          'register_workflows() registers every (queue, name) pair once and counts the new ones');
SET LOCAL harvest.fake_now = '2030-01-01 00:07:00+00';
SELECT is(harvest.register_workflows(ARRAY['rw_a'], ARRAY['wf1', 'wf3']), 1, 'registering again counts only new pairs');
SELECT results_eq(
    $$SELECT queue, workflow_name, first_registered_at, last_registered_at FROM harvest.registered_workflows
      WHERE queue LIKE 'rw\_%' ORDER BY 1, 2$$,
    $$VALUES ('rw_a'::text, 'wf1'::text, '2030-01-01 00:06:00+00'::timestamptz, '2030-01-01 00:07:00+00'::timestamptz),
             ('rw_a', 'wf2', '2030-01-01 00:06:00+00', '2030-01-01 00:06:00+00'),
             ('rw_a', 'wf3', '2030-01-01 00:07:00+00', '2030-01-01 00:07:00+00'),
             ('rw_b', 'wf1', '2030-01-01 00:06:00+00', '2030-01-01 00:06:00+00'),
             ('rw_b', 'wf2', '2030-01-01 00:06:00+00', '2030-01-01 00:06:00+00')$$,
    'a re-registered pair keeps its first time and refreshes its last');
SELECT is(harvest.register_workflows(ARRAY['rw_c'], ARRAY[]::text[]), 0, 'no names: nothing registered');
SELECT throws_ok($$SELECT harvest.register_workflows(ARRAY[]::text[], ARRAY['wf1'])$$, 'HR001',
                 'register_workflows needs at least one non-empty queue', 'register_workflows() without a queue: HR001');
SELECT throws_ok($$SELECT harvest.register_workflows(ARRAY['rw_a'], ARRAY['wf1', ''])$$, 'HR001',
                 'register_workflows needs an array of non-empty workflow names',
                 'register_workflows() with an empty name: HR001');
SELECT throws_ok($$SELECT harvest.register_workflows(ARRAY['rw_a'], NULL)$$, 'HR001', NULL,
                 'register_workflows() with NULL names: HR001');
-- _workflow_registered: the one registration check of a start, a schedule and the listing.
SELECT is(harvest._workflow_registered('wf3', 'rw_a'), true, '_workflow_registered(): registered on the queue, true');
SELECT is(harvest._workflow_registered('wf3', 'rw_b'), false,
          '_workflow_registered(): the queue''s workers registered other names only, false');
SELECT is(harvest._workflow_registered('wf3', 'rw_none'), NULL::boolean,
          '_workflow_registered(): nothing registered on the queue, NULL (it cannot be checked)');
SELECT is((SELECT count(*) FROM harvest._workflow_registered('wf1', 'rw_a')), 1::bigint, '_workflow_registered(): one row');
SELECT is((SELECT p.proretset AND p.provolatile = 's' AND NOT p.proisstrict AND NOT p.prosecdef
                  AND p.proconfig IS NULL AND l.lanname = 'sql'
           FROM pg_proc AS p JOIN pg_language AS l ON l.oid = p.prolang
           WHERE p.oid = 'harvest._workflow_registered(text, text)'::regprocedure), true,
          '_workflow_registered() is a STABLE SQL set-returning function, not strict, no SET: it inlines');
-- unregister_workflow: retire a name from a queue.
SELECT is(harvest.unregister_workflow('rw_a', 'wf3'), true, 'unregister_workflow() of a registered name: true');
SELECT is(harvest.unregister_workflow('rw_a', 'wf3'), false, 'and of a name no longer registered: false');
SELECT is((SELECT count(*) FROM harvest.audit_log WHERE operation = 'workflow.unregister' AND target = 'wf3'
           AND details ->> 'queue' = 'rw_a'), 1::bigint,
          'unregister_workflow() is audited once, for the call that removed the name');

SELECT * FROM finish();
ROLLBACK;

-- The fleet seen by an operator: list_workers, get_worker, get_worker_health, drain_worker, preview_drain.
BEGIN;
SELECT plan(19);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

SELECT harvest.register_worker('fl-live', ARRAY['email', 'default'], 'h1', 1, 5);
SELECT harvest.register_worker('fl-other', ARRAY['default'], 'h2', 2, 5);
SELECT harvest.register_worker('fl-stale', ARRAY['email'], 'h3', 3, 5);
UPDATE harvest.workers SET last_heartbeat_at = '2029-12-31 23:59:00+00' WHERE id = 'fl-stale';

SELECT is((SELECT health FROM harvest.list_workers() WHERE worker_id = 'fl-stale'), 'stale',
          'silent for more than 2 heartbeat intervals is stale');
SELECT is((SELECT array_agg(worker_id ORDER BY worker_id) FROM harvest.list_workers(p_queue => 'email')),
          ARRAY['fl-live', 'fl-stale'], 'filter by queue');
SELECT throws_ok($$SELECT * FROM harvest.list_workers(p_health => 'sick')$$, 'HR001', NULL, 'unknown health refused');
SELECT results_eq($$SELECT worker_id, total FROM harvest.list_workers(p_limit => 2)$$,
                  $$VALUES ('fl-stale'::text, 3::bigint), ('fl-live', 3)$$,
                  'list_workers(p_limit): the first in the list''s order (stale first), each with the total');
SELECT throws_ok($$SELECT * FROM harvest.list_workers(p_limit => 0)$$, 'HR001', NULL, 'a limit below 1 refused');
SELECT is(harvest.get_worker_health() -> 'by_queue', '{"email": 2, "default": 2}'::jsonb,
          'by_queue counts every worker that is not stopped, stale ones too (issue 12 item 19)');
SELECT is(harvest.get_worker_health() -> 'by_queue_health',
          '{"email": {"healthy": 1, "draining": 0, "stale": 1}, "default": {"healthy": 2, "draining": 0, "stale": 0}}'::jsonb,
          'by_queue_health splits each queue into healthy, draining and stale');
SELECT is(harvest.get_worker_health() -> 'by_shard', '{"0": 3}'::jsonb, 'by_shard: the one shard, 0');
SELECT is((harvest.get_worker_health() ->> 'stale')::int, 1, 'stale count');
SELECT is(harvest.get_worker('fl-live') -> 'claimed_task_ids', '[]'::jsonb, 'get_worker lists claimed tasks');
SELECT is((SELECT uncovered_queues FROM harvest.preview_drain(p_worker_id => 'fl-live')), ARRAY['email'],
          'preview: draining fl-live leaves email without a live worker');
SELECT is(harvest.drain_worker('fl-live', NULL, 'pgtap') ->> 'outcome', 'accepted', 'drain accepted');
SELECT is(harvest.heartbeat_worker('fl-live'), 'draining', 'the worker hears it on its heartbeat');
SELECT is(harvest.drain_worker('fl-live') ->> 'outcome', 'already_draining', 'twice: already_draining');
SELECT is(harvest.drain_worker('fl-stale') ->> 'outcome', 'stale_worker', 'stale worker');
SELECT is(harvest.drain_worker('fl-none') ->> 'outcome', 'not_found', 'unknown worker');
SELECT is((SELECT count(*) FROM harvest.list_audit_log(p_operation => 'worker.drain')), 4::bigint,
          'every drain request is audited');

SELECT is(harvest._worker_health((SELECT w FROM harvest.workers w WHERE w.id = 'fl-other')), 'healthy',
          '_worker_health of a fresh worker');
SELECT is(harvest._drain_outcome((SELECT w FROM harvest.workers w WHERE w.id = 'fl-other')), 'accepted',
          '_drain_outcome of an active worker');

SELECT * FROM finish();
ROLLBACK;

-- A draining worker's deadline: harvest.get_worker_drain_deadline.
BEGIN;
SELECT plan(4);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

SELECT harvest.register_worker('wd', ARRAY['q'], 'h', 1, 5);
SELECT results_eq($$SELECT drain_deadline, remaining_secs FROM harvest.get_worker_drain_deadline('wd')$$,
                  $$VALUES (NULL::timestamptz, NULL::double precision)$$,
                  'get_worker_drain_deadline(): no deadline, NULLs');
SELECT harvest.drain_worker('wd', '2030-01-01 00:00:30+00', 'test');
SELECT results_eq($$SELECT drain_deadline, remaining_secs FROM harvest.get_worker_drain_deadline('wd')$$,
                  $$VALUES ('2030-01-01 00:00:30+00'::timestamptz, 30::double precision)$$,
                  'the deadline and the seconds left by the database clock');
SET LOCAL harvest.fake_now = '2030-01-01 00:01:00+00';
SELECT is((SELECT remaining_secs FROM harvest.get_worker_drain_deadline('wd')), -30::double precision,
          'negative once the deadline has passed');
SELECT is_empty($$SELECT * FROM harvest.get_worker_drain_deadline('nobody')$$, 'an unknown worker: no row');

SELECT * FROM finish();
ROLLBACK;

-- harvest._unknown_to: the workers that lacked what a task or a request names (a rolling
-- deploy), and whether a live worker polling the queue has not tried it yet.
BEGIN;
SELECT plan(8);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT harvest.register_worker('u-a', ARRAY['uq'], 'h', 1, 5);
SELECT harvest.register_worker('u-b', ARRAY['uq', 'other'], 'h', 2, 5);
SELECT harvest.register_worker('u-stale', ARRAY['uq'], 'h', 3, 5);
SELECT harvest.register_worker('u-drain', ARRAY['uq'], 'h', 4, 5);
SELECT harvest.register_worker('u-elsewhere', ARRAY['other'], 'h', 5, 5);
UPDATE harvest.workers SET last_heartbeat_at = harvest.now() - interval '11 seconds' WHERE id = 'u-stale';
UPDATE harvest.workers SET status = 'draining' WHERE id = 'u-drain';
SELECT results_eq($$SELECT * FROM harvest._unknown_to(NULL, 'u-a', 'uq')$$,
                  $$VALUES ('["u-a"]'::jsonb, true)$$, 'the first worker kept; u-b, live on uq, is untried');
SELECT results_eq($$SELECT * FROM harvest._unknown_to('{"not": "a list"}', NULL, 'uq')$$,
                  $$VALUES ('[]'::jsonb, true)$$, 'anything but an array is no ids; a NULL worker adds none');
SELECT results_eq($$SELECT * FROM harvest._unknown_to('["u-b", 7, null, "u-a", "x"]', 'u-b', 'uq')$$,
                  $$VALUES ('["u-a", "x", "u-b"]'::jsonb, false)$$,
                  'ids kept once, the latest last, entries that are not strings dropped; both live workers tried');
SELECT results_eq($$SELECT untried_live FROM harvest._unknown_to('["u-a"]', NULL, 'other')$$,
                  $$VALUES (true)$$, 'per queue: u-b and u-elsewhere poll other');
SELECT results_eq($$SELECT untried_live FROM harvest._unknown_to('["u-b", "u-elsewhere"]', NULL, 'other')$$,
                  $$VALUES (false)$$, 'a worker of another queue does not count');
SELECT results_eq($$SELECT untried_live FROM harvest._unknown_to('[]', NULL, 'nobody_polls')$$,
                  $$VALUES (false)$$, 'no live worker on the queue: none untried');
SELECT results_eq(
    $$SELECT jsonb_array_length(unknown_to), unknown_to ->> 0, unknown_to ->> -1, untried_live
      FROM harvest._unknown_to((SELECT jsonb_agg(format('g-%s', i) ORDER BY i) FROM generate_series(1, 63) AS i),
                               'u-z', 'uq')$$,
    $$VALUES (64, 'g-1'::text, 'u-z'::text, false)$$,
    '64 ids at most: a full list leaves no worker untried (u-a and u-b are live, not in it)');
SELECT results_eq(
    $$SELECT jsonb_array_length(unknown_to), unknown_to ->> 0, untried_live
      FROM harvest._unknown_to((SELECT jsonb_agg(format('g-%s', i) ORDER BY i) FROM generate_series(1, 62) AS i),
                               'u-z', 'uq')$$,
    $$VALUES (63, 'g-1'::text, true)$$, '63 ids: u-a and u-b still untried');
SELECT * FROM finish();
ROLLBACK;

-- A worker id registered again by another process (a pod restarted under its StatefulSet name):
-- register_worker takes back what the id held at once (WorkerLost, rows as expire_lost_workers'),
-- not at the leases; the predecessor's late completion is refused by its fencing token; its
-- heartbeat, drain and stop change nothing of its successor's (harvest._worker_incarnation_holds).
-- The same process registering again, or a caller naming no incarnation, takes nothing back.
BEGIN;
SELECT plan(21);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT harvest.register_worker('inc-w', ARRAY['incq'], 'pod-0', 1, 5, '{}', NULL, 'first');
SELECT pg_temp.start_activity('inc_act', 'inc_wf', 'incq_act', 'inc_a', 'incaq',
                              p_options => '{"start_to_close": 600}', p_worker => 'inc-w');
SELECT pg_temp.start_claimed('inc_wft', 'inc_wf', 'incq_wft', 'inc-w', p_lease_secs => 600);
SELECT harvest.register_worker('inc-legacy', ARRAY['incq'], 'h', 2, 5);
SELECT pg_temp.start_activity('inc_leg', 'inc_wf', 'incq_leg', 'inc_a', 'incaq_leg',
                              p_options => '{"start_to_close": 600}', p_worker => 'inc-legacy');
CREATE TEMP TABLE taken ON COMMIT DROP AS
    SELECT * FROM harvest.register_worker('inc-w', ARRAY['incq'], 'pod-0', 1, 5, '{}', NULL, 'first');

SELECT is((SELECT count(*) FROM taken), 0::bigint, 'the same process registering again takes nothing back ...');
SELECT results_eq($$SELECT status FROM harvest.tasks WHERE id IN (pg_temp.task('inc_act'), pg_temp.task('inc_wft'))$$,
                  $$VALUES ('running'::text), ('running')$$, '... its tasks run on');

SET LOCAL harvest.fake_now = '2030-01-01 00:00:03+00';
INSERT INTO taken SELECT * FROM harvest.register_worker('inc-w', ARRAY['incq'], 'pod-0', 1, 5, '{}', NULL, 'second');
SELECT results_eq($$SELECT kind, outcome, activity, error_type, attempt FROM taken ORDER BY kind$$,
                  $$VALUES ('activity'::text, 'retry_scheduled'::text, 'inc_a'::text, 'WorkerLost'::text, 1),
                           ('workflow', 'released', NULL, 'WorkerLost', 1)$$,
                  'another process registering the id takes back both tasks at once, 10 minutes before their leases');
SELECT results_eq($$SELECT status, lease_owner, last_failure ->> 'error_type' FROM harvest.tasks WHERE id = pg_temp.task('inc_act')$$,
                  $$VALUES ('pending'::text, NULL::text, 'WorkerLost'::text)$$,
                  'the activity waits for its retry with the failure WorkerLost');
SELECT matches((SELECT last_failure ->> 'message' FROM harvest.tasks WHERE id = pg_temp.task('inc_act')),
               '^attempt 1 of inc_a held by inc-w was lost \(WorkerLost: its worker id was registered again by another process; the one holding it, pid 1 on pod-0, last heartbeated at 2030-01-01T00:00:00\+00:00\)$',
               'its message says the id was registered again and names the process that held it');
SELECT results_eq($$SELECT status, lease_owner FROM harvest.tasks WHERE id = pg_temp.task('inc_wft')$$,
                  $$VALUES ('pending'::text, NULL::text)$$, 'the workflow task is pending again');
SELECT results_eq($$SELECT incarnation, status, lost_at FROM harvest.workers WHERE id = 'inc-w'$$,
                  $$VALUES ('second'::text, 'active'::text, '2030-01-01 00:00:33+00'::timestamptz)$$,
                  'the row is the new process''s');
SELECT throws_ok(format($$SELECT harvest.complete_activity(%s, %s, '"late"')$$, pg_temp.task('inc_act'), pg_temp.token('inc_act')),
                 'HR004', NULL, 'the predecessor''s late completion is refused (HR004)');

SET LOCAL harvest.fake_now = '2030-01-01 00:00:05+00';
SELECT is(harvest.heartbeat_worker('inc-w', 'first'), 'superseded', 'the predecessor''s heartbeat answers superseded ...');
SELECT is((SELECT last_heartbeat_at FROM harvest.workers WHERE id = 'inc-w'), '2030-01-01 00:00:03+00'::timestamptz,
          '... and moves nothing');
SELECT is(harvest.begin_worker_drain('inc-w', 'first'), 'superseded', 'its drain answers superseded ...');
SELECT is(harvest.stop_worker('inc-w', 'first'), 0, 'its stop releases nothing ...');
SELECT is((SELECT status FROM harvest.workers WHERE id = 'inc-w'), 'active', '... and the successor stays active');
SELECT is(harvest.heartbeat_worker('inc-w', 'second'), 'active', 'the successor heartbeats');
SELECT is(harvest.heartbeat_worker('inc-w'), 'active', 'a caller naming no incarnation acts on the row as before');
SELECT throws_ok($$SELECT harvest.heartbeat_worker('inc-nobody', 'x')$$, 'HR002', 'worker inc-nobody is not registered',
                 'an id never registered is still HR002');
SELECT ok(harvest._worker_incarnation_holds(w, NULL) AND harvest._worker_incarnation_holds(w, 'second')
          AND NOT harvest._worker_incarnation_holds(w, 'first'), '_worker_incarnation_holds(): NULL or the registered one')
FROM harvest.workers AS w WHERE w.id = 'inc-w';

DELETE FROM taken;
INSERT INTO taken SELECT * FROM harvest.register_worker('inc-legacy', ARRAY['incq'], 'h', 2, 5);
SELECT is((SELECT count(*) FROM taken), 0::bigint, 'a register naming no incarnation over a row with none takes nothing back ...');
SELECT is((SELECT status FROM harvest.tasks WHERE id = pg_temp.task('inc_leg')), 'running', '... (as before)');
INSERT INTO taken SELECT * FROM harvest.register_worker('inc-legacy', ARRAY['incq'], 'h', 2, 5, '{}', NULL, 'new');
SELECT is((SELECT count(*) FROM taken), 1::bigint, 'a new worker registering over a row of an older one takes its task back');

SELECT is(harvest.stop_worker('inc-w', 'second'), 0, 'the successor stops');
SELECT * FROM finish();
ROLLBACK;
