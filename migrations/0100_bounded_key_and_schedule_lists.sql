-- 0100: concurrency keys, schedules, workers and API tokens can be read bounded (re-runnable).
--
-- harvest.list_concurrency_keys answered every key with live work, each read and grouped: a
-- fleet of 100,000 tenants was 100,000 keys in each answer of GET /admin/concurrency and each
-- view of the dashboard's concurrency page. It takes p_after_key and p_limit (a page of keys in
-- key order; NULL, every key as before), and reads a page's activity keys in key order here.
-- harvest.list_schedules answered every schedule (a schedule a tenant: 100,000 rows for each
-- GET /admin/schedules and each view of the schedules page); it takes p_after_name, p_limit
-- and p_paused (a page by name down schedules_name_key; NULL, every one as before).
-- The old functions go here; the new ones are installed with the functions, after the
-- migrations, and a call with the old arguments reads as before.
CREATE INDEX IF NOT EXISTS tasks_activity_concurrency_key
ON harvest.tasks (concurrency_key)
WHERE kind = 'activity' AND concurrency_key IS NOT NULL;

DROP FUNCTION IF EXISTS harvest.list_concurrency_keys(text);
DROP FUNCTION IF EXISTS harvest.list_schedules(text);
-- harvest.list_workers answered every registered worker (a churning fleet leaves a row a pod
-- until retention prunes it); it takes p_limit and answers the total matched on each row.
DROP FUNCTION IF EXISTS harvest.list_workers(text, text, text);
-- harvest.list_api_tokens answered every token (revoked ones are kept for good); it takes a
-- position and p_limit and reads revoked ones in the list's order here.
CREATE INDEX IF NOT EXISTS api_tokens_revoked_name
ON harvest.api_tokens (name, id) WHERE revoked_at IS NOT NULL;

DROP FUNCTION IF EXISTS harvest.list_api_tokens(boolean);
