-- functions/zz_security.sql: harvest._function_role, harvest._secure_functions and the roles they grant.
BEGIN;
SELECT plan(9);

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

SELECT * FROM finish();
ROLLBACK;
