-- functions/flow_usage.sql: harvest.count_usage, harvest.record_llm_call.
BEGIN;
SELECT plan(19);
SET LOCAL harvest.fake_now = '2030-03-01 00:00:00+00';
CREATE TEMP TABLE u ON COMMIT DROP AS
SELECT n, (harvest.start_workflow('wf_u', '[]', 'u' || n, 'uq',
    p_search_attributes => CASE WHEN n < 3 THEN jsonb_build_object('tenant', 'acme') ELSE '{}' END)).execution_id
FROM generate_series(1, 3) AS n;
-- run 1 schedules an activity, claimed 4 s later and completed at 10 s (6 s of compute, 10 s
-- since it was scheduled); run 2 fails; run 3 is terminated
CREATE TEMP TABLE c ON COMMIT DROP AS SELECT * FROM harvest.claim_tasks('w', ARRAY['uq'], 10);
SELECT harvest.complete_workflow_task(c.task_id, c.fencing_token, 1, CASE u.n WHEN 1 THEN
    '[{"type": "schedule_activity", "seq": 1, "name": "a", "input": [], "options": {}}]'::jsonb
    ELSE '[{"type": "fail_workflow", "failure": {"message": "no"}}]' END)
FROM c JOIN u ON u.execution_id = c.execution_id WHERE u.n < 3;
SELECT set_config('harvest.fake_now', '2030-03-01 00:00:04+00', true);
CREATE TEMP TABLE a ON COMMIT DROP AS
SELECT * FROM harvest.claim_tasks('w', ARRAY['uq'], 10) AS c WHERE c.kind = 'activity';
-- the attempt reports two model calls: one priced, one with no known price
SELECT isnt(harvest.record_llm_call(a.task_id, a.fencing_token, 'model-x', 1200, 300, 2500, 800), NULL,
            'record_llm_call(): the attempt holding the task records a call in the cost ledger')
FROM a;
SELECT harvest.record_llm_call(a.task_id, a.fencing_token, 'model-y', 10, 5) FROM a;
SELECT throws_ok(format('SELECT harvest.record_llm_call(%s, %s, %L, 1, 1)', a.task_id, a.fencing_token + 1, 'm'),
                 'HR004', NULL, 'a stale attempt (another fencing token) cannot write')
FROM a;
SELECT throws_ok(format('SELECT harvest.record_llm_call(%s, %s, %L, -1, 1)', a.task_id, a.fencing_token, 'm'),
                 'HR001', NULL, 'negative tokens are refused')
FROM a;
SELECT set_config('harvest.fake_now', '2030-03-01 00:00:10+00', true);
SELECT harvest.complete_activity(a.task_id, a.fencing_token, '1') FROM a;
SELECT harvest.terminate_workflow(execution_id, 'x') FROM u WHERE n = 3;

SELECT is((SELECT (e.event_data ->> 'started_at')::timestamptz FROM harvest.events AS e JOIN u ON u.n = 1
           WHERE e.execution_id = u.execution_id AND e.event_type = 'ActivityCompleted'),
          '2030-03-01 00:00:04+00'::timestamptz, 'the outcome records when its final attempt started');
SELECT results_eq($$SELECT group_name, workflow_starts, completed, failed, cancelled, timed_out,
                           activity_executions, activity_executions_failed, activity_compute_seconds
                    FROM harvest.count_usage('2030-03-01', '2030-03-02')$$,
    $$VALUES ('wf_u'::text, 3::bigint, 0::bigint, 1::bigint, 0::bigint, 0::bigint, 1::bigint, 0::bigint, 6::double precision)$$,
    'count_usage(): by workflow name, from the events; compute is final attempt start to outcome');
SELECT results_eq($$SELECT llm_calls, llm_input_tokens, llm_output_tokens, llm_cost_usd_micros, llm_unpriced_calls,
                           llm_latency_ms FROM harvest.count_usage('2030-03-01', '2030-03-02', 'search_attr:tenant')
                    WHERE group_name = 'acme'$$,
    $$VALUES (2::bigint, 1210::bigint, 305::bigint, 2500::bigint, 1::bigint, 800::bigint)$$,
    'the llm_* fields sum the cost ledger; a call with no cost counts as unpriced');
SELECT results_eq($$SELECT group_name, workflow_starts, failed FROM harvest.count_usage('2030-03-01', '2030-03-02', 'search_attr:tenant')$$,
    $$VALUES ('(unattributed)'::text, 1::bigint, 0::bigint), ('acme', 2, 1)$$,
    'by a search attribute; runs without it are (unattributed)');
SELECT is_empty($$SELECT * FROM harvest.count_usage('2030-03-02', '2030-03-03')$$, 'a window with no events is empty');
SELECT results_eq($$SELECT group_name, workflow_starts, llm_calls FROM harvest.count_usage('2030-03-01 00:00:03', '2030-03-01 00:00:05')$$,
    $$VALUES ('wf_u'::text, 0::bigint, 2::bigint)$$,
    'a window holding only ledger rows still reports their group');
