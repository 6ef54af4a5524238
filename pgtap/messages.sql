-- functions/messages.sql: harvest.request_query, harvest.request_update,
-- harvest.update_with_start, harvest.claim_query_requests, harvest.answer_query,
-- harvest.accept_update, harvest.release_query_request, harvest.wait_for_first_workflow_task and its wake-up
-- (claim_query_requests), harvest._complete_update (the complete_update command of
-- complete_workflow_task), harvest.get_query_request, harvest.expire_query_requests
-- and the helpers harvest._check_query_args, harvest._notify_query_answer and harvest._claimed_request
-- (answer_query's and release_query_request's claim check).
BEGIN;
SELECT plan(189);
SET LOCAL TimeZone = 'UTC';
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';

-- Idle runs of q_wf on queue qq_<key> (pg_temp.start_decided: first workflow task
-- done, no task left). A query request by id:
CREATE FUNCTION pg_temp.req(p_id bigint) RETURNS harvest.query_requests LANGUAGE sql AS $fn$
    SELECT * FROM harvest.query_requests WHERE id = p_id;
$fn$;
CREATE TEMP TABLE ids (key text PRIMARY KEY, id bigint) ON COMMIT DROP;
CREATE FUNCTION pg_temp.id(p_key text) RETURNS bigint LANGUAGE sql AS $fn$
    SELECT id FROM ids WHERE key = p_key;
$fn$;

-- ---------------------------------------------------------------- request_query
SELECT isnt(pg_temp.start_decided('a', 'q_wf', 'qq_a'), NULL, 'setup: an idle run on queue qq_a');
SELECT lives_ok($$SELECT harvest.register_worker('w1', ARRAY['qq_a'], 'host', 1, 5)$$,
                'setup: a live worker polls qq_a');
INSERT INTO ids VALUES ('q1', harvest.request_query(pg_temp.run('a'), 'status', '{"verbose": true}', 60));
SELECT ok(pg_temp.id('q1') IS NOT NULL, 'request_query() returns the request id');
SELECT results_eq(
    $$SELECT kind, name, arg, queue, status, update_id, created_at, expires_at FROM harvest.query_requests
      WHERE id = pg_temp.id('q1')$$,
    $$VALUES ('query'::text, 'status'::text, '{"verbose": true}'::jsonb, 'qq_a'::text, 'pending'::text, NULL::text,
              '2030-01-01 00:00:00+00'::timestamptz, '2030-01-01 00:01:00+00'::timestamptz)$$,
    'the request is a pending query row on the run''s task queue, expiring after the timeout');
SELECT is(pg_temp.last_event_id(pg_temp.run('a')), 2::bigint, 'a query writes nothing to the history');
SELECT is((SELECT count(*) FROM harvest.tasks WHERE execution_id = pg_temp.run('a')), 0::bigint,
          'and wakes no workflow task');
INSERT INTO ids VALUES ('q2', harvest.request_query(pg_temp.run('a'), 'status'));
SELECT results_eq($$SELECT arg, expires_at FROM harvest.query_requests WHERE id = pg_temp.id('q2')$$,
                  $$VALUES ('null'::jsonb, '2030-01-01 00:00:10+00'::timestamptz)$$,
                  'defaults: a null arg and a 10 s timeout');
SELECT throws_ok($$SELECT harvest.request_query('00000000-0000-4000-8000-00000000abcd', 'status')$$, 'HR002',
                 'execution 00000000-0000-4000-8000-00000000abcd does not exist', 'an unknown execution: HR002');
SELECT throws_ok(format($$SELECT harvest.request_query(%L, '  ')$$, pg_temp.run('a')), 'HR001',
                 'query or update name is empty', 'a blank name: HR001');
SELECT throws_ok(format($$SELECT harvest.request_query(%L, 's', 'null', 0)$$, pg_temp.run('a')), 'HR001',
                 'timeout 0 is out of range: give seconds in (0, 86400]', 'a zero timeout: HR001');
SELECT throws_ok(format($$SELECT harvest.request_query(%L, 's', 'null', NULL)$$, pg_temp.run('a')), 'HR001',
                 NULL, 'a NULL timeout: HR001');
SELECT throws_ok($$SELECT harvest._check_query_args('s', 86401)$$, 'HR001', NULL,
                 '_check_query_args() refuses more than a day');
SELECT lives_ok($$SELECT harvest._check_query_args('s', 86400)$$, '_check_query_args() takes a day');

-- ---------------------------------------------------------------- claim_query_requests
SELECT throws_ok($$SELECT * FROM harvest.claim_query_requests('', ARRAY['qq_a'])$$, 'HR001', 'worker id is empty',
                 'claim_query_requests() needs a worker id');
SELECT throws_ok($$SELECT * FROM harvest.claim_query_requests('w1', ARRAY[]::text[])$$, 'HR001', 'no queues given',
                 'claim_query_requests() needs queues');
SELECT throws_ok($$SELECT * FROM harvest.claim_query_requests('w1', ARRAY['qq_a'], 2147483647)$$, 'HR001',
                 'claim_query_requests limit 2147483647 is out of range 1..1000',
                 'claim_query_requests() bounds its limit as the other claims do (_check_limit)');
SELECT throws_ok($$SELECT * FROM harvest.claim_query_requests('w1', ARRAY['qq_a'], 0)$$, 'HR001',
                 'claim_query_requests limit 0 is out of range 1..1000',
                 'claim_query_requests() refuses a limit below 1 (it took 1)');
SELECT throws_ok($$SELECT * FROM harvest.claim_query_requests('w1', ARRAY['qq_a'], 10, 1e10)$$, 'HR001',
                 'query request lease 10000000000 s is over the ceiling of 86400 seconds (a day)',
                 'claim_query_requests() bounds its lease as the other claims do (_check_lease)');
SELECT throws_ok($$SELECT * FROM harvest.claim_query_requests('w1', ARRAY['qq_a'], 10, 0)$$, 'HR001',
                 'query request lease 0 must be positive seconds',
                 'claim_query_requests() refuses a lease of 0 (it took 1 s)');
SELECT is((SELECT count(*) FROM harvest.query_requests WHERE claimed_by = 'w1'), 0::bigint,
          'claim_query_requests() claims nothing when its limit or lease is refused');
SELECT is_empty($$SELECT * FROM harvest.claim_query_requests('w1', ARRAY['elsewhere'])$$,
                'nothing is claimed from other queues');
