-- functions/security.sql: harvest._function_role, harvest._secure_functions and the roles they grant,
-- harvest._session_has_role.
BEGIN;
SELECT plan(14);

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


-- _session_has_role: the login's roles; a superuser or the schema owner holds every one.
SELECT ok(harvest._session_has_role('harvest_admin'), '_session_has_role(): the superuser running this holds admin');
GRANT EXECUTE ON FUNCTION harvest._session_has_role(text) TO harvest_operator;  -- for this test only
SET LOCAL SESSION AUTHORIZATION harvest_operator;
SELECT ok(harvest._session_has_role('harvest_operator'), '_session_has_role(): a login holds its own role');
SELECT ok(harvest._session_has_role('harvest_reader'), '_session_has_role(): and the roles it is a member of');
SELECT ok(NOT harvest._session_has_role('harvest_admin'), '_session_has_role(): an operator is no admin');
SELECT ok(NOT harvest._session_has_role('no_such_role'), '_session_has_role(): a missing role is held by nobody');
RESET SESSION AUTHORIZATION;

SELECT * FROM finish();
ROLLBACK;
