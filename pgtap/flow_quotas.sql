-- functions/flow_quotas.sql: harvest._check_quota, harvest._take_flow_key, harvest.quota_usage, and the check
-- in start_workflow;
-- the history-bytes quota and the history byte cap agree.
BEGIN;
SELECT plan(29);
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT harvest.declare_flow_policies('{"workflows": {"wf_q": {"quota": {"key": "input.t", "max_active_executions": 2}}}}');
SELECT harvest.start_workflow('wf_q', '[{"t": "a"}]', 'q' || n, 'qq') FROM generate_series(1, 2) AS n;
SELECT is(harvest.quota_usage('a', 'max_active_executions'), 2::bigint, 'quota_usage(): running runs of the key');
SELECT throws_ok($$SELECT harvest.start_workflow('wf_q', '[{"t": "a"}]', 'q3', 'qq')$$, 'HR006',
                 'quota max_active_executions of key "a" is exhausted: usage 2 of 2 (workflow wf_q)',
                 'a start past the quota: HR006 naming quota, key and usage');
SELECT lives_ok($$SELECT harvest.start_workflow('wf_q', '[{"t": "b"}]', 'q4', 'qq')$$, 'another key has its own budget');
SELECT throws_ok($$SELECT harvest._check_quota('wf_q', 'a', '{"max_active_executions": 1}')$$, 'HR006', NULL,
                 '_check_quota() on its own');
SELECT results_eq($$SELECT kind, key FROM harvest.flow_keys ORDER BY key$$, $$VALUES ('quota'::text, 'a'::text), ('quota', 'b')$$,
                  'flow_keys: a row per quota key started under (a refused start''s is the same row)');
SELECT harvest._take_flow_key('concurrency', 'a');
SELECT results_eq($$SELECT kind, key FROM harvest.flow_keys WHERE key = 'a' ORDER BY kind$$,
                  $$VALUES ('concurrency'::text, 'a'::text), ('quota', 'a')$$,
                  '_take_flow_key(): a row per kind and key');
SELECT harvest._take_flow_key('quota', 'a'), harvest._take_flow_key('quota', 'fresh');
SELECT results_eq($$SELECT key FROM harvest.flow_keys WHERE kind = 'quota' ORDER BY key$$,
                  $$VALUES ('a'::text), ('b'), ('fresh')$$,
                  '_take_flow_key() again: the same row; of a new key: its row');
SELECT throws_ok($$SELECT harvest._take_flow_key('mutex', 'a')$$, '23514', NULL,
                 '_take_flow_key() of an unknown kind: the check refuses it');
SELECT cmp_ok(harvest.quota_usage('a', 'max_history_bytes'), '>', 0::bigint, 'history bytes are counted');
SELECT throws_ok($$SELECT harvest.quota_usage('a', 'nope')$$, 'HR001', NULL, 'an unknown quota: HR001');

-- The max_history_bytes quota and the history byte cap (decide.sql) measure with one
-- helper, harvest._event_bytes, kept in executions.history_bytes: they agree.
CREATE TEMP TABLE qa ON COMMIT DROP AS
SELECT c.task_id, c.fencing_token, c.execution_id FROM harvest.claim_tasks('w-q', ARRAY['qq'], 10) AS c
JOIN harvest.executions AS e ON e.id = c.execution_id WHERE e.workflow_id = 'q1';
SELECT harvest.complete_workflow_task(task_id, fencing_token, 1,
    jsonb_build_array(jsonb_build_object('type', 'start_timer', 'seq', 1, 'duration', 60,
                                         'padding', repeat('é', 3000))), p_byte_cap => 1)
FROM qa;
SELECT is((SELECT (failure #>> '{details,bytes}')::bigint FROM harvest.executions
           WHERE id = (SELECT execution_id FROM qa)),
          (SELECT sum(harvest._event_bytes(ev.event_data))::bigint FROM harvest.events AS ev
           WHERE ev.execution_id = (SELECT execution_id FROM qa) AND ev.event_type <> 'WorkflowFailed'),
          'the byte cap counted the sum of _event_bytes over the run''s events');
SELECT is(harvest.quota_usage('a', 'max_history_bytes'),
          (SELECT sum(harvest._event_bytes(ev.event_data))::bigint FROM harvest.events AS ev
           JOIN harvest.executions AS e ON e.id = ev.execution_id WHERE e.quota_key = 'a'),
          'the max_history_bytes quota counts the same sum over the key''s runs');
SELECT is((SELECT history_bytes FROM harvest.executions WHERE id = (SELECT execution_id FROM qa)),
          (SELECT sum(octet_length(ev.event_data::text))::bigint FROM harvest.events AS ev
           WHERE ev.execution_id = (SELECT execution_id FROM qa)),
          'the measure is the JSON text bytes of each event (a multi-byte character counts its bytes)');
-- A reset fork copies its source's history through the reset point: both are kept (the
-- source until retention deletes it), so the key's history bytes count the carried events
-- twice, as they are stored twice; the per-run byte cap of each counts its own history.
SELECT harvest.declare_flow_policies('{"workflows": {"wf_qr": {"quota": {"key": "input.t", "max_history_bytes": 1000000}}}}');
CREATE TEMP TABLE qr ON COMMIT DROP AS
SELECT s.execution_id FROM harvest.start_workflow('wf_qr', '[{"t": "r"}]', 'qr1', 'qrq') AS s;
SELECT harvest.complete_workflow_task(c.task_id, c.fencing_token, 1,
    jsonb_build_array(jsonb_build_object('type', 'record_marker', 'seq', 1, 'kind', 'side_effect',
                                         'value', repeat('x', 500))))