CREATE TEMP TABLE c1 ON COMMIT DROP AS SELECT * FROM harvest.claim_query_requests('w1', ARRAY['qq_a'], 1, 30);
SELECT results_eq(
    $$SELECT request_id, kind, execution_id, workflow_name, workflow_id, queue, execution_status, name, arg,
             update_id FROM c1$$,
    $$VALUES (pg_temp.id('q1'), 'query'::text, pg_temp.run('a'), 'q_wf'::text, 'a'::text, 'qq_a'::text,
              'RUNNING'::text, 'status'::text, '{"verbose": true}'::jsonb, NULL::text)$$,
    'claim_query_requests() hands out the oldest request with what the worker needs to rebuild the run');
SELECT results_eq($$SELECT status, claimed_by, lease_expires_at FROM harvest.query_requests WHERE id = pg_temp.id('q1')$$,
                  $$VALUES ('running'::text, 'w1'::text, '2030-01-01 00:00:30+00'::timestamptz)$$,
                  'the claimed request is running under a lease');
SELECT results_eq($$SELECT request_id FROM harvest.claim_query_requests('w1', ARRAY['qq_a'], 10)$$,
                  $$VALUES (pg_temp.id('q2'))$$, 'a claimed request is not handed out again; the next one is');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:31+00';
SELECT results_eq($$SELECT request_id FROM harvest.claim_query_requests('w2', ARRAY['qq_a'], 10)$$,
                  $$VALUES (pg_temp.id('q1'))$$,
                  'after its lease ran out another worker claims it (the expired q2 is skipped)');
SELECT is((pg_temp.req(pg_temp.id('q1'))).claimed_by, 'w2', 'the new claimer holds it');

-- ---------------------------------------------------------------- answer_query
SELECT is(harvest.answer_query(pg_temp.id('q1'), 'w1', '"late"'), NULL,
          'answer_query() by a worker that lost the request returns NULL');
SELECT is(harvest.answer_query(pg_temp.id('q1'), 'w2', '{"state": "waiting"}'), 'completed',
          'answer_query() by the claimer completes the query');
SELECT results_eq($$SELECT status, answer, error, answered_at, lease_expires_at FROM harvest.query_requests
                    WHERE id = pg_temp.id('q1')$$,
                  $$VALUES ('completed'::text, '{"state": "waiting"}'::jsonb, NULL::jsonb,
                            '2030-01-01 00:00:31+00'::timestamptz, NULL::timestamptz)$$,
                  'the answer is stored');
SELECT is(harvest.answer_query(pg_temp.id('q1'), 'w2', '1'), NULL, 'a second answer returns NULL');
SELECT is((pg_temp.req(pg_temp.id('q1'))).answer, '{"state": "waiting"}'::jsonb, 'and changes nothing');
INSERT INTO ids VALUES ('q3', harvest.request_query(pg_temp.run('a'), 'nope', 'null', 60));
SELECT is((SELECT count(*) FROM harvest.claim_query_requests('w1', ARRAY['qq_a'])), 1::bigint, 'setup: claim q3');
SELECT throws_ok(format($$SELECT harvest.answer_query(%s, 'w1', NULL, '"oops"')$$, pg_temp.id('q3')), 'HR001',
                 'error must be a JSON object {error_type, message, ...}', 'an error that is not an object: HR001');
SELECT is(harvest.answer_query(pg_temp.id('q3'), 'w1', NULL,
                               '{"error_type": "UnknownQuery", "message": "no query handler"}'), 'failed',
          'answer_query() with an error fails the query');
SELECT results_eq($$SELECT status, answer, error ->> 'error_type' FROM harvest.query_requests WHERE id = pg_temp.id('q3')$$,
                  $$VALUES ('failed'::text, NULL::jsonb, 'UnknownQuery'::text)$$, 'the error is stored, no answer');
SELECT is(harvest.answer_query(999999, 'w1', '1'), NULL, 'answering an unknown request returns NULL');

-- ---------------------------------------------------------------- request_update and accept_update
CREATE TEMP TABLE u1 ON COMMIT DROP AS SELECT * FROM harvest.request_update(pg_temp.run('a'), 'decide', '"yes"', 'u1', 60);
SELECT results_eq($$SELECT update_id, status FROM u1$$, $$VALUES ('u1'::text, 'pending'::text)$$,
                  'request_update() returns a pending request for the update id');
SELECT results_eq($$SELECT kind, name, arg, update_id, status FROM harvest.query_requests
                    WHERE id = (SELECT request_id FROM u1)$$,
                  $$VALUES ('update'::text, 'decide'::text, '"yes"'::jsonb, 'u1'::text, 'pending'::text)$$,
                  'an update request row');
SELECT results_eq($$SELECT request_id, status FROM harvest.request_update(pg_temp.run('a'), 'decide', '"yes"', 'u1', 60)$$,
                  $$SELECT request_id, 'pending'::text FROM u1$$,
                  'asking again with the same update id returns the same request');
SELECT throws_ok(format($$SELECT * FROM harvest.request_update(%L, 'other', 'null', 'u1')$$, pg_temp.run('a')),
                 'HR001', format('update id u1 is already used by update "decide" on execution %s, not by "other"',
                                 pg_temp.run('a')),
                 'the same update id for another update: HR001');
SELECT matches((SELECT update_id FROM harvest.request_update(pg_temp.run('a'), 'decide')),
               '^[0-9a-f]{8}-[0-9a-f]{4}-', 'without an update id one is minted (a uuid)');
SELECT throws_ok(format($$SELECT * FROM harvest.request_update(%L, 'decide', 'null', '')$$, pg_temp.run('a')),
                 'HR001', 'update id is empty', 'an empty update id: HR001');
-- An update id is a key of two indexes: one past their row size (incompressible, 3,200 bytes)
-- failed the insert with the index's own words; it is bounded at 1000 bytes, as a workflow id.
SELECT throws_ok(format($$SELECT * FROM harvest.request_update(%L, 'decide', 'null',
                          (SELECT string_agg(md5(g::text), '') FROM generate_series(1, 100) AS g))$$, pg_temp.run('a')),
                 'HR001', 'update id is 3200 bytes, over the 1000 an update id may have',
                 'an update id over 1000 bytes: HR001');
SELECT lives_ok(format($$SELECT * FROM harvest.request_update(%L, 'decide', 'null', repeat('u', 1000))$$, pg_temp.run('a')),
                'an update id of 1000 bytes is taken');
SELECT is(pg_temp.last_event_id(pg_temp.run('a')), 2::bigint, 'requesting an update writes no history');

