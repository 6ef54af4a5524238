-- functions/audit.sql: harvest._audit, harvest._audit_context, harvest._audit_source, harvest.list_audit_log,
-- harvest._audit_asserted, harvest.record_incomplete_write, harvest.prune_audit_log, harvest.count_audit_log.
BEGIN;
SELECT plan(37);

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

-- What the caller asserts (transaction-local settings) goes into its own rows, beside the login.
SELECT results_eq($$SELECT actor, source, route FROM harvest._audit_context()$$,
                  $$VALUES (NULL::text, NULL::text, NULL::text)$$, '_audit_context(): nothing asserted, nothing set');
SELECT set_config('harvest.audit_actor', 'ci-deploy', true), set_config('harvest.audit_source', 'api', true),
       set_config('harvest.audit_route', 'POST /workflows/{execution_id}/terminate', true);
SELECT harvest._audit('test.context', 't', NULL, '{}');
SELECT results_eq($$SELECT actor, login, source, route FROM harvest.list_audit_log(1)$$,
                  $$VALUES ('ci-deploy'::text, session_user::text COLLATE "default", 'api'::text,
                            'POST /workflows/{execution_id}/terminate'::text)$$,
                  '_audit(): the asserted actor, source and route, and the login beside them');
SELECT set_config('harvest.audit_source', 'carrier-pigeon', true), set_config('harvest.audit_actor', ' ', true);
SELECT results_eq($$SELECT actor, source FROM harvest._audit_context()$$,
                  $$VALUES (NULL::text, NULL::text)$$, '_audit_context(): a blank actor or unknown source is unset');
SELECT harvest._audit('test.context', 't', NULL, '{}');
SELECT results_eq($$SELECT actor, login, source FROM harvest.list_audit_log(1)$$,
                  $$VALUES (session_user::text COLLATE "default", session_user::text COLLATE "default", 'cli'::text)$$,
                  '_audit(): without an assertion the actor is the login');
SELECT results_eq($$SELECT acting_role FROM harvest.list_audit_log(1)$$,
                  $$VALUES (session_user::text COLLATE "default")$$,
                  '_audit(): without SET ROLE the acting role is the login');


-- Starts and signals: audited only when the caller names an actor (the HTTP API, the dashboard).
CREATE TEMP TABLE before_count ON COMMIT DROP AS SELECT count(*) AS n FROM harvest.audit_log;
SELECT harvest._audit_asserted('test.asserted', 't', '{}');
SELECT is((SELECT count(*) FROM harvest.audit_log) - (SELECT n FROM before_count), 0::bigint,
          '_audit_asserted(): no actor named, no row (application traffic)');
SELECT harvest.start_workflow('audited_wf', '[]', 'quiet', 'audited_q');
SELECT is((SELECT count(*) FROM harvest.audit_log WHERE operation = 'workflow.start'), 0::bigint,
          'a start from the client library (no actor) writes no audit row');
SELECT set_config('harvest.audit_actor', 'ops-bot', true), set_config('harvest.audit_source', 'api', true),
       set_config('harvest.audit_route', 'POST /workflows/{name}/start', true);
CREATE TEMP TABLE loud ON COMMIT DROP AS
SELECT (harvest.start_workflow('audited_wf', '[]', 'loud', 'audited_q')).execution_id AS id;
SELECT harvest.signal_workflow((SELECT id FROM loud), 'poke', '{"secret": 1}');
SELECT results_eq($$SELECT operation, target, actor, source, details - 'event_id' - 'application_name' FROM harvest.audit_log
                    WHERE operation IN ('workflow.start', 'workflow.signal') ORDER BY id$$,
                  $$VALUES ('workflow.start'::text, (SELECT id::text FROM loud), 'ops-bot'::text, 'api'::text,
                            '{"workflow_name": "audited_wf", "workflow_id": "loud", "queue": "audited_q",
                              "reuse_policy": "allow_duplicate", "conflict_policy": "unspecified",
                              "outcome": "started"}'::jsonb),
                           ('workflow.signal', (SELECT id::text FROM loud), 'ops-bot', 'api',
                            '{"signal_name": "poke"}'::jsonb)$$,
                  'a start and a signal through a face are audited with its actor, without the payload');