FROM harvest.claim_tasks('w-qr', ARRAY['qrq'], 1) AS c;
CREATE TEMP TABLE qr_fork ON COMMIT DROP AS
SELECT (harvest.reset_workflow(execution_id, (SELECT last_event_id FROM harvest.executions WHERE id = execution_id),
                               'fix') ->> 'new_execution_id')::uuid AS id FROM qr;
SELECT is(harvest.quota_usage('r', 'max_history_bytes'),
          (SELECT sum(harvest._event_bytes(ev.event_data))::bigint FROM harvest.events AS ev
           WHERE ev.execution_id IN ((SELECT execution_id FROM qr), (SELECT id FROM qr_fork))),
          'a reset: the key''s history bytes are the bytes stored for the source and the fork');
SELECT is((SELECT history_bytes FROM harvest.executions WHERE id = (SELECT id FROM qr_fork)),
          (SELECT sum(harvest._event_bytes(ev.event_data))::bigint FROM harvest.events AS ev
           WHERE ev.execution_id = (SELECT id FROM qr_fork)),
          'the fork''s own measure (its byte cap) is its own history: the copy and its marker');

-- A continue-as-new successor is the same run going on, not a new admission: a key whose
-- dead-letter quota is exhausted (so new starts are refused) still lets its running runs rotate.
SELECT harvest.declare_flow_policies('{"workflows": {"wf_qc": {"quota": {"key": "input.t", "max_dead_letters": 1}}}}');
SELECT harvest.start_workflow('wf_qc', '[{"t": "c"}]', 'qc1', 'qcq');
INSERT INTO harvest.dead_letters (execution_id, workflow_name, seq, activity_name, queue, attempts, failure,
                                  scheduled_at, failed_at)
SELECT e.id, 'wf_qc', 9, 'a', 'qcq', 1, '{}', harvest.now(), harvest.now()
FROM harvest.executions AS e WHERE e.workflow_id = 'qc1';
SELECT lives_ok($$SELECT harvest.complete_workflow_task(c.task_id, c.fencing_token, 1,
                      '[{"type": "continue_as_new", "input": [{"t": "c"}]}]')
                  FROM harvest.claim_tasks('w-qc', ARRAY['qcq'], 1) AS c$$,
                'a continue-as-new is not refused by the quota of its key');

-- The ended runs' bytes (sql/flow.sql, quota_ended_bytes; the triggers of sql/triggers.sql) and
-- their fold: the figure stays the stored sum through a close, an insert and a delete of ended
-- runs, a key change, and a fold.
CREATE TEMP TABLE qe ON COMMIT DROP AS
SELECT s.execution_id AS id FROM harvest.start_workflow('wf_qr', '[{"t": "e"}]', 'qe1', 'qeq') AS s;
SELECT is((SELECT count(*) FROM harvest.quota_ended_bytes WHERE quota_key = 'e'), 0::bigint,
          'a live run adds no ended bytes');
SELECT harvest.terminate_workflow(id, 'stop') FROM qe;
SELECT is((SELECT sum(bytes) FROM harvest.quota_ended_bytes WHERE quota_key = 'e')::bigint,
          (SELECT history_bytes FROM harvest.executions WHERE id = (SELECT id FROM qe)),
          'a close adds the run''s bytes to its key''s ended bytes');
INSERT INTO harvest.executions (id, workflow_name, workflow_id, status, created_at, completed_at, quota_key, history_bytes)
VALUES (gen_random_uuid(), 'wf_qr', 'qe2', 'COMPLETED', harvest.now(), harvest.now(), 'e', 1000),
       (gen_random_uuid(), 'wf_qr', 'qe3', 'COMPLETED', harvest.now(), harvest.now(), 'e', 30);
SELECT is(harvest.quota_usage('e', 'max_history_bytes'),
          (SELECT sum(history_bytes)::bigint FROM harvest.executions WHERE quota_key = 'e'),
          'an inserted ended run adds its bytes: quota_usage is the key''s stored sum');
UPDATE harvest.executions SET quota_key = 'e2', status = 'FAILED' WHERE workflow_id = 'qe3';
SELECT results_eq($$SELECT harvest.quota_usage('e', 'max_history_bytes'), harvest.quota_usage('e2', 'max_history_bytes')$$,
                  $$SELECT (SELECT sum(history_bytes)::bigint FROM harvest.executions WHERE quota_key = 'e'), 30::bigint$$,
                  'an ended run whose key changes moves its bytes');
