-- functions/security.sql: harvest._function_role, harvest._secure_functions and the roles they grant,
-- harvest._session_has_role.
BEGIN;
SELECT plan(84);

SELECT has_role('harvest_reader');
SELECT has_role('harvest_operator');
SELECT has_role('harvest_admin');
SELECT has_role('harvest_worker');
SELECT is(harvest._function_role('claim_tasks'), 'harvest_worker', 'claim is for workers');
SELECT is(harvest._function_role('_append_event'), NULL, 'helpers are for no role');
SELECT is(harvest._function_role('brand_new_function'), 'harvest_admin', 'unknown functions default to admin');
SELECT ok(harvest._secure_functions() > 0, 'securing is repeatable');
SELECT is((SELECT count(*) FROM pg_proc p WHERE p.pronamespace = 'harvest'::regnamespace
           AND has_function_privilege('public', p.oid, 'EXECUTE')), 0::bigint, 'nothing executable by PUBLIC');

-- \df+ harvest.* documents the API: every public function carries a comment (the
-- -- Comments: block at the end of its functions/ file) that names the roles
-- _function_role grants it to.
CREATE FUNCTION pg_temp.uncommented() RETURNS text[] LANGUAGE sql AS $$
    SELECT coalesce(array_agg(p.proname::text ORDER BY p.proname), '{}') FROM pg_proc AS p
    WHERE p.pronamespace = 'harvest'::regnamespace AND p.proname NOT LIKE '\_%'
      AND coalesce(btrim(obj_description(p.oid, 'pg_proc')), '') = '';
$$;
CREATE FUNCTION pg_temp.comments_missing_role() RETURNS text[] LANGUAGE sql AS $$
    SELECT coalesce(array_agg(p.proname || ': ' || r.role ORDER BY p.proname, r.role), '{}') FROM pg_proc AS p
    CROSS JOIN LATERAL unnest(string_to_array(harvest._function_role(p.proname), ',')) AS r (role)
    WHERE p.pronamespace = 'harvest'::regnamespace AND p.proname NOT LIKE '\_%'
      AND strpos(coalesce(obj_description(p.oid, 'pg_proc'), ''), r.role) = 0;
$$;
SELECT is(pg_temp.uncommented(), '{}'::text[], 'every public harvest function has a COMMENT');
SELECT is(pg_temp.comments_missing_role(), '{}'::text[], 'each COMMENT names the roles _function_role grants');
CREATE FUNCTION harvest.zz_probe() RETURNS integer LANGUAGE sql AS 'SELECT 1';
SELECT is(pg_temp.uncommented(), '{zz_probe}'::text[], 'a public function without a COMMENT is caught');
COMMENT ON FUNCTION harvest.zz_probe IS 'A probe.';
SELECT is(pg_temp.comments_missing_role(), '{"zz_probe: harvest_admin"}'::text[],
          'a COMMENT that does not name the function''s role is caught');
DROP FUNCTION harvest.zz_probe();

-- Every public function: each harvest role may EXECUTE it exactly when _function_role grants
-- it to that role or to a role it inherits (admin > operator > reader; worker apart).
CREATE FUNCTION pg_temp.grant_mismatches() RETURNS text[] LANGUAGE sql AS $$
    SELECT coalesce(array_agg(p.proname || ': ' || r.rolname ORDER BY p.proname, r.rolname), '{}')
    FROM pg_proc AS p
    CROSS JOIN (SELECT rolname FROM pg_roles WHERE rolname IN
                ('harvest_reader', 'harvest_operator', 'harvest_admin', 'harvest_worker')) AS r
    WHERE p.pronamespace = 'harvest'::regnamespace AND p.proname NOT LIKE '\_%'
      AND has_function_privilege(r.rolname, p.oid, 'EXECUTE') IS DISTINCT FROM EXISTS (
          SELECT 1 FROM unnest(string_to_array(harvest._function_role(p.proname), ',')) AS g (grantee)
          WHERE pg_has_role(r.rolname, g.grantee, 'USAGE'));