SELECT is((SELECT count(*) FROM harvest.audit_log WHERE details::text LIKE '%secret%'), 0::bigint,
          'no signal payload in the audit log');
-- The role a row's action used: the one the session set (a token's, through the HTTP API), not
-- only the login that set it.
SELECT set_config('test.loud', (SELECT id::text FROM loud), true);
SET LOCAL ROLE harvest_operator;
SELECT harvest.signal_workflow(current_setting('test.loud')::uuid, 'as-operator', '{}');
RESET ROLE;
SELECT results_eq($$SELECT actor, login, acting_role FROM harvest.audit_log
                    WHERE operation = 'workflow.signal' AND details ->> 'signal_name' = 'as-operator'$$,
                  $$VALUES ('ops-bot'::text, session_user::text COLLATE "default", 'harvest_operator'::text)$$,
                  'an audited action under SET ROLE records the role it acted as beside the login');

-- list_audit_log: newest first by time, then id (the order every shard's rows are merged in),
-- whatever order the ids were taken in (a long action's row gets its id last).
SET LOCAL harvest.fake_now = '2040-01-01 00:00:10+00';
SELECT harvest._audit('test.order', 'later', NULL, '{}');
SET LOCAL harvest.fake_now = '2040-01-01 00:00:00+00';
SELECT harvest._audit('test.order', 'earlier', NULL, '{}');
SELECT harvest._audit('test.order', 'earlier, a greater id', NULL, '{}');
SELECT results_eq($$SELECT target FROM harvest.list_audit_log(3, 'test.order')$$,
                  $$VALUES ('later'::text), ('earlier, a greater id'), ('earlier')$$,
                  'list_audit_log(): newest by time first, ties by the greater id, not by id alone');
-- ... and pages after a position, the last row's (at, id), in the same order.
SELECT results_eq(
    $$SELECT r.target FROM harvest.audit_log AS a, LATERAL harvest.list_audit_log(3, 'test.order', a.at, a.id) AS r
      WHERE a.target = 'earlier, a greater id'$$,
    $$VALUES ('earlier'::text)$$, 'list_audit_log(p_before_at, p_before_id): the rows after that one');
SELECT is_empty(
    $$SELECT r.* FROM harvest.audit_log AS a, LATERAL harvest.list_audit_log(3, 'test.order', a.at, a.id) AS r
      WHERE a.target = 'earlier' AND a.operation = 'test.order'$$,
    'list_audit_log() after the last row: empty');
SELECT throws_ok($$SELECT * FROM harvest.list_audit_log(3, NULL, now(), NULL)$$, 'HR001',
                 'a position in the audit log is a time and an id: give both or neither',
                 'list_audit_log() with a time and no id: HR001');

-- A pacing override's write that missed a shard: a second row of its operation, outcome failed.
SELECT ok(harvest.record_incomplete_write('rate_limit.override', 'charge', '[{"shard_id": 2, "error": "unreachable"}]',
                                         'ops') > 0, 'record_incomplete_write() returns the new row id');
SELECT results_eq(
    $$SELECT operation, target, operator_id, details - 'application_name'
      FROM harvest.list_audit_log(1, 'rate_limit.override')$$,
    $$VALUES ('rate_limit.override'::text, 'charge'::text, 'ops'::text,
              '{"outcome": "failed", "missed_shards": [2],
                "shard_errors": [{"shard_id": 2, "error": "unreachable"}]}'::jsonb)$$,
    'record_incomplete_write(): outcome failed, the shards missed and why');
SELECT throws_ok($$SELECT harvest.record_incomplete_write('workflow.terminate', 'x', '[{"shard_id": 1}]')$$, 'HR001',
                 NULL, 'record_incomplete_write(): only a pacing override''s operation (HR001)');
SELECT throws_ok($$SELECT harvest.record_incomplete_write('rate_limit.override', 'x', '[]')$$, 'HR001',
                 NULL, 'record_incomplete_write(): no shard missed is HR001');
SELECT throws_ok($$SELECT harvest.record_incomplete_write('rate_limit.override', 'x', '[{"error": "refused"}]')$$,
                 'HR001', NULL, 'record_incomplete_write(): each shard missed names its shard_id (HR001)');

-- prune_audit_log: Harvest never deletes an audit row by itself, and the janitor writes one per
-- batch that deletes (a soak: ~18 a minute at 2.5 starts/s), so the log grows for ever unless
-- an admin prunes it. It deletes the rows older than the age, oldest first, a batch at a time.
DELETE FROM harvest.audit_log;
SET LOCAL harvest.fake_now = '2030-01-01 00:00:00+00';
SELECT harvest._audit('test.prune', 'old' || n, NULL, '{}') FROM generate_series(1, 5) AS n;
SET LOCAL harvest.fake_now = '2030-03-01 00:00:00+00';
SELECT harvest._audit('test.prune', 'new', NULL, '{}');
SET LOCAL harvest.fake_now = '2030-03-02 00:00:00+00';
SELECT is(harvest.count_audit_log('30 days'), '{"older": 5, "cutoff": "2030-01-31T00:00:00+00:00"}'::jsonb,
          'count_audit_log(): what a prune of that age would delete, and its cutoff');
SELECT is((SELECT count(*) FROM harvest.audit_log WHERE operation = 'test.prune'), 6::bigint,
          'count_audit_log(): deletes nothing');
SELECT throws_ok($$SELECT harvest.count_audit_log(NULL)$$, 'HR001', NULL, 'count_audit_log(): no age is HR001');
SELECT throws_ok($$SELECT harvest.count_audit_log('-1 day')$$, 'HR001', NULL,
                 'count_audit_log(): an age not positive is HR001');
SELECT is(harvest.prune_audit_log('30 days', 3) - 'cutoff',
          '{"deleted": 3, "remaining": 2}'::jsonb, 'prune_audit_log(): a batch of the oldest rows, and how many remain');
SELECT results_eq($$SELECT target FROM harvest.audit_log WHERE operation = 'test.prune' ORDER BY id$$,
                  $$VALUES ('old4'::text), ('old5'), ('new')$$, 'prune_audit_log(): the oldest went first');
SELECT is(harvest.prune_audit_log('30 days', 3, 'ops') - 'cutoff',
          '{"deleted": 2, "remaining": 0}'::jsonb, 'prune_audit_log(): the next batch takes the rest');
SELECT results_eq($$SELECT target FROM harvest.audit_log WHERE operation = 'test.prune'$$,
                  $$VALUES ('new'::text)$$, 'prune_audit_log(): a row younger than the age is kept');
SELECT results_eq(
    $$SELECT operator_id, details - 'application_name' FROM harvest.audit_log WHERE operation = 'audit.prune' ORDER BY id$$,
    $$VALUES (NULL::text, '{"deleted": 3, "cutoff": "2030-01-31T00:00:00+00:00", "older_than": "30 days"}'::jsonb),
             ('ops', '{"deleted": 2, "cutoff": "2030-01-31T00:00:00+00:00", "older_than": "30 days"}')$$,
    'prune_audit_log(): each prune that deletes is audited (audit.prune), with the cutoff');
SELECT is(harvest.prune_audit_log('30 days') ->> 'deleted', '0', 'prune_audit_log(): nothing older, nothing deleted');
SELECT throws_ok($$SELECT harvest.prune_audit_log('0 days')$$, 'HR001', 'audit log max age 00:00:00 must be positive',
                 'prune_audit_log(): a zero age is HR001');
SELECT throws_ok($$SELECT harvest.prune_audit_log('30 days', 0)$$, 'HR001', 'batch size 0 is out of range 1..100000',
                 'prune_audit_log(): a batch size out of range is HR001');

SELECT * FROM finish();
ROLLBACK;