SELECT cmp_ok((SELECT count(*) FROM harvest.quota_ended_bytes WHERE quota_key = 'e'), '>', 1::bigint,
              'the key has a row per write before a fold');
SELECT harvest._fold_quota_bytes(ARRAY['e', 'e2']);
SELECT results_eq($$SELECT quota_key, bytes FROM harvest.quota_ended_bytes WHERE quota_key IN ('e', 'e2') ORDER BY 1$$,
                  $$SELECT e.quota_key, sum(e.history_bytes)::bigint FROM harvest.executions AS e
                    WHERE e.quota_key IN ('e', 'e2') GROUP BY 1 ORDER BY 1$$,
                  '_fold_quota_bytes(): a row a key, its sum');
DELETE FROM harvest.executions WHERE workflow_id IN ('qe2', 'qe3');
SELECT results_eq($$SELECT quota_key, bytes FROM harvest.quota_ended_bytes WHERE quota_key IN ('e', 'e2') ORDER BY 1$$,
                  $$SELECT e.quota_key, sum(e.history_bytes)::bigint FROM harvest.executions AS e
                    WHERE e.quota_key IN ('e', 'e2') GROUP BY 1 ORDER BY 1$$,
                  'a delete takes the runs'' bytes off and folds their keys: a key left with none has no row');
SELECT is(has_function_privilege('harvest_reader', 'harvest._fold_quota_bytes(text[])', 'EXECUTE'), false,
          '_fold_quota_bytes() is a helper: no role executes it');

-- A dead letter's quota key (sql/dead_letters.sql; the trigger of sql/triggers.sql): its run's,
-- whatever the insert or an update names, and what max_dead_letters counts.
SELECT is((SELECT d.quota_key FROM harvest.dead_letters AS d JOIN harvest.executions AS e ON e.id = d.execution_id
           WHERE e.workflow_id = 'qc1' AND d.seq = 9), 'c',
          'a dead letter inserted without a key takes its run''s');
INSERT INTO harvest.dead_letters (execution_id, workflow_name, seq, activity_name, queue, attempts, failure,
                                  scheduled_at, failed_at, quota_key)
SELECT e.id, 'wf_qc', 10, 'a', 'qcq', 1, '{}', harvest.now(), harvest.now(), 'someone-else'
FROM harvest.executions AS e WHERE e.workflow_id = 'qc1' AND e.continued_from IS NULL;
SELECT is((SELECT quota_key FROM harvest.dead_letters WHERE seq = 10), 'c',
          'a dead letter inserted naming another key takes its run''s');
UPDATE harvest.dead_letters SET quota_key = NULL WHERE seq = 10;
SELECT is((SELECT quota_key FROM harvest.dead_letters WHERE seq = 10), 'c',
          'an update of a dead letter''s key takes its run''s again');
SELECT is(harvest.quota_usage('c', 'max_dead_letters'),
          (SELECT count(*) FROM harvest.executions AS e JOIN harvest.dead_letters AS d ON d.execution_id = e.id
           WHERE e.quota_key = 'c'),
          'quota_usage(max_dead_letters): the dead letters of the key''s runs');
SELECT is(has_function_privilege('harvest_reader', 'harvest._dead_letter_quota_key()', 'EXECUTE'), false,
          '_dead_letter_quota_key() is a trigger''s: no role executes it');
SELECT * FROM finish();
ROLLBACK;

-- A quota's limits by the one rule for a JSON field (core.sql, _json_bigint): 1.0 is 1 at every
-- start (a raw ::bigint cast failed each with 22P02), a string is refused when declared.
BEGIN;
SELECT plan(3);
SELECT harvest.declare_flow_policies('{"workflows": {"jn": {"quota": {"key": "input", "max_active_executions": 1.0}}}}');
SELECT harvest.start_workflow('jn', '["k"]', 'jn-1', 'jq');
SELECT throws_ok($$SELECT harvest.start_workflow('jn', '["k"]', 'jn-2', 'jq')$$, 'HR006', NULL,
                 '_check_quota(): max_active_executions 1.0 is a quota of 1');
SELECT throws_ok($$SELECT harvest._check_quota('jn', 'k2', '{"max_dead_letters": "3"}')$$, 'HR001',
                 'workflow jn: quota.max_dead_letters must be a whole number from 0 to 9223372036854775807, got "3"',
                 '... a limit in a string is HR001 naming it');
SELECT throws_ok($$SELECT harvest.declare_flow_policies('{"workflows": {"x": {"quota": {"key": "input", "max_history_bytes": 1.5}}}}')$$,
                 'HR001', 'workflow x: quota.max_history_bytes must be a whole number from 0 to 9223372036854775807, got 1.5',
                 'declare_flow_policies() refuses it first');
SELECT * FROM finish();
ROLLBACK;