DELETE FROM harvest.query_requests WHERE kind = 'update' AND update_id <> 'u1';
SELECT results_eq($$SELECT update_id, name, status, queue, live_workers FROM harvest.list_update_requests(pg_temp.run('a'))$$,
                  $$VALUES ('u1'::text, 'decide'::text, 'pending'::text, 'qq_a'::text, 0)$$,
                  'list_update_requests(): the update no worker has accepted, with its queue''s live workers (none on the test clock)');
CREATE TEMP TABLE cu ON COMMIT DROP AS SELECT * FROM harvest.claim_query_requests('w1', ARRAY['qq_a']);
SELECT results_eq($$SELECT kind, update_id, name FROM cu$$, $$VALUES ('update'::text, 'u1'::text, 'decide'::text)$$,
                  'a worker claims the update to validate it');
SELECT throws_ok(format($$SELECT harvest.answer_query(%s, 'w1', '1')$$, (SELECT request_id FROM u1)), 'HR001', NULL,
                 'an update is not answered without an error (accept it instead): HR001');
SELECT is(harvest.accept_update((SELECT request_id FROM u1), 'w2'), NULL, 'accept_update() by another worker: NULL');
SELECT is(harvest.accept_update((SELECT request_id FROM u1), 'w1'), 'accepted', 'accept_update() by the claimer');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data FROM harvest.events WHERE execution_id = pg_temp.run('a') AND event_id > 2$$,
    $$VALUES (3::bigint, 'UpdateAccepted'::text, '{"update_id": "u1", "name": "decide", "input": "yes"}'::jsonb)$$,
    'UpdateAccepted{update_id, name, input} is appended');
SELECT results_eq($$SELECT kind, status FROM harvest.tasks WHERE execution_id = pg_temp.run('a')$$,
                  $$VALUES ('workflow'::text, 'pending'::text)$$, 'the workflow is woken');
SELECT is((pg_temp.req((SELECT request_id FROM u1))).status, 'accepted', 'the request is accepted');
SELECT set_config('t.run_a', pg_temp.run('a')::text, true);
SET LOCAL ROLE harvest_worker;
SELECT throws_ok($$SELECT * FROM harvest.list_update_requests(current_setting('t.run_a')::uuid)$$, '42501', NULL,
                 'list_update_requests(): refused to a worker (a reader''s call)');
RESET ROLE;
SELECT is_empty($$SELECT * FROM harvest.list_update_requests(pg_temp.run('a'))$$,
                'list_update_requests(): an accepted update is no longer listed (it is in the history)');
SELECT is(harvest.accept_update((SELECT request_id FROM u1), 'w1'), NULL, 'accepting twice returns NULL');
INSERT INTO ids VALUES ('q4', harvest.request_query(pg_temp.run('a'), 'status', 'null', 60));
SELECT is((SELECT count(*) FROM harvest.claim_query_requests('w1', ARRAY['qq_a'])), 1::bigint, 'setup: claim a query');
SELECT throws_ok(format($$SELECT harvest.accept_update(%s, 'w1')$$, pg_temp.id('q4')), 'HR001',
                 format('request %s is a query, not an update', pg_temp.id('q4')), 'accept_update() of a query: HR001');
SELECT is(harvest.accept_update(999999, 'w1'), NULL, 'accept_update() of an unknown request: NULL');

-- ---------------------------------------------------------------- complete_update (_complete_update)
CREATE TEMP TABLE wt ON COMMIT DROP AS SELECT * FROM harvest.claim_tasks('decider', ARRAY['qq_a'], 1);
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 3,
                          '[{"type": "complete_update", "seq": 1, "update_id": "never"}]')$$,
                        (SELECT task_id FROM wt), (SELECT fencing_token FROM wt)), 'HR001',
                 format('complete_update: update never was never accepted by execution %s', pg_temp.run('a')),
                 'complete_update of an update id never accepted: HR001');
SELECT throws_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 3,
                          '[{"type": "complete_update", "seq": 1}]')$$,
                        (SELECT task_id FROM wt), (SELECT fencing_token FROM wt)), 'HR001',
                 'command complete_update needs "update_id" as a JSON string, got nothing',
                 'complete_update without an update_id: HR001');
SELECT is(pg_temp.last_event_id(pg_temp.run('a')), 3::bigint, 'refused commands wrote nothing');
SELECT results_eq(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 3,
                          '[{"type": "complete_update", "seq": 1, "update_id": "u1", "result": {"ok": true}}]')$$,
                        (SELECT task_id FROM wt), (SELECT fencing_token FROM wt)),
                  $$VALUES (5::bigint, 'RUNNING'::text)$$, 'complete_workflow_task() applies complete_update');
SELECT results_eq(
    $$SELECT event_id, event_type, event_data FROM harvest.events WHERE execution_id = pg_temp.run('a') AND event_id > 3$$,
    $$VALUES (4::bigint, 'WorkflowTaskCompleted'::text, '{"through": 3, "worker_id": null}'::jsonb),
             (5, 'UpdateCompleted', '{"seq": 1, "update_id": "u1", "result": {"ok": true}, "failure": null}')$$,
    'UpdateCompleted{seq, update_id, result, failure} is the command event');
SELECT results_eq($$SELECT status, answer, error FROM harvest.query_requests WHERE id = (SELECT request_id FROM u1)$$,
                  $$VALUES ('completed'::text, '{"ok": true}'::jsonb, NULL::jsonb)$$,
                  'the update''s request is answered with the result');

-- A failed handler, and the history answering a re-request after the rows are gone.
CREATE TEMP TABLE u2 ON COMMIT DROP AS SELECT * FROM harvest.request_update(pg_temp.run('a'), 'decide', '"no"', 'u2', 60);
SELECT is((SELECT count(*) FROM harvest.claim_query_requests('w1', ARRAY['qq_a'])), 1::bigint, 'setup: claim u2');
SELECT is(harvest.accept_update((SELECT request_id FROM u2), 'w1'), 'accepted', 'setup: accept u2');
CREATE TEMP TABLE wt2 ON COMMIT DROP AS SELECT * FROM harvest.claim_tasks('decider', ARRAY['qq_a'], 1);
SELECT lives_ok(format($$SELECT last_event_id, execution_status FROM harvest.complete_workflow_task(%s, %s, 6,
                         '[{"type": "complete_update", "seq": 2, "update_id": "u2",
                            "failure": {"error_type": "KeyError", "message": "x", "non_retryable": true}}]')$$,
                       (SELECT task_id FROM wt2), (SELECT fencing_token FROM wt2)),
                'complete_update with a failure');
SELECT results_eq($$SELECT status, answer, error ->> 'error_type' FROM harvest.query_requests
                    WHERE id = (SELECT request_id FROM u2)$$,
                  $$VALUES ('failed'::text, NULL::jsonb, 'KeyError'::text)$$, 'the request is answered failed');
