-- functions/quotas.sql: harvest._check_quota, harvest.quota_usage, and the check in start_workflow.
BEGIN;
SELECT plan(6);
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
SELECT cmp_ok(harvest.quota_usage('a', 'max_history_bytes'), '>', 0::bigint, 'history bytes are counted');
SELECT throws_ok($$SELECT harvest.quota_usage('a', 'nope')$$, 'HR001', NULL, 'an unknown quota: HR001');
SELECT * FROM finish();
ROLLBACK;