$$;
SELECT is(pg_temp.grant_mismatches(), '{}'::text[],
          'each role executes exactly the functions _function_role grants it (or a role it inherits)');
-- The entry points issue 12 added, refused to the roles that must not call them.
SET LOCAL ROLE harvest_operator;
SELECT throws_ok($$SELECT harvest.unregister_workflow('q', 'wf')$$, '42501', NULL,
                 'unregister_workflow(): refused to an operator (admin only)');
SELECT throws_ok($$SELECT harvest.prune_workers()$$, '42501', NULL, 'prune_workers(): refused to an operator');
SELECT throws_ok($$SELECT harvest.set_worker_retention('1 day')$$, '42501', NULL,
                 'set_worker_retention(): refused to an operator');
SELECT throws_ok($$SELECT harvest.register_workflows(ARRAY['q'], ARRAY['wf'])$$, '42501', NULL,
                 'register_workflows(): refused to an operator (workers only)');
SELECT throws_ok($$SELECT harvest.begin_worker_drain('w')$$, '42501', NULL,
                 'begin_worker_drain(): refused to an operator (workers only)');
SELECT throws_ok($$SELECT harvest.set_shard_id(7)$$, '42501', NULL, 'set_shard_id(): refused to an operator');
SELECT throws_ok($$SELECT harvest.terminate_workflows(p_workflow_name => 'wf')$$, '42501', NULL,
                 'terminate_workflows(): refused to an operator (admin only, as terminate_workflow)');
SET LOCAL ROLE harvest_reader;
SELECT throws_ok($$SELECT harvest.cancel_workflows(p_workflow_name => 'wf')$$, '42501', NULL,
                 'cancel_workflows(): refused to a reader');
SELECT throws_ok($$SELECT harvest.signal_workflows('go', p_workflow_name => 'wf')$$, '42501', NULL,
                 'signal_workflows(): refused to a reader');
SELECT throws_ok($$SELECT harvest.pause_workflows(p_workflow_name => 'wf')$$, '42501', NULL,
                 'pause_workflows(): refused to a reader');
SELECT throws_ok($$SELECT harvest.resume_workflows(p_workflow_name => 'wf')$$, '42501', NULL,
                 'resume_workflows(): refused to a reader');
SET LOCAL ROLE harvest_worker;
SELECT throws_ok($$SELECT harvest.pause_workflows(p_workflow_name => 'wf')$$, '42501', NULL,
                 'pause_workflows(): refused to a worker (an operator''s batch)');
SELECT throws_ok($$SELECT harvest.resume_workflows(p_workflow_name => 'wf')$$, '42501', NULL,
                 'resume_workflows(): refused to a worker (an operator''s batch)');
SELECT throws_ok($$SELECT harvest.unregister_workflow('q', 'wf')$$, '42501', NULL,
                 'unregister_workflow(): refused to a worker');
SELECT throws_ok($$SELECT harvest.prune_workers()$$, '42501', NULL, 'prune_workers(): refused to a worker');
SELECT is(harvest.get_shard_id(), 0, 'get_shard_id(): a worker reads the shard number (its boot check)');
SELECT throws_ok($$SELECT harvest.set_shard_id(7)$$, '42501', NULL, 'set_shard_id(): refused to a worker');
SET LOCAL ROLE harvest_reader;
SELECT throws_ok($$SELECT harvest.register_workflows(ARRAY['q'], ARRAY['wf'])$$, '42501', NULL,
                 'register_workflows(): refused to a reader');
-- Stop 51's entry points: whoever holds the sampler's lead decides whether anyone samples
-- (workers and admins only), and pruning the flow keys is the janitor's (admin only).
SELECT throws_ok($$SELECT harvest.claim_sampler_lead()$$, '42501', NULL,
                 'claim_sampler_lead(): refused to a reader');