SELECT is((SELECT event_data -> 'result' FROM harvest.events WHERE execution_id = pg_temp.run('a') AND event_id = 8),
          'null'::jsonb, 'a failed update records a null result');
DELETE FROM harvest.query_requests WHERE kind = 'update';
SELECT results_eq($$SELECT status FROM harvest.request_update(pg_temp.run('a'), 'decide', 'null', 'u1', 60)$$,
                  $$VALUES ('completed'::text)$$, 'a completed update asked again is answered from the history');
SELECT results_eq($$SELECT answer FROM harvest.query_requests WHERE update_id = 'u1'$$,
                  $$VALUES ('{"ok": true}'::jsonb)$$, 'with its recorded result');
SELECT results_eq($$SELECT status FROM harvest.request_update(pg_temp.run('a'), 'decide', 'null', 'u2', 60)$$,
                  $$VALUES ('failed'::text)$$, 'a failed one is answered failed');
SELECT is((SELECT error ->> 'error_type' FROM harvest.query_requests WHERE update_id = 'u2'), 'KeyError',
          'with its recorded failure');
SELECT is(pg_temp.last_event_id(pg_temp.run('a')), 8::bigint, 'and nothing is appended');

-- An accepted update asked again: accepted (running run), or failed once the run ended.
CREATE TEMP TABLE u3 ON COMMIT DROP AS SELECT * FROM harvest.request_update(pg_temp.run('a'), 'decide', 'null', 'u3', 60);
SELECT is((SELECT count(*) FROM harvest.claim_query_requests('w1', ARRAY['qq_a'])), 1::bigint, 'setup: claim u3');
SELECT is(harvest.accept_update((SELECT request_id FROM u3), 'w1'), 'accepted', 'setup: accept u3');
DELETE FROM harvest.query_requests WHERE update_id = 'u3';
SELECT results_eq($$SELECT status FROM harvest.request_update(pg_temp.run('a'), 'decide', 'null', 'u3', 60)$$,
                  $$VALUES ('accepted'::text)$$, 'an accepted, unfinished update asked again is accepted');
SELECT is((SELECT count(*) FROM harvest.events WHERE execution_id = pg_temp.run('a') AND event_type = 'UpdateAccepted'
           AND event_data ->> 'update_id' = 'u3'), 1::bigint, 'UpdateAccepted is recorded once per update id');

-- ---------------------------------------------------------------- get_query_request
SELECT is(harvest.heartbeat_worker('w1'), 'active', 'setup: w1 heartbeats');
SELECT results_eq(
    $$SELECT request_id, kind, status, execution_status, live_workers, queue FROM harvest.get_query_request(pg_temp.id('q1'))$$,
    $$VALUES (pg_temp.id('q1'), 'query'::text, 'completed'::text, 'RUNNING'::text, 1, 'qq_a'::text)$$,
    'get_query_request() returns the request, the run''s status and the live workers of its queue');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:45+00';
SELECT is((SELECT live_workers FROM harvest.get_query_request(pg_temp.id('q1'))), 0,
          'a worker whose heartbeat is older than twice its interval is not live');
SELECT throws_ok($$SELECT * FROM harvest.get_query_request(999999)$$, 'HR002',
                 'query request 999999 does not exist (it may have expired)', 'an unknown request: HR002');

-- ---------------------------------------------------------------- a run that ended
SELECT lives_ok($$SELECT harvest.terminate_workflow(pg_temp.run('a'))$$, 'setup: the run ends');
SELECT throws_ok(format($$SELECT * FROM harvest.request_update(%L, 'decide', 'null', 'u4')$$, pg_temp.run('a')),
                 'HR005', format('cannot update execution %s: it is already TERMINATED', pg_temp.run('a')),
                 'a new update for an ended run: HR005');
SELECT results_eq($$SELECT status FROM harvest.request_update(pg_temp.run('a'), 'decide', 'null', 'u3', 60)$$,
                  $$VALUES ('accepted'::text)$$, 'the live row of u3 is returned as it is');
DELETE FROM harvest.query_requests WHERE update_id = 'u3';
SELECT results_eq($$SELECT status FROM harvest.request_update(pg_temp.run('a'), 'decide', 'null', 'u3', 60)$$,
                  $$VALUES ('failed'::text)$$, 'an accepted update of an ended run that never completed is failed');
SELECT is((SELECT error ->> 'error_type' FROM harvest.query_requests WHERE update_id = 'u3'), 'WorkflowNotRunning',
          'with a WorkflowNotRunning error');
SELECT ok(harvest.request_query(pg_temp.run('a'), 'status') IS NOT NULL, 'an ended run can still be queried');

SELECT isnt(pg_temp.start_decided('b', 'q_wf', 'qq_b'), NULL, 'setup: another idle run');
CREATE TEMP TABLE ub ON COMMIT DROP AS SELECT * FROM harvest.request_update(pg_temp.run('b'), 'decide', 'null', 'ub', 60);
SELECT is((SELECT count(*) FROM harvest.claim_query_requests('w1', ARRAY['qq_b'])), 1::bigint, 'setup: claim it');
SELECT lives_ok($$SELECT harvest.terminate_workflow(pg_temp.run('b'))$$, 'setup: the run ends while validating');
SELECT is(harvest.accept_update((SELECT request_id FROM ub), 'w1'), 'rejected', 'accept_update() of an ended run: rejected');
SELECT results_eq($$SELECT status, error ->> 'error_type' FROM harvest.query_requests WHERE id = (SELECT request_id FROM ub)$$,
                  $$VALUES ('rejected'::text, 'WorkflowNotRunning'::text)$$, 'with a WorkflowNotRunning error');
SELECT is((SELECT count(*) FROM harvest.events WHERE execution_id = pg_temp.run('b') AND event_type = 'UpdateAccepted'),
          0::bigint, 'and no UpdateAccepted');

-- ---------------------------------------------------------------- update_with_start
CREATE TEMP TABLE uws1 ON COMMIT DROP AS
SELECT * FROM harvest.update_with_start('uws_wf', 'uws-1', 'bump', '2', '[7]', 'uws_q', 'k1', 60);
SELECT results_eq($$SELECT workflow_id, started_fresh, update_id, status FROM uws1$$,
                  $$VALUES ('uws-1'::text, true, 'k1'::text, 'pending'::text)$$,
                  'update_with_start() with no run: starts one and requests the update');
SELECT results_eq($$SELECT workflow_name, input, queue FROM harvest.executions WHERE id = (SELECT execution_id FROM uws1)$$,
                  $$VALUES ('uws_wf'::text, '[7]'::jsonb, 'uws_q'::text)$$, 'the run has the name, input and queue');