SELECT throws_ok($$SELECT * FROM harvest.count_usage('2030-01-01', '2030-06-01')$$,
                 'HR001', 'usage report: the window 2030-01-01T00:00:00+00:00 .. 2030-06-01T00:00:00+00:00 '
                          '(13046400 seconds) is wider than the ceiling of 7776000 seconds',
                 'a window wider than the server''s 90 days is refused, naming the ceiling');
SET LOCAL ROLE harvest_reader;
SELECT throws_ok($$SELECT * FROM harvest.count_usage('2030-01-01', '2030-06-01')$$,
                 'HR001', NULL, 'a harvest_reader cannot lift it (no caller''s parameter exists)');
RESET ROLE;
UPDATE harvest.engine_settings SET usage_max_window = interval '200 days';
SELECT lives_ok($$SELECT * FROM harvest.count_usage('2030-01-01', '2030-06-01')$$,
                'the owner sets the server''s ceiling (engine_settings.usage_max_window)');
SELECT throws_ok($$SELECT * FROM harvest.count_usage('2030-03-02', '2030-03-01')$$, 'HR001', NULL, 'to before from');
SELECT throws_ok($$SELECT * FROM harvest.count_usage('2030-03-01', '2030-03-02', 'tenant')$$, 'HR001', NULL,
                 'an unknown group_by');
SELECT throws_ok($$SELECT * FROM harvest.count_usage('2030-03-01', '2030-03-02', 'search_attr:ten ant')$$, 'HR001',
                 'usage report: group_by "search_attr:ten ant" names no search attribute key',
                 'a group_by search_attr:<key> whose key no filter can name (the dashboard''s rule)');

-- A reset fork carries copies of its source's events (with their original times): the start and
-- the activity they record are counted once, on the source; only what the fork appends is its own.
SELECT set_config('harvest.fake_now', '2030-03-01 00:00:20+00', true);
CREATE TEMP TABLE f ON COMMIT DROP AS
SELECT (harvest.reset_workflow(u.execution_id, e.event_id, 'redeploy', 'ops-1') ->> 'new_execution_id')::uuid AS id
FROM u JOIN harvest.events AS e ON e.execution_id = u.execution_id AND e.event_type = 'ActivityCompleted'
WHERE u.n = 1;
SELECT results_eq($$SELECT group_name, workflow_starts, activity_executions, activity_compute_seconds
                    FROM harvest.count_usage('2030-03-01', '2030-03-02')$$,
    $$VALUES ('wf_u'::text, 3::bigint, 1::bigint, 6::double precision)$$,
    'a reset fork''s copied events are not counted again (one start, one activity, its compute once)');
-- the fork's own work counts: it completes
CREATE TEMP TABLE fc ON COMMIT DROP AS
SELECT c.* FROM harvest.claim_tasks('w', ARRAY['uq'], 10) AS c JOIN f ON f.id = c.execution_id;
SELECT harvest.complete_workflow_task(fc.task_id, fc.fencing_token, 1,
    '[{"type": "complete_workflow", "result": "ok"}]') FROM fc;
SELECT results_eq($$SELECT workflow_starts, completed, activity_executions FROM harvest.count_usage('2030-03-01', '2030-03-02')$$,
    $$VALUES (3::bigint, 1::bigint, 1::bigint)$$,
    'what the fork appends after its copies is counted (its completion)');

-- The report reads the runs alive in its window by their completed_at and status, not every run
-- (0114: a report of the last 24 hours read all 2M runs, 3.7 s a view of the concurrency page):
-- 40 runs closed a month before the window are not read.
CREATE TEMP TABLE old_runs ON COMMIT DROP AS
SELECT (harvest.start_workflow('wf_old', '[]', 'old' || n, 'oldq')).execution_id AS id
FROM generate_series(1, 40) AS n;
UPDATE harvest.executions AS e
SET status = 'COMPLETED', created_at = '2030-02-01', completed_at = '2030-02-01 00:00:01'
FROM old_runs AS o WHERE e.id = o.id;
ANALYZE harvest.executions;
SET LOCAL enable_seqscan = off;
CREATE TEMP TABLE reads_before ON COMMIT DROP AS
SELECT s.seq_tup_read + coalesce(s.idx_tup_fetch, 0) AS n FROM pg_stat_xact_user_tables AS s
WHERE s.relid = 'harvest.executions'::regclass;
SELECT results_eq($$SELECT group_name, workflow_starts FROM harvest.count_usage('2030-03-01', '2030-03-02')$$,
    $$VALUES ('wf_u'::text, 3::bigint)$$, 'runs closed before the window are not in its report');
SELECT cmp_ok((SELECT s.seq_tup_read + coalesce(s.idx_tup_fetch, 0) - b.n FROM pg_stat_xact_user_tables AS s, reads_before AS b
               WHERE s.relid = 'harvest.executions'::regclass), '<', 20::bigint,
              '... nor read: the report reads the runs of its window (its completed_at and the running ones)');
RESET enable_seqscan;
SELECT * FROM finish();
ROLLBACK;
