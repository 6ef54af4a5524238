-- functions/audit.sql: harvest._audit, harvest._audit_source, harvest.list_audit_log.
BEGIN;
SELECT plan(6);

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