SELECT results_eq($$SELECT execution_id, started_fresh, status FROM harvest.update_with_start('uws_wf', 'uws-1', 'bump', '3')$$,
                  $$SELECT execution_id, false, 'pending'::text FROM uws1$$,
                  'update_with_start() over a running run attaches to it');
SELECT is((SELECT count(*) FROM harvest.query_requests WHERE execution_id = (SELECT execution_id FROM uws1)), 2::bigint,
          'two update requests on the one run');
SELECT throws_ok($$SELECT * FROM harvest.update_with_start('uws_wf', '', 'bump')$$, 'HR001',
                 'update_with_start needs a workflow_id', 'update_with_start() without a workflow_id: HR001');
SELECT throws_ok($$SELECT * FROM harvest.update_with_start('uws_wf', 'uws-2', '')$$, 'HR001',
                 'query or update name is empty', 'update_with_start() with no update name: HR001');
SELECT is_empty($$SELECT 1 FROM harvest.executions WHERE workflow_id = 'uws-2'$$, 'a refused call starts nothing');

-- ---------------------------------------------------------------- expire_query_requests and notifications
SELECT lives_ok($$SELECT harvest._notify_query_answer(1)$$, '_notify_query_answer() notifies');
SET LOCAL harvest.fake_now = '2030-01-01 00:00:59+00';
SELECT is(harvest.expire_query_requests(), (SELECT count(*)::integer FROM harvest.query_requests
                                            WHERE expires_at <= '2030-01-01 00:00:59+00'),
          'expire_query_requests() deletes the requests past their deadline');
SELECT is((SELECT count(*) FROM harvest.query_requests WHERE expires_at <= '2030-01-01 00:00:59+00'), 0::bigint,
          'none is left');
SET LOCAL harvest.fake_now = '2030-01-02 00:00:00+00';
SELECT is(harvest.expire_query_requests(2), 2, 'expire_query_requests(limit) deletes at most limit rows');
SELECT cmp_ok(harvest.expire_query_requests(), '>', 0, 'the rest goes on the next call');
SELECT is_empty($$SELECT 1 FROM harvest.query_requests$$, 'the table is empty');
-- An answer is a value the workflow's code returned (maybe a signal's, as sent): a reference in it
-- to another run's offloaded row must not delete that row when the request expires.
INSERT INTO harvest.payloads (id, execution_id, created_at, bytes, data)
VALUES ('00000000-0000-4000-8000-0000000000d1', (SELECT id FROM harvest.executions ORDER BY id LIMIT 1),
        harvest.now(), 8, '"theirs"');
INSERT INTO harvest.query_requests (execution_id, kind, name, queue, status, answer, created_at, expires_at)
VALUES ((SELECT id FROM harvest.executions ORDER BY id OFFSET 1 LIMIT 1), 'query', 'q', 'q', 'completed',
        '{"_harvest_ref": "00000000-0000-4000-8000-0000000000d1", "bytes": 8}', harvest.now(), harvest.now());
SELECT is(harvest.expire_query_requests(), 1, 'setup: the request expires');
SELECT is((SELECT data FROM harvest.payloads WHERE id = '00000000-0000-4000-8000-0000000000d1'), '"theirs"'::jsonb,
          'expire_query_requests(): a row another run owns stays though an expired answer references it');
-- Nor a run-less row (another client's held-back start's input); the queried run's own row goes.
INSERT INTO harvest.payloads (id, execution_id, created_at, bytes, data)
VALUES ('00000000-0000-4000-8000-0000000000d2', NULL, harvest.now(), 6, '"held"'),
       ('00000000-0000-4000-8000-0000000000d3', (SELECT id FROM harvest.executions ORDER BY id OFFSET 1 LIMIT 1),
        harvest.now(), 8, '"answer"');
INSERT INTO harvest.query_requests (execution_id, kind, name, queue, status, answer, created_at, expires_at)
VALUES ((SELECT id FROM harvest.executions ORDER BY id OFFSET 1 LIMIT 1), 'query', 'q', 'q', 'completed',
        '[{"_harvest_ref": "00000000-0000-4000-8000-0000000000d2", "bytes": 6},
          {"_harvest_ref": "00000000-0000-4000-8000-0000000000d3", "bytes": 8}]', harvest.now(), harvest.now());
SELECT is(harvest.expire_query_requests(), 1, 'setup: the request expires');
SELECT is(ARRAY(SELECT data::text FROM harvest.payloads
                WHERE id IN ('00000000-0000-4000-8000-0000000000d2', '00000000-0000-4000-8000-0000000000d3')),
          ARRAY['"held"'],
          'expire_query_requests(): a run-less row stays though an expired answer references it; the run''s own goes');

-- Payload size: query and update arguments, and a worker's answer, over the limit: HR008.
UPDATE harvest.engine_settings SET max_payload_bytes = 64;
SELECT isnt(pg_temp.start_decided('big', 'q_wf', 'qq_big'), NULL, 'setup: an idle run for the payload limit');
SELECT throws_ok(format($$SELECT harvest.request_query(%L, 'state', to_jsonb(repeat('x', 100)))$$, pg_temp.run('big')),
                 'HR008', 'the argument of query state is 102 bytes, over the payload limit of 64 bytes',
                 'request_query() with an argument over the limit: HR008');
SELECT throws_ok(format($$SELECT * FROM harvest.request_update(%L, 'set', to_jsonb(repeat('x', 100)))$$, pg_temp.run('big')),
                 'HR008', 'the argument of update set is 102 bytes, over the payload limit of 64 bytes',
                 'request_update() with an argument over the limit: HR008');
SELECT throws_ok($$SELECT * FROM harvest.update_with_start('q_wf', 'big-uws', 'set', to_jsonb(repeat('x', 100)))$$,
                 'HR008', 'the argument of update set is 102 bytes, over the payload limit of 64 bytes',
                 'update_with_start() with an update argument over the limit: HR008');
INSERT INTO ids SELECT 'bigq', harvest.request_query(pg_temp.run('big'), 'state');
SELECT throws_ok(format($$SELECT harvest.answer_query(%s, 'wbig', to_jsonb(repeat('x', 100)))$$,
                        (SELECT c.request_id FROM harvest.claim_query_requests('wbig', ARRAY['qq_big']) AS c)),
                 'HR008', 'the answer to query state is 102 bytes, over the payload limit of 64 bytes',
                 'answer_query() with an answer over the limit: HR008');
UPDATE harvest.engine_settings SET max_payload_bytes = DEFAULT;