SET LOCAL ROLE harvest_operator;
SELECT throws_ok($$SELECT harvest.claim_sampler_lead()$$, '42501', NULL,
                 'claim_sampler_lead(): refused to an operator');
SELECT throws_ok($$SELECT harvest.prune_flow_keys()$$, '42501', NULL, 'prune_flow_keys(): refused to an operator');
SET LOCAL ROLE harvest_worker;
SELECT throws_ok($$SELECT harvest.prune_flow_keys()$$, '42501', NULL, 'prune_flow_keys(): refused to a worker');
RESET ROLE;
-- The cross-shard pump's relay functions are the worker's (it runs the pump), no one else's.
SELECT is(harvest._function_role(f), 'harvest_worker', f || ': granted to harvest_worker')
FROM unnest(ARRAY['claim_remote_relays', 'deliver_external_relay', 'complete_relay', 'release_relay']) AS f;
SET LOCAL ROLE harvest_worker;
SELECT lives_ok($$SELECT * FROM harvest.claim_remote_relays(1)$$, 'claim_remote_relays(): a worker may call it');
SET LOCAL ROLE harvest_operator;
SELECT throws_ok($$SELECT harvest.complete_relay(1, 'delivered')$$, '42501', NULL,
                 'complete_relay(): refused to an operator (workers only)');
RESET ROLE;
-- So are the cross-shard children's (functions/cross_shard.sql).
SELECT is(harvest._function_role(f), 'harvest_worker', f || ': granted to harvest_worker')
FROM unnest(ARRAY['claim_cross_shard_children', 'set_cross_shard_child_running', 'complete_cross_shard_child',
                  'release_cross_shard_child', 'start_cross_shard_child', 'get_cross_shard_child',
                  'cancel_cross_shard_child', 'clear_owed_child_end']) AS f;
SELECT is(harvest._function_role('release_owed_child_ends'), 'harvest_admin',
          'release_owed_child_ends: granted to harvest_admin only');
SET LOCAL ROLE harvest_worker;
SELECT lives_ok($$SELECT * FROM harvest.claim_cross_shard_children(1)$$,
                'claim_cross_shard_children(): a worker may call it');
SELECT throws_ok($$SELECT * FROM harvest.get_cross_shard_child(gen_random_uuid())$$, 'HR002', NULL,
                 'get_cross_shard_child(): a worker may call it (and hears there is no such run)');
SET LOCAL ROLE harvest_operator;
SELECT throws_ok($$SELECT harvest.complete_cross_shard_child(gen_random_uuid(), NULL)$$, '42501', NULL,
                 'complete_cross_shard_child(): refused to an operator (workers only)');
SELECT throws_ok($$SELECT * FROM harvest.start_cross_shard_child(gen_random_uuid(), gen_random_uuid(), 1, 'w', 'i',
                                                                 'q', '[]', 'terminate')$$, '42501', NULL,
                 'start_cross_shard_child(): refused to an operator (workers only)');
SET LOCAL ROLE harvest_reader;
SELECT throws_ok($$SELECT harvest.cancel_cross_shard_child(gen_random_uuid(), 'terminate', gen_random_uuid())$$,
                 '42501', NULL, 'cancel_cross_shard_child(): refused to a reader');
SELECT throws_ok($$SELECT harvest.clear_owed_child_end(gen_random_uuid())$$, '42501', NULL,
                 'clear_owed_child_end(): refused to a reader (workers only)');
SELECT throws_ok($$SELECT harvest.release_owed_child_ends(1)$$, '42501', NULL,
                 'release_owed_child_ends(): refused to a reader (admin only)');
SET LOCAL ROLE harvest_operator;
SELECT throws_ok($$SELECT harvest.clear_owed_child_end(gen_random_uuid())$$, '42501', NULL,
                 'clear_owed_child_end(): refused to an operator (workers only)');
