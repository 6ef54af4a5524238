-- functions/fleet.sql: list_workers, get_worker, worker_health, drain_worker, drain_preview, list_audit_log.
BEGIN;
SELECT plan(23);
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
SELECT is(harvest.worker_health() -> 'by_queue', '{"email": 2, "default": 2}'::jsonb,
          'by_queue counts every worker that is not stopped, stale ones too (issue 12 item 19)');
SELECT is(harvest.worker_health() -> 'by_queue_health',
          '{"email": {"healthy": 1, "draining": 0, "stale": 1}, "default": {"healthy": 2, "draining": 0, "stale": 0}}'::jsonb,
          'by_queue_health splits each queue into healthy, draining and stale');
SELECT is(harvest.worker_health() -> 'by_shard', '{"0": 3}'::jsonb, 'by_shard: the one shard, 0');
SELECT is((harvest.worker_health() ->> 'stale')::int, 1, 'stale count');
SELECT is(harvest.get_worker('fl-live') -> 'claimed_task_ids', '[]'::jsonb, 'get_worker lists claimed tasks');
SELECT is((SELECT uncovered_queues FROM harvest.drain_preview(p_worker_id => 'fl-live')), ARRAY['email'],
          'preview: draining fl-live leaves email without a live worker');
SELECT is(harvest.drain_worker('fl-live', NULL, 'pgtap') ->> 'outcome', 'accepted', 'drain accepted');
SELECT is(harvest.worker_heartbeat('fl-live'), 'draining', 'the worker hears it on its heartbeat');
SELECT is(harvest.drain_worker('fl-live') ->> 'outcome', 'already_draining', 'twice: already_draining');
SELECT is(harvest.drain_worker('fl-stale') ->> 'outcome', 'stale_worker', 'stale worker');
SELECT is(harvest.drain_worker('fl-none') ->> 'outcome', 'not_found', 'unknown worker');
SELECT is((SELECT count(*) FROM harvest.list_audit_log(p_operation => 'worker.drain')), 4::bigint,
          'every drain request is audited');

SELECT is(harvest._worker_health((SELECT w FROM harvest.workers w WHERE w.id = 'fl-other')), 'healthy',
          '_worker_health of a fresh worker');
SELECT is(harvest._drain_outcome((SELECT w FROM harvest.workers w WHERE w.id = 'fl-other')), 'accepted',
          '_drain_outcome of an active worker');
SELECT ok(harvest._audit('test.op', 't', 'me', '{}') > 0, '_audit returns the new row id');

-- The source of an audit row: the face the session says it is (application_name).
SELECT is(harvest._audit_source('harvest-cli'), 'cli', '_audit_source(): the CLI is cli');
SELECT is(harvest._audit_source('harvest-api'), 'api', '_audit_source(): the HTTP API is api');
SELECT is(harvest._audit_source('harvest-ui'), 'ui', '_audit_source(): the dashboard is ui');
SELECT is(harvest._audit_source('psql'), 'cli', '_audit_source(): any other client is cli, the nearest of the three');
SET LOCAL application_name = 'harvest-api';
SELECT harvest._audit('test.source', 't', NULL, '{"k": 1}');
SELECT results_eq($$SELECT source, details FROM harvest.list_audit_log(1)$$,
                  $$VALUES ('api'::text, '{"k": 1}'::jsonb)$$,
                  'list_audit_log() shows each row''s source');
RESET application_name;

SELECT * FROM finish();
ROLLBACK;