-- Trace context: the client's update span travels on the request to UpdateAccepted.
SELECT isnt(pg_temp.start_decided('tp', 'q_wf', 'qq_tp'), NULL, 'setup: an idle run on queue qq_tp');
SELECT lives_ok($$SELECT harvest.register_worker('wtp', ARRAY['qq_tp'], 'host', 1, 5)$$,
                'setup: a live worker polls qq_tp');
INSERT INTO ids SELECT 'utp', r.request_id
FROM harvest.request_update(pg_temp.run('tp'), 'bump', 'null', 'u-tp', 60, '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01') AS r;
SELECT is((pg_temp.req(pg_temp.id('utp'))).traceparent, '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'request_update(p_traceparent): kept on the request');
SELECT is((SELECT string_agg(traceparent, ',') FROM harvest.claim_query_requests('wtp', ARRAY['qq_tp'])),
          '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'claim_query_requests() hands out the client''s span (the validation span''s parent)');
SELECT is(harvest.accept_update(pg_temp.id('utp'), 'wtp'), 'accepted', 'setup: and accepts it');
SELECT is((SELECT event_data ->> 'traceparent' FROM pg_temp.last_event(pg_temp.run('tp'))), '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01',
          'accept_update(): UpdateAccepted carries the client''s span');
SELECT throws_ok(format($$SELECT * FROM harvest.request_update(%L, 'bump', 'null', 'u-bad', 60, 'x')$$,
                        pg_temp.run('tp')), 'HR001', NULL, 'request_update(): a malformed traceparent is HR001');
SELECT lives_ok($$SELECT * FROM harvest.update_with_start('q_wf', 'uws-tp', 'bump', p_queue => 'qq_tp',
                                                          p_traceparent => '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01')$$,
                'setup: update_with_start with the caller''s span');
SELECT is((SELECT r.traceparent FROM harvest.query_requests AS r JOIN harvest.executions AS e ON e.id = r.execution_id
           WHERE e.workflow_id = 'uws-tp'), '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'update_with_start(p_traceparent): the update request keeps it');
SELECT is((SELECT ev.event_data ->> 'traceparent' FROM harvest.executions AS e
           JOIN harvest.events AS ev ON ev.execution_id = e.id AND ev.event_id = 1 WHERE e.workflow_id = 'uws-tp'),
          '00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01', 'update_with_start(p_traceparent): the run it starts continues the caller''s span');

-- An update id across a continue-as-new chain: a run (ch) that took updates uc (completed) and
-- ua (accepted only), then continued as new into chx1, chx1 into chx2, and so on.
SELECT isnt(pg_temp.start_decided('ch', 'q_wf', 'qq_ch'), NULL, 'setup: an idle run on queue qq_ch');
SELECT lives_ok(format($$SELECT harvest._append_event(%1$L, 'UpdateAccepted',
                           '{"update_id": "uc", "name": "decide", "input": null}'),
                         harvest._append_event(%1$L, 'UpdateCompleted',
                           '{"seq": 3, "update_id": "uc", "result": {"n": 1}, "failure": null}'),
                         harvest._append_event(%1$L, 'UpdateAccepted',
                           '{"update_id": "ua", "name": "decide", "input": null}')$$, pg_temp.run('ch')),
                'setup: ch took update uc (completed) and ua (accepted)');
DO $$
BEGIN
    FOR i IN 1..16 LOOP
        PERFORM pg_temp.start_run('chx' || i, 'q_wf', 'qq_ch');
        UPDATE harvest.executions SET continued_from = pg_temp.run(CASE WHEN i = 1 THEN 'ch' ELSE 'chx' || (i - 1) END)
        WHERE id = pg_temp.run('chx' || i);
    END LOOP;
    UPDATE harvest.executions SET status = 'CONTINUED_AS_NEW', completed_at = harvest.now()
    WHERE id = pg_temp.run('ch') OR workflow_id LIKE 'chx%' AND workflow_id <> 'chx16' AND workflow_id <> 'chx1';
END;
$$;
SELECT results_eq($$SELECT status FROM harvest.request_update(pg_temp.run('chx1'), 'decide', 'null', 'uc', 60)$$,
                  $$VALUES ('completed'::text)$$,
                  'request_update(): an id completed by the run this one continued from is answered from there');
SELECT results_eq($$SELECT answer FROM harvest.query_requests WHERE execution_id = pg_temp.run('chx1') AND update_id = 'uc'$$,
                  $$VALUES ('{"n": 1}'::jsonb)$$, 'with its recorded result');
DELETE FROM harvest.query_requests WHERE update_id = 'uc';
SELECT throws_ok(format($$SELECT * FROM harvest.request_update(%L, 'other', 'null', 'uc', 60)$$, pg_temp.run('chx1')),
                 'HR001', format('update id uc is already used by update "decide" on execution %s, not by "other"',
                                 (SELECT execution_id FROM harvest.events WHERE event_type = 'UpdateAccepted'
                                  AND event_data ->> 'update_id' = 'uc')),
                 'request_update(): the id of another update found in the chain is HR001, naming both');
SELECT results_eq($$SELECT status FROM harvest.request_update(pg_temp.run('chx1'), 'decide', 'null', 'ua', 60)$$,
                  $$VALUES ('failed'::text)$$,
                  'an id accepted by the run this one continued from, never completed there: failed');
SELECT is((SELECT error ->> 'message' FROM harvest.query_requests WHERE update_id = 'ua'),
          'the run ended CONTINUED_AS_NEW before update ua completed', 'as WorkflowNotRunning, naming how it ended');
SELECT is((SELECT count(*) FROM harvest.events WHERE event_data ->> 'update_id' IN ('uc', 'ua')), 3::bigint,
          'answering from the chain writes no history');
SELECT results_eq($$SELECT status FROM harvest.request_update(pg_temp.run('chx15'), 'decide', 'null', 'uc', 60)$$,
                  $$VALUES ('completed'::text)$$, 'the id is found 16 runs back (the run asked and 15 before it)');
SELECT results_eq($$SELECT status FROM harvest.request_update(pg_temp.run('chx16'), 'decide', 'null', 'uc', 60)$$,
                  $$VALUES ('pending'::text)$$, 'not 17 runs back: there the id is new');
SELECT results_eq($$SELECT status FROM harvest.request_update(pg_temp.run('chx16'), 'decide', 'null', 'unew', 60)$$,
                  $$VALUES ('pending'::text)$$, 'an id never seen in the chain is new');
SELECT ok(EXISTS (SELECT 1 FROM pg_indexes WHERE schemaname = 'harvest' AND indexname = 'events_update_id'),
          'events_update_id finds an update id''s events by id and run');
SELECT is((SELECT count(*) FROM harvest.query_requests AS r JOIN harvest.events AS ev
            ON ev.execution_id = r.execution_id AND ev.event_data ->> 'update_id' = 'uc'), 0::bigint,
          'a retry reaching a successor is answered on the successor, the predecessor untouched');

-- ---------------------------------------------------------------- release_query_request
-- A rolling deploy: a worker whose App lacks the run's workflow hands the request back while
-- a live worker polling the queue has not tried it, and its claims skip it; then it is answered.
SELECT isnt(pg_temp.start_decided('roll', 'q_wf', 'qq_roll'), NULL, 'setup: an idle run on queue qq_roll');
SELECT lives_ok($$SELECT harvest.register_worker('r-old', ARRAY['qq_roll'], 'host', 1, 5);
                  SELECT harvest.register_worker('r-new', ARRAY['qq_roll'], 'host', 2, 5);
                  SELECT harvest.register_worker('r-stale', ARRAY['qq_roll'], 'host', 3, 5);
                  UPDATE harvest.workers SET last_heartbeat_at = harvest.now() - interval '11 seconds'
                  WHERE id = 'r-stale'$$,
                'setup: two live workers poll qq_roll, and a stale one');
INSERT INTO ids VALUES ('qr', harvest.request_query(pg_temp.run('roll'), 'status', 'null', 60));
SELECT is((SELECT count(*) FROM harvest.claim_query_requests('r-old', ARRAY['qq_roll'])), 1::bigint,
          'setup: the old worker claims the query');
SELECT is(harvest.release_query_request(pg_temp.id('qr'), 'r-new'), NULL,
          'release_query_request() by a worker that did not claim it: NULL');
SELECT is(harvest.release_query_request(999999, 'r-old'), NULL, 'release_query_request() of an unknown request: NULL');
SELECT is(harvest.release_query_request(pg_temp.id('qr'), 'r-old'), 'pending',
          'release_query_request(): back to pending while a live worker has not tried it');
SELECT results_eq($$SELECT status, claimed_by, lease_expires_at, unknown_to, error FROM harvest.query_requests
                    WHERE id = pg_temp.id('qr')$$,
                  $$VALUES ('pending'::text, NULL::text, NULL::timestamptz, '["r-old"]'::jsonb, NULL::jsonb)$$,
                  'unclaimed, the decliner kept in unknown_to');
SELECT is_empty($$SELECT * FROM harvest.claim_query_requests('r-old', ARRAY['qq_roll'])$$,
                'the decliner''s claims skip it');
SELECT results_eq($$SELECT request_id FROM harvest.claim_query_requests('r-new', ARRAY['qq_roll'])$$,
                  $$VALUES (pg_temp.id('qr'))$$, 'another worker claims it');
SELECT is(harvest.release_query_request(pg_temp.id('qr'), 'r-new'), 'failed',
          'when every live worker of the queue declined it (the stale one aside) the query fails');
SELECT results_eq(
    $$SELECT status, answered_at, error FROM harvest.query_requests WHERE id = pg_temp.id('qr')$$,
    $$VALUES ('failed'::text, harvest.now(), jsonb_build_object(
        'error_type', 'UnknownWorkflow', 'non_retryable', true,
        'message', 'no live worker polling task queue ''qq_roll'' registers workflow ''q_wf'' (2 workers claimed '
                   'the query without it): start a worker whose App registers it, then ask again',
        'details', '{"workflow_name": "q_wf", "queue": "qq_roll", "unknown_to": ["r-old", "r-new"]}'::jsonb))$$,
    'answered UnknownWorkflow, naming the queue, the workflow and the workers');
INSERT INTO ids SELECT 'ur', request_id FROM harvest.request_update(pg_temp.run('roll'), 'decide', 'null', 'ur', 60);
SELECT is((SELECT count(*) FROM harvest.claim_query_requests('r-new', ARRAY['qq_roll'])), 1::bigint,
          'setup: a worker claims an update');
SELECT lives_ok($$UPDATE harvest.workers SET status = 'draining' WHERE id = 'r-old'$$,
                'setup: the other live worker drains');
SELECT is(harvest.release_query_request(pg_temp.id('ur'), 'r-new'), 'rejected',
          'an update no live worker can take is rejected at once (nothing recorded)');
SELECT results_eq($$SELECT error ->> 'error_type', error -> 'details' -> 'unknown_to' FROM harvest.query_requests
                    WHERE id = pg_temp.id('ur')$$,
                  $$VALUES ('UnknownWorkflow'::text, '["r-new"]'::jsonb)$$, 'UnknownWorkflow, by the one worker');

-- A worker that has the workflow but not the handler declines with its own answer, kept on
-- the pending row: it is the answer once no worker is left, whoever declines last.
SELECT lives_ok($$UPDATE harvest.workers SET status = 'active' WHERE id = 'r-old'$$, 'setup: r-old is back');
INSERT INTO ids VALUES ('qh', harvest.request_query(pg_temp.run('roll'), 'newer', 'null', 60));
SELECT is((SELECT count(*) FROM harvest.claim_query_requests('r-new', ARRAY['qq_roll'])), 1::bigint,
          'setup: r-new claims a query of a handler it lacks');
SELECT throws_ok(format($$SELECT harvest.release_query_request(%s, 'r-new', '"no"')$$, pg_temp.id('qh')), 'HR001',
                 'error must be a JSON object {error_type, message, ...}', 'an error that is not an object: HR001');
SELECT is(harvest.release_query_request(pg_temp.id('qh'), 'r-new',
                                        '{"error_type": "UnknownQuery", "message": "no query newer"}'), 'pending',
          'declined with its answer: back to pending');
SELECT results_eq($$SELECT status, error ->> 'error_type' FROM harvest.query_requests WHERE id = pg_temp.id('qh')$$,
                  $$VALUES ('pending'::text, 'UnknownQuery'::text)$$, 'its answer kept on the pending row');
SELECT is((SELECT count(*) FROM harvest.claim_query_requests('r-old', ARRAY['qq_roll'])), 1::bigint,
          'setup: r-old claims it');
SELECT is(harvest.release_query_request(pg_temp.id('qh'), 'r-old'), 'failed', 'r-old lacks the workflow: failed');
SELECT results_eq($$SELECT error, unknown_to FROM harvest.query_requests WHERE id = pg_temp.id('qh')$$,
                  $$VALUES ('{"error_type": "UnknownQuery", "message": "no query newer"}'::jsonb,
                            '["r-new", "r-old"]'::jsonb)$$,
                  'answered with the handler''s error, not UnknownWorkflow');
SELECT is((harvest._claimed_request(pg_temp.id('qh'), 'r-old', NULL)).id, NULL::bigint,
          '_claimed_request() of an answered request: NULL');
-- ---------------------------------------------------------------- wait_for_first_workflow_task
-- A run whose first workflow task a worker holds: a request for it waits, out of every claim,
-- until that task's decision (or the run's end) sets it pending again.
SELECT isnt(pg_temp.start_claimed('ft', 'q_wf', 'qq_ft', 'ft-dead', '[]', 60), NULL,
            'setup: a run whose first workflow task worker ft-dead holds');
SELECT lives_ok($$SELECT harvest.register_worker('ft-w', ARRAY['qq_ft'], 'host', 1, 5)$$,
                'setup: a live worker polls qq_ft');
INSERT INTO ids VALUES ('fq', harvest.request_query(pg_temp.run('ft'), 'total', 'null', 60));
SELECT is((SELECT count(*) FROM harvest.claim_query_requests('ft-w', ARRAY['qq_ft'])), 1::bigint,
          'setup: ft-w claims the query');
SELECT is(harvest.wait_for_first_workflow_task(pg_temp.id('fq'), 'someone-else'), NULL::text,
          'wait_for_first_workflow_task() of a request another worker holds: NULL');
SELECT is(harvest.wait_for_first_workflow_task(pg_temp.id('fq'), 'ft-w'), 'waiting',
          'a run with no completed workflow task: the request waits');
SELECT results_eq(
    $$SELECT status, claimed_by, lease_expires_at FROM harvest.query_requests WHERE id = pg_temp.id('fq')$$,
    $$VALUES ('waiting'::text, NULL::text, NULL::timestamptz)$$, 'waiting, held by no worker, with no lease');
SELECT lives_ok($$SELECT set_config('harvest.fake_now', (harvest.now() + interval '40 seconds')::text, true)$$,
                'setup: 40 s later');
SELECT is_empty($$SELECT * FROM harvest.claim_query_requests('ft-w', ARRAY['qq_ft'])$$,
                'no claim takes a waiting request, however long it waits (no lease runs out)');
SELECT is((harvest._claimed_request(pg_temp.id('fq'), 'ft-w', NULL)).id, NULL::bigint,
          'nor can the worker that parked it answer it');
SELECT results_eq(
    $$SELECT status, waiting_for - 'lease_expires_at' - 'due_at', (waiting_for ->> 'lease_expires_at')::timestamptz
      FROM harvest.get_query_request(pg_temp.id('fq'))$$,
    $$VALUES ('waiting'::text,
              '{"task_status": "running", "lease_owner": "ft-dead", "lease_owner_health": null,
                "attempt": 1, "last_failure": null}'::jsonb,
              harvest.now() + interval '20 seconds')$$,
    'get_query_request() says what the run''s first workflow task waits on: its holder and its lease');
SELECT lives_ok($$SELECT set_config('harvest.fake_now', (harvest.now() - interval '40 seconds')::text, true)$$,
                'setup: back 40 s');
SELECT is((SELECT count(*) FROM harvest.list_update_requests(pg_temp.run('ft'))), 0::bigint,
          '(a waiting query is no update request)');
SELECT is((SELECT c.execution_status FROM harvest.complete_workflow_task(
              pg_temp.task('ft'), pg_temp.token('ft'), pg_temp.last_event_id(pg_temp.run('ft')), '[]') AS c),
          'RUNNING', 'setup: the run''s first workflow task completes');
SELECT results_eq($$SELECT status, claimed_by FROM harvest.query_requests WHERE id = pg_temp.id('fq')$$,
                  $$VALUES ('waiting'::text, NULL::text)$$,
                  'the decision itself does not touch the waiting request (no cost on every first decision)');
SELECT is_empty($$SELECT * FROM harvest.claim_query_requests('ft-w', ARRAY['other_queue'])$$,
                'a claim of other queues leaves it waiting');
SELECT results_eq($$SELECT request_id FROM harvest.claim_query_requests('ft-w', ARRAY['qq_ft'])$$,
                  $$VALUES (pg_temp.id('fq'))$$,
                  'a claim of its queue finds the run decided, sets it pending and takes it');
SELECT is((SELECT waiting_for FROM harvest.get_query_request(pg_temp.id('fq'))), NULL::jsonb,
          'waiting_for is NULL for a request that does not wait');
SELECT is(harvest.wait_for_first_workflow_task(pg_temp.id('fq'), 'ft-w'), 'pending',
          'a run whose first workflow task completed (meanwhile): pending again at once, never left waiting');

-- A run that ends before its first workflow task completed: its waiting requests are answered.
SELECT isnt(pg_temp.start_claimed('fe', 'q_wf', 'qq_ft', 'ft-dead', '[]', 60), NULL,
            'setup: another run whose first workflow task ft-dead holds');
INSERT INTO ids SELECT 'fu', request_id FROM harvest.request_update(pg_temp.run('fe'), 'spend', '5', 'fu', 60);
SELECT is((SELECT count(*) FROM harvest.claim_query_requests('ft-w', ARRAY['qq_ft'])), 2::bigint,
          'setup: ft-w claims its update (and the query above again)');
SELECT is(harvest.wait_for_first_workflow_task(pg_temp.id('fu'), 'ft-w'), 'waiting', 'the update waits');
SELECT lives_ok(format($$SELECT harvest.fail_workflow_task(%s, %s, '{"error_type": "Boom", "message": "no"}')$$,
                       pg_temp.task('fe'), pg_temp.token('fe')), 'setup: its first workflow task fails');
SELECT results_eq(
    $$SELECT status, waiting_for -> 'task_status', waiting_for -> 'last_failure'
      FROM harvest.get_query_request(pg_temp.id('fu'))$$,
    $$VALUES ('waiting'::text, '"pending"'::jsonb, '{"error_type": "Boom", "message": "no"}'::jsonb)$$,
    'a failed task''s retry: the update still waits, and waiting_for has the task''s last error');
SELECT lives_ok(format($$SELECT harvest.terminate_workflow(%L, 'gone')$$, pg_temp.run('fe')),
                'setup: the run is terminated');
SELECT results_eq($$SELECT request_id, execution_status FROM harvest.claim_query_requests('ft-w', ARRAY['qq_ft'])$$,
                  $$VALUES (pg_temp.id('fu'), 'TERMINATED'::text)$$,
                  'a claim finds the run ended, sets the waiting update pending and takes it');
SELECT * FROM finish();
ROLLBACK;