SELECT throws_ok($$SELECT harvest.release_owed_child_ends(1)$$, '42501', NULL,
                 'release_owed_child_ends(): refused to an operator (admin only)');
SET LOCAL ROLE harvest_worker;
SELECT throws_ok($$SELECT harvest.release_owed_child_ends(1)$$, '42501', NULL,
                 'release_owed_child_ends(): refused to a worker (admin only)');
RESET ROLE;
-- _session_has_role: the login's roles; a superuser or the schema owner holds every one.
SELECT ok(harvest._session_has_role('harvest_admin'), '_session_has_role(): the superuser running this holds admin');
GRANT EXECUTE ON FUNCTION harvest._session_has_role(text), harvest._session_role() TO harvest_operator;  -- for this test only
SET LOCAL SESSION AUTHORIZATION harvest_operator;
SELECT ok(harvest._session_has_role('harvest_operator'), '_session_has_role(): a login holds its own role');
SELECT ok(harvest._session_has_role('harvest_reader'), '_session_has_role(): and the roles it is a member of');
SELECT ok(NOT harvest._session_has_role('harvest_admin'), '_session_has_role(): an operator is no admin');
SELECT ok(NOT harvest._session_has_role('no_such_role'), '_session_has_role(): a missing role is held by nobody');
RESET SESSION AUTHORIZATION;
-- A membership counts as PostgreSQL lets the caller use it (USAGE), not as a membership alone:
-- a NOINHERIT login holds harvest_admin only once it SET ROLE to it.
CREATE ROLE harvest_test_noinherit LOGIN NOINHERIT;
GRANT harvest_admin TO harvest_test_noinherit;
GRANT USAGE ON SCHEMA harvest TO harvest_test_noinherit;  -- for this test only
GRANT EXECUTE ON FUNCTION harvest._session_has_role(text), harvest._session_role() TO harvest_test_noinherit;
SET LOCAL SESSION AUTHORIZATION harvest_test_noinherit;
SELECT ok(NOT harvest._session_has_role('harvest_admin'),
          '_session_has_role(): a member that does not inherit the role''s rights does not hold it');
SET LOCAL ROLE harvest_admin;
SELECT ok(harvest._session_has_role('harvest_admin'), '... until it SET ROLE to it');
SELECT ok(harvest._session_has_role('harvest_reader'), '... which inherits the roles below it');
RESET ROLE;
RESET SESSION AUTHORIZATION;

-- Who the caller is: its login; the role it acts as is SET ROLE's, else the login.
SELECT is(harvest._session_role(), session_user, '_session_role(): the login when no role is set');
SELECT is(harvest._session_caller(), 'login ' || session_user, '_session_caller(): then named by its login');
GRANT EXECUTE ON FUNCTION harvest._session_role(), harvest._session_caller() TO harvest_admin;  -- this test only
SET LOCAL ROLE harvest_admin;
SELECT is((SELECT harvest._session_role()::text || ' / ' || harvest._session_caller()),
          'harvest_admin / role harvest_admin (set by login ' || session_user || ')',
          '_session_role(), _session_caller(): the role set with SET ROLE, and the login that set it');
RESET ROLE;

-- The web process logs in as a member of every harvest role and lowers each request with
-- SET ROLE <the token's role>: the in-function checks follow the lowered role, not the login.
CREATE ROLE harvest_test_web LOGIN;
GRANT harvest_reader, harvest_operator, harvest_admin TO harvest_test_web;
SELECT pg_temp.start_run('rr1', 'rr_wf', 'rr_q');
SET LOCAL SESSION AUTHORIZATION harvest_test_web;
SET LOCAL ROLE harvest_operator;
SELECT is((SELECT current_user::text || ' ' || session_user::text), 'harvest_operator harvest_test_web',
          'SET ROLE changes current_user, not session_user');
SELECT throws_ok($$SELECT * FROM harvest.start_workflow('rr_wf', '[]', 'rr1', 'rr_q',
                                                         p_conflict_policy => 'terminate_existing')$$,
                 '42501', 'conflict_policy "terminate_existing" can terminate a running execution, which needs '
                          'the harvest_admin role; role harvest_operator (set by login harvest_test_web) does not have it',
                 'an admin-member login under SET ROLE harvest_operator cannot start with a terminating policy, '
                 'and the refusal names the role in use (_session_caller), not the login as lacking it');
SELECT is((SELECT status FROM harvest.executions WHERE id = (SELECT id FROM harvest.executions WHERE workflow_id = 'rr1' AND status = 'RUNNING')), 'RUNNING',
          '... and the live run is untouched');
SELECT lives_ok($$SELECT harvest.signal_workflow((SELECT id FROM harvest.executions WHERE workflow_id = 'rr1' AND status = 'RUNNING'), 'ping', '{}')$$,
                '... while what an operator may do still works under SET ROLE harvest_operator');
SET LOCAL ROLE harvest_admin;
SELECT lives_ok($$SELECT * FROM harvest.start_workflow('rr_wf', '[]', 'rr1', 'rr_q',
                                                        p_conflict_policy => 'terminate_existing')$$,
                'under SET ROLE harvest_admin it can');
RESET ROLE;
SELECT lives_ok($$SELECT * FROM harvest.start_workflow('rr_wf', '[]', 'rr1', 'rr_q',
                                                        p_conflict_policy => 'terminate_existing')$$,
                'without SET ROLE the admin-member login still can');
SELECT throws_ok($$SET LOCAL ROLE harvest_worker$$, '42501', NULL,
                 'SET ROLE to a role the login is not a member of is refused by PostgreSQL');
SELECT is(current_setting('role'), 'none', '... and the session keeps no role set');
RESET SESSION AUTHORIZATION;

-- This stop's entry points, by role: reset by filter (it throws away what runs did) is admin's
-- only; the held-back starts' list a reader's; the worker take-back and the reset rule's helpers
-- no role's (called inside the functions that check the caller).
SELECT is(ARRAY(SELECT r FROM unnest(ARRAY['harvest_reader', 'harvest_operator', 'harvest_worker', 'harvest_admin']) AS r
                WHERE has_function_privilege(r, 'harvest.reset_workflows(text, timestamptz, text, text, text, '
                    'text[], timestamptz, timestamptz, text, text, text, integer, boolean, text, text, uuid[], text, boolean)',
                    'EXECUTE')),
          ARRAY['harvest_admin'], 'reset_workflows: admin only (reader, operator, worker refused)');
SELECT is(ARRAY(SELECT r FROM unnest(ARRAY['harvest_reader', 'harvest_operator', 'harvest_worker', 'harvest_admin']) AS r
                WHERE has_function_privilege(r, 'harvest.list_pending_starts(text, text, integer, timestamptz, bigint, '
                    'bigint, text)', 'EXECUTE')),
          ARRAY['harvest_reader', 'harvest_operator', 'harvest_admin'], 'list_pending_starts: read and above, not a worker');
SELECT is((SELECT count(*) FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
           CROSS JOIN unnest(ARRAY['harvest_reader', 'harvest_operator', 'harvest_worker', 'harvest_admin']) AS r
           WHERE n.nspname = 'harvest'
             AND p.proname IN ('_reset_plan', '_reset_points', '_take_back_worker_tasks', '_check_signal_reapply')
             AND has_function_privilege(r, p.oid, 'EXECUTE')), 0::bigint,
          'the reset rule''s and the worker take-back''s helpers: no role calls them directly');
SELECT throws_ok($$SET LOCAL ROLE harvest_operator; SELECT harvest.reset_workflows(p_dry_run => true)$$, '42501', NULL,
                 'an operator session is refused reset_workflows');
RESET ROLE;

SELECT * FROM finish();
ROLLBACK;
